"""cpu-tiled against NumPy at one size, in interleaved calls, so a noisy shared CPU moves both
alike (the suite times them minutes apart). The ratio of the medians is the figure to quote.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/cpu_interleaved.py --n 1024
"""
import argparse
import json
import os

import tilemm
from tilemm.numerics.accuracy import compare
from tilemm.numerics.data import operands

import harness


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "int32"])
    args = ap.parse_args()
    stamp = harness.stamp("cpu_interleaved.py", args, env="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE", runner="python")
    for dtype in args.dtypes:
        a, b = operands(1, args.n, args.n, args.n, dtype)
        launches = {}
        for kernel in ("numpy", "cpu-tiled"):
            plan = tilemm.plan(a, b, kernel=kernel)
            verdict = compare(plan.execute(poison=True), a, b, dtype)
            assert verdict.ok, verdict.message
            launches[kernel] = plan.prepare()[0]
            launches[kernel]()
        rounds = args.rounds if dtype != "int32" else 3  # NumPy's integer loop takes seconds
        med = harness.medians(harness.rounds(launches, rounds, lambda launch: harness.timed(launch, lambda: None)[0]))
        print(json.dumps({"dtype": dtype, "n": args.n, "rounds": rounds,
                          "numpy_gflops": 2 * args.n**3 / med["numpy"] / 1e9,
                          "cpu_tiled_gflops": 2 * args.n**3 / med["cpu-tiled"] / 1e9,
                          "cpu_tiled_vs_numpy": med["numpy"] / med["cpu-tiled"], "cores": os.cpu_count(), **stamp}))


if __name__ == "__main__":
    main()
