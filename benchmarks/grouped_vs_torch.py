"""The grouped bar: tilemm.grouped_matmul against torch._grouped_mm and a Python loop of mm, on
mixture-of-experts shapes (bfloat16, tokens sorted by expert, weights (G, N, K) read transposed as
torch's MoE layers hold them).

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/grouped_vs_torch.py --out DIR
    ... grouped_vs_torch.py --out DIR --tune      # ~2 min: the fit set over CONFIGS, prints the winners
    ... grouped_vs_torch.py --out DIR --usual-path   # and tilemm's calls with no replay, interleaved

Problems: experts G, routed rows (tokens x top-k), hidden K, the expert's width N, and a routing
(rows per expert, drawn with a fixed seed, offsets on the GPU):
- balanced: a multinomial of equal weights;
- skewed: weights u^6 (u uniform): a few experts take most rows, many get 0-64;
- zipf: weights 1 / rank^1.2, the ranks shuffled over the experts;
- topk: each token's top-k experts of a router's logits (normal noise plus a normal bias a
  expert, sigma 1.5): the skew a trained router with favourite experts makes.
FIT is the set --tune tunes on; HELD_OUT (the same shapes and seeds as before, so records compare)
and HELD_OUT_NEW (other expert counts, hidden sizes and seeds) are measured only, never tuned on.
The loop is given the offsets on the host (its real cost, a read of the GPU's offsets, is left
out: the loop's best case). Every answer is checked first, on 256 sampled rows against a float64
product (within bfloat16's rounding plus float32 sums'); a variant that fails is recorded as
failed and not timed. Protocol: pre-warm, interleaved rounds (order rotated), CUDA events, the
median. One JSON line a (problem, variant); geomeans of x torch._grouped_mm printed last.
"""
from __future__ import annotations

import torch

import tilemm
from tilemm.system.timing import interleaved_rounds

import harness

# (experts, routed rows, hidden K, width N): Mixtral-, DeepSeek-V3-, Qwen3-MoE-like layers
FIT_SHAPES = [(8, 32768, 4096, 14336), (64, 16384, 7168, 4096), (128, 32768, 2048, 1536), (32, 8192, 4096, 2048)]
FIT = [(*shape, kind, i) for i, shape in enumerate(FIT_SHAPES) for kind in ("balanced", "zipf", "topk")]
HELD_OUT = [(*shape, kind, 100 + i)
            for i, shape in enumerate([(8, 16384, 6144, 8192), (16, 8192, 4096, 2816), (32, 16384, 2048, 2816),
                                       (64, 8192, 2048, 7168), (128, 16384, 7168, 4096), (128, 8192, 4096, 1024)])
            for kind in ("balanced", "skewed")]
HELD_OUT_NEW = [(*shape, kind, 200 + i)
                for i, shape in enumerate([(16, 12288, 3072, 4096), (60, 8192, 2048, 1408), (96, 12288, 2560, 1536),
                                           (256, 16384, 7168, 2048)])
                for kind in ("balanced", "zipf", "topk")]
# --tune's grid around the defaults ("tilemm": tall tiles 128 x 256, short tiles of 32 rows, 8 warps,
# 4 stages): short tiles of 16 or 64 rows or none (small_m = block_m), 3 stages, other tall tiles,
# and the pointer program
CONFIGS = [dict(small_m=16), dict(small_m=64), dict(small_m=128), dict(num_stages=3),
           dict(block_m=128, block_n=128), dict(block_m=64, block_n=256), dict(tma=False)]


