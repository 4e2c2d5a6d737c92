"""Exact integer products from int8 digits on the tensor cores, which rung `tensorcore-int`
(r11_int_digits.py, whose docstring tells the scheme) and tensorcore-f32's precision="int8" share:
each operand's digit planes (digit_planes), then the products of every digit pair, K cut into
chunks where int64 needs exact int32 sums (digit_products): on Hopper the warp-specialized Gluon
program (tilemm.engine.int8_gluon), elsewhere the fused Triton one (tilemm.engine.digit_programs)."""
from __future__ import annotations

from tilemm.numerics import digits
from tilemm.engine import availability, operand_copies


def digit_planes(x, ndigits: int):
    """x's digit planes, stacked (ndigits * rows, K), K contiguous: x itself when it is already
    int8 and K-major with TMA's alignment."""
    planes, fill = planes_launch(x, ndigits)
    if fill:
        fill()
    return planes


def planes_launch(x, ndigits: int):
    """(planes, fill): digit_planes' tensor for x and the launch that writes it from x's current
    values (None where x is its own plane)."""
    import torch
    from tilemm.engine.digit_programs import split_digits     # Triton loads on first use
    if ndigits == 1 and x.dtype == torch.int8 and operand_copies.k_major(x):
        return x, None
    out = operand_copies.parts_buffer(x.shape[0], x.shape[1], ndigits, torch.int8, x.device)
    return out.view(ndigits * x.shape[0], out.shape[2]), operand_copies.parts_fill(x, out, split_digits, NDIGITS=ndigits)


def chunk_tiles(k: int, nd_a: int, nd_b: int, nd_c: int, block_k: int, lowest_shift: int = 0) -> int:
    """K steps a launch may take: all of them, but for int64, whose shifts below 4 need exact
    int32 sums (digits.exact_chunk)."""
    if nd_c != 8:
        return -(-k // block_k)
    pairs = max(len(digits.shift_pairs(s, nd_a, nd_b)) for s in range(lowest_shift, 4))
    return max(1, digits.exact_chunk(pairs) // block_k)


def digit_products(a, b, c, nd_a: int, nd_b: int, block_m, block_n, block_k, group_m, num_warps, num_stages,
                   planes_a=digit_planes, planes_b=digit_planes, lowest_shift: int = 0, scales=(None, None)):
    """c = A @ B modulo 2^(8 c.element_size()) from nd_a digits of A and nd_b of B (K >= 1): the
    digit pairs on the tensor cores, K cut into chunks where int64 needs exact sums. planes_a(x,
    nd) and planes_b(x, nd) write the stacked digit planes of a slice of A and of B^T
    (digit_planes). For tensorcore-f32's precision="int8": its fixed-point split as the planes,
    the shifts below lowest_shift left out of int64 sums, and, on the Gluon program with K in
    one chunk, scales (float64 factors of rows and columns) that turn those sums into float32 c."""
    m, k = a.shape
    n = b.shape[1]
    nd_c = 8 if scales[0] is not None else c.element_size()
    k_tiles = -(-k // block_k)
    chunk = chunk_tiles(k, nd_a, nd_b, nd_c, block_k, lowest_shift)
    gluon = availability.hopper_gluon()              # on Hopper: the warp-specialized Gluon program
    if scales[0] is not None and (chunk < k_tiles or not gluon):
        raise ValueError("digit_products: scales need the Gluon program and K in one chunk")
    programs = min(-(-m // block_m) * -(-n // block_n), availability.multiprocessors())
    for t0 in range(0, k_tiles, chunk):
        k0, k1 = t0 * block_k, min(k, (t0 + chunk) * block_k)
        a_part, b_part = planes_a(a[:, k0:k1], nd_a), planes_b(b[k0:k1].T, nd_b)  # (N, K): B K-major
        if gluon:
            from tilemm.engine import gluon_helpers, int8_gluon as gluon_int8
            gluon_int8.launcher(gluon_helpers.descriptor(a_part, block_m, block_k),
                                gluon_helpers.descriptor(b_part, block_n, block_k), c, m, n, k1 - k0, programs,
                                (nd_a, nd_b), group_m, num_stages, num_warps, accumulate=t0 > 0,
                                lowest_shift=lowest_shift, scales=scales)()
            continue
        from triton.tools.tensor_descriptor import TensorDescriptor
        from tilemm.engine.digit_programs import digit_matmul
        digit_matmul[(programs,)](TensorDescriptor.from_tensor(a_part, [block_m, block_k]),
                                  TensorDescriptor.from_tensor(b_part, [block_n, block_k]), c, m, n,
                                  -(-(k1 - k0) // block_k), c.stride(0), c.stride(1), ND_A=nd_a, ND_B=nd_b,
                                  ND_C=nd_c, LOWEST=lowest_shift, ACCUMULATE=t0 > 0, BLOCK_M=block_m, BLOCK_N=block_n,
                                  BLOCK_K=block_k, GROUP_M=group_m, PROGRAMS=programs, num_warps=num_warps,
                                  num_stages=num_stages)
