"""The anchor `cublas` (listed last): the library a GPU user would call instead, the bar to beat.

float32 and float64 go to cuBLAS through CuPy (or torch where CuPy is missing), with TF32 off so
float32 is true SGEMM, and so do complex64 and complex128 (CGEMM and ZGEMM, TF32 off for complex64
as well); float16 and bfloat16 to cuBLAS through torch (CuPy has no bfloat16), with
float32 sums throughout (no reduced-precision reductions, which torch allows by default for
16-bit types); int8 matrices into int32 (out_dtype="int32") go to cuBLASLt's int8 GEMM through
torch._int_mm where it takes them (tilemm.ladder.int_mm); other integers on torch tensors to
cuBLAS's float64 GEMM on 11-bit digits (tilemm.ladder.int_dgemm: exact, wrapped as NumPy's, for K
up to 2^33), and bool results, counted there in int32 and compared with zero. Neither loads
Triton nor compiles anything. Integers without torch (CuPy's own arrays), or past that K, go to
CuPy's own exact kernel.
Operands arrive as torch tensors where torch is installed (tilemm.engine.backends.library).
"""
import math
import sys

from tilemm.numerics import arrays
from tilemm.system import compat, machine
from tilemm.engine import streams
from tilemm.numerics.dtypes import dtype_name, is_exact, is_integer
from tilemm.engine.torch_flags import EXACT_FLAGS, exact_sums_flag, torch_matmul_flags, torch_product, with_exact_sums  # noqa: F401
from tilemm.ladder.record import Kernel, Traffic, register
from tilemm.ladder import int_dgemm, int_mm
from tilemm.ladder.simt import launch

SIXTEEN_BITS = ("float16", "bfloat16")


def _library():
    try:
        import cupy
        return "cupy", cupy
    except ImportError:
        import torch
        return "torch", torch


# --8<-- [start:kernel]
def run_cublas(a, b, c, digits: bool = True):
    """Floats through torch where the operands are torch tensors (CuPy's view of a tensor costs
    more than the call) or a CUDA graph is being captured (CuPy refuses to call cuBLAS then);
    int8 operands of an int32 C through torch._int_mm where it takes them; other integers on
    torch tensors through float64 digits (int_dgemm) where digits; integers past its K, CuPy's own
    arrays and (not digits) stacks through CuPy, narrower integer operands first cast to C's dtype."""
    if int_mm.takes(a, b, c):       # int8 operands narrower than C's int32 (narrow_operands)
        int_mm.run(a, b, c)
        return
    if digits and is_integer(dtype_name(c.dtype)) and int_dgemm.takes(a, b, c):
        int_dgemm.run(a, b, c)
        return
    if a.dtype != c.dtype or b.dtype != c.dtype:     # integers narrower than C's (narrow_operands)
        a, b = a.to(c.dtype), b.to(c.dtype)
    torch, dtype = arrays.torch_if_imported(), dtype_name(c.dtype)
    through_torch = dtype in SIXTEEN_BITS or (not is_integer(dtype) and (
        (torch is not None and isinstance(c, torch.Tensor)) or streams.capturing()))
    name, lib = ("torch", torch) if through_torch else _library()   # (CuPy is imported only where it runs)
    if name == "cupy":
        lib.matmul(lib.asarray(a), lib.asarray(b), out=lib.asarray(c))
        return
    with torch_matmul_flags(**EXACT_FLAGS) as torch:
        tensors = [x if isinstance(x, torch.Tensor) else arrays.torch_view(x) for x in (a, b, c)]
        torch.matmul(tensors[0], tensors[1], out=tensors[2])
# --8<-- [end:kernel]


def run_stack(a, b, c):
    """A whole stack of matrices in one call of the library (its batched GEMM, broadcasting as
    NumPy does), but a matrix a call for integers where the whole stack's float64 digits would
    pass int_dgemm.WORKSPACE_BYTES, or where CuPy's integer kernel, which indexes the whole stack
    in 32 bits, would pass 2^31 elements. Integer stacks go to CuPy's kernel where CuPy is
    installed and no matrix passes 2^31 elements (else to the digits): one launch for the stack,
    where the digit route makes a dozen or more (digits, GEMMs, limbs), which cost more on the
    small matrices stacks hold."""
    integer = is_integer(dtype_name(c.dtype))
    past_cupy = max(math.prod(x.shape[-2:]) for x in (a, b, c)) >= launch.INDEX_LIMIT   # a matrix CuPy can't index
    digits = integer and int_dgemm.takes(a, b, c) and (past_cupy or not cupy_installed())
    if integer and (int_dgemm.workspace(a, b, c) > int_dgemm.WORKSPACE_BYTES if digits
                    else max(math.prod(x.shape) for x in (a, b, c)) >= launch.INDEX_LIMIT):
        a, b, c = vectors_as_matrices(a, b, c)
        for idx, a_i, b_i in arrays.matrices(c.shape[:-2], a, b):
            run_cublas(a_i, b_i, c[idx], digits)
        return
    run_cublas(a, b, c, digits)


