"""How a kernel is chosen when the call names none: the default for the operands' device, shape
and dtype (tilemm.choose.by_shape's tables on a GPU, the ladder's highest rung that runs otherwise)."""
from __future__ import annotations

from tilemm.choose import by_shape as choice
from tilemm.engine import availability
from tilemm.system import machine
from tilemm.ladder import registry
from tilemm.numerics.dtypes import is_complex, is_exact, is_integer
from tilemm.ladder.registry import Problem


# NumPy multiplies integers with a plain loop: 0.16-1.4 G multiply-adds a second on the 2-core host
# (16 x 4096 x 4096 int32: 1.65 s). cpu-tiled, once compiled, ran 2-4x it at 64³ and 11-60x from
# 256³ up (whole calls, int8 / int32 / int64). Its compile takes ~2 s a dtype once per machine
# (then cached on disk: ~0.12 s to load in a new process), so a process that has not compiled it yet
# takes it where NumPy's loop costs about that load or more (2^27 multiply-adds: 0.1-0.8 s), and one
# that has, wherever it is faster (2^18).
HOST_INTEGER_TILED_FROM = 2**27
HOST_INTEGER_TILED_WHEN_COMPILED_FROM = 2**18


# A stack of matrices on the GPU: the library multiplies it in one batched call, a rung of ours a
# launch a matrix. Measured in whole calls on int8 / int32 stacks: many small matrices run far
# faster batched (a launch each costs more than a small matrix's work); from 2^32 multiply-adds a
# matrix, a launch is a small share of each matrix's time, and the rung the table names for the
# shape runs.
STACK_PER_MATRIX_FROM = 2**32


# An integer product on the GPU in a process that has not loaded Triton: tensorcore-int's first
# call pays Triton's start before any launch. On an H200, 512³ int32 (or int8 into int32) took
# 0.73 s (0.74 s) in a fresh process with warm disk caches, Triton's import ~0.29 s and its
# compiler's hash ~0.44 s of it, and 3.9 s with empty caches (two compiles); the library's exact
# routes (torch._int_mm, float64 GEMMs on 11-bit digits) load nothing more, as the first calls of
# bfloat16 to float64 through the library (0.08-0.14 s). At 2^30 multiply-adds the digit route's
# six pair products (~13 GFLOP of float64, 67 TFLOP/s on an H200) take well under a millisecond,
# far less than that start, so a problem's first call in a process that has not loaded Triton takes
# the library up to there; one that has, the table's choice. Only the first call: a repeated product
# would keep the library's speed for good (int8 into int32 with B row-major, 32 x 3072 x 8192: 160
# µs a call, the rung's 19), so the second call of that problem takes the rung and loads Triton.
LIBRARY_BEFORE_TRITON_UP_TO = 2**30
# (result, M, N, K) of the problems whose first call took the library before Triton was loaded
SERVED_BEFORE_TRITON: set = set()


def default_kernel(device: str, result: str, m: int, n: int, k: int, operands: str | None = None,
                    lds: tuple | None = None, stacked: bool = False, b_rows: bool = False,
                    first_call: bool = True) -> registry.Kernel:
    """Host arrays: NumPy, or cpu-tiled for integer products past HOST_INTEGER_TILED_FROM (or
    HOST_INTEGER_TILED_WHEN_COMPILED_FROM where this process has compiled it). Device arrays: the rung
    tilemm.choose.by_shape lists for this shape class (lds: the operands' leading dimensions) on this GPU,
    else the highest rung of the ladder that can run this problem here at its default parameters
    (the library last for integers: walk; NumPy, with copies, if none can); a stack of them (stacked) the library's batched call, but for
    matrices of STACK_PER_MATRIX_FROM multiply-adds and more. Integer results up to
    LIBRARY_BEFORE_TRITON_UP_TO multiply-adds in a process that has not loaded Triton: the library
    where it can (library_before_triton). Complex results: tensorcore-complex
    where its record's prefers() measured it faster, else the library. int8 torch matrices into
    int32 with B row-major (b_rows: its rows contiguous): tensorcore-int wherever its small-M
    program takes the sizes (int8_rows_take_the_rung)."""
    if device != "cpu":
        if is_complex(result):        # the complex rung's own rule (the library where it has not measured faster)
            gpu = machine.gpu()
            prefers = registry.get("tensorcore-complex").prefers(result, m, n, k, gpu.sms if gpu else 0,
                                                                  gpu.compute_capability if gpu else None)
            preferred = "tensorcore-complex" if prefers else None
        else:
            preferred = choice.preferred(result, m, n, k, operands, lds)
        if stacked and m * n * k < STACK_PER_MATRIX_FROM:
            preferred = "cublas"
        elif first_call and library_before_triton(result, m, n, k):
            preferred = "cublas"
        elif not stacked and b_rows and int8_rows_take_the_rung(result, m, n, k, operands):
            preferred = "tensorcore-int"
        kernels = ([registry.get(preferred)] if preferred else []) + walk(result, m, n, k, operands)
        for kern in kernels:
            compute = kern.compute_dtype(result)
            if compute and kern.why_not(Problem(m, n, k, compute), kern.resolve({})) is None:
                return kern
    if is_integer(result) and m * n * k >= HOST_INTEGER_TILED_WHEN_COMPILED_FROM:
        tiled = registry.get("cpu-tiled")
        if m * n * k >= HOST_INTEGER_TILED_FROM or tiled.compiled_for(tiled.compute_dtype(result)):
            return tiled
    return registry.get("numpy")


