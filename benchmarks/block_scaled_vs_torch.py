"""The fine-grained fp8 bar: tilemm.scaled_matmul with block scales (1x128 for A, 128x128 for B,
DeepGEMM's) and with row-wise scales, against torch._scaled_mm with row-wise scales (and
tensor-wise, beside it) and with the same block scales (cuBLASLt's, where this torch takes them:
CUDA 12.9 or newer, Hopper), on DeepSeek-V3-like shapes; then grouped contiguous float8 (GROUPED:
tilemm.grouped_matmul with block scales, torch._scaled_grouped_mm with row-wise ones beside it).

The variants of a shape: scaled_mm-row, scaled_mm-tensor, scaled_mm-block (torch's block-scaled
product, its scales laid out as torch takes them before timing, as a caller of torch would keep
them), tilemm-block (tilemm's default: torch's block-scaled product where it takes the call, the
scales laid out again at each call, else rung 16's program), tilemm-block-own (library=False:
rung 16's program), tilemm-row, tilemm-tensor. Each is timed against scaled_mm-row and
scaled_mm-block (the ratio columns vs_scaled_mm_row and vs_scaled_mm_block).

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/block_scaled_vs_torch.py --out DIR
    ... block_scaled_vs_torch.py --out DIR --tune           # ~2 min: the fit set over CANDIDATES, a winner table
    ... block_scaled_vs_torch.py --out DIR --held-out-only  # ~2 min: the held-out shapes, the defaults

float8_e4m3fn, A row-major (M, K), B given as (N, K).T, bfloat16 out, float32 sums (torch's
use_fast_accum=False). FIT is the set --tune sweeps CANDIDATES on (the warp-specialized program's
tiles, stages and GROUP_M; the Triton program's tiles, warps and stages); HELD_OUT is measured
only, with the rung's defaults. Every answer is checked first, on 64 sampled rows, against the
float64 product of the dequantized operands (each fp8 value times its scale) within the bound
tests/test_block_scaled.py uses on the GPU (bfloat16's rounding, float32 sums' allowance and
Hopper's fp8 accumulator within a K block); a variant that fails is recorded as failed and not
timed. Protocol: pre-warm, interleaved rounds (order rotated), CUDA events, the median. One JSON
line a (shape, variant).
"""
from __future__ import annotations

import torch

import tilemm
from tilemm.system.timing import interleaved_rounds

import harness

# (M, N, K): DeepSeek-V3's dense GEMMs (DeepGEMM's table: N x K pairs) at M = 4096, and others
FIT = [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536)]
HELD_OUT = [(4096, 4096, 7168), (4096, 7168, 2048), (2048, 32768, 512), (8192, 7168, 16384), (128, 7168, 16384),
            (1024, 24576, 1536), (4096, 36864, 7168)]
# --tune's candidates: the warp-specialized (Gluon, Hopper) program's tiles (block_n 256: two
# halves; 128: one), stages and GROUP_M, persistent; and the Triton program's (one program a tile)
CANDIDATES = [dict(warp_specialized=True, block_m=128, block_n=bn, num_stages=s, group_m=g)
              for bn, s in ((256, 3), (256, 4), (128, 4), (128, 6)) for g in (8, 16)]
CANDIDATES += [dict(warp_specialized=False, block_m=bm, block_n=bn, num_warps=8, num_stages=s, group_m=8)
               for bm, bn, s in ((128, 128, 4), (128, 256, 3), (64, 256, 4))]


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
    ref, bound = harness.fp8_reference(a, b, scale_a, scale_b, kind, rows)
    return harness.within(c[rows], ref, bound)


# the variants each timed one is divided by (a record's vs_<anchor> column, "-" as "_")
RATIO_ANCHORS = ("scaled_mm-row", "scaled_mm-block")


