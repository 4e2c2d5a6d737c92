"""The products a tilemm.nn.Linear runs, one layout of its input at a time, and their autograd:
the layout's product (tilemm.matmul, or torch's own F.linear where tilemm's default is the
library and its sums are the same), and the backward's."""
from __future__ import annotations

import functools

import torch
from torch.nn.functional import linear

from tilemm.plans import calls, checks
from tilemm.torch.linear_flags import linear_with_exact_backward, same_with_flag
from tilemm.torch.ops import conjugate, eager_product


class Products:
    """A module's tilemm.matmul(a, b, kernel=kernel, **params) calls, none recording a gradient,
    in the fewest Python steps: a model calls each layout again and again (a training step
    makes three products a Linear, ~100 Linears a forward), and what torch.nn.Linear costs the
    CPU a call is the bar. For each layout (shapes, strides, dtypes, devices) the first call asks
    the plans' checks once and keeps the plan's repeated-call product (Plan.fast), where it has
    one; later calls go straight to it. Everything else is a plain product by its plan
    (tilemm.plans.calls).

    library: the Linear's layouts whose product is the library's (F.linear), by the input's
    shape, strides and dtype alone, the shortest look-up: the weight is the module's own, and its
    device, dtype or strides change through Module._apply (.to, .cuda, .half, ...) or a new
    parameter, both of which clear it. (An input on another device gets torch's error, as from
    torch.nn.Linear.)"""

    LAYOUTS = 64        # layouts kept a module; past that the record starts again

    def __init__(self, kernel: str | None, params: dict):
        self.kernel, self.params, self.known, self.library = kernel, params, {}, {}

    def __getstate__(self):            # a plan's product is a closure: not pickled, found again
        return {**self.__dict__, "known": {}, "library": {}}

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        key = (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device)
        fast = self.known.get(key, False)
        if fast is False:
            fast = self.remember(key, self.fast_product(a, b))
        c = fast(a, b) if fast is not None else None
        return c if c is not None else calls.matmul(a, b, kernel=self.kernel, **self.params)

    def layout(self, input: torch.Tensor, weight: torch.Tensor) -> Layout:
        """What this module knows of input @ weight.T for input's layout (weight of input's dtype)."""
        key = layout_key(input, weight)
        return self.known.get(key) or self.learn_layout(key, input, weight)

    def learn_layout(self, key: tuple, input: torch.Tensor, weight: torch.Tensor, bias=None) -> Layout:
        """Plan input's rows @ weight.T once, and remember the layout under key; where the plan is
        the library's and torch's flag allows reduced-precision sums now, whether F.linear takes
        them for this layout (same_with_flag: if not, layout.plain_seen keeps the flag's state)."""
        rows = input.reshape(-1, input.shape[-1])
        layout = Layout(self.fast_product(rows, weight.T), input.dtype)
        if layout.linear is not None and layout.get is not None and layout.get()[0]:
            state = layout.get()
            if same_with_flag(input, weight, bias, layout.get, layout.put, gradients=False):
                layout.plain_seen = state
        return self.remember(key, layout)

    def rows_product(self, input: torch.Tensor, weight: torch.Tensor, layout: Layout) -> torch.Tensor:
        """input's rows @ weight.T, (rows, in) @ (in, out)."""
        rows = input.reshape(-1, input.shape[-1])
        y = layout.fast(rows, weight.T) if layout.fast is not None else None
        return y if y is not None else calls.matmul(rows, weight.T, kernel=self.kernel, **self.params)

    def learn_grads(self, layout: Layout, grad, input, weight) -> None:
        """Whether tilemm's plans for this layout's two gradient products (dY @ weight, and dY^T @
        input's rows, with dY contiguous) are both the library's: then layout.grads computes both
        as torch's own Linear backward does (the same cuBLAS calls), with tilemm's sums; and,
        where torch's flag allows reduced-precision sums now, whether its backward takes them for
        this layout (same_with_flag: if not, layout.sums_seen keeps the flag's state; a bias
        changes no product of the backward)."""
        grad_rows = grad.reshape(-1, grad.shape[-1])
        library = (self.fast_product(grad_rows, weight) is not None
                   and self.fast_product(grad_rows.mT, input.reshape(-1, input.shape[-1])) is not None)
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
            self.library.clear()
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
    __slots__ = ("fast", "linear", "exact_linear", "get", "put", "plain_seen", "sums_seen", "grads")

    def __init__(self, fast, dtype: torch.dtype):
        from tilemm.ladder import library        # (the ladder loads numba: on first use)
        self.fast, self.grads, self.plain_seen, self.sums_seen = fast, None, None, None
        name = str(dtype).removeprefix("torch.")
        self.get, self.put = get, put = library.exact_sums_flag(name)
        self.linear = self.exact_linear = None
        if fast is not None:
            self.linear = library.with_exact_sums(name, linear)
            if get is not None:
                self.exact_linear = library.with_exact_sums(name, linear_with_exact_backward(get, put))

    def product(self, input, weight, bias):
        """F.linear with tilemm's sums: as it is where torch's flag is off or in the state under
        which it was seen to sum in float32 all the same; else with the flag off for the call."""
        if self.get is not None:
            state = self.get()
            if state[0] and state != self.plain_seen:
                return self.linear(input, weight, bias)
        return linear(input, weight, bias)

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
            grad.reshape(-1, grad.shape[-1]).mT.matmul(conjugate(input.reshape(-1, input.shape[-1])))
            if need_weight else None)


