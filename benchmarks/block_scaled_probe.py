"""A quick probe (under 3 minutes on an H200): the block-scaled program's variants and the row-wise
scales' program against torch._scaled_mm with row-wise scales, kernels alone.

    PYTHONPATH=src:benchmarks python3 benchmarks/block_scaled_probe.py --out $OUT     # a folder, or a .jsonl file

float8_e4m3fn, A row-major (M, K), B given as (N, K).T, bfloat16 C, float32 sums, on SHAPES (the
fit set of block_scaled_vs_torch.py's kind). Variants (VARIANTS: each label's scales and what
it runs; every one a launch of the programs themselves, no tilemm.scaled_matmul call around it):

  scaled_mm-row         torch._scaled_mm, row-wise scales (the anchor)
  tensor                the fp8 program, per-tensor scales, its default choice (what row-wise should cost)
  row                   the fp8 program with row-wise scales, its default choice (tilemm's row-wise route)
  row-triton            the same with warp_specialized=False: the persistent Triton program
  block                 block scales, rung 16's default (on Hopper: warp-specialized 128 x 256, 4
                        stages, GROUP_M 16, C by TMA stores, the promotion a multiply and an add)
  block-fused           the same program compiled with enable_fp_fusion=True: the promotion one fused
                        multiply-add (ptxas of Triton 3.9 spills in the K loop: it adds the first
                        half's partial while the second's products run, into a second partial)
  block-fma-right       block with the second half's promotion one fused multiply-add (FMA_RIGHT),
                        the first's a multiply and an add: no spills (Triton 3.9's ptxas)
  block-128             the warp-specialized program at 128 x 128 (one half, fused), 6 stages
  block-sa-mmajor       block, scale_a M-major (DeepGEMM's layout): a K block's 64 rows' scales
                        contiguous instead of K/128 floats apart
  block-fused-sa-mmajor block-fused with scale_a M-major
  block-c-registers     block with C written from registers (no TMA store)
  block-triton          rung 16's Triton program (warp_specialized=False), one program a tile

Every answer is checked first, on 64 sampled rows, against the float64 product of the dequantized
operands within the bound of tests/test_block_scaled.py on the GPU; a variant that fails or
raises is reported and not timed. The programs are compiled first in --jobs processes (Triton's
disk cache serves this one after). Timing: --prewarm seconds of products, then --rounds
interleaved rounds (the order rotated), each a block of --block launches back to back between
CUDA events; the median a launch. A table a shape (microseconds, TFLOP/s, x scaled_mm-row), a
JSON line a (shape, variant) appended to --out, and a summary line (geometric means over SHAPES).
"""
from __future__ import annotations

import torch

from tilemm.engine import availability, operand_copies
from tilemm.engine.launches import Steps
from tilemm.ladder.tensorcore import r16_block_scaled as rung16, scaled_fp8

import harness

SHAPES = [(4096, 4096, 7168), (8192, 7168, 16384), (2048, 32768, 512)]        # (M, N, K)
ANCHOR = "scaled_mm-row"
# label -> (the scales it takes, its parameters: see make_launch)
VARIANTS = {
    ANCHOR: ("row", {}),
    "tensor": ("tensor", {}),
    "row": ("row", {}),
    "row-triton": ("row", dict(warp_specialized=False)),
    "block": ("block", {}),
    "block-fused": ("block", dict(fusion=True)),
    "block-fma-right": ("block", dict(fma_right=True)),
    "block-128": ("block", dict(block_n=128)),
    "block-sa-mmajor": ("block-mmajor", {}),
    "block-fused-sa-mmajor": ("block-mmajor", dict(fusion=True)),
    "block-c-registers": ("block", dict(tma_store=False)),
    "block-triton": ("block", dict(warp_specialized=False)),
}
ENV = "PYTHONPATH=src:benchmarks"


