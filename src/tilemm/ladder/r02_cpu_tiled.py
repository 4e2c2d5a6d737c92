"""Rung 2, `cpu-tiled`: seed 004's idea on the CPU. What changed from rung 1: the output is
cut into BLOCK_M x BLOCK_N tiles, the tiles are shared out among the cores, and each tile walks
K in BLOCK_K steps: its slices of A and B are packed into contiguous buffers that stay in cache
while 4x4 blocks of C, held in registers, reuse every loaded value four times (the kernel is in
r02_cpu_tiled_kernel.py, which loads numba at the first launch).

Constraints: any M, N, K, any strides; int32, int64, float32, float64 (others promoted); tiles
are powers of two from 4 to 512.
"""
import sys

from tilemm.numerics.dtypes import WORD_DTYPES
from tilemm.ladder.record import Kernel, Param, Traffic, register

KERNEL_MODULE = "tilemm.ladder.r02_cpu_tiled_kernel"


def run_tiled(a, b, c, block_m, block_n, block_k):
    from tilemm.ladder.r02_cpu_tiled_kernel import run_tiled as launch     # numba loads on first use
    launch(a, b, c, block_m, block_n, block_k)


def tiled_compiled_for(dtype: str) -> bool:
    """Whether this process has compiled (or loaded from Numba's disk cache) cpu-tiled for
    operands of dtype: never where it has not loaded the kernel's module (nor numba)."""
    kernel = sys.modules.get(KERNEL_MODULE)
    return kernel is not None and kernel.compiled_for(dtype)


def traffic(p, block_m, block_n, block_k):
    # Every output tile reads its (BLOCK_M, K) strip of A and (K, BLOCK_N) strip of B once.
    tiles_m = -(-p.m // block_m)
    tiles_n = -(-p.n // block_n)
    return Traffic(read=p.m * p.k * tiles_n + p.k * p.n * tiles_m, written=p.m * p.n)


POW2 = (4, 8, 16, 32, 64, 128, 256, 512)
register(Kernel(
    name="cpu-tiled", rung=2, device="cpu", backend="numba", dtypes=WORD_DTYPES,
    seed="seed 004", summary="cache tiles of C over the cores, packed A and B slices, 4x4 register blocks",
    run=run_tiled, traffic=traffic,
    params=(Param("block_m", 256, POW2, "rows of C per tile"),
            Param("block_n", 64, POW2, "columns of C per tile"),
            Param("block_k", 256, POW2, "depth of one K step (the packed tiles stay in cache)")),
    compiled_for=lambda dtype: tiled_compiled_for(dtype),   # looked up at each call (tests stand in for it)
))
