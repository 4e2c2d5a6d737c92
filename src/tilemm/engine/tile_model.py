"""`tensorcore`'s tile model: which tiles a product that is not skinny gets, predicted, not timed.

A product runs in whole waves of tiles, one tile an SM at a time; each tile costs its multiply-adds
at a rate that depends on its shape (a 64-row tile drives one warpgroup's wgmma, a 128 x 256 one
two), plus a fixed cost a wave (the pipeline filled, the tile written), plus split K's hand-over of
float32 partials. Big tiles are the most efficient, but few of them can leave SMs idle: the model
weighs the two (tensorcore_launch.default_tiles takes model_tiles' pick). Its constants are fitted by
least squares to kernel-alone times of the wide sweep's fit half (benchmarks/tile_grid.py measures
them and prints fit's result); tests/test_tensorcore.py checks that the shipped constants are that
fit of the committed record.
"""
from __future__ import annotations

import functools
import math

from tilemm.engine import availability

FIT_RECORDS = "benchmarks/results/h100/tile_grid.jsonl"     # the canonical record the constants are fitted on
FIT_SMS = 132      # the records' GPU (an H100 SXM)

# the DMMA program's tiles and stages (r12_fp64_dmma_kernel's, which imports Triton: kept here for
# tensorcore-f64's traffic model and limits, which do not)
DMMA_TILES = dict(block_m=128, block_n=128, block_k=32)
DMMA_STAGES = 3

# K steps a run of split K takes at least: its pipeline fills, and its float32 partial (written
# and read once more) stays small beside the tiles it reads
MIN_SPLIT_STEPS = 8


