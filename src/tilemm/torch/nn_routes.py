"""A tilemm.nn.Linear's products where they are tilemm's own programs (kernel="tensorcore" and the
like: not the library's F.linear), one layout of its input at a time, in the fewest Python steps.

A model calls each layout again and again (a training step: forward, d(input) and d(weight) of
every Linear, ~340 products in a 16-layer Llama), and a step of such a model is bound by the CPU:
what a product costs the CPU is its cost. A Route keeps, for one layout, the three products'
repeated calls (each the plan's replay of its first call's launch: tilemm.engine.replay), and
records a gradient through a Function of its own (KernelLinear) whose backward calls the two
gradient products directly. What it leaves out, against tilemm.matmul's general autograd
(tilemm.torch.ops.MatmulFunction): autograd.Function.apply's Python (it binds the arguments to
forward's signature at each call where setup_context is defined), the weight's transpose as a
node of the graph, the general rule's casts, reshapes and sums of a backward, and the plan
cache's key at each product. The products are the same, on the same operands' layouts: the
answers are the same bits.
"""
from __future__ import annotations

import functools

import torch

from tilemm.plans import calls
from tilemm.torch.ops import eager_product, operand_grads, tangent

Tensor, Parameter = torch.Tensor, torch.nn.Parameter
grad_enabled = torch.is_grad_enabled


def row_major_view(x) -> bool:
    """What tilemm.torch.ops' general rule takes for a view of a transposed matrix (its gradient
    is then computed transposed, _product_like): a stride of 1 down the rows and not along them."""
    return x.stride(0) == 1 and x.stride(1) != 1


