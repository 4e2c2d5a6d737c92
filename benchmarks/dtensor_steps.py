"""A DTensor product split along K, step by step, on every rank: torch's matmul and tilemm's on the same
Shard(1) x Shard(0) operands, each reduce-scattered to Shard(0), and their steps alone: each rank's local
product (torch.matmul with torch's own cuBLAS flags; with float32 sums, as tilemm's library rung runs it;
tilemm.matmul; the custom op DTensor calls) and the reduce-scatter of a partial sum alone.

    torchrun --nproc-per-node 2 benchmarks/dtensor_steps.py --size 32768 --rounds 5

Every variant is a whole call timed from a barrier to a barrier (as several_gpus.py times it), the variants
in turn, their order reversed every other round. The DTensor products are also timed in two parts between
CUDA events (the product; the reduce-scatter), with the caching allocator's cudaMalloc calls and retries
during the call; the first round lists, on rank 0, the GPU kernels each DTensor call ran (torch.profiler).
With no GPU the same steps run on the CPU (gloo): a dry run at a small --size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import harness

harness.multicast_off()

import torch  # noqa: E402  (after the environment above)
import torch.distributed as dist  # noqa: E402

import tilemm  # noqa: E402
import tilemm.torch.ops  # noqa: E402,F401  (registers torch.ops.tilemm.matmul, the op DTensor calls)
from tilemm.engine.torch_flags import FLAG_OF, torch_matmul_flags  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
ALLOCATOR = ("num_device_alloc", "num_alloc_retries")      # cudaMalloc calls; frees of the cache to make room


def settle():
    if GPU:
        torch.cuda.synchronize()
    dist.barrier()


def float32_sums(dtype):
    """torch's cuBLAS flag for reduced-precision sums of this dtype off for the block (tilemm's library rung)."""
    flag = FLAG_OF.get(str(dtype).removeprefix("torch."), "")
    return torch_matmul_flags(**({flag: False} if "reduced_precision" in flag else {}))


def allocator():
    stats = torch.cuda.memory_stats() if GPU else {}
    return [stats.get(key, 0) for key in ALLOCATOR]


def whole(call):
    """(seconds of call() from a barrier to a barrier, the allocator's counts during it)."""
    settle()
    before, start = allocator(), time.perf_counter()
    call()
    settle()
    return time.perf_counter() - start, [a - b for a, b in zip(allocator(), before)]


def parts(product, finish):
    """(ms of the product, ms of the reduce-scatter): CUDA events on the current stream (the clock on the CPU)."""
    settle()
    if not GPU:
        t0 = time.perf_counter()
        p = product()
        t1 = time.perf_counter()
        finish(p).to_local()
        return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    p = product()
    e1.record()
    finish(p).to_local()              # a redistribute waits for its collective: the current stream follows it
    e2.record()
    settle()
    return e0.elapsed_time(e1), e1.elapsed_time(e2)


def kernels(call, top: int = 6) -> list[str]:
    """The GPU kernels (or CPU ops) of one call, by time: 'ms name'."""
    from torch.profiler import ProfilerActivity, profile
    settle()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if GPU else [])) as prof:
        call()
        settle()
    if GPU:                         # the kernels themselves (and memcpy/memset), summed by name
        total: dict = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                total[e.name] = total.get(e.name, 0) + e.time_range.elapsed_us()
        rows = [(us, name) for name, us in total.items()]
    else:
        rows = [(e.self_cpu_time_total, e.key) for e in prof.key_averages() if e.self_cpu_time_total > 0]
    return [f"{us / 1e3:8.2f} ms  {name[:110]}" for us, name in sorted(rows, reverse=True)[:top]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=32768, help="M = N = K")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Shard
    dist.init_process_group("nccl" if GPU else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if GPU:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dtype, n = getattr(torch, args.dtype), args.size
    g = torch.Generator(device=DEVICE).manual_seed(rank)
    ks = n // world
    a_local = torch.randn((n, ks), generator=g, device=DEVICE, dtype=dtype)     # A's columns, B's rows of this rank
    b_local = torch.randn((ks, n), generator=g, device=DEVICE, dtype=dtype)
    mesh = init_device_mesh(DEVICE, (world,))
    a_k = DTensor.from_local(a_local, mesh, [Shard(1)], run_check=False)
    b_k = DTensor.from_local(b_local, mesh, [Shard(0)], run_check=False)
    partial = DTensor.from_local(a_local @ b_local, mesh, [Partial()], run_check=False)
    rows = [Shard(0)]

    def scatter(p):
        return p.redistribute(placements=rows)

    def torch_exact():
        with float32_sums(dtype):
            return torch.matmul(a_k, b_k)

    def local_exact():
        with float32_sums(dtype):
            return torch.matmul(a_local, b_local)
    products = {                                        # (the partial product, then the reduce-scatter)
        "torch DTensor": lambda: torch.matmul(a_k, b_k),
        "torch DTensor, float32 sums": torch_exact,
        "tilemm DTensor": lambda: tilemm.distributed.matmul(a_k, b_k),
    }
    variants = {name + " + reduce-scatter": (lambda p=p: scatter(p())) for name, p in products.items()}
    variants.update({
        "tilemm DTensor placements=[Shard(0)]": lambda: tilemm.distributed.matmul(a_k, b_k, placements=rows),
        "local torch.matmul": lambda: torch.matmul(a_local, b_local),
        "local torch.matmul, float32 sums": local_exact,
        "local tilemm.matmul": lambda: tilemm.matmul(a_local, b_local),
        "local torch.ops.tilemm.matmul": lambda: torch.ops.tilemm.matmul(a_local, b_local, None, "", None),
        "reduce-scatter alone": lambda: scatter(partial),
    })
    flag = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    if rank == 0:
        print(f"{world} ranks {args.dtype} {n}^3: each rank {n} x {ks} x {n}; torch's "
              f"allow_bf16_reduced_precision_reduction={flag}, allow_tf32={torch.backends.cuda.matmul.allow_tf32}",
              flush=True)
    times = {name: [] for name in variants}
    allocs = {name: [] for name in variants}
    split = {name: [] for name in products}
    for r in range(args.rounds + 1):                   # round 0: warm-up, kernels listed
        order = list(variants) if r % 2 else list(reversed(variants))
        for name in order:
            t, counts = whole(variants[name])
            if r:
                times[name].append(t)
                allocs[name].append(counts)
        for name, product in products.items():
            if r:
                split[name].append(parts(product, scatter))
            else:
                listed = kernels(lambda product=product: scatter(product()))
                if rank == 0:
                    print(f"-- kernels of {name} + reduce-scatter (rank 0, round 0):\n   " + "\n   ".join(listed),
                          flush=True)
    # the same bits from both (the flags change cuBLAS's kernel, and maybe its order of sums)?
    ours, theirs = (variants[f"{name} + reduce-scatter"]().to_local() for name in ("tilemm DTensor", "torch DTensor"))
    same = (torch.equal(ours, theirs), (ours.float() - theirs.float()).abs().max().item())
    every = [None] * world
    dist.all_gather_object(every, (times, allocs, split, same))
    if rank == 0:
        print(f"{'variant':46} {'ms (slowest rank)':>18} {'per rank':>16}  cudaMalloc/retries")
        for name in variants:
            per_rank = [statistics.median(e[0][name]) * 1e3 for e in every]
            counts = [max(c[i] for e in every for c in e[1][name]) for i in range(len(ALLOCATOR))]
            print(f"{name:46} {max(per_rank):18.2f} {' '.join(f'{t:7.2f}' for t in per_rank):>16}  "
                  f"{counts[0]}/{counts[1]}")
        print("tilemm's and torch's Shard(0) blocks the same bits on each rank: "
              + ", ".join(f"{e[3][0]} (max |difference| {e[3][1]:.3g})" for e in every))
        print(f"{'DTensor product, then reduce-scatter (events)':46} {'product ms':>12} {'reduce-scatter ms':>18}")
        for name in products:
            for rk, e in enumerate(every):
                prod = statistics.median(s[0] for s in e[2][name])
                rs = statistics.median(s[1] for s in e[2][name])
                print(f"{name + f' (rank {rk})':46} {prod:12.2f} {rs:18.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
