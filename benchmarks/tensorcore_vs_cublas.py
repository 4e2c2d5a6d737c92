"""The Triton tensor-core rungs against cuBLAS (torch.matmul) over the
`shapes` suite's shapes (square, odd, skinny, LLM-like), interleaved rounds after a pre-warm,
every variant checked against a float64 reference first.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tensorcore_vs_cublas.py --out DIR \
        [--dtypes bfloat16 float16 float64] [--shapes 8192x8192x8192 8191x8191x8191 ...] [--wide held-out]

With --whole-calls it times whole calls as a user makes them (tilemm.matmul(a, b) against
torch.matmul(a, b) and tilemm's library rung, each allocating its result), the CPU's cost of a call
included: the default kernel's bars, e.g.

    PYTHONPATH=src python3 benchmarks/tensorcore_vs_cublas.py --out DIR --dtypes bfloat16 --wide held-out \
        --variants default library --whole-calls

Ratios (vs_cublas, vs_library) are the median over rounds of each round's ratio of medians
(tilemm.system.timing.paired_ratio). Each record also carries the HBM bound of its shape: the bytes a GEMM must move at least (A, B
and C once) over the copy bandwidth measured in the same run.
"""
import argparse
import json
import os
import statistics

import tilemm
from tilemm.tools.bench.suites import SHAPES, wide_problems
from tilemm.system.timing import graphed, interleaved_rounds, launch_overhead_us, paired_ratio, time_cuda

import torch  # noqa: E402

import harness

# (label, kernel, params) per dtype; "skinny" only where M <= 64. "library" is tilemm's own library
# rung (cuBLAS with float32 sums; CuPy's exact kernel for integers), what the default must not lose to
VARIANTS = {
    "bfloat16": [("tensorcore", "tensorcore", {}), ("default", None, {}), ("library", "cublas", {}),
                 ("tc-128x128x64-w4", "tensorcore", dict(block_m=128, block_n=128, block_k=64, num_warps=4,
                                                         num_stages=4)),
                 ("tc-64x128x64-w4", "tensorcore", dict(block_m=64, block_n=128, block_k=64, num_warps=4,
                                                        num_stages=4)),
                 ("tc-64x64x64-w4", "tensorcore", dict(block_m=64, block_n=64, block_k=64, num_warps=4,
                                                       num_stages=4)),
                 ("tc-128x256x64-s3", "tensorcore", dict(block_m=128, block_n=256, block_k=64, num_warps=8,
                                                         num_stages=3)),
                 ("tc-stream-k", "tensorcore", dict(stream_k=True)),
                 ("tc-no-stream-k", "tensorcore", dict(stream_k=False)),
                 ("tc-no-align-rows", "tensorcore", dict(align_rows=False)),
                 ("tc-gm16", "tensorcore", dict(group_m=16)),
                 ("tc-gm4", "tensorcore", dict(group_m=4)),
                 ("tc-k128-s2", "tensorcore", dict(block_k=128, num_stages=2)),
                 ("tc-256x128", "tensorcore", dict(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=4)),
                 ("tc-128x128-w8", "tensorcore", dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=5)),
                 ("tc-128x128-w4", "tensorcore", dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=5)),
                 ("tc-s3", "tensorcore", dict(num_stages=3)),
                 ("tc-one-per-tile", "tensorcore", dict(persistent=False)),
                 ("tc-pointers", "tensorcore", dict(tma=False)),
                 ("tc-tma", "tensorcore", dict(tma=True)),
                 ("tc-no-split", "tensorcore", dict(split_k=1)),
                 ("tc-16-rows", "tensorcore", dict(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=4)),
                 ("tc-16-columns", "tensorcore", dict(block_m=64, block_n=16, block_k=128, num_warps=4,
                                                      num_stages=4)),
                 # thick skinny tiles (skinny_block) for M = 32 / 64, K split by k_splits
                 ("tc-32-rows", "tensorcore", dict(block_m=32, block_n=64, block_k=128, num_warps=4, num_stages=4)),
                 ("tc-64-rows", "tensorcore", dict(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=4))],
    "float64": [("tensorcore-f64", "tensorcore-f64", {}), ("default", None, {}), ("library", "cublas", {}),
                ("f64-triton", "tensorcore-f64", dict(dmma=False)),
                ("f64-dmma", "tensorcore-f64", dict(dmma=True)),
                ("f64-64x64x32-w4-s4", "tensorcore-f64", dict(block_m=64, block_n=64, block_k=32, num_warps=4)),
                ("f64-128x128x32-w8-s3", "tensorcore-f64", dict(block_m=128, block_n=128, block_k=32, num_warps=8,
                                                                num_stages=3)),
                ("f64-one-per-tile", "tensorcore-f64", dict(persistent=False)),
                ("f64-persistent-s2", "tensorcore-f64", dict(persistent=True, num_stages=2)),
                ("f64-persistent-k16-s4", "tensorcore-f64", dict(persistent=True, block_k=16, num_stages=4)),
                ("f64-copy-none", "tensorcore-f64", dict(copy_transposed="none")),
                ("f64-copy-ab", "tensorcore-f64", dict(copy_transposed="ab")),
                ("f64-k16-s5", "tensorcore-f64", dict(block_m=128, block_n=128, block_k=16, num_warps=8,
                                                      num_stages=5)),
                ("f64-128x64x32-w4-s4", "tensorcore-f64", dict(block_m=128, block_n=64, block_k=32, num_warps=4,
                                                               num_stages=4))],
}
VARIANTS["float16"] = VARIANTS["bfloat16"]
# int8 -> exact int32 sums, against torch._int_mm (cuBLASLt's int8 GEMM; "cublas" in the records)
VARIANTS["int8"] = [("tensorcore-int", "tensorcore-int", dict(out_dtype="int32")),
                    ("default", None, dict(out_dtype="int32")), ("library", "cublas", dict(out_dtype="int32"))]
