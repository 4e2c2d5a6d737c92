"""torch.nn.Linear through tilemm: a drop-in module, and swapping a model's Linears in place.

    layer = tilemm.nn.Linear(1024, 4096, kernel="tensorcore", block_m=128)
    tilemm.nn.swap_linears(model)            # every torch.nn.Linear of model, in place
    tilemm.nn.restore_linears(model)         # and back

``Linear`` is a ``torch.nn.Linear`` (same parameters, state_dict keys, initialization and
``isinstance``) whose forward is ``input @ weight.T + bias`` with the product computed by
``tilemm.matmul``, with autograd and as one op under ``torch.compile``.
"""
from __future__ import annotations

import functools

import torch

from . import api, registry

OPTIONS = ("kernel", "out_dtype", "params", "products")


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose product runs through tilemm.matmul.

    in_features, out_features, bias, device, dtype: as torch.nn.Linear.
    kernel: a name from ``tilemm.kernels()``; None: tilemm's default for each product.
    out_dtype: compute in and return this dtype (``tilemm.matmul``'s out_dtype); None: the
        inputs' dtype, as torch.nn.Linear.
    params: the kernel's parameters, e.g. ``block_m=128`` (checked here, before any product).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 kernel: str | None = None, out_dtype=None, **params):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.configure(kernel=kernel, out_dtype=out_dtype, **params)

    def configure(self, *, kernel: str | None = None, out_dtype=None, **params) -> Linear:
        """Set the kernel, its parameters and out_dtype (unknown parameters refused here)."""
        check_options(kernel, params)
        self.kernel, self.out_dtype, self.params = kernel, out_dtype, dict(params)
        self.products = Products(kernel, self.params)
        return self

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if self.out_dtype is not None or input.dtype != weight.dtype or torch.compiler.is_compiling():
            y = self.general_product(input)
        elif torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad):
            y = LinearProduct.apply(input, weight, self.products)
        else:
            y = self.products.linear(input, weight)
        return y if self.bias is None else y + self.bias

    def general_product(self, input: torch.Tensor) -> torch.Tensor:
        """input @ weight.T through tilemm.matmul's general rules: its autograd (tilemm.torch_ops)
        for an out_dtype or mixed dtypes, and its custom op under torch.compile."""
        rows = input.reshape(-1, self.in_features)     # a stack of rows is one product, as F.linear's
        y = api.matmul(rows, self.weight.T, kernel=self.kernel, out_dtype=self.out_dtype, **self.params)
        return y.reshape(input.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in (("kernel", self.kernel), ("out_dtype", self.out_dtype),
                                                     *self.params.items()) if v is not None)
        return super().extra_repr() + options


