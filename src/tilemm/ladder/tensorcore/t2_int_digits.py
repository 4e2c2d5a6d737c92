"""Rung 21, `tensorcore-int`: exact integer matmul on int8 tensor cores (docs/exact_integers.md).

Each operand is split into signed base-256 digits (int8); the product modulo 2^w is the sum of the
digit products D_i(A) @ D_j(B) with i + j < w/8, shifted by 8(i+j) bits. Each digit product runs on
`tensorcore`'s Triton program in its int8 form (int32 accumulators that wrap, which is exact modulo
2^32); for int64, the pairs that need more than 32 bits walk K in chunks of 2^17 - 1, whose int32
sums cannot overflow. int8 needs one product, int16 three, int32 ten, int64 thirty-six.

Constraints: int8, int16, int32, int64 (unsigned types as their signed twins, bit for bit); any
M, N, K; separate launches per digit pair (not yet fused, so A and B are read once per pair).
"""
from __future__ import annotations

from ... import digits
from ...registry import Kernel, Traffic, register
from .. import _tensorcore_support as support
from .t1_blocked import TILE_PARAMS, launch


def run(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages):
    import torch
    width = c.element_size() * 8
    ndigits = width // digits.BASE_BITS
    da = [d.to(torch.int8) for d in digits.digits_of(a.to(torch.int64), ndigits)]   # (M, K) each
    db = [d.to(torch.int8) for d in digits.digits_of(b.to(torch.int64), ndigits)]   # (K, N) each
    m, k = a.shape
    acc = torch.zeros(c.shape, dtype=torch.int64, device=c.device)   # wraps modulo 2^64
    part = torch.empty(c.shape, dtype=torch.int32, device=c.device)
    tiles = dict(block_m=block_m, block_n=block_n, block_k=block_k, group_m=group_m, num_warps=num_warps,
                 num_stages=num_stages)
    for i in range(ndigits):
        for j in range(ndigits - i):                          # i + j >= ndigits vanish modulo 2^w
            exact = width == 64 and i + j < 4                 # needs the true sum, not mod 2^32
            step = digits.EXACT_K if exact else max(k, 1)
            for k0 in range(0, k, step):
                launch(da[i][:, k0:k0 + step], db[j][k0:k0 + step], part, **tiles)
                value = part.to(torch.int64) if exact else part.to(torch.int64) & 0xFFFFFFFF
                acc += value << (digits.BASE_BITS * (i + j))
    c.copy_(acc.to(c.dtype))                                  # truncation: the low w bits


def traffic(p, block_m, block_n, **_):
    # In elements of the problem's dtype (ndigits bytes each), as every Traffic is: each digit pair
    # reads its one-byte A and B digit tiles again and writes its four-byte int32 part of C.
    ndigits = p.itemsize                                       # one base-256 digit per byte
    pairs = ndigits * (ndigits + 1) // 2
    one = p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m)
    return Traffic(read=pairs * one / ndigits, written=p.m * p.n * (4 * pairs / ndigits + 1))


def limits(p, block_m, block_n, block_k, num_stages, **_):
    return support.check_shared(block_m, block_n, block_k, num_stages, 1)


register(Kernel(
    name="tensorcore-int", rung=21, device="cuda", backend="triton", dtypes=("int8", "int16", "int32", "int64"),
    seed="beyond", summary="exact integers from int8 tensor-core products of signed base-256 digits",
    run=run, traffic=traffic, limits=limits, available=support.available, params=TILE_PARAMS,
))
