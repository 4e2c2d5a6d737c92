"""The seeds' own published figures, to print beside what this machine measures.

Each entry: (seed, experiment, kernel in tilemm's ladder, dtype, n, value, unit, note).
Units: "ms" is a time for one n x n x n product; "GFLOP/s" is 2n^3 / time.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    seed: str
    experiment: str
    kernel: str
    params: tuple
    dtype: str
    n: int
    value: float
    unit: str
    where: str


V100 = "V100 (tianhe2-K), wall clock incl. cudaMalloc + copies (+ context start for naive)"
A100 = "A100 (JUWELS Booster)"
S003 = "seed 003's GPU (unnamed), BLOCK_SIZE 32"

FIGURES: list[Published] = [
    # seed 000: int32, 2000 x 2000, all ones; times include allocation and host<->device copies.
    Published("000", "int32 2000^2", "naive", (), "int32", 2000, 432.435, "ms", V100),
    Published("000", "int32 2000^2", "tiled", (("tile", 16),), "int32", 2000, 25.7345, "ms", V100),
    Published("000", "int32 2000^2", "cpu-naive", (), "int32", 2000, 23042.4, "ms", "host CPU (tianhe2-K)"),
]
# seed 002: fp64 on an A100, GFLOP/s at n = 1024 ... 16384.
for n, simple, s16, s32 in [(1024, 286, 296, 339), (4096, 1186, 952, 1369),
                            (8192, 1554, 1560, 1945), (16384, 1769, 1742, 2205)]:
    FIGURES += [Published("002", "fp64 simple vs shared", "naive", (), "float64", n, simple, "GFLOP/s", A100),
                Published("002", "fp64 simple vs shared", "tiled", (("tile", 16),), "float64", n, s16, "GFLOP/s", A100),
                Published("002", "fp64 simple vs shared", "tiled", (("tile", 32),), "float64", n, s32, "GFLOP/s", A100)]
# seed 002: the sum in a register ("with cvalue") vs accumulating into C in global memory.
for n, reg, direct in [(64, 1.1, 0.9), (1024, 286.2, 198.3), (10240, 1587.1, 562.2)]:
    FIGURES += [Published("002", "register vs direct write", "naive", (), "float64", n, reg, "GFLOP/s", A100),
                Published("002", "register vs direct write", "naive-global", (), "float64", n, direct, "GFLOP/s", A100)]
# seed 003: int32, host vs global vs shared memory, GFLOP/s and seconds.
for n, cpu, glob, shared in [(128, 0.3, 11.3, 37.2), (256, 0.2, 28.9, 99.5), (512, 0.2, 38.7, 146.6),
                             (1024, 0.1, 77.2, 220.3), (2048, 0.1, 112.5, 235.2), (4096, 0.1, 121.6, 268.9),
                             (8192, 0.3, 146.3, 291.5)]:
    FIGURES += [Published("003", "int32 host vs global vs shared", "cpu-naive", (), "int32", n, cpu, "GFLOP/s", S003),
                Published("003", "int32 host vs global vs shared", "naive", (), "int32", n, glob, "GFLOP/s", S003),
                Published("003", "int32 host vs global vs shared", "tiled", (("tile", 32),), "int32", n, shared,
                          "GFLOP/s", S003)]


def published(seed: str, kernel: str, params: dict, dtype: str, n: int) -> Published | None:
    """The seed's figure for this measurement, if the seed published one."""
    for f in FIGURES:
        if (f.seed, f.kernel, f.dtype, f.n) == (seed, kernel, dtype, n) and \
                all(params.get(k) == v for k, v in f.params):
            return f
    return None
