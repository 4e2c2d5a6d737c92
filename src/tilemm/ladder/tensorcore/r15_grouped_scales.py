"""Rung `tensorcore-grouped`'s float8 groups with block scales (rung 16's 1 x 128 of A, 128 x 128
of B, DeepGEMM's grouped layouts): the factor a K step's float32 partial sums are multiplied by on
their way into the accumulator, for both forms of the grouped program."""
import triton
import triton.language as tl

SCALE_BLOCK: tl.constexpr = tl.constexpr(128)


@triton.jit
def block_scale_factors(sa_g, sb_g, offs_m, offs_n, m_g, n_g, kk, stride_sam, stride_sak, stride_sbk, stride_sbn,
                        BLOCK_SIZE_K: tl.constexpr):
    """(BLOCK_SIZE_M, BLOCK_SIZE_N) scales of K step kk (inside one 128-block: BLOCK_SIZE_K divides
    128): group g's A scales of the tile's rows (sa_g: (rows, K/128)) times its B scales of the
    tile's columns' 128-blocks (sb_g: (K/128, N/128)); rows and columns outside the group 0."""
    block = (kk * BLOCK_SIZE_K) // SCALE_BLOCK
    scale_a = tl.load(sa_g + offs_m.to(tl.int64) * stride_sam + block * stride_sak, mask=offs_m < m_g, other=0.0)
    scale_b = tl.load(sb_g + block * stride_sbk + (offs_n // SCALE_BLOCK) * stride_sbn, mask=offs_n < n_g, other=0.0)
    return scale_a[:, None] * scale_b[None, :]


def scale_arguments(scales, c, split_m: bool) -> tuple:
    """The programs' scale arguments: (sa_ptr, sb_ptr, stride_sag, stride_sam, stride_sak, stride_sbg,
    stride_sbk, stride_sbn) of (scale_a, scale_b), or placeholders (c, zeros) without scales."""
    if scales is None:
        return (c, c) + (0,) * 6
    scale_a, scale_b = scales
    sa = (0,) + scale_a.stride() if split_m else scale_a.stride()
    return (scale_a, scale_b, *sa, *scale_b.stride())
