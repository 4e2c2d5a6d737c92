"""torch.nn.Linear through tilemm: a drop-in module, and swapping a model's Linears in place.

    layer = tilemm.nn.Linear(1024, 4096, kernel="tensorcore", block_m=128)
    tilemm.nn.swap_linears(model)            # every torch.nn.Linear of model, in place
    tilemm.nn.restore_linears(model)         # and back

``Linear`` is a ``torch.nn.Linear`` (same parameters, state_dict keys, initialization and
``isinstance``) whose forward is ``input @ weight.T + bias`` with the product computed by
``tilemm.matmul``, with autograd and as one op under ``torch.compile``.
"""
from __future__ import annotations

import torch

from . import api, registry

OPTIONS = ("kernel", "out_dtype", "params")


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
        return self

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # a stack of rows is one product, (rows, in) @ (in, out), as F.linear computes it
        rows = input.reshape(-1, self.in_features)
        y = api.matmul(rows, self.weight.T, kernel=self.kernel, out_dtype=self.out_dtype, **self.params)
        y = y.reshape(input.shape[:-1] + (self.out_features,))
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in (("kernel", self.kernel), ("out_dtype", self.out_dtype),
                                                     *self.params.items()) if v is not None)
        return super().extra_repr() + options


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