# float32: two anchors (cuBLAS SGEMM with TF32 off, cuBLAS TF32); labels with "tf32" but not "3x"
# are checked against TF32's error (inputs rounded to 10 mantissa bits), the others against float32's
VARIANTS["float32"] = [("tensorcore-f32", "tensorcore-f32", {}),
                       ("tf32-tensorcore-f32", "tensorcore-f32", dict(precision="tf32")),
                       ("tf32-persistent", "tensorcore-f32", dict(precision="tf32", persistent=True)),
                       ("tf32-persistent-s3", "tensorcore-f32", dict(precision="tf32", persistent=True, num_stages=3)),
                       ("tf32-one-copy", "tensorcore-f32", dict(precision="tf32", copy_panels=1)),
                       ("tf32-4-panels", "tensorcore-f32", dict(precision="tf32", copy_panels=4)),
                       ("3x-one-copy", "tensorcore-f32", dict(copy_panels=1)),
                       ("3x-direct", "tensorcore-f32", dict(direct=True)),
                       ("3x-split", "tensorcore-f32", dict(direct=False)),
                       ("3x-stream-k", "tensorcore-f32", dict(stream_k=True)),
                       ("3x-no-stream-k", "tensorcore-f32", dict(stream_k=False)),
                       ("3x-2-panels", "tensorcore-f32", dict(copy_panels=2)),
                       ("3x-8-panels", "tensorcore-f32", dict(copy_panels=8)),
                       ("int8-tensorcore-f32", "tensorcore-f32", dict(precision="int8")),
                       ("regblock", "regblock", {}), ("default", None, {}), ("library", "cublas", {})]
SWEEP_F32 = [("3x-128x64x32-w4-s4", "tensorcore-f32", dict(block_n=64, num_warps=4, num_stages=4)),
             ("3x-128x128x16-s5", "tensorcore-f32", dict(block_k=16, num_stages=5)),
             ("3x-64x128x32-w4-s3", "tensorcore-f32", dict(block_m=64, num_warps=4)),
             ("3x-64x256x32-s2", "tensorcore-f32", dict(block_m=64, block_n=256, num_stages=2)),
             ("3x-gm4", "tensorcore-f32", dict(group_m=4)),
             ("3x-gm16", "tensorcore-f32", dict(group_m=16)),
             ("tf32-128x256x32-s4", "tensorcore-f32", dict(precision="tf32", block_n=256, num_stages=4)),
             ("tf32-256x128x32-s4", "tensorcore-f32", dict(precision="tf32", block_m=256, num_stages=4)),
             ("tf32-128x128x32-s5", "tensorcore-f32", dict(precision="tf32", num_stages=5)),
             ("tf32-128x256x64-s2", "tensorcore-f32", dict(precision="tf32", block_n=256, block_k=64, num_stages=2))]
