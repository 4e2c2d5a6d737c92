"""Rung 99, `cublas`: the library a GPU user would call instead, the bar to beat.

Floats go to cuBLAS through CuPy (or torch where CuPy is missing), with TF32 off so float32
is true SGEMM; integers go to CuPy's own exact kernel (torch has no integer matmul on CUDA).
"""
from ..registry import Kernel, Traffic, register
from .simt import launch


def _library():
    try:
        import cupy
        return "cupy", cupy
    except ImportError:
        import torch
        return "torch", torch


def run_cublas(a, b, c):
    name, lib = _library()
    if name == "cupy":
        lib.matmul(lib.asarray(a), lib.asarray(b), out=lib.asarray(c))
    else:
        lib.backends.cuda.matmul.allow_tf32 = False
        lib.matmul(lib.as_tensor(a, device="cuda"), lib.as_tensor(b, device="cuda"),
                   out=lib.as_tensor(c, device="cuda"))


def available():
    reason = launch.available()
    if reason or launch._compat.cuda_simulator():
        return reason or "the simulator has no cuBLAS"
    try:
        _library()
    except ImportError:
        return "needs CuPy or PyTorch with CUDA"
    return None


def limits(problem):
    if problem.dtype.startswith("int") and _library()[0] == "torch":
        return "torch has no integer matmul on CUDA and CuPy is not installed"
    return None


register(Kernel(
    name="cublas", rung=99, device="cuda", backend="library", dtypes=("int32", "int64", "float32", "float64"),
    seed="anchor", summary="cuBLAS via CuPy (TF32 off); CuPy's exact kernel for integers",
    run=run_cublas, available=available, limits=limits,
    traffic=lambda p: Traffic(read=p.m * p.k + p.k * p.n, written=p.m * p.n),
))
