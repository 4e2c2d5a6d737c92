"""tilemm.linear and tilemm.matmul_epilogue on torch tensors: the checks, the route (tilemm.products.fused),
eager autograd (EpilogueFunction), and under torch.compile the operators of tilemm.torch.fused_ops.

Eager calls never pass through the dispatcher: the library route is torch's own functions (its
own graph and cost: F.linear, then the activation), the Triton route one launch (plus an
autograd.Function where a gradient is recorded). Under torch.func's transforms and forward-mode
AD the Triton route is the composite of tilemm.torch.fused_transforms (the program's product
and torch's functions), which is also what a double backward differentiates."""
from __future__ import annotations

from math import prod

import torch
import torch.nn.functional as F

from tilemm.products import fused
from tilemm.choose.default import leading_dims
from tilemm.contract import numpy_rules as contract
from tilemm.numerics import arrays
from tilemm.numerics.epilogue_math import activate_torch, needs_aux
from tilemm.numerics.epilogue_shapes import bias_layout, check_linear_residual, check_linear_shapes, check_matrices
from tilemm.engine.epilogue_launch import DTYPES, config_for
from tilemm.torch import batched_grads, fused_transforms, linear_calls
from tilemm.torch.compiled_transforms import eager_only, outside_the_graph, transformed
from tilemm.torch.nn_routes import direct_apply

is_compiling = torch.compiler.is_compiling
autocast_on, tracing = torch._C._is_any_autocast_enabled, torch._C._is_tracing


def check_tensors(name: str, **tensors) -> None:
    """torch tensors (None allowed), one dtype and one device: TypeError / ValueError otherwise."""
    first = label0 = None
    for label, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {label} is {type(t).__name__}; the operands are torch tensors (or all NumPy "
                            "arrays)")
        if first is None:
            first, label0 = t, label
            if first.dtype.is_complex or not first.dtype.is_floating_point:
                raise TypeError(f"{name}: operands of {first.dtype}; epilogues take float tensors")
        elif t.dtype != first.dtype:
            raise TypeError(f"{name}: {label0} is {first.dtype} and {label} {t.dtype}; the operands of a fused "
                            "product have one dtype")
        elif t.device != first.device:
            raise ValueError(f"{name}: {label0} is on {first.device} and {label} on {t.device}; the operands "
                             "must be on one device")


def check_triton_dtype(name: str, dtype: torch.dtype) -> None:
    if dtype not in DTYPES:
        raise TypeError(f"{name}: the fused-epilogue program takes {', '.join(map(str, DTYPES))}, not {dtype}")


def negative_views(*tensors) -> bool:
    """Whether a tensor among them is a negative view (torch._neg_view, x.conj().imag: its memory holds
    the values before the negation, which the program's launches and replays would read as they are)."""
    try:
        return any(t is not None and t.is_neg() for t in tensors)
    except AttributeError:    # (not a tensor: check_tensors names it)
        return False


def values(*tensors) -> tuple:
    """The tensors, a negative view as a copy holding its values (differentiable: arrays.resolved_view;
    a real tensor has no conjugate bit, and check_tensors refuses a complex one)."""
    return tuple(arrays.resolved_view(t) for t in tensors)


