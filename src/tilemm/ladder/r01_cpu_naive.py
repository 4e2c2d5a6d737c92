"""Rung 1, `cpu-naive`: the seeds' host triple loop (seed 000 ``matmul_cpu``, seed 003
``ord_matmul``), compiled with numba so it is not a Python-loop strawman (the kernel is in
r01_cpu_naive_kernel.py, which loads numba at the first launch).

Each output is one sum kept in a register; B is read down its columns, so every step of the
inner loop touches a new cache line of B. Rung 2 (`cpu-tiled`) fixes that.

Constraints: any M, N, K, any strides; int32, int64, float32, float64 (others promoted).
"""
from tilemm.numerics.dtypes import WORD_DTYPES
from tilemm.ladder.record import Kernel, Traffic, register


def run(a, b, c):
    from tilemm.ladder.r01_cpu_naive_kernel import run_naive     # numba loads on first use
    run_naive(a, b, c)


register(Kernel(
    name="cpu-naive", rung=1, device="cpu", backend="numba", dtypes=WORD_DTYPES,
    seed="seeds 000, 003", summary="the host triple loop: one sum per output, B read down its columns",
    run=run,
    # With no cache, every product loads one A and one B element.
    traffic=lambda p: Traffic(read=2 * p.m * p.n * p.k, written=p.m * p.n),
))
