"""Thin tiles with each K step summed in parts (epilogue_launch.THIN_PARTS, split_sums) against
the same tiles summing it in one chain, on the products a decoding model runs: a few rows (1-32)
times a Linear's weight, bf16, B the weight's transpose.

    PYTHONPATH=src:benchmarks python3 benchmarks/thin_parts.py --out DIR [--sets fit held-out]

For each problem: the pointer program launched alone at thin_config's tiles ("parts") and at
those tiles in one chain (256-long K steps, 4 warps, 4 stages: the thin tiles before parts),
and cuBLAS (torch.mm), GPU time a launch in CUDA graphs (graph_us, no CPU time: what a compiled
model's graph or a replay runs); and whole calls as a user makes them, tilemm.linear(x, weight,
kernel="tensorcore") against torch.nn.functional.linear, back to back between CUDA events
(block_us). --rounds interleaved rounds, the order rotated, after --prewarm seconds of products;
medians. Every answer is checked against the float64 product before anything is timed; a
wrong answer is recorded and not timed.

One JSON line a problem (`us`: microseconds by call; `chain_over_parts`, `cublas_over_parts`,
`linear_over_tilemm`: ratios, above 1.0 where parts or tilemm are faster), and a summary line
a set (geometric means and the worst).
"""
from __future__ import annotations

import torch

from tilemm.engine import epilogue_launch

import harness
import tilemm

ENV = "PYTHONPATH=src:benchmarks"
# (M, N, K): rows times a Linear's (out, in) where the thin tiles take parts (THIN_PARTS_UP_TO: up
# to 16 rows, N up to 32 columns x 132 SMs; 17-32 rows, 16 columns). fit: the shapes the parts were
# chosen on; held-out: other layers and row counts, first timed here
SETS = {"fit": [(4, 2048, 2048), (4, 2048, 5632), (16, 4096, 4096), (1, 4096, 4096), (1, 3072, 3072),
                (12, 1536, 8960), (3, 896, 4864), (1, 2048, 8192), (24, 2048, 2048), (28, 1536, 8960)],
        "held-out": [(8, 4096, 14336), (2, 3584, 3584), (16, 2560, 6912), (6, 1024, 4096), (1, 1536, 1536),
                     (4, 3072, 8192), (20, 1536, 4096), (32, 2048, 8192), (18, 896, 4864)]}


def pointer_launch(a, b, y, config: dict):
    program, grid, args, options = epilogue_launch.pointer_arguments(a, b, y, None, None, False, None, None, None,
                                                                     1.0, 0.0, config)
    return lambda: program[grid](*args, **options)


def problem(set_name: str, m: int, n: int, k: int, args) -> dict:
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    weight = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) / k ** 0.5).to(torch.bfloat16)
    parts = epilogue_launch.thin_config(epilogue_launch.config_for(torch.bfloat16), m, n)
    chain = {**parts, "block_k": 256, "split": 0, "num_warps": 4, "num_stages": 4}
    outs = {label: torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for label in ("parts", "chain", "cublas")}
    kernels = {"parts": pointer_launch(x, weight.T, outs["parts"], parts),
               "chain": pointer_launch(x, weight.T, outs["chain"], chain),
               "cublas": lambda: torch.mm(x, weight.T, out=outs["cublas"])}
    calls = {"tilemm.linear": lambda: tilemm.linear(x, weight, kernel="tensorcore"),
             "F.linear": lambda: torch.nn.functional.linear(x, weight)}
    wrong = []
    for label, launch in kernels.items():
        outs[label].fill_(float("nan"))
        launch()
        if not harness.float64_check(outs[label], x, weight.T, "bfloat16")[0]:
            wrong.append(label)
    for label, call in calls.items():
        if not harness.float64_check(call(), x, weight.T, "bfloat16")[0]:
            wrong.append(label)
    kernels = {label: launch for label, launch in kernels.items() if label not in wrong}
    calls = {label: call for label, call in calls.items() if label not in wrong}
    us = harness.medians(harness.rounds(kernels, args.rounds, lambda call: harness.graph_us(call, args.block)))
    us.update(harness.medians(harness.rounds(calls, args.rounds, lambda call: harness.block_us(call, args.block))))

    def ratio(over, under):
        return round(us[over] / us[under], 3) if over in us and under in us else None
    return {"set": set_name, "m": m, "n": n, "k": k, "parts": {key: parts[key] for key in
                                                                  ("block_m", "block_n", "block_k", "split", "num_warps")},
            "us": {label: round(t, 2) for label, t in us.items()}, "chain_over_parts": ratio("chain", "parts"),
            "cublas_over_parts": ratio("cublas", "parts"), "linear_over_tilemm": ratio("F.linear", "tilemm.linear"),
            "wrong": wrong}


def summary(set_name: str, records: list) -> dict:
    found = {"summary": set_name, "problems": len(records), "wrong": sum(len(r["wrong"]) for r in records)}
    for key in ("chain_over_parts", "cublas_over_parts", "linear_over_tilemm"):
        ratios = [r[key] for r in records if r[key] is not None]
        found[f"{key}_geomean"] = round(harness.geomean(ratios), 3)
        found[f"{key}_worst"] = min(ratios, default=None)
    return found


def main():
    args = harness.arguments(sets=list(SETS), rounds=5, block=20, prewarm=5.0)
    if set(args.sets) - set(SETS):
        raise SystemExit(f"--sets: some of {list(SETS)}")
    emit = harness.emitter(args.out / "thin_parts.jsonl", harness.stamp("thin_parts.py", args, ENV))
    harness.prewarm(args.prewarm)
    for set_name in args.sets:
        records = []
        for m, n, k in SETS[set_name]:
            records.append(problem(set_name, m, n, k, args))
            emit(records[-1])
        emit(summary(set_name, records))


if __name__ == "__main__":
    main()
