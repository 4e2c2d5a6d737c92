"""torch.nn.Linear through tilemm: a drop-in module, and swapping a model's Linears in place.

    layer = tilemm.nn.Linear(1024, 4096, kernel="tensorcore", block_m=128)
    tilemm.nn.swap_linears(model)            # every torch.nn.Linear of model, in place
    tilemm.nn.restore_linears(model)         # and back

``Linear`` is a ``torch.nn.Linear`` (same parameters, state_dict keys, initialization and
``isinstance``) whose forward is ``input @ weight.T + bias`` with the product computed by
``tilemm.matmul``, with autograd (complex too), under ``torch.func``'s transforms, and as one op
under ``torch.compile``, ``torch.jit.trace`` and ``torch.jit.script``, and on meta tensors.
"""
from __future__ import annotations


import torch

from tilemm import api
from tilemm.contract import numpy_rules as contract
from tilemm import products_api
from tilemm.torch import fused_transforms, nn_fuse
from tilemm.ladder import registry
from tilemm.numerics.arrays import as_rows
from tilemm.numerics.epilogue_math import activate_torch
from tilemm.torch.ops import dtype_text, encode_params
from tilemm.torch.nn_products import LinearProduct, Products, layout_key

OPTIONS = ("kernel", "out_dtype", "params", "products", "op_options", "activation", "fused_from", "compiled_program")
ABSENT = object()      # a parameter not in a module's own record of them
TENSOR = torch.Tensor

is_compiling, grad_enabled = torch.compiler.is_compiling, torch.is_grad_enabled
autocast = torch._C._is_any_autocast_enabled
tracing, transformed = torch._C._is_tracing, torch._C._are_functorch_transforms_active


