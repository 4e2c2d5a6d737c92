"""Rung 10's programs (tensorcore: pointers, TMA, persistent, split K) and tensorcore-int's
small-M program (int8 -> int32, K split into runs) stay inside their operands: each a view inside a
larger buffer (tests/framed.py), NaN (int8: 127) around A and B (a read past them reaches the
answer) and a sentinel around C (a write past it is seen); C within a rounding of float64's (int32:
exact). Small tiles, sizes no multiple of them, launched as the rungs bind them."""
import numpy as np
import pytest
import torch

from tilemm.engine import workspaces
from tilemm.ladder.tensorcore import r10_tensorcore
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

from .conftest import ON_GPU
from .framed import framed, poison, sentinel, untouched_around
from .test_int8_small_m import TINY

# the programs each case takes follow from the interpreter's 4 SMs (availability.multiprocessors)
pytestmark = pytest.mark.skipif(ON_GPU, reason="interpreter sizes and programs")
TILES = dict(block_m=16, block_n=16, block_k=16, num_warps=1, num_stages=2)


def operands(m, n, k, layout, dtype, seed):
    """A (m, k) and B (k, n), each a transposed view where layout says "t", framed in a poisoned buffer;
    C (m, n) with an odd row stride, framed in a sentinel one."""
    g = torch.Generator().manual_seed(seed)
    a = framed((k, m), poison(dtype), dtype, g)[0].T if layout[0] == "t" else framed((m, k), poison(dtype), dtype, g)[0]
    b = framed((n, k), poison(dtype), dtype, g)[0].T if layout[1] == "t" else framed((k, n), poison(dtype), dtype, g)[0]
    wide = torch.int32 if dtype == torch.int8 else dtype
    c, buffer = framed((m, n), sentinel(wide), wide, pitch=(n + 16) | 1)
    return a, b, c, buffer


# (M, N, K, layout, tma, split_k, the program): the pointer program and the TMA one (a round of
# tiles, and the persistent program past one), K split into runs or not; K of 1, partial K steps,
# M and N of 1. The operands' rows 16-byte aligned: TMA reads them as they lie, no copy.
TENSORCORE_CASES = [(1, 1, 1, "nn", False, None, "matmul_kernel"),
                    (40, 30, 300, "nt", False, 3, "matmul_kernel"),
                    (33, 17, 257, "tn", False, 16, "matmul_kernel"),
                    (70, 66, 200, "nt", True, 4, "matmul_tma"),
                    (65, 97, 49, "tt", True, 2, "matmul_tma"),
                    (70, 66, 40, "nn", True, 1, "matmul_persistent")]


@pytest.mark.parametrize("case", TENSORCORE_CASES, ids=lambda case: "x".join(map(str, case[:3])) + "-" + case[3])
def test_tensorcore_stays_inside(case):
    m, n, k, layout, tma, split_k, program = case
    a, b, c, buffer = operands(m, n, k, layout, torch.float16, seed=m + n + k)
    steps = r10_tensorcore.bind(a, b, c, group_m=2, **TILES, tma=tma, split_k=split_k, align_rows=False)
    (launch,) = steps.launches                   # the program alone: no operand copied first
    assert launch.program.__name__ == program
    assert isinstance(launch, workspaces.SplitKLaunch) is (split_k not in (None, 1)), "K split as asked"
    steps()
    assert untouched_around(c, buffer), "a store past C"
    assert not c.isnan().any(), "a read past A or B (NaN in C)"
    want = a.double() @ b.double()
    assert float((c.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)) <= 2e-3


# (M, N, K, B's layout ("col": (N, K).T, "row": row-major), split_k, the tiles' product)
INT_CASES = [(1, 1, 1, "col", None, "int8"),
             (5, 70, 1000, "col", 6, "int8"),
             (20, 33, 257, "row", 3, "int8"),
             (17, 40, 300, "row", 4, "fp16")]


@pytest.mark.parametrize("case", INT_CASES, ids=lambda case: "x".join(map(str, case[:3])) + "-" + case[3])
def test_tensorcore_int_small_m_stays_inside(case):
    m, n, k, b_layout, split_k, product = case
    a, b, c, buffer = operands(m, n, k, "nt" if b_layout == "col" else "nn", torch.int8, seed=m * n + k)
    launch = small_m.launcher(a, b, c, split_k, tiles=(*TINY, product))
    assert isinstance(launch, workspaces.SplitKLaunch) is (split_k is not None), "K split into runs (or not) as asked"
    launch()
    assert untouched_around(c, buffer), "a store past C"
    want = a.numpy().astype(np.int64) @ b.numpy().astype(np.int64)
    assert np.array_equal(c.numpy().astype(np.int64), want), "a read past A or B (127 in a sum), or a wrong sum"
