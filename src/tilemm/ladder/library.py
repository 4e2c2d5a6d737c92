"""The anchor `cublas` (listed last): the library a GPU user would call instead, the bar to beat.

float32 and float64 go to cuBLAS through CuPy (or torch where CuPy is missing), with TF32 off so
float32 is true SGEMM, and so do complex64 and complex128 (CGEMM and ZGEMM, TF32 off for complex64
as well); float16 and bfloat16 to cuBLAS through torch (CuPy has no bfloat16), with
float32 sums throughout (no reduced-precision reductions, which torch allows by default for
16-bit types); int8 matrices into int32 (out_dtype="int32") go to cuBLASLt's int8 GEMM through
torch._int_mm where it takes them (tilemm.ladder.int_mm); other integers to CuPy's own exact kernel
(torch has no other integer matmul on CUDA), and bool results, counted there in int32 and compared
with zero.
Operands arrive as torch tensors where torch is installed (tilemm.engine.backends.library).
"""
import contextlib
import math

from tilemm.numerics import arrays
from tilemm.system import compat
from tilemm.engine import streams
from tilemm.numerics.dtypes import dtype_name, is_integer
from tilemm.ladder.record import Kernel, Traffic, register
from tilemm.ladder import int_mm
from tilemm.ladder.simt import launch

SIXTEEN_BITS = ("float16", "bfloat16")


def _library():
    try:
        import cupy
        return "cupy", cupy
    except ImportError:
        import torch
        return "torch", torch


@contextlib.contextmanager
def torch_matmul_flags(**flags):
    """torch.backends.cuda.matmul's flags set for one call, the caller's put back after it (torch
    reads them when it picks the cuBLAS routine, at the call); only those that differ are touched
    (each costs a few microseconds)."""
    import torch
    settings = torch.backends.cuda.matmul
    before = {name: getattr(settings, name) for name in flags}
    changed = {name: old for name, old in before.items() if old != flags[name]}
    try:
        for name in changed:
            setattr(settings, name, flags[name])
        yield torch
    finally:
        for name, value in changed.items():
            setattr(settings, name, value)


EXACT_FLAGS = dict(allow_tf32=False, allow_fp16_reduced_precision_reduction=False,
                   allow_bf16_reduced_precision_reduction=False)


# the one flag of EXACT_FLAGS that torch reads for a product of this dtype
FLAG_OF = {"float32": "allow_tf32", "complex64": "allow_tf32", "float16": "allow_fp16_reduced_precision_reduction",
           "bfloat16": "allow_bf16_reduced_precision_reduction"}


def torch_product(dtype: str):
    """product(a, b): torch.matmul(a, b) with float32 sums and no TF32, for operands of dtype, the
    caller's flag put back: what a repeated call of the default kernel on torch tensors runs
    (api.matmul's fast path), without run_cublas's result buffer, the context manager, or the
    flags this dtype's product never reads."""
    return with_exact_sums(dtype, arrays.torch_if_imported().matmul)


def with_exact_sums(dtype: str, function):
    """function(*args) run with the one flag of EXACT_FLAGS that torch reads for products of dtype
    off, the caller's flag put back after it; ``function`` itself where there is nothing to set
    (float64) or the flag is already off at the call. The flag is read and set through torch's
    own getter and setter where this torch has them (a tenth of a microsecond each, against half a
    microsecond through torch.backends.cuda.matmul), which also keep its split-K part as it was."""
    get, put = exact_sums_flag(dtype)
    if get is None:
        return function

    def exact(*args):
        before = get()
        if not before[0]:
            return function(*args)
        put(False, *before[1:])
        try:
            return function(*args)
        finally:
            put(*before)
    return exact


