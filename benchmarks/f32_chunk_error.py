"""3xTF32's error against float64 beside SGEMM's as K grows (issue 9: "error no worse than
SGEMM's"), for chunks of several lengths: the tensor cores' own sums, which drop low bits, run
over a chunk of K steps before each float32 add, so a chunk's error does not shrink with K while
SGEMM's grows with it; the rung (chunk_steps: at least MIN_CHUNKS chunks) beside fixed chunk
lengths. M = N = 2048 (--n), random normal data; max |C - C64| / max |C64|. SGEMM's error depends on
cuBLAS's algorithm for the shape (split-K, where K is long beside M and N, sums shorter runs).

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f32_chunk_error.py --out DIR
"""
from __future__ import annotations

import json

import torch

import tilemm
from tilemm import machine
from tilemm.ladder.tensorcore import t4_f32

import gpu_ladder  # noqa: E402  (--out)


def main():
    args = gpu_ladder.out_and_n(2048, ks=["64", "128", "256", "512", "1024", "2048", "4096", "16384"],
                                chunks=["1", "2", "4", "8", "16"])
    n = args.n        # M = N
    torch.backends.cuda.matmul.allow_tf32 = False
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/f32_chunk_error.py", args))
    kept = t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS
    with open(args.out / "f32_chunk_error.jsonl", "a") as f:
        for k in map(int, args.ks):
            gen = torch.Generator(device="cuda").manual_seed(k)
            a = torch.randn(n, k, device="cuda", generator=gen)
            b = torch.randn(k, n, device="cuda", generator=gen)
            ref = a.double() @ b.double()

            def error(c):
                return float((c.double() - ref).abs().max() / ref.abs().max())
            rec = {"m": n, "n": n, "k": k, "sgemm": error(a @ b),
                   "3xtf32 (the rung)": error(tilemm.matmul(a, b, kernel="tensorcore-f32")), **stamp}
            for chunk in map(int, args.chunks):          # every K in chunks of this many steps
                t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS = chunk, 1
                try:
                    rec[f"3xtf32 chunk {chunk}"] = error(tilemm.matmul(a, b, kernel="tensorcore-f32"))
                finally:
                    t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS = kept
            print(" ".join(f"{key} {v:.2e}" if isinstance(v, float) else f"{key} {v}" for key, v in rec.items()
                           if key not in stamp), flush=True)
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
