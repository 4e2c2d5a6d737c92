"""The default kernel's choice on a GPU, by shape class: shipped knowledge, no timing at call time.

cuBLAS is the default on device arrays; a class of shapes where a tilemm rung measured faster is
listed here, for the GPU generation it was measured on, and there the default takes that rung.
The classes are coarse on purpose (a table that generalises, not one that fits a benchmark):

    work     2*M*N*K below 1e10, below 1e11, above
    aligned  the leading dimensions of A, B and C all multiples of 8 elements (cuBLAS's fast
             paths want them; tilemm copies rows into aligned ones where that pays): K and N
             for row-major operands, M for a transposed A, K for a transposed B. Measured, bf16
             3000 x 5000 x 7001 (h100-2026-11-24-s11/issue_shapes.log, -s12/tensorcore_classes_*):
             row-major, cuBLAS 1.69 ms against tilemm's 0.47; A transposed (no odd leading
             dimension), cuBLAS 0.35 ms against 0.46
    depth    K below 128, up to 8 x max(M, N), deeper
    thin     min(M, N) above 64 (0), 2 to 64 (1: skinny), 1 (2: a vector, which cuBLAS multiplies
             with its GEMV kernels: tilemm's vectors ran 0.73-0.95x the library where its other
             skinny products of that class ran 1.04-3.6x, h200-2026-11-26-s22/fit_whole.jsonl)

A class is listed when tilemm's rung beat the library rung on the wide sweep's fit half, whole
calls as users make them (tensorcore_vs_cublas.py --whole-calls, interleaved rounds, H200): geometric
mean >= 1.05x, none of its problems below 0.97x (the default's bar: never measurably slower than the
library). bfloat16 and float16 run the same programs with the same tiles, so their records are judged
together, and a class the fit half holds a single shape of is judged with a grid of its own as well
(winners' min_shapes=2, checks). Measured in h200-2026-11-26-s23/fit_whole.jsonl and class_check.jsonl;
`python3 benchmarks/default_table.py FIT [HELD_OUT...] --checks GRID` prints the table and the halves'
figures. A small product's call is its CPU cost: a repeated call of a single tilemm program
(tilemm.ladder.replay's quick call) costs about torch.matmul's, less than the library rung's, and
where the rung's program is as fast as cuBLAS's the default takes it. Aligned products stay with
cuBLAS (small ones: 512 x 3072 x 2048 ran 1.13x, but a grid of 12 others of its class 0.93-1.23x), as
do deep-K products with small M and N and small unaligned products of more than 64 rows and columns,
whose operands the rung first copies into aligned rows (one ran 0.77x).
"""
from __future__ import annotations

import functools
import math

from . import machine


def shape_class(m: int, n: int, k: int, lds: tuple | None = None) -> tuple:
    """(work, aligned, depth, thin) of an M x N x K product (see the module's docstring); lds:
    A's and B's leading dimensions in elements (None: row-major, K and N)."""
    flops = 2 * m * n * k
    work = 0 if flops < 1e10 else 1 if flops < 1e11 else 2
    lda, ldb = lds or (k, n)
    aligned = lda % 8 == 0 and ldb % 8 == 0 and n % 8 == 0
    depth = 0 if k < 128 else 1 if k < 8 * max(m, n) else 2
    thin = 0 if min(m, n) > 64 else 1 if min(m, n) > 1 else 2
    return work, aligned, depth, thin


# (compute capability, dtype) -> {shape class: kernel}: where the default leaves cuBLAS. Unaligned
# products of 1e10 flops or more (cuBLAS's slow path; fit half 1.44-3.5x the library rung, a grid of 8
# deep-K ones 1.21-4.4x), small unaligned skinny ones and vectors of K under 128 (the single program's
# cheaper call; 1.16-3.6x, a grid of 5 vectors 1.15-1.73x)
_SIXTEEN_BIT = ((0, False, 0, 1), (0, False, 0, 2), (0, False, 1, 1), (1, False, 0, 0), (1, False, 1, 0),
                (1, False, 2, 0), (2, False, 1, 0))
