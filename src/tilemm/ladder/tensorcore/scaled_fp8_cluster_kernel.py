"""The fp8 products of rung `tensorcore-fp8` with float32 sums on a Hopper GPU, in clusters of two
CTAs that load each B tile once (TMA multicast), written in Gluon.

scaled_fp8_gluon_kernel's program loads, for each 128 x 256 tile and K step, 16 KiB of A and 32
KiB of B from L2 into its SM. Here two CTAs of a cluster (on two SMs) take a 256 x 256 tile, 128
rows each: each loads its own A rows, and the first (the lead) loads the B tile once for both, the
copy engine writing it into both SMs' shared memory: the pair reads 64 KiB from L2 a step where two
one-CTA programs read 96.

Asked for only (scaled_matmul(cluster=True)): it ran hardly faster than the one-CTA program
(benchmarks/results/h200/fp8_cluster_triton39.jsonl; docs/ladder/scaled-fp8.md). Halving B's reads
changed little, so L2 is not what holds that program back: under ncu both Gluon programs keep the
SMs less busy than cuBLAS does, and their warps spend more of their cycles waiting at a barrier,
the wait for each half's products before they are added.

The structure is that program's: in each CTA a partition per 64-row warpgroup adds its products
to float32 totals in two halves of 128 columns while the other's run, and one loading warp fills
a ring of stages. What the cluster adds: the lead may write a stage of B only when the
warpgroups of both CTAs are done with it, so each stage has, besides the `empty` barrier of its
own CTA (gating its A rows), one shared by the pair (`pair_empty`, kept in the lead CTA, which
alone waits on it) that all four warpgroups arrive on.

Gluon describes a cluster's tensors whole, with a CGA layout saying how they are shared out: a
load of 128 A rows (a [128, BLOCK_K] block split by rows) brings 64 rows into each CTA, so each
warpgroup's rows come from a load of their own, and a warpgroup's 128 x 128 totals are 64 x 128
on each CTA. Needs a Triton whose Gluon routes an mbarrier arrival to the CTA that holds the
barrier (availability.gluon_multicast: 3.9 does; 3.7 has the multicast load but arrives on each
CTA's own copy of a shared barrier, which would let the lead overwrite a stage that the other CTA
still reads).

Operands K-major (A (M, K), B^T (N, K)), 16-byte aligned rows; C any strides, bfloat16, float16 or
float32. Kept apart so that importing tilemm never imports Triton; GPU only.
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from tilemm.engine.launches import bound_launch
from tilemm.engine.gluon_helpers import cluster_loads, store_block, tile_start

CTAS = 2
BLOCK_M, BLOCK_N, BLOCK_K = 256, 256, 128   # a cluster's tile: 128 rows on each CTA
LOAD_ROWS = BLOCK_M // 2                     # rows of A a load brings in (64 to each CTA): a warpgroup's
STAGES = 4
GROUP_M = 8                                  # cluster tiles down a column before the next (2048 rows)
WORKER_REGISTERS = 232

# CGA layouts, written here (Gluon makes the lists of a kernel's body into tuples): rows shared
# out between the two CTAs, or the whole block on each
SPLIT_ROWS = [[1, 0]]
WHOLE = [[0, 0]]
TOTALS = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                instr_shape=[16, BLOCK_N // 2, 32], cga_layout=SPLIT_ROWS))


@gluon.jit
def warpgroup_sums(a_bufs, b_bufs, ready, empty, pair_empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm,
                   stride_cn, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                   GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """Warpgroup WG's rows of each of this cluster's tiles (cluster rows WG * 128 + [0, 128), 64
    on each CTA): per K step, each half's products into a fresh accumulator, waited for and added
    to the float32 total; the stage released (to its CTA and to the pair) once both halves have
    read it; C = total * scale_a * scale_b at the tile's end."""
    HALF: gl.constexpr = BLOCK_N // 2
    ROWS: gl.constexpr = BLOCK_M // 2
    scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        left = gl.zeros((ROWS, HALF), dtype=gl.float32, layout=TOTALS)
        right = gl.zeros((ROWS, HALF), dtype=gl.float32, layout=TOTALS)
        step = gl.zeros((ROWS, HALF), dtype=gl.float32, layout=TOTALS)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(2 * slot + WG)
            b = b_bufs.index(slot)
            step = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), step, use_acc=False, is_async=True)
            step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
            left += step
            step = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), step, use_acc=False, is_async=True)
            step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
            mbarrier.arrive(empty.index(slot))
            mbarrier.arrive(pair_empty.index(slot))
            right += step
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        store_block(c_ptr, left * scale, off_m + WG * ROWS, off_n, M, N, stride_cm, stride_cn, TOTALS, ROWS, HALF)
        store_block(c_ptr, right * scale, off_m + WG * ROWS, off_n + HALF, M, N, stride_cm, stride_cn, TOTALS, ROWS,
                    HALF)


