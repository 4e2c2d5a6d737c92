"""A try (session 20): fp8 with float32 sums each K step, in Gluon, warp-specialized with one partition
per 64-row warpgroup and one loading warp (session 19's halves, at 7f47f5b), against narrower tiles
whose products need fewer registers: 128 x 128 tiles (CUTLASS's cooperative schedule: each K step's
product into a fresh accumulator, waited for and added) and pieces of columns kept in flight.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_wg_try.py 8192x8192x8192 ...
"""
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
def store_piece(c_ptr, x, row, col, M, N, stride_cm, stride_cn, layout: gl.constexpr, W: gl.constexpr):
    offs_m = row + gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
    offs_n = col + gl.arange(0, W, layout=gl.SliceLayout(0, layout))
    ptrs = c_ptr + gl.expand_dims(offs_m.to(gl.int64) * stride_cm, 1) + gl.expand_dims(offs_n.to(gl.int64) * stride_cn, 0)
    inside = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
    gl.store(ptrs, x.to(c_ptr.dtype.element_ty), mask=inside)


@gluon.jit
def consumer_one(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                 WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                 GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """The whole width of the warpgroup's rows at once: product, wait, add (CUTLASS's cooperative)."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        acc = gl.zeros((64, BLOCK_N), dtype=gl.float32, layout=layout)
        part = gl.zeros((64, BLOCK_N), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            part = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
            mbarrier.arrive(empty.index(slot), count=1)
            acc += part
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_piece(c_ptr, acc * scale, off_m + WG * 64, off_n, M, N, stride_cm, stride_cn, layout, BLOCK_N)


@gluon.jit
def consumer_halves(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                    WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                    GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """Session 19's: each half of the columns' product, waited for and added, one after the other."""
    HALF: gl.constexpr = BLOCK_N // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 32])
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        acc0 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        acc1 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        part = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            part = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
            acc0 += part
            part = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), part, use_acc=False, is_async=True)
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
            mbarrier.arrive(empty.index(slot), count=1)
            acc1 += part
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_piece(c_ptr, acc0 * scale, off_m + WG * 64, off_n, M, N, stride_cm, stride_cn, layout, HALF)
        store_piece(c_ptr, acc1 * scale, off_m + WG * 64, off_n + HALF, M, N, stride_cm, stride_cn, layout, HALF)


@gluon.jit
def consumer_pair(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                  WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                  GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """Both halves' products issued, then each waited for and added: the second half's product
    runs while the first's is added."""
    HALF: gl.constexpr = BLOCK_N // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 32])
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        acc0 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        acc1 = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        pa = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        pb = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            pa = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), pa, use_acc=False, is_async=True)
            pb = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), pb, use_acc=False, is_async=True)
            pa = warpgroup_mma_wait(num_outstanding=1, deps=(pa, ))
            acc0 += pa
            pb = warpgroup_mma_wait(num_outstanding=0, deps=(pb, ))
            mbarrier.arrive(empty.index(slot), count=1)
            acc1 += pb
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_piece(c_ptr, acc0 * scale, off_m + WG * 64, off_n, M, N, stride_cm, stride_cn, layout, HALF)
        store_piece(c_ptr, acc1 * scale, off_m + WG * 64, off_n + HALF, M, N, stride_cm, stride_cn, layout, HALF)