def routing(experts: int, rows: int, kind: str, seed: int) -> torch.Tensor:
    """Rows per expert (int64, on the host), summing to rows (topk: to rows rounded down to top-k's multiple)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "topk":
        top = 8 if experts >= 64 else 2
        logits = torch.randn(rows // top, experts, generator=g) + 1.5 * torch.randn(experts, generator=g)
        return torch.bincount(logits.topk(top, dim=1).indices.flatten(), minlength=experts).long()
    weights = torch.rand(experts, generator=g, dtype=torch.float64)
    if kind == "balanced":
        weights = torch.ones(experts, dtype=torch.float64)
    elif kind == "skewed":
        weights = weights**6
    else:
        weights = (torch.randperm(experts, generator=g) + 1.0).double() ** -1.2
    return harness.routed_rows(weights, rows, g)


def problem(experts, rows, k, n, kind, seed):
    counts = routing(experts, rows, kind, seed)
    offs_host = counts.cumsum(0)
    rows = int(offs_host[-1])
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


def measure(spec, variants_of, args, base, out_file, label_set) -> dict:
    """{variant: x torch._grouped_mm} of one problem, its records appended to out_file."""
    experts, rows, k, n, kind, seed = spec
    a, b, offs, ends, counts = problem(*spec)
    rows = a.shape[0]
    flops = 2 * rows * k * n
    good, outcomes = harness.checked(variants_of(a, b, offs, ends), lambda label, c: check(c, a, b, ends, seed))
    records = [dict(variant=label, status="ok" if found.ok else "FAILED", relative_error=found.value, experts=experts,
                    rows=rows, k=k, n=n, routing=kind, seed=seed, set=label_set, empty_groups=int((counts == 0).sum()),
                    small_groups=int((counts <= 64).sum()), largest_group=int(counts.max()),
                    first_call_s=found.seconds, dtype="bfloat16", **base) for label, found in outcomes.items()]
    times = harness.medians(interleaved_rounds(good, args.rounds, args.per_round))
    anchor, loop = times.get("grouped_mm"), times.get("loop_of_mm")
    for rec in records:
        t = times.get(rec["variant"])
        if t is not None:
            rec.update(median_ms=t, tflops=flops / t / 1e9, vs_grouped_mm=anchor / t if anchor else None,
                       vs_loop=loop / t if loop else None)
        print(f"{label_set:8} G={experts:3} {rows:6}x{k:5}x{n:5} {kind:8} {rec['variant']:52} "
              f"{rec.get('median_ms', float('nan')):8.3f} ms {rec.get('tflops', float('nan')):7.1f} TFLOP/s "
              f"x{rec.get('vs_grouped_mm') or float('nan'):5.3f} {rec['status']}", flush=True)
    harness.append(out_file, records)
    torch.cuda.empty_cache()
    return {rec["variant"]: rec.get("vs_grouped_mm") or 0.0 for rec in records}


def anchors(a, b, offs, ends):
    return {"grouped_mm": lambda: torch._grouped_mm(a, b, offs),
            "loop_of_mm": lambda: loop_of_mm(a, b, ends),
            "tilemm": lambda: tilemm.grouped_matmul(a, b, offs)}


def with_usual_path(a, b, offs, ends):
    """anchors, and tilemm with every call taking the usual path (checks, plan, Triton's launch)
    instead of a repeated call's replay (tilemm.products.grouped_calls): --usual-path."""
    from tilemm.products import grouped_calls

    def usual():
        key_of = grouped_calls.call_key
        grouped_calls.call_key = lambda *args: None        # (no key: the call is not a repeated one)
        try:
            return tilemm.grouped_matmul(a, b, offs)
        finally:
            grouped_calls.call_key = key_of
    return {**anchors(a, b, offs, ends), "tilemm usual path": usual}


def label_of(config: dict) -> str:
    return "tilemm-" + "-".join(f"{key}={value}" for key, value in config.items())


def tuning(a, b, offs, ends):
    variants = {"grouped_mm": lambda: torch._grouped_mm(a, b, offs),
                "tilemm": lambda: tilemm.grouped_matmul(a, b, offs)}
    for config in CONFIGS:
        variants[label_of(config)] = lambda c=config: tilemm.grouped_matmul(a, b, offs, **c)
    return variants


def summary(results: dict, variant: str | None = None) -> None:
    """Geomeans of x torch._grouped_mm over balanced and skewed routings (all: variant's, or the
    best variant's a problem, where None), each set apart."""
    for label_set in sorted({spec_set for _, spec_set in results}):
        for skew in (False, True):
            ratios = [(best if variant is None else found.get(variant, 0.0))
                      for (spec, spec_set), found in results.items() if spec_set == label_set
                      and (spec[4] != "balanced") == skew
                      for best in [max(found.values())]]
            if ratios:
                print(f"{label_set:12} {'skewed' if skew else 'balanced':8} {variant or 'best':10} geomean "
                      f"x{harness.geomean(r for r in ratios if r > 0):.3f} range x{min(ratios):.3f}-x{max(ratios):.3f}"
                      f" over {len(ratios)}", flush=True)


def winners(results: dict) -> None:
    """--tune's report: each problem's best variant, and each variant's geomean over the fit set."""
    for (spec, _), found in results.items():
        best = max(found, key=found.get)
        print(f"best {spec}: {best} x{found[best]:.3f} (default x{found.get('tilemm', 0):.3f})")
    labels = {label for found in results.values() for label in found} - {"grouped_mm"}
    for skew in (None, False, True):
        rows = [found for (spec, _), found in results.items() if skew is None or (spec[4] != "balanced") == skew]
        ranked = sorted(labels, key=lambda label: -harness.geomean(max(f.get(label, 0), 1e-3) for f in rows))
        for label in ranked[:4]:
            print(f"{'all' if skew is None else 'skewed' if skew else 'balanced':8} geomean "
                  f"x{harness.geomean(max(f.get(label, 0), 1e-3) for f in rows):.3f} {label}")


def main():
    args = harness.arguments(tune=False, usual_path=False, rounds=3, per_round=0.15, prewarm=8.0,
                             helps={"tune": "the fit set over CONFIGS only (~2 min), printing the winners",
                                    "usual_path": "also tilemm with every call on the usual path, not replayed"})
    base = harness.stamp("grouped_vs_torch.py", args)
    harness.prewarm(args.prewarm)
    results = {}
    if args.tune:
        for spec in FIT:
            results[spec, "fit"] = measure(spec, tuning, args, base, args.out / "grouped_tuning.jsonl", "fit")
        winners(results)
        return
    for label_set, specs in (("held-out", HELD_OUT), ("held-out-new", HELD_OUT_NEW)):
        for spec in specs:
            results[spec, label_set] = measure(spec, with_usual_path if args.usual_path else anchors, args, base,
                                               args.out / "grouped_vs_torch.jsonl", label_set)
    summary(results, "tilemm")


if __name__ == "__main__":
    main()