@gluon.jit
def fp8_matmul_cluster(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                       GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr,
                       WORKER_REGISTERS: gl.constexpr):
    """C = scale_a * scale_b * A @ B from fp8 a_desc (M, K; blocks of LOAD_ROWS rows split between
    the CTAs) and b_desc (N, K; blocks whole on each CTA), float32 sums; launched with num_ctas=2
    and min(cluster tiles, PROGRAMS) clusters. In each CTA the first warpgroup is the default
    partition (num_warps = 4), the second and the loading warp are workers."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_M: gl.constexpr = 2 * a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
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
    gl.warp_specialize([(warpgroup_sums, (a_bufs, b_bufs, ready, empty, pair_empty, c_ptr, scale_a_ptr, scale_b_ptr,
                                          M, N, K, stride_cm, stride_cn, 0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                                          PROGRAMS, STAGES)),
                        (warpgroup_sums, (a_bufs, b_bufs, ready, empty, pair_empty, c_ptr, scale_a_ptr, scale_b_ptr,
                                          M, N, K, stride_cm, stride_cn, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                                          PROGRAMS, STAGES)),
                        (cluster_loads, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, pair_empty, M, N, K, True,
                                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],   # B^T read K-major
                       [4, 1], [WORKER_REGISTERS, 24])


def descriptors(a_rows, b_rows):
    """(A's, B's) Gluon TMA descriptors for fp8_matmul_cluster: a_rows (M, K) in blocks of
    LOAD_ROWS x BLOCK_K shared out by rows between the CTAs, b_rows (N, K) in BLOCK_N x BLOCK_K
    blocks whole on each (the lead's multicast)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    element = {"torch.float8_e4m3fn": gl.float8e4nv, "torch.float8_e5m2": gl.float8e5}
    made = []
    for x, block, cga in ((a_rows, [LOAD_ROWS, BLOCK_K], SPLIT_ROWS), (b_rows, [BLOCK_N, BLOCK_K], WHOLE)):
        layout = gl.NVMMASharedLayout.get_default_for(block, element[str(x.dtype)], cga_layout=cga)
        made.append(TensorDescriptor(x, list(x.shape), list(x.stride()), block, layout))
    return tuple(made)


def launcher(a_desc, b_desc, c, scale_a, scale_b, m: int, n: int, k: int, multiprocessors: int):
    """A launcher without arguments (a BoundLaunch) of fp8_matmul_cluster into c (M, N), a cluster
    for each two SMs (fewer where there are fewer tiles); K >= 1."""
    clusters = min(multiprocessors // CTAS, triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N))
    return bound_launch(fp8_matmul_cluster, (clusters,),
                        (a_desc, b_desc, c, scale_a, scale_b, m, n, k, c.stride(0), c.stride(1)),
                        dict(GROUP_M=GROUP_M, PROGRAMS=clusters, STAGES=STAGES, WORKER_REGISTERS=WORKER_REGISTERS,
                             num_warps=4, num_ctas=CTAS))
