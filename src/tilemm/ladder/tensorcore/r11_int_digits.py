"""Rung 11, `tensorcore-int`: exact integer matmul on int8 tensor cores (docs/exact_integers.md).

Each operand is split into signed base-256 digits (int8); the product modulo 2^w is the sum of the
digit products D_i(A) @ D_j(B) with i + j < w/8, shifted by 8(i+j) bits. Two Triton programs
(tilemm.engine.digit_programs, which tensorcore-f32's precision="int8" shares):

1. `split_digits` writes each operand's digit planes, B's transposed: Hopper's 8-bit tensor-core
   instruction reads K-major operands only, so a row-major B is made K-major here, in one pass
   whose time counts in the rung's time (an int8 A that is already K-major is used as it is, and
   so is an int8 B given as (N, K).T).
2. `digit_matmul` multiplies all pairs in one launch (on Hopper the warp-specialized Gluon
   program of tilemm.engine.int8_gluon does instead, the same steps with its int32 tensor-core
   products kept asynchronous; int8 data elsewhere, and on Hopper where C is int8, its rows are
   not 16-byte aligned or K is short (stores_coalesced), goes to the persistent program of
   `tensorcore` and `scaled_matmul` with int32 sums): for each shift s, the pairs (i, s - i) run
   as one GEMM over a K that many times longer, into one int32 accumulator, shifted into the total.
   int32 accumulators wrap, which is exact modulo 2^32; for int64 the shifts below 4 need true
   sums, so K is cut into chunks short enough that they cannot overflow (digits.exact_chunk).

A narrow operand has fewer digits: int8 x int8 needs one product, into int8 (NumPy's wrapped
result) or, with matmul(..., out_dtype="int32"), the exact int32 sums; where the rung's tiles
would leave SMs idle (a few rows times a weight), int8 into int32 takes the small-M program of
r11_int8_small_m.py instead (small tiles, K split across the GPU: small_m, split_k; B read as it
lies, as (N, K).T or row-major, no planes). int16 needs
3 products, int32 10, int64 36 (fewer when an operand is narrower than the result).

Constraints: int8, int16, int32, int64 (unsigned types as their signed twins, bit for bit); any
M, N, K, any strides; BLOCK_K a multiple of 32 on the GPU (the 8-bit instruction's K).
"""
from __future__ import annotations

from tilemm.system import compat
from tilemm.ladder.record import Kernel, Param, Traffic, register
from tilemm.engine import availability, operand_copies
from tilemm.ladder.tensorcore import r11_int8_small_m
from tilemm.engine import launches
from tilemm.engine.digit_products import chunk_tiles, digit_planes, digit_products, planes_launch
from tilemm.engine.persistent import persistent_launch

def digit_count(operand_bytes: int, result_bytes: int) -> int:
    """Digits an operand needs. One of the result's width, or fewer when the operand arrives
    narrower (narrow_operands: int8 data with out_dtype=int32, say): an int8 value is its own
    digit, but w > 8 bits need w/8 + 1 digits, since w/8 signed digits reach only up to
    2^(w-1) - 2^(w-9) - 1 (32767 = -1 + 256 * -128 + 65536 * 1 carries into a third digit)."""
    if operand_bytes >= result_bytes:
        return result_bytes
    return 1 if operand_bytes == 1 else operand_bytes + 1


def default_block_n(block_n, result_bytes: int) -> int:
    """128 x 256 tiles are the fastest up to 32-bit results; int64's second, int64 accumulator
    needs 128 x 128."""
    return block_n or (128 if result_bytes == 8 else 256)


# int8 data: the Gluon program stores C from the tensor cores' registers, a few bytes a thread. Where
# C's rows are not 16-byte aligned, C is int8, or K is short (C's store is much of a tile's time), the
# persistent program's coalesced quarters are faster (measured kernel alone, Gluon against the
# persistent program: with aligned int32 C the Gluon program pulls ahead from K = 1024 on, hence
# SHORT_K).
SHORT_K = 512


