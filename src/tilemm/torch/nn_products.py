"""The products a tilemm.nn.Linear runs, one layout of its input at a time: the layout's product
(its plan's, or torch's own F.linear where tilemm's default is the library and its sums are the
same), and the backward's, which tilemm.matmul's autograd (tilemm.torch.ops.MatmulFunction, as
LinearProduct) asks the layout for."""
from __future__ import annotations

import torch
from torch.nn.functional import linear

from tilemm.contract.torch_rules import TorchShapeError
from tilemm.numerics.arrays import as_rows
from tilemm.plans import calls, checks
from tilemm.torch.linear_flags import linear_with_exact_backward, same_with_flag
from tilemm.torch import nn_fused_routes
from tilemm.torch.nn_routes import Route
from tilemm.torch.ops import MatmulFunction, conjugate
from tilemm.numerics.dtypes import torch_dtype_name


class Products:
    """A module's products input @ weight.T, with its kernel and parameters, in the fewest Python
    steps: a model calls each layout again and again (a training step makes three products a
    Linear, ~100 Linears a forward), and what torch.nn.Linear costs the CPU a call is the bar.
    For each layout (shapes, strides, dtypes, devices) the first call asks the plans' checks once
    and keeps the plan's repeated-call product (Plan.fast), where it has one; later calls go
    straight to it. Everything else is a plain product by its plan (tilemm.plans.calls), and a
    product that records a gradient goes through tilemm.matmul's autograd
    (tilemm.torch.ops.MatmulFunction, as LinearProduct) with the layout's own products.

    library: the Linear's layouts whose product is the library's (F.linear), by the input's
    shape, strides and dtype alone, the shortest look-up: the weight is the module's own, and its
    device, dtype or strides change through Module._apply (.to, .cuda, .half, ...) or a new
    parameter, both of which clear it. (An input on another device gets torch's error, as from
    torch.nn.Linear.)"""

    LAYOUTS = 64        # layouts kept a module; past that the record starts again

    def __init__(self, kernel: str | None, params: dict):
        self.kernel, self.params, self.known, self.library, self.routes = kernel, params, {}, {}, {}

    def __getstate__(self):            # a plan's product is a closure: not pickled, found again
        return {**self.__dict__, "known": {}, "library": {}, "routes": {}}

    def __setstate__(self, state):
        self.__dict__.update({"routes": {}, **state})

    def forget(self) -> None:
        """Drop the shortest look-ups (library, routes): the weight's device, dtype or strides may change."""
        self.library.clear()
        self.routes.clear()

    def route(self, input: torch.Tensor, weight: torch.Tensor):
        """The Route of input's layout (tilemm.torch.nn_routes: tilemm's own programs' products
        in the fewest steps), made and kept for the next calls; None where the layout has none (a
        complex dtype, whose products read conjugates; an empty product; an input of no rows; a
        tensor subclass, which a route does not serve)."""
        if (input.dim() == 0 or input.is_complex() or not (input.numel() and weight.numel())
                or type(input) is not torch.Tensor or type(weight) not in (torch.Tensor, torch.nn.Parameter)):
            return None
        return self.keep(input, Route(input, weight, self.kernel, self.params))

    def fused_route(self, input: torch.Tensor, weight: torch.Tensor, bias, activation: str):
        """The FusedRoute of input's layout for a fused Linear (tilemm.torch.nn_fused_routes),
        made and kept for the next calls; None where the layout has none (kept too: tilemm.linear's
        path), or where these operands are not served now (not kept)."""
        route, keep = nn_fused_routes.learn(input, weight, bias, activation, self.kernel, self.params)
        return self.keep(input, route) if keep else route

    def keep(self, input: torch.Tensor, route):
        """Keep route (or None: the layout has none) for input's layout, at most LAYOUTS of them."""
        if len(self.routes) >= self.LAYOUTS:
            self.routes.clear()
        self.routes[input.shape, input.stride(), input.dtype] = route
        return route

    def layout(self, input: torch.Tensor, weight: torch.Tensor) -> Layout:
        """What this module knows of input @ weight.T for input's layout (weight of input's dtype)."""
        key = layout_key(input, weight)
        return self.known.get(key) or self.learn_layout(key, input, weight)

    def learn_layout(self, key: tuple, input: torch.Tensor, weight: torch.Tensor, bias=None) -> Layout:
        """Plan input's rows @ weight.T once, and remember the layout under key; where the plan is
        the library's and torch's flag allows reduced-precision sums now, whether F.linear takes
        them for this layout (same_with_flag: if not, layout.plain_seen keeps the flag's state)."""
        if input.dim() == 0:      # (an IndexError from its last dimension below)
            raise TorchShapeError(f"both arguments to linear need to be at least 1D, but they are 0D and "
                                  f"{weight.dim()}D")
        rows = as_rows(input)
        layout = Layout(self.fast_product(rows, weight.T), input.dtype, self)
        if layout.linear is not None and layout.get is not None and layout.get()[0]:
            state = layout.get()
            if same_with_flag(input, weight, bias, layout.get, layout.put, gradients=False):
                layout.plain_seen = state
        return self.remember(key, layout)

    def rows_product(self, input: torch.Tensor, weight: torch.Tensor, layout: Layout) -> torch.Tensor:
        """input's rows @ weight.T, (rows, in) @ (in, out)."""
        rows = as_rows(input)
        y = layout.fast(rows, weight.T) if layout.fast is not None else None
        return y if y is not None else calls.matmul(rows, weight.T, kernel=self.kernel, **self.params)

    def learn_grads(self, layout: Layout, grad, input, weight) -> None:
        """Whether tilemm's plans for this layout's two gradient products (dY @ weight, and dY^T @
        input's rows, with dY contiguous) are both the library's: then layout.grads computes both
        as torch's own Linear backward does (the same cuBLAS calls), with tilemm's sums; and,
        where torch's flag allows reduced-precision sums now, whether its backward takes them for
        this layout (same_with_flag: if not, layout.sums_seen keeps the flag's state; a bias
        changes no product of the backward)."""
        grad_rows = as_rows(grad)
        library = (self.fast_product(grad_rows, weight) is not None
                   and self.fast_product(grad_rows.mT, as_rows(input)) is not None)
        layout.grads = library and layout.linear is not None and library_linear_grads(input.dtype)
        if layout.grads and layout.get is not None and layout.get()[0]:
            state = layout.get()
            if same_with_flag(input, weight, None, layout.get, layout.put, gradients=True):
                layout.sums_seen = state

    def fast_product(self, a: torch.Tensor, b: torch.Tensor):
        """The repeated-call product of tilemm's plan for a @ b (the library rung's alone: it
        multiplies a stack over one B as one GEMM of its rows, as torch.matmul does), or None."""
        try:
            with torch.no_grad():           # (a plan refuses operands that would record a gradient)
                return checks.check(a, b, kernel=self.kernel, **self.params).fast
        except (TypeError, ValueError):         # tilemm.matmul raises it again, at each call
            return None

    def remember(self, key: tuple, found):
        if len(self.known) >= self.LAYOUTS:
            self.known.clear()
            self.forget()
        self.known[key] = found
        return found


