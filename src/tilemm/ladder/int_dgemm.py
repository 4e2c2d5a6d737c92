"""Exact integer products through cuBLAS's float64 GEMM (torch.matmul on float64: DGEMM), for the
library rung: torch has no integer matmul on CUDA but int8's _int_mm (tilemm.ladder.int_mm), and
this route needs neither Triton nor CuPy's integer kernel (compiled by NVRTC on its first call).

Each signed integer is split into signed 11-bit digits, each in [-1024, 1023]:

    x = d0 + d1·2^11 + d2·2^22 + ...        (int8: 1 digit, int16: 2, int32: 3, int64: 6)

so that, modulo 2^w (w: the result's bits, 32 or 64),

    A @ B ≡ Σ_{11(i+j) < w}  (D_i(A) @ D_j(B)) · 2^(11(i+j))

and the pairs with 11(i+j) ≥ w vanish. A product of two digits is at most 2^20 in magnitude, so a
sum of K of them is an integer of at most 2^53 while K ≤ 2^33 (EXACT_K): float64 holds every
partial sum exactly, in whatever order cuBLAS adds them (blocked, with FMA). Past EXACT_K this
route refuses (takes() is False and the library rung turns to CuPy, or refuses in its limits).

One GEMM a digit of A: D_i(A) (M x K) times B's digit planes side by side (K x J·N, the J planes
with 11(i+j) < w: a prefix of one stacked B). For int32 operands, 3 GEMMs of 3N, 2N and N columns:
the 6 pairs, no more. The exact sums P (|P| ≤ 2^53, in int64) are then added as two 32-bit limbs,
P·2^s ≡ low + high·2^32 (mod 2^64), with no int64 overflow anywhere, and the result wrapped to w
bits as two's complement: what NumPy's integer matmul gives.
Working memory (float64 digits of A and B, the GEMMs' results, two int64 limbs) is bounded by
running A's rows in blocks (WORKSPACE_BYTES).
"""
from __future__ import annotations

import math

DIGIT_BITS = 11
HALF = 1 << (DIGIT_BITS - 1)            # 1024: a digit lies in [-HALF, HALF)
LOW_BITS = (1 << DIGIT_BITS) - 1
EXACT_K = 2**33                         # K·2^20 ≤ 2^53: every sum of digit products exact in float64
LIMB = 2**32
MASK32 = LIMB - 1
WORKSPACE_BYTES = 2**30                 # temporaries per block of A's rows (B's digits apart)


