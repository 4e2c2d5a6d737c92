"""The Triton program of tensorcore-int's small-M product (r11_int8_small_m.py): int8 x int8 ->
int32, a program a tile of C and a run of its K steps. Kept apart so that importing tilemm never
imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import store_tile


# --8<-- [start:kernel]
@triton.jit
def small_m_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                   B_ROWS: tl.constexpr = False, B_AHEAD: tl.constexpr = False, B_WORDS: tl.constexpr = False,
                   TURN_PRMT: tl.constexpr = False, split_steps=None, ws_ptr=None, counts_ptr=None):
    """C = A @ B, int8 operands of any strides, int32 sums; fast where A's rows are contiguous and
    B's columns (B as torch.nn.Linear keeps a weight, (N, K).T: steps_b_columns) or, B_ROWS, B's
    rows (B row-major: steps_b_rows). The grid: (tiles of C, runs of K steps); the tiles of one
    block column are neighbours, so a weight tile read for several block rows is read from L2.
    Rows past M load zeros (a masked copy reads nothing: at 33 rows of 64, reading row 32 again in
    their place cost 25-30 %); EVEN_K: K a multiple of BLOCK_K (no mask along K). split_steps
    given: this program sums its run of split_steps K steps and hands the partial over
    (hand_over_int)."""
    pid_m, pid_n, offs_m, offs_n, offs_k, first, steps, rows, ks = tile_and_run(M, N, K, split_steps, BLOCK_M,
                                                                                BLOCK_N, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak    # (BLOCK_M, BLOCK_K)
    in_m = offs_m[:, None] < M
    if B_WORDS:
        acc = steps_b_rows_words(a_ptrs, b_ptr, offs_k, pid_n, in_m, N, K, first, steps, stride_ak, stride_bk,
                                 BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, B_AHEAD, TURN_PRMT)
    elif B_ROWS:
        acc = steps_b_rows(a_ptrs, b_ptr, ks, offs_k, offs_n, in_m, N, K, first, steps, stride_ak, stride_bk,
                           stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, B_AHEAD)
    else:
        acc = steps_b_columns(a_ptrs, b_ptr, ks, offs_k, offs_n, in_m, N, K, first, steps, stride_ak, stride_bk,
                              stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K)
    tile_into_c(acc, c_ptr, ws_ptr, counts_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn,
                split_steps)


@triton.jit
def tile_into_c(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn, split_steps):
    """A tile's int32 sums into C, or where the program sums a run of split K, handed over."""
    if split_steps is not None:
        hand_over_int(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn)
    else:
        store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, False)