def walk(result: str, m: int, n: int, k: int, operands: str | None) -> list:
    """The GPU rungs in the order the default tries them where no rule names one: the ladder from
    its top (the library first), but for integer and bool results the library last, except int8
    operands into int32 at sizes torch._int_mm takes (cuBLASLt's int8 GEMM, which the int8 table
    measured). The library's other exact routes (float64 GEMMs on digits, CuPy's kernel) were not
    measured faster than tensorcore-int where the tables name no rung: they serve there only what
    no rung takes."""
    kernels = list(reversed(registry.kernels("cuda")))
    library = registry.get("cublas")
    int8_gemm = operands == "int8" and result == "int32" and library.int8_gemm.why_not(m, n, k) is None
    if is_exact(result) and not int8_gemm:
        kernels.sort(key=lambda kern: kern is library)
    return kernels


def library_for_first_call_only(result: str, m: int, n: int, k: int, stacked: bool = False) -> bool:
    """Whether default_kernel's choice of the library for a problem's first call on the GPU is the
    rule's, for that call alone (library_before_triton; a small stack's batched call is the
    library's for every call): its run is remembered (first_call_served) so that the problem's
    next call is planned afresh (first_call False) and takes the tables' choice. (Not asked by
    choosing again: that choice may load Triton.)"""
    return not (stacked and m * n * k < STACK_PER_MATRIX_FROM) and library_before_triton(result, m, n, k)


def first_call_served(result: str, m: int, n: int, k: int) -> None:
    """The first call of this problem ran in the library before Triton was loaded: its next one
    takes the rung (SERVED_BEFORE_TRITON)."""
    SERVED_BEFORE_TRITON.add((result, m, n, k))


def library_before_triton(result: str, m: int, n: int, k: int) -> bool:
    """Whether an integer (or bool) product on the GPU takes the library rather than a Triton rung because
    this process has not loaded Triton (availability.triton_loaded), at up to
    LIBRARY_BEFORE_TRITON_UP_TO multiply-adds, where the library runs it here (exactly, as every
    integer route of its does). The answer is the same either way: only the kernel changes."""
    if not is_exact(result) or m * n * k > LIBRARY_BEFORE_TRITON_UP_TO or availability.triton_loaded():
        return False
    library = registry.get("cublas")
    compute = library.compute_dtype(result)
    return compute is not None and library.why_not(Problem(m, n, k, compute), {}) is None


def leading_dims(a, b, k: int, n: int) -> tuple:
    """A's and B's leading dimensions in elements, as the library would be given them
    (tilemm.choose.by_shape.shape_class): the row stride of contiguous rows, the column stride of a
    transposed view; K and N for a vector or an operand of neither (copied into rows first)."""
    return leading_dim(a, k), leading_dim(b, n)


def leading_dim(x, cols: int) -> int:
    if len(x.shape) < 2:
        return cols
    strides = x.stride() if callable(getattr(x, "stride", None)) else tuple(s // x.itemsize for s in x.strides)
    return strides_leading_dim(strides[-2], strides[-1], cols)


def strides_leading_dim(row_stride: int, column_stride: int, cols: int) -> int:
    """leading_dim of a matrix of these strides (in elements) and `cols` columns."""
    if column_stride == 1:
        return row_stride
    return column_stride if row_stride == 1 else cols


def b_rows(a, b) -> bool:
    """Whether torch matrices a and b have A's rows and B's rows contiguous (B row-major, (K, N)):
    tensorcore-int's small-M program reads such a B as it lies (its b_rows)."""
    return (len(a.shape) == len(b.shape) == 2 and a.stride(-1) == 1 and b.stride(-1) == 1
            and b.stride(-2) != 1)


def int8_rows_take_the_rung(result: str, m: int, n: int, k: int, operands: str | None) -> bool:
    """Whether an int8 product into int32 with B row-major takes tensorcore-int whatever the
    table says: where the rung's small-M program reads that B as it lies (its prefers for B's rows),
    which the library's _int_mm would read slowly (B row-major: 257-293 µs at 64-256 x 3072 x 8192
    on an H200, against 21-43 µs given B as (N, K).T)."""
    if operands != "int8" or result != "int32":
        return False
    gpu = machine.gpu()
    return gpu is not None and registry.get("tensorcore-int").prefers("int8", m, n, k, gpu.sms, gpu.compute_capability,
                                                                 b_rows=True)
