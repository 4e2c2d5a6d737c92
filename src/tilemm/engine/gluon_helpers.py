"""Gluon pieces shared by the Hopper programs (tilemm.engine.int8_gluon, r12_fp64_dmma_kernel,
scaled_fp8_gluon_kernel, scaled_fp8_cluster_kernel, r10_cluster_kernel): the grouped tile order,
C's pointers and a block's store, the TMA load as this Triton spells it, a ring of shared-memory
stages with their barriers, and the loading warps that fill it (one CTA's; a cluster's pair).

Kept apart so that importing tilemm never imports Triton; GPU only (Gluon has no interpreter).
"""
import triton  # noqa: F401  (Gluon loads through Triton)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from tilemm.numerics import digits

# the TMA load is tma.async_copy_global_to_shared in Triton 3.6 and tma.async_load in 3.9 (where
# the old name is kept only to raise)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
# and the TMA store tma.async_copy_shared_to_global in 3.6, tma.async_store in 3.9
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

# Gluon code may only name functions it can compile or evaluate: the pair arithmetic of
# digits.shift_pairs, as a constexpr function
shift_pairs = gluon.constexpr_function(digits.shift_pairs)


@gluon.constexpr_function
def first_pair(s, nd_a, nd_b):
    """A's digit in the first pair (i, s - i) of shift s (digits.shift_pairs)."""
    return shift_pairs(s, nd_a, nd_b).start


@gluon.constexpr_function
def pair_count(s, nd_a, nd_b):
    """How many digit pairs (i, s - i) shift s has (0 where there are none)."""
    return len(shift_pairs(s, nd_a, nd_b))


@gluon.jit
def tile_start(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(row, column) of C where tile number `tile` starts, in the grouped order of
    tilemm.engine.programs.tile_position (GROUP_M block rows walk a block column together: L2 reuse)."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_in_group = GROUP_M * gl.cdiv(N, BLOCK_N)
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def block_pointers(c_ptr, offs_m, offs_n, M, N, stride_cm, stride_cn):
    """(pointers, inside C) of the block of C at rows offs_m and columns offs_n (slices of one
    register layout), 64-bit offsets."""
    rows = gl.expand_dims(offs_m.to(gl.int64) * stride_cm, 1)
    cols = gl.expand_dims(offs_n.to(gl.int64) * stride_cn, 0)
    return c_ptr + rows + cols, gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)


@gluon.jit
def store_block(c_ptr, x, row, col, M, N, stride_cm, stride_cn, layout: gl.constexpr, ROWS: gl.constexpr,
                COLS: gl.constexpr):
    """x (ROWS x COLS, float32, in register layout `layout`) into C at (row, col), what lies
    inside C, in C's dtype."""
    offs_m = row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    offs_n = col + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    ptrs, inside = block_pointers(c_ptr, offs_m, offs_n, M, N, stride_cm, stride_cn)
    gl.store(ptrs, x.to(c_ptr.dtype.element_ty), mask=inside)


@gluon.jit
def stage_ring(a_desc, b_desc, STAGES: gl.constexpr, RELEASES: gl.constexpr = 1):
    """(a_bufs, b_bufs, ready, empty): STAGES shared-memory stages of an A and a B tile, each with a
    `ready` barrier (its tiles are in) and an `empty` one (the products that read it are done: its
    RELEASES arrivals, one from each partition that multiplies)."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready, empty = stage_barriers(STAGES, RELEASES)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def stage_barriers(STAGES: gl.constexpr, RELEASES: gl.constexpr = 1):
    """(ready, empty): a pair of barriers for each of STAGES stages, `ready` arrived at once by
    the loads' completion, `empty` by RELEASES arrivals."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=RELEASES)
    return ready, empty


@gluon.jit
def invalidate_barriers(ready, empty, STAGES: gl.constexpr):
    """The stage barriers of stage_barriers, invalidated once the partitions are done."""
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


@gluon.jit
def producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, ND_A: gl.constexpr, ND_B: gl.constexpr,
             ND_C: gl.constexpr, LOWEST: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """One warp: the loads of every step of this program, each into the next stage once the
    multiplying warps have released it (empty), signalling ready when both tiles are in. A tile's
    steps: for each shift s from the highest down to LOWEST, the digit pairs (i, s - i), K step by
    K step (plain 8-bit data: one pair, ND_A = ND_B = ND_C = 1, digit planes of one row each)."""
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    p = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for s in gl.static_range(ND_C - 1, -1, -1):
            if pair_count(s, ND_A, ND_B) > 0 and s >= LOWEST:
                for t in range(pair_count(s, ND_A, ND_B) * k_steps):
                    i = first_pair(s, ND_A, ND_B) + t % pair_count(s, ND_A, ND_B)   # A's digit; B's is s - i
                    k0 = (t // pair_count(s, ND_A, ND_B)) * BLOCK_K
                    slot = p % STAGES
                    mbarrier.wait(empty.index(slot), ((p // STAGES) & 1) ^ 1)   # the first pass finds it free
                    bar = ready.index(slot)
                    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                    tma_load(a_desc, [i * M + off_m, k0], bar, a_bufs.index(slot))
                    tma_load(b_desc, [(s - i) * N + off_n, k0], bar, b_bufs.index(slot))
                    p += 1


@gluon.jit
def cluster_loads(a_desc, b_desc, a_bufs, b_bufs, ready, empty, pair_empty, M, N, K, B_K_MAJOR: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                  PROGRAMS: gl.constexpr, STAGES: gl.constexpr):
    """One warp of each CTA: per K step of this cluster's tiles, once its own warpgroups have
    released the stage (empty) and, in the lead, those of both CTAs (pair_empty; the other CTA
    does not wait on it), the two warpgroups' A rows into its own stage and, from the lead, the B
    tile into both CTAs' stage (B_K_MAJOR: B^T's (N, K) blocks, else B's (K, N)); ready counts the
    bytes that arrive in each CTA."""
    ROWS: gl.constexpr = a_desc.block_type.shape[0]
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    p = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for t in range(k_steps):
            slot = p % STAGES
            free = ((p // STAGES) & 1) ^ 1   # the first pass finds the stages free
            mbarrier.wait(empty.index(slot), free)
            mbarrier.wait(pair_empty.index(slot), free)
            bar = ready.index(slot)
            mbarrier.expect(bar, 2 * a_desc.nbytes_per_cta + b_desc.nbytes_per_cta)
            tma_load(a_desc, [off_m, t * BLOCK_K], bar, a_bufs.index(2 * slot))
            tma_load(a_desc, [off_m + ROWS, t * BLOCK_K], bar, a_bufs.index(2 * slot + 1))
            if B_K_MAJOR:
                tma_load(b_desc, [off_n, t * BLOCK_K], bar, b_bufs.index(slot), multicast=True)
            else:
                tma_load(b_desc, [t * BLOCK_K, off_n], bar, b_bufs.index(slot), multicast=True)
            p += 1


def descriptor(x, block_rows: int, block_k: int):
    """A Gluon TMA descriptor of 8-bit x (rows, K): int8, or fp8 for scaled_fp8_gluon_kernel; K
    contiguous, in tiles block_rows x block_k."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    element = {"torch.int8": gl.int8, "torch.float8_e4m3fn": gl.float8e4nv, "torch.float8_e5m2": gl.float8e5}
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_k], element[str(x.dtype)])
    return TensorDescriptor(x, list(x.shape), list(x.stride()), [block_rows, block_k], layout)
