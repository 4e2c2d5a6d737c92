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
                   B_ROWS: tl.constexpr = False, split_steps=None, ws_ptr=None, counts_ptr=None):
    """C = A @ B, int8 operands of any strides (fast where A's rows are contiguous and B's columns,
    B as torch.nn.Linear keeps a weight, (N, K).T, or, B_ROWS, B's rows: B's tile is loaded in
    the order its bytes lie, K-major (BLOCK_N, BLOCK_K) or N-major (BLOCK_K, BLOCK_N), so that
    each warp reads whole lines), int32 sums. The grid: (tiles of C, runs of K
    steps); the tiles of one block column are neighbours, so a weight tile read for several
    block rows is read from L2. Rows past M load zeros (a masked copy reads nothing: at 33 rows of
    64, reading row 32 again in their place cost 25-30 %), columns past N read column N - 1
    (nothing of them is stored); EVEN_K: K a multiple of BLOCK_K (no mask along K). split_steps
    given: this program sums its run of split_steps K steps and hands the partial over
    (hand_over_int)."""
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
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak    # (BLOCK_M, BLOCK_K)
    in_m = offs_m[:, None] < M
    if B_ROWS:     # columns past N masked: a clamped column would hide the columns' contiguity (byte loads)
        in_n = offs_n[None, :] < N
        b_ptrs = b_ptr + ks[:, None] * stride_bk + offs_n.to(tl.int64)[None, :] * stride_bn  # (BLOCK_K, BLOCK_N)
    else:
        cols = tl.minimum(offs_n, N - 1).to(tl.int64)
        b_ptrs = b_ptr + cols[:, None] * stride_bn + ks[None, :] * stride_bk    # (BLOCK_N, BLOCK_K): B^T's rows
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for step in range(first, steps):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=in_m, other=0)
            if B_ROWS:
                b = tl.load(b_ptrs, mask=in_n, other=0)
            else:
                b = tl.load(b_ptrs)
        else:
            inside = offs_k < K - step * BLOCK_K
            a = tl.load(a_ptrs, mask=in_m & inside[None, :], other=0)
            if B_ROWS:
                b = tl.load(b_ptrs, mask=inside[:, None] & in_n, other=0)
            else:
                b = tl.load(b_ptrs, mask=inside[None, :], other=0)
        if B_ROWS:     # Hopper's 8-bit MMA reads B K-major: Triton turns the tile over on its way to shared memory
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)    # Triton 3.6 needs out_dtype for int8
        else:
            acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if split_steps is not None:
        hand_over_int(acc, c_ptr, ws_ptr, counts_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn)
    else:
        store_tile(c_ptr, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, False)
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
