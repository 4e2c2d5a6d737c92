"""The Triton program of rung `tensorcore` (see r10_tensorcore.py). Kept apart so that importing
tilemm never imports Triton: it loads on the first launch, after TRITON_INTERPRET is read."""
import triton
import triton.language as tl


# --8<-- [start:kernel]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  UPCAST: tl.constexpr, FP64: tl.constexpr, top_a_ptr=None, top_b_ptr=None, split_steps=None,
                  ws_ptr=None, counts_ptr=None, ALIGN: tl.constexpr = (1, 1, 1, 1, 1, 1, 1, 1, 1)):
    """C = A @ B, a program a tile, pointers and masks: any strides, any M, N, K. top_a_ptr and
    top_b_ptr given (each row of A's and column of B's largest |x|, float32): only the tiles that
    meet a row or column holding Inf or NaN are computed and stored (tensorcore-f32's
    precision="int8" puts those through IEEE float32 here). split_steps given: split K (see
    matmul_tma). ALIGN: a power of two dividing each of M, N, K, stride_am, stride_ak, stride_bk,
    stride_bn, stride_cm, stride_cn (load_alignment)."""
    # Triton knows an integer argument's divisibility only by 16: told that a row of 1000 or 20
    # elements divides by 8 or 4, it loads 16- or 8-byte vectors asynchronously instead of one
    # element at a time into registers (which spilled: 255 registers a thread, 64 x 128 tiles),
    # and stores C's rows in vectors too
    M, N, K = M // ALIGN[0] * ALIGN[0], N // ALIGN[1] * ALIGN[1], K // ALIGN[2] * ALIGN[2]
    stride_am, stride_ak = stride_am // ALIGN[3] * ALIGN[3], stride_ak // ALIGN[4] * ALIGN[4]
    stride_bk, stride_bn = stride_bk // ALIGN[5] * ALIGN[5], stride_bn // ALIGN[6] * ALIGN[6]
    stride_cm, stride_cn = stride_cm // ALIGN[7] * ALIGN[7], stride_cn // ALIGN[8] * ALIGN[8]
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    steps = tl.cdiv(K, BLOCK_K)
    first = 0
    if split_steps is not None:                           # split K: this program's run of K steps
        first = tl.program_id(1) * split_steps
        steps = tl.minimum(steps, first + split_steps)
    if top_a_ptr is not None:
        top_a = tl.load(top_a_ptr + offs_m, mask=offs_m < M, other=0.0)
        top_b = tl.load(top_b_ptr + offs_n, mask=offs_n < N, other=0.0)
        meets = tl.maximum(tl.max(tl.where(tl.abs(top_a) < float("inf"), 0, 1), axis=0),   # NaN: 1 too
                           tl.max(tl.where(tl.abs(top_b) < float("inf"), 0, 1), axis=0))
        steps = steps * meets
        offs_m = tl.where(meets > 0, offs_m, M)          # nothing stored where it meets none
    # 64-bit offsets: an operand of 2^31 elements or more is addressed right (once a tile: free)
    rows_a, cols_b = offs_m.to(tl.int64), offs_n.to(tl.int64)
    ks = (first * BLOCK_K + offs_k).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + ks[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_b[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
    if FP64:                                              # float64: the FP64 tensor cores (DMMA)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, steps):
        k_left = K - step * BLOCK_K                       # edges load zeros: any M, N, K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        if FP64:
            acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)  # 3.6 needs out_dtype
        elif UPCAST:  # only in Triton's interpreter, whose bfloat16 tl.dot returns garbage
            # (3.9): bfloat16 products are exact in float32, so this is the same sum
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)                       # tensor cores, float32 accumulators
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if split_steps is not None:
        hand_over(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn)
    else:
        c = acc.to(c_ptr.dtype.element_ty)                # one rounding, as NumPy's float16
        c_ptrs = c_ptr + rows_a[:, None] * stride_cm + cols_b[None, :] * stride_cn
        tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# --8<-- [end:kernel]