def torch_block_scales(scale_a, scale_b):
    """DeepGEMM's (M, K/128) and (K/128, N/128) scales as torch._scaled_mm takes them (ATen's
    ScaledBlas.cpp): scale_a with strides (1, M); scale_b whose transpose (N/128, K/128) is
    row-major, its rows ceil(K/128) rounded up to a multiple of 4 apart."""
    kb, nb = scale_b.shape
    rows = torch.zeros(nb, -(-kb // 4) * 4, device=scale_b.device, dtype=scale_b.dtype)[:, :kb]
    rows.copy_(scale_b.T)
    return scale_a.T.contiguous().T, rows.T


def anchors(a, b, s):
    bf16 = torch.bfloat16
    block_a, block_b = torch_block_scales(*s["block"])
    return {"scaled_mm-row": ("row", lambda: torch._scaled_mm(a, b, *s["row"], out_dtype=bf16)),
            "scaled_mm-tensor": ("tensor", lambda: torch._scaled_mm(a, b, *s["tensor"], out_dtype=bf16)),
            "scaled_mm-block": ("block", lambda: torch._scaled_mm(a, b, block_a, block_b, out_dtype=bf16)),
            "tilemm-block": ("block", lambda: tilemm.scaled_matmul(a, b, *s["block"])),
            "tilemm-block-own": ("block", lambda: tilemm.scaled_matmul(a, b, *s["block"], library=False)),
            "tilemm-row": ("row", lambda: tilemm.scaled_matmul(a, b, *s["row"])),
            "tilemm-tensor": ("tensor", lambda: tilemm.scaled_matmul(a, b, *s["tensor"]))}


def label_of(config: dict) -> str:
    return ("ws-" if config.get("warp_specialized") else "triton-") + "-".join(
        f"{key}={value}" for key, value in config.items() if key != "warp_specialized")


def tuning(a, b, s):
    bf16 = torch.bfloat16
    variants = {"scaled_mm-row": ("row", lambda: torch._scaled_mm(a, b, *s["row"], out_dtype=bf16)),
                "tilemm-block-default": ("block", lambda: tilemm.scaled_matmul(a, b, *s["block"], library=False))}
    for config in CANDIDATES:
        variants["tilemm-block-" + label_of(config)] = ("block", lambda c=config: tilemm.scaled_matmul(
            a, b, *s["block"], **c))
    return variants


def winners(records: list) -> None:
    """The fastest candidate of each fit shape, and the candidates in order of their geometric
    mean over the fit shapes (TFLOP/s, and x row-wise _scaled_mm's)."""
    timed = [r for r in records if r.get("tflops") and r["variant"].startswith("tilemm-block-")]
    shapes = sorted({(r["m"], r["n"], r["k"]) for r in timed})
    print("\nwinner per fit shape:")
    for shape in shapes:
        best = max((r for r in timed if (r["m"], r["n"], r["k"]) == shape), key=lambda r: r["tflops"])
        print(f"  {shape[0]:5}x{shape[1]:5}x{shape[2]:5}  {best['variant']:60} {best['tflops']:7.1f} TFLOP/s "
              f"x{best['vs_scaled_mm_row'] or float('nan'):5.3f}")
    print("candidates by geometric mean over the fit shapes (every shape measured):")
    by_variant = {}
    for r in timed:
        by_variant.setdefault(r["variant"], []).append(r)
    table = [(harness.geomean(r["tflops"] for r in rs), harness.geomean(r["vs_scaled_mm_row"] for r in rs), v)
             for v, rs in by_variant.items() if len(rs) == len(shapes) and all(r["vs_scaled_mm_row"] for r in rs)]
    for tflops, ratio, variant in sorted(table, reverse=True):
        print(f"  {variant:60} {tflops:7.1f} TFLOP/s x{ratio:5.3f}")


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
    for rec in records:
        t = times.get(rec["variant"])
        if t is not None:
            rec.update(median_ms=t, tflops=2 * m * n * k / t / 1e9,
                       **{ratio_column(name): times[name] / t if times.get(name) else None for name in RATIO_ANCHORS})
        ratios = " ".join(f"x{rec.get(ratio_column(name)) or float('nan'):5.3f}" for name in RATIO_ANCHORS)
        print(f"{label_set:8} {m:5}x{n:5}x{k:5} {rec['variant']:62} {rec.get('median_ms', float('nan')):7.3f} ms "
              f"{rec.get('tflops', float('nan')):7.1f} TFLOP/s {ratios} {rec['status']}", flush=True)
    harness.append(out_file, records)
    torch.cuda.empty_cache()
    return records


def ratio_column(anchor: str) -> str:
    """A record's column of the ratio to `anchor`: "vs_scaled_mm_row" for "scaled_mm-row"."""
    return "vs_" + anchor.replace("-", "_")


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
        counts = harness.routed_rows(weights, rows, g)
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
    args = harness.arguments(tune=False, held_out_only=False, rounds=3, per_round=0.15, prewarm=8.0,
                             helps={"tune": "the fit set over CANDIDATES, then the winner table (~2 min)",
                                    "held_out_only": "the held-out shapes with the defaults only, no grouped (~2 min)"})
    base = harness.stamp("block_scaled_vs_torch.py", args)
    harness.prewarm(args.prewarm)
    if args.tune:
        records = []
        for i, shape in enumerate(FIT):
            records += measure(shape, i, tuning, args, base, args.out / "block_scaled_tuning.jsonl", "fit")
        winners(records)
        return
    sets = (("held-out", HELD_OUT),) if args.held_out_only else (("fit", FIT), ("held-out", HELD_OUT))
    for label_set, shapes in sets:
        for i, shape in enumerate(shapes):
            measure(shape, 100 * (label_set == "held-out") + i, anchors, args, base,
                    args.out / "block_scaled_vs_torch.jsonl", label_set)
    if not args.held_out_only:
        for i, shape in enumerate(GROUPED):
            grouped(shape, 200 + i, args, base, args.out / "block_scaled_vs_torch.jsonl")


if __name__ == "__main__":
    main()
