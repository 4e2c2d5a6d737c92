"""Rung 23, `tensorcore-f32`: float32 products on TF32 tensor cores, in Triton.

precision="3xtf32" (the default) keeps float32 accuracy: each operand is split into a TF32 part
(rounded to nearest) and the rest, x = hi + lo, and C = A_hi B_hi + A_hi B_lo + A_lo B_hi (the
dropped A_lo B_lo is 2^-22 of a product). That is 22 significant bits, not 24: within float32's
error bound for sums of 16 terms and more (shorter ones are computed in IEEE float32), and at
n = 4096 four times closer to float64 than cuBLAS SGEMM. precision="tf32" is one
TF32 product (10 mantissa bits in, float32 sums), what torch's allow_tf32 gives: faster, and only
as accurate as TF32.

Hopper's tensor cores read 32-bit operands K-major only (wgmma transposes 16-bit types alone), so
a split pass writes both operands' parts K-major, B transposed (its time counts in the rung's);
the product then takes its tiles by TMA, four tiles a K step shared by the three products.

Inf and NaN: the cross terms would turn Inf times a low part (0, or of the other sign) into NaN
or -Inf where IEEE float32 gives Inf; the small products are summed apart, dropped when not
finite, and the a_hi b_hi product carries Inf and NaN as IEEE does (one exception: Inf times a
subnormal below TF32's reach, whose a_hi is 0, gives NaN).

Constraints: float32 only; any M, N, K, any strides; shared memory of a configuration must fit.
"""
from __future__ import annotations

from ... import _compat
from ...registry import Kernel, Param, Traffic, register
from .. import _tensorcore_support as support
from .t1_blocked import tile_params

# TF32 keeps 11 significant bits, so hi + lo carries 22 of float32's 24: each 3xTF32 product is
# off by up to ~3 * 2^-22 of |a||b|, which float32's error bound (2K * 2^-24 of the sum of
# |a||b|) covers from K = 12 on. Shorter sums take IEEE float32 (tl.dot on the FMA units).
IEEE_BELOW_K = 16


def parts_of(x, parts: int, block_rows: int, block_k: int):
    """A TMA descriptor of x's parts stacked, (parts * rows, K), K contiguous; of x itself for
    one part (TF32) when x is already K-major with TMA's alignment."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    from .t4_f32_kernel import split_tf32
    if parts == 1 and support.k_major(x):
        return TensorDescriptor.from_tensor(x, [block_rows, block_k])
    return support.stacked_parts(x, parts, torch.float32, split_tf32, block_rows, block_k, PARTS=parts)


def default_stages(num_stages, precision: str) -> int:
    """Measured on an H100 (tensorcore_vs_cublas_f32_sweep.jsonl): with 128 x 256 x 32 tiles, 4
    stages for TF32; 3xTF32 loads twice the bytes a step, so 2 fit."""
    return num_stages or (2 if precision == "3xtf32" else 4)


def run(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, precision):
    from .t4_f32_kernel import tf32_matmul
    m, k = a.shape
    n = b.shape[1]
    if k == 0:
        c.zero_()
        return
    parts = 2 if precision == "3xtf32" else 1
    grid = (-(-m // block_m) * -(-n // block_n),)
    if parts == 2 and k < IEEE_BELOW_K:
        from .t1_blocked_kernel import matmul_kernel   # short sums: IEEE float32 on the FMA units
        matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=16, GROUP_M=group_m,
                            UPCAST=True, FP64=False, num_warps=num_warps, num_stages=1)
        return
    num_stages = default_stages(num_stages, precision)
    a_desc = parts_of(a, parts, block_m, block_k)
    b_desc = parts_of(b.T, parts, block_n, block_k)                # (N, K): B K-major
    tf32_matmul[grid](a_desc, b_desc, c, m, n, k, c.stride(0), c.stride(1), PARTS=parts, BLOCK_M=block_m,
                      BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, num_warps=num_warps, num_stages=num_stages)


def traffic(p, block_m, block_n, precision, **_):
    # In float32 elements: the split pass reads A and B and writes their parts; the product reads
    # each part's tiles once per program and writes C.
    parts = 2 if precision == "3xtf32" else 1
    operands = p.m * p.k + p.k * p.n
    tiles = p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m)
    return Traffic(read=operands + parts * tiles, written=parts * operands + p.m * p.n)


def limits(p, block_m, block_n, block_k, num_stages, precision, **_):
    num_stages = default_stages(num_stages, precision)
    if block_k < 8 and not _compat.triton_interpreter():
        return f"BLOCK_K={block_k}: the TF32 instruction takes K in multiples of 8"
    parts = 2 if precision == "3xtf32" else 1
    return support.check_shared(block_m, block_n, block_k, num_stages, 4 * parts)


register(Kernel(
    name="tensorcore-f32", rung=23, device="cuda", backend="triton", dtypes=("float32",),
    seed="beyond", summary="float32 on TF32 tensor cores: 3xTF32 split (float32 accuracy) or plain TF32",
    run=run, traffic=traffic, limits=limits, available=support.available,
    params=tile_params(128, 256, 32, num_warps=8, num_stages=None) + (
        Param("precision", "3xtf32", ("3xtf32", "tf32"),
              "3xtf32: float32 accuracy from three TF32 products; tf32: one (torch's allow_tf32)"),),
))
