"""The fine-grained fp8 bar: tilemm.scaled_matmul with block scales (1x128 for A, 128x128 for B,
DeepGEMM's) and with row-wise scales, against torch._scaled_mm with row-wise scales (and
tensor-wise, beside it), on DeepSeek-V3-like shapes; then grouped contiguous float8 (GROUPED:
tilemm.grouped_matmul with block scales, torch._scaled_grouped_mm with row-wise ones beside it).

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/block_scaled_vs_torch.py --out DIR
    ... block_scaled_vs_torch.py --out DIR --quick      # ~2 min: the tuning set over CONFIGS, to pick defaults

float8_e4m3fn, A row-major (M, K), B given as (N, K).T, bfloat16 out, float32 sums (torch's
use_fast_accum=False). TUNE is the set --quick tunes on; HELD_OUT is measured only. Every answer
is checked first, on 64 sampled rows, against the float64 product of the dequantized operands
(each fp8 value times its scale; within bfloat16's rounding plus float32 sums' allowance); a
variant that fails is recorded as failed and not timed. Protocol: pre-warm, interleaved rounds
(order rotated), CUDA events, the median. One JSON line a (shape, variant).
"""
from __future__ import annotations

import torch

import tilemm
from tilemm.system.timing import interleaved_rounds

import harness

# (M, N, K): DeepSeek-V3's dense GEMMs (DeepGEMM's table: N x K pairs) at M = 4096, and others
TUNE = [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536)]
HELD_OUT = [(4096, 4096, 7168), (4096, 7168, 2048), (2048, 32768, 512), (8192, 7168, 16384), (128, 7168, 16384),
            (4096, 36864, 7168)]
# --quick's grid (the rung's defaults among them)
CONFIGS = [dict(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s)
           for bm, bn, bk in ((128, 128, 128), (128, 256, 128), (64, 256, 128), (128, 128, 64))
           for w, s in ((8, 4), (8, 3))]
CONFIGS += [dict(config, tma=False) for config in CONFIGS[:2]]     # pointer loads beside TMA's (the default here)


