"""Rung 22, `tensorcore-f64`: float64 on the H100's FP64 tensor cores (DMMA), in Triton: the
program of `tensorcore` (t1_blocked_kernel.py) with float64 tiles and a float64 accumulator.

Constraints: float64 only; any M, N, K, any strides; shared memory of a configuration (eight
bytes an element) must fit the GPU (checked before launch).
"""
from __future__ import annotations

from ...registry import Kernel, Param, register
from .. import _tensorcore_support as support
from .t1_blocked import launch, launcher, limits, tile_params, traffic

register(Kernel(
    name="tensorcore-f64", rung=22, device="cuda", backend="triton", dtypes=("float64",),
    seed="beyond", summary="Triton tl.dot in float64 on the FP64 tensor cores",
    run=launch, bind=launcher, traffic=traffic, limits=limits, available=support.available,
    params=tile_params(128, 128, 32, num_warps=8, num_stages=3) + (   # 0.93x DGEMM at 4096 and 8192
        Param("persistent", False, (False, True),
              "past one round of tiles: the persistent TMA program (float64 sums) instead of one program a tile"),),
))