def k_splits(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, itemsize: int = 2) -> int:
    """Into how many runs of K steps to split each tile (split_k=None): where one round of tiles
    leaves half the SMs or more idle, enough runs to fill them, each of MIN_SPLIT_STEPS K steps or
    more; 1 (no split) otherwise. The run that finishes a tile reads every run's float32 partial
    (hand_over): runs are capped so that those reads are no more than one run's reads of A and B,
    s * bm * bn * 4 <= (steps / s) * (bm + bn) * bk * itemsize (uncapped, a thin deep product such as
    111 x 110 x 49346 took twice the time in 66 runs as in the cap's 24)."""
    tiles = -(-m // block_m) * -(-n // block_n)
    sms = availability.multiprocessors()
    if not tiles or 2 * tiles > sms:         # an empty C, or enough tiles
        return 1
    steps = -(-k // block_k)
    balanced = math.isqrt(steps * (block_m + block_n) * block_k * itemsize // (block_m * block_n * 4))
    return max(1, min(sms // tiles, steps // MIN_SPLIT_STEPS, balanced))


# A skinny product's thin side (M or N) up to which a thin operand not read K-major splits K more
# (thin_splits), the rounds of SMs its runs then fill, and the K steps a run takes at least.
# Fitted on the wide sweep's fit half (kernel alone, bf16, H100; benchmarks/tile_grid.py --skinny,
# benchmarks/results/h100/skinny_grid.jsonl.gz) over side 8-32, rounds 1.5-4 and 4-16 steps. At 64
# rows the split cost more than it won.
THIN_SIDE = 16
THIN_ROUNDS = 2
THIN_SPLIT_STEPS = 12
# K from which a skinny product of 17-64 rows takes tiles as thick as its thin side (the other
# operand read once) with K split by k_splits, where those runs fill half the SMs or more: 16-row
# tiles would read the other operand over again. Fitted on bf16 whole calls on an H200 against
# 16-row tiles (a grid of M 32 / 64 against N x K of transformer weights, and deep-K products): below
# this K a split call's fixed cost loses, and runs that fill fewer SMs lose to the 16-row tiles'.
THICK_FROM_K = 8192
# ... and from half that K for 33-64 rows, whose 16-row tiles read the other operand 3-4 times over
# (measured in bf16 whole calls, M = 64, K = 4608 / 6144: thick tiles clearly faster; at 32 rows
# the 16-row tiles, read twice, were as fast)
THICK_ROWS_FROM = 33


def thick_from_k(rows: int) -> int:
    """The K from which a skinny product of `rows` thin rows (17-64) may take thick tiles."""
    return THICK_FROM_K // 2 if rows >= THICK_ROWS_FROM else THICK_FROM_K


def thin_splits(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int) -> int:
    """Into how many runs of K steps to split the tiles of a skinny product (M or N <= THIN_SIDE)
    whose thin operand is not read K-major (A^T of a few columns, or a vector whose strides are
    both 1): one run a tile, such products read the other operand well below the rate a K-major
    one reaches, so more runs are kept in flight: THIN_ROUNDS rounds of SMs, in runs of
    THIN_SPLIT_STEPS K steps or more."""
    tiles = -(-m // block_m) * -(-n // block_n)
    steps = -(-k // block_k)
    return max(1, min(-(-THIN_ROUNDS * availability.multiprocessors() // max(1, tiles)), steps // THIN_SPLIT_STEPS))


def read_k_major(x, k_dim: int) -> bool:
    """Whether the thin operand x (A: k_dim 1; B: k_dim 0) is read along K: contiguous along K and
    not along its other side (a (1, K) view with strides (1, 1), the transpose of a column, is read
    as an M-major one)."""
    return x.stride(k_dim) == 1 and x.stride(1 - k_dim) != 1


# The tiles the default chooses among for a product that is not skinny: (block_m, block_n,
# num_warps, a multiply-add's cost relative to 128 x 256 tiles, a wave's fixed cost in µs). Fitted
# (fit, below) on the wide sweep's fit half, kernel alone, bf16 on an H100 (FIT_RECORDS): an SM
# does 3.15e6 multiply-adds a µs in 128 x 256 tiles, 1.15x the time in 128 x 128 and 1.89x in
# 64 x 128 (one warpgroup's wgmma), and a wave (pipeline filled, tile written) costs 7.3 / 4.6 /
# 1.7 µs.
TILE_CHOICES = ((128, 256, 8, 1.0, 7.3), (128, 128, 4, 1.15, 4.6), (64, 128, 4, 1.89, 1.7))
MACS_PER_US = 3.15e6
# How much faster a smaller tile must be predicted to be taken: the model errs (fit reports its
# median error), and larger tiles read each operand fewer times, which counts most where TMA reads
# rows that are not 128-byte aligned (bf16 3000³: 128 x 128 tiles predicted slightly faster ran
# clearly slower than 128 x 256).
TILE_MARGIN = 0.05
# µs a byte of split K's float32 partials costs (written, then read by the run that ends the tile)
HAND_OVER_US_PER_BYTE = 2.0e-6


def tile_time(m: int, n: int, k: int, block_m: int, block_n: int, num_warps: int, cost: float, fixed_us: float,
              block_k: int = 64) -> float:
    """Predicted µs of an M x N x K product in block_m x block_n tiles (TILE_CHOICES' cost and fixed
    cost), K split as k_splits would: whole waves of runs (one an SM), each its tile's share of K,
    and the split partials handed over (run_terms, the terms fit weighs)."""
    split_k = k_splits(m, n, k, block_m, block_n, block_k)
    waves, macs, handed = run_terms(m, n, k, dict(block_m=block_m, block_n=block_n, block_k=block_k, split_k=split_k),
                                    availability.multiprocessors())
    return waves * (macs * cost / MACS_PER_US + fixed_us) + handed * HAND_OVER_US_PER_BYTE


def model_tiles(m: int, n: int, k: int) -> tuple:
    """(block_m, block_n, num_warps) of TILE_CHOICES that tile_time predicts fastest, a smaller tile
    only where it is predicted TILE_MARGIN faster than the larger ones."""
    best, best_time = None, math.inf
    for choice in TILE_CHOICES:             # largest first
        predicted = tile_time(m, n, k, *choice)
        if predicted < best_time * (1 - TILE_MARGIN):
            best, best_time = choice, predicted
    return best[:3]


def predicted_us(m: int, n: int, k: int) -> float:
    """tile_time of the tiles model_tiles picks for this product."""
    return tile_time(m, n, k, *TILE_CHOICES[[c[:3] for c in TILE_CHOICES].index(model_tiles(m, n, k))])


# A product whose rows pass a multiple of 128 by a few (2052 = 16 x 128 + 4: 4 sequences of 513
# tokens) can take a whole round of tiles more for those rows, or smaller tiles for all of them.
# Its rows up to SLIVER_ROWS past the multiple are better run apart (sliver_rows): thin tiles that
# read B once at SLIVER_BYTES_PER_US, plus SLIVER_FIXED_US for the launch. A launch made through
# Triton's JIT (an eager call that is not replayed) costs the CPU about EAGER_LAUNCH_US: there the
# rows go apart only where that much GPU time is saved, since such calls wait on the CPU.
SLIVER_ROWS = 32
SLIVER_PAST = 128               # the sliver: the rows past the last multiple of this
SLIVER_BYTES_PER_US = 3.0e6     # (H200, bf16: 4-16 rows x 2048-4096 x 2048-32000 in 6.0-45 µs)
SLIVER_FIXED_US = 3.5
EAGER_LAUNCH_US = 100.0


def sliver_rows(m: int, n: int, k: int, itemsize: int = 2, saving_us: float = 0.0) -> int:
    """The rows past the last multiple of 128 that are predicted faster run apart from the rest
    (the rest in the tiles model_tiles picks for it, those rows reading B once), by saving_us at
    least; or 0. (Remembered by shape: an eager call asks at each launch.)"""
    rest = m % SLIVER_PAST
    if not 0 < rest <= SLIVER_ROWS or m < 2 * SLIVER_PAST:
        return 0
    return rest if rows_apart_pay(m, n, k, itemsize, saving_us, availability.multiprocessors()) else 0


@functools.lru_cache(maxsize=1024)
def rows_apart_pay(m: int, n: int, k: int, itemsize: int, saving_us: float, sms: int) -> bool:
    """sliver_rows' prediction on a GPU of `sms` SMs (the model's own calls read the same count)."""
    rest = m % SLIVER_PAST
    apart = predicted_us(m - rest, n, k) + n * k * itemsize / SLIVER_BYTES_PER_US + SLIVER_FIXED_US
    return apart + saving_us < (1 - TILE_MARGIN) * predicted_us(m, n, k)


# Where the model's smallest tiles (64 x 128), K split by k_splits, leave this share of the SMs or
# more idle, 64 x 64 tiles take their place if their runs are more: k_splits splits a tile half as
# big into more runs (its hand-over is half as big). Fitted on bf16 whole calls, products of 1-15
# tiles of 128 x 128 and K of 8877-40000: never slower where it changes the tiles.
IDLE_SHARE = 0.25


def halved_tiles_fill_more(m: int, n: int, k: int) -> bool:
    """Whether 64 x 64 tiles should replace the model's 64 x 128 ones: where those are split by K
    (IDLE_SHARE)."""
    sms = availability.multiprocessors()

    def runs(block_m: int, block_n: int) -> tuple:
        splits = k_splits(m, n, k, block_m, block_n, 64)
        return -(-m // block_m) * -(-n // block_n) * splits, splits
    wide, splits = runs(64, 128)
    return splits > 1 and wide < (1 - IDLE_SHARE) * sms and runs(64, 64)[0] > wide


def run_terms(m: int, n: int, k: int, params: dict, sms: int) -> tuple:
    """(waves, multiply-adds of a run, float32 bytes handed over) of a configuration, K split as
    params["split_k"] says."""
    bm, bn, bk = params["block_m"], params["block_n"], params["block_k"]
    tiles, steps = -(-m // bm) * -(-n // bn), max(1, -(-k // bk))    # K = 0 still runs its tiles (zeros)
    per = -(-steps // params["split_k"])
    splits = -(-steps // per)
    return -(-tiles * splits // sms), bm * bn * per * bk, tiles * splits * bm * bn * 8 if splits > 1 else 0


def fit(records: list[dict], sms: int = FIT_SMS) -> dict:
    """The model's constants from benchmarks/tile_grid.py's records (each a problem: m, n, k, the
    configurations' params and their median ms), by least squares weighted by 1 / time of
    time = waves * (multiply-adds * a_shape + b_shape) + h * bytes handed over. Returns
    {"rate": multiply-adds a µs an SM in 128 x 256 tiles, "shapes": {(block_m, block_n, num_warps):
    (cost relative to 128 x 256, fixed µs a wave)}, "hand_over": µs a byte, "median_error": of a
    prediction, "near": problems whose fitted pick ran within 10% of the fastest, "problems"}."""
    import numpy as np
    shapes = sorted({(p["block_m"], p["block_n"], p["num_warps"]) for r in records for p in r["params"].values() if p})
    points = [(r, p, r["ms"][label]) for r in records for label, p in r["params"].items() if p and label in r["ms"]]
    x = np.zeros((len(points), 2 * len(shapes) + 1))
    for i, (r, p, _) in enumerate(points):
        waves, macs, handed = run_terms(r["m"], r["n"], r["k"], p, sms)
        s = shapes.index((p["block_m"], p["block_n"], p["num_warps"]))
        x[i, 2 * s], x[i, 2 * s + 1], x[i, -1] = waves * macs, waves, handed
    y = np.array([t * 1e3 for *_, t in points])        # µs
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    base = coef[2 * shapes.index((128, 256, 8))]
    predicted = x @ coef
    near = 0
    for r in records:
        mine = [(predicted[i], t) for i, (rr, _, t) in enumerate(points) if rr is r]
        near += min(mine)[1] <= 1.1 * min(t for _, t in mine)
    error = float(np.median(np.abs(np.log(np.maximum(predicted, 1e-9) / y))))
    return {"rate": 1 / base, "shapes": {shape: (coef[2 * s] / base, coef[2 * s + 1]) for s, shape in enumerate(shapes)},
            "hand_over": coef[-1], "median_error": math.expm1(error), "near": near, "problems": len(records)}
