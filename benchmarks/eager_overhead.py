"""What a repeated eager call of tilemm.matmul costs, in two source trees (say this one and a
checkout of an earlier version), in interleaved rounds: each round runs one process per tree in
turn, so a noisy shared machine moves both alike. A process times blocks of calls and keeps its
fastest block; the figure to quote is the median over rounds and the ratio of the medians.

On CPU torch tensors (--device cpu, the default), float32 --n cubed, beside torch.matmul, and the
same product on NumPy arrays beside numpy.matmul; a call that records a gradient (autograd) is
timed too, in trees that take one. On CUDA tensors (--device cuda), the
whole calls of CUDA_CASES beside torch.matmul's on the same operands, each answer checked first
against a float64 reference, one synchronization at the end of each block.

    python3 benchmarks/eager_overhead.py --trees src /path/to/other/checkout/src --rounds 9
    python3 benchmarks/eager_overhead.py --trees src OTHER/src --n 8      # a small call's host overhead
    PYTHONPATH=src python3 benchmarks/eager_overhead.py --device cuda --trees src OTHER/src --out DIR
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import harness

CHILD = r"""
import json, sys, time
import numpy as np, torch, tilemm
torch.set_num_threads(1)
n, calls, blocks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
a, b = torch.randn(n, n), torch.randn(n, n)
w = torch.randn(n, n, requires_grad=True)

def fastest(call):
    call()
    best = float("inf")
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6

result = {"tilemm": fastest(lambda: tilemm.matmul(a, b)), "torch": fastest(lambda: torch.matmul(a, b))}
x, y = a.numpy().copy(), b.numpy().copy()         # the same product on NumPy arrays
result["tilemm, numpy"], result["numpy"] = fastest(lambda: tilemm.matmul(x, y)), fastest(lambda: np.matmul(x, y))
try:
    result["tilemm, grad"] = fastest(lambda: tilemm.matmul(a, w))
except TypeError:
    pass                                   # a version that refuses a tensor requiring grad
print(json.dumps(result))
"""

# (dtype, size, kernel): None is the default a user gets
CUDA_CASES = [("bfloat16", 64, None), ("bfloat16", 512, None), ("bfloat16", 512, "tensorcore"), ("float32", 512, None)]

CUDA_CHILD = r"""
import json, sys, time
import torch, tilemm
from tilemm.numerics.accuracy import compare_on_device
torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False      # torch's float32 is SGEMM, as tilemm's default
calls, blocks, cases = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])

def fastest(call):
    call()
    best = float("inf")
    for _ in range(blocks):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6

result, wrong = {}, {}
for dtype, n, kernel in cases:
    g = torch.Generator(device="cuda").manual_seed(n)
    a, b = (torch.randn(n, n, generator=g, device="cuda").to(getattr(torch, dtype)) for _ in range(2))
    calls_of = {f"{dtype} {n}^3 kernel={kernel}": lambda: tilemm.matmul(a, b, kernel=kernel),
                f"{dtype} {n}^3 torch.matmul": lambda: torch.matmul(a, b)}
    for label, call in calls_of.items():
        if label in result:
            continue
        try:
            verdict = compare_on_device(call(), a, b, dtype)
        except Exception as e:                     # a tree that refuses the call: recorded, not timed
            wrong[label] = f"{type(e).__name__}: {e}"
            continue
        if verdict.ok:
            result[label] = fastest(call)
        else:
            wrong[label] = verdict.message
print(json.dumps({"times": result, "wrong": wrong}))
"""


def run_round(tree: str, args) -> tuple[dict, dict]:
    """One process importing tilemm from `tree`: ({label: fastest block's us per call}, {label: why wrong})."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
    if args.device == "cuda":
        argv = [CUDA_CHILD, str(args.calls), str(args.blocks), json.dumps(CUDA_CASES)]
    else:
        argv = [CHILD, str(args.n), str(args.calls), str(args.blocks)]
    found, error = harness.child_lines([sys.executable, "-c", *argv], env)
    if error:
        raise SystemExit(f"the process importing tilemm from {tree} failed: {error}")
    if args.device == "cuda":
        return found[-1]["times"], found[-1]["wrong"]
    return found[-1], {}


def write(out: str, record: dict, args):
    """Append the record, stamped, to OUT/eager_overhead.jsonl (tilemm from PYTHONPATH for the stamp)."""
    stamp = harness.stamp("eager_overhead.py", args, env="PYTHONPATH=src")
    Path(out).mkdir(parents=True, exist_ok=True)
    harness.append(Path(out) / "eager_overhead.jsonl",
                   [{**record, "tensors": record["device"], **stamp}])      # the stamp's device: the machine


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs=2, required=True, help="two src folders to import tilemm from")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=int, default=64, help="the size on the CPU (CUDA_CASES name their own)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", help="a folder: append the record to OUT/eager_overhead.jsonl")
    args = ap.parse_args()
    times = {tree: {} for tree in args.trees}
    wrong = {tree: {} for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            got, bad = run_round(tree, args)
            for label, us in got.items():
                times[tree].setdefault(label, []).append(us)
            wrong[tree].update(bad)
    medians = {tree: {label: statistics.median(v) for label, v in per.items()} for tree, per in times.items()}
    first, second = args.trees
    if args.device == "cuda":
        record = {"device": "cuda", "trees": args.trees, "rounds": args.rounds, "calls": args.calls,
                  "blocks": args.blocks, "median_us": medians,
                  "ratios": {label: medians[first][label] / medians[second][label]
                             for label in medians[first] if label in medians[second]},
                  "wrong": wrong}
        for label in dict.fromkeys([*medians[first], *medians[second]]):
            us = [f"{medians[tree][label]:8.1f} us" if label in medians[tree] else "   WRONG   " for tree in args.trees]
            ratio = record["ratios"].get(label)
            print(f"{label:40} {us[0]}  {us[1]}  {'' if ratio is None else f'{ratio:5.3f}x'}")
        print(f"(ratio: {first}'s median over {second}'s)")
    else:
        record = {"n": args.n, "dtype": "float32", "device": "cpu", "rounds": args.rounds,
                  "median_us": medians,
                  "tilemm_ratio": medians[first]["tilemm"] / medians[second]["tilemm"],
                  "torch_ratio": medians[first]["torch"] / medians[second]["torch"],
                  "tilemm_numpy_ratio": medians[first]["tilemm, numpy"] / medians[second]["tilemm, numpy"],
                  "numpy_ratio": medians[first]["numpy"] / medians[second]["numpy"]}
    print(json.dumps(record, indent=1))
    if args.out:
        write(args.out, record, args)


if __name__ == "__main__":
    main()