def exact_sums_flag(dtype: str) -> tuple:
    """(get, put) of the flag torch reads for products of dtype (get() gives a tuple whose first
    item is whether reduced-precision sums are allowed); (None, None) where none is read."""
    torch = arrays.torch_if_imported()
    flag = FLAG_OF.get(dtype)
    if flag is None:
        return None, None
    get, put = (getattr(torch._C, f"_{verb}_cublas_{flag}", None) for verb in ("get", "set"))
    if get is None or put is None:          # a torch without them: the attribute
        settings = torch.backends.cuda.matmul
        get, put = (lambda: getattr(settings, flag)), (lambda value: setattr(settings, flag, value))
    # the reductions' flags read (allowed, split-K allowed) in newer torch: the state is a tuple
    return (get if isinstance(get(), tuple) else (lambda: (get(),))), put


# --8<-- [start:kernel]
def run_cublas(a, b, c):
    """Floats through torch where the operands are torch tensors (CuPy's view of a tensor costs
    more than the call) or a CUDA graph is being captured (CuPy refuses to call cuBLAS then);
    int8 operands of an int32 C through torch._int_mm where it takes them; other integers and
    CuPy's own arrays through CuPy, narrower integer operands first cast to C's dtype."""
    if a.dtype != c.dtype or b.dtype != c.dtype:     # integers narrower than C's (narrow_operands)
        if int_mm.takes(a, b, c):
            int_mm.run(a, b, c)
            return
        a, b = a.to(c.dtype), b.to(c.dtype)
    name, lib = _library()
    torch, dtype = arrays.torch_if_imported(), dtype_name(c.dtype)
    through_torch = dtype in SIXTEEN_BITS or (not is_integer(dtype) and (
        (torch is not None and isinstance(c, torch.Tensor)) or streams.capturing()))
    if name == "cupy" and not through_torch:
        lib.matmul(lib.asarray(a), lib.asarray(b), out=lib.asarray(c))
        return
    with torch_matmul_flags(**EXACT_FLAGS) as torch:
        tensors = [x if isinstance(x, torch.Tensor) else arrays.torch_view(x) for x in (a, b, c)]
        torch.matmul(tensors[0], tensors[1], out=tensors[2])
# --8<-- [end:kernel]


def run_stack(a, b, c):
    """A whole stack of matrices in one call of the library (its batched GEMM, broadcasting as
    NumPy does), but a matrix a call where CuPy's integer kernel, which indexes the whole stack in
    32 bits, would pass 2^31 elements."""
    if is_integer(dtype_name(c.dtype)) and max(math.prod(x.shape) for x in (a, b, c)) >= launch.INDEX_LIMIT:
        for idx, a_i, b_i in arrays.matrices(c.shape[:-2], a, b):
            run_cublas(a_i, b_i, c[idx])
        return
    run_cublas(a, b, c)


def available():
    if compat.cuda_simulator():
        return "the CUDA simulator has no cuBLAS; on the CPU the library rung is numpy"
    reason = launch.available()
    if reason and "simulator" in reason:     # not the SIMT rungs' advice: the simulator can't run this one
        return "needs a CUDA GPU (numba.cuda finds none); on the CPU the library rung is numpy"
    if reason:
        return reason
    try:
        _library()
    except ImportError:
        return "needs CuPy or PyTorch with CUDA"
    return None


def limits(problem):
    if problem.dtype.startswith("int") and _library()[0] == "torch":
        return "torch has no integer matmul on CUDA and CuPy is not installed"
    if problem.dtype.startswith("int"):
        return launch.index_limit(problem, "CuPy's integer matmul")
    if problem.dtype in SIXTEEN_BITS:
        try:
            import torch  # noqa: F401
        except ImportError:
            return f"{problem.dtype} goes through torch (CuPy has no bfloat16), which is not installed"
    return None


register(Kernel(
    name="cublas", rung=99, device="cuda", backend="library",
    dtypes=("int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128"),
    seed="anchor", summary="cuBLAS via CuPy (TF32 off) or torch (16-bit floats, float32 sums; CGEMM/ZGEMM); CuPy's "
                           "exact kernel for integers and bool",
    run=run_cublas, run_stack=run_stack, available=available, limits=limits, narrow_operands=True,
    traffic=lambda p: Traffic(read=p.m * p.k + p.k * p.n, written=p.m * p.n),
))