@gluon.jit
def fp8_wg(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
           MODE: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr, REGS: gl.constexpr):
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
    if MODE == 0:
        gl.warp_specialize([(consumer_one, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                            stride_cn, 0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (consumer_one, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                            stride_cn, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                        GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [REGS, 24])
    elif MODE == 1:
        gl.warp_specialize([(consumer_halves, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                               stride_cn, 0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (consumer_halves, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                               stride_cn, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                        GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [REGS, 24])
    else:
        gl.warp_specialize([(consumer_pair, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                             stride_cn, 0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (consumer_pair, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                                             stride_cn, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                        GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [REGS, 24])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


MODES = {"one": 0, "halves": 1, "pair": 2}


def descriptor(x, block_rows, block_k):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_k], gl.float8e4nv)
    return TensorDescriptor(x, list(x.shape), list(x.stride()), [block_rows, block_k], layout)


def run(a, b_t, c, scale_a, scale_b, mode="halves", block_n=256, stages=4, group_m=16, programs=132, regs=232):
    """c = scale_a * scale_b * a @ b_t.T; a (M, K), b_t (N, K) fp8 K-major, c (M, N)."""
    m, k = a.shape
    n = b_t.shape[0]
    a_desc, b_desc = descriptor(a, 128, 128), descriptor(b_t, block_n, 128)
    grid = (min(programs, triton.cdiv(m, 128) * triton.cdiv(n, block_n)),)
    return fp8_wg[grid](a_desc, b_desc, c, scale_a, scale_b, m, n, k, c.stride(0), c.stride(1),
                        MODE=MODES[mode], GROUP_M=group_m, PROGRAMS=grid[0], STAGES=stages, REGS=regs, num_warps=4)


CONFIGS = [dict(mode="halves", block_n=256, stages=4), dict(mode="one", block_n=128, stages=6),
           dict(mode="pair", block_n=128, stages=6), dict(mode="halves", block_n=128, stages=6),
           dict(mode="one", block_n=128, stages=6, group_m=8)]


def main():
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_wg_try.py "
                         + " ".join(sys.argv[1:]))
    gpu_ladder.prewarm(8)
    for shape in sys.argv[1:]:
        m_, n_, k_ = map(int, shape.split('x'))
        g = torch.Generator(device="cuda").manual_seed(m_)
        a = torch.randn(m_, k_, generator=g, device="cuda").to(torch.float8_e4m3fn)
        bt = torch.randn(n_, k_, generator=g, device="cuda").to(torch.float8_e4m3fn)
        b = bt.T
        sa = torch.tensor(0.5, device="cuda")
        sb = torch.tensor(2.0, device="cuda")
        launch = {"scaled_mm": (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), False),
                  "scaled_mm fast": (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                              use_fast_accum=True), True),
                  "tilemm": (lambda: tilemm.scaled_matmul(a, b, sa, sb), False)}
        for cfg in CONFIGS:
            c = torch.full((m_, n_), float('nan'), device="cuda", dtype=torch.bfloat16)
            launch[f"wg {cfg}"] = (lambda cfg=cfg, c=c: (run(a, bt, c, sa, sb, **cfg), c)[1], False)
        ok = {}
        for label, (fn, fast) in launch.items():
            try:
                c = fn()
                torch.cuda.synchronize()
                ok[label] = check(c, a, b, 1.0, fast)
                print(shape, label, "ok" if ok[label][0] else "WRONG", f"{ok[label][1]:.2e}", flush=True)
            except Exception as e:  # a variant that does not compile here is reported, not timed
                print(shape, label, "FAILED", repr(e)[:400], flush=True)
        timed = {label: fn for label, (fn, _) in launch.items() if ok.get(label, (False, ))[0]}
        times = interleaved_rounds(timed, 5, 0.25)
        ref = statistics.median(times["scaled_mm"])
        for label, ts in times.items():
            ms = statistics.median(ts)
            rec = dict(base, shape=shape, label=label, median_ms=ms, tflops=2 * m_ * n_ * k_ / ms / 1e9,
                       vs_scaled_mm=ref / ms, rel_err=ok[label][1])
            with open(f"{out}/fp8_wg_try.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"{shape} {label:70s} {ms:.3f} ms {rec['tflops']:.0f} TFLOP/s x{rec['vs_scaled_mm']:.3f}", flush=True)


def wide(splits):
    """The shipped program against the halves over the wide sweep's problems (all dimensions 16 or
    more; A row-major, B as (N, K).T), _scaled_mm beside them where it takes the shape (multiples
    of 16). Every answer checked."""
    from tilemm.bench.suites import wide_problems
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_wg_try.py --wide "
                         + " ".join(splits))
    gpu_ladder.prewarm(8)
    for p in wide_problems():
        if p.split not in splits:
            continue
        m_, n_, k_ = p.m, p.n, p.k
        a = torch.randn(m_, k_, device="cuda").to(torch.float8_e4m3fn)
        bt = torch.randn(n_, k_, device="cuda").to(torch.float8_e4m3fn)
        b = bt.T
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        launch = {"triton": lambda: tilemm.scaled_matmul(a, b, sa, sb, warp_specialized=False),
                  "gluon": lambda: tilemm.scaled_matmul(a, b, sa, sb, warp_specialized=True)}
        if m_ % 16 == 0 and n_ % 16 == 0 and k_ % 16 == 0:
            launch["scaled_mm"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        ok = {}
        for label, fn in launch.items():
            try:
                got = fn()
                torch.cuda.synchronize()
                ok[label] = check(got, a, b, 1.0, False)
            except Exception as e:
                print(p, label, "FAILED", repr(e)[:300], flush=True)
        timed = {label: fn for label, fn in launch.items() if ok.get(label, (False, ))[0]}
        for label in launch:
            if label not in timed:
                print(p, label, "WRONG or failed", ok.get(label), flush=True)
        times = {label: statistics.median(ts) for label, ts in interleaved_rounds(timed, 3, 0.08).items()}
        rec = dict(base, m=m_, n=n_, k=k_, kind=p.kind, split=p.split, ms=times,
                   errors={label: ok[label][1] for label in timed})
        with open(f"{out}/fp8_wg_wide.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        ref = times.get("triton")
        print(f"{p.split:8} {m_:6}x{n_:6}x{k_:6} " + " ".join(f"{l} {t * 1e3:8.1f}us x{ref / t:.3f}" for l, t in times.items()),
              flush=True)


def profile(shape):
    """One launch each of _scaled_mm, tilemm's fast and default modes and session 19's halves,
    between cudaProfilerStart/Stop, for ncu --profile-from-start off."""
    m_, n_, k_ = map(int, shape.split('x'))
    a = torch.randn(m_, k_, device="cuda").to(torch.float8_e4m3fn)
    bt = torch.randn(n_, k_, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    c = torch.empty(m_, n_, device="cuda", dtype=torch.bfloat16)
    calls = [lambda: torch._scaled_mm(a, bt.T, sa, sb, out_dtype=torch.bfloat16),
             lambda: tilemm.scaled_matmul(a, bt.T, sa, sb, fast_accum=True),
             lambda: tilemm.scaled_matmul(a, bt.T, sa, sb),
             lambda: run(a, bt, c, sa, sb, mode="halves", block_n=256, stages=4)]
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    if sys.argv[1] == "--wide":
        wide(sys.argv[2:])
    elif sys.argv[1] == "--profile":
        profile(sys.argv[2])
    else:
        main()
