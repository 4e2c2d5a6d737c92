"""A try (session 24, H200): float64 products on Hopper's DMMA m16n8k8 through inline PTX in Gluon.

Triton's tl.dot and Gluon's mma_v2 emit mma.sync m8n8k4 for float64, a quarter of the work of the
m16n8k8 that cuBLAS's DGEMM runs. Here each warp's accumulator is a 6-D tensor (m16 block, n8 block,
row half h, groupID g, threadID_in_group t, column parity e) in a BlockedLayout whose four
consecutive registers are one mma's c0..c3; A's and B's fragments are loaded from shared memory in
the same layout (A broadcast along n blocks, B along m blocks, one LDS.128 per fragment pair:
A's K index stored as 2t + e), and gl.inline_asm_elementwise(pack=4) issues one mma per register
group. Operands: A (M, K) and B^T (N, K), K-major, K % 8 == 0, loaded by TMA as (K/8, rows, 8) boxes
(each 8-column chunk 64-byte rows: conflict-free). f64_matmul: one partition, a ring of stages;
f64_matmul_ws: a loading warp and the multiplying warps, a stage released after a partition barrier
and fence.proxy.async (without them, 128 x 64 x 16 tiles gave wrong elements at 6144 x 5120 x 4096).

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f64_dmma_try.py   (writes $OUT/f64_dmma_wide.jsonl)

Results and lesson: docs/tensor_cores.md, "float64 on DMMA m16n8k8 (session 24)".
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared

from tilemm.ladder.tensorcore.t2_int8_gluon_kernel import tile_start

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
cta_sync = getattr(gl, "barrier", None) or gl.thread_barrier
# a shared-memory view under another shape and layout: reinterpret in Triton 3.9, _reinterpret in 3.6
NEW_REINTERPRET = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))


@gluon.jit
def stage_view(bufs, slot, desc):
    """Stage slot of bufs (chunks of rows x 8) as desc's TMA box lands in it."""
    layout: gl.constexpr = desc.layout
    shape: gl.constexpr = [bufs.shape[0] // desc.block_type.shape[0]] + desc.block_type.shape
    if NEW_REINTERPRET:
        view = bufs.reinterpret(gl.float64, shape, layout)
    else:
        view = bufs._reinterpret(gl.float64, shape, layout)
    return view.index(slot)


@gluon.constexpr_function
def fragment_layout(mi, ni, wm, wn):
    """(m16 block, n8 block, h, g, t, e): registers e, h (one mma's four), then n blocks, m blocks;
    lane = 4 g + t; warps over the blocks."""
    return gl.BlockedLayout([mi, ni, 2, 1, 1, 2], [1, 1, 1, 8, 4, 1], [wm, wn, 1, 1, 1, 1], [5, 2, 4, 3, 1, 0])


@gluon.constexpr_function
def axis_layout(layout, dim):
    """layout sliced down to its dimension dim (the others removed, highest first)."""
    for d in range(5, -1, -1):
        if d != dim:
            layout = gl.SliceLayout(d, layout)
    return layout


@gluon.jit
def axis_index(size: gl.constexpr, dim: gl.constexpr, layout: gl.constexpr):
    x = gl.arange(0, size, layout=axis_layout(layout, dim))
    for d in gl.static_range(6):
        if d != dim:
            x = gl.expand_dims(x, d)
    return x


@gluon.jit
def dmma(xa, xb, acc):
    return gl.inline_asm_elementwise(
        "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {$0,$1,$2,$3}, {$4,$6,$5,$7}, {$8,$9}, {$12,$13,$14,$15};",
        "=d,=d,=d,=d,d,d,d,d,d,d,d,d,d,d,d,d", [xa, xb, acc], dtype=gl.float64, is_pure=True, pack=4)


@gluon.jit
def load_stage(a_desc, b_desc, a_bufs, b_bufs, bar, slot, off_m, off_n, k0, CHUNKS: gl.constexpr):
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma_load(a_desc, [k0 // 8, off_m, 0], bar, stage_view(a_bufs, slot, a_desc))
    tma_load(b_desc, [k0 // 8, off_n, 0], bar, stage_view(b_bufs, slot, b_desc))


@gluon.jit
def f64_matmul(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, BK: gl.constexpr, WM: gl.constexpr,
               WN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    MB: gl.constexpr = BM // 16
    NB: gl.constexpr = BN // 8
    CHUNKS: gl.constexpr = BK // 8
    layout: gl.constexpr = fragment_layout(MB // WM, NB // WN, WM, WN)
    chunk_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=64, rank=2)
    a_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BM, 8], chunk_layout)
    b_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BN, 8], chunk_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    off_m, off_n = tile_start(gl.program_id(0), M, N, BM, BN, GROUP_M)
    k_steps = gl.cdiv(K, BK)
    for s in gl.static_range(STAGES - 1):
        if s < k_steps:
            load_stage(a_desc, b_desc, a_bufs, b_bufs, ready.index(s), s, off_m, off_n, s * BK, CHUNKS)
    acc = gl.zeros([MB, NB, 2, 8, 4, 2], gl.float64, layout)
    for t in range(k_steps):
        nxt = t + STAGES - 1
        if nxt < k_steps:
            load_stage(a_desc, b_desc, a_bufs, b_bufs, ready.index(nxt % STAGES), nxt % STAGES, off_m, off_n,
                       nxt * BK, CHUNKS)
        slot = t % STAGES
        mbarrier.wait(ready.index(slot), (t // STAGES) & 1)
        for j in gl.static_range(CHUNKS):
            xa = a_bufs.index(slot * CHUNKS + j).reshape([MB, 1, 2, 8, 4, 2]).load(layout)
            xb = b_bufs.index(slot * CHUNKS + j).reshape([1, NB, 1, 8, 4, 2]).load(layout)
            acc = dmma(xa, xb, acc)
        cta_sync()
    rows = off_m + 16 * axis_index(MB, 0, layout) + 8 * axis_index(2, 2, layout) + axis_index(8, 3, layout)
    cols = off_n + 8 * axis_index(NB, 1, layout) + 2 * axis_index(4, 4, layout) + axis_index(2, 5, layout)
    ptrs = c_ptr + rows.to(gl.int64) * stride_cm + cols.to(gl.int64) * stride_cn
    gl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows < M) & (cols < N))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))


def descriptor(x, block_rows, block_k):
    """x (rows, K), K % 8 == 0, read as (K / 8, rows, 8): a box lands as block_k / 8 chunks of
    (block_rows, 8), each chunk's rows 64 bytes."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=64, rank=3)
    rows, k = x.shape
    return TensorDescriptor(x, [k // 8, rows, 8], [8, x.stride(0), 1], [block_k // 8, block_rows, 8], layout)


def launch(a, bt, c, BM=128, BN=64, BK=16, WM=2, WN=2, GROUP_M=8, STAGES=4, num_warps=4):
    m, k = a.shape
    n = bt.shape[0]
    grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
    return f64_matmul[grid](descriptor(a, BM, BK), descriptor(bt, BN, BK), c, m, n, k, c.stride(0), c.stride(1), BK=BK, WM=WM,
                            WN=WN, GROUP_M=GROUP_M, STAGES=STAGES, num_warps=num_warps)


@gluon.jit
def ws_producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, K, BK: gl.constexpr,
                STAGES: gl.constexpr):
    for t in range(gl.cdiv(K, BK)):
        slot = t % STAGES
        mbarrier.wait(empty.index(slot), ((t // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma_load(a_desc, [t * (BK // 8), off_m, 0], bar, stage_view(a_bufs, slot, a_desc))
        tma_load(b_desc, [t * (BK // 8), off_n, 0], bar, stage_view(b_bufs, slot, b_desc))


@gluon.jit
def ws_consumer(a_bufs, b_bufs, ready, empty, c_ptr, off_m, off_n, M, N, K, stride_cm, stride_cn, BM: gl.constexpr,
                BN: gl.constexpr, BK: gl.constexpr, WM: gl.constexpr, WN: gl.constexpr, STAGES: gl.constexpr,
                SAFE: gl.constexpr):
    MB: gl.constexpr = BM // 16
    NB: gl.constexpr = BN // 8
    CHUNKS: gl.constexpr = BK // 8
    layout: gl.constexpr = fragment_layout(MB // WM, NB // WN, WM, WN)
    acc = gl.zeros([MB, NB, 2, 8, 4, 2], gl.float64, layout)
    for t in range(gl.cdiv(K, BK)):
        slot = t % STAGES
        mbarrier.wait(ready.index(slot), (t // STAGES) & 1)
        for j in gl.static_range(CHUNKS):
            xa = a_bufs.index(slot * CHUNKS + j).reshape([MB, 1, 2, 8, 4, 2]).load(layout)
            xb = b_bufs.index(slot * CHUNKS + j).reshape([1, NB, 1, 8, 4, 2]).load(layout)
            acc = dmma(xa, xb, acc)
        if SAFE:
            cta_sync()
            fence_async_shared()
        mbarrier.arrive(empty.index(slot), count=1)
    rows = off_m + 16 * axis_index(MB, 0, layout) + 8 * axis_index(2, 2, layout) + axis_index(8, 3, layout)
    cols = off_n + 8 * axis_index(NB, 1, layout) + 2 * axis_index(4, 4, layout) + axis_index(2, 5, layout)
    ptrs = c_ptr + rows.to(gl.int64) * stride_cm + cols.to(gl.int64) * stride_cn
    gl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows < M) & (cols < N))


@gluon.jit
def f64_matmul_ws(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, BK: gl.constexpr, WM: gl.constexpr,
                  WN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SAFE: gl.constexpr = 0):
    BM: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    CHUNKS: gl.constexpr = BK // 8
    chunk_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=64, rank=2)
    a_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BM, 8], chunk_layout)
    b_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BN, 8], chunk_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    off_m, off_n = tile_start(gl.program_id(0), M, N, BM, BN, GROUP_M)
    gl.warp_specialize([(ws_consumer, (a_bufs, b_bufs, ready, empty, c_ptr, off_m, off_n, M, N, K, stride_cm, stride_cn,
                                       BM, BN, BK, WM, WN, STAGES, SAFE)),
                        (ws_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, K, BK, STAGES))],
                       [1], [24])


def launch_ws(a, bt, c, BM=128, BN=64, BK=16, WM=2, WN=2, GROUP_M=8, STAGES=4, num_warps=4, maxnreg=None, SAFE=0):
    m, k = a.shape
    n = bt.shape[0]
    grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
    return f64_matmul_ws[grid](descriptor(a, BM, BK), descriptor(bt, BN, BK), c, m, n, k, c.stride(0), c.stride(1),
                               BK=BK, WM=WM, WN=WN, GROUP_M=GROUP_M, STAGES=STAGES, SAFE=SAFE,
                               num_warps=num_warps, **({"maxnreg": maxnreg} if maxnreg else {}))


def wide_sweep(out):
    """Against DGEMM and the shipped rung over the wide sweep's problems with M, N, K >= 2048 up to
    2.2e12 flops: A row-major, B as (N, K).T; the try on copies with K padded to a multiple of 8
    (not timed); interleaved rounds after a pre-warm, every answer checked against DGEMM's."""
    import json, statistics
    import torch
    import tilemm
    from tilemm import machine
    from tilemm.bench.suites import wide_problems
    from tilemm.timing import interleaved_rounds
    import gpu_ladder
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f64_dmma_try.py")
    tries = {"try_128x128x16_w8": dict(BM=128, BN=128, BK=16, WM=2, WN=4, STAGES=4, num_warps=8, maxnreg=168, SAFE=1),
             "try_128x64x32": dict(BM=128, BN=64, BK=32, WM=2, WN=2, STAGES=2, num_warps=4, maxnreg=128, SAFE=1)}
    gpu_ladder.prewarm(8)
    for p in wide_problems():
        if min(p.m, p.n, p.k) < 2048 or 2 * p.m * p.n * p.k > 2.2e12:
            continue
        m, n, k = p.m, p.n, p.k
        a = torch.randn(m, k, device="cuda", dtype=torch.float64)
        bt = torch.randn(n, k, device="cuda", dtype=torch.float64)
        b = bt.T
        kp = -(-k // 8) * 8
        ap = torch.nn.functional.pad(a, (0, kp - k)).contiguous()
        btp = torch.nn.functional.pad(bt, (0, kp - k)).contiguous()
        ref = a @ b
        launch = {"cublas": lambda: torch.matmul(a, b), "rung": lambda: tilemm.matmul(a, b, kernel="tensorcore-f64")}
        errors = {"rung": float((tilemm.matmul(a, b, kernel="tensorcore-f64") - ref).abs().max() / ref.abs().max())}
        cs = {}
        for name, cfg in tries.items():
            cs[name] = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float64)
            launch_ws(ap, btp, cs[name], **cfg)
            errors[name] = float((cs[name] - ref).abs().max() / ref.abs().max())
            if errors[name] < 1e-12:
                launch[name] = (lambda name=name, cfg=cfg: launch_ws(ap, btp, cs[name], **cfg))
        rounds = interleaved_rounds(launch, 3, 0.15, by_round=True)
        ratio = {lb: statistics.median(statistics.median(rounds["cublas"][r]) / statistics.median(rs[r]) for r in range(3))
                 for lb, rs in rounds.items()}
        med = {lb: statistics.median([x for r in rs for x in r]) for lb, rs in rounds.items()}
        with open(f"{out}/f64_dmma_wide.jsonl", "a") as f:
            f.write(json.dumps(dict(base, m=m, n=n, k=k, split=p.split, layout="nt", configs=tries, ms=med,
                                    vs_cublas=ratio, errors=errors)) + "\n")


if __name__ == "__main__":
    import os
    wide_sweep(os.environ["OUT"])
