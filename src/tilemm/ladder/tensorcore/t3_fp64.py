"""Rung 22, `tensorcore-f64`: float64 on the H100's FP64 tensor cores (DMMA), in Triton: the
programs of `tensorcore` (t1_blocked_kernel.py) with float64 tiles and a float64 accumulator, the
persistent TMA one past one round of tiles, the pointer one otherwise.

Constraints: float64 only; any M, N, K, any strides; shared memory of a configuration (eight
bytes an element) must fit the GPU (checked before launch).
"""
from __future__ import annotations

from ...registry import Kernel, Param, register
from .. import _tensorcore_support as support
from . import t1_blocked
from .t1_blocked import tile_params

TILES = ("block_m", "block_n", "block_k", "num_warps", "num_stages")


def default_tiles(m: int, n: int) -> dict:
    """Measured on an H100 (tensorcore_vs_cublas_f64*.jsonl, session 2's shapes run): 128 x 128 x 32
    tiles, 8 warps, 3 stages when they fill the SMs; 64 x 64 x 32 (4 warps, 4 stages) when they do
    not (1000³: 0.66x DGEMM against 0.35x); 16-wide tiles for a skinny product, bound by reading
    the other operand."""
    if min(m, n) <= 64:
        return dict(block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=4) if m <= 64 else \
            dict(block_m=64, block_n=16, block_k=64, num_warps=4, num_stages=4)
    if -(-m // 128) * -(-n // 128) >= support.multiprocessors():
        return dict(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=3)
    return dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=4)


def resolved(m: int, n: int, params: dict) -> dict:
    """params with the shape's tiles where they are None."""
    chosen = default_tiles(m, n)
    return {k: chosen[k] if k in TILES and v is None else v for k, v in params.items()}


def run(a, b, c, **params):
    t1_blocked.launch(a, b, c, **resolved(a.shape[0], b.shape[1], params))


def bind(a, b, c, **params):
    return t1_blocked.launcher(a, b, c, **resolved(a.shape[0], b.shape[1], params))


def traffic(p, **params):
    return t1_blocked.traffic(p, **resolved(p.m, p.n, params))


def limits(p, **params):
    return t1_blocked.limits(p, **resolved(p.m, p.n, params))


register(Kernel(
    name="tensorcore-f64", rung=22, device="cuda", backend="triton", dtypes=("float64",),
    seed="beyond", summary="Triton tl.dot in float64 on the FP64 tensor cores",
    run=run, bind=bind, traffic=traffic, limits=limits, available=support.available,
    params=tile_params(None, None, None, num_warps=None, num_stages=None) + (
        # past one round: 0.92-0.94 / 0.93-0.97 / 0.97-0.99x DGEMM at 4096³ / 8192³ / 4096x4096x14336
        # in two runs, against 0.88-0.89 / 0.90-0.92 / 0.93-0.96x one program a tile
        # (tensorcore_vs_cublas_f64_persistent_try.jsonl, tensorcore_vs_cublas_f64.jsonl)
        Param("persistent", True, (False, True),
              "past one round of tiles: the persistent TMA program (float64 sums); False: one program a tile"),
        Param("copy_transposed", "a", ("none", "a", "ab"),
              "past one round: operands stored column-major (A, or A and B) copied into rows first, a pass "
              "that counts in the rung's time (DMMA reads a transposed A's tiles slowly)"),),
))
