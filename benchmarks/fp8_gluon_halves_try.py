"""A try (session 19, concluded; its lesson is in docs/tensor_cores.md): fp8 with float32 sums each K step, in Gluon, warp-specialized with one partition per
64-row warpgroup (each waits for its own product and adds it into its float32 total while the
other warpgroups' products keep the tensor cores busy), one loading warp."""
import json
import os
import statistics
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds
from tilemm.ladder.tensorcore.t2_int8_gluon_kernel import tile_start

sys.path.insert(0, os.path.dirname(__file__))
from fp8_vs_scaled_mm import check  # noqa: E402
import gpu_ladder  # noqa: E402

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    p = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for t in range(k_steps):
            slot = p % STAGES
            mbarrier.wait(empty.index(slot), ((p // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma_load(a_desc, [off_m, t * BLOCK_K], bar, a_bufs.index(slot))
            tma_load(b_desc, [off_n, t * BLOCK_K], bar, b_bufs.index(slot))
            p += 1


@gluon.jit
def consumer(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
             WG: gl.constexpr, QUARTERS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BLOCK_N // 2, 32])
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        HALF: gl.constexpr = BLOCK_N // 2
        acc0 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        acc1 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        part = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            # each half of the tile's columns: its products of this K step into a fresh accumulator,
            # waited for and added into the float32 total (the other warpgroup's products run meanwhile)
            part = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
            acc0 += part
            part = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
            mbarrier.arrive(empty.index(slot), count=1)
            acc1 += part
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_half(c_ptr, acc0 * scale, off_m + WG * 64, off_n, M, N, stride_cm, stride_cn, layout, HALF)
        store_half(c_ptr, acc1 * scale, off_m + WG * 64, off_n + HALF, M, N, stride_cm, stride_cn, layout, HALF)


@gluon.jit
def consumer_q(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
               WG: gl.constexpr, QUARTERS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """Quarters of the tile's columns, two products in flight: each quarter's product is issued
    before the one before it is waited for and added."""
    Q: gl.constexpr = BLOCK_N // 4
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, Q, 32])
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    pa = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
    pb = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
    for tile in range(pid, num_tiles, PROGRAMS):
        acc0 = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
        acc1 = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
        acc2 = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
        acc3 = gl.zeros((64, Q), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            pa = warpgroup_mma(a, b.slice(0, Q).permute((1, 0)), pa, use_acc=False, is_async=True)
            pb = warpgroup_mma(a, b.slice(Q, Q).permute((1, 0)), pb, use_acc=False, is_async=True)
            pa = warpgroup_mma_wait(num_outstanding=1, deps=(pa, ))
            acc0 += pa
            pa = warpgroup_mma(a, b.slice(2 * Q, Q).permute((1, 0)), pa, use_acc=False, is_async=True)
            pb = warpgroup_mma_wait(num_outstanding=1, deps=(pb, ))
            acc1 += pb
            pb = warpgroup_mma(a, b.slice(3 * Q, Q).permute((1, 0)), pb, use_acc=False, is_async=True)
            pa = warpgroup_mma_wait(num_outstanding=1, deps=(pa, ))
            acc2 += pa
            pb = warpgroup_mma_wait(num_outstanding=0, deps=(pb, ))
            mbarrier.arrive(empty.index(slot), count=1)
            acc3 += pb
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        row = off_m + WG * 64
        store_half(c_ptr, acc0 * scale, row, off_n, M, N, stride_cm, stride_cn, layout, Q)
        store_half(c_ptr, acc1 * scale, row, off_n + Q, M, N, stride_cm, stride_cn, layout, Q)
        store_half(c_ptr, acc2 * scale, row, off_n + 2 * Q, M, N, stride_cm, stride_cn, layout, Q)
        store_half(c_ptr, acc3 * scale, row, off_n + 3 * Q, M, N, stride_cm, stride_cn, layout, Q)


@gluon.jit
def store_half(c_ptr, x, row, col, M, N, stride_cm, stride_cn, layout: gl.constexpr, HALF: gl.constexpr):
    offs_m = row + gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
    offs_n = col + gl.arange(0, HALF, layout=gl.SliceLayout(0, layout))
    ptrs = c_ptr + gl.expand_dims(offs_m.to(gl.int64) * stride_cm, 1) + gl.expand_dims(offs_n.to(gl.int64) * stride_cn, 0)
    inside = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
    gl.store(ptrs, x.to(c_ptr.dtype.element_ty), mask=inside)


@gluon.jit
def fp8_matmul_wg(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                  QUARTERS: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr,
                  REGS: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=BLOCK_M // 64)
    if QUARTERS:
        gl.warp_specialize([(consumer_q, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                        stride_cn, 0, QUARTERS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (consumer_q, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                        stride_cn, 1, QUARTERS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                        GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [REGS, 24])
    else:
        gl.warp_specialize([(consumer, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                        stride_cn, 0, QUARTERS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (consumer, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                        stride_cn, 1, QUARTERS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                        GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [REGS, 24])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


def descriptor(x, block_rows, block_k):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_k], gl.float8e4nv)
    return TensorDescriptor(x, list(x.shape), list(x.stride()), [block_rows, block_k], layout)


def run(a, b_t, c, scale_a, scale_b, block_m=128, block_n=128, block_k=128, stages=4, group_m=8, programs=132,
        quarters=False, regs=232):
    """c = scale_a * scale_b * a @ b_t.T; a (M, K), b_t (N, K) fp8 K-major, c (M, N)."""
    m, k = a.shape
    n = b_t.shape[0]
    a_desc, b_desc = descriptor(a, block_m, block_k), descriptor(b_t, block_n, block_k)
    grid = (min(programs, triton.cdiv(m, block_m) * triton.cdiv(n, block_n)),)
    return fp8_matmul_wg[grid](a_desc, b_desc, c, scale_a, scale_b, m, n, k, c.stride(0), c.stride(1),
                               QUARTERS=quarters, GROUP_M=group_m, PROGRAMS=grid[0], STAGES=stages, REGS=regs, num_warps=4)


# ---- the probe: timed against torch._scaled_mm and tilemm.scaled_matmul, every answer checked ----


def main():
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_gluon_halves_try.py " + " ".join(sys.argv[1:]))
    gpu_ladder.prewarm(6)
    recs = []
    configs = [dict(block_n=256, stages=4, group_m=16), dict(block_n=256, stages=3, group_m=16)]
    for shape in sys.argv[1:]:
        m_, n_, k_ = map(int, shape.split('x')); n = shape
        g = torch.Generator(device="cuda").manual_seed(m_)
        a = torch.randn(m_, k_, generator=g, device="cuda").to(torch.float8_e4m3fn)
        bt = torch.randn(n_, k_, generator=g, device="cuda").to(torch.float8_e4m3fn)
        b = bt.T
        sa = torch.tensor(0.5, device="cuda"); sb = torch.tensor(2.0, device="cuda")
        launch = {}
        for fast in (False, True):
            launch[f"scaled_mm fast={fast}"] = (lambda f=fast: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=f), fast)
            launch[f"tilemm fast={fast}"] = (lambda f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f), fast)
        for cfg in configs:
            for fast in (False, True):
                c = torch.full((m_, n_), float('nan'), device="cuda", dtype=torch.bfloat16)
                launch[f"wg {cfg} {'quarters' if fast else 'halves'}"] = (lambda cfg=cfg, f=fast, c=c: (run(a, bt, c, sa, sb, quarters=f, **cfg), c)[1], False)
        ok = {}
        for label, (fn, fast) in launch.items():
            try:
                c = fn(); torch.cuda.synchronize()
                good, err = check(c, a, b, 1.0, fast)
                ok[label] = (good, err)
                print(n, label, "ok" if good else "WRONG", f"{err:.2e}", flush=True)
            except Exception as e:
                print(n, label, "FAILED", repr(e)[:300], flush=True)
        timed = {l: fn for l, (fn, f) in launch.items() if ok.get(l, (False,))[0]}
        times = interleaved_rounds(timed, 3, 0.25)
        ref = statistics.median(times.get("scaled_mm fast=False") or times["tilemm fast=False"])
        for l, ts in times.items():
            ms = statistics.median(ts)
            r = dict(base, n=n, label=l, median_ms=ms, tflops=2 * m_ * n_ * k_ / ms / 1e9, vs_scaled_mm=ref / ms, rel_err=ok[l][1])
            recs.append(r)
            open(f"{out}/fp8_wg_try.jsonl", "a").write(json.dumps(r) + "\n")
            print(f"{n} {l:45s} {ms:.3f} ms {r['tflops']:.0f} TFLOP/s x{r['vs_scaled_mm']:.3f}", flush=True)


if __name__ == "__main__":
    main()