def library_linear_grads(dtype: torch.dtype):
    from tilemm.ladder import library        # (the ladder loads numba: on first use)
    return library.with_exact_sums(str(dtype).removeprefix("torch."), torch_linear_grads)


def linear_grads(product, grad, input, weight, need_input: bool, need_weight: bool) -> tuple:
    """(d input, d weight) of input @ weight.T, each product a call of ``product(a, b)``: dY @
    conj(weight) and dY^T @ conj(input's rows) (torch's rule: the conjugates for complex operands)."""
    grad_rows = grad.reshape(-1, grad.shape[-1])
    return (product(grad_rows, conjugate(weight)).reshape(input.shape) if need_input else None,
            product(grad_rows.mT, conjugate(input.reshape(-1, input.shape[-1]))) if need_weight else None)


class LinearProduct(torch.autograd.Function):
    """input @ weight.T with autograd, for a Linear's operands of one dtype: tilemm.matmul's general
    rule (tilemm.torch.ops) specialised to this one layout, in fewer Python steps a call (the
    usual case inline: each step here is paid ~100 times a training step). Each product is a
    plain tilemm.matmul with the Linear's kernel and parameters."""

    @staticmethod
    def forward(ctx, input, weight, products, layout):
        ctx.save_for_backward(input, weight)
        ctx.products, ctx.layout = products, layout
        if layout.linear is not None:                   # grad mode is off here
            return layout.linear(input, weight)
        return products.rows_product(input, weight, layout)    # (rows, out): Linear.forward reshapes it

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        need_input, need_weight = ctx.needs_input_grad[:2]
        layout, products = ctx.layout, ctx.products
        if torch.is_grad_enabled():      # create_graph=True: these products record their graph (tilemm.torch.ops)
            product = functools.partial(eager_product, kernel=products.kernel, params=products.params)
            return linear_grads(product, grad, input, weight, need_input, need_weight) + (None, None)
        if grad.is_contiguous():
            if layout.grads is None:
                products.learn_grads(layout, grad, input, weight)
            if layout.grads:             # the library's both: as torch's Linear backward, tilemm's sums
                return layout.grads(grad, input, weight, need_input, need_weight) + (None, None)
        return linear_grads(products, grad, input, weight, need_input, need_weight) + (None, None)
