"""A tilemm.nn.Linear's products where they are tilemm's own programs (kernel="tensorcore" and the
like: not the library's F.linear), one layout of its input at a time, in the fewest Python steps.

A model calls each layout again and again (a training step: forward, d(input) and d(weight) of every
Linear, ~340 products in a 16-layer Llama), and a step of such a model is bound by the CPU: what a
product costs the CPU is its cost. A Route keeps, for one layout, the three products' repeated calls
(each the plan's replay of its first call's launch: tilemm.engine.replay), and records a gradient
through a Function of its own (KernelLinear) whose backward calls the two gradient products
directly, the bias added in that node (one node, as torch's addmm). What it leaves out, against
tilemm.matmul's general autograd (tilemm.torch.ops.MatmulFunction): autograd.Function.apply's Python
(it binds the arguments to forward's signature at each call where setup_context is defined), the
weight's transpose as a node of the graph, the input's rows and the output's view as nodes too (a
replay reads its operands' addresses alone and makes C in the shape asked), an add node for the
bias, the general rule's casts, reshapes and sums of a backward (a broadcast dY, as y.sum()'s, is
copied instead), and the plan cache's key at each product. The products are the same, on the same
operands' layouts: the answers are the same bits.
"""
from __future__ import annotations

import functools

import torch

from tilemm.contract import numpy_rules as contract
from tilemm.numerics.arrays import as_rows
from tilemm.plans import calls
from tilemm.torch.batched_grads import batched
from tilemm.torch.compiled_transforms import eager_only
from tilemm.torch.ops import eager_product, operand_grads, tangent

Tensor, Parameter = torch.Tensor, torch.nn.Parameter
grad_enabled = torch.is_grad_enabled


def transposed_view(x) -> bool:
    """What tilemm.torch.ops' general rule takes for a view of a transposed matrix (its gradient
    is then computed transposed, _product_like): a stride of 1 down the rows and not along them."""
    return x.stride(0) == 1 and x.stride(1) != 1


def views_of(a, b, x, y) -> bool:
    """Whether the planned operands a and b start where x and y do (views of them, not copies)."""
    return a.data_ptr() == x.data_ptr() and b.data_ptr() == y.data_ptr()


def matrix(x):
    """x as a matrix of rows: x itself where it is 2-D."""
    return x if x.dim() == 2 else as_rows(x)