@triton.jit
def tile_position(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of C where tile number `tile` starts: tiles are numbered in groups of GROUP_M
    block rows that walk one block column before the next, so that neighbours share B in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_in_group = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def matmul_tma(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
               A_T: tl.constexpr, B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr, ACCUMULATE: tl.constexpr,
               split_steps=None, ws_ptr=None, counts_ptr=None, C_ALIGN: tl.constexpr = 1):
    """The same product with the tiles brought in by TMA (Hopper's bulk tensor copy): no address
    arithmetic, no masks (the copy engine fills zeros past M, N and K). a_desc describes A, or A^T
    when A_T (A stored column-major); b_desc B, or B^T when B_T. ACCUMULATE: C += A @ B.
    C_ALIGN: a power of two dividing N and stride_cm (c_alignment), so that C's rows are stored
    that many elements at a time.

    split_steps given (split K): the launch's second grid axis numbers runs of split_steps K steps,
    each a program of its own that sums its run of its tile's K steps and hands it over (hand_over)."""
    N, stride_cm = N // C_ALIGN * C_ALIGN, stride_cm // C_ALIGN * C_ALIGN    # no-ops that say C_ALIGN divides them
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    first = 0
    steps = tl.cdiv(K, BLOCK_K)
    if split_steps is not None:
        first = tl.program_id(1) * split_steps
        steps = tl.minimum(steps, first + split_steps)
    acc = tile_steps(a_desc, b_desc, off_m, off_n, first, steps, M, N, A_T, B_T, False, False, False,
                     False, UPCAST, 1, 1, BLOCK_M, BLOCK_N, BLOCK_K)
    if split_steps is not None:
        hand_over(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn)
    else:
        store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE)