def recording(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear(x, weight, bias, activation: str, residual, kernel, params: dict):
    if not is_compiling() and negative_views(x, weight, bias, residual):     # (a compiled graph: its own rule)
        x, weight, bias, residual = values(x, weight, bias, residual)
    key = None
    if residual is None and not (is_compiling() or autocast_on() or tracing() or fused_transforms.active()):
        key = linear_calls.call_key(x, weight, bias, activation, kernel, params)
        try:
            call = None if key is None else linear_calls.CALLS.get(key)
        except TypeError:             # an unhashable kernel or parameter: the checks name it
            call = key = None
        if call is not None:          # a key seen before: its checks passed, its route kept (linear_calls)
            return call(x, weight, bias)
    # (autocast has no meta device: it raised RuntimeError for meta tensors, which F.linear takes)
    if isinstance(x, torch.Tensor) and x.device.type != "meta" and torch.is_autocast_enabled(x.device.type):
        # as F.linear under autocast: the product's operands in autocast's dtype (floating point
        # but float64, which autocast leaves alone); a residual of another dtype added after,
        # with torch's promotion
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight, bias = (contract.autocast_cast(torch, t, dtype) for t in (x, weight, bias))
        if residual is not None and residual.dtype != x.dtype:
            return linear(x, weight, bias, activation, None, kernel, params) + residual
    check_tensors("linear", x=x, weight=weight, bias=bias, residual=residual)
    check_linear_shapes(x.shape, weight.shape, None if bias is None else bias.shape)
    out_shape = x.shape[:-1] + weight.shape[:1]
    if residual is not None:
        check_linear_residual(residual.shape, out_shape)

    def residual_rows():      # (a copy where the residual is broadcast: not for the library's route)
        return None if residual is None else arrays.as_rows(residual.expand(out_shape))
    if is_compiling() and transformed():      # inside torch.func's transforms: the eager call's rules
        return outside_the_graph(linear, x, weight, bias, activation, residual, kernel, params)
    # (jit.trace of the program's route: the op, one node of the trace, as tilemm.matmul's; the
    # library's route traces as torch's functions)
    if is_compiling() or tracing() and fused.route(kernel, x, prod(x.shape[:-1]), *weight.shape,
                                                   fused.linear_leading_dims(x, weight)) == fused.TRITON:
        rows = arrays.as_rows(x)       # one operator the compiled graph sees into (tilemm.torch.fused_ops)
        from tilemm.torch import fused_ops
        # (a trace keeps the pre-activation whether or not this call records: its later calls may)
        save = ((recording(x, weight, bias, residual) or not is_compiling() and tracing())      # (Dynamo: no tracing())
                and needs_aux(activation, residual is not None))
        y, _ = torch.ops.tilemm.linear(rows, weight, bias, residual_rows(), activation, save, kernel,
                                       fused_ops.encode_config(params))
        return y.reshape(out_shape)
    config = config_for(x.dtype, params)      # (under compile the operator's body checks them)
    way = fused.route(kernel, x, prod(x.shape[:-1]), weight.shape[0], weight.shape[1],
                      fused.linear_leading_dims(x, weight))
    if way == fused.LIBRARY:    # torch's own functions, its own graph
        y = activate_torch(F.linear(x, weight, bias), activation)
        if key is not None:
            linear_calls.learn(key, x, weight, activation, way, config, apply_epilogue)
        return y if residual is None else y + residual
    check_triton_dtype("linear", x.dtype)
    if fused_transforms.active():      # torch.func, forward-mode AD: a product and torch's functions
        return fused_transforms.linear(x, weight, bias, activation, residual, config)
    if key is not None and recording(x, weight, bias):     # the key's LinearCall records it, as at its later calls
        call = linear_calls.LinearCall(x, weight, activation, way, config, apply_epilogue)
        y = call(x, weight, bias)
        linear_calls.keep(key, call)
        return y
    rows = arrays.as_rows(x)
    if recording(x, weight, bias, residual):
        y = EpilogueFunction.apply(rows, weight.mT, bias, None, residual_rows(), (False, activation, 1.0, 0.0, config))
    else:
        y = fused.forward(rows, weight.mT, bias, False, None, residual_rows(), activation, 1.0, 0.0, fused.TRITON,
                          config, False)[0]
    if key is not None:
        linear_calls.learn(key, x, weight, activation, way, config, apply_epilogue)
    return y.reshape(out_shape)


def matmul_epilogue(a, b, bias, activation: str, alpha: float, beta: float, c, residual, kernel, params: dict):
    if not is_compiling() and negative_views(a, b, bias, c, residual):
        a, b, bias, c, residual = values(a, b, bias, c, residual)
    if isinstance(a, torch.Tensor) and a.device.type != "meta" and torch.is_autocast_enabled(a.device.type):
        # as torch.addmm under autocast (the compiled op has no autocast rule): a, b, bias and c in
        # autocast's dtype (floating point but float64); a residual of another dtype added after
        dtype = torch.get_autocast_dtype(a.device.type)
        a, b, bias, c = (contract.autocast_cast(torch, t, dtype) for t in (a, b, bias, c))
        if residual is not None and residual.dtype != a.dtype:
            return matmul_epilogue(a, b, bias, activation, alpha, beta, c, None, kernel, params) + residual
    check_tensors("matmul_epilogue", a=a, b=b, bias=bias, c=c, residual=residual)
    check_matrices(tuple(a.shape), tuple(b.shape), None if c is None else c.shape,
                   None if residual is None else residual.shape)
    m, n = a.shape[0], b.shape[1]
    bias_over_m = bias is not None and bias_layout(tuple(bias.shape), m, n)
    bias_1d = None if bias is None else bias.reshape(-1)
    if is_compiling() and transformed():      # inside torch.func's transforms: the eager call's rules
        return outside_the_graph(matmul_epilogue, a, b, bias, activation, alpha, beta, c, residual, kernel, params)
    if is_compiling() or tracing() and fused.route(kernel, a, m, n, a.shape[1],
                                                   leading_dims(a, b, a.shape[1], n)) == fused.TRITON:
        from tilemm.torch import fused_ops
        save = ((recording(a, b, bias, c, residual) or not is_compiling() and tracing())
                and needs_aux(activation, residual is not None))
        return torch.ops.tilemm.matmul_epilogue(a, b, bias_1d, c, residual, activation, alpha, beta, bias_over_m,
                                                save, kernel, fused_ops.encode_config(params))[0]
    config = config_for(a.dtype, params)
    way = fused.route(kernel, a, m, n, a.shape[1], leading_dims(a, b, a.shape[1], n))
    if way == fused.LIBRARY:    # torch's operators record their own graph
        return fused.forward(a, b, bias_1d, bias_over_m, c, residual, activation, alpha, beta, way, config, False)[0]
    check_triton_dtype("matmul_epilogue", a.dtype)
    if fused_transforms.active():      # torch.func, forward-mode AD: a product and torch's functions
        return fused_transforms.matmul_epilogue(a, b, bias_1d, bias_over_m, c, residual, activation, alpha, beta,
                                                config)
    spec = (bias_over_m, activation, alpha, beta, config)
    if recording(a, b, bias, c, residual):
        return EpilogueFunction.apply(a, b, bias_1d, c, residual, spec)
    return fused.forward(a, b, bias_1d, bias_over_m, c if beta != 0 else None, residual, activation, alpha, beta,
                         fused.TRITON, config, False)[0]


@eager_only
class EpilogueFunction(torch.autograd.Function):
    """The Triton route's product with autograd, eager: the forward saves what the activation's
    backward reads (Z, or Y for relu without a residual); the backward's products run the same
    program. spec = (bias_over_m, activation, alpha, beta, config)."""

    @staticmethod
    def forward(ctx, a, b, bias, c, residual, spec):
        bias_over_m, activation, alpha, beta, config = spec
        save_aux = needs_aux(activation, residual is not None)
        y, aux = fused.forward(a, b, bias, bias_over_m, c if beta != 0 else None, residual, activation, alpha, beta,
                               fused.TRITON, config, save_aux)
        # (bias and c: for a double backward's composite)
        ctx.save_for_backward(a, b, aux if save_aux else (y if activation == "relu" else None), bias, c)
        ctx.spec, ctx.bias_shape = spec, None if bias is None else bias.shape
        ctx.given = (c is not None, residual is not None)
        return y

    @staticmethod
    def backward(ctx, grad):
        a, b, saved, bias, c = ctx.saved_tensors
        bias_over_m, activation, alpha, beta, config = ctx.spec
        if batched_grads.batched(grad):     # autograd's batched dY: torch's products (tilemm.torch.batched_grads)
            return fused.grads(grad, saved, a, b, ctx.bias_shape, bias_over_m, *ctx.given, activation, alpha, beta,
                               ctx.needs_input_grad[:5], batched_grads.product) + (None,)
        if torch.is_grad_enabled():     # create_graph=True: the composite's gradients, differentiable again
            def compose(a, b, bias, c):
                return fused_transforms.matmul_epilogue(a, b, bias, bias_over_m, c, None, activation, alpha, beta,
                                                        config)
            needs = ctx.needs_input_grad
            grads = fused_transforms.double_backward(grad, (a, b, bias, c), needs[:4], compose)
            return grads + (grad if needs[4] and ctx.given[1] else None, None)

        def product(x, y, scale):
            return fused.plain_product(x, y, scale, fused.TRITON, config)
        return fused.grads(grad, saved, a, b, ctx.bias_shape, bias_over_m, *ctx.given, activation, alpha, beta,
                           ctx.needs_input_grad[:5], product) + (None,)


# EpilogueFunction's apply as autograd's C apply (linear_calls' calls: never under torch.func's transforms)
apply_epilogue = direct_apply(EpilogueFunction)
