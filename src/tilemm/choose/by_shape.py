"""The default kernel's choice on a GPU, by shape class: shipped knowledge, no timing at call time.

cuBLAS is the default on device arrays; a class of shapes where a tilemm rung measured faster is
listed in a table for the GPU generation it was measured on, and there the default takes that rung.
The classes are coarse on purpose (a table that generalises, not one that fits a benchmark):

    work     2*M*N*K below 1e10, below 1e11, above
    aligned  the leading dimensions of A, B and C all multiples of 8 elements (cuBLAS's fast
             paths want them; tilemm copies rows into aligned ones where that pays): K and N
             for row-major operands, M for a transposed A, K for a transposed B
    depth    K below 128, up to 8 x max(M, N), deeper
    thin     min(M, N) above 64 (0), 2 to 64 (1: skinny), 1 (2: a vector, which cuBLAS multiplies
             with its GEMV kernels)

The tables are package data (tilemm/choose/tables/*.json), each made from its canonical benchmark record by
benchmarks/default_table.py and carrying its provenance (GPU, date, record, commands): a class is
listed where the rung beat the library rung on the wide sweep's fit half, whole calls as users make
them, with a geometric mean of at least 1.05x and none of its problems below 0.97x (the default's
bar: never measurably slower than the library). Integer products follow a rule besides: the library
multiplied integers with CuPy's own kernel when they were measured (cuBLAS has no integer GEMM but
int8 -> int32; its float64 GEMM on digits came later, unmeasured against the rung), so
`tensorcore-int` takes every product that is not skinny (tilemm.choose.default adds the first
call's rule: the library until Triton is loaded).
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

from tilemm.system import machine

TABLES = Path(__file__).with_name("tables")


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


def read_table(path) -> dict:
    """A table's data file, its shape classes as tuples."""
    import json     # (json loads only where a table is read)
    table = json.loads(Path(path).read_text())
    for key in ("winners", "measured"):
        table[key] = frozenset(tuple(c) for c in table[key])
    return table


@functools.lru_cache(maxsize=None)
def shipped_tables() -> tuple:
    """(MEASURED_WINNERS, MEASURED_CLASSES, INT8_SKINNY), read from the data files at their first
    use (not at import: a call on the host never needs them).

    MEASURED_WINNERS: (compute capability, dtype) -> {shape class: kernel}, where the default leaves
    cuBLAS; MEASURED_CLASSES: (compute capability, dtype) -> {rung: the shape classes the sweep's fit
    half measured it on}, where kernel="auto" need not compile and time a rung the table does not name.
    Integers on Hopper follow INTEGER_WINNERS besides: every product that is not skinny takes
    `tensorcore-int` (the library has no fast integer GEMM); int8 operands also where the int8 table
    says; int64 (K in chunks, planned at each launch) from 10^10 operations on."""
    winners, classes = {}, {}
    for path in sorted(TABLES.glob("*.json")):
        table = read_table(path)
        for dtype in table["dtypes"]:
            key = (tuple(table["capability"]), dtype)
            winners[key] = {c: table["rung"] for c in table["winners"]}
            classes[key] = {table["rung"]: table["measured"]}
    int8 = winners.get(((9, 0), "int8"), {})
    winners[((9, 0), "int8")] = {**INTEGER_WINNERS, **int8}
    winners.update({((9, 0), dtype): INTEGER_WINNERS for dtype in ("int16", "int32")})
    winners[((9, 0), "int64")] = {c: rung for c, rung in INTEGER_WINNERS.items() if c[0] > 0}
    return winners, classes, tuple(sorted(c for c in int8 if c[3]))


INTEGER_WINNERS = {(work, aligned, depth, 0): "tensorcore-int"
                   for work in (0, 1, 2) for aligned in (False, True) for depth in (0, 1, 2)}
# The tables by name, read at first use: MEASURED_WINNERS, MEASURED_CLASSES, and INT8_SKINNY (the
# skinny classes the int8 table gives tensorcore-int)
LAZY_TABLES = ("MEASURED_WINNERS", "MEASURED_CLASSES", "INT8_SKINNY")


def __getattr__(name):
    if name in LAZY_TABLES:
        return shipped_tables()[LAZY_TABLES.index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    classes = shipped_tables()[1].get((capability(), dtype), {})
    return shape_class(m, n, k, lds) not in classes.get(rung, frozenset())


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
    table = shipped_tables()[0].get((capability(), dtype))
    return table.get(shape_class(m, n, k, lds)) if table else None


@functools.lru_cache(maxsize=None)
def capability():
    """This machine's GPU's compute capability as a tuple, or None: the key of its tables."""
    gpu = machine.gpu()
    return tuple(gpu.compute_capability) if gpu else None
