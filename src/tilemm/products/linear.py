"""tilemm.linear and tilemm.matmul_epilogue (tilemm.products_api) on NumPy arrays: computed in
float64 on the host and rounded once to the result's dtype. (On torch tensors they are
tilemm.torch.fused_autograd's: autograd, and one ``tilemm::`` operator under torch.compile.)
"""
from __future__ import annotations

import numpy as np

from tilemm.numerics.epilogue_math import activate_numpy
from tilemm.numerics.epilogue_shapes import bias_layout, check_linear_residual, check_linear_shapes, check_matrices

# ---------------------------------------------------------------- NumPy: the host's reference


def host_arrays(name: str, kernel, **arrays) -> dict:
    """The NumPy operands, checked: float arrays (None kept), kernel None or "numpy"."""
    if kernel not in (None, "numpy"):
        raise ValueError(f"{name}: NumPy operands are computed on the host (kernel None or 'numpy'), not by "
                         f"kernel={kernel!r} (torch tensors take a Triton rung or 'cublas')")
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
    if residual is not None:        # (as torch tensors': the result keeps x's leading shape)
        check_linear_residual(residual.shape, x.shape[:-1] + weight.shape[:1])
    dtype = np.result_type(*(v for v in ops.values() if v is not None))
    z = np.matmul(x.astype(np.float64), weight.astype(np.float64).T)
    if bias is not None:
        z = z + bias.astype(np.float64)
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

