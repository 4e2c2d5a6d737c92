"""The Triton programs of exact integer products from int8 digits (tilemm.engine.digit_products),
which rung `tensorcore-int` (r11_int_digits.py) and tensorcore-f32's precision="int8" share: the
digit split, and the fused product of all digit pairs. Kept apart so that importing tilemm never
imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import store_tile, tile_position


# --8<-- [start:split]
@triton.jit
def split_digits(x_ptr, out_ptr, R, C, C_PAD, stride_r, stride_c, scale_ptr=None,
                 NDIGITS: tl.constexpr = 1, FIXED: tl.constexpr = False, BLOCK_R: tl.constexpr = 64,
                 BLOCK_C: tl.constexpr = 64):
    """out[d, r, c] = signed base-256 digit d of x[r, c] (int8), zero for C <= c < C_PAD.

    out is contiguous (NDIGITS, R, C_PAD). Passing B's strides swapped (x = B^T) writes B's
    digits K-major, as Hopper's 8-bit tensor-core instruction wants them. FIXED: x is float, and
    its digits are those of the integer nearest x[r, c] * scale[r] (float64 powers of two that
    bring each row into the digits' range: tensorcore-f32's precision="int8").
    """
    offs_r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs_c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    inside = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(x_ptr + offs_r[:, None] * stride_r + offs_c[None, :] * stride_c, mask=inside, other=0)
    if FIXED:
        scale = tl.load(scale_ptr + offs_r, mask=offs_r < R, other=0.0)
        fixed = x.to(tl.float64) * scale[:, None]                  # exact: a power of two
        fixed = tl.where(tl.abs(fixed) < float("inf"), fixed, 0.0)  # Inf and NaN: computed elsewhere
        rest = tl.floor(fixed + 0.5).to(tl.int64)
    else:
        rest = x.to(tl.int64)
    out = out_ptr + offs_r[:, None] * C_PAD + offs_c[None, :]
    keep = (offs_r[:, None] < R) & (offs_c[None, :] < C_PAD)
    for d in tl.static_range(NDIGITS):
        digit = ((rest & 0xFF) ^ 0x80) - 0x80              # the low byte, read as a signed number
        tl.store(out + d * tl.cast(R, tl.int64) * C_PAD, digit.to(tl.int8), mask=keep)   # 64-bit: planes past 2^31
        rest = (rest - digit) >> 8                         # exact: a multiple of 256 (mod 2^64)
# --8<-- [end:split]


# --8<-- [start:kernel]
@triton.jit
def shift_group(a_desc, b_desc, acc, off_m, off_n, M, N, K_TILES, s: tl.constexpr,
                ND_A: tl.constexpr, ND_B: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc + sum over the pairs (i, s - i) of D_i(A) @ D_j(B) for this tile: one GEMM over a K
    that is (pairs) times longer, into the int32 accumulator (int8 products, int32 sums)."""
    lo = s - ND_B + 1 if s >= ND_B else 0         # the pairs that exist: constants
    hi = s if s < ND_A else ND_A - 1
    if lo <= hi:
        pairs = hi - lo + 1
        for t in range(0, pairs * K_TILES):
            i = lo + t % pairs                     # A's digit; B's is s - i
            k0 = (t // pairs) * BLOCK_K
            a = a_desc.load([i * M + off_m, k0])           # (BLOCK_M, BLOCK_K): rows of plane i
            b = b_desc.load([(s - i) * N + off_n, k0])     # (BLOCK_N, BLOCK_K), K-major
            acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)  # Triton 3.6 needs out_dtype for int8
    return acc
# --8<-- [end:kernel]


# --8<-- [start:fused]
@triton.jit
def digit_matmul(a_desc, b_desc, c_ptr, M, N, K_TILES, stride_cm, stride_cn,
                 ND_A: tl.constexpr, ND_B: tl.constexpr, ND_C: tl.constexpr, LOWEST: tl.constexpr, ACCUMULATE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 PROGRAMS: tl.constexpr):
    """C (+)= A @ B modulo 2^(8 ND_C) from int8 digit planes, all pairs in one program.

    a_desc: TMA descriptor of A's ND_A digit planes stacked, (ND_A * M, K), K contiguous; b_desc
    likewise of B's, transposed: (ND_B * N, K). A tile that runs past row M reads the next plane's
    rows; they only reach rows of C that are not stored. Beyond K (and past the last plane) TMA
    reads zeros. The shifts are added Horner's way in one int32 accumulator, acc = acc * 2^8 +
    (shift s's pairs) from the highest s down, which is exact modulo 2^32; for int64 that covers
    the shifts 4..7 (needed modulo 2^32 only), and the shifts 0..3, whose sums must be exact, are
    added to an int64 total one by one (down to LOWEST: 0 but for tensorcore-f32's precision="int8").

    Persistent: PROGRAMS programs (one an SM) walk the tiles. (A single digit pair, int8 data,
    goes to tilemm.engine.programs.matmul_persistent instead.)
    """
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    EXACT: tl.constexpr = 4 if ND_C == 8 else 0      # shifts below this need exact sums
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS):
        off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        for s in tl.static_range(ND_C - 1, EXACT - 1, -1):
            acc = shift_group(a_desc, b_desc, acc << 8, off_m, off_n, M, N, K_TILES, s, ND_A, ND_B, BLOCK_K)
        if ND_C == 8:
            total = acc.to(tl.int64) << 32
            for s in tl.static_range(EXACT - 1, LOWEST - 1, -1):
                part = shift_group(a_desc, b_desc, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32), off_m, off_n,
                                   M, N, K_TILES, s, ND_A, ND_B, BLOCK_K)
                total += part.to(tl.int64) << (8 * s)
        else:
            total = acc
        store_tile(c_ptr, total, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE)
# --8<-- [end:fused]