def vectors_as_matrices(a, b, c):
    """A vector operand of a stack as a matrix of one row (A) or column (B), C viewed to match, so
    that C's dimensions but its last two are the stack's (a vector's C lacks the row or column)."""
    if len(a.shape) == 1 and len(b.shape) > 1:
        return a[None, :], b, c[..., None, :]
    if len(b.shape) == 1 and len(a.shape) > 1:
        return a, b[:, None], c[..., None]
    return a, b, c


def available():
    """Why the library can't run here, or None: asked of the library the operands came with (torch
    or CuPy, already loaded), else of the one installed; never of numba-cuda, which it does not run on."""
    if compat.cuda_simulator():
        return "the CUDA simulator has no cuBLAS; on the CPU the library rung is numpy"
    if "torch" not in sys.modules and "cupy" not in sys.modules:
        try:
            _library()
        except ImportError:
            return "needs CuPy or PyTorch with CUDA"
    if machine.gpu() is None:
        return "needs a CUDA GPU (none found); on the CPU the library rung is numpy"
    return None


def installed(name: str) -> bool:
    """Whether a package is here, asked without importing it (a first call on torch tensors never
    needs CuPy)."""
    import importlib.util
    return name in sys.modules or importlib.util.find_spec(name) is not None


def cupy_installed() -> bool:
    return installed("cupy")


def limits(problem):
    if problem.dtype.startswith("int"):
        return integer_limits(problem)
    if problem.dtype in SIXTEEN_BITS:
        try:
            import torch  # noqa: F401
        except ImportError:
            return f"{problem.dtype} goes through torch (CuPy has no bfloat16), which is not installed"
    return None


def integer_limits(problem) -> str | None:
    """Integers go through torch's float64 GEMM on digits (int_dgemm) up to its K, else CuPy's
    own kernel (32-bit indices)."""
    if problem.k <= int_dgemm.EXACT_K and installed("torch"):
        return None
    if not cupy_installed():
        why = (f"K = {problem.k} is over 2^33, past which float64 digit sums are not exact"
               if installed("torch") else "torch is not installed")
        return f"integers need torch or CuPy's integer matmul: {why}, and CuPy is not installed"
    return launch.index_limit(problem, "CuPy's integer matmul")


def fast_product(a, b, operands: str, result: str, compute: str):
    """A plan's product for repeated calls on torch CUDA matrices a and b of dtype `operands`, or
    None: torch.matmul with float32 sums for floats (torch_product), torch._int_mm for int8 into
    int32 (int_mm.product, where it takes their sizes), float64 digits (int_dgemm) for other
    integer matrices into a result of their own dtype or int8's into int32."""
    if operands == result == compute and not is_exact(result) and len(a.shape) >= 2 and len(b.shape) >= 2:
        return torch_product(result)
    if operands == "int8" and result == compute == "int32" and len(a.shape) == len(b.shape) == 2:
        return int_mm.product(a, b) or int_dgemm.product_for(a, b, result)
    if operands == result == compute and result in ("int32", "int64") and len(a.shape) == len(b.shape) == 2:
        return int_dgemm.product_for(a, b, result)
    return None


register(Kernel(
    name="cublas", rung=99, device="cuda", backend="library",
    dtypes=("int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128"),
    seed="anchor", summary="cuBLAS via CuPy (TF32 off) or torch (16-bit floats, float32 sums; CGEMM/ZGEMM); "
                           "integers and bool exact: int8 GEMM (_int_mm), DGEMM on 11-bit digits, CuPy's kernel for stacks",
    run=run_cublas, run_stack=run_stack, available=available, limits=limits, narrow_operands=True,
    traffic=lambda p: Traffic(read=p.m * p.k + p.k * p.n, written=p.m * p.n),
    fast_product=fast_product, int8_gemm=int_mm,
))