def stores_coalesced(c, k: int) -> bool:
    """Whether int8 data into c takes the persistent program rather than the Gluon one: C int8,
    C's rows (or its start) not 16-byte aligned, or K up to SHORT_K."""
    rows = c.stride(0) * c.element_size() if c.shape[0] > 1 else 0
    return (c.element_size() == 1 or rows % 16 != 0 or c.stride(1) != 1 or c.data_ptr() % 16 != 0
            or k <= SHORT_K)


def takes_persistent(nd_a: int, nd_b: int, c, k: int) -> bool:
    """Whether the product goes to the persistent program: int8 data (one digit each) into a
    result of up to 32 bits, off Hopper (or in the interpreter), or on Hopper where
    stores_coalesced says its stores are the faster."""
    return nd_a == nd_b == 1 and c.element_size() <= 4 and (not availability.hopper_gluon() or stores_coalesced(c, k))


def persistent_int8(a_part, b_part, c, m: int, n: int, k: int, block_m, block_n, block_k, group_m, num_warps,
                    num_stages):
    """A launcher without arguments of the engine's persistent schedule with int32 sums of K steps
    (int8_steps) on int8 planes a_part
    (M, K) and b_part (N, K), both K-major; told C's alignment (measured a little faster for int32
    C of unaligned widths)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from tilemm.ladder.tensorcore.r11_int_digits_kernel import int8_steps
    return persistent_launch(TensorDescriptor.from_tensor(a_part, [block_m, block_k]),
                             TensorDescriptor.from_tensor(b_part, [block_n, block_k]), c, m, n, k, int8_steps,
                             BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                             num_warps=num_warps, num_stages=num_stages, C_ALIGN=operand_copies.c_alignment(c))


def run(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, small_m=None, split_k=None):
    m, k = a.shape
    n = b.shape[1]
    if k == 0:
        c.zero_()
        return
    if r11_int8_small_m.takes(a, b, c, small_m):    # int8 into int32, few rows: small tiles, K split
        r11_int8_small_m.launcher(a, b, c, split_k)()
        return
    nd_c = c.element_size()
    block_n = default_block_n(block_n, nd_c)
    nd_a, nd_b = digit_count(a.element_size(), nd_c), digit_count(b.element_size(), nd_c)
    if takes_persistent(nd_a, nd_b, c, k):          # the persistent program of the 16-bit and fp8 rungs
        persistent_int8(digit_planes(a, 1), digit_planes(b.T, 1), c, m, n, k, block_m, block_n, block_k, group_m,
                        num_warps, num_stages)()
        return
    digit_products(a, b, c, nd_a, nd_b, block_m, block_n, block_k, group_m, num_warps, num_stages)


def bind(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, small_m=None, split_k=None):
    """run(a, b, c, ...) as a launcher without arguments. On Hopper with K in one launch (results
    up to 32 bits) the digit planes' buffers, the descriptors and the launches are worked out
    once, a Steps that a repeated call replays: planning at each launch cost several times the CPU
    time of a whole torch._int_mm call. Elsewhere each
    launch plans (run)."""
    m, k = a.shape
    n = b.shape[1]
    if k > 0 and r11_int8_small_m.takes(a, b, c, small_m):  # one launch of three pointers: a cheap replay
        return r11_int8_small_m.launcher(a, b, c, split_k)
    nd_c = c.element_size()
    nd_a, nd_b = digit_count(a.element_size(), nd_c), digit_count(b.element_size(), nd_c)
    whole = k > 0 and chunk_tiles(k, nd_a, nd_b, nd_c, block_k) * block_k >= k
    if not (whole and availability.hopper_gluon()):
        return lambda: run(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, small_m, split_k)
    from tilemm.engine import gluon_helpers, int8_gluon as gluon_int8
    block_n = default_block_n(block_n, nd_c)
    a_part, a_fill = planes_launch(a, nd_a)
    b_part, b_fill = planes_launch(b.T, nd_b)                                 # (N, K): B K-major
    if takes_persistent(nd_a, nd_b, c, k):
        product = persistent_int8(a_part, b_part, c, m, n, k, block_m, block_n, block_k, group_m, num_warps,
                                  num_stages)
    else:
        programs = min(-(-m // block_m) * -(-n // block_n), availability.multiprocessors())
        product = gluon_int8.launcher(gluon_helpers.descriptor(a_part, block_m, block_k),
                                      gluon_helpers.descriptor(b_part, block_n, block_k), c, m, n, k, programs,
                                      (nd_a, nd_b), group_m, num_stages, num_warps)
    return launches.Steps([a_fill, b_fill, product])


def traffic(p, block_m, block_n, **_):
    block_n = default_block_n(block_n, p.itemsize)
    # In elements of the problem's dtype (nd bytes each), as every Traffic is. The split pass reads
    # A and B and writes their digits (nd one-byte planes: one element's worth); the product reads,
    # for every digit pair, one-byte A and B tiles once per program, and writes C once.
    nd = p.itemsize
    pairs = nd * (nd + 1) // 2                              # 10 for int32, 36 for int64
    operands = p.m * p.k + p.k * p.n
    tiles = p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m)   # bytes of one pair
    return Traffic(read=operands + pairs * tiles / nd, written=operands + p.m * p.n)


def limits(p, block_m, block_n, block_k, num_stages, **_):
    block_n = default_block_n(block_n, p.itemsize)
    if block_k % 32 and not compat.triton_interpreter():
        return f"BLOCK_K={block_k}: the 8-bit tensor-core instruction takes K in multiples of 32"
    # int8 data (one digit pair) writes C in int32 quarters while the next tile loads
    epilogue = block_m * block_n if p.itemsize <= 4 else 0
    return availability.dimension_limit(p.m, p.n, p.k) or availability.check_shared(block_m, block_n, block_k, num_stages, 1, epilogue)


def compute_unit(p, **_):
    """int8 tensor cores, one product for each digit pair (digits of the result's width)."""
    nd = p.itemsize
    return "int8", nd * (nd + 1) // 2


register(Kernel(
    name="tensorcore-int", rung=11, device="cuda", backend="triton", dtypes=("int8", "int16", "int32", "int64"),
    seed="beyond", summary="exact integers from int8 tensor-core products of signed base-256 digits, fused",
    run=run, bind=bind, traffic=traffic, limits=limits, available=availability.available, narrow_operands=True,
    compute_unit=compute_unit,
    prefers=lambda dtype, m, n, k, sms, capability, b_rows=False: r11_int8_small_m.preferred(m, n, k, sms, b_rows),
    params=(Param("block_m", 128, (16, 32, 64, 128, 256), "rows of C per program"),
            Param("block_n", None, (None, 16, 32, 64, 128, 256),
                  "columns of C per program; None: 256, or 128 for int64 (its int64 total takes registers)"),
            Param("block_k", 128, (16, 32, 64, 128, 256), "depth of one K step (int8 digits)"),
            Param("group_m", 8, (1, 2, 4, 8, 16), "block rows walked before the next column (L2 reuse)"),
            Param("num_warps", 8, (1, 2, 4, 8, 16), "warps per program"),
            Param("num_stages", 4, (1, 2, 3, 4, 5), "software-pipelining depth (shared-memory stages)"),
            Param("small_m", None, (None, True, False),
                  "int8 into int32: the small-M program (r11_int8_small_m: its own tiles, K split to fill "
                  "the GPU); None: A's rows contiguous and B's columns (B as (N, K).T) or rows (B "
                  "row-major), where the rung's tiles would leave SMs idle, or B row-major up to 256 rows"),
            Param("split_k", None, (None, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                  "runs of K a tile of the small-M program; None: enough to fill the GPU")),
))