class Route:
    """One layout of a Linear's input (its shape, strides and dtype: the Products' key) with the
    module's weight of one shape, strides, dtype and device: input @ weight.T (+ bias) in the
    fewest steps, and its gradients (KernelLinear). Each product is first made by its plan
    (tilemm.plans.calls.matmul) and then repeated by the plan's repeated call (calls.repeated:
    the replay of its launch), which declines (None) where a call's operands don't fit it (their
    alignment, the current device), and then the plan's own path runs.

    A call checks what the key does not hold (the weight's shape, strides, dtype and device, the
    input's device and kind) and gives None where they are not this route's: a weight replaced,
    resized or moved behind the module's back (``weight.data = ...``) is planned again. The
    operands' addresses are read at each launch."""

    __slots__ = ("kernel", "params", "weight_shape", "weight_stride", "dtype", "cuda", "index", "rows_shape",
                 "out_shape", "usual", "forward_fast", "input_fast", "weight_fast")

    def __init__(self, input: torch.Tensor, weight: torch.Tensor, kernel: str | None, params: dict):
        self.kernel, self.params = kernel, params
        self.weight_shape, self.weight_stride, self.dtype = weight.shape, weight.stride(), weight.dtype
        self.cuda, self.index = weight.is_cuda, weight.get_device()
        rows = input.reshape(-1, input.shape[-1])
        two_d = input.dim() == 2
        self.rows_shape = None if two_d else (-1, input.shape[-1])
        self.out_shape = None if two_d else input.shape[:-1] + (weight.shape[0],)
        # the gradients' products as the general rule lays them out, for row-major rows and weight; else
        # the general rule itself
        self.usual = not row_major_view(rows) and row_major_view(weight.T)
        # each product's repeated call, on the operands untransposed: forward (rows, weight), d input
        # (dY, weight), d weight (dY, rows); the first call of each learns it (first)
        self.forward_fast = functools.partial(self.first, "forward_fast", 1)
        self.input_fast = functools.partial(self.first, "input_fast", None)
        self.weight_fast = functools.partial(self.first, "weight_fast", 0)

    def __call__(self, input: torch.Tensor, weight, bias):
        """input @ weight.T (+ bias), recording its gradient where autograd would; None where this
        route does not serve these operands."""
        if (weight.shape != self.weight_shape or weight.stride() != self.weight_stride or weight.dtype != self.dtype
                or type(input) is not Tensor or type(weight) is not Parameter and type(weight) is not Tensor):
            return None
        if self.cuda:
            if not (input.is_cuda and weight.is_cuda and input.get_device() == self.index == weight.get_device()):
                return None
        elif not (input.is_cpu and weight.is_cpu):       # (a meta tensor's device index is the CPU's: -1)
            return None
        if grad_enabled() and (input.requires_grad or weight.requires_grad):
            y = record(input, weight, self)       # (its rows taken inside: no node of the graph for them)
        else:
            y = self.forward(input if self.rows_shape is None else input.reshape(self.rows_shape), weight)
        if self.out_shape is not None:
            y = y.view(self.out_shape)
        return y if bias is None else y + bias

    def forward(self, rows, weight):
        """rows @ weight.T (grad mode off, or not recording)."""
        c = self.forward_fast(rows, weight)
        return c if c is not None else self.plain(rows, weight.T)

    def rows(self, input):
        """input's rows, (rows, in): input as it is where it is 2-D."""
        return input if self.rows_shape is None else input.reshape(self.rows_shape)

    def gradients(self, grad, input, weight, need_input: bool, need_weight: bool) -> tuple:
        """(d input, d weight) of input's rows @ weight.T given dY = grad (rows, out): dY @ weight
        and dY^T @ rows, each by its repeated call, for a contiguous dY (else, and under
        create_graph, the general rule)."""
        rows = self.rows(input)
        d_rows, d_weight = self.row_gradients(grad, rows, weight, need_input, need_weight)
        return d_rows if d_rows is None or rows is input else d_rows.reshape(input.shape), d_weight

    def row_gradients(self, grad, rows, weight, need_rows: bool, need_weight: bool) -> tuple:
        """(d rows, d weight): Route.gradients' products."""
        if not (self.usual and grad.is_contiguous()) or grad_enabled():
            product = functools.partial(eager_product, kernel=self.kernel, params=self.params)
            d_rows, d_weight_t = operand_grads(grad, rows, weight.mT, need_rows, need_weight, product)
            return d_rows, None if d_weight_t is None else d_weight_t.mT
        d_rows = d_weight = None
        if need_rows:
            d_rows = self.input_fast(grad, weight)
            d_rows = d_rows if d_rows is not None else self.plain(grad, weight)
        if need_weight:
            d_weight = self.weight_fast(grad, rows)
            d_weight = d_weight if d_weight is not None else self.plain(grad.mT, rows)
        return d_rows, d_weight

    def tangent(self, d_input, d_weight, input, weight):
        """dY = d_rows @ weight.T + rows @ d_weight.T (forward-mode derivative), of rows (rows, out)."""
        product = functools.partial(eager_product, kernel=self.kernel, params=self.params)
        return tangent(None if d_input is None else self.rows(d_input), None if d_weight is None else d_weight.mT,
                       self.rows(input), weight.mT, product)

    def plain(self, a, b):
        """a @ b by its plan (tilemm.plans.calls)."""
        return calls.matmul(a, b, kernel=self.kernel, **self.params)

    def first(self, name: str, transposed: int | None, x, y):
        """A product's first call, on x and y with operand `transposed` (0, 1, None) transposed: by
        its plan, whose repeated call is then this product's: its replay on x and y as they are
        where it is one (calls.replayed: it reads their addresses alone, which a transpose keeps,
        and a transpose costs a microsecond or two of a call), else calls.repeated on the operands."""
        a, b = (x.mT if transposed == 0 else x), (y.mT if transposed == 1 else y)
        c = self.plain(a, b)
        fast = calls.replayed(a, b, self.kernel, self.params)
        if fast is None:
            product = calls.repeated(a, b, self.kernel, self.params) or self.plain
            fast = (product if transposed is None else (lambda x, y: product(x.mT, y)) if transposed == 0
                    else (lambda x, y: product(x, y.mT)))
        setattr(self, name, fast)
        return c


class KernelLinear(torch.autograd.Function):
    """input's rows @ weight.T, (rows, out), by a Route, with its gradients (Route.gradients) and
    forward-mode derivative; a node of its own name in the graph, whose input is the Linear's
    own (its rows are taken inside, where no node records them). forward takes ctx (no
    setup_context): it is applied through autograd's own apply (record), which then binds no
    arguments in Python."""

    @staticmethod
    def forward(ctx, input, weight, route):
        ctx.save_for_backward(input, weight)
        ctx.save_for_forward(input, weight)
        ctx.route = route
        return route.forward(route.rows(input), weight)

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        return ctx.route.gradients(grad, input, weight, needs[0], needs[1]) + (None,)

    @staticmethod
    def jvp(ctx, d_input, d_weight, _):
        input, weight = ctx.saved_tensors
        return ctx.route.tangent(d_input, d_weight, input, weight)


def direct_apply(function):
    """function's apply as autograd's C implementation (torch._C._FunctionBase.apply) bound to it:
    what Function.apply calls once it has checked for torch.func's transforms (a Route is never
    taken under one) and, where setup_context is defined, bound the arguments in Python
    (measured: half a small product's CPU time)."""
    base = getattr(torch._C, "_FunctionBase", None)
    apply = getattr(base, "__dict__", {}).get("apply")
    return apply.__get__(None, function) if hasattr(apply, "__get__") else function.apply


record = direct_apply(KernelLinear)