MEASURED_WINNERS = {((9, 0), dtype): {c: "tensorcore" for c in _SIXTEEN_BIT} for dtype in ("bfloat16", "float16")}

# Integer results on Hopper: the library multiplies integers with CuPy's own kernel (cuBLAS has no
# integer GEMM but int8 -> int32, which torch._int_mm reaches and tilemm's library rung does not);
# `tensorcore-int` ran 6.4x / 6.8x it at int32 / int64 4096³ (h100-2026-11-22-s4/int_vs_baselines_final.jsonl),
# 1.37-10.9x torch._int_mm over the wide sweep's int8 -> int32 products >= 2048 (h100-2026-11-24-s10/int8.jsonl),
# and at int8 -> int32 512³ / 1024³ 2.7x / 5.5x the library (int8_default.jsonl: both bound by their
# launches' CPU cost there). Products that are not skinny take it; int64 (K in chunks, planned at
# each launch) from 10^10 operations on.
INTEGER_WINNERS = {(work, aligned, depth, 0): "tensorcore-int"
                   for work in (0, 1, 2) for aligned in (False, True) for depth in (0, 1, 2)}
MEASURED_WINNERS.update({((9, 0), dtype): INTEGER_WINNERS for dtype in ("int8", "int16", "int32")})
# int8 operands also where skinny: the skinny classes of the wide sweep's fit half, whole calls against the
# library (h100-2026-11-24-s11/int8_wide.jsonl): 11.0x, lowest 1.55x (held-out 10.7x, lowest 1.37x); CuPy's
# kernel took 2.7 ms for 32 x 81 x 9647
INT8_SKINNY = ((0, False, 0, 1), (0, False, 0, 2), (0, False, 1, 1), (0, False, 1, 2), (0, False, 2, 1), (0, False, 2, 2),
               (0, True, 1, 1), (0, True, 1, 2), (1, True, 1, 1))
MEASURED_WINNERS[((9, 0), "int8")] = {**INTEGER_WINNERS, **{c: "tensorcore-int" for c in INT8_SKINNY}}
MEASURED_WINNERS[((9, 0), "int64")] = {c: rung for c, rung in INTEGER_WINNERS.items() if c[0] > 0}
# float64: `tensorcore-f64` where the fit half measured it faster than the library rung, whole calls
# (h200-2026-11-26-s26/f64_default_fit.jsonl; min_shapes=2, f64_default_grid.jsonl the checks):
# unaligned products of 1e11 flops or more (DMMA, 1.00-1.11x; grid 0.95-1.19x) and of K under 128
# from 1e10 (1.04-1.14x), where cuBLAS's DGEMM takes its slow path; small skinny products and
# vectors of K under 128, whose call is the single program's cheaper one (1.17-1.60x; grid vectors
# 1.11-1.13x). Aligned products stay with cuBLAS (0.91-1.07x at 1e11 flops and more)
FLOAT64_WINNERS = ((0, False, 0, 1), (0, False, 0, 2), (1, False, 0, 0), (2, False, 1, 0))
MEASURED_WINNERS[((9, 0), "float64")] = {c: "tensorcore-f64" for c in FLOAT64_WINNERS}


# The shape classes of the wide sweep's fit half: every rung measured on all of it (the 16-bit
# rungs, and float64's up to 5e11 multiply-adds) was measured on these
FIT_HALF_CLASSES = frozenset({
    (0, False, 0, 0), (0, False, 0, 1), (0, False, 0, 2), (0, False, 1, 0), (0, False, 1, 1), (0, False, 1, 2),
    (0, False, 2, 0), (0, False, 2, 1), (0, False, 2, 2), (0, True, 1, 0), (0, True, 1, 1), (0, True, 1, 2),
    (1, False, 0, 0), (1, False, 1, 0), (1, False, 2, 0), (1, True, 1, 0), (1, True, 1, 1), (2, False, 1, 0),
    (2, True, 1, 0)})
