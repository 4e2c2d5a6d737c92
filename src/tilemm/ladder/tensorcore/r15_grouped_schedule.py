"""Rung `tensorcore-grouped`'s tile scheduler for the MoE forward layouts (the TMA program's, in
r15_grouped_tma_kernel.py). The pointer program walks the groups one by one for every tile, a
read of offs each: with 128 experts, each program's walk is 128 dependent reads. Here each
program reads every group's size once, as one vector of G_BLOCK lanes, and numbers the tiles
with two prefix sums:

- tall tiles (BLOCK_SIZE_M rows) first, every group's in turn: equal work each, K being shared;
- then short tiles (SMALL_M rows), at most one a block column of a group: its last rows where
  SMALL_M or fewer are left, so an expert routed 20 rows pays for 64 rows, not 128. Being
  cheaper, they come last and fill the final wave (longest work first).

A tile's group is found by counting the groups whose tiles end at or before it (a reduction,
not a walk), so an empty group costs nothing: it holds no tile and is never visited."""
import triton
import triton.language as tl

BATCHED = tl.constexpr(0)       # the SPLIT numbering of r15_grouped_kernel
COUNTED_M = tl.constexpr(4)


@triton.jit
def larger(x, y):
    return tl.maximum(x, y)


@triton.jit
def group_rows(offs_ptr, G, M, EXTENT, SPLIT: tl.constexpr, G_BLOCK: tl.constexpr):
    """(rows, first row) of every group, vectors of G_BLOCK lanes (lanes past G: no rows). SPLIT_M:
    rows offs[g-1]:offs[g] of A, clamped as the pointer program clamps them (offsets taken as
    their running maximum, at most EXTENT); COUNTED_M: counts[g] (0..EXTENT) from row g M;
    BATCHED: M rows from row g M."""
    gs = tl.arange(0, G_BLOCK)
    if SPLIT == BATCHED:
        rows = tl.where(gs < G, M, 0)
        first = gs * M
    elif SPLIT == COUNTED_M:
        counts = tl.load(offs_ptr + gs, mask=gs < G, other=0)
        rows = tl.minimum(tl.maximum(counts, 0), EXTENT)
        first = gs * M
    else:
        ends = tl.maximum(tl.load(offs_ptr + gs, mask=gs < G, other=0), 0)
        starts = tl.maximum(tl.load(offs_ptr + gs - 1, mask=(gs > 0) & (gs <= G), other=0), 0)
        ends = tl.minimum(tl.associative_scan(ends, 0, larger), EXTENT)
        first = tl.minimum(tl.associative_scan(starts, 0, larger), EXTENT)
        rows = ends - first
    return rows, first


@triton.jit
def short_rows(rows, BLOCK_SIZE_M: tl.constexpr, SMALL_M: tl.constexpr):
    """1 where a group's last block row is short (0 < rows left <= SMALL_M), else 0."""
    left = rows % BLOCK_SIZE_M
    return ((left > 0) & (left <= SMALL_M) & (SMALL_M < BLOCK_SIZE_M)).to(tl.int32)


@triton.jit
def tile_table(rows, num_pid_n, BLOCK_SIZE_M: tl.constexpr, SMALL_M: tl.constexpr):
    """(tall tiles' ends, short tiles' ends): inclusive prefix sums over the groups of each
    kind's tiles, block columns included."""
    short = short_rows(rows, BLOCK_SIZE_M, SMALL_M)
    tall = tl.cdiv(rows, BLOCK_SIZE_M) - short
    return tl.cumsum(tall * num_pid_n, 0), tl.cumsum(short * num_pid_n, 0)


@triton.jit
def find(ends, tile):
    """(group, tile's number within it) of `tile`, given each group's inclusive end."""
    done = ends <= tile
    group = tl.sum(done.to(tl.int32), 0)
    return group, tile - tl.max(tl.where(done, ends, 0), 0)


@triton.jit
def lane(vector, group, G_BLOCK: tl.constexpr):
    """vector[group] as a scalar."""
    return tl.sum(tl.where(tl.arange(0, G_BLOCK) == group, vector, 0), 0)
