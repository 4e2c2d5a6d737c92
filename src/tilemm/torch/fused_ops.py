"""tilemm's fused products as torch operators that torch.compile sees into:
``torch.ops.tilemm.linear`` and ``torch.ops.tilemm.matmul_epilogue``.

Both are ``torch.library.triton_op``s: their Python body is what torch.compile traces (the fake
implementation is derived from it), so the compiled graph holds tilemm's Triton program itself
(through ``torch.library.wrap_triton``), which Inductor schedules and fuses around; where tilemm's
route for a shape is the library, the body is torch's own ``addmm`` / ``mm`` and activation, and
Inductor does for them what it does for torch. Their gradients (``register_autograd``) are the
same formula as the eager path's (tilemm.products.fused.grads), its products calls of the same operator.

Each returns (Y, AUX): AUX the pre-activation where ``save_aux`` (an empty tensor otherwise).
Under Triton's interpreter (host tensors) a traced call takes the library route: the interpreter
runs kernels on real data only.
"""
from typing import Optional      # (no postponed annotations: the operators' schemas are read from them)

import torch
from torch.library import triton_op, wrap_triton
from torch._subclasses.fake_tensor import is_fake

from tilemm.system import compat
from tilemm.products import fused
from tilemm.choose.default import leading_dims
from tilemm.numerics.epilogue_math import needs_aux
from tilemm.engine.epilogue_launch import config_for, size_hint, static_sizes
from tilemm.torch.op_args import specialized


def encode_config(params: dict) -> str:
    """The programs' parameters (ints, and tma's bool) as the operators' string argument:
    "block_m=64;num_warps=4;tma=1" (a None left out: the default)."""
    return ";".join(f"{name}={int(specialized(params[name]))}" for name in sorted(params) if params[name] is not None)


def decode_config(text: str) -> dict:
    pairs = (item.split("=", 1) for item in text.split(";") if item)
    return {name: bool(int(value)) if name == "tma" else int(value) for name, value in pairs}


def traced_body(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, save_aux, kernel, params):
    """The operators' body: the route for this shape, then the product (the Triton program
    through wrap_triton, or torch's operators)."""
    static = static_sizes(a, b)
    way = fused.route(kernel, a, a.shape[0], b.shape[1], a.shape[1],
                      leading_dims(a, b, a.shape[1], b.shape[1]) if static else None)
    if way == fused.TRITON and not static and not sizes_traced(a, b):
        return torch.ops.tilemm.epilogue_at_run(a, b, bias, c, residual, activation, alpha, beta, bias_over_m,
                                                save_aux, params)
    if way == fused.TRITON and compat.triton_interpreter() and (is_fake(a) or a.device.type == "meta"):
        way = fused.LIBRARY          # the interpreter cannot trace a kernel: the same sums by torch
    y, aux = fused.forward(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, way,
                           config_for(a.dtype, decode_config(params)), save_aux, wrap=wrap_triton)
    if aux is None:
        return y, y.new_empty(0)
    return y, aux if aux is not y else aux.clone()


def sizes_traced(a, b) -> bool:
    """Whether symbolic sizes go into the graph with the program: each with the value it had when
    traced (the program and its tiles are chosen for those; the persistent program takes any
    sizes), on a GPU (Triton's interpreter runs kernels on real data only). Inductor then launches
    the program as it does where every size is static, each run's sizes its arguments."""
    return not compat.triton_interpreter() and all(size_hint(size) is not None for size in (*a.shape, b.shape[1]))


