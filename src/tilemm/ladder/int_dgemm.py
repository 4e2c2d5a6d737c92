"""Exact integer products through cuBLAS's float64 GEMM (torch.matmul on float64: DGEMM), for the
library rung: torch has no integer matmul on CUDA but int8's _int_mm (tilemm.ladder.int_mm), and
this route needs neither Triton nor CuPy's integer kernel (compiled by NVRTC on its first call).

Each signed integer is split into signed 11-bit digits, each in [-1024, 1023]:

    x = d0 + d1·2^11 + d2·2^22 + ...        (int8: 1 digit, int16: 2, int32: 3, int64: 6)

so that, modulo 2^w (w: the result's bits, 32 or 64),

    A @ B ≡ Σ_s S_s · 2^(11 s),   S_s = Σ_{i+j=s} D_i(A) @ D_j(B) = [D_i(A) ...] @ [D_j(B); ...]

over the shifts s with 11 s < w (the higher ones vanish): one GEMM a shift, on A's digits side by
side along K (a row of A: its digits lowest first, (..., M, count·K)) and B's stacked along K
(highest first, (..., count·K, N)), each shift's pairs a contiguous block of both. A product of
two digits is at most 2^20 in magnitude, so a sum of K of them is an integer of at most 2^53
while K ≤ 2^33 (EXACT_K): float64 holds every partial sum exactly, in whatever order cuBLAS adds
them (blocked, with FMA). A shift's GEMM takes as many pairs as keep pairs·K within EXACT_K (all
of them up to K = 2^33 / 6); past that, runs of fewer, their exact sums added in int64. Past
EXACT_K this route refuses (takes() is False and the library rung turns to CuPy, or refuses in
its limits).

The first call of a process pays for each kind of kernel it launches (CUDA loads a kernel's
module at its first launch), so a call runs few kinds, each step one op for all digits at once:
the digits of an operand in four broadcast integer ops (an int64's in seven) against a small
table of per-digit constants on the device (made once a device), one float64 GEMM a shift, and the
sums added back as two 32-bit limbs, S_s·2^(11 s) ≡ low + high·2^32 (mod 2^64), by shifts,
masks and adds: no add overflows int64 (a left shift drops the bits past 64, as torch defines
it), the result wrapped to w bits as two's complement
(what NumPy's integer matmul gives). Working memory (float64 digits of A and B, the GEMMs'
results, the limbs) is bounded by running A's rows in blocks (WORKSPACE_BYTES).
"""
from __future__ import annotations

import functools
import math

from tilemm.engine import device_constants

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


@functools.lru_cache(maxsize=None)
def table_values(count: int) -> tuple:
    """The constants that give digit i of x as ((x + CARRY) >> SHIFT & KEEP) - OFFSET, rows of
    (lowest digit first, highest first): CARRY_i = Σ_{j≤i} 1024·2^(11 j) (but the last digit's,
    to j < i) turns floor division into the signed digit's rounding (the last digit takes what
    remains); LOW_i = 2^(11 i) - 1 splits x where x + CARRY could overflow int64
    (digit_planes)."""
    carry = [sum(HALF << (DIGIT_BITS * j) for j in range(min(i + 1, count - 1))) for i in range(count)]
    rows = [[DIGIT_BITS * i for i in range(count)], [(1 << (DIGIT_BITS * i)) - 1 for i in range(count)], carry,
            [LOW_BITS] * (count - 1) + [-1], [HALF] * (count - 1) + [0]]
    return tuple((tuple(row), tuple(row[::-1])) for row in rows)


def digit_constants(count: int, dims: int, highest_first: bool, device) -> tuple:
    """(SHIFT, LOW, CARRY, KEEP, OFFSET) on the device, each (count, 1, ...) with `dims` ones: the
    digit table's rows in the order asked, shaped to broadcast along the digits' dimension."""
    order = int(highest_first)
    return device_constants.kept(("int digits", count, dims, order), tuple(row[order] for row in table_values(count)),
                                 device, lambda rows: tuple(row.view((count,) + (1,) * dims) for row in rows))


def limb_constants(device) -> tuple:
    """(32, MASK32) on the device, each a tensor of no dimensions."""
    return device_constants.kept(("int limbs",), (32, MASK32), device, tuple)


