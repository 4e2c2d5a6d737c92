"""What a repeated eager call of tilemm.matmul costs on CPU torch tensors, in two source trees (say
this one and a checkout of an earlier version), in interleaved rounds: each round runs one
process per tree in turn, so a noisy shared CPU moves both alike. A process times blocks of
calls and keeps its fastest block; the figure to quote is the median over rounds and the
ratio of the medians. A call that records a gradient (autograd) is timed too, in trees that
take one.

    python3 benchmarks/eager_overhead.py --trees src /path/to/other/checkout/src --rounds 9
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch, tilemm
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
try:
    result["tilemm, grad"] = fastest(lambda: tilemm.matmul(a, w))
except TypeError:
    pass                                   # a version that refuses a tensor requiring grad
print(json.dumps(result))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs=2, required=True, help="two src folders to import tilemm from")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    times = {tree: {} for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
            line = subprocess.run([sys.executable, "-c", CHILD, str(args.n), str(args.calls), str(args.blocks)],
                                  env=env, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            for label, us in json.loads(line).items():
                times[tree].setdefault(label, []).append(us)
    medians = {tree: {label: statistics.median(v) for label, v in per.items()} for tree, per in times.items()}
    first, second = args.trees
    print(json.dumps({"n": args.n, "dtype": "float32", "device": "cpu", "rounds": args.rounds,
                      "median_us": medians,
                      "tilemm_ratio": medians[first]["tilemm"] / medians[second]["tilemm"],
                      "torch_ratio": medians[first]["torch"] / medians[second]["torch"]}, indent=1))


if __name__ == "__main__":
    main()