class Route:
    """One layout of a Linear's input (its shape, strides and dtype: the Products' key) with the
    module's weight of one shape, strides, dtype and device: input @ weight.T (+ bias) in the
    fewest steps, and its gradients (KernelLinear). Each product is first made by its plan
    (tilemm.plans.calls.matmul) on the operands as planned (the input's rows, weight.T; dY's rows,
    weight; dY's rows transposed, the input's rows), and then repeated by the plan's repeated
    call: its replay where it is one (calls.replayed) and the planned operands are views of the
    given ones (not the rows' copy of a 3-D input such as x.transpose(0, 1)), which reads the
    operands' addresses alone and is given them as they come (the input, the weight, dY: no
    reshape, no transpose) and allocates C in the shape its caller wants (the output's, d
    input's: no view of it); else calls.repeated on the operands as planned. A replay declines (None) where a call's operands
    don't fit it (their alignment, the current device); then the plan's own path runs.

    A call checks what the key does not hold (the weight's shape, strides, dtype and device, the
    input's device and kind) and gives None where they are not this route's: a weight replaced,
    resized or moved behind the module's back (``weight.data = ...``) is planned again. The
    operands' addresses are read at each launch."""

    __slots__ = ("kernel", "params", "weight_shape", "weight_stride", "dtype", "cuda", "index", "out_shape",
                 "out_dims", "in_shape", "bias_shape", "bias_dims", "usual", "forward_fast", "input_fast",
                 "weight_fast")
    PRODUCTS = ("forward_fast", "input_fast", "weight_fast")

    def __init__(self, input: torch.Tensor, weight: torch.Tensor, kernel: str | None, params: dict):
        self.kernel, self.params = kernel, params
        self.weight_shape, self.weight_stride, self.dtype = weight.shape, weight.stride(), weight.dtype
        self.cuda, self.index = weight.is_cuda, weight.get_device()
        two_d = input.dim() == 2
        self.out_shape = None if two_d else input.shape[:-1] + (weight.shape[0],)
        self.out_dims = input.dim()
        self.in_shape = None if two_d else input.shape
        # a bias of the output's features, added in the route's node (not for a 1-D input: the output is
        # a row, whose bias gradient is dY itself); its gradient dY summed over every dimension but the last
        self.bias_shape = weight.shape[:1] if input.dim() > 1 else None
        self.bias_dims = tuple(range(input.dim() - 1))
        # the gradients' products as the general rule lays them out, for row-major rows and weight; else
        # the general rule itself
        self.usual = not transposed_view(matrix(input)) and transposed_view(weight.T)
        for name in self.PRODUCTS:      # each product's first call learns its repeated call (first)
            setattr(self, name, functools.partial(self.first, name))

    def __call__(self, input: torch.Tensor, weight, bias):
        """input @ weight.T (+ bias), recording its gradient where autograd would; None where this
        route does not serve these operands. A bias of the output's features is added in place to
        the fresh product, inside the route's own node where a gradient is recorded (one node, as
        torch's addmm; its gradient dY summed over the rows, as autograd's sum_to gives it); one of
        another shape or kind (a subclass) is added after, as torch adds it."""
        if (weight.shape != self.weight_shape or weight.stride() != self.weight_stride or weight.dtype != self.dtype
                or type(input) is not Tensor or type(weight) is not Parameter and type(weight) is not Tensor):
            return None
        if self.cuda:
            if not (input.is_cuda and weight.is_cuda and input.get_device() == self.index == weight.get_device()):
                return None
        elif not (input.is_cpu and weight.is_cpu):       # (a meta tensor's device index is the CPU's: -1)
            return None
        after = None
        if bias is not None:
            if bias.dtype != self.dtype:      # (the layer's own path refuses it)
                return None
            if bias.shape != self.bias_shape or type(bias) is not Parameter and type(bias) is not Tensor:
                bias, after = None, bias
        if (grad_enabled() and (input.requires_grad or weight.requires_grad or bias is not None and bias.requires_grad)
                or contract.dual_level(torch)):        # (a tangent's derivative: KernelLinear.jvp)
            y = record(input, weight, bias, self)
        else:
            y = self.forward_fast(input, weight)        # (forward's steps, one call fewer)
            if y is None:
                y = self.plain(*self.planned("forward_fast", input, weight))
            if bias is not None:
                y.add_(bias)         # (y is this call's own: no second allocation)
        if self.out_shape is not None and y.dim() != self.out_dims:     # a product of rows (the plan's path)
            y = y.view(self.out_shape)
        return y if after is None else y + after

    def planned(self, name: str, x, y) -> tuple:
        """A product's operands as its plan takes them, from the ones its repeated call takes:
        forward (input, weight) -> (rows, weight.T); d input (dY, weight) -> (dY's rows, weight);
        d weight (dY, input) -> (dY's rows transposed, rows)."""
        if name == "forward_fast":
            return matrix(x), y.T
        if name == "input_fast":
            return matrix(x), y
        return matrix(x).mT, matrix(y)

    def forward(self, input, weight):
        """input @ weight.T (grad mode off, or not recording): of the output's shape, or of rows."""
        c = self.forward_fast(input, weight)
        return c if c is not None else self.plain(*self.planned("forward_fast", input, weight))

    def gradients(self, grad, input, weight, need_input: bool, need_weight: bool) -> tuple:
        """(d input, d weight) of input @ weight.T given dY = grad: dY @ weight and dY^T @ rows,
        each by its repeated call on a contiguous dY (a broadcast one, as ``y.sum()``'s, copied
        first: the products as recorded); under create_graph, and for a weight or rows not laid
        out as usual, the general rule; d input in the input's shape (autograd's batched dY:
        torch's products, tilemm.torch.batched_grads)."""
        batched_grad = batched(grad)
        if not self.usual or grad_enabled() or batched_grad:
            product = torch.matmul if batched_grad else functools.partial(eager_product, kernel=self.kernel,
                                                                           params=self.params)
            d_rows, d_weight_t = operand_grads(matrix(grad), matrix(input), weight.mT, need_input, need_weight,
                                               product)
            return self.as_input(d_rows, input), None if d_weight_t is None else d_weight_t.mT
        if not grad.is_contiguous():
            grad = grad.contiguous()
        d_input = d_weight = None
        if need_input:
            d_input = self.input_fast(grad, weight)
            if d_input is None:
                d_input = self.plain(*self.planned("input_fast", grad, weight))
            if self.in_shape is not None and d_input.dim() != self.out_dims:     # (rows, from the plan's path)
                d_input = d_input.reshape(self.in_shape)
        if need_weight:
            d_weight = self.weight_fast(grad, input)
            if d_weight is None:
                d_weight = self.plain(*self.planned("weight_fast", grad, input))
        return d_input, d_weight

    def bias_grad(self, grad):
        """d bias: dY summed over its rows (of the output's shape, or rows), as autograd's sum_to."""
        return grad.sum(0) if grad.dim() == 2 else grad.sum(self.bias_dims)

    @staticmethod
    def as_input(d_rows, input):
        """d input in input's shape, from d rows (or already of it)."""
        return d_rows if d_rows is None or d_rows.dim() == input.dim() else d_rows.reshape(input.shape)

    def tangent(self, d_input, d_weight, input, weight):
        """dY = d_rows @ weight.T + rows @ d_weight.T (forward-mode derivative), of rows (rows, out)."""
        product = functools.partial(eager_product, kernel=self.kernel, params=self.params)
        return tangent(None if d_input is None else matrix(d_input), None if d_weight is None else d_weight.mT,
                       matrix(input), weight.mT, product)

    def plain(self, a, b):
        """a @ b by its plan (tilemm.plans.calls)."""
        return calls.matmul(a, b, kernel=self.kernel, **self.params)

    def first(self, name: str, x, y):
        """A product's first call (on the operands its repeated call takes: see planned): by its
        plan, whose repeated call is then this product's: its replay where it is one
        (calls.replayed), given x and y as they come and allocating C in the forward's output
        shape or the input's, else calls.repeated on the operands as planned."""
        a, b = self.planned(name, x, y)
        c = self.plain(a, b)
        shape = self.out_shape if name == "forward_fast" else self.in_shape if name == "input_fast" else None
        # a replay reads x and y from their addresses as a and b were laid out: not where the rows are a
        # copy (a 3-D input whose rows are no view of it, x.transpose(0, 1)); the key's strides fix that
        fast = calls.replayed(a, b, self.kernel, self.params, shape) if views_of(a, b, x, y) else None
        if fast is None:
            product = calls.repeated(a, b, self.kernel, self.params) or self.plain
            fast = functools.partial(self.repeated, name, product)
        setattr(self, name, fast)
        return c

    def repeated(self, name: str, product, x, y):
        """product (calls.repeated's, or the plan's path) on the operands as planned."""
        return product(*self.planned(name, x, y))