def shift_weights(shifts: int, dims: int, device):
    """The shifts' bits 11 s, s < shifts, on the device: (shifts, 1, ...) with `dims` ones."""
    return device_constants.kept(("int shifts", shifts, dims), tuple(DIGIT_BITS * s for s in range(shifts)), device,
                                 lambda t: t.view((shifts,) + (1,) * dims))


def digit_planes(x, count: int, dim: int, highest_first: bool = False):
    """The signed 11-bit digits of a signed integer tensor as float64, along a new dimension at
    `dim` (negative: from the end), each in [-1024, 1023], with x = Σ d_i·2^(11 i) exactly
    (count: digit_count of x's bits; the last digit is what remains, |d| ≤ 512 for int32, 256
    for int64). Each step is one op for all digits; no step overflows int64."""
    import torch
    shift, low, carry, keep, offset = digit_constants(count, -dim - 1, highest_first, x.device)
    x = x.unsqueeze(dim)
    if signed_bits(x) < 64:             # |x| + CARRY < 2^32 + 2^22
        value = (x + carry) >> shift
    else:                               # floor((x + CARRY) / 2^s) in two parts, neither past 2^56
        value = x & low
        value += carry
        value >>= shift
        value += x >> shift
    value &= keep
    out = torch.empty(value.shape, dtype=torch.float64, device=x.device)
    return torch.sub(value, offset, out=out)           # (written as float64: no cast of its own)


def digits(x, count: int):
    """digit_planes with the digits along a new first dimension: digits(x, count)[i] is x's digit i."""
    return digit_planes(x, count, -x.dim() - 1)


def signed_bits(x) -> int:
    import torch
    return torch.iinfo(x.dtype).bits


def stacked_planes(b):
    """(B's digits stacked along K, highest first: (..., count·K, N) float64, count)."""
    count = digit_count(signed_bits(b))
    planes = digit_planes(b, count, -3, highest_first=True)
    return planes.reshape(planes.shape[:-3] + (count * b.shape[-2], b.shape[-1])), count


def limbs(sums, shift, bits: int):
    """(low, high) with sums·2^shift ≡ low + high·2^32 (mod 2^64), for exact int64 sums (shift an
    int or a tensor that broadcasts): low in [0, 2^32), |high| < 2^31; high None for 32-bit
    results (not needed). The shift wraps modulo 2^64 (torch's left shift: of the unsigned bits)."""
    half, mask = limb_constants(sums.device)
    shifted = sums << shift
    low = shifted & mask
    if bits == 32:
        return low, None
    shifted >>= half
    return low, shifted


def wrapped(low, high, bits: int):
    """low + high·2^32 as a signed integer of `bits` (32 or 64): two's complement, by shifts and
    masks (no overflow, no out-of-range cast), in int64."""
    half, mask = limb_constants(low.device)
    if bits == 32:
        return (low << half) >> half                # the low 32 bits, their sign extended
    high = high + (low >> half)
    return (high << half) + (low & mask)            # (high << 32) has no low bits: the sum can't carry


def added(parts):
    """The sum over a tensor's first dimension, by adds (the kernels a call runs already)."""
    total = parts[0]
    for i in range(1, parts.shape[0]):
        total = total + parts[i]
    return total


def shift_count(a_count: int, b_count: int, bits: int) -> int:
    """The shifts s of a product's digit pairs, 11 s below the result's bits."""
    return min(digit_count(bits), a_count + b_count - 1)