def checked_bias(bias: torch.Tensor, weight: torch.Tensor, out_dtype=None) -> torch.Tensor:
    """The bias, where its dtype is the weight's; torch's Linear refuses another (RuntimeError),
    where adding it after the product would promote the result silently. (With an out_dtype, a
    bias in the result's dtype is the layer's own choice.)"""
    if bias.dtype != weight.dtype and out_dtype is None:
        raise RuntimeError(f"Linear: the bias is {bias.dtype} and the weight {weight.dtype}; the layer takes one "
                           "dtype for both, as torch's (F.linear: self and mat2 must have the same dtype)")
    return bias


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose product runs through `tilemm.matmul`.

    Parameters
    ----------
    in_features, out_features : int
        As torch.nn.Linear.
    bias : bool, default True
        As torch.nn.Linear.
    device, dtype : optional
        As torch.nn.Linear.
    kernel : str, optional
        A name from ``tilemm.kernels()``; None: tilemm's default for each product.
    out_dtype : str or torch.dtype, optional
        Compute in and return this dtype (`tilemm.matmul`'s out_dtype); None: the inputs'
        dtype, as torch.nn.Linear.
    activation : {"relu", "gelu", "gelu_tanh", "silu"}, optional
        Applied to ``input @ weight.T + bias`` in the product's epilogue (`tilemm.linear`), its
        backward from what the forward saved.
    **params
        The kernel's parameters, e.g. ``block_m=128`` (checked here, before any product).

    Raises
    ------
    TypeError
        Kernel parameters with no kernel named, or a parameter the kernel does not have.
    ValueError
        An unknown kernel, or a parameter value it refuses.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 kernel: str | None = None, out_dtype=None, activation: str | None = None, **params):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.configure(kernel=kernel, out_dtype=out_dtype, activation=activation, **params)

    def configure(self, *, kernel: str | None = None, out_dtype=None, activation: str | None = None,
                  **params) -> Linear:
        """Set the kernel, its parameters, out_dtype and the activation, as the constructor's.

        Returns
        -------
        Linear
            This module.

        Raises
        ------
        TypeError, ValueError
            As the constructor's, before anything is changed.
        """
        nn_fuse.check_fused(kernel, out_dtype, activation, params) if activation else check_options(kernel, params,
                                                                                                    out_dtype)
        self.kernel, self.out_dtype, self.params, self.activation = kernel, out_dtype, dict(params), activation
        # the same as the op's strings, "" for None (a tuple of str: TorchScript types it itself)
        self.op_options = (kernel or "", encode_params(self.params), dtype_text(out_dtype) or "", activation or "")
        self.products = Products(kernel, self.params)
        self.compiled_program = nn_fuse.compiled_program(kernel, out_dtype, self.params)
        return self

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():    # torch.jit.script compiles this branch alone: the rest is Python's
            return self.scripted_forward(input)
        if type(input) is not TENSOR and not isinstance(input, TENSOR):    # (an AttributeError from its strides)
            raise TypeError(f"linear(): argument 'input' (position 1) must be Tensor, not {type(input).__name__} "
                            "(as torch.nn.Linear refuses it)")
        if self.activation is not None:       # bias and activation in the product's epilogue
            # the layout's route (nn_fused_routes), but not under a transform or inside a forward-mode AD level
            if not (is_compiling() or tracing() or fused_transforms.active()):
                y = self.fused_route_call(input)
                if y is not None:
                    return y
            elif is_compiling() and self.__dict__.get("fused_from", nn_fuse.NOT_FUSED)[-1] is True:
                # a gated MLP's gate: Inductor fuses the activation into the gate's product with up_proj,
                # where the epilogue would cost the product's tiles its instructions and write the
                # pre-activation again for the backward (nn_fuse.fuse_activations)
                return activate_torch(self.program_forward(input), self.activation)
            return self.fused_forward(input)
        if autocast() and torch.is_autocast_enabled(input.device.type):    # (compiled too: the op has no autocast rule)
            return self.autocast_forward(input)
        if not is_compiling():     # the usual call in fewest steps (a model pays each ~100 times a forward)
            products, layout_of = self.products, (input.shape, input.stride(), input.dtype)
            # (the library's layouts: none where tilemm's own programs run)
            layout = products.library.get(layout_of) if products.library else None
            if layout is not None and (not grad_enabled() or layout.grads and layout.exact_now()):
                # what self.weight and self.bias read, without Module.__getattr__'s two Python calls;
                # a weight or bias not kept there (a parametrization's, pruning's) is read as an attribute
                params = self._parameters
                weight, bias = params.get("weight", ABSENT), params.get("bias", ABSENT)
                if weight is ABSENT or bias is ABSENT:
                    weight, bias = self.weight, self.bias
                return layout.product(input, weight, bias)
            route = products.routes.get(layout_of)      # tilemm's own programs' products (nn_routes)
            if route is not None and not tracing() and not transformed():
                params = self._parameters
                weight, bias = params.get("weight", ABSENT), params.get("bias", ABSENT)
                if weight is ABSENT or bias is ABSENT:
                    weight, bias = self.weight, self.bias
                y = route(input, weight, bias)
                if y is not None:
                    return y
        elif (self.__dict__.get("compiled_program") and input.dtype in self.compiled_program
                and not fused_transforms.active()):
            # a Triton rung's 16-bit product in a compiled graph: tilemm::linear, the program itself, which
            # Inductor schedules, and the bias in its epilogue (not the opaque tilemm::matmul op); not under
            # a torch.func transform (vmap: the op has no batching rule, tilemm::matmul has), and mixed
            # dtypes take the usual path, to torch's error
            weight, bias = self.weight, self.bias
            if weight.dtype == input.dtype and (bias is None or bias.dtype == input.dtype):
                return self.program_forward(input)
        weight, bias = self.weight, self.bias
        # tilemm.matmul's general rules where a layout's product can't serve: a jit trace or a torch.func
        # transform running, an input with no memory (meta; a FakeTensor). (A conjugate or negative view
        # is taken: a plan's paths read its values or refuse it.)
        if (self.out_dtype is not None or input.dtype != weight.dtype or is_compiling() or tracing() or transformed()
                or input.is_meta or type(input) is not torch.Tensor and contract.python_dispatched(torch, input)):
            y = self.general_product(input)
            return y if bias is None else y + checked_bias(bias, weight, self.out_dtype)
        products = self.products
        key = layout_key(input, weight)
        layout = products.known.get(key) or products.learn_layout(key, input, weight, bias)
        if layout.linear is None:     # tilemm's own programs: the layout's route, kept (later calls find it first)
            route = products.route(input, weight)
            y = None if route is None else route(input, weight, bias)
            if y is not None:
                return y
        recording = grad_enabled() and (input.requires_grad or weight.requires_grad)
        if layout.linear is not None:
            products.library[input.shape, input.stride(), input.dtype] = layout
            if not recording or layout.grads and layout.exact_now():
                return layout.product(input, weight, bias)     # F.linear, its bias in the product's epilogue
        if recording and layout.grads:     # the library's products throughout: torch's own nodes, its flag off
            y = layout.exact_linear(input, weight, bias)
            if y is not None:
                return y
        if not recording:
            y = products.rows_product(input, weight, layout).reshape(input.shape[:-1] + (self.out_features,))
        else:          # tilemm.matmul's autograd, with this layout's own products (F.linear's takes any input)
            a = input if layout.linear is not None else as_rows(input)
            y = LinearProduct.apply(a, weight.T, (self.kernel, None, None, self.params, layout))
            if y.dim() != input.dim():     # a product of rows (a custom Function must not return a view)
                y = y.reshape(input.shape[:-1] + (self.out_features,))
        return y if bias is None else y + checked_bias(bias, weight, self.out_dtype)

    def autocast_forward(self, input: torch.Tensor) -> torch.Tensor:
        """As torch's Linear under autocast: the input, weight and bias (floating point but float64)
        in autocast's dtype, then this layer's product of them with autocast off (its layouts'
        plans kept as any others')."""
        dtype = torch.get_autocast_dtype(input.device.type)
        x, weight, bias = (contract.autocast_cast(torch, t, dtype) for t in (input, self.weight, self.bias))
        with torch.autocast(input.device.type, enabled=False):
            y = api.matmul(as_rows(x, self.in_features), weight.T, kernel=self.kernel, out_dtype=self.out_dtype,
                           **self.params)
            y = y.reshape(x.shape[:-1] + (self.out_features,))
            return y if bias is None else y + checked_bias(bias, weight, self.out_dtype)

    def general_product(self, input: torch.Tensor) -> torch.Tensor:
        """input @ weight.T through tilemm.matmul's general rules: its autograd (tilemm.torch.ops)
        for an out_dtype, torch's error for mixed dtypes, torch.func's transforms, the custom op
        under torch.compile and torch.jit.trace and for meta tensors, a conjugate view's values."""
        rows = as_rows(input, self.in_features)     # a stack of rows is one product, as F.linear's
        y = api.matmul(rows, self.weight.T, kernel=self.kernel, out_dtype=self.out_dtype, **self.params)
        return y.reshape(input.shape[:-1] + (self.out_features,))

    @torch.jit.unused
    def fused_route_call(self, input: torch.Tensor):
        """activation(input @ weight.T + bias) by the input's layout's FusedRoute (learned at the
        layout's first call), or None where it does not serve the call (then fused_forward)."""
        products = self.products
        params = self._parameters      # (as forward reads them)
        weight, bias = params.get("weight", ABSENT), params.get("bias", ABSENT)
        if weight is ABSENT or bias is ABSENT:
            weight, bias = self.weight, self.bias
        if input.is_neg() or weight.is_neg() or bias is not None and bias.is_neg():
            return None             # (a negative view: its memory holds the values before the negation; tilemm.linear's)
        route = products.routes.get((input.shape, input.stride(), input.dtype), ABSENT)
        if route is None:           # a layout with none (tilemm.linear's library route, a dtype, ...)
            return None
        if route is not ABSENT:
            y = route(input, weight, bias)
            if y is not None:
                return y
        # the layout's first call, or a route that declines these operands (a weight or bias replaced behind
        # the module's back is learned again; autocast, a subclass or mixed devices are not kept)
        route = products.fused_route(input, weight, bias, self.activation)
        return None if route is None else route(input, weight, bias)

    @torch.jit.unused
    def program_forward(self, input: torch.Tensor) -> torch.Tensor:
        """input @ weight.T + bias in one pass (tilemm.linear with no activation): under
        torch.compile the tilemm::linear program."""
        return products_api.linear(input, self.weight, self.bias, None, kernel=self.kernel, **self.params)

    @torch.jit.unused
    def fused_forward(self, input: torch.Tensor) -> torch.Tensor:
        """activation(input @ weight.T + bias) in one pass (tilemm.linear)."""
        return products_api.linear(input, self.weight, self.bias, self.activation, kernel=self.kernel, **self.params)

    def scripted_forward(self, input: torch.Tensor) -> torch.Tensor:
        """forward as TorchScript runs it: input @ weight.T as the op torch.ops.tilemm.matmul with the
        layer's kernel, parameters and out_dtype (a saved module needs ``import tilemm.torch.ops``
        where it is loaded, which registers the op)."""
        kernel, params, out_dtype, activation = self.op_options
        count = 1                     # (TorchScript has no math.prod; reshape(-1, 0) fails on no element)
        for size in input.shape[:-1]:
            count *= size
        rows = input.reshape(count, self.in_features)
        y = torch.ops.tilemm.matmul(rows, self.weight.t(), None if kernel == "" else kernel, params,
                                    None if out_dtype == "" else out_dtype)
        y = y.reshape(list(input.shape[:-1]) + [self.out_features])
        if self.bias is not None:
            y = y + self.bias
        if activation == "relu":
            y = torch.relu(y)
        elif activation == "gelu":
            y = torch.nn.functional.gelu(y)
        elif activation == "gelu_tanh":
            y = torch.nn.functional.gelu(y, approximate="tanh")
        elif activation == "silu":
            y = torch.nn.functional.silu(y)
        return y

    def _apply(self, fn, recurse=True):        # (torch.nn.Module's: .to, .cuda, .half, ... call it)
        self.products.forget()        # the weight's device, dtype or strides may change
        return super()._apply(fn, recurse)

    def register_parameter(self, name: str, param) -> None:
        if "products" in self.__dict__:      # a new weight or bias (set as an attribute, too)
            self.products.forget()
        super().register_parameter(name, param)

    def extra_repr(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in (("kernel", self.kernel), ("out_dtype", self.out_dtype),
                                                     ("activation", self.activation), *self.params.items())
                          if v is not None)
        return super().extra_repr() + options


