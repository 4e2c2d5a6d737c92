"""One fused product on torch tensors, forward and backward, by one of two routes:

- "triton": tilemm's fused-epilogue programs (tilemm.engine.epilogue_launch: rung 10's persistent
  TMA schedule where TMA reads the operands, else the pointer program), one launch that writes Y
  (and the pre-activation Z where the backward needs it);
- "library": torch's own operators (addmm / mm, the activation, the adds), what torch does, so
  that under torch.compile Inductor sees aten operators and does for them what it does for torch.

An eager call of the Triton route whose launch was made before (the same operands' layouts and
alignment, epilogue and configuration) replays it (tilemm.engine.epilogue_repeats).

Y = activation(alpha * A @ B + beta * C + bias) + residual. The checks are the caller's
(tilemm.products_api, tilemm.torch.fused_autograd); here every operand is 2-D (bias 1-D) and of
one dtype and device.
"""
from __future__ import annotations

import functools

import torch

from tilemm.choose import by_shape as choice
from tilemm.choose.default import leading_dim, strides_leading_dim
from tilemm.engine import epilogue_repeats
from tilemm.system import compat
from tilemm.ladder import registry
from tilemm.numerics.epilogue_math import activate_torch, activation_backward
from tilemm.numerics.dtypes import torch_dtype_name

LIBRARY, TRITON = "library", "triton"


def route(kernel: str | None, a: torch.Tensor, m: int, n: int, k: int, lds: tuple | None = None) -> str:
    """route_of for a's device and dtype (remembered by shape: a model asks again and again). lds:
    A's and B's leading dimensions (tilemm.choose.default.leading_dims; None: K and N), which the
    default's table reads: a transposed view (a backward's dY.T) is as aligned as its rows."""
    device = a.device.type
    interpreter = device != "cuda" and compat.triton_interpreter()
    if type(m) is int and type(n) is int and type(k) is int:
        return route_of(kernel, device, a.dtype, m, n, k, interpreter, lds)
    # symbolic sizes (torch.compile's dynamic shapes, mark_dynamic) are never read: int() would guard on
    # a size, specializing the graph to it (mark_dynamic: an error). The default's table reads them, so
    # there the default takes the library, whose torch operators keep them symbolic.
    if kernel in (None, "auto") and device == "cuda":
        return LIBRARY
    return route_of(kernel, device, a.dtype, 0, 0, 0, interpreter)


def linear_leading_dims(x: torch.Tensor, weight: torch.Tensor) -> tuple:
    """route's lds of a Linear's product x @ weight.T (without making the view)."""
    along_rows, along_columns = weight.stride()          # (weight.T's: the other way round)
    return leading_dim(x, weight.shape[1]), strides_leading_dim(along_columns, along_rows, weight.shape[0])


@functools.lru_cache(maxsize=4096)
def route_of(kernel: str | None, device: str, dtype: torch.dtype, m: int, n: int, k: int, interpreter: bool,
             lds: tuple | None = None) -> str:
    """Which route a fused product of this shape takes. kernel None: tilemm's default for the
    product (tilemm.choose.by_shape's table on a GPU: the epilogue program where it names a Triton rung,
    the library otherwise; the library on the host). A Triton rung named: the epilogue program
    (on a GPU, or on the host under Triton's interpreter). The library rung or numpy: the library.
    ValueError for any other rung, or a Triton rung with host tensors and no interpreter."""
    if kernel in (None, "auto"):
        if device != "cuda":
            return LIBRARY
        preferred = choice.preferred(torch_dtype_name(dtype), m, n, k, lds=lds)
        return TRITON if preferred and registry.get(preferred).backend == "triton" else LIBRARY
    rung = registry.get(kernel)
    if rung.backend in ("library", "numpy"):
        return LIBRARY
    if rung.backend != "triton":
        raise ValueError(f"kernel={kernel!r} has no fused epilogue: epilogues run in tilemm's Triton program "
                         "(name a Triton rung, e.g. kernel='tensorcore') or in the library (kernel='cublas' or None)")
    if device != "cuda" and not interpreter:
        raise ValueError(f"kernel={kernel!r}: the fused-epilogue program runs on a CUDA GPU (or on the host under "
                         "TRITON_INTERPRET=1); these tensors are on the host")
    return TRITON


