"""Issue 9 question: why does `tensorcore` run bf16 3000³ at 0.63x cuBLAS? 3000 bf16 elements are
6000 bytes a row: 16-byte aligned (TMA's rule) but not 128-byte aligned. Times the rung at 3000³
with rows as they come, with rows padded to 3008 elements (6016 bytes, a multiple of 128), and at
3072³ (the same 288 tiles of 128 x 256), each beside cuBLAS on the same operands; interleaved
rounds, CUDA events, medians, every answer checked against cuBLAS's.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/row_alignment_try.py --out DIR
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds

import gpu_ladder  # noqa: E402  (pre-warm, --out)


def padded(x, width: int):
    """x's values in rows `width` elements apart (a view of the first x.shape[1] columns)."""
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)[:, :x.shape[1]]
    out.copy_(x)
    return out


def main():
    args = gpu_ladder.out_and_n(3000)
    gen = torch.Generator(device="cuda").manual_seed(3)
    cases = {}
    for n in (3000, 3072):
        a = torch.randn(n, n, device="cuda", generator=gen).bfloat16()
        b = torch.randn(n, n, device="cuda", generator=gen).bfloat16()
        cases[f"{n} rows as given"] = (a, b)
        if n % 64:
            cases[f"{n} rows padded to {n + 8}"] = (padded(a, n + 8), padded(b, n + 8))
    launchers, flops = {}, {}
    for label, (a, b) in cases.items():
        c_ref = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device="cuda")
        launch, result = tilemm.plan(a, b, kernel="tensorcore").prepare(poison=True)
        launch()
        torch.matmul(a, b, out=c_ref)
        torch.cuda.synchronize()
        diff = float((result().float() - c_ref.float()).abs().max() / c_ref.float().abs().max())
        assert diff < 1e-2, (label, diff)                     # agrees with cuBLAS to bf16's rounding
        launchers[f"tilemm {label}"] = launch
        launchers[f"cublas {label}"] = lambda a=a, b=b, c=c_ref: torch.matmul(a, b, out=c)
        flops[label] = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    gpu_ladder.prewarm(6)
    times = interleaved_rounds(launchers, 4, 0.3)
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/row_alignment_try.py", args))
    with open(args.out / "row_alignment_try.jsonl", "a") as f:
        for label in cases:
            ours, theirs = (statistics.median(times[f"{who} {label}"]) for who in ("tilemm", "cublas"))
            print(f"{label:24} tilemm {ours * 1e3:7.1f} us {flops[label] / ours / 1e9:6.1f} TFLOP/s   cuBLAS "
                  f"{theirs * 1e3:7.1f} us   ratio {theirs / ours:5.3f}", flush=True)
            f.write(json.dumps({"case": label, "tilemm_ms": ours, "cublas_ms": theirs, "vs_cublas": theirs / ours,
                                **stamp}) + "\n")


if __name__ == "__main__":
    main()