class Products:
    """A module's tilemm.matmul(a, b, kernel=kernel, **params) calls, none recording a gradient,
    in the fewest Python steps: a model calls each layout again and again (a training step
    makes three products a Linear, ~100 Linears a forward), and what torch.nn.Linear costs the
    CPU a call is the bar. For each layout (shapes, strides, dtypes, devices) the first call asks
    tilemm.plan once and keeps the plan's repeated-call product (Plan.fast), where it has one;
    later calls go straight to it. Everything else is a plain tilemm.matmul call."""

    LAYOUTS = 64        # layouts kept a module; past that the record starts again

    def __init__(self, kernel: str | None, params: dict):
        self.kernel, self.params, self.known = kernel, params, {}

    def __getstate__(self):            # a plan's product is a closure: not pickled, found again
        return {**self.__dict__, "known": {}}

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        key = (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device)
        known = self.known.get(key)
        fast = (known if known is not None else self.learn(key, a, b))[0]
        c = fast(a, b) if fast is not None else None
        return c if c is not None else api.matmul(a, b, kernel=self.kernel, **self.params)

    def linear(self, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """input @ weight.T, a stack of rows as one product of (rows, in) @ (in, out), as F.linear."""
        key = (input.shape, input.stride(), input.dtype, input.device, weight.shape, weight.stride(), weight.dtype,
               weight.device, "linear")
        known = self.known.get(key)
        fast, folds = known if known is not None else self.learn(key, input.reshape(-1, input.shape[-1]), weight.T)
        if folds:       # the library's product folds the stack into that one GEMM of rows, as F.linear does
            return fast(input, weight.T)
        rows = input.reshape(-1, input.shape[-1])
        y = fast(rows, weight.T) if fast is not None else None
        if y is None:
            y = api.matmul(rows, weight.T, kernel=self.kernel, **self.params)
        return y.reshape(input.shape[:-1] + (weight.shape[0],))

    def learn(self, key: tuple, a: torch.Tensor, b: torch.Tensor) -> tuple:
        """(the plan's repeated-call product or None, whether it takes a stack over one B as one
        GEMM of its rows: the library rung's, torch.matmul's), recorded for this layout."""
        try:
            plan = api.plan(a, b, kernel=self.kernel, **self.params)
        except (TypeError, ValueError):         # tilemm.matmul raises it again, at each call
            return None, False
        if len(self.known) >= self.LAYOUTS:
            self.known.clear()
        found = self.known[key] = (plan.fast, plan.fast is not None and plan.kernel.backend == "library")
        return found


class LinearProduct(torch.autograd.Function):
    """input @ weight.T with autograd, for a Linear's operands of one dtype: tilemm.matmul's general
    rule (tilemm.torch_ops) specialised to this one layout, in fewer Python steps a call. Each
    product is a plain tilemm.matmul with the Linear's kernel and parameters, laid out as cuBLAS
    takes it: d(input) = dY @ weight, and d(weight) = dY^T @ input's rows, which comes out in the
    weight's own (out, in) layout, with no copy."""

    @staticmethod
    def forward(ctx, input, weight, products):
        ctx.save_for_backward(input, weight)
        ctx.products = products
        return products.linear(input, weight)          # grad mode is off here

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        products = ctx.products
        if torch.is_grad_enabled():      # create_graph=True: tilemm.matmul records these products' graph
            product = functools.partial(api.matmul, kernel=products.kernel, **products.params)
        else:
            product = products
        grad_rows = grad.reshape(-1, grad.shape[-1])
        grad_input = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_input = product(grad_rows, weight).reshape(input.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = product(grad_rows.mT, input.reshape(-1, input.shape[-1]))
        return grad_input, grad_weight, None


def swap_linears(model: torch.nn.Module, *, kernel: str | None = None, out_dtype=None, **params) -> list[str]:
    """Make every torch.nn.Linear of ``model`` (itself included) a tilemm.nn.Linear, in place:
    the same module objects, parameters, hooks, devices, dtypes and requires_grad (an optimizer
    built before keeps working), their class changed. Subclasses of torch.nn.Linear are left as
    they are (their forward is their own). Options as tilemm.nn.Linear's. Returns the names of
    the modules swapped ("" for model itself)."""
    check_options(kernel, params)
    swapped = []
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = Linear
            module.configure(kernel=kernel, out_dtype=out_dtype, **params)
            swapped.append(name)
    return swapped


def check_options(kernel: str | None, params: dict) -> None:
    """Refuse a kernel unknown here or parameters it doesn't take (TypeError, ValueError)."""
    if params and kernel in (None, "auto"):
        raise TypeError(f"Linear: kernel parameters ({', '.join(sorted(params))}) need a kernel named")
    if kernel not in (None, "auto"):
        registry.get(kernel).resolve(params)


def restore_linears(model: torch.nn.Module) -> list[str]:
    """Undo swap_linears: every tilemm.nn.Linear of ``model`` becomes a torch.nn.Linear again,
    in place, its options dropped. Returns the names of the modules restored."""
    restored = []
    for name, module in model.named_modules():
        if type(module) is Linear:
            module.__class__ = torch.nn.Linear
            for option in OPTIONS:
                module.__dict__.pop(option, None)
            restored.append(name)
    return restored
