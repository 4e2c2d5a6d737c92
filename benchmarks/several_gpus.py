"""Several GPUs against one, interleaved in one run, every answer checked on sampled rows and columns
against float64: tilemm.spread.distributed on every grid of the world size (and its pipeline's knobs),
what a torch user would write (rows of C split after a broadcast of B; DTensor's own matmul,
Shard(1) x Shard(0) then a reduce-scatter, and Shard(0) x Replicate), tilemm on the same DTensors,
and, in a run of its own, tilemm.spread.multi from one process (operands on GPU 0, and in host memory).

    bash benchmarks/several_gpus.sh benchmarks/results/h200     # 4 ranks, 2 ranks, one process

(with no GPU, the same script runs on the CPU with gloo: a dry run at small --sizes), or a part of it:

    torchrun --nproc-per-node 4 benchmarks/several_gpus.py --out DIR --sizes 32768 65536
    torchrun --nproc-per-node 2 benchmarks/several_gpus.py --out DIR --sizes 32768 --only DTensor
    python benchmarks/several_gpus.py --one-process --gpus 4 --out DIR --sizes 32768 65536

Records: DIR/several_gpus.jsonl, one a variant, size and rank count (median of --rounds rounds
after a warm-up round that also checks the answers). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are kept, or set, before NCCL starts).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import harness

harness.multicast_off()

import torch  # noqa: E402  (after the environment above)
import torch.distributed as dist  # noqa: E402

import tilemm  # noqa: E402

KNOBS = {"": {}, " depth=1": dict(depth=1), " depth=3": dict(depth=3), " link_ctas=4": dict(link_ctas=4),
         " link_ctas=8": dict(link_ctas=8)}
RING_KNOBS = {" one way": dict(both_ways=False)}
SUMMA_KNOBS = {" panel=8192": dict(panel=8192), " panel=16384": dict(panel=16384)}
# on a machine with no GPU the same steps run on the CPU (gloo, small --sizes): a dry run of the script
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def sample(n: int, count: int = 8):
    return torch.linspace(0, n - 1, count, device=DEVICE).long().unique()


def error_of(c_rows, a, b, rows, cols) -> float:
    """Relative error of C's sampled entries: c_rows are C's rows `rows` at columns `cols`."""
    ref = a[rows].double() @ b[:, cols].double()
    return ((c_rows.double() - ref).norm() / ref.norm()).item()


def timed(call, world: int):
    """(seconds of call() on every rank, from a barrier to a barrier, its result)."""
    def settle():
        synchronize()
        if world > 1:
            dist.barrier()
    return harness.timed(call, settle)


def ranked_variants(a, b, n, rank, world):
    """{label: (call, check)}: check(result) -> the relative error of this rank's sampled entries."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    variants = {}
    cols = sample(n)
    for r in range(1, world + 1):
        if world % r:
            continue
        grid = tilemm.spread.distributed.Grid(r, world // r)
        a_mine = tilemm.spread.distributed.shard(a, grid, rank, "A").contiguous()
        b_mine = tilemm.spread.distributed.shard(b, grid, rank, "B").contiguous()
        i, j = grid.position(rank)
        rows_i, cols_j = tilemm.spread.distributed.block(n, grid.rows, i), tilemm.spread.distributed.block(n, grid.cols, j)
        pick_c = cols[(cols >= cols_j.start) & (cols < cols_j.stop)]

        def check(c, rows_i=rows_i, cols_j=cols_j, pick_c=pick_c):
            pick_r = sample(rows_i.stop - rows_i.start)
            if not len(pick_c):
                return 0.0
            return error_of(c[pick_r][:, pick_c - cols_j.start], a, b, pick_r + rows_i.start, pick_c)
        knobs = dict(KNOBS, **(RING_KNOBS if 1 in (grid.rows, grid.cols) else SUMMA_KNOBS))
        for name, knob in knobs.items():
            variants[f"tilemm {grid.rows}x{grid.cols}{name}"] = (
                (lambda a_mine=a_mine, b_mine=b_mine, grid=grid, knob=knob:
                 tilemm.spread.distributed.matmul(a_mine, b_mine, grid, **knob)), check)
    rows_mine = tilemm.spread.distributed.block(n, world, rank)
    a_rows = a[rows_mine].contiguous()
    b_copy = b.clone() if rank == 0 else torch.empty_like(b)

    def check_rows(c):
        pick = sample(rows_mine.stop - rows_mine.start)
        return error_of(c[pick][:, cols], a, b, pick + rows_mine.start, cols)

    def torch_split():
        dist.broadcast(b_copy, src=0)
        return torch.matmul(a_rows, b_copy)
    variants["torch rows split, B broadcast"] = (torch_split, check_rows)
    mesh = init_device_mesh(DEVICE, (world,))
    k_mine = tilemm.spread.distributed.block(n, world, rank)
    a_k = DTensor.from_local(a[:, k_mine].contiguous(), mesh, [Shard(1)], run_check=False)
    b_k = DTensor.from_local(b[k_mine].contiguous(), mesh, [Shard(0)], run_check=False)
    a_r = DTensor.from_local(a_rows, mesh, [Shard(0)], run_check=False)
    b_r = DTensor.from_local(b, mesh, [Replicate()], run_check=False)

    def local(c):
        return check_rows(c.to_local())
    variants["DTensor S(1) x S(0) + reduce-scatter"] = (
        lambda: torch.matmul(a_k, b_k).redistribute(placements=[Shard(0)]), local)
    variants["DTensor S(0) x R"] = (lambda: torch.matmul(a_r, b_r), local)
    variants["tilemm DTensor S(1) x S(0) + reduce-scatter"] = (
        lambda: tilemm.spread.distributed.matmul(a_k, b_k, placements=[Shard(0)]), local)
    variants["tilemm DTensor S(0) x R"] = (lambda: tilemm.matmul(a_r, b_r), local)
    return variants


def one_process_variants(a, b, n, gpus, host_limit):
    cols = sample(n)

    def check(c):
        pick = sample(n)
        return error_of(c[pick.to(c.device)][:, cols.to(c.device)].to(DEVICE), a, b, pick, cols)
    devices = list(range(gpus)) if DEVICE == "cuda" else ["cpu"] * gpus
    variants = {f"tilemm.spread.multi {gpus} GPUs, operands on GPU 0": (
        lambda: tilemm.spread.multi.matmul(a, b, devices=devices), check)}
    for panel in (4096, 16384):
        variants[f"tilemm.spread.multi {gpus} GPUs, operands on GPU 0 panel_k={panel}"] = (
            lambda panel=panel: tilemm.spread.multi.matmul(a, b, devices=devices, panel_k=panel), check)
    pinned = DEVICE == "cuda"
    a_host = torch.empty(a.shape, dtype=a.dtype, pin_memory=pinned).copy_(a)
    b_host = torch.empty(b.shape, dtype=b.dtype, pin_memory=pinned).copy_(b)
    variants[f"tilemm.spread.multi {gpus} GPUs, host operands"] = (
        lambda: tilemm.spread.multi.matmul(a_host, b_host, devices=devices, out_of_core=True), check)
    variants[f"tilemm.spread.multi {gpus} GPUs, host operands, {host_limit >> 20} MiB a GPU"] = (
        lambda: tilemm.spread.multi.matmul(a_host, b_host, devices=devices, memory_limit=host_limit, out_of_core=True),
        check)
    return variants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[32768, 65536])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                    help="time only the variants whose label holds one of these texts (and one GPU, the baseline), "
                         "e.g. --only DTensor")
    ap.add_argument("--one-process", action="store_true", help="tilemm.spread.multi from this process (no torchrun)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs for --one-process (default: all)")
    ap.add_argument("--host-limit-mib", type=int, default=4096,
                    help="--one-process: each GPU's memory_limit for host operands, so that A + B + C pass "
                         "what the GPUs may hold together")
    args = ap.parse_args()
    for name, value in harness.NO_MULTICAST.items():
        if os.environ.get(name) != value:
            raise SystemExit(f"{name}={os.environ.get(name)!r}: NVLink multicast must stay off ({name}={value})")
    if args.one_process:
        rank, world = 0, 1
        gpus = args.gpus or (torch.cuda.device_count() if DEVICE == "cuda" else 2)
        if DEVICE == "cuda":
            torch.cuda.set_device(0)
        runner = "python"
    else:
        dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if DEVICE == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        gpus = world
        runner = f"torchrun --nproc-per-node {world}"
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = harness.stamp("several_gpus.py", args, env="", runner=runner)
    dtype = getattr(torch, args.dtype)
    for n in args.sizes:
        g = torch.Generator(device=DEVICE).manual_seed(n)            # every rank draws the same A and B
        a = torch.randn((n, n), generator=g, device=DEVICE, dtype=dtype)
        b = torch.randn((n, n), generator=g, device=DEVICE, dtype=dtype)
        if args.one_process:
            variants = one_process_variants(a, b, n, gpus, args.host_limit_mib << 20)
        else:
            variants = ranked_variants(a, b, n, rank, world)
        if args.only:
            variants = {label: v for label, v in variants.items() if any(text in label for text in args.only)}
        times = {"one GPU": [], **{label: [] for label in variants}}
        errors = {}
        for r in range(args.rounds + 1):                              # round 0: warm-up and checks
            t, c = timed(lambda: torch.matmul(a, b) if rank == 0 else None, world)
            if r:
                times["one GPU"].append(t)
            elif rank == 0:
                errors["one GPU"] = error_of(c[sample(n)][:, sample(n)], a, b, sample(n), sample(n))
            del c
            for label, (call, check) in variants.items():
                t, c = timed(call, world)
                if r:
                    times[label].append(t)
                else:
                    errors[label] = check(c)
                del c
        every = [errors]
        if world > 1:
            every = [None] * world
            dist.all_gather_object(every, errors)
        if rank == 0:
            one = statistics.median(times["one GPU"])
            with open(args.out / "several_gpus.jsonl", "a") as f:
                for label, ts in times.items():
                    t = statistics.median(ts)
                    worst = max(e.get(label, 0.0) for e in every)
                    rec = {"variant": label, "dtype": args.dtype, "n": n,
                           "gpus": 1 if label == "one GPU" else gpus, "one_process": args.one_process,
                           "median_s": t, "tflops": 2 * n ** 3 / t / 1e12, "vs_one_gpu": one / t,
                           "worst_relative_error": worst, "rounds": args.rounds, **stamp}
                    f.write(json.dumps(rec) + "\n")
                    print(f"{gpus} GPUs {args.dtype} {n:6} {label:52} {t * 1e3:8.1f} ms {rec['tflops']:7.1f} TFLOP/s "
                          f"{rec['vs_one_gpu']:5.2f}x one GPU  err {worst:.1e}", flush=True)
        a = b = variants = None
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