@eager_only
class KernelLinear(torch.autograd.Function):
    """input @ weight.T (+ bias) by a Route (of the output's shape, or of rows where the plan's own
    path made it), with its gradients (Route.gradients; d bias dY summed over the rows) and
    forward-mode derivative; a node of its own name in the graph, whose input is the Linear's own
    (its rows are taken inside, where no node records them). forward takes ctx (no
    setup_context): it is applied through autograd's own apply (record), which then binds no
    arguments in Python."""

    @staticmethod
    def forward(ctx, input, weight, bias, route):
        ctx.save_for_backward(input, weight)
        if contract.dual_level(torch):       # (jvp is asked inside a forward-mode level alone, at this call)
            ctx.save_for_forward(input, weight)
        ctx.route = route
        y = route.forward(input, weight)
        if bias is not None:
            y.add_(bias)          # (grad mode is off here: y is this call's own)
        if y.dim() != 2:
            ctx.output_shape = y.shape   # (the tangent's)
        return y

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        d_input, d_weight = ctx.route.gradients(grad, input, weight, needs[0], needs[1])
        return d_input, d_weight, ctx.route.bias_grad(grad) if needs[2] else None, None

    @staticmethod
    def jvp(ctx, d_input, d_weight, d_bias, _):
        input, weight = ctx.saved_tensors
        route = ctx.route
        tangent = route.tangent(d_input, d_weight, input, weight)
        shape = getattr(ctx, "output_shape", None)
        tangent = tangent if shape is None or tangent is None else tangent.view(shape)
        if d_bias is None:
            return tangent
        if tangent is None:       # the bias alone has a tangent: dY is it, along every row
            return d_bias.expand(shape or (input.numel() // input.shape[-1], d_bias.shape[0])).clone()
        return tangent + d_bias


def direct_apply(function):
    """function's apply as autograd's C implementation (torch._C._FunctionBase.apply) bound to it:
    what Function.apply calls once it has checked for torch.func's transforms (a Route is never
    taken under one) and, where setup_context is defined, bound the arguments in Python
    (measured: half a small product's CPU time)."""
    base = getattr(torch._C, "_FunctionBase", None)
    apply = getattr(base, "__dict__", {}).get("apply")
    return apply.__get__(None, function) if hasattr(apply, "__get__") else function.apply


record = direct_apply(KernelLinear)
