"""What each suite measures: (kernel, params, dtype, shape) in the order they run.

`cpu`: the CPU rungs against NumPy (what a machine without a GPU can show).
`custom`: the kernels and dtypes a command line names, at square sizes (see selection.py).
`seeds`: the seeds' own experiments, beside their published figures (see seeds.py).
`ladder`: every GPU rung at its default parameters, fp32 and int32, n = 1024 ... 4096.
`shapes`: square, odd, skinny and LLM-like shapes, the fastest SIMT rung against the library.
`tensorcore`: the same shapes for the Triton tensor-core rungs.
`wide`: 150+ generated problems (random, transformer layers, K >> M, N and M, N >> K, four layouts),
    each marked "fit" or "held-out": what a rung is tuned on and what it is judged on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Case:
    kernel: str
    dtype: str
    m: int
    n: int
    k: int
    params: dict = field(default_factory=dict)
    seed: str = ""            # which seed's experiment this reproduces
    host_inputs: bool = False  # inputs start on the host: time the copies too (seed 000)
    layout: str = "nn"        # per operand: n row-major, t a transposed view (tilemm.numerics.data.operands)
    tag: str = ""             # the wide suite's class and split, e.g. "random/fit"
    suite: str = ""           # the suite it belongs to, where one run measures several

    @property
    def key(self):
        return (self.kernel, tuple(sorted(self.params.items())), self.dtype)


def square(kernel, dtype, sizes, seed="", **params):
    return [Case(kernel, dtype, n, n, n, dict(params), seed) for n in sizes]


def cpu_suite(sizes=(256, 512, 1024, 2048)):
    cases = []
    for dtype in ("float32", "int32"):
        for kernel in ("numpy", "cpu-tiled", "cpu-naive"):
            cases += square(kernel, dtype, sizes)
    return cases


def seeds_suite(sizes=None):
    """The seeds' experiments at their own sizes, or every one of them at `sizes` instead."""
    cases = []
    # seed 000: int32 at 2000^2: naive, tiled 16, CPU; with and without the host<->device copies.
    for n in sizes or (2000,):
        for host in (False, True):
            cases += [Case("naive", "int32", n, n, n, {}, "000", host),
                      Case("tiled", "int32", n, n, n, {"tile": 16}, "000", host)]
        cases.append(Case("cpu-naive", "int32", n, n, n, {}, "000"))
    # seed 002: fp64 simple vs shared 16 vs 32; the sum in a register vs in global memory.
    s002 = sizes or (1024, 4096, 8192, 16384)
    cases += square("naive", "float64", s002, "002")
    cases += square("tiled", "float64", s002, "002", tile=16)
    cases += square("tiled", "float64", s002, "002", tile=32)
    cases += square("naive-global", "float64", sizes or (64, 1024, 10240), "002")
    cases += square("naive", "float64", sizes or (64, 10240), "002")
    # seed 003: int32 host vs global vs shared, n = 128 ... 8192.
    s003 = sizes or (128, 256, 512, 1024, 2048, 4096, 8192)
    cases += square("cpu-naive", "int32", s003, "003")
    cases += square("naive", "int32", s003, "003")
    cases += square("tiled", "int32", s003, "003", tile=32)
    # the library on this GPU at every shape above: the bar the seeds never showed
    anchors = {(c.dtype, c.m): Case("cublas", c.dtype, c.m, c.n, c.k, {}, c.seed) for c in cases
               if c.kernel != "cpu-naive" and not c.host_inputs}
    return cases + sorted(anchors.values(), key=lambda c: (c.dtype, c.m))


def ladder_suite(kernels, sizes=(1024, 2048, 4096)):
    """Every GPU rung at its defaults, plus tiled 32 and rect F=4, in float32 and int32 where it
    computes them; the rungs that compute neither (the 16-bit tensor-core rungs) in bfloat16,
    beside the library. A rung is never asked for a dtype it does not compute."""
    cases = []
    for dtype in ("float32", "int32", "bfloat16"):
        for k in kernels:
            if k.device != "cuda" or dtype not in k.dtypes:
                continue
            if dtype == "bfloat16" and k.name != "cublas" and {"float32", "int32"} & set(k.dtypes):
                continue
            cases += square(k.name, dtype, sizes)
            if k.name == "tiled":
                cases += square("tiled", dtype, sizes, tile=32)
            if k.name == "rect":
                cases += square("rect", dtype, sizes, tile=16, f=4)
    return cases


