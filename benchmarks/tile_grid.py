"""Where `tensorcore`'s tile model (tilemm.engine.tile_model) comes from: the kernel-alone time of
tile configurations over the wide sweep's fit half (bf16, products of 5e8 flops or more), beside
torch.matmul, interleaved rounds; then a least-squares fit of the model's constants.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tile_grid.py --out DIR [--split fit] [--workers 12]
    python3 benchmarks/tile_grid.py --fit DIR/tile_grid.jsonl

Measuring compiles every configuration first in worker processes (Triton's disk cache), then
times them in one, each answer checked against a float64 product first (tensorcore_vs_cublas.checked). --fit prints tile_model.fit: each tile shape's cost relative to 128 x 256 tiles
and fixed cost a wave, the rate, the hand-over's cost (to set against TILE_CHOICES, MACS_PER_US and
HAND_OVER_US_PER_BYTE), the median error of a prediction (which TILE_MARGIN stays under), and how
often the fitted model picks a configuration within 10% of the fastest measured.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys

import harness

TILES = [(128, 256, 8), (256, 128, 8), (128, 128, 8), (128, 128, 4), (64, 128, 4), (128, 64, 4), (64, 64, 4)]


SKINNY_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def candidates(m: int, n: int, k: int) -> list:
    """(label, params) of the configurations timed: for a product not skinny, each tile shape with
    K unsplit and, where its tiles leave SMs idle, split to fill them (and half that); for a
    skinny one (M or N <= 64), the default tiles with K split into SKINNY_SPLITS runs of 2 K steps
    or more; None: the shipped default."""
    from tilemm.ladder.tensorcore.r10_tensorcore import default_tiles
    from tilemm.engine.tile_model import FIT_SMS, MIN_SPLIT_STEPS
    if min(m, n) <= 64:
        tiles = default_tiles(m, n, k)
        steps = -(-k // tiles["block_k"])
        return [(f"{tiles['block_m']}x{tiles['block_n']}s{s}", dict(tiles, group_m=8, split_k=s))
                for s in SKINNY_SPLITS if s == 1 or steps // s >= 2] + [("default", None)]
    out = []
    steps = -(-k // 64)
    for bm, bn, w in TILES:
        tiles = -(-m // bm) * -(-n // bn)
        splits = {1}
        if tiles < FIT_SMS:
            s = min(FIT_SMS // tiles, steps // MIN_SPLIT_STEPS)
            splits |= {s} if s >= 2 else set()
            splits |= {s // 2} if s >= 4 else set()
        out += [(f"{bm}x{bn}w{w}s{s}", dict(block_m=bm, block_n=bn, block_k=64, group_m=8, num_warps=w, num_stages=4,
                                            split_k=s)) for s in sorted(splits)]
    return out + [("default", None)]


def problems(split: str, skinny: bool = False) -> list:
    """The wide sweep's problems of one half of 5e8 flops or more, not skinny; skinny: those with
    M or N <= 64, of 2e7 flops or more."""
    from tilemm.tools.bench.suites import wide_problems
    return sorted((p for p in wide_problems() if p.split == split and (
        2 * p.m * p.n * p.k >= 2e7 and min(p.m, p.n) <= 64 if skinny else 2 * p.m * p.n * p.k >= 5e8 and min(p.m, p.n) > 64)),
                  key=lambda p: p.m * p.n * p.k)


def operands(p):
    """Random bf16 A and B of problem p in its layout."""
    import torch
    torch.manual_seed(p.m * 7 + p.n * 13 + p.k)
    return harness.operand(p.m, p.k, p.layout[0], "bfloat16"), harness.operand(p.k, p.n, p.layout[1], "bfloat16")


def launcher(a, b, c, params):
    from tilemm.ladder.tensorcore import r10_tensorcore
    if params is None:
        return r10_tensorcore.bind(a, b, c, None, None, None, 8, None, None)
    return r10_tensorcore.bind(a, b, c, **params)


def compile_problem(job):
    """Compile (and run once) every candidate of one problem: a worker's share."""
    index, split, skinny = job
    import torch
    p = problems(split, skinny)[index]
    a, b = operands(p)
    c = torch.empty(p.m, p.n, dtype=torch.bfloat16, device="cuda")
    for _, params in candidates(p.m, p.n, p.k):
        launcher(a, b, c, params)()
    torch.cuda.synchronize()


