"""tilemm.linear and tilemm.matmul_epilogue: a product with what follows it fused into the same pass.

    y = tilemm.linear(x, weight, bias, activation="gelu")          # gelu(x @ weight.T + bias)
    y = tilemm.linear(x, weight, bias, "relu", residual=h)         # relu(...) + h
    d = tilemm.matmul_epilogue(a, b, c=c, alpha=2.0, beta=0.5)     # 0.5 * c + 2 * a @ b

On torch tensors (autograd; one ``tilemm::`` operator under torch.compile, tilemm.torch.fused_ops) and on
NumPy arrays (computed in float64 on the host and rounded once to the result's dtype). The route
for each product (tilemm.products.fused.route): tilemm's fused-epilogue Triton program, or torch's own
operators where tilemm's default for the shape is the library.
"""
from __future__ import annotations

import numpy as np

from tilemm.numerics.epilogue_math import activate_numpy, check_activation
from tilemm.numerics.epilogue_shapes import bias_layout, check_linear_shapes, check_matrices

__all__ = ["linear", "matmul_epilogue"]


def linear(x, weight, bias=None, activation=None, *, residual=None, kernel: str | None = None, **params):
    """``activation(x @ weight.T + bias) + residual``, in one pass where the route is tilemm's program.

    x: (..., in_features), any leading dimensions; weight: (out_features, in_features); bias:
        (out_features,) or None; residual: broadcastable to the result (..., out_features), or None.
        torch tensors of one dtype and device, or NumPy arrays.
    activation: None, "relu", "gelu" (erf, torch's default), "gelu_tanh" (torch's approximate="tanh")
        or "silu".
    kernel: None: tilemm's default for the product's shape (the library's operators where that is
        the library); a Triton rung (e.g. "tensorcore"): tilemm's fused-epilogue program; "cublas":
        torch's operators. params: the program's tiles (block_m, block_n, block_k, group_m,
        num_warps, num_stages).

    The backward (torch) reads what the forward saved: the pre-activation for gelu and silu (and
    relu with a residual), the output for relu; dX = dZ @ W and dW = dZ^T @ X by the same route,
    dBias = dZ summed over rows. Errors (TypeError, ValueError) are raised before any work.
    """
    activation = check_activation(activation)
    if isinstance(x, np.ndarray) or isinstance(weight, np.ndarray):
        return linear_numpy(x, weight, bias, activation, residual, kernel, params)
    return torch_side().linear(x, weight, bias, activation, residual, kernel, params)


def matmul_epilogue(a, b, *, bias=None, activation=None, alpha: float = 1.0, beta: float | None = None, c=None,
                    residual=None, kernel: str | None = None, **params):
    """``activation(alpha * a @ b + beta * c + bias) + residual``: cuBLASLt's and nvmath-python's
    epilogues on a 2-D product (M, K) @ (K, N).

    bias: a row over N (shape (N,) or (1, N)) or a column over M (shape (M, 1)); c: (M, N), added
    as beta * c (beta None: 1 where c is given); residual: (M, N), added after the activation;
    activation, kernel, params: as tilemm.linear's. torch tensors (autograd, torch.compile) or
    NumPy arrays.
    """
    activation = check_activation(activation)
    alpha = float(alpha)
    beta = (1.0 if c is not None else 0.0) if beta is None else float(beta)
    if beta != 0 and c is None:
        raise ValueError(f"matmul_epilogue: beta={beta} adds beta * c, but no c is given")
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return epilogue_numpy(a, b, bias, activation, alpha, beta, c, residual, kernel, params)
    return torch_side().matmul_epilogue(a, b, bias, activation, alpha, beta, c, residual, kernel, params)


def torch_side():
    """tilemm.torch.fused_autograd, imported on the first call with torch tensors (torch loads then: NumPy
    callers never import it)."""
    global fused_torch
    if fused_torch is None:
        from tilemm.torch import fused_autograd as module
        fused_torch = module
    return fused_torch


fused_torch = None


# ---------------------------------------------------------------- NumPy: the host's reference


def host_arrays(name: str, kernel, **arrays) -> dict:
    """The NumPy operands, checked: float arrays (None kept), kernel None or "numpy"."""
    if kernel not in (None, "numpy"):
        raise ValueError(f"{name}: NumPy operands are computed on the host (kernel None or 'numpy'); "
                         f"kernel={kernel!r} multiplies torch tensors")
    out = {}
    for label, value in arrays.items():
        if value is None:
            out[label] = None
            continue
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{name}: {label} is {type(value).__name__}; with NumPy operands every operand is a "
                            "NumPy array")
        if value.dtype.kind != "f":
            raise TypeError(f"{name}: {label} is {value.dtype}; epilogues take float arrays")
        out[label] = value
    return out


def finish_numpy(z: np.ndarray, activation: str, residual, dtype) -> np.ndarray:
    """The epilogue's last steps in float64, rounded once to dtype."""
    y = activate_numpy(z, activation)
    if residual is not None:
        y = y + residual.astype(np.float64)
    return y.astype(dtype)


def linear_numpy(x, weight, bias, activation, residual, kernel, params):
    if params:
        raise TypeError(f"linear: tile parameters ({', '.join(sorted(params))}) are the Triton program's; NumPy "
                        "operands are computed on the host")
    ops = host_arrays("linear", kernel, x=x, weight=weight, bias=bias, residual=residual)
    check_linear_shapes(x.shape, weight.shape, None if bias is None else bias.shape)
    dtype = np.result_type(*(v for v in ops.values() if v is not None))
    z = np.matmul(x.astype(np.float64), weight.astype(np.float64).T)
    if bias is not None:
        z = z + bias.astype(np.float64)
    if residual is not None:
        np.broadcast_shapes(residual.shape, z.shape)       # (ValueError naming both where it can't)
    return finish_numpy(z, activation, residual, dtype)


def epilogue_numpy(a, b, bias, activation, alpha, beta, c, residual, kernel, params):
    if params:
        raise TypeError(f"matmul_epilogue: tile parameters ({', '.join(sorted(params))}) are the Triton "
                        "program's; NumPy operands are computed on the host")
    ops = host_arrays("matmul_epilogue", kernel, a=a, b=b, bias=bias, c=c, residual=residual)
    check_matrices(a.shape, b.shape, None if c is None else c.shape, None if residual is None else residual.shape)
    m, n = a.shape[0], b.shape[1]
    dtype = np.result_type(*(v for v in ops.values() if v is not None))
    z = alpha * np.matmul(a.astype(np.float64), b.astype(np.float64))
    if c is not None and beta != 0:
        z = z + beta * c.astype(np.float64)
    if bias is not None:
        column = bias_layout(tuple(bias.shape), m, n)
        z = z + (bias.astype(np.float64).reshape(m, 1) if column else bias.astype(np.float64).reshape(1, n))
    return finish_numpy(z, activation, residual, dtype)

