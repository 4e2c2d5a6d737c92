"""The SIMT rung `regblock` (numba-cuda) at other block and thread tiles, float32 against cuBLAS
SGEMM (TF32 off) or, with --int32, int32 against CuPy's integer kernel: interleaved rounds after a pre-warm, CUDA events, medians, each
configuration's answer checked against float64 first.

    PYTHONPATH=src:benchmarks python3 benchmarks/regblock_sweep.py --out DIR --n 4096 [--int32]
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n)

# (block_m, block_n, block_k, thread_m, thread_n); the first run also timed (128, 128, 8, 8, 8),
# (128, 256, 8, 8, 16), (256, 128, 8, 16, 8), (64, 128, 16, 8, 8), (128, 64, 16, 8, 8),
# (256, 128, 8, 8, 16), (128, 256, 8, 16, 8): all slower than (128, 128, 16, 16, 8)
TILES = [(128, 128, 16, 8, 8), (128, 128, 16, 8, 16), (128, 128, 16, 16, 8), (128, 128, 8, 16, 8),
         (128, 128, 4, 16, 8), (64, 128, 16, 16, 8), (128, 64, 16, 16, 8), (256, 64, 16, 16, 8),
         (64, 256, 16, 8, 16)]
INT32_TILES = [(128, 128, 16, 8, 8), (128, 128, 16, 16, 8)]


def sass_mix(kern) -> dict:
    """Opcode counts of a compiled numba-cuda kernel's machine code (nvdisasm): how much of it is FFMA."""
    import collections
    import re
    counts = collections.Counter()
    for sass in kern.inspect_sass().values():
        for op in re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M):
            counts[op] += 1
    return dict(counts.most_common(14)) | {"total": sum(counts.values())}


def main():
    args = gpu_ladder.out_and_n(4096, int32=False)
    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(n)
    if args.int32:              # values whose products and sums float64 holds exactly
        a = torch.randint(-100, 101, (n, n), device="cuda", generator=gen, dtype=torch.int32)
        b = torch.randint(-100, 101, (n, n), device="cuda", generator=gen, dtype=torch.int32)
    else:
        a = torch.randn(n, n, device="cuda", generator=gen)
        b = torch.randn(n, n, device="cuda", generator=gen)
    want = a.double() @ b.double()
    anchor, anchor_result = tilemm.plan(a, b, kernel="cublas").prepare()   # SGEMM (TF32 off), or CuPy's int32
    anchor_label = "cupy-int32" if args.int32 else "cublas-sgemm"
    launchers = {anchor_label: anchor}
    anchor()
    torch.cuda.synchronize()
    errors = {anchor_label: float((torch.as_tensor(anchor_result()).double() - want).abs().max() / want.abs().max())}
    for bm, bn, bk, tm, tn in TILES if not args.int32 else INT32_TILES:
        label = f"regblock {bm}x{bn}x{bk} t{tm}x{tn}"
        try:
            launch, result = tilemm.plan(a, b, kernel="regblock", block_m=bm, block_n=bn, block_k=bk, thread_m=tm,
                                         thread_n=tn).prepare(poison=True)
            launch()
            torch.cuda.synchronize()
        except Exception as e:                                   # a tile the limits refuse
            print(f"{label}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        err = float((torch.as_tensor(result()).double() - want).abs().max() / want.abs().max())
        if err > (0 if args.int32 else 1e-5):                  # int32: exact
            print(f"{label}: wrong answer, error {err:.2e}", flush=True)
            continue
        launchers[label], errors[label] = launch, err
    gpu_ladder.prewarm(6)
    times = interleaved_rounds(launchers, 3, 0.3)
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks python3 benchmarks/regblock_sweep.py", args))
    stamp["dtype"] = "int32" if args.int32 else "float32"
    base = statistics.median(times[anchor_label])
    with open(args.out / "regblock_sweep.jsonl", "a") as f:
        for label, t in times.items():
            med = statistics.median(t)
            print(f"{label:32} {med:8.3f} ms {2 * n**3 / med / 1e9:6.1f} T(FL)OP/s  vs {anchor_label} {base / med:5.3f}x",
                  flush=True)
            f.write(json.dumps({"variant": label, "median_ms": med, "n": n, "vs_cupy" if args.int32 else "vs_sgemm": base / med,
                                "relative_error": errors[label], **stamp}) + "\n")
    from tilemm.ladder.simt import launch
    factory, _ = launch.FACTORIES["regblock"]
    for tiles in TILES[:3] if not args.int32 else []:
        try:
            kern = launch.compiled(factory, "float32", **dict(zip(("block_m", "block_n", "block_k", "thread_m",
                                                                    "thread_n"), tiles)))
            print(tiles, sass_mix(kern), flush=True)
        except Exception as e:                                   # nvdisasm missing
            print(tiles, "no SASS:", e)


if __name__ == "__main__":
    main()