def swap_linears(model: torch.nn.Module, *, kernel: str | None = None, out_dtype=None, fuse_activations: bool = False,
                 **params) -> list[str]:
    """Make every torch.nn.Linear of ``model`` (itself included) a `tilemm.nn.Linear`, in place.

    The same module objects, parameters, hooks, devices, dtypes and requires_grad (an optimizer
    built before keeps working), their class changed. Subclasses of torch.nn.Linear are left as
    they are (their forward is their own).

    Parameters
    ----------
    model : torch.nn.Module
        The model; its Linears are changed in place.
    kernel, out_dtype, **params
        As `tilemm.nn.Linear`'s.
    fuse_activations : bool, default False
        Also replace a Linear followed by a known activation module (ReLU, GELU, SiLU, and the
        gate of transformers' Llama, Mistral and Qwen2 MLPs) by one layer whose product, bias and
        activation run in one pass (`tilemm.linear`); every swapped Linear then runs through
        `tilemm.linear`, which torch.compile sees as the Triton program itself. A Linear held in
        more than one place of the model, or in a Sequential subclass with a forward of its own,
        keeps its activation module (the fused layer would change its other calls).

    Returns
    -------
    list of str
        The names of the modules swapped (``""`` for model itself).

    Raises
    ------
    TypeError, ValueError
        As `tilemm.nn.Linear`'s, before any module is changed.
    """
    if not isinstance(model, torch.nn.Module):     # (an AttributeError: no named_modules)
        raise TypeError(f"swap_linears: model must be a torch.nn.Module, not {type(model).__name__}")
    if not isinstance(fuse_activations, bool):
        raise TypeError(f"swap_linears: fuse_activations must be True or False, not {fuse_activations!r}")
    check_options(kernel, params, out_dtype)
    swapped = []
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = Linear
            module.configure(kernel=kernel, out_dtype=out_dtype, **params)
            swapped.append(name)
    if fuse_activations:
        nn_fuse.fuse_activations(model, Linear, kernel, out_dtype, params)
    return swapped