def blocks(x: int) -> int:
    return -(-x // 128)


def problem(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, generator=g, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g, device="cuda").to(torch.float8_e4m3fn).T          # (K, N), K-major
    scales = dict(
        block=(torch.rand(m, blocks(k), generator=g, device="cuda") + 0.5,
               torch.rand(blocks(k), blocks(n), generator=g, device="cuda") + 0.5),
        row=(torch.rand(m, 1, generator=g, device="cuda") + 0.5, torch.rand(1, n, generator=g, device="cuda") + 0.5),
        tensor=(torch.tensor(0.75, device="cuda"), torch.tensor(1.25, device="cuda")))
    return a, b, scales


def check(c, a, b, scale_a, scale_b, kind: str, seed: int) -> tuple[bool, float]:
    """(ok, max error / max |ref|) on 64 sampled rows of C against the dequantized float64 product."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, a.shape[0], (64,), generator=g).cuda()
    k, n = b.shape
    x, y = a[rows].double(), b.double()
    if kind == "block":
        x = x * scale_a[rows].double().repeat_interleave(128, 1)[:, :k]
        y = y * scale_b.double().repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    elif kind == "row":
        x, y = x * scale_a[rows].double(), y * scale_b.double()
    else:
        x, y = x * float(scale_a), y * float(scale_b)
    ref, size = x @ y, x.abs() @ y.abs()
    return harness.within(c[rows], ref, 2.0**-8 * ref.abs() + (2 * k + 3 * k / 32 + 2) * 2.0**-24 * size + 1e-30)


def anchors(a, b, s):
    bf16 = torch.bfloat16
    return {"scaled_mm-row": ("row", lambda: torch._scaled_mm(a, b, *s["row"], out_dtype=bf16)),
            "scaled_mm-tensor": ("tensor", lambda: torch._scaled_mm(a, b, *s["tensor"], out_dtype=bf16)),
            "tilemm-block": ("block", lambda: tilemm.scaled_matmul(a, b, *s["block"])),
            "tilemm-row": ("row", lambda: tilemm.scaled_matmul(a, b, *s["row"])),
            "tilemm-tensor": ("tensor", lambda: tilemm.scaled_matmul(a, b, *s["tensor"]))}


def tuning(a, b, s):
    variants = {"scaled_mm-row": ("row", lambda: torch._scaled_mm(a, b, *s["row"], out_dtype=torch.bfloat16))}
    for i, config in enumerate(CONFIGS):
        label = "-".join(f"{key}={value}" for key, value in config.items())
        variants["tilemm-block-" + label] = ("block", lambda c=config: tilemm.scaled_matmul(a, b, *s["block"], **c))
        if i < 4:          # row-wise scales: the program's other mode, on the first tiles
            variants["tilemm-row-" + label] = ("row", lambda c=config: tilemm.scaled_matmul(a, b, *s["row"], **c))
    return variants


def measure(shape, seed, variants_of, args, base, out_file, label_set):
    m, n, k = shape
    a, b, scales = problem(m, n, k, seed)
    variants = variants_of(a, b, scales)
    kinds = {label: kind for label, (kind, _) in variants.items()}
    good, outcomes = harness.checked({label: launch for label, (_, launch) in variants.items()},
                                     lambda label, c: check(c, a, b, *scales[kinds[label]], kinds[label], seed))
    records = [dict(variant=label, scales=kinds[label], status="ok" if found.ok else "FAILED",
                    relative_error=found.value, m=m, n=n, k=k, set=label_set, dtype="float8_e4m3fn",
                    out_dtype="bfloat16", first_call_s=found.seconds, **base) for label, found in outcomes.items()]
    times = harness.medians(interleaved_rounds(good, args.rounds, args.per_round))
    anchor = times.get("scaled_mm-row")
    for rec in records:
        t = times.get(rec["variant"])
        if t is not None:
            rec.update(median_ms=t, tflops=2 * m * n * k / t / 1e9, vs_scaled_mm_row=anchor / t if anchor else None)
        print(f"{label_set:8} {m:5}x{n:5}x{k:5} {rec['variant']:62} {rec.get('median_ms', float('nan')):7.3f} ms "
              f"{rec.get('tflops', float('nan')):7.1f} TFLOP/s x{rec.get('vs_scaled_mm_row') or float('nan'):5.3f} "
              f"{rec['status']}", flush=True)
    harness.append(out_file, records)
    torch.cuda.empty_cache()


# grouped contiguous (DeepGEMM's m-grouped layout): (groups, rows, N, K), tokens sorted by group
GROUPED = [(4, 32768, 4096, 7168), (4, 32768, 7168, 2048), (8, 32768, 4096, 7168), (8, 32768, 7168, 2048)]


def grouped(shape, seed, args, base, out_file):
    """tilemm.grouped_matmul with block scales against torch._scaled_grouped_mm with row-wise
    scales (where this torch has it), balanced and skewed routings; answers checked on 64 sampled
    rows against the dequantized float64 product."""
    groups, rows, n, k = shape
    for kind in ("balanced", "skewed"):
        g = torch.Generator().manual_seed(seed)
        weights = torch.ones(groups, dtype=torch.float64) if kind == "balanced" else torch.rand(groups, generator=g,
                                                                                                 dtype=torch.float64)**4
        counts = torch.distributions.Multinomial(rows, probs=weights / weights.sum()).sample().long()
        ends = counts.cumsum(0).tolist()
        offs = torch.tensor(ends, dtype=torch.int32, device="cuda")
        a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(groups, n, k, device="cuda").to(torch.float8_e4m3fn).mT          # (G, K, N), K-major
        scale_a = torch.rand(rows, blocks(k), device="cuda") + 0.5
        scale_b = torch.rand(groups, blocks(k), blocks(n), device="cuda") + 0.5
        row_a, row_b = torch.rand(rows, device="cuda") + 0.5, torch.rand(groups, n, device="cuda") + 0.5
        variants = {"tilemm-grouped-block": ("block", lambda: tilemm.grouped_matmul(a, b, offs, scale_a=scale_a,
                                                                                    scale_b=scale_b))}
        if hasattr(torch, "_scaled_grouped_mm"):
            variants["scaled_grouped_mm-row"] = ("row", lambda: torch._scaled_grouped_mm(
                a, b, row_a, row_b, offs=offs, out_dtype=torch.bfloat16))
        def sampled_check(label, c):
            """On 64 sampled rows, each against its group's dequantized float64 product."""
            scales = variants[label][0]
            sample = torch.randint(0, rows, (64,), generator=g)
            group = torch.searchsorted(torch.tensor(ends), sample, right=True)
            ok, err = True, 0.0
            for e in group.unique().tolist():
                r = sample[group == e].cuda()
                sa, sb = ((scale_a[r], scale_b[e]) if scales == "block" else (row_a[r][:, None], row_b[e][None, :]))
                good_e, err_e = check(c[r], a[r], b[e], sa, sb, scales, seed)
                ok, err = ok and good_e, max(err, err_e)
            return ok, err
        good, outcomes = harness.checked({label: launch for label, (_, launch) in variants.items()}, sampled_check)
        records = [dict(variant=label, scales=variants[label][0], status="ok" if found.ok else "FAILED",
                        relative_error=found.value, groups=groups, rows=rows, n=n, k=k, routing=kind, set="grouped",
                        dtype="float8_e4m3fn", out_dtype="bfloat16", **base) for label, found in outcomes.items()]
        times = harness.medians(interleaved_rounds(good, args.rounds, args.per_round))
        anchor = times.get("scaled_grouped_mm-row")
        for rec in records:
            t = times.get(rec["variant"])
            if t is not None:
                rec.update(median_ms=t, tflops=2 * rows * n * k / t / 1e9,
                           vs_scaled_grouped_mm_row=anchor / t if anchor else None)
            print(f"grouped  G={groups} {rows:6}x{n:5}x{k:5} {kind:8} {rec['variant']:30} "
                  f"{rec.get('median_ms', float('nan')):7.3f} ms {rec.get('tflops', float('nan')):7.1f} TFLOP/s "
                  f"{rec['status']}", flush=True)
        harness.append(out_file, records)
        torch.cuda.empty_cache()


def main():
    args = harness.arguments(quick=False, rounds=3, per_round=0.15, prewarm=8.0,
                             helps={"quick": "the tuning set over CONFIGS only (~2 min)"})
    base = harness.stamp("block_scaled_vs_torch.py", args)
    harness.prewarm(args.prewarm)
    if args.quick:
        for i, shape in enumerate(TUNE):
            measure(shape, i, tuning, args, base, args.out / "block_scaled_tuning.jsonl", "tune")
        return
    for label_set, shapes in (("tune", TUNE), ("held-out", HELD_OUT)):
        for i, shape in enumerate(shapes):
            measure(shape, 100 * (label_set == "held-out") + i, anchors, args, base,
                    args.out / "block_scaled_vs_torch.jsonl", label_set)
    for i, shape in enumerate(GROUPED):
        grouped(shape, 200 + i, args, base, args.out / "block_scaled_vs_torch.jsonl")


if __name__ == "__main__":
    main()
