"""The K steps of tensorcore-int's small-M program (r11_int8_small_m_kernel.py) with a row-major B
turned over in registers 32 bits at a time (B_WORDS: products "int8-words" and "int8-words-ahead"
of r11_int8_small_m.py): four rows' int32 words, a 4 x 4 turn of their bytes, into the MMA's shared
memory a word a store. Kept apart so that importing tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import step_rows


# --8<-- [start:words]
@triton.jit
def steps_b_rows_words(a_ptrs, b_ptr, offs_k, pid_n, in_m, N, K, first, steps, stride_ak, stride_bk,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                       B_AHEAD: tl.constexpr, TURN_PRMT: tl.constexpr):
    """steps_b_rows with B turned over in registers, 32 bits at a time (B_WORDS): B row-major, its
    rows' bytes read as int32 words, four columns a word (N, B's row stride and its start multiples
    of 4). A step's tile is four sets of rows, k = 4q + i (i = 0..3), each (BLOCK_N / 4, BLOCK_K / 4)
    words; the 4 x 4 bytes of four words, one a set, turn over into four words of B^T (turn_over_4x4),
    each four K-consecutive bytes of one column, so that the tile goes to the MMA as B^T's rows,
    K-major, as steps_b_columns loads it: into shared memory a word a store, not a byte. B_AHEAD:
    the next step's words in flight while one is multiplied."""
    WORDS_N: tl.constexpr = BLOCK_N // 4
    QUADS_K: tl.constexpr = BLOCK_K // 4
    # a row of the turned tile: column_row(n) = ((n % 16) // LOW * BLOCK_N / 16 + n // 16) * LOW + n % LOW
    LOW: tl.constexpr = 4 if BLOCK_N <= 32 else (2 if BLOCK_N == 64 else 1)
    words = b_ptr.to(tl.pointer_type(tl.int32))
    stride_wk = stride_bk // 4
    word_cols = pid_n * WORDS_N + tl.arange(0, WORDS_N)
    quads = tl.arange(0, QUADS_K)
    in_n = word_cols[:, None] < N // 4
    # (WORDS_N, QUADS_K): row 4q of this run's first step, words along each warp's lines
    rows_4q = (first * BLOCK_K + 4 * quads).to(tl.int64)
    w_ptrs = words + rows_4q[None, :] * stride_wk + word_cols.to(tl.int64)[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    if B_AHEAD:        # the first step's words in flight (nothing past the run's end is loaded ahead)
        k_end = tl.minimum(K, steps * BLOCK_K)
        w0, w1, w2, w3 = load_words(w_ptrs, stride_wk, in_n, quads, k_end - first * BLOCK_K, EVEN_K)
        for step in range(first, steps):
            a = step_rows(a_ptrs, in_m, offs_k, K, step, BLOCK_K, EVEN_K)
            w_ptrs += BLOCK_K * stride_wk          # the next step's words issued before this step's multiply
            n0, n1, n2, n3 = load_words(w_ptrs, stride_wk, in_n, quads, k_end - (step + 1) * BLOCK_K, False)
            acc = tl.dot(a, words_to_tile(w0, w1, w2, w3, LOW, TURN_PRMT).T, acc, out_dtype=tl.int32)
            w0, w1, w2, w3 = n0, n1, n2, n3
            a_ptrs += BLOCK_K * stride_ak
    else:
        for step in range(first, steps):
            a = step_rows(a_ptrs, in_m, offs_k, K, step, BLOCK_K, EVEN_K)
            w0, w1, w2, w3 = load_words(w_ptrs, stride_wk, in_n, quads, K - step * BLOCK_K, EVEN_K)
            acc = tl.dot(a, words_to_tile(w0, w1, w2, w3, LOW, TURN_PRMT).T, acc, out_dtype=tl.int32)
            a_ptrs += BLOCK_K * stride_ak
            w_ptrs += BLOCK_K * stride_wk
    # the tile's columns back in C's order: (nq_lo, j_hi, h, j_lo) -> (h, nq_lo, j_hi, j_lo)
    acc = tl.reshape(acc, BLOCK_M, 4, 4 // LOW, BLOCK_N // 16, LOW)
    return tl.reshape(tl.permute(acc, 0, 3, 1, 2, 4), BLOCK_M, BLOCK_N)


@triton.jit
def load_words(w_ptrs, stride_wk, in_n, quads, k_left, EVEN_K: tl.constexpr):
    """A step's four sets of B's rows as words, (WORDS_N, QUADS_K) each: set i the rows 4q + i from
    w_ptrs (row 4q); rows from k_left on (K's end, or the run's) read zeros unless EVEN_K."""
    return (word_set(w_ptrs, stride_wk, in_n, quads, k_left, 0, EVEN_K),
            word_set(w_ptrs, stride_wk, in_n, quads, k_left, 1, EVEN_K),
            word_set(w_ptrs, stride_wk, in_n, quads, k_left, 2, EVEN_K),
            word_set(w_ptrs, stride_wk, in_n, quads, k_left, 3, EVEN_K))


@triton.jit
def word_set(w_ptrs, stride_wk, in_n, quads, k_left, I: tl.constexpr, EVEN_K: tl.constexpr):
    """Set I of load_words: the rows 4q + I."""
    if EVEN_K:
        return tl.load(w_ptrs + I * stride_wk, mask=in_n, other=0)
    return tl.load(w_ptrs + I * stride_wk, mask=in_n & (4 * quads[None, :] + I < k_left), other=0)


@triton.jit
def words_to_tile(w0, w1, w2, w3, LOW: tl.constexpr, TURN_PRMT: tl.constexpr):
    """B^T's tile, int8 (BLOCK_N, BLOCK_K), K-contiguous, from the four sets of B's rows' words
    (WORDS_N, QUADS_K): row column_row(n) of it, byte 4 q + i, is B[4 q + i, n], byte j of set i's
    word (nq, q) for n = 4 nq + j. The rows' order is the lanes': a warp's lanes load words of
    columns 16 apart (16 bytes a lane), which in C's order would be rows of B^T in the same phase
    of shared memory's swizzle, the same banks; set apart (their columns' bits from the fifth on
    the row's lowest, LOW of n's own below them) they meet no conflict at 64 and 128 columns."""
    if TURN_PRMT:
        o0, o1, o2, o3 = turn_over_prmt(w0, w1, w2, w3)
    else:
        o0, o1, o2, o3 = turn_over_4x4(w0, w1, w2, w3)
    WORDS_N: tl.constexpr = w0.shape[0]
    QUADS_K: tl.constexpr = w0.shape[1]
    # column n = 16 h + 4 nq_lo + LOW j_hi + j_lo (word nq = 4 h + nq_lo, word j of the turn) set
    # as row column_row(n): (h, nq_lo, QUADS_K, j_hi, j_lo) -> (nq_lo, j_hi, h, j_lo, QUADS_K)
    turned = tl.reshape(join4(o0, o1, o2, o3), WORDS_N // 4, 4, QUADS_K, 4 // LOW, LOW)
    cols = tl.reshape(tl.permute(turned, 1, 3, 0, 4, 2), 4 * WORDS_N, QUADS_K)
    # each word's bytes, K in order: (BLOCK_N, QUADS_K, 4) -> (BLOCK_N, BLOCK_K)
    return tl.reshape(join4(cols.to(tl.int8), (cols >> 8).to(tl.int8), (cols >> 16).to(tl.int8),
                            (cols >> 24).to(tl.int8)), 4 * WORDS_N, 4 * QUADS_K)


@triton.jit
def join4(x0, x1, x2, x3):
    """(..., 4): x0..x3 along a new last dimension, in order."""
    return tl.reshape(tl.join(tl.join(x0, x2), tl.join(x1, x3)), *x0.shape, 4)


@triton.jit
def turn_over_4x4(w0, w1, w2, w3):
    """The 4 x 4 bytes of four words turned over (integers only: Triton's interpreter runs it):
    byte i of word j out is byte j of word i in."""
    u0, u1, u2, u3 = (w0.to(tl.uint32, bitcast=True), w1.to(tl.uint32, bitcast=True),
                      w2.to(tl.uint32, bitcast=True), w3.to(tl.uint32, bitcast=True))
    o0 = (u0 & 0xFF) | ((u1 & 0xFF) << 8) | ((u2 & 0xFF) << 16) | (u3 << 24)
    o1 = ((u0 >> 8) & 0xFF) | (u1 & 0xFF00) | ((u2 << 8) & 0xFF0000) | ((u3 << 16) & 0xFF000000)
    o2 = ((u0 >> 16) & 0xFF) | ((u1 >> 8) & 0xFF00) | (u2 & 0xFF0000) | ((u3 << 8) & 0xFF000000)
    o3 = (u0 >> 24) | ((u1 >> 16) & 0xFF00) | ((u2 >> 8) & 0xFF0000) | (u3 & 0xFF000000)
    return (o0.to(tl.int32, bitcast=True), o1.to(tl.int32, bitcast=True), o2.to(tl.int32, bitcast=True),
            o3.to(tl.int32, bitcast=True))


@triton.jit
def turn_over_prmt(w0, w1, w2, w3):
    """turn_over_4x4 in eight byte permutes (prmt.b32: pairs of bytes interleaved, then pairs of
    halves); the GPU only (Triton's interpreter runs no PTX)."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b32 lo01, hi01, lo23, hi23;
        prmt.b32 lo01, $4, $5, 0x5140;
        prmt.b32 hi01, $4, $5, 0x7362;
        prmt.b32 lo23, $6, $7, 0x5140;
        prmt.b32 hi23, $6, $7, 0x7362;
        prmt.b32 $0, lo01, lo23, 0x5410;
        prmt.b32 $1, lo01, lo23, 0x7632;
        prmt.b32 $2, hi01, hi23, 0x5410;
        prmt.b32 $3, hi01, hi23, 0x7632;
        }""", "=r,=r,=r,=r,r,r,r,r", [w0, w1, w2, w3], dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
        is_pure=True, pack=1)
# --8<-- [end:words]