def check_options(kernel: str | None, params: dict, out_dtype=None) -> None:
    """Refuse a kernel unknown here, parameters it doesn't take, or an out_dtype that is no dtype
    tilemm computes (TypeError, ValueError): when the layer is made, not at its first forward."""
    dtype_text(out_dtype)                # (TypeError for one that is no dtype of a torch result)
    if params and kernel in (None, "auto"):
        raise TypeError(f"Linear: kernel parameters ({', '.join(sorted(params))}) need a kernel named")
    if kernel not in (None, "auto"):
        registry.get(kernel).resolve(params)


def restore_linears(model: torch.nn.Module) -> list[str]:
    """Undo `swap_linears`: every `tilemm.nn.Linear` of ``model`` becomes a torch.nn.Linear again.

    In place, its options dropped.

    Parameters
    ----------
    model : torch.nn.Module
        The model.

    Returns
    -------
    list of str
        The names of the modules restored (``""`` for model itself).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"restore_linears: model must be a torch.nn.Module, not {type(model).__name__}")
    restored = []
    for name, module in model.named_modules():
        if type(module) is Linear:
            nn_fuse.unfuse(module)           # its activation module back in place
            module.__class__ = torch.nn.Linear
            for option in OPTIONS:
                module.__dict__.pop(option, None)
            restored.append(name)
    return restored