TF32_ANCHOR = "cublas-tf32"


def tf32_checked(c, a, b):
    """(ok, worst error over the TF32 bound): both inputs rounded to TF32 (2^-11 each), float32 sums."""
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    bound = (2 * 2.0**-11 + 2 * a.shape[1] * 2.0**-24) * scale + 2.0**-24 * ref.abs() + 1e-300
    ratio = ((c.double() - ref).abs() / bound).max()
    return bool(ratio <= 1) and not bool(torch.isnan(c).any()), float(ratio)


def relative_error(c, a, b):
    """max |C - C64| / max |C64|: the one number compared between SGEMM and 3xTF32."""
    ref = a.double() @ b.double()
    return float((c.double() - ref).abs().max() / ref.abs().max())


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write counted)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = time_cuda([lambda: dst.copy_(src)], 0.5, warmup_s=0.1)
    return 2 * src.numel() / (statistics.median(times) / 1e3)


def checked(c, a, b, dtype):
    """(ok, worst error over tilemm.numerics.accuracy's bound), on the GPU in float64; int8: exact (0.0)."""
    return harness.float64_check(c, a, b, dtype)[:2]


def whole_call(call, m: int, n: int, dtype):
    """(launch, result) for a call that allocates its result: launch() makes the call; result()
    makes it once more, into poisoned memory, and gives what it returns. The poison: a block of
    the result's size filled with NaN (0xA5 bytes) and freed just before the call, so that torch's
    caching allocator, which hands the last freed block of a size out first, gives the call that one."""
    def result():
        poison = torch.empty(m, n, dtype=dtype, device="cuda")
        poison.fill_(float("nan")) if poison.is_floating_point() else poison.view(torch.uint8).fill_(0xA5)
        del poison
        return call()
    return call, result


