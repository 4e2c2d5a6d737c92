"""bfloat16 / float16 products with float32 sums on a Hopper GPU for rung `tensorcore`, in clusters
of two CTAs that load each B tile once (TMA multicast), written in Gluon: cluster=True.

Two CTAs of a cluster (on two SMs) take a 256 x 256 tile of C, 128 rows each: each loads its own
A rows, and the first (the lead) loads the B tile once for both, the copy engine writing it into
both SMs' shared memory. In each CTA two warpgroups of 64 rows each multiply, and one loading warp
fills a ring of stages (64-deep K steps: 16 KiB of A and 32 KiB of B).

Unlike fp8's (scaled_fp8_cluster_kernel, whose products must be added by hand to float32 totals),
16-bit wgmma adds into its float32 accumulator itself: each warpgroup keeps its 64 x 256 total in
the accumulator, issues a K step's products and, while they run, waits only for the previous
step's (one wgmma group in flight) before releasing that step's stage, as CUTLASS's Hopper
warp-specialized programs do.

The stage bookkeeping is the fp8 cluster program's: the lead may write a stage of B only when the
warpgroups of both CTAs are done with it, so each stage has, besides the `empty` barrier of its
own CTA (gating its A rows), one shared by the pair (`pair_empty`, kept in the lead CTA, which
alone waits on it) that all four warpgroups arrive on. Needs a Triton whose Gluon routes an
mbarrier arrival to the CTA that holds the barrier (availability.gluon_multicast: 3.9 does).

Asked for only (tilemm.matmul(..., kernel="tensorcore", cluster=True)): it runs level with
torch.matmul and with the rung's Triton program, not ahead of them (figures and the ncu counters:
docs/ladder/r10-tensorcore.md, "In clusters of two CTAs"). The tensor cores set its pace, as they
set cuBLAS's; what they idle would be the tiles' last partial round (1024 tiles on 66 clusters at
8192³) and the epilogue, where both warpgroups stop multiplying. Tiles 192 wide (a 128- and a
64-wide accumulator: Gluon's blocks are powers of two) to fill that round better ran slower.

A K-major (M, K) with 16-byte aligned rows; B either (K, N) with rows contiguous or given as
(N, K).T (read K-major), 16-byte aligned rows; C any strides, bfloat16 or float16 (written by TMA
stores through shared memory where its rows are contiguous and 16-byte aligned, else from
registers). Kept apart so that importing tilemm never imports Triton; GPU only.
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from tilemm.engine.launches import bound_launch
from tilemm.engine.gluon_helpers import cluster_loads, store_block, tile_start

CTAS = 2
BLOCK_M, BLOCK_N, BLOCK_K = 256, 256, 64    # a cluster's tile: 128 rows on each CTA; K steps of 128 bytes
LOAD_ROWS = BLOCK_M // 2                     # rows of A a load brings in (64 to each CTA): a warpgroup's
STAGES = 4
GROUP_M = 8                                  # cluster tiles down a column before the next (2048 rows)
WORKER_REGISTERS = 232

# CGA layouts, written here (Gluon makes the lists of a kernel's body into tuples): rows shared
# out between the two CTAs, or the whole block on each
SPLIT_ROWS = [[1, 0]]
WHOLE = [[0, 0]]
TOTALS = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                instr_shape=[16, BLOCK_N, 16], cga_layout=SPLIT_ROWS))


@gluon.jit
def warpgroup_products(a_bufs, b_bufs, ready, empty, pair_empty, c_desc, c_ptr, M, N, K, stride_cm, stride_cn,
                       WG: gl.constexpr, B_K_MAJOR: gl.constexpr, TMA_STORE: gl.constexpr, BLOCK_M: gl.constexpr,
                       BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr,
                       STAGES: gl.constexpr):
    """Warpgroup WG's rows of each of this cluster's tiles (cluster rows WG * 128 + [0, 128), 64
    on each CTA): per K step, the products added into the float32 accumulator by wgmma itself,
    one step's in flight while the previous one's stage is released (to its CTA and to the pair);
    C at the tile's end: with TMA_STORE, through shared memory by a TMA store, a half of 128
    columns at a time, that runs on while the next tile's products start; else from registers."""
    ROWS: gl.constexpr = BLOCK_M // 2
    HALF: gl.constexpr = BLOCK_N // 2
    if TMA_STORE:
        c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        acc = gl.zeros((ROWS, BLOCK_N), dtype=gl.float32, layout=TOTALS)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            b = b_bufs.index(slot)
            if B_K_MAJOR:
                b = b.permute((1, 0))
            acc = warpgroup_mma(a_bufs.index(2 * slot + WG), b, acc, use_acc=t > 0, is_async=True)
            # the previous step's products are done (this one's may run on): its stage is free
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            previous = (c + STAGES - 1) % STAGES
            mbarrier.arrive(empty.index(previous), pred=t > 0)
            mbarrier.arrive(pair_empty.index(previous), pred=t > 0)
            c += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        last = (c + STAGES - 1) % STAGES
        mbarrier.arrive(empty.index(last))
        mbarrier.arrive(pair_empty.index(last))
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if TMA_STORE:
            halves = acc.reshape([ROWS, 2, HALF]).permute(0, 2, 1).split()
            for h in gl.static_range(2):
                tma.store_wait(0)            # the last store has read c_smem
                c_smem.store(halves[h].to(c_desc.dtype))
                fence_async_shared()
                tma.async_store(c_desc, [off_m + WG * ROWS, off_n + h * HALF], c_smem)
        else:
            store_block(c_ptr, acc, off_m + WG * ROWS, off_n, M, N, stride_cm, stride_cn, TOTALS, ROWS, BLOCK_N)
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def matmul_cluster(a_desc, b_desc, c_desc, c_ptr, M, N, K, stride_cm, stride_cn, TMA_STORE: gl.constexpr,
                   GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr,
                   WORKER_REGISTERS: gl.constexpr):
    """C = A @ B from 16-bit a_desc (M, K; blocks of LOAD_ROWS rows split between the CTAs) and
    b_desc (blocks whole on each CTA: (N, K) blocks BLOCK_N x BLOCK_K where B is read K-major, else
    (K, N) blocks BLOCK_K x BLOCK_N), float32 sums; launched with num_ctas=2 and min(cluster
    tiles, PROGRAMS) clusters. In each CTA the first warpgroup is the default partition
    (num_warps = 4), the second and the loading warp are workers."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_M: gl.constexpr = 2 * a_desc.block_type.shape[0]
    B_K_MAJOR: gl.constexpr = b_desc.block_type.shape[1] == BLOCK_K
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0] if B_K_MAJOR else b_desc.block_type.shape[1]
    # stage s holds the two warpgroups' A rows at 2s and 2s + 1
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [2 * STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    pair_empty = mbarrier.allocate_mbarrier(batch=STAGES, two_ctas=True)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
        mbarrier.init(pair_empty.index(i), count=2)   # a CTA's count: two from each
    gl.warp_specialize([(warpgroup_products, (a_bufs, b_bufs, ready, empty, pair_empty, c_desc, c_ptr, M, N, K,
                                              stride_cm, stride_cn, 0, B_K_MAJOR, TMA_STORE, BLOCK_M, BLOCK_N,
                                              BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                        (warpgroup_products, (a_bufs, b_bufs, ready, empty, pair_empty, c_desc, c_ptr, M, N, K,
                                              stride_cm, stride_cn, 1, B_K_MAJOR, TMA_STORE, BLOCK_M, BLOCK_N,
                                              BLOCK_K, GROUP_M, PROGRAMS, STAGES)),
                        (cluster_loads, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, pair_empty, M, N, K, B_K_MAJOR,
                                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],
                       [4, 1], [WORKER_REGISTERS, 24])


ELEMENTS = {"torch.bfloat16": gl.bfloat16, "torch.float16": gl.float16}


def descriptors(a_rows, b_rows, b_k_major: bool, c=None):
    """(A's, B's) Gluon TMA descriptors for matmul_cluster: a_rows (M, K) in blocks of LOAD_ROWS x
    BLOCK_K shared out by rows between the CTAs; b_rows B^T (N, K) in BLOCK_N x BLOCK_K blocks where
    b_k_major, else B (K, N) in BLOCK_K x BLOCK_N blocks, whole on each CTA (the lead's multicast).
    Rows contiguous and 16-byte aligned (operand_copies.aligned_rows). With c (M, N), rows
    contiguous and 16-byte aligned, C's too, in blocks of LOAD_ROWS x BLOCK_N / 2 shared out by
    rows (what a warpgroup stores at a time)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    b_block = [BLOCK_N, BLOCK_K] if b_k_major else [BLOCK_K, BLOCK_N]
    made = []
    blocks = [(a_rows, [LOAD_ROWS, BLOCK_K], SPLIT_ROWS), (b_rows, b_block, WHOLE)]
    blocks += [(c, [LOAD_ROWS, BLOCK_N // 2], SPLIT_ROWS)] if c is not None else []
    for x, block, cga in blocks:
        layout = gl.NVMMASharedLayout.get_default_for(block, ELEMENTS[str(x.dtype)], cga_layout=cga)
        made.append(TensorDescriptor(x, list(x.shape), list(x.stride()), block, layout))
    return tuple(made)


def launcher(a_desc, b_desc, c_desc, c, m: int, n: int, k: int, multiprocessors: int):
    """A launcher without arguments (a BoundLaunch) of matmul_cluster into c (M, N), a cluster for
    each two SMs (fewer where there are fewer tiles); K >= 1. c_desc: C's descriptor (descriptors'
    third), whose TMA stores write C; None: C written from registers (any strides and dtype)."""
    clusters = min(multiprocessors // CTAS, triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N))
    # without a descriptor of C the program takes A's in its place, unread
    return bound_launch(matmul_cluster, (clusters,), (a_desc, b_desc, c_desc or a_desc, c, m, n, k, c.stride(0),
                                                      c.stride(1)),
                        dict(TMA_STORE=c_desc is not None, GROUP_M=GROUP_M, PROGRAMS=clusters, STAGES=STAGES,
                             WORKER_REGISTERS=WORKER_REGISTERS, num_warps=4, num_ctas=CTAS))
