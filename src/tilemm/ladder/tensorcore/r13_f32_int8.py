"""Rung 13, `tensorcore-f32`, its precision="int8" (see r13_f32.py for the others).

precision="int8" (Ozaki's scheme, on the integer rung's tensor cores): each row of A and each
column of B is scaled by a power of two into 24-bit fixed point, |x| 2^e <= 8355711 (the most that
three signed base-256 digits reach) and above half that, and rounded to the nearest integer. The
integer product is then summed from int8 digit products on `tensorcore-int`'s programs, shift by
shift with exact int32 sums into int64, but for the two lowest shifts (d0 e0, and d0 e1 + d1 e0,
shifted by 8): 6 digit pairs instead of 9, each dropped product at most 2^-21 of the row's and
column's largest. Scaled back in float64 (exact; on Hopper in the Gluon program's epilogue, where K
fits one exact chunk), rounded once to float32. K past 2^16 (where int64 could overflow) is cut
into pieces of 2^16, each such a product, added in float32. So, with r_i = max_k |a_ik| and
c_j = max_k |b_kj|,

    |C - AB| <~ 2^-23 (r_i sum_k |b_kj| + c_j sum_k |a_ik|) + 2^-21 K r_i c_j + 2^-24 |C|

(exact constants in tests/test_tensorcore.py). A normwise bound, not float32's per-product one:
an element far below its row's largest keeps fewer bits. On random data it is more accurate
than SGEMM (measured: docs/guides/precision.md); on rows of mixed magnitudes use the default. The
tiles of C that meet a row or column holding Inf or NaN (which fixed point cannot hold) are
computed again in IEEE float32, so Inf and NaN land where IEEE arithmetic puts them.
"""
from __future__ import annotations

from tilemm.engine import availability, operand_copies


# precision="int8": three signed base-256 digits reach 127 * (1 + 2^8 + 2^16) at most
FIXED_DIGITS = 3
FIXED_LOWEST_SHIFT = 2  # shifts 0 and 1 left out: 2^-21 of r_i c_j a product, for a third of the work
IEEE_TILE = 32          # tiles of C meeting Inf or NaN, in IEEE float32 (the FMA units)
FIXED_TOP = 127 * (1 + 2**8 + 2**16)
FIXED_K = 2**16         # K summed as one integer product: 2^16 products under 2^46 stay well inside int64


def fixed_scales(x):
    """(scale, top) for each row of x (rows, K): scale = 2^e (float64) with top * 2^e in
    (FIXED_TOP / 2, FIXED_TOP], top the row's largest |x| (Inf or NaN where the row holds one)."""
    import torch
    top = torch.linalg.vector_norm(x, ord=float("inf"), dim=1)
    mantissa, exponent = torch.frexp(top)            # top = mantissa * 2^exponent, mantissa in [0.5, 1)
    e = 23 - exponent - (mantissa > FIXED_TOP / 2**23).to(exponent.dtype)
    return torch.ldexp(torch.ones_like(top, dtype=torch.float64), e), top


def run_int8(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages):
    """c = A @ B by precision="int8" (the module's docstring). Rows and columns holding Inf or
    NaN, which fixed point cannot hold, are found on the GPU (no wait for it here): the tiles of C
    they meet are then computed again in IEEE float32."""
    import torch
    from tilemm.ladder.tensorcore.r13_f32_kernel import ieee_matmul
    from tilemm.engine.digit_products import chunk_tiles, digit_products
    from tilemm.engine.digit_programs import split_digits
    from tilemm.ladder.tensorcore.r13_f32_kernel import unscale
    scale_a, top_a = fixed_scales(a)
    scale_b, top_b = fixed_scales(b.T)

    def planes(scale):
        return lambda x, nd: operand_copies.stacked_parts_tensor(x, nd, torch.int8, split_digits, scale_ptr=scale,
                                                          NDIGITS=nd, FIXED=True)
    m, n = c.shape
    k = a.shape[1]
    digits = (FIXED_DIGITS, FIXED_DIGITS)
    if availability.hopper_gluon() and chunk_tiles(k, *digits, 8, block_k, FIXED_LOWEST_SHIFT) * block_k >= k:
        # the Gluon program scales its int64 sums back into C itself
        digit_products(a, b, c, *digits, block_m, block_n, block_k, group_m, num_warps, num_stages,
                       planes(scale_a), planes(scale_b), FIXED_LOWEST_SHIFT, scales=(1 / scale_a, 1 / scale_b))
    else:   # K in chunks (or the Triton program): the exact int64 product, then scaled back
        exact = torch.empty((m, n), dtype=torch.int64, device=c.device)
        digit_products(a, b, exact, *digits, block_m, block_n, block_k, group_m, num_warps, num_stages,
                       planes(scale_a), planes(scale_b), FIXED_LOWEST_SHIFT)
        grid = (-(-m // operand_copies.SPLIT_BLOCK), -(-n // operand_copies.SPLIT_BLOCK))
        unscale[grid](exact, 1 / scale_a, 1 / scale_b, c, m, n, c.stride(0), c.stride(1),
                      BLOCK_M=operand_copies.SPLIT_BLOCK, BLOCK_N=operand_copies.SPLIT_BLOCK)
    tiles_of_c = -(-m // IEEE_TILE) * -(-n // IEEE_TILE)      # programs that meet no Inf or NaN store nothing
    ieee_matmul[(tiles_of_c,)](a, b, c, m, n, a.shape[1], a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               c.stride(0), c.stride(1), BLOCK_M=IEEE_TILE, BLOCK_N=IEEE_TILE, BLOCK_K=16,
                               GROUP_M=8, top_a_ptr=top_a, top_b_ptr=top_b, num_warps=4, num_stages=1)