def blocks(x: int) -> int:
    return -(-x // 128)


def operands(m: int, n: int, k: int, seed: int = 0, device: str = "cuda") -> tuple:
    """A (M, K), B (K, N) as (N, K).T, and {kind: (scale_a, scale_b)}: row-wise, block (scale_a
    row-major, and the same values M-major) and per-tensor."""
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=g, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g, device=device).to(torch.float8_e4m3fn).T
    block_a = torch.rand(m, blocks(k), generator=g, device=device) + 0.5
    block_b = torch.rand(blocks(k), blocks(n), generator=g, device=device) + 0.5
    scales = {"row": (torch.rand(m, 1, generator=g, device=device) + 0.5,
                      torch.rand(1, n, generator=g, device=device) + 0.5),
              "block": (block_a, block_b),
              "block-mmajor": (block_a.T.contiguous().T, block_b),
              "tensor": (torch.tensor([0.75], device=device), torch.tensor([1.25], device=device))}
    return a, b, scales


def ws_steps(a, b, c, scale_a, scale_b, block_n: int = 256, fusion=None, tma_store: bool = True,
             fma_right: bool = False) -> Steps:
    """The block scales' warp-specialized program (r16_block_scaled_ws_kernel) at 128 x block_n
    tiles, rung 16's stages and GROUP_M, compiled with enable_fp_fusion=fusion (None: as rung 16
    does), C by TMA stores or from registers, the second half's promotion fused (fma_right)."""
    from tilemm.engine.gluon_helpers import descriptor
    from tilemm.ladder.tensorcore import r16_block_scaled_ws_kernel as ws
    m, k = a.shape
    n = b.shape[1]
    a_rows, a_fill = operand_copies.aligned_rows(a)
    b_rows, b_fill = operand_copies.aligned_rows(b.T)
    product = ws.launcher(descriptor(a_rows, 128, ws.BLOCK_K), descriptor(b_rows, block_n, ws.BLOCK_K),
                          ws.c_descriptor(c) if tma_store else None, c, scale_a, scale_b, m, n, k,
                          availability.multiprocessors(), 128, block_n, rung16.WS_GROUP_M,
                          rung16.WS_STAGES[128, block_n], fusion=fusion, fma_right=fma_right)
    return Steps([a_fill, b_fill, product])


def make_launch(label: str, a, b, scales: dict, out_dtype=torch.bfloat16):
    """label's call: a function of no arguments that launches the variant and returns its C."""
    kind, params = VARIANTS[label]
    scale_a, scale_b = scales[kind]
    m, k = a.shape
    n = b.shape[1]
    if label == ANCHOR:
        return lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    c = torch.full((m, n), float("nan"), dtype=out_dtype, device=a.device)      # poisoned: all written
    if kind in ("row", "tensor"):
        config = scaled_fp8.resolve({**scaled_fp8.DEFAULTS, **params}, False, m, n, k)
        steps = scaled_fp8.bind(a, b, c, scale_a, scale_b, False, row_wise=kind == "row", **config)
    elif set(params) & {"fusion", "tma_store", "fma_right"} or params.get("block_n") or kind == "block-mmajor":
        steps = ws_steps(a, b, c, scale_a, scale_b, **params)
    else:
        config = rung16.resolve(params, m, n)
        steps = rung16.launch(a, b, c, scale_a, scale_b, **config)      # launched once here (and compiled)
        if steps is None:
            raise RuntimeError(f"{label}: rung 16 copied an operand; its launch can't be repeated")

    def call():
        steps()
        return c
    return call


def warm(label: str) -> None:
    """Compile (run once) one variant on every shape: a worker's share."""
    for m, n, k in SHAPES:
        a, b, scales = operands(m, n, k)
        try:
            make_launch(label, a, b, scales)()
        except Exception as e:  # noqa: BLE001 - reported again where it is checked
            print(f"warm {m} x {n} x {k} {label}: {type(e).__name__}: {e}"[:300], flush=True)
    torch.cuda.synchronize()