@triton.jit
def tile_and_run(M, N, K, split_steps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """This program's tile of C and run of K steps: (pid_m, pid_n, the tile's rows, columns and a
    step's K offsets, the run's first step and end, the rows and K offsets in 64 bits). The grid:
    (tiles of C, a block column's tiles neighbours; runs of split_steps K steps, or one)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    pid_m = tl.program_id(0) % tiles_m
    pid_n = tl.program_id(0) // tiles_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    steps = tl.cdiv(K, BLOCK_K)
    first = 0
    if split_steps is not None:
        first = tl.program_id(1) * split_steps
        steps = tl.minimum(steps, first + split_steps)
    rows = offs_m.to(tl.int64)                           # 64-bit offsets: operands past 2^31 bytes
    ks = (first * BLOCK_K + offs_k).to(tl.int64)
    return pid_m, pid_n, offs_m, offs_n, offs_k, first, steps, rows, ks


@triton.jit
def steps_b_columns(a_ptrs, b_ptr, ks, offs_k, offs_n, in_m, N, K, first, steps, stride_ak, stride_bk, stride_bn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """The K steps first..steps-1 with B's tile loaded as B^T's rows, (BLOCK_N, BLOCK_K), K-major as
    it lies and as the 8-bit MMA reads it. Columns past N read column N - 1 (nothing of them is
    stored): no mask."""
    cols = tl.minimum(offs_n, N - 1).to(tl.int64)
    b_ptrs = b_ptr + cols[:, None] * stride_bn + ks[None, :] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for step in range(first, steps):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=in_m, other=0)
            b = tl.load(b_ptrs)
        else:
            inside = offs_k[None, :] < K - step * BLOCK_K
            a = tl.load(a_ptrs, mask=in_m & inside, other=0)
            b = tl.load(b_ptrs, mask=inside, other=0)
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)      # Triton 3.6 needs out_dtype for int8
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def steps_b_rows(a_ptrs, b_ptr, ks, offs_k, offs_n, in_m, N, K, first, steps, stride_ak, stride_bk, stride_bn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                 B_AHEAD: tl.constexpr):
    """The K steps first..steps-1 with B's tile loaded as B's rows, (BLOCK_K, BLOCK_N), N along
    each warp's lines as they lie; the 8-bit MMA reads B K-major, so Triton turns the tile over
    between memory and the MMA. Columns past N are masked (a clamped column would hide the
    columns' contiguity: byte loads). Where Triton takes wgmma (BLOCK_M 64 and more) it turns B
    over on its way into shared memory, a byte a store, and would load it in the step that uses
    it, the whole memory latency at each step: there (B_AHEAD) the next step's tile is in flight
    into registers while one is multiplied, and A keeps Triton's pipeline. (Two steps ahead cost a
    register a byte carried, A's pipeline lost: 228 registers a thread at 64 x 128 x 128 and 8
    warps, against 118.) With mma.sync (fewer rows) Triton's pipeline copies B's rows into
    shared memory stages as they lie, and turns them over as it reads them out. Either way each
    block row's programs turn B's tiles over: tiles of more rows turn the weight over fewer times."""
    in_n = offs_n[None, :] < N
    b_ptrs = b_ptr + ks[:, None] * stride_bk + offs_n.to(tl.int64)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    if B_AHEAD:        # the first step's tile in flight (nothing past the run's end is loaded ahead)
        k_end = tl.minimum(K, steps * BLOCK_K)
        b_next = tl.load(b_ptrs, mask=in_n & (offs_k[:, None] < k_end - first * BLOCK_K), other=0)
        for step in range(first, steps):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=in_m, other=0)
            else:
                a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - step * BLOCK_K), other=0)
            b_ptrs += BLOCK_K * stride_bk        # the next step's load issued before this step's multiply
            b_after = tl.load(b_ptrs, mask=in_n & (offs_k[:, None] < k_end - (step + 1) * BLOCK_K), other=0)
            acc = tl.dot(a, b_next, acc, out_dtype=tl.int32)
            b_next = b_after
            a_ptrs += BLOCK_K * stride_ak
    else:
        for step in range(first, steps):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=in_m, other=0)
                b = tl.load(b_ptrs, mask=in_n, other=0)
            else:
                a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - step * BLOCK_K), other=0)
                b = tl.load(b_ptrs, mask=in_n & (offs_k[:, None] < K - step * BLOCK_K), other=0)
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)     # Triton 3.6 needs out_dtype for int8
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    return acc


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
            if EVEN_K:
                a = tl.load(a_ptrs, mask=in_m, other=0)
            else:
                a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - step * BLOCK_K), other=0)
            w_ptrs += BLOCK_K * stride_wk          # the next step's words issued before this step's multiply
            n0, n1, n2, n3 = load_words(w_ptrs, stride_wk, in_n, quads, k_end - (step + 1) * BLOCK_K, False)
            acc = tl.dot(a, words_to_tile(w0, w1, w2, w3, LOW, TURN_PRMT).T, acc, out_dtype=tl.int32)
            w0, w1, w2, w3 = n0, n1, n2, n3
            a_ptrs += BLOCK_K * stride_ak
    else:
        for step in range(first, steps):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=in_m, other=0)
            else:
                a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - step * BLOCK_K), other=0)
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
    if EVEN_K:
        w0 = tl.load(w_ptrs, mask=in_n, other=0)
        w1 = tl.load(w_ptrs + stride_wk, mask=in_n, other=0)
        w2 = tl.load(w_ptrs + 2 * stride_wk, mask=in_n, other=0)
        w3 = tl.load(w_ptrs + 3 * stride_wk, mask=in_n, other=0)
    else:
        w0 = tl.load(w_ptrs, mask=in_n & (4 * quads[None, :] < k_left), other=0)
        w1 = tl.load(w_ptrs + stride_wk, mask=in_n & (4 * quads[None, :] + 1 < k_left), other=0)
        w2 = tl.load(w_ptrs + 2 * stride_wk, mask=in_n & (4 * quads[None, :] + 2 < k_left), other=0)
        w3 = tl.load(w_ptrs + 3 * stride_wk, mask=in_n & (4 * quads[None, :] + 3 < k_left), other=0)
    return w0, w1, w2, w3


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
# --8<-- [end:kernel]


@triton.jit
def hand_over_int(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn):
    """Split K's hand-over (tilemm.engine.programs.hand_over) of an int32 partial: its bits go to
    the run's slot of the float32 workspace, the tile's count is raised, and the run that raises
    it last adds the tile's slots as int32 (exact, in any order), writes C and sets the count back
    to 0, as every launch finds it."""
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    tile, tiles, runs = tl.program_id(0), tl.num_programs(0), tl.num_programs(1)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_ptr + (tl.program_id(1) * tiles + tile) * (BLOCK_M * BLOCK_N) + offs, acc.to(tl.float32, bitcast=True))
    tl.debug_barrier()            # every thread's share of the partial is written before the count says so
    arrived = tl.atomic_add(counts_ptr + tile, 1, sem="acq_rel")
    if arrived == runs - 1:       # the last run: the others' partials are in L2 (.cg reads past L1)
        tl.debug_barrier()
        total = tl.load(ws_ptr + tile * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg").to(tl.int32, bitcast=True)
        for run in range(1, runs):
            part = tl.load(ws_ptr + (run * tiles + tile) * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
            total += part.to(tl.int32, bitcast=True)
        store_tile(c_ptr, total, off_m, off_n, M, N, stride_cm, stride_cn, False)
        tl.atomic_xchg(counts_ptr + tile, 0)
