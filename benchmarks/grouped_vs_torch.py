"""The grouped bar: tilemm.grouped_matmul against torch._grouped_mm and a Python loop of mm, on
mixture-of-experts shapes (bfloat16, tokens sorted by expert, weights (G, N, K) read transposed as
torch's MoE layers hold them).

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/grouped_vs_torch.py --out DIR
    ... grouped_vs_torch.py --out DIR --quick      # ~2 min: the tuning set over CONFIGS, to pick defaults

Shapes: experts G, routed rows (tokens x top-k), hidden K, the expert's width N; each with a
balanced routing (multinomial, equal weights) and a skewed one (weights ~ u^6: a few experts take
most rows, many get 0-64), offsets on the GPU. TUNE is the set --quick tunes on; HELD_OUT is
measured only, never tuned on. The loop is given the offsets on the host (its real cost, a read
of the GPU's offsets, is left out: the loop's best case). Every answer is checked first, on 256
sampled rows against a float64 product (within bfloat16's rounding plus float32 sums'); a
variant that fails is recorded as failed and not timed. Protocol: pre-warm, interleaved rounds
(order rotated), CUDA events, the median. One JSON line a (shape, routing, variant).
"""
from __future__ import annotations

import torch

import tilemm
from tilemm.system.timing import interleaved_rounds

import harness

# (experts, routed rows, hidden K, width N): Mixtral-, DeepSeek-V3- and Qwen3-MoE-like layers
TUNE = [(8, 32768, 4096, 14336), (64, 16384, 7168, 4096), (128, 32768, 2048, 1536)]
HELD_OUT = [(8, 16384, 6144, 8192), (16, 8192, 4096, 2816), (32, 16384, 2048, 2816), (64, 8192, 2048, 7168),
            (128, 16384, 7168, 4096), (128, 8192, 4096, 1024)]
ROUTINGS = ("balanced", "skewed")
# --quick's grid (the rung's defaults among them; TMA's program, as the default takes for these layouts)
CONFIGS = [dict(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s)
           for bm, bn, bk in ((128, 128, 64), (128, 256, 64), (64, 128, 64), (64, 256, 64))
           for w, s in ((8, 4), (4, 3))]
CONFIGS += [dict(config, tma=False) for config in CONFIGS[:2]]     # the pointer program beside TMA's


def routing(experts: int, rows: int, kind: str, seed: int) -> torch.Tensor:
    """Rows per expert (int64, on the host), summing to rows."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(experts, generator=g, dtype=torch.float64)
    weights = torch.ones(experts, dtype=torch.float64) if kind == "balanced" else weights**6
    return torch.distributions.Multinomial(rows, probs=weights / weights.sum()).sample().long()


def problem(experts, rows, k, n, kind, seed):
    counts = routing(experts, rows, kind, seed)
    offs_host = counts.cumsum(0)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
    return a, w.mT, offs_host.to(torch.int32).cuda(), offs_host.tolist(), counts


def loop_of_mm(a, b, ends):
    c = torch.empty(a.shape[0], b.shape[2], device=a.device, dtype=a.dtype)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            torch.mm(a[start:end], b[g], out=c[start:end])
        start = end
    return c


def check(c, a, b, ends, seed) -> tuple[bool, float]:
    """(ok, max error / max |ref|) on 256 sampled rows: within bfloat16's rounding of the float64
    product plus float32 sums' allowance, 2K 2^-24 of the sum of |a_i b_i|."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, a.shape[0], (256,), generator=g).sort().values
    groups = torch.searchsorted(torch.tensor(ends), rows, right=True)
    ok, worst = True, 0.0
    for e in groups.unique().tolist():
        r = rows[groups == e].cuda()
        x, y = a[r].double(), b[e].double()
        ref, size = x @ y, x.abs() @ y.abs()
        good, error = harness.within(c[r], ref, 2.0**-8 * ref.abs() + 2 * a.shape[1] * 2.0**-24 * size + 1e-30)
        ok, worst = ok and good, max(worst, error)
    return ok, worst


def measure(shape, kind, seed, variants_of, args, base, out_file, label_set):
    experts, rows, k, n = shape
    a, b, offs, ends, counts = problem(experts, rows, k, n, kind, seed)
    flops = 2 * rows * k * n
    good, outcomes = harness.checked(variants_of(a, b, offs, ends), lambda label, c: check(c, a, b, ends, seed))
    records = [dict(variant=label, status="ok" if found.ok else "FAILED", relative_error=found.value, experts=experts,
                    rows=rows, k=k, n=n, routing=kind, set=label_set, empty_groups=int((counts == 0).sum()),
                    small_groups=int((counts <= 64).sum()), largest_group=int(counts.max()),
                    first_call_s=found.seconds, dtype="bfloat16", **base) for label, found in outcomes.items()]
    times = harness.medians(interleaved_rounds(good, args.rounds, args.per_round))
    anchor, loop = times.get("grouped_mm"), times.get("loop_of_mm")
    for rec in records:
        t = times.get(rec["variant"])
        if t is not None:
            rec.update(median_ms=t, tflops=flops / t / 1e9, vs_grouped_mm=anchor / t if anchor else None,
                       vs_loop=loop / t if loop else None)
        print(f"{label_set:8} G={experts:3} {rows:6}x{k:5}x{n:5} {kind:8} {rec['variant']:44} "
              f"{rec.get('median_ms', float('nan')):8.3f} ms {rec.get('tflops', float('nan')):7.1f} TFLOP/s "
              f"x{rec.get('vs_grouped_mm') or float('nan'):5.3f} {rec['status']}", flush=True)
    harness.append(out_file, records)
    torch.cuda.empty_cache()


def anchors(a, b, offs, ends):
    return {"grouped_mm": lambda: torch._grouped_mm(a, b, offs),
            "loop_of_mm": lambda: loop_of_mm(a, b, ends),
            "tilemm": lambda: tilemm.grouped_matmul(a, b, offs)}


def tuning(a, b, offs, ends):
    variants = {"grouped_mm": lambda: torch._grouped_mm(a, b, offs)}
    for config in CONFIGS:
        label = "tilemm-" + "-".join(f"{key}={value}" for key, value in config.items())
        variants[label] = lambda c=config: tilemm.grouped_matmul(a, b, offs, **c)
    return variants


def main():
    args = harness.arguments(quick=False, rounds=3, per_round=0.15, prewarm=8.0,
                             helps={"quick": "the tuning set over CONFIGS only (~2 min)"})
    base = harness.stamp("grouped_vs_torch.py", args)
    harness.prewarm(args.prewarm)
    if args.quick:
        out_file = args.out / "grouped_tuning.jsonl"
        for i, shape in enumerate(TUNE):
            for kind in ROUTINGS:
                measure(shape, kind, i, tuning, args, base, out_file, "tune")
        return
    out_file = args.out / "grouped_vs_torch.jsonl"
    for label_set, shapes in (("tune", TUNE), ("held-out", HELD_OUT)):
        for i, shape in enumerate(shapes):
            for kind in ROUTINGS:
                measure(shape, kind, 100 * (label_set == "held-out") + i, anchors, args, base, out_file, label_set)


if __name__ == "__main__":
    main()