def digit_count(bits: int) -> int:
    """Digits of 11 bits for a signed integer (or a result modulo 2^bits) of this many bits."""
    return -(-bits // DIGIT_BITS)


def digits(x, count: int) -> list:
    """The signed 11-bit digits of a signed integer tensor, as float64 tensors of its shape, each
    in [-1024, 1023], with x = Σ d_i·2^(11 i) exactly (count: digit_count of x's bits; the last
    digit is what remains, |d| ≤ 512 for int32, 256 for int64). No step overflows int64."""
    import torch
    rest = x.to(torch.int64)
    out = []
    for _ in range(count - 1):
        low = rest & LOW_BITS
        out.append(((low ^ HALF) - HALF).to(torch.float64))     # the low 11 bits, read as signed
        rest = (rest >> DIGIT_BITS) + (low >= HALF)            # (rest - digit) / 2^11, without the subtraction
    out.append(rest.to(torch.float64))
    return out


def signed_bits(x) -> int:
    import torch
    return torch.iinfo(x.dtype).bits


def stacked_planes(b):
    """(B's digit planes side by side: (..., K, count·N) float64, count): B's digits all, each
    pair of which product() takes from one prefix of it."""
    import torch
    planes = digits(b, digit_count(signed_bits(b)))
    return torch.cat(planes, dim=-1), len(planes)


def limbs(sums, shift: int, bits: int):
    """(low, high) with sums·2^shift ≡ low + high·2^32 (mod 2^64), for exact int64 sums (|sums|
    ≤ 2^53): low in [0, 2^54), |high| < 2^44; high None for 32-bit results (not needed) and
    low None where the shift puts everything above bit 32."""
    if shift >= 32:     # only the high limb: the low 64 - shift bits of sums, shifted into it
        return None, (sums & ((1 << (64 - shift)) - 1)) * (1 << (shift - 32))
    low = (sums & MASK32) * (1 << shift)
    return low, (None if bits == 32 else (sums >> 32) * (1 << shift))


def wrapped(low, high, bits: int):
    """low + high·2^32 as a signed integer of `bits` (32 or 64): two's complement, by masks and
    subtraction (no out-of-range cast), in int64."""
    import torch
    if bits == 32:
        value = low & MASK32
        return torch.where(value >= LIMB // 2, value - LIMB, value)
    high = (high + (low >> 32)) & MASK32
    high = torch.where(high >= LIMB // 2, high - LIMB, high)
    return high * LIMB + (low & MASK32)              # in [-2^63, 2^63): no overflow


def product(a, planes, count: int, n: int, bits: int):
    """a @ B modulo 2^bits (32 or 64) as int64 values in [-2^(bits-1), 2^(bits-1)): a (..., M, K)
    a signed integer tensor, B given as stacked_planes(B) (planes, count) with N columns;
    batch dimensions broadcast as torch.matmul's."""
    import torch
    low = high = None
    for i, a_i in enumerate(digits(a, digit_count(signed_bits(a)))):
        pairs = min(count, digit_count(bits) - i)        # B's digits j with 11(i + j) < bits
        if pairs <= 0:
            break
        sums = torch.matmul(a_i, planes[..., :pairs * n])     # (..., M, pairs·N): exact integers
        for j in range(pairs):
            part_low, part_high = limbs(sums[..., j * n:(j + 1) * n].to(torch.int64), DIGIT_BITS * (i + j), bits)
            if part_low is not None:
                low = part_low if low is None else low + part_low
            if part_high is not None:
                high = part_high if high is None else high + part_high
    return wrapped(low, high, bits)     # (the pair (0, 0) gives both limbs)


def matmul(a, b, bits: int):
    """a @ b modulo 2^bits as int64 (product's values) for signed integer tensors a (..., M, K)
    and b (..., K, N), K at most EXACT_K."""
    k = a.shape[-1]
    if k > EXACT_K:
        raise ValueError(f"K = {k} is over 2^33: sums of float64 digit products would no longer be exact")
    planes, count = stacked_planes(b)
    return product(a, planes, count, b.shape[-1], bits)


def takes(a, b, c) -> bool:
    """Whether run() multiplies these: torch tensors of integers (or bool) into a C of int32 or
    int64, K at most EXACT_K."""
    import torch
    integer = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
    return (all(isinstance(x, torch.Tensor) for x in (a, b, c)) and c.dtype in (torch.int32, torch.int64)
            and a.dtype in integer and b.dtype in integer and a.shape[-1] <= EXACT_K)


def rows_a_block(m: int, n: int, k: int, count: int) -> int:
    """Rows of A a block so that its temporaries (its int64 copy, its count float64 digits and a
    step's mask, a GEMM's count·N columns in float64 and a block of them in int64, two limbs and
    their sum) stay within WORKSPACE_BYTES (one row at least)."""
    per_row = 8 * ((count + 2) * k + count * n + 4 * n)
    return max(1, min(m, WORKSPACE_BYTES // max(1, per_row)))


def workspace(a, b, c) -> int:
    """Bytes of temporaries a stack's one run() would take at once (run_stack goes matrix by
    matrix past WORKSPACE_BYTES)."""
    count = digit_count(signed_bits(b if b.dtype.is_signed else c))      # (run casts bool, uint8 to C's dtype)
    return 8 * (math.prod(b.shape) * (count + 1) + math.prod(a.shape) * 2 + math.prod(c.shape) * (2 * count + 3))


def run(a, b, c) -> None:
    """c = a @ b for takes()'s tensors, wrapped to C's width as NumPy's integer matmul, on torch's
    current stream: a vector as a matrix of one row (A) or column (B); a 2-D product a block of
    A's rows at a time (rows_a_block)."""
    bits = signed_bits(c)
    a, b = (x if x.dtype.is_signed else x.to(c.dtype) for x in (a, b))     # (bool, uint8: as C's dtype)
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = b.unsqueeze(-1) if b.dim() == 1 else b
    planes, count = stacked_planes(b)
    n = b.shape[-1]
    if a.dim() > 2 or planes.dim() > 2:
        c.copy_(product(a, planes, count, n, bits).reshape(c.shape))
        return
    out = c if c.dim() == 2 else c.view(a.shape[0], n)
    step = rows_a_block(a.shape[0], n, a.shape[1], count)
    for r0 in range(0, a.shape[0], step):
        out[r0:r0 + step].copy_(product(a[r0:r0 + step], planes, count, n, bits))


def product_for(a, b, result: str):
    """A repeated call's product for 2-D torch matrices shaped as these (a plan's fast path):
    (a, b) -> a @ b as a new tensor of `result` (int32 or int64), or None where K is past EXACT_K."""
    import torch
    if a.shape[-1] > EXACT_K:
        return None
    dtype = getattr(torch, result)

    def call(a, b):
        c = torch.empty(a.shape[0], b.shape[1], dtype=dtype, device=a.device)
        run(a, b, c)
        return c
    return call