def int_mm_launch(a, b, c):
    """torch._int_mm into c as a user would call it: on the operands as they are, or on row-major
    copies (counted in its time) where cuBLASLt refuses their layout; None where it refuses the
    sizes (K, N not multiples of 8, M <= 16): no baseline there."""
    for call in (lambda out=c: torch._int_mm(a, b, out=out),
                 lambda out=c: torch._int_mm(a.contiguous(), b.contiguous(), out=out)):
        try:
            call()
            return call
        except RuntimeError as e:
            reason = e
    print(f"torch._int_mm {tuple(a.shape)} x {tuple(b.shape)}: {reason}", flush=True)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    ap.add_argument("--shapes", nargs="+", help="MxNxK, or MxNxK:LAYOUT (nn, nt, tn, tt; t: that operand transposed)",
                    default=[f"{m}x{n}x{k}" for m, n, k in [(8192, 8192, 8192)] + SHAPES])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=float, default=0.4)
    ap.add_argument("--prewarm", type=float, default=10.0)
    ap.add_argument("--sweep", action="store_true", help="float32: also time the SWEEP_F32 configurations")
    ap.add_argument("--graphs", action="store_true",
                    help="also time each variant replayed from a CUDA graph (GPU time alone, no launch cost)")
    ap.add_argument("--variants", nargs="+", help="only these labels (and the anchors)")
    ap.add_argument("--min-dim", type=int, default=0, help="only problems with M, N and K at least this")
    ap.add_argument("--max-macs", type=float, help="only problems of at most this many multiply-adds (M N K)")
    ap.add_argument("--min-macs", type=float, default=0, help="only problems of more than this many multiply-adds")
    ap.add_argument("--whole-calls", action="store_true",
                    help="time whole calls as a user makes them (tilemm.matmul(a, b) against torch.matmul(a, b), "
                         "each allocating its result) instead of prepared launches into a buffer")
    ap.add_argument("--wide", choices=["all", "fit", "held-out"],
                    help="the wide sweep's problems (tilemm.tools.bench.suites.wide_problems, with their layouts) "
                         "instead of --shapes: all of them or one half")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    problems = ([(p.m, p.n, p.k, p.layout, f"{p.kind}/{p.split}") for p in wide_problems()
                 if args.wide in ("all", p.split)] if args.wide
                else [(*map(int, shape.partition(":")[0].split("x")), shape.partition(":")[2] or "nn", None)
                      for shape in args.shapes])
    problems = [p for p in problems if min(p[:3]) >= args.min_dim and p[0] * p[1] * p[2] > args.min_macs
                and (args.max_macs is None or p[0] * p[1] * p[2] <= args.max_macs)]
    if args.wide:
        args.shapes = None          # not used: the record's command leaves them out
    stamp = harness.stamp("tensorcore_vs_cublas.py", args)
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    harness.prewarm(args.prewarm)
    records = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for m, n, k, layout, tag in problems:
            shape = f"{m}x{n}x{k}{'' if layout == 'nn' else ' ' + layout}"
            torch.manual_seed(m + n + k)
            a = harness.operand(m, k, layout[0], dtype_name)         # 't': a transposed view
            b = harness.operand(k, n, layout[1], dtype_name)
            launches, results, uncapturable = {}, {}, set()
            c_ref = torch.empty(m, n, device="cuda", dtype=torch.int32 if dtype == torch.int8 else dtype)
            torch.backends.cuda.matmul.allow_tf32 = False                 # cuBLAS SGEMM: no TF32
            launches["cublas"] = (int_mm_launch(a, b, c_ref) if dtype == torch.int8 else
                                  lambda a=a, b=b, c=c_ref: torch.matmul(a, b, out=c))
            results["cublas"] = lambda c=c_ref: c
            if args.whole_calls and launches["cublas"] is not None:
                baseline = launches["cublas"]
                launches["cublas"], results["cublas"] = whole_call(
                    lambda: baseline(out=None) if dtype == torch.int8 else torch.matmul(a, b), m, n, dtype)
            if launches["cublas"] is None:
                del launches["cublas"], results["cublas"]
            if dtype_name == "float32":
                c_tf32 = torch.empty(m, n, device="cuda", dtype=dtype)

                def tf32_matmul(a=a, b=b, c=c_tf32):
                    torch.backends.cuda.matmul.allow_tf32 = True
                    torch.matmul(a, b, out=c)
                    torch.backends.cuda.matmul.allow_tf32 = False
                launches[TF32_ANCHOR], results[TF32_ANCHOR] = tf32_matmul, (lambda c=c_tf32: c)
            for label, kernel, params in VARIANTS[dtype_name] + (SWEEP_F32 if args.sweep and dtype_name == "float32"
                                                                  else []):
                sixteen_bits = dtype_name in ("bfloat16", "float16")
                every_shape = ("tensorcore", "default", "library", "tc-no-split", "tc-16-rows", "tc-16-columns",
                               "tc-32-rows", "tc-64-rows")
                if label not in every_shape and sixteen_bits and min(m, n) <= 64:
                    continue          # skinny products take the pointer program whatever the tiles
                if args.variants and label not in args.variants:
                    continue
                if kernel and tilemm.kernel(kernel).backend == "numba-cuda":
                    uncapturable.add(label)    # numba launches on its own stream: a torch graph captures nothing
                try:
                    if args.whole_calls:
                        tilemm.plan(a, b, kernel=kernel, **params)        # refused here, as below, if at all
                        launches[label], results[label] = whole_call(
                            lambda kernel=kernel, params=params: tilemm.matmul(a, b, kernel=kernel, **params),
                            m, n, torch.int32 if dtype == torch.int8 else dtype)
                        continue
                    launches[label], results[label] = tilemm.plan(a, b, kernel=kernel, **params).prepare(poison=True)
                except tilemm.KernelUnavailable as e:          # refused before any launch: say so
                    print(f"{label}: {e}", flush=True)
            verdicts = {}
            for label in launches:
                launches[label]()
                torch.cuda.synchronize()
                tf32 = label.startswith("tf32") or label == TF32_ANCHOR
                verdicts[label] = (tf32_checked if tf32 else lambda c, a, b: checked(c, a, b, dtype_name))(
                    results[label](), a, b)
            by_round = interleaved_rounds({label: fn for label, fn in launches.items() if verdicts[label][0]},
                                          args.rounds, args.per_round, warmup_s=0.05, by_round=True)
            times = {label: [t for round_times in rounds for t in round_times] for label, rounds in by_round.items()}
            graph_times = {}
            if args.graphs:
                copies = 10
                graph_times = interleaved_rounds({label: graphed(fn, copies) for label, fn in launches.items()
                                                  if verdicts[label][0] and label not in uncapturable},
                                                 args.rounds, args.per_round, warmup_s=0.05)
                graph_times = {label: [t / copies for t in ts] for label, ts in graph_times.items()}
            bound_ms = (m * k + k * n + m * n) * a.element_size() / bandwidth * 1e3
            for label in launches:
                known = VARIANTS[dtype_name] + SWEEP_F32
                kernel = next((kn for lb, kn, _ in known if lb == label), "cublas")
                rec = {"variant": label, "kernel": kernel, "dtype": dtype_name, "m": m, "n": n, "k": k,
                       "layout": layout, "tag": tag, "whole_calls": args.whole_calls,
                       "status": "ok" if verdicts[label][0] else "FAILED", "worst_vs_bound": verdicts[label][1],
                       "params": next((p for lb, _, p in known if lb == label), {}),
                       "copy_bandwidth_tbs": bandwidth / 1e12, "hbm_bound_ms": bound_ms, **stamp}
                if dtype_name == "float32":
                    rec["relative_error"] = relative_error(results[label](), a, b)
                if label in times:
                    med = statistics.median(times[label])
                    if TF32_ANCHOR in times:
                        rec["vs_cublas_tf32"] = paired_ratio(by_round[TF32_ANCHOR], by_round[label])
                    if "library" in times:
                        rec["vs_library"] = paired_ratio(by_round["library"], by_round[label])
                    rec.update(median_ms=med, tflops=2 * m * n * k / med / 1e9,
                               vs_cublas=paired_ratio(by_round["cublas"], by_round[label]) if "cublas" in times else None,
                               vs_hbm_bound=bound_ms / med, launch_overhead_us=launch_overhead_us(launches[label]))
                if label in graph_times:
                    rec["graph_median_ms"] = statistics.median(graph_times[label])
                    if "cublas" in graph_times:       # not where cuBLAS's answer failed its check
                        rec["graph_vs_cublas"] = statistics.median(graph_times["cublas"]) / rec["graph_median_ms"]
                records.append(rec)
                with open(f"{args.out}/tensorcore_vs_cublas.jsonl", "a") as f:     # as it comes: a run cut
                    f.write(json.dumps(rec) + "\n")                                # short keeps what it measured
                print(f"{label:22} {dtype_name:9} {shape:18} {rec.get('median_ms', float('nan')):8.3f} ms "
                      f"{rec.get('tflops', float('nan')):7.1f} T  vs cuBLAS {rec.get('vs_cublas') or float('nan'):5.3f}  "
                      f"HBM bound {rec.get('vs_hbm_bound', float('nan')):5.2f}  launch {rec.get('launch_overhead_us', 0):4.0f} us "
                      f"vs TF32 {rec.get('vs_cublas_tf32') or float('nan'):5.3f}  rel.err {rec.get('relative_error', 0):.1e} "
                      f"graph {rec.get('graph_vs_cublas') or float('nan'):5.3f} {rec['status']} "
                      f"({verdicts[label][1]:.2g}x bound)", flush=True)
            a = b = c_ref = launches = results = None          # this problem's memory let go
            torch.cuda.empty_cache()
        for label in dict.fromkeys(r["variant"] for r in records if r["dtype"] == dtype_name):
            for key in ("vs_cublas", "vs_library", "graph_vs_cublas"):
                for split in ("fit", "held-out", None):
                    ratios = [r[key] for r in records if r["dtype"] == dtype_name and r["variant"] == label
                              and r.get(key) and (split is None or (r["tag"] or "").endswith(split))]
                    if ratios:
                        print(f"{label} {dtype_name} {split or 'all'}: geometric mean {key} over {len(ratios)} "
                              f"shapes {harness.geomean(ratios):.3f}, lowest "
                              f"{min(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