def forward(a, b, bias, bias_over_m: bool, c, residual, activation: str, alpha: float, beta: float,
            way: str, config: dict, save_aux: bool, wrap=None):
    """(Y, Z or None): Y as the module says, Z the pre-activation where save_aux."""
    if way == TRITON:
        if wrap is None:      # eager: a key seen before replays its launches (tilemm.engine.epilogue_repeats)
            done = epilogue_repeats.product(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, config,
                                            save_aux)
            if done is not None:
                return done
        from tilemm.engine.epilogue_launch import launch_epilogue    # (Triton loads on first use)
        m, n = a.shape[0], b.shape[1]
        y = a.new_empty((m, n))
        aux = a.new_empty((m, n)) if save_aux else None
        launch_epilogue(a, b, y, aux, bias, bias_over_m, c, residual, activation, alpha, beta, config, wrap)
        return y, aux
    z = library_preactivation(a, b, bias, bias_over_m, c, alpha, beta)
    y = activate_torch(z, activation)
    if residual is not None:
        y = y + residual
    return y, (z if save_aux else None)


def torch_epilogue(z, bias, bias_over_m: bool, c, residual, activation: str, beta: float):
    """Y of the epilogue after a product z (alpha applied) with torch's operators:
    Y = activation(z + beta * c + bias) + residual (bias 1-D, over M's rows where bias_over_m,
    else over N's columns)."""
    if c is not None and beta != 0:
        z = z + c * beta
    if bias is not None:
        z = z + (bias[:, None] if bias_over_m else bias)
    y = activate_torch(z, activation)
    return y if residual is None else y + residual


def library_preactivation(a, b, bias, bias_over_m: bool, c, alpha: float, beta: float):
    """alpha * a @ b + beta * c + bias with torch's operators: one addmm where it takes them all."""
    if c is not None and beta != 0:
        summand = c if bias is None else c * beta + (bias[:, None] if bias_over_m else bias)
        return torch.addmm(summand, a, b, beta=beta if bias is None else 1, alpha=alpha)
    if bias is not None:
        return torch.addmm(bias[:, None] if bias_over_m else bias, a, b, alpha=alpha)
    z = torch.mm(a, b)
    return z if alpha == 1 else z * alpha


def plain_product(x, y, alpha: float, way: str, config: dict, wrap=None):
    """alpha * x @ y by the route's product (the epilogue program with no epilogue but alpha)."""
    return forward(x, y, None, False, None, None, "identity", alpha, 0.0, way, config, False, wrap)[0]


def grads(grad, saved, a, b, bias_shape, bias_over_m: bool, has_c: bool, has_residual: bool, activation: str,
          alpha: float, beta: float, needs: tuple, product):
    """(dA, dB, dBias, dC, dResidual) of Y = activation(alpha * A @ B + beta * C + bias) + residual,
    given dY and what the forward saved (Z, or Y for relu without a residual). needs: which of
    the five are wanted (None for the others, and for absent operands). product(x, y, alpha):
    alpha * x @ y. dB of a transposed view (a Linear's weight.T) is computed transposed, so that
    the weight's own gradient comes out contiguous (torch's mm backward does the same)."""
    dz = activation_backward(grad, saved, activation)
    da = db = dbias = dc = None
    if needs[0]:
        da = product(dz, b.mT, alpha)
    if needs[1]:
        if b.stride(0) == 1 and b.stride(1) != 1:
            db = product(dz.mT, a, alpha).mT
        else:
            db = product(a.mT, dz, alpha)
    if needs[2] and bias_shape is not None:          # a torch sum: Inductor fuses it with dZ's pass
        dbias = dz.sum(1 if bias_over_m else 0).reshape(bias_shape)
    if needs[3] and has_c:
        dc = dz * beta
    dres = grad if needs[4] and has_residual else None
    return da, db, dbias, dc, dres
