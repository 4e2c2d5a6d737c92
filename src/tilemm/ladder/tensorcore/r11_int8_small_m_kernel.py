"""The Triton program of tensorcore-int's small-M product (r11_int8_small_m.py): int8 x int8 ->
int32, a program a tile of C and a run of its K steps. Kept apart so that importing tilemm never
imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import step_rows, store_tile
from tilemm.ladder.tensorcore.r11_int8_words_kernel import steps_b_rows_words


# --8<-- [start:kernel]
@triton.jit
def small_m_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                   B_ROWS: tl.constexpr = False, B_AHEAD: tl.constexpr = False, B_WORDS: tl.constexpr = False,
                   TURN_PRMT: tl.constexpr = False, split_steps=None, ws_ptr=None, counts_ptr=None):
    """C = A @ B, int8 operands of any strides, int32 sums; fast where A's rows are contiguous and
    B's columns (B as torch.nn.Linear keeps a weight, (N, K).T: steps_b_columns) or, B_ROWS, B's
    rows (B row-major: steps_b_rows; B_WORDS, as int32 words turned over in registers, TURN_PRMT
    in prmt.b32: steps_b_rows_words, r11_int8_words_kernel.py). The grid: (tiles of C, runs of K
    steps); the tiles of one block column are neighbours, so a weight tile read for several block
    rows is read from L2. Rows past M load zeros (a masked copy reads nothing: at 33 rows of 64,
    reading row 32 again in their place cost 25-30 %); EVEN_K: K a multiple of BLOCK_K (no mask
    along K). split_steps given: this program sums its run of split_steps K steps and hands the
    partial over (hand_over_int)."""
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
            a = step_rows(a_ptrs, in_m, offs_k, K, step, BLOCK_K, EVEN_K)
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
