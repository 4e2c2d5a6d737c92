"""tilemm.spread.distributed on several GPUs against one GPU at the same problem size: wall time of a
whole product (every rank's block of C, from the first broadcast to the last add), the
answer checked on sampled rows and columns against float64.

    torchrun --nproc-per-node 2 benchmarks/distributed_vs_one_gpu.py --out DIR --sizes 16384 32768

Rank 0 also times the product on its GPU alone (tilemm's default: cuBLAS), in rounds interleaved
with the distributed ones. Each grid of the world size is timed (2 ranks: 1 x 2 and 2 x 1).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch
import torch.distributed as dist

import tilemm

import harness


def grids(world: int):
    return [tilemm.spread.distributed.Grid(r, world // r) for r in range(1, world + 1) if world % r == 0]


def settle():
    """Every rank's work done: the times run from a barrier to a barrier."""
    torch.cuda.synchronize()
    dist.barrier()


def timed(call) -> tuple:
    """(seconds of call() on every rank, its result)"""
    return harness.timed(call, settle)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="also time the 1 x P bf16 product's parts apart")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    stamp = harness.stamp("distributed_vs_one_gpu.py", args, env="", runner=f"torchrun --nproc-per-node {world}")
    for dtype in args.dtypes:
        for n in args.sizes:
            g = torch.Generator(device="cuda").manual_seed(n)        # every rank draws the same A and B
            a = torch.randn((n, n), generator=g, device="cuda", dtype=getattr(torch, dtype))
            b = torch.randn((n, n), generator=g, device="cuda", dtype=getattr(torch, dtype))
            times = {"one GPU": []}
            blocks = {}
            for grid in grids(world):
                blocks[grid] = (tilemm.spread.distributed.shard(a, grid, rank, "A").contiguous(),
                                tilemm.spread.distributed.shard(b, grid, rank, "B").contiguous())
                times[f"{grid.rows}x{grid.cols}"] = []
            checks = {}
            for r in range(args.rounds + 1):                         # round 0: warm-up (compiles), not kept
                if rank == 0:
                    t, c_one = timed(lambda: tilemm.matmul(a, b))
                else:
                    t, c_one = timed(lambda: None)
                del c_one
                if r:
                    times["one GPU"].append(t)
                for grid, (a_mine, b_mine) in blocks.items():
                    t, c_mine = timed(lambda: tilemm.spread.distributed.matmul(a_mine, b_mine, grid))
                    if r:
                        times[f"{grid.rows}x{grid.cols}"].append(t)
                    else:                                            # check: sampled rows of this block
                        i, j = grid.position(rank)
                        rows = tilemm.spread.distributed.block(n, grid.rows, i)
                        cols = tilemm.spread.distributed.block(n, grid.cols, j)
                        pick = torch.arange(0, rows.stop - rows.start, max(1, (rows.stop - rows.start) // 7),
                                            device="cuda")
                        ref = a[rows][pick].double() @ b[:, cols].double()
                        err = ((c_mine[pick].double() - ref).norm() / ref.norm()).item()
                        checks[f"{grid.rows}x{grid.cols}"] = err
                    del c_mine
            errors = [None] * world
            dist.all_gather_object(errors, checks)
            if rank == 0:
                one = statistics.median(times["one GPU"])
                with open(args.out / "distributed.jsonl", "a") as f:
                    for label, ts in times.items():
                        t = statistics.median(ts)
                        worst = max((e[label] for e in errors), default=None) if label in checks else None
                        rec = {"variant": label, "dtype": dtype, "n": n, "ranks": world if label != "one GPU" else 1,
                               "median_s": t, "tflops": 2 * n ** 3 / t / 1e12, "vs_one_gpu": one / t,
                               "worst_relative_error": worst, "rounds": args.rounds, **stamp}
                        f.write(json.dumps(rec) + "\n")
                        print(f"{dtype:9} {n:6} {label:8} {t * 1e3:9.1f} ms {rec['tflops']:7.1f} TFLOP/s "
                              f"{rec['vs_one_gpu']:5.2f}x one GPU  err {worst}", flush=True)
            a = b = blocks = None
            torch.cuda.empty_cache()
    if args.breakdown:
        breakdown(rank, world, max(args.sizes))
    dist.destroy_process_group()


def breakdown(rank: int, world: int, n: int):
    """Where a 1 x world bf16 product's time goes, on each rank: its local products alone (added into
    float32 C by the tensorcore rung, as tilemm.spread.distributed does), the same products by cuBLAS into
    bf16 (no float32 sums across panels), and passing its A block round alone."""
    from tilemm.spread.panels import accumulate as _accumulate, blocks
    a = torch.randn((n, n // world), device="cuda", dtype=torch.bfloat16)      # this rank's A block
    b = torch.randn((n, n // world), device="cuda", dtype=torch.bfloat16)      # its B block: all K rows
    acc = torch.zeros((n, n // world), device="cuda", dtype=torch.float32)
    k_blocks = blocks(n, world)

    def products():
        for i, rows in enumerate(k_blocks):
            _accumulate(acc, a, b[rows], "float32", first=i == 0)

    def tensorcore_rung():
        from tilemm.ladder.tensorcore import r10_tensorcore
        for rows in k_blocks:
            tiles = r10_tensorcore.resolve_tiles(n, n // world, n, dict(block_m=None, block_n=None, block_k=None,
                                                                 num_warps=None, num_stages=None))
            r10_tensorcore.launcher(a, b[rows], acc, group_m=8, accumulate=True, **tiles)()

    def cublas():
        for rows in k_blocks:
            torch.matmul(a, b[rows])

    def ring():
        incoming = torch.empty_like(a)
        for _ in range(world - 1):
            ops = [dist.P2POp(dist.isend, a, (rank - 1) % world), dist.P2POp(dist.irecv, incoming, (rank + 1) % world)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
    for label, call in (("local products, float32 C", products), ("tensorcore rung, float32 C", tensorcore_rung),
                        ("the same by cuBLAS, bf16 C", cublas),
                        ("the ring's transfers alone", ring)):
        ts = [timed(call)[0] for _ in range(4)][1:]
        print(f"rank {rank} {label:28} {statistics.median(ts) * 1e3:8.1f} ms", flush=True)


if __name__ == "__main__":
    main()