# (compute capability, dtype) -> {rung: the shape classes the sweep's fit half measured it on}: where
# kernel="auto" need not compile and time a rung the table does not name (MEASURED_WINNERS decides)
MEASURED_CLASSES = {((9, 0), dtype): {"tensorcore": FIT_HALF_CLASSES} for dtype in ("bfloat16", "float16")}
MEASURED_CLASSES[((9, 0), "float64")] = {"tensorcore-f64": FIT_HALF_CLASSES}


def measured(records: list[dict], rung: str = "tensorcore") -> frozenset:
    """The shape classes benchmark records measured `rung` on (how MEASURED_CLASSES is made)."""
    return frozenset(record_class(r) for r in records
                     if r.get("variant") == rung and r.get("vs_cublas"))


def layout_lds(m: int, n: int, k: int, layout: str) -> tuple:
    """A's and B's leading dimensions for a layout such as "nt" (t: that operand a transposed view
    of contiguous rows), as benchmark records give it."""
    return (k if layout[0] == "n" else m), (n if layout[1] == "n" else k)


def record_class(r: dict) -> tuple:
    """The shape class of a benchmark record (m, n, k and its layout, "nn" if it has none)."""
    return shape_class(r["m"], r["n"], r["k"], layout_lds(r["m"], r["n"], r["k"], r.get("layout") or "nn"))


def worth_timing(rung: str, dtype: str, m: int, n: int, k: int, lds: tuple | None = None) -> bool:
    """Whether kernel="auto" should compile and time `rung` for this product: not where the shipped
    sweep measured it on this shape class and the table does not name it (it did not win there)."""
    if preferred(dtype, m, n, k, lds=lds) == rung:
        return True
    return shape_class(m, n, k, lds) not in MEASURED_CLASSES.get((_capability(), dtype), {}).get(rung, frozenset())


def winners(records: list[dict], rung: str = "tensorcore", min_geomean: float = 1.05, min_ratio: float = 0.97,
            against: str = "vs_library", min_shapes: int = 1, checks: list[dict] = ()) -> dict:
    """{shape class: rung} from benchmark records (tensorcore_vs_cublas.py's: m, n, k, layout,
    variant, and the ratio `against`: to tilemm's library rung, or "vs_cublas"): the classes where
    the rung's ratios have a geometric mean of at least min_geomean and none below min_ratio. A
    class the records hold fewer than min_shapes shapes of is judged with the `checks` of its class
    too (records of a grid of its own), and needs min_shapes shapes among both. How MEASURED_WINNERS
    is made from the fit half."""
    def by_class(rs) -> dict:
        found: dict = {}
        for r in rs:
            if r.get("variant") == rung and r.get(against):
                found.setdefault(record_class(r), []).append(r)
        return found

    def shapes(rs) -> int:
        return len({(r["m"], r["n"], r["k"], r.get("layout")) for r in rs})
    grid = by_class(checks)
    won = {}
    for c, rs in by_class(records).items():
        if shapes(rs) < min_shapes:
            rs = rs + grid.get(c, [])
            if shapes(rs) < min_shapes:
                continue
        v = [r[against] for r in rs]
        if math.exp(sum(map(math.log, v)) / len(v)) >= min_geomean and min(v) >= min_ratio:
            won[c] = rung
    return won


def preferred(dtype: str, m: int, n: int, k: int, operands: str | None = None,
              lds: tuple | None = None) -> str | None:
    """The rung the default takes for this product (result dtype, and the operands' where both have
    one; lds as shape_class's) on this machine's GPU, or None (cuBLAS). Products of int8 operands
    into int8, int16 or int32 read int8's table: the rung's work is the same, one digit plane each
    (an int64 result sums K in chunks, planned at each launch: int64's own table)."""
    if operands == "int8" and dtype in ("int8", "int16", "int32"):
        dtype = "int8"
    table = MEASURED_WINNERS.get((_capability(), dtype))
    return table.get(shape_class(m, n, k, lds)) if table else None


@functools.lru_cache(maxsize=None)
def _capability():
    gpu = machine.gpu()
    return tuple(gpu.compute_capability) if gpu else None