def pair_blocks(s: int, a_count: int, b_count: int, k: int) -> list:
    """[(first, last + 1), ...]: A's digits i of the pairs (i, s - i) at shift s, in runs of at
    most EXACT_K // K pairs (each run one GEMM whose sums stay exact)."""
    first, last = max(0, s - b_count + 1), min(s, a_count - 1)
    most = max(1, EXACT_K // max(1, k))
    return [(i, min(i + most, last + 1)) for i in range(first, last + 1, most)]


def product(a, planes, b_count: int, bits: int):
    """a @ B modulo 2^bits (32 or 64) as int64 values in [-2^(bits-1), 2^(bits-1)): a (..., M, K)
    a signed integer tensor, B given as stacked_planes(B) (planes, b_count); batch dimensions
    broadcast as torch.matmul's."""
    import torch
    k, a_count = a.shape[-1], digit_count(signed_bits(a))
    a_planes = digit_planes(a, a_count, -2)
    a_planes = a_planes.reshape(a_planes.shape[:-2] + (a_count * k,))             # (..., M, count·K)
    shifts = shift_count(a_count, b_count, bits)
    batch = torch.broadcast_shapes(a.shape[:-2], planes.shape[:-2]) if a.dim() > 2 or planes.dim() > 2 else ()
    sums = torch.empty((shifts,) + batch + (a.shape[-2], planes.shape[-1]), dtype=torch.float64, device=a.device)
    rest = []
    for s in range(shifts):
        for r, (i0, i1) in enumerate(pair_blocks(s, a_count, b_count, k)):
            j0 = b_count - 1 - s + i0                    # B's block of digit s - i0, in its highest-first stack
            a_part, b_part = a_planes[..., i0 * k:i1 * k], planes[..., j0 * k:(j0 + i1 - i0) * k, :]
            if r == 0:
                torch.matmul(a_part, b_part, out=sums[s])
            else:
                rest.append((s, torch.matmul(a_part, b_part)))
    del a_planes
    exact = sums.to(torch.int64)
    del sums
    for s, part in rest:            # (only past K = 2^33 / 6 at the least: more pairs than one exact GEMM takes)
        exact[s] += part.to(torch.int64)
    low, high = limbs(exact, shift_weights(shifts, exact.dim() - 1, a.device), bits)
    del exact
    return wrapped(added(low), None if high is None else added(high), bits)


def matmul(a, b, bits: int):
    """a @ b modulo 2^bits as int64 (product's values) for signed integer tensors a (..., M, K)
    and b (..., K, N), K at most EXACT_K."""
    k = a.shape[-1]
    if k > EXACT_K:
        raise ValueError(f"K = {k} is over 2^33: sums of float64 digit products would no longer be exact")
    planes, count = stacked_planes(b)
    return product(a, planes, count, bits)


def takes(a, b, c) -> bool:
    """Whether run() multiplies these: torch tensors of integers (or bool) into a C of int32 or
    int64, K at most EXACT_K."""
    import torch
    integer = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
    return (all(isinstance(x, torch.Tensor) for x in (a, b, c)) and c.dtype in (torch.int32, torch.int64)
            and a.dtype in integer and b.dtype in integer and a.shape[-1] <= EXACT_K)


def rows_a_block(m: int, n: int, k: int, count: int) -> int:
    """Rows of A a block so that its temporaries stay within WORKSPACE_BYTES (one row at least):
    count, the more of A's digits and the product's shifts; a row's most at once is two of its
    digits' planes (a step's operands, then the int64 digits and their float64), its digits and
    the GEMMs' sums, or the sums in float64 and in int64 (then two limbs and their sums)."""
    per_row = 8 * max(2 * count * k, count * (k + n), 2 * count * n + 2 * n)
    return max(1, min(m, WORKSPACE_BYTES // max(1, per_row)))


def workspace(a, b, c) -> int:
    """Bytes of temporaries a stack's one run() would take at once, at most (run_stack goes matrix
    by matrix past WORKSPACE_BYTES): B's and A's digits as they are made, the sums and limbs."""
    a_count, b_count = (digit_count(signed_bits(x if x.dtype.is_signed else c)) for x in (a, b))  # (run casts
    shifts = shift_count(a_count, b_count, signed_bits(c))                                # bool, uint8 to C's dtype)
    return 8 * (2 * b_count * math.prod(b.shape) + 2 * a_count * math.prod(a.shape)
                + (2 * shifts + 2) * math.prod(c.shape))


def run(a, b, c) -> None:
    """c = a @ b for takes()'s tensors, wrapped to C's width as NumPy's integer matmul, on torch's
    current stream: a vector as a matrix of one row (A) or column (B); a 2-D product a block of
    A's rows at a time (rows_a_block)."""
    bits = signed_bits(c)
    a, b = (x if x.dtype.is_signed else x.to(c.dtype) for x in (a, b))     # (bool, uint8: as C's dtype)
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = b.unsqueeze(-1) if b.dim() == 1 else b
    planes, count = stacked_planes(b)
    if a.dim() > 2 or planes.dim() > 2:
        c.copy_(product(a, planes, count, bits).reshape(c.shape))
        return
    n, a_count = b.shape[-1], digit_count(signed_bits(a))
    out = c if c.dim() == 2 else c.view(a.shape[0], n)
    step = rows_a_block(a.shape[0], n, a.shape[1], max(a_count, shift_count(a_count, count, bits)))
    for r0 in range(0, a.shape[0], step):
        out[r0:r0 + step].copy_(product(a[r0:r0 + step], planes, count, bits))


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
