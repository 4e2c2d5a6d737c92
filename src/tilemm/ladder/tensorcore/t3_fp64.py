"""Rung 22, `tensorcore-f64`: float64 on the H100's FP64 tensor cores (DMMA), in Triton: the
programs of `tensorcore` (t1_blocked_kernel.py) with float64 tiles and a float64 accumulator, the
persistent TMA one past one round of tiles, the pointer one otherwise.

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
    params=tile_params(128, 128, 32, num_warps=8, num_stages=3) + (
        # past one round: 0.92 / 0.97 / 0.99x DGEMM at 4096³ / 8192³ / 4096x4096x14336, against
        # 0.89 / 0.92 / 0.96x one program a tile (tensorcore_vs_cublas_f64_persistent_try.jsonl)
        Param("persistent", True, (False, True),
              "past one round of tiles: the persistent TMA program (float64 sums); False: one program a tile"),),
))