@triton.jit
def hand_over(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn):
    """Split K's hand-over of a run's float32 partial sum acc: it goes to the run's slot for its
    tile (ws: runs x tiles slots of BLOCK_M x BLOCK_N) and the tile's count is raised; the run
    that raises it last adds the tile's slots in run order (the same sum whichever run is last),
    writes C, and sets the count back to 0, as every launch finds it."""
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    tile, tiles, runs = tl.program_id(0), tl.num_programs(0), tl.num_programs(1)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_ptr + (tl.program_id(1) * tiles + tile) * (BLOCK_M * BLOCK_N) + offs, acc)
    tl.debug_barrier()            # every thread's share of the partial is written before the count says so
    arrived = tl.atomic_add(counts_ptr + tile, 1, sem="acq_rel")
    if arrived == runs - 1:       # the last run: the others' partials are in L2 (.cg reads past L1)
        tl.debug_barrier()
        total = tl.load(ws_ptr + tile * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
        for run in range(1, runs):
            total += tl.load(ws_ptr + (run * tiles + tile) * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
        store_tile(c_ptr, total, off_m, off_n, M, N, stride_cm, stride_cn, False)
        tl.atomic_xchg(counts_ptr + tile, 0)


@triton.jit(do_not_specialize=["epoch"])
def matmul_persistent(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, ws_ptr, flags_ptr, epoch,
                      M, N, K, stride_cm, stride_cn,
                      A_T: tl.constexpr, B_T: tl.constexpr, SCALED: tl.constexpr, FAST_ACCUM: tl.constexpr,
                      INT: tl.constexpr, F64: tl.constexpr, STREAM_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, UPCAST: tl.constexpr, PARTS: tl.constexpr,
                      CHUNK: tl.constexpr, ACCUMULATE: tl.constexpr, C_ALIGN: tl.constexpr = 1):
    """matmul_tma made persistent: PROGRAMS programs (one an SM) walk the tiles, the tile loop
    flattened into the K loop, so the next tile's loads are in flight while this one's C is
    written (in quarters: the stages still hold shared memory then).

    STREAM_K: whole rounds of PROGRAMS tiles go as above; the tiles left over, which would keep
    a few SMs busy for one more round while the rest idle, are shared out by K steps instead,
    each program an equal run of steps (stream-K). A tile's first run belongs to its owner; the
    others store their partial sums in the workspace (two BLOCK_M x BLOCK_N float32 slots a
    program) and raise their flag to this launch's `epoch`; the owner waits for those flags, adds
    the partials and writes C. Runs are handed out in reverse program order, so an owner's
    helpers have lower program ids (Triton's interpreter runs programs in order) and finish their
    share of the tile first (it is the first thing each does).

    The same program multiplies float8 for tilemm.scaled_matmul (SCALED: C = scale_a * scale_b *
    A @ B; 8-bit operands come K-major only, A_T = False and B_T = True). Hopper adds fp8 products
    into the accumulator with fewer bits than float32 keeps; unless FAST_ACCUM each K step's
    products go into a fresh accumulator added to the float32 sum (max_num_imprecise_acc), as
    cuBLAS does unless asked for fast accumulation (torch._scaled_mm's use_fast_accum).

    And int8 for `tensorcore-int` (INT: int32 sums, which wrap as the result must; C written as
    int32, or int8 wrapped), and float64 for `tensorcore-f64` (F64: float64 sums on DMMA). No
    stream-K for those: its partial sums are float32.

    And float32 by 3xTF32 for `tensorcore-f32` (PARTS == 2: a_desc and b_desc hold A's and B^T's
    TF32 parts stacked, tf32x3_steps' chunks of CHUNK steps). Its tile loop is not flattened: the
    K loop is two loops already.

    ACCUMULATE (whole tiles only, no stream-K): C += A @ B, C read and written in its own dtype
    (tilemm.spread.distributed adds each K panel's 16-bit product into float32 C).
    """
    tl.static_assert(not ((INT or F64 or ACCUMULATE) and STREAM_K))
    N, stride_cm = N // C_ALIGN * C_ALIGN, stride_cm // C_ALIGN * C_ALIGN    # as in matmul_tma
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    if STREAM_K:
        whole_rounds = num_tiles - num_tiles % PROGRAMS
    else:
        whole_rounds = num_tiles
    for tile in tl.range(pid, whole_rounds, PROGRAMS, flatten=PARTS == 1):
        off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_steps(a_desc, b_desc, off_m, off_n, 0, k_steps, M, N, A_T, B_T, SCALED, FAST_ACCUM, INT, F64,
                         UPCAST, PARTS, CHUNK, BLOCK_M, BLOCK_N, BLOCK_K)
        store_quarters(c_ptr, scaled(acc, scale_a_ptr, scale_b_ptr, SCALED), off_m, off_n, M, N, stride_cm,
                       stride_cn, ACCUMULATE)
    if STREAM_K:
        units = (num_tiles - whole_rounds) * k_steps          # (tile, K step) pairs left
        per = tl.cdiv(units, PROGRAMS)
        run = PROGRAMS - 1 - pid                             # reverse order: see above
        u = run * per
        end = tl.minimum(u + per, units)
        t_first = u // k_steps
        segments = tl.where(end > u, (end - 1) // k_steps - t_first + 1, 0)
        # a for loop, not a while: Triton pipelines the K loop inside a for loop only
        for i in range(0, segments):
            t = t_first + i
            first = t * k_steps
            lo = tl.maximum(u, first)
            hi = tl.minimum(end, first + k_steps)
            off_m, off_n = tile_position(whole_rounds + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            acc = tile_steps(a_desc, b_desc, off_m, off_n, lo - first, hi - first, M, N, A_T, B_T, SCALED,
                             FAST_ACCUM, INT, F64, UPCAST, PARTS, CHUNK, BLOCK_M, BLOCK_N, BLOCK_K)
            last_run = (first + k_steps - 1) // per
            if lo == first and last_run == run:      # the whole tile is this run's: straight to C
                store_quarters(c_ptr, scaled(acc, scale_a_ptr, scale_b_ptr, SCALED), off_m, off_n, M, N, stride_cm,
                               stride_cn, False)
            else:
                owner = lo == first
                # two slots a program: a helper's partial (its first segment, at most one) must
                # outlive the partials of the tiles it owns after it
                slot = ws_ptr + (2 * pid + (0 if owner else 1)) * (BLOCK_M * BLOCK_N)
                store_quarters(slot, acc, 0, 0, BLOCK_M, BLOCK_N, BLOCK_N, 1, False)
                tl.debug_barrier()   # every thread's share of the partial is written before it is read or flagged
                if owner:            # wait for the helpers, add their partials, write C
                    add_partials(c_ptr, ws_ptr, flags_ptr, epoch, scale_a_ptr, scale_b_ptr, pid, run + 1, last_run,
                                 off_m, off_n, M, N, stride_cm, stride_cn, SCALED, BLOCK_M, BLOCK_N, PROGRAMS)
                else:                # a helper: the partial is stored; say so
                    tl.atomic_xchg(flags_ptr + pid, epoch, sem="release")


@triton.jit
def tile_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
               SCALED: tl.constexpr, FAST_ACCUM: tl.constexpr, INT: tl.constexpr, F64: tl.constexpr,
               UPCAST: tl.constexpr, PARTS: tl.constexpr, CHUNK: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The float32 (INT: int32, F64: float64) sum of K steps step_from..step_to - 1 of the tile at
    (off_m, off_n); PARTS == 2: by 3xTF32 (tf32x3_steps)."""
    if PARTS == 2:
        return tf32x3_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, CHUNK, BLOCK_M, BLOCK_N,
                            BLOCK_K)
    if INT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    elif F64:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        if A_T:
            a = a_desc.load([k0, off_m]).T
        else:
            a = a_desc.load([off_m, k0])
        if B_T:
            b = b_desc.load([off_n, k0]).T
        else:
            b = b_desc.load([k0, off_n])
        if INT:
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)    # Triton 3.6 needs out_dtype for int8
        elif F64:
            acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)
        elif UPCAST:   # Triton's interpreter only: see matmul_kernel
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif SCALED and not FAST_ACCUM:
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def tf32x3_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The float32 sum of K steps step_from..step_to - 1 of the tile at (off_m, off_n) by 3xTF32:
    a_desc holds A's TF32 parts stacked, (2M, K), b_desc B^T's, (2N, K); a_hi b_hi + a_hi b_lo +
    a_lo b_hi, from the four tiles loaded once per K step; the missing a_lo b_lo is 2^-22 of a
    product.

    The sum goes in two levels. For CHUNK K steps the tensor cores chain their products, a_hi b_hi
    into one accumulator and the small cross terms into another, started at zero; then the chunk
    joins the running total by one float32 add. The tensor cores add at their accumulator's
    magnitude and drop low bits (accumulated straight into the running total over all of K: 13x
    SGEMM's error, measured), so the chunk is kept short; adding every K step instead drained
    their pipeline each step (1.40x SGEMM against 1.92x at 4096³).
    An Inf or NaN in the operands makes the small products' sum Inf or NaN (Inf times a low part
    of either sign, or times 0); it is dropped, and the a_hi b_hi sum, where Inf and NaN stand
    whole, carries IEEE's result."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(step_from, step_to, CHUNK):
        big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(c0, tl.minimum(c0 + CHUNK, step_to)):    # pipelined, chained
            k0 = step * BLOCK_K
            a_hi = a_desc.load([off_m, k0])
            b_hi = b_desc.load([off_n, k0]).T
            a_lo = a_desc.load([M + off_m, k0])
            b_lo = b_desc.load([N + off_n, k0]).T
            small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
            small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
        acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)    # one float32 add a chunk
    return acc


@triton.jit
def scaled(x, scale_a_ptr, scale_b_ptr, SCALED: tl.constexpr):
    """x times the per-tensor scales (SCALED), else x."""
    if SCALED:
        x = x * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    return x


@triton.jit
def add_partials(c_ptr, ws_ptr, flags_ptr, epoch, scale_a_ptr, scale_b_ptr, pid, run_from, run_to, off_m, off_n,
                 M, N, stride_cm, stride_cn, SCALED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 PROGRAMS: tl.constexpr):
    """C's tile = the owner's partial (in its slot) + those of runs run_from..run_to, each added
    once its program's flag shows this launch's epoch; a quarter of the columns at a time, read
    from L2 (.cg: another SM wrote them)."""
    for run in range(run_from, run_to + 1):
        seen = tl.atomic_add(flags_ptr + (PROGRAMS - 1 - run), 0, sem="acquire")
        while seen != epoch:
            seen = tl.atomic_add(flags_ptr + (PROGRAMS - 1 - run), 0, sem="acquire")
    tl.debug_barrier()
    QUARTER: tl.constexpr = BLOCK_N // 4
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, QUARTER)[None, :]
    for q in tl.static_range(4):
        total = tl.load(ws_ptr + 2 * pid * (BLOCK_M * BLOCK_N) + q * QUARTER + offs, cache_modifier=".cg")
        for run in range(run_from, run_to + 1):
            helper_slot = ws_ptr + (2 * (PROGRAMS - 1 - run) + 1) * (BLOCK_M * BLOCK_N)
            total += tl.load(helper_slot + q * QUARTER + offs, cache_modifier=".cg")
        store_tile(c_ptr, scaled(total, scale_a_ptr, scale_b_ptr, SCALED), off_m, off_n + q * QUARTER, M, N,
                   stride_cm, stride_cn, False)


@triton.jit
def store_quarters(c_ptr, x, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE: tl.constexpr):
    """store_tile in four column quarters: a flattened tile loop keeps the next tile's stages in
    shared memory while this one is written, so the layout change gets a quarter of the space."""
    left, right = halves(x)
    quarter: tl.constexpr = x.shape[1] // 4
    q0, q1 = halves(left)
    q2, q3 = halves(right)
    store_tile(c_ptr, q0, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE)
    store_tile(c_ptr, q1, off_m, off_n + quarter, M, N, stride_cm, stride_cn, ACCUMULATE)
    store_tile(c_ptr, q2, off_m, off_n + 2 * quarter, M, N, stride_cm, stride_cn, ACCUMULATE)
    store_tile(c_ptr, q3, off_m, off_n + 3 * quarter, M, N, stride_cm, stride_cn, ACCUMULATE)


@triton.jit
def halves(x):
    """x's left and right column halves."""
    return tl.split(tl.permute(tl.reshape(x, (x.shape[0], 2, x.shape[1] // 2)), (0, 2, 1)))


@triton.jit
def store_tile(c_ptr, x, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE: tl.constexpr):
    """C[off_m:, off_n:] (+)= x, inside C only; x is added to what C holds for a later K chunk.
    64-bit offsets: a C of 2^31 elements or more is written right."""
    offs_m = tl.arange(0, x.shape[0]).to(tl.int64) + off_m
    offs_n = tl.arange(0, x.shape[1]).to(tl.int64) + off_n
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if ACCUMULATE:                                         # a later K chunk (int64, long K)
        x += tl.load(c_ptrs, mask=inside).to(x.dtype)
    tl.store(c_ptrs, x.to(c_ptr.dtype.element_ty), mask=inside)


@triton.jit
def copy_rows(src, dst, R, C, stride_sr, stride_sc, stride_dr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """dst[r, c] = src[r, c] for r < R, c < C, a BLOCK_R x BLOCK_C tile a program: an operand of
    any strides copied into rows that TMA reads (dst's rows contiguous); 64-bit offsets."""
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    tile = tl.load(src + rows[:, None] * stride_sr + cols[None, :] * stride_sc, mask=mask)
    tl.store(dst + rows[:, None] * stride_dr + cols[None, :], tile, mask=mask)
