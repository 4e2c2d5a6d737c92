"""The core speed figures of two source trees (say this one and a checkout of an earlier version),
in interleaved rounds: each round runs one process per tree, the order alternating, so a GPU at
its power cap moves both alike. Each process times the same products through the public API only
(tilemm.matmul, tilemm.scaled_matmul), so any two versions compare: bf16 and fp16 8192^3, float32
(3xTF32) and float64 4096^3, int8 -> int32 8192^3, fp8 e4m3 8192^3 with tensor-wise scales, and
the whole-call cost of a repeated small call (bf16 64^3). Every answer is checked against torch
before it is timed; the figure is the median over rounds, and the ratio of the two medians.

    PYTHONPATH=src python3 benchmarks/before_after.py --trees src OTHER/src --rounds 4 --out DIR

--rungs times named rungs instead, KERNEL:DTYPE:N (N^3, through tilemm.matmul(a, b, kernel=KERNEL);
complex products counted in real flops, 8 N^3), with :call for the whole-call cost in µs instead:

    PYTHONPATH=src python3 benchmarks/before_after.py --trees src OTHER/src --rounds 6 \
        --rungs tensorcore-complex:complex64:512 tensorcore-complex:complex64:512:call tensorcore-f32:float32:4096
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
import tilemm
torch.backends.cuda.matmul.allow_tf32 = False
cases, prewarm_s = json.loads(sys.argv[1]), float(sys.argv[2])
gen = torch.Generator(device="cuda").manual_seed(7)

def operands(dtype, n):
    if dtype == "int8":
        make = lambda: torch.randint(-3, 4, (n, n), device="cuda", dtype=torch.int8, generator=gen)
    elif dtype == "fp8":
        make = lambda: (torch.randn(n, n, device="cuda", generator=gen) / 4).to(torch.float8_e4m3fn)
    else:
        make = lambda: torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype), generator=gen)
    return make(), make()

def product(dtype, a, b, kernel=None):
    if kernel:
        return lambda: tilemm.matmul(a, b, kernel=kernel)
    if dtype == "int8":
        return lambda: tilemm.matmul(a, b, out_dtype="int32")
    if dtype == "fp8":
        one = torch.ones((), device="cuda")
        bt = b.t().contiguous().t()
        return lambda: tilemm.scaled_matmul(a, bt, one, one, out_dtype=torch.bfloat16)
    return lambda: tilemm.matmul(a, b)

def check(dtype, a, b, c):
    if dtype == "int8":
        ok = torch.equal(c, (a.float() @ b.float()).to(torch.int32))     # sums below 2^24: exact
    else:
        wide = torch.complex128 if a.is_complex() else torch.float64
        ref = a.to(wide) @ b.to(wide)
        tol = {"float64": 1e-12, "float32": 1e-5, "complex64": 1e-5, "complex128": 1e-12, "fp8": 1e-2}.get(dtype, 1e-2)
        ok = ((c.to(ref.dtype) - ref).norm() / ref.norm()).item() < tol
    if not ok:
        raise SystemExit(f"wrong answer: {dtype}")

def kernel_ms(call, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record(); call(); end.record(); end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]

def call_us(call, calls=2000):
    call(); torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6

a, b = operands("bfloat16", 8192)
t_end = time.perf_counter() + prewarm_s
while time.perf_counter() < t_end:
    a @ b
torch.cuda.synchronize()
result = {}
for name, dtype, n, what, *kernel in cases:
    a, b = operands(dtype, n)
    call = product(dtype, a, b, *kernel)
    check(dtype, a, b, call())
    if what == "call":
        result[name] = call_us(call)
    else:
        kernel_ms(call, 3)
        flops = (8 if a.is_complex() else 2) * n ** 3
        result[name] = flops / kernel_ms(call, 15) / 1e9      # TFLOP/s
print(json.dumps(result))
"""

CASES = [("bf16 8192^3 TFLOP/s", "bfloat16", 8192, "speed"), ("fp16 8192^3 TFLOP/s", "float16", 8192, "speed"),
         ("float32 4096^3 TFLOP/s", "float32", 4096, "speed"), ("float64 4096^3 TFLOP/s", "float64", 4096, "speed"),
         ("int8 8192^3 TOP/s", "int8", 8192, "speed"), ("fp8 8192^3 TFLOP/s", "fp8", 8192, "speed"),
         ("bf16 64^3 whole call µs", "bfloat16", 64, "call")]


def rung_cases(specs: list[str]) -> list:
    """CASES rows of KERNEL:DTYPE:N[:call] specs."""
    rows = []
    for spec in specs:
        kernel, dtype, n, *call = spec.split(":")
        if call not in ([], ["call"]) or not n.isdigit():
            raise SystemExit(f"--rungs {spec!r}: KERNEL:DTYPE:N or KERNEL:DTYPE:N:call")
        what = "call" if call else "speed"
        unit = "whole call µs" if call else "TFLOP/s"
        rows.append((f"{kernel} {dtype} {n}^3 {unit}", dtype, int(n), what, kernel))
    return rows


def run(tree: str, prewarm_s: float, cases: list) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tree).resolve()), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases), str(prewarm_s)], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs=2, required=True, help="two source trees (the folder holding tilemm/)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--prewarm", type=float, default=3.0, help="seconds of bf16 products before timing")
    parser.add_argument("--rungs", nargs="+", metavar="KERNEL:DTYPE:N[:call]",
                        help="time these rungs instead of the core figures")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = rung_cases(args.rungs) if args.rungs else CASES
    seen = {tree: [] for tree in args.trees}
    for round_ in range(args.rounds):
        order = args.trees if round_ % 2 == 0 else args.trees[::-1]
        for tree in order:
            seen[tree].append(run(tree, args.prewarm if round_ else 10.0, cases))
    first, second = args.trees
    rows = []
    for name, *_ in cases:
        med = {tree: statistics.median(r[name] for r in seen[tree]) for tree in args.trees}
        rows.append({"case": name, first: med[first], second: med[second], "ratio": med[first] / med[second]})
        print(f"{name:28s} {med[first]:10.2f} {med[second]:10.2f}   ratio {med[first] / med[second]:.3f}")
    if args.out:
        from tilemm.system.machine import stamp
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "before_after.jsonl", "a") as f:
            for row in rows:
                f.write(json.dumps({**row, "trees": args.trees, "rounds": args.rounds,
                                    **stamp("benchmarks/before_after.py")}) + "\n")


if __name__ == "__main__":
    main()