def measure(args):
    import torch
    from tilemm.system.timing import interleaved_rounds
    stamp = harness.stamp("tile_grid.py", args)
    found = problems(args.split, args.skinny)
    with mp.get_context("spawn").Pool(args.workers) as pool:
        list(pool.imap_unordered(compile_problem, [(i, args.split, args.skinny) for i in range(len(found))]))
    harness.prewarm(8)                       # the clock settled at the power cap before timing
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "skinny_grid.jsonl" if args.skinny else "tile_grid.jsonl"), "w") as f:
        for p in found:
            a, b = operands(p)
            c_lib = torch.empty(p.m, p.n, dtype=torch.bfloat16, device="cuda")
            launches, bad = {"cublas": lambda: torch.matmul(a, b, out=c_lib)}, []
            for label, params in candidates(p.m, p.n, p.k):
                c = torch.full((p.m, p.n), float("nan"), dtype=torch.bfloat16, device="cuda")
                go = launcher(a, b, c, params)
                go()
                if not harness.float64_check(c, a, b, "bfloat16")[0]:   # float64 reference; NaN (unwritten) fails
                    bad.append(label)
                    continue
                launches[label] = go
            times = interleaved_rounds(launches, rounds=3, per_round_s=0.01)
            ms = {label: statistics.median(t) for label, t in times.items()}
            f.write(json.dumps(dict(m=p.m, n=p.n, k=p.k, layout=p.layout, kind=p.kind, split=p.split, ms=ms,
                                    params=dict(candidates(p.m, p.n, p.k)), failed_check=bad, **stamp)) + "\n")
            f.flush()
            best = min((t, label) for label, t in ms.items() if label != "cublas")
            print(f"{p.m}x{p.n}x{p.k} {p.layout} cuBLAS {ms['cublas'] * 1e3:.1f} µs, default "
                  f"{ms.get('default', math.nan) * 1e3:.1f}, fastest {best[1]} {best[0] * 1e3:.1f}"
                  + (f", failed the check: {bad}" if bad else ""), flush=True)


def fit(path: str):
    """Print tile_model.fit of a tile_grid.jsonl: the constants to set against tile_model's."""
    from tilemm.engine import tile_model
    found = tile_model.fit([json.loads(line) for line in open(path)])
    print(f"{found['problems']} problems; rate {found['rate']:.3g} multiply-adds a µs an SM (128 x 256)")
    for (bm, bn, warps), (cost, fixed) in found["shapes"].items():
        print(f"  {bm:3d} x {bn:3d}, {warps} warps: cost {cost:.2f}, fixed {fixed:.1f} µs a wave")
    print(f"  hand-over {found['hand_over']:.3g} µs a byte")
    print(f"median error of a prediction: {found['median_error']:.0%}")
    print(f"the model's pick within 10% of the fastest: {found['near']} of {found['problems']} problems")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="measure into DIR/tile_grid.jsonl")
    ap.add_argument("--split", default="fit", choices=["fit", "held-out"])
    ap.add_argument("--skinny", action="store_true",
                    help="the skinny problems (M or N <= 64) and their K splits, into DIR/skinny_grid.jsonl")
    ap.add_argument("--workers", type=int, default=12, help="processes compiling the configurations")
    ap.add_argument("--fit", help="fit the model to a tile_grid.jsonl instead of measuring")
    args = ap.parse_args()
    if args.fit:
        fit(args.fit)
    elif args.out:
        sys.exit(measure(args))
    else:
        ap.error("--out DIR or --fit FILE")


if __name__ == "__main__":
    main()
