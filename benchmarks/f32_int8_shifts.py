"""tensorcore-f32's precision="int8" (float32 from int8 products of 24-bit fixed point) against
cuBLAS SGEMM and 3xTF32: with the two lowest digit shifts left out (6 pairs, the rung's way) and
with all 9 pairs, per call and kernel alone (CUDA graphs), each answer's error against float64
checked first (max |C - C64| / max |C64|, random normal data); interleaved rounds, medians.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f32_int8_shifts.py --out DIR --n 4096
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.timing import graphed, interleaved_rounds
from tilemm.ladder.tensorcore import t4_f32

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n)


def with_lowest(launch, lowest: int):
    """launch() with precision="int8" leaving out the shifts below `lowest`."""
    def go():
        kept, t4_f32.FIXED_LOWEST_SHIFT = t4_f32.FIXED_LOWEST_SHIFT, lowest
        try:
            launch()
        finally:
            t4_f32.FIXED_LOWEST_SHIFT = kept
    return go


def main():
    args = gpu_ladder.out_and_n(4096)
    n = args.n
    a, b, want = gpu_ladder.float32_operands(n)                         # and cuBLAS as true SGEMM
    sgemm_out = torch.empty_like(a)
    plans = {"cublas-sgemm": None,
             "3xtf32": tilemm.plan(a, b, kernel="tensorcore-f32"),
             "int8-6-pairs": tilemm.plan(a, b, kernel="tensorcore-f32", precision="int8"),
             "int8-9-pairs": tilemm.plan(a, b, kernel="tensorcore-f32", precision="int8")}
    launchers, errors = {}, {}
    for label, plan in plans.items():
        if plan is None:                     # torch's cuBLAS: capturable in a torch CUDA graph
            launch, result = (lambda: torch.matmul(a, b, out=sgemm_out)), (lambda: sgemm_out)
        else:
            launch, result = plan.prepare(poison=True)
        if label == "int8-9-pairs":
            launch = with_lowest(launch, 0)
        launch()
        torch.cuda.synchronize()
        errors[label] = float((torch.as_tensor(result()).double() - want).abs().max() / want.abs().max())
        assert errors[label] < 1e-5, (label, errors[label])               # every timed answer checked
        launchers[label] = launch
        launchers[label + " (graph)"] = graphed(launch)
    gpu_ladder.prewarm(8)
    times = interleaved_rounds(launchers, 3, 0.3)
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/f32_int8_shifts.py", args))
    base = {g: statistics.median(times["cublas-sgemm" + g]) for g in ("", " (graph)")}
    with open(args.out / "f32_int8_shifts.jsonl", "a") as f:
        for label, t in times.items():
            graph = " (graph)" if label.endswith(" (graph)") else ""
            med = statistics.median(t) / (10 if graph else 1)              # a graph replays 10 calls
            ratio = base[graph] / (10 if graph else 1) / med
            err = errors[label.removesuffix(" (graph)")]
            print(f"{label:24} {med:8.3f} ms  {2 * n**3 / med / 1e9:7.1f} TFLOP/s  vs SGEMM {ratio:5.2f}x  "
                  f"rel.err {err:.2e}", flush=True)
            f.write(json.dumps({"variant": label, "median_ms": med, "n": n, "vs_sgemm": ratio,
                                "relative_error": err, **stamp}) + "\n")


if __name__ == "__main__":
    main()
