"""Exact integer matmul from int8 products: the method of the tensor-core integer path.

An integer of w bits is split into w/8 signed base-256 digits, each in [-128, 127]:

    x ≡ d0 + d1·2^8 + d2·2^16 + ...   (mod 2^w)

so that, modulo 2^w,

    A @ B ≡ Σ_{i+j < w/8}  (D_i(A) @ D_j(B)) · 2^(8(i+j))

Pairs with i + j ≥ w/8 are multiples of 2^w and vanish. Each D_i(A) @ D_j(B) is an int8 x int8
product with int32 accumulation, what tensor cores do. How exact must it be? The pair (i, j) is
needed only modulo 2^(w - 8(i+j)):
- int32 (w = 32): at most 2^32 for every pair, and int32 accumulation wraps modulo 2^32, which is
  exactly that: any K, no extra care.
- int64 (w = 64): pairs with i + j ≥ 4 need at most 2^32: wrapping int32 is enough. Pairs with
  i + j < 4 need the true sum; a sum of K products of digits lies in [-127·128·K, 128·128·K], inside
  int32 when K < 2^17, so K is cut into chunks of 2^17 - 1 whose int32 results are added in int64.
Integers narrower than 32 bits are computed as int32 and wrapped (arithmetic modulo 2^w is a ring).
"""
from __future__ import annotations

import numpy as np

BASE_BITS = 8
EXACT_K = 2**17 - 1  # K products of at most 128·128 = 2^14 sum below 2^31 only while K < 2^17


def exact_chunk(pairs: int) -> int:
    """The longest K whose sums over `pairs` digit pairs at a time (one shift's pairs, run as one
    GEMM of pairs * K products) stay exact in int32: pairs * K * 2^14 <= 2^31 - 1."""
    return (2**31 - 1) // (2**14 * pairs)


def shift_pairs(s: int, nd_a: int, nd_b: int) -> range:
    """A's digits i of the pairs (i, s - i) at shift s, for operands of nd_a and nd_b digits
    (empty where shift s has no pair)."""
    return range(max(0, s - nd_b + 1), min(s, nd_a - 1) + 1)


def digits_of(rest, ndigits: int) -> list:
    """The signed base-256 digits of an int64 array (NumPy or torch: operators only), each still
    int64, in [-128, 127]: rest ≡ Σ d_i 2^(8i) (mod 2^(8 ndigits))."""
    out = []
    for _ in range(ndigits):
        digit = ((rest & 0xFF) ^ 0x80) - 0x80      # the low byte, read as a signed number
        out.append(digit)
        rest = (rest - digit) >> BASE_BITS          # exact: rest - digit is a multiple of 256
    return out


def split(x: np.ndarray, ndigits: int) -> np.ndarray:
    """Signed base-256 digits (int8, shape (ndigits,) + x.shape) with x ≡ Σ d_i 2^(8i) mod 2^(8 ndigits)."""
    rest = x.astype(np.int64) if ndigits <= 4 else x.astype(np.uint64).view(np.int64)
    return np.stack(digits_of(rest, ndigits)).astype(np.int8) if ndigits else np.empty((0,) + x.shape, np.int8)


def int8_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The reference digit product: int8 x int8 with int32 accumulation that wraps modulo 2^32
    (what a tensor core's int32 accumulator does)."""
    return np.matmul(a.astype(np.int32), b.astype(np.int32))


def matmul(a: np.ndarray, b: np.ndarray, dtype: str, gemm=int8_gemm) -> np.ndarray:
    """a @ b modulo 2^w for an integer dtype of w bits, from int8 digit products given by gemm."""
    width = np.dtype(dtype).itemsize * 8
    if width < 32:                          # computed as int32, then wrapped
        return matmul(a.astype(np.int32), b.astype(np.int32), "int32", gemm).astype(dtype)
    ndigits = width // BASE_BITS
    da, db = split(a, ndigits), split(b, ndigits)
    acc = np.zeros((a.shape[0], b.shape[1]), np.uint64)   # unsigned: wraps modulo 2^64 silently
    for i in range(ndigits):
        for j in range(ndigits - i):        # i + j < ndigits: the rest vanish modulo 2^w
            needs_exact = width == 64 and i + j < 4
            step = EXACT_K if needs_exact else max(1, a.shape[1])
            part = np.zeros_like(acc)
            for k0 in range(0, a.shape[1], step):   # chunks whose int32 sums are exact
                chunk = gemm(da[i][:, k0:k0 + step], db[j][k0:k0 + step])
                part += chunk.astype(np.int64).view(np.uint64) if needs_exact else \
                    chunk.astype(np.uint32).astype(np.uint64)   # only its value mod 2^32 matters
            acc += part << np.uint64(BASE_BITS * (i + j))
    if width == 32:
        return (acc & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(dtype)
    return acc.view(np.int64).astype(dtype)