def problem(m: int, n: int, k: int, args, stamp: dict) -> list:
    a, b, scales = operands(m, n, k)
    rows = torch.randint(0, m, (64,), generator=torch.Generator().manual_seed(m + n + k)).cuda()
    refs = {}
    calls, failed = {}, {}
    for label, (kind, _) in VARIANTS.items():
        try:
            call = make_launch(label, a, b, scales)
        except Exception as e:  # noqa: BLE001 - a variant that won't build: reported, not timed
            failed[label] = f"{type(e).__name__}: {e}"[:300]
            print(f"  {label:24} FAILED: {failed[label]}", flush=True)
            continue
        calls[label] = (kind, call)

    def check(label, c):
        kind = calls[label][0]
        if kind not in refs:
            refs[kind] = harness.fp8_reference(a, b, *scales[kind], kind, rows)
        return harness.within(c[rows], *refs[kind])
    good, outcomes = harness.checked({label: call for label, (_, call) in calls.items()}, check, width=24)
    refs.clear()
    us = harness.medians(harness.rounds(good, args.rounds, lambda call: harness.block_us(call, args.block)))
    flops = 2 * m * n * k
    base = us.get(ANCHOR)
    records = []
    print(f"\n{m} x {n} x {k}", flush=True)
    for label in VARIANTS:
        t = us.get(label)
        status = "ok" if t else ("wrong" if label in outcomes and not outcomes[label].ok else "failed")
        record = {"m": m, "n": n, "k": k, "variant": label, "scales": VARIANTS[label][0],
                  "params": {key: v for key, v in VARIANTS[label][1].items()}, "status": status,
                  "us": round(t, 2) if t else None, "tflops": round(flops / t / 1e6, 1) if t else None,
                  "vs_scaled_mm_row": round(base / t, 3) if t and base else None,
                  "max_error": outcomes[label].value if label in outcomes else None,
                  "error": failed.get(label), **stamp}
        records.append(record)
        print(f"  {label:24} " + (f"{t:9.1f} us {record['tflops']:7.1f} TFLOP/s x{record['vs_scaled_mm_row'] or 0:5.3f}"
                                  if t else status.upper()), flush=True)
    return records


def main():
    ap = harness.parser(__doc__.splitlines()[0], out_required=True, rounds=7, block=10, jobs=12, prewarm=3.0)
    args = ap.parse_args()
    # --out: a file that JSON lines are appended to, or a folder (then its block_scaled_probe.jsonl)
    out = args.out / "block_scaled_probe.jsonl" if args.out.is_dir() else args.out
    if args.jobs > 1:           # Triton compiles one program at a time a process; its disk cache serves this one
        import concurrent.futures
        import multiprocessing
        try:
            with concurrent.futures.ProcessPoolExecutor(args.jobs,
                                                        mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(warm, [label for label in VARIANTS if label != ANCHOR]))
        except Exception as e:  # noqa: BLE001 - a worker lost: what it did not compile compiles when checked
            print(f"warm: {type(e).__name__}: {e}"[:300], flush=True)
    stamp = harness.stamp("block_scaled_probe.py", args, env=ENV)
    harness.prewarm(args.prewarm)
    records = []
    for m, n, k in SHAPES:
        records += problem(m, n, k, args, stamp)
        harness.append(out, records[-len(VARIANTS):])
    summary = {"summary": "block_scaled_probe", "shapes": len(SHAPES), **stamp}
    print("\ngeometric means over the shapes (variants timed on every shape):", flush=True)
    for label in VARIANTS:
        timed = [r for r in records if r["variant"] == label and r["tflops"]]
        if len(timed) == len(SHAPES):
            ratios = [r["vs_scaled_mm_row"] for r in timed]
            ratio = round(harness.geomean(ratios), 3) if all(ratios) else None      # (None: the anchor failed)
            summary[label] = {"tflops": round(harness.geomean(r["tflops"] for r in timed), 1), "vs_scaled_mm_row": ratio}
            print(f"  {label:24} {summary[label]['tflops']:7.1f} TFLOP/s x{ratio or float('nan'):5.3f}", flush=True)
    harness.append(out, [summary])


if __name__ == "__main__":
    main()