@torch.library.custom_op("tilemm::epilogue_at_run", mutates_args=())
def epilogue_at_run(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor],
                    residual: Optional[torch.Tensor], activation: str, alpha: float, beta: float, bias_over_m: bool,
                    save_aux: bool, params: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The operators' body where a size is symbolic (dynamic shapes), the route is tilemm's
    program and sizes_traced declines (under Triton's interpreter; a size with no value seen):
    tracing the tiles' choice would specialize the graph to each size (a guard, refused for
    sizes marked dynamic). This operator is opaque to the compiler, so its sizes stay symbolic;
    the graph launches the program with the sizes of each run, as an eager call does, to the bit
    (a call's Python in each run: about 50 µs of CPU a Linear on an H200's host)."""
    y, aux = fused.forward(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, fused.TRITON,
                           config_for(a.dtype, decode_config(params)), save_aux)
    return y, (aux if aux is not None else y.new_empty(0))


@epilogue_at_run.register_fake
def epilogue_at_run_fake(a, b, bias, c, residual, activation, alpha, beta, bias_over_m, save_aux, params):
    rows, columns = a.shape[0], b.shape[1]
    return a.new_empty((rows, columns)), a.new_empty((rows, columns) if save_aux else (0,))


@triton_op("tilemm::matmul_epilogue", mutates_args=())
def matmul_epilogue_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor],
                       residual: Optional[torch.Tensor], activation: str, alpha: float, beta: float,
                       bias_over_m: bool, save_aux: bool, kernel: Optional[str],
                       params: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(activation(alpha * a @ b + beta * c + bias) + residual, pre-activation or empty)."""
    return traced_body(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, save_aux, kernel, params)


@triton_op("tilemm::linear", mutates_args=())
def linear_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
              activation: str, save_aux: bool, kernel: Optional[str], params: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(activation(x @ weight.T + bias) + residual, pre-activation or empty), x of rows (R, in)."""
    return traced_body(x, weight.mT, bias, False, None, residual, activation, 1.0, 0.0, save_aux, kernel, params)


def saved_for_backward(activation: str, has_residual: bool, save_aux: bool, y, aux):
    """What the activation's backward reads: Z (AUX), or Y for relu without a residual."""
    if needs_aux(activation, has_residual):
        if not save_aux:
            raise RuntimeError(f"tilemm: the backward of activation={activation!r} needs the pre-activation; call "
                               "the operator with save_aux=True when a gradient is wanted")
        return aux
    return y if activation == "relu" else None


def op_product(kernel, params):
    def product(x, y, alpha):
        return torch.ops.tilemm.matmul_epilogue(x, y, None, None, None, "identity", alpha, 0.0, False, False,
                                                kernel, params)[0]
    return product


def setup_matmul_epilogue(ctx, inputs, output):
    a, b, bias, c, residual, activation, alpha, beta, bias_over_m, save_aux, kernel, params = inputs
    ctx.save_for_backward(a, b, saved_for_backward(activation, residual is not None, save_aux, *output))
    ctx.spec = (None if bias is None else bias.shape, bias_over_m, c is not None, residual is not None,
                activation, alpha, beta, kernel, params)


def backward_matmul_epilogue(ctx, grad, grad_aux):
    a, b, saved = ctx.saved_tensors
    bias_shape, bias_over_m, has_c, has_residual, activation, alpha, beta, kernel, params = ctx.spec
    return fused.grads(grad, saved, a, b, bias_shape, bias_over_m, has_c, has_residual, activation, alpha, beta,
                       ctx.needs_input_grad[:5], op_product(kernel, params)) + (None,) * 7


def setup_linear(ctx, inputs, output):
    x, weight, bias, residual, activation, save_aux, kernel, params = inputs
    ctx.save_for_backward(x, weight, saved_for_backward(activation, residual is not None, save_aux, *output))
    ctx.spec = (None if bias is None else bias.shape, residual is not None, activation, kernel, params)


def backward_linear(ctx, grad, grad_aux):
    x, weight, saved = ctx.saved_tensors
    bias_shape, has_residual, activation, kernel, params = ctx.spec
    needs = ctx.needs_input_grad
    dx, dwt, dbias, _, dres = fused.grads(grad, saved, x, weight.mT, bias_shape, False, False, has_residual,
                                          activation, 1.0, 0.0, (needs[0], needs[1], needs[2], False, needs[3]),
                                          op_product(kernel, params))
    return dx, (dwt.mT if dwt is not None else None), dbias, dres, None, None, None, None


matmul_epilogue_op.register_autograd(backward_matmul_epilogue, setup_context=setup_matmul_epilogue)
linear_op.register_autograd(backward_linear, setup_context=setup_linear)