SHAPES = [(4096, 4096, 4096), (1000, 1000, 1000), (3000, 3000, 3000), (8191, 8191, 8191),
          (16, 8192, 8192), (8192, 8192, 128), (4096, 4096, 14336)]


def tensorcore_suite(shapes=None):
    """The Triton tensor-core rungs over the same shapes, each beside the library (tilemm's
    `cublas` rung) in the same dtype: bf16 (`tensorcore`), exact int32 (`tensorcore-int`),
    float32 by 3xTF32 (`tensorcore-f32`), float64 (`tensorcore-f64`), complex64
    (`tensorcore-complex`), and the tutorial-sized rung (`tensorcore-tutorial`) beside `tensorcore`. `shapes`: (m, n, k)s in
    place of SHAPES."""
    pairs = [("tensorcore-tutorial", "bfloat16"), ("tensorcore", "bfloat16"), ("cublas", "bfloat16"),
             ("tensorcore-int", "int32"), ("cublas", "int32"), ("tensorcore-f32", "float32"), ("cublas", "float32"),
             ("tensorcore-f64", "float64"), ("cublas", "float64"), ("tensorcore-complex", "complex64"),
             ("cublas", "complex64")]
    return [Case(k, d, m, n, kk) for k, d in pairs for (m, n, kk) in shapes or SHAPES]


def shapes_suite(kernels=("regblock", "cublas"), shapes=None):
    """Square, odd, skinny and LLM-like shapes (or `shapes`): the fastest SIMT rung against the
    library, fp32."""
    return [Case(k, "float32", m, n, kk) for k in kernels for (m, n, kk) in shapes or SHAPES]


LAYOUTS = ("nn", "nt", "tn", "tt")
WIDE_SEED = 20261124
# (hidden size, MLP ratio, query heads per KV head) of common transformer layers
TRANSFORMERS = [(2048, 4.0, 4), (4096, 3.5, 8), (5120, 8 / 3, 8), (8192, 3.5, 8)]
TOKENS = (1, 8, 64, 512, 4096, 16384)


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    layout: str
    kind: str      # random, transformer, deep-k, shallow-k
    split: str     # "fit" (what configurations may be chosen on) or "held-out" (what they are judged on)


def wide_problems(seed: int = WIDE_SEED) -> list[Problem]:
    """The wide sweep, the same list every time for a seed: 80 problems with M, N, K log-uniform in
    [1, 16384] (half of the dimensions odd), the four GEMMs of each TRANSFORMERS layer (QKV, attention
    out, MLP up, MLP down) at each of TOKENS, 16 with K much larger than M and N and 16 with M and N
    much larger than K; layouts drawn from LAYOUTS; every other problem of each kind held out."""
    rng = np.random.default_rng(seed)

    def log_uniform(lo, hi):
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    def odd_half(d):
        return d | 1 if rng.random() < 0.5 else d & ~1 or 1

    found = []

    def add(m, n, k, kind):
        split = "fit" if sum(p.kind == kind for p in found) % 2 == 0 else "held-out"
        found.append(Problem(m, n, k, LAYOUTS[rng.integers(len(LAYOUTS))], kind, split))
    for _ in range(80):
        add(*(odd_half(log_uniform(1, 16384)) for _ in range(3)), "random")
    for hidden, ratio, group in TRANSFORMERS:
        kv = hidden // group
        mlp = int(round(hidden * ratio / 256)) * 256
        for tokens in TOKENS:
            for n, k in ((hidden + 2 * kv, hidden), (hidden, hidden), (mlp, hidden), (hidden, mlp)):
                add(tokens, n, k, "transformer")
    for _ in range(16):
        add(log_uniform(16, 1024), log_uniform(16, 1024), log_uniform(8192, 65536), "deep-k")
    for _ in range(16):
        add(log_uniform(2048, 16384), log_uniform(2048, 16384), log_uniform(8, 256), "shallow-k")
    return found


WIDE_PAIRS = [("tensorcore", "bfloat16"), ("cublas", "bfloat16"), ("tensorcore", "float16"), ("cublas", "float16"),
              ("tensorcore-f32", "float32"), ("cublas", "float32")]


def wide_suite(pairs=WIDE_PAIRS, split: str | None = None) -> list[Case]:
    """Each rung of `pairs` over the wide sweep (only one split's problems if `split` is given)."""
    return [Case(kernel, dtype, p.m, p.n, p.k, layout=p.layout, tag=f"{p.kind}/{p.split}")
            for p in wide_problems() if split in (None, p.split) for kernel, dtype in pairs]
