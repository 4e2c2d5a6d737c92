"""Where `tensorcore`'s tile model (t1_blocked.TILE_CHOICES) comes from: the kernel-alone time of
tile configurations over the wide sweep's fit half (bf16, products of 5e8 flops or more), beside
torch.matmul, interleaved rounds; then a least-squares fit of the model's constants.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tile_grid.py --out DIR [--split fit] [--workers 12]
    python3 benchmarks/tile_grid.py --fit DIR/tile_grid.jsonl

Measuring compiles every configuration first in worker processes (Triton's disk cache), then
times them in one. The fit models a configuration's time as whole waves of tiles (one an SM), each
its tile's multiply-adds over the SM's rate times a cost per tile shape plus a fixed cost a wave,
and split K's float32 partials: it prints the cost relative to 128 x 256 tiles, the fixed cost and
the rate, to set against TILE_CHOICES and MACS_PER_US, the median error of a prediction (which
TILE_MARGIN stays under), and how often the fitted model picks a configuration within 10% of the
fastest measured.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time

TILES = [(128, 256, 8), (256, 128, 8), (128, 128, 8), (128, 128, 4), (64, 128, 4), (128, 64, 4), (64, 64, 4)]
SMS = 132


def candidates(m: int, n: int, k: int) -> list:
    """(label, params) of the configurations timed for a product not skinny: each tile shape with
    K unsplit and, where its tiles leave SMs idle, split to fill them (and half that); None: the
    shipped default."""
    out = []
    steps = -(-k // 64)
    for bm, bn, w in TILES:
        tiles = -(-m // bm) * -(-n // bn)
        splits = {1}
        if tiles < SMS:
            s = min(SMS // tiles, steps // 8)
            splits |= {s} if s >= 2 else set()
            splits |= {s // 2} if s >= 4 else set()
        out += [(f"{bm}x{bn}w{w}s{s}", dict(block_m=bm, block_n=bn, block_k=64, group_m=8, num_warps=w, num_stages=4,
                                            split_k=s)) for s in sorted(splits)]
    return out + [("default", None)]


def problems(split: str) -> list:
    from tilemm.bench.suites import wide_problems
    return sorted((p for p in wide_problems() if p.split == split and 2 * p.m * p.n * p.k >= 5e8 and min(p.m, p.n) > 64),
                  key=lambda p: p.m * p.n * p.k)


def operands(p):
    import torch
    torch.manual_seed(p.m * 7 + p.n * 13 + p.k)

    def make(rows, cols, how):
        x = torch.randn((cols, rows) if how == "t" else (rows, cols), device="cuda", dtype=torch.bfloat16)
        return x.T if how == "t" else x
    return make(p.m, p.k, p.layout[0]), make(p.k, p.n, p.layout[1])


def launcher(a, b, c, params):
    from tilemm.ladder.tensorcore import t1_blocked
    if params is None:
        return t1_blocked.bind(a, b, c, None, None, None, 8, None, None)
    return t1_blocked.bind(a, b, c, **params)


def compile_problem(job):
    """Compile (and run once) every candidate of one problem: a worker's share."""
    index, split = job
    import torch
    p = problems(split)[index]
    a, b = operands(p)
    c = torch.empty(p.m, p.n, dtype=torch.bfloat16, device="cuda")
    for _, params in candidates(p.m, p.n, p.k):
        launcher(a, b, c, params)()
    torch.cuda.synchronize()


def measure(args):
    import torch
    from tilemm import machine
    from tilemm.timing import interleaved_rounds
    stamp = machine.stamp(machine.command_line(
        "PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tile_grid.py", args))
    found = problems(args.split)
    with mp.get_context("spawn").Pool(args.workers) as pool:
        list(pool.imap_unordered(compile_problem, [(i, args.split) for i in range(len(found))]))
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t_end = time.perf_counter() + 8
    while time.perf_counter() < t_end:       # the clock settled at the power cap before timing
        x @ x
    torch.cuda.synchronize()
    del x
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tile_grid.jsonl"), "w") as f:
        for p in found:
            a, b = operands(p)
            ref = a.float() @ b.float()
            scale = (a.float().abs() @ b.float().abs()).max().item()
            c_lib = torch.empty(p.m, p.n, dtype=torch.bfloat16, device="cuda")
            launches, bad = {"cublas": lambda: torch.matmul(a, b, out=c_lib)}, []
            for label, params in candidates(p.m, p.n, p.k):
                c = torch.full((p.m, p.n), float("nan"), dtype=torch.bfloat16, device="cuda")
                go = launcher(a, b, c, params)
                go()
                err = (c.float() - ref).abs().max().item() / scale      # NaN (an unwritten element) fails
                if not err <= 2**-7:
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


def model_terms(m, n, k, p):
    """(waves, multiply-adds of a run, float32 bytes handed over) of configuration p."""
    bm, bn, bk = p["block_m"], p["block_n"], p["block_k"]
    tiles, steps = -(-m // bm) * -(-n // bn), -(-k // bk)
    per = -(-steps // p["split_k"])
    splits = -(-steps // per)
    return -(-tiles * splits // SMS), bm * bn * per * bk, tiles * splits * bm * bn * 8 if splits > 1 else 0


def fit(path: str):
    """Least squares, weighted by 1/time, of time = waves * (macs * a_shape + b_shape) + h * bytes."""
    import numpy as np
    rows = [json.loads(line) for line in open(path)]
    shapes = sorted({(p["block_m"], p["block_n"], p["num_warps"]) for r in rows for p in r["params"].values() if p})
    points = [(r, label, p, r["ms"][label]) for r in rows for label, p in r["params"].items()
              if p and label in r["ms"]]
    x = np.zeros((len(points), 2 * len(shapes) + 1))
    for i, (r, _, p, _) in enumerate(points):
        waves, macs, handed = model_terms(r["m"], r["n"], r["k"], p)
        s = shapes.index((p["block_m"], p["block_n"], p["num_warps"]))
        x[i, 2 * s], x[i, 2 * s + 1], x[i, -1] = waves * macs, waves, handed
    y = np.array([t * 1e3 for *_, t in points])        # µs
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    base = coef[2 * shapes.index((128, 256, 8))]
    print(f"{len(points)} times of {len(rows)} problems; rate {1 / base:.3g} multiply-adds a µs an SM (128 x 256)")
    for s, shape in enumerate(shapes):
        print(f"  {shape[0]:3d} x {shape[1]:3d}, {shape[2]} warps: cost {coef[2 * s] / base:.2f}, "
              f"fixed {coef[2 * s + 1]:.1f} µs a wave")
    print(f"  hand-over {coef[-1]:.3g} µs a byte")
    predicted = x @ coef
    error = np.median(np.abs(np.log(np.maximum(predicted, 1e-9) / y)))
    print(f"median error of a prediction: {math.expm1(error):.0%}")
    near = 0
    for r in rows:
        mine = [(predicted[i], t) for i, (rr, *_, t) in enumerate(points) if rr is r]
        near += min(mine)[1] <= 1.1 * min(t for _, t in mine)
    print(f"the model's pick within 10% of the fastest: {near} of {len(rows)} problems")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="measure into DIR/tile_grid.jsonl")
    ap.add_argument("--split", default="fit", choices=["fit", "held-out"])
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