def layout_key(input: torch.Tensor, weight: torch.Tensor) -> tuple:
    """What decides a Linear's layout: both operands' shapes, strides and devices (the dtypes are
    one, checked before)."""
    return input.shape, input.stride(), input.device, weight.shape, weight.stride(), weight.device


class Layout:
    """One layout of a Linear's input: the plan's repeated-call product of its rows (or None);
    where that is the library's, F.linear with tilemm's sums (linear), the same recording a
    backward that keeps those sums (exact_linear); torch's reduced-precision flag for the dtype
    (get, put: None where none is read); the flag's states under which F.linear (plain_seen) and
    torch's own backward of it (sums_seen) were seen to sum in float32 all the same; and the
    gradients' products once a backward has asked (False: a tilemm.matmul call each)."""
    __slots__ = ("fast", "linear", "exact_linear", "get", "put", "plain_seen", "sums_seen", "grads", "products")

    def __init__(self, fast, dtype: torch.dtype, products: Products):
        from tilemm.engine import torch_flags      # (the library rung's float32-sum flags)
        self.fast, self.grads, self.plain_seen, self.sums_seen = fast, None, None, None
        self.products = products
        name = torch_dtype_name(dtype)
        self.get, self.put = get, put = torch_flags.exact_sums_flag(name)
        self.linear = self.exact_linear = None
        if fast is not None:
            self.linear = torch_flags.with_exact_sums(name, linear)
            if get is not None:
                self.exact_linear = torch_flags.with_exact_sums(name, linear_with_exact_backward(get, put))

    def product(self, input, weight, bias):
        """F.linear with tilemm's sums: as it is where torch's flag is off or in the state under
        which it was seen to sum in float32 all the same; else with the flag off for the call."""
        if self.get is not None:
            state = self.get()
            if state[0] and state != self.plain_seen:
                return self.linear(input, weight, bias)
        return linear(input, weight, bias)

    def forward(self, input, weight_t):
        """input @ weight_t, for MatmulFunction (grad mode off): F.linear with tilemm's sums where
        the plan is the library's (any input), else the plan's product (input: rows)."""
        if self.linear is not None:
            return self.linear(input, weight_t.mT)
        return self.products.rows_product(input, weight_t.mT, self)

    def gradients(self, grad, input, weight_t, need_input: bool, need_weight_t: bool):
        """(d input, d weight_t) as torch's own Linear backward multiplies them (tilemm's sums),
        where tilemm's plans for both gradient products are the library's; else None
        (MatmulFunction's general rule). The first backward of a contiguous dY learns which
        (Products.learn_grads)."""
        if not grad.is_contiguous():
            return None
        weight = weight_t.mT
        if self.grads is None:
            self.products.learn_grads(self, grad, input, weight)
        if not self.grads:
            return None
        d_input, d_weight = self.grads(grad, input, weight, need_input, need_weight_t)
        return d_input, None if d_weight is None else d_weight.mT

    def exact_now(self) -> bool:
        """Whether torch's own backward of F.linear sums this layout's gradients in float32 under
        torch's flags now: the flag off, or in the state under which that was seen."""
        if self.get is None:
            return True
        state = self.get()
        return not state[0] or state == self.sums_seen


def torch_linear_grads(grad, input, weight, need_input: bool, need_weight: bool) -> tuple:
    """(d input, d weight) of F.linear(input, weight), as torch's own Linear backward multiplies
    them: dY @ conj(weight) (a stack of rows as one GEMM), and dY^T @ conj(input's rows)."""
    return (torch.matmul(grad, conjugate(weight)) if need_input else None,
            as_rows(grad).mT.matmul(conjugate(as_rows(input)))
            if need_weight else None)


def library_linear_grads(dtype: torch.dtype):
    from tilemm.engine import torch_flags      # (the library rung's float32-sum flags)
    return torch_flags.with_exact_sums(torch_dtype_name(dtype), torch_linear_grads)


class LinearProduct(MatmulFunction):
    """tilemm.matmul's autograd (MatmulFunction: the same forward, backward, double backward and
    derivatives) for a Linear's rows @ weight.T, options' last item its Layout; a node of its own
    name in the graph."""
