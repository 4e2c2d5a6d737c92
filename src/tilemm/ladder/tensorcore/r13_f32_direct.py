"""tensorcore-f32's small 3xTF32 products in one launch (tf32x3_direct): which take it, and its launch."""
from __future__ import annotations

from tilemm.engine import availability, launches

# 3xTF32 products of at most this many multiply-adds take one launch (tf32x3_direct), their
# parts split in registers, on tiles of at most DIRECT_BLOCK (more programs for a small C): there
# the split passes' two launches cost more than they save (measured, kernel alone: level at 1024³,
# far slower past it): its tiles pass through registers (split there) into shared memory, which
# costs past the smallest.
DIRECT_WORK = 2**28
DIRECT_BLOCK = 64
# Where DIRECT_BLOCK-square tiles leave SMs without a program, their columns are halved (once: 32 x
# 32 tiles ran slower on 4 warps, and no faster on 2): more programs on a small C outweigh the
# narrower tiles' extra loads (measured in whole calls).
DIRECT_NARROW_BLOCK = 32


def takes_direct(m: int, n: int, k: int, direct=None, stream_k=None, copy_panels=None) -> bool:
    """Whether 3xTF32 runs as one launch (tf32x3_direct): as asked, else for products of at most
    DIRECT_WORK multiply-adds unless stream-K or panels were asked for."""
    if direct is not None:
        return direct
    return m * n * k <= DIRECT_WORK and not stream_k and (copy_panels or 1) == 1


def direct_launch(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, chunk: int):
    """A launcher without arguments of tf32x3_direct: 3xTF32 in one launch, on tiles of at most
    DIRECT_BLOCK x DIRECT_BLOCK (and at most 4 warps for them), their columns narrowed to
    DIRECT_NARROW_BLOCK where C would have fewer tiles than the GPU has SMs; chunk: K steps a
    chunk (r13_f32.chunk_steps)."""
    from tilemm.ladder.tensorcore.r13_f32_kernel import tf32x3_direct
    m, k = a.shape
    n = b.shape[1]
    block_m, block_n = min(block_m, DIRECT_BLOCK), min(block_n, DIRECT_BLOCK)
    if -(-m // block_m) * -(-n // block_n) < availability.multiprocessors():
        block_n = min(block_n, DIRECT_NARROW_BLOCK)
    grid = (-(-m // block_m) * -(-n // block_n),)
    return launches.bound_launch(tf32x3_direct, grid, (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                                                      b.stride(1), c.stride(0), c.stride(1)),
                                dict(CHUNK=chunk, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                     GROUP_M=group_m, num_warps=min(num_warps, 4), num_stages=num_stages))
