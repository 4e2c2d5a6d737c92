"""The tensor-core rungs' shared Triton programs: the tile order (tile_position), the persistent
tile schedule with stream-K (matmul_persistent, which each rung fills with its own sum of K steps),
split K's hand-over, C's stores, and the copy into aligned rows. Kept apart so that importing
tilemm never imports Triton: it loads on the first launch, after TRITON_INTERPRET is read."""
import triton
import triton.language as tl


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
def step_tiles(a_desc, b_desc, off_m, off_n, k0, A_T: tl.constexpr, B_T: tl.constexpr):
    """The tiles of A and B of the K step at k0 for the tile at (off_m, off_n), brought in by TMA:
    a_desc describes A, or A^T when A_T; b_desc B, or B^T when B_T (what a rung's sum of K steps
    loads each step)."""
    if A_T:
        a = a_desc.load([k0, off_m]).T
    else:
        a = a_desc.load([off_m, k0])
    if B_T:
        b = b_desc.load([off_n, k0]).T
    else:
        b = b_desc.load([k0, off_n])
    return a, b


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
                      M, N, K, stride_cm, stride_cn, STEPS: tl.constexpr, OPTION: tl.constexpr,
                      A_T: tl.constexpr, B_T: tl.constexpr, STREAM_K: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                      UPCAST: tl.constexpr, FLATTEN: tl.constexpr, ACCUMULATE: tl.constexpr, C_ALIGN: tl.constexpr = 1,
                      STREAM_K_ONLY: tl.constexpr = False, ROW_SCALES: tl.constexpr = False):
    """The persistent tile schedule: PROGRAMS programs (one an SM) walk the tiles of C, and STEPS,
    the rung's sum of a tile's K steps, fills each (a @triton.jit function passed as a constexpr:
    STEPS(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T, B_T, UPCAST, OPTION,
    BLOCK_M, BLOCK_N, BLOCK_K) returns the tile's sum of K steps step_from..step_to - 1; OPTION is
    the rung's own constexpr). a_desc describes A, or A^T when A_T; b_desc B, or B^T when B_T.
    FLATTEN: the tile loop flattened into the K loop, so the next tile's loads are in flight while
    this one's C is written (in quarters: the stages still hold shared memory then); a STEPS
    whose K loop is two loops already is not flattened.

    STREAM_K: whole rounds of PROGRAMS tiles go as above; the tiles left over, which would keep
    a few SMs busy for one more round while the rest idle, are shared out by K steps instead,
    each program an equal run of steps (stream-K). A tile's first run belongs to its owner; the
    others store their partial sums in the workspace (two BLOCK_M x BLOCK_N float32 slots a
    program) and raise their flag to this launch's `epoch`; the owner waits for those flags, adds
    the partials and writes C. Runs are handed out in reverse program order, so an owner's
    helpers have lower program ids (Triton's interpreter runs programs in order) and finish their
    share of the tile first (it is the first thing each does). Float32 sums only.
    STREAM_K_ONLY (with STREAM_K, for a launch with fewer tiles than PROGRAMS): no whole round, so
    the program leaves that loop out, a fifth less to compile (a first call's wait), the same sums.

    scale_a_ptr and scale_b_ptr given: C = scale_a * scale_b * sums (tilemm.scaled_matmul): one
    number each, or with ROW_SCALES one a row of C (M,) and one a column (N,), unit strides.
    ACCUMULATE (whole tiles only, no stream-K): C += A @ B, C read and written in its own dtype
    (tilemm.spread.distributed adds each K panel's 16-bit product into float32 C).
    """
    tl.static_assert(not (ACCUMULATE and STREAM_K))
    tl.static_assert(STREAM_K or not STREAM_K_ONLY)
    N, stride_cm = N // C_ALIGN * C_ALIGN, stride_cm // C_ALIGN * C_ALIGN    # no-ops that say C_ALIGN divides them
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    if STREAM_K:
        whole_rounds = num_tiles - num_tiles % PROGRAMS
    else:
        whole_rounds = num_tiles
    if not STREAM_K_ONLY:
        for tile in tl.range(pid, whole_rounds, PROGRAMS, flatten=FLATTEN):
            off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            acc = STEPS(a_desc, b_desc, off_m, off_n, 0, k_steps, M, N, A_T, B_T, UPCAST, OPTION, BLOCK_M, BLOCK_N,
                        BLOCK_K)
            store_quarters(c_ptr, scaled(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_SCALES), off_m, off_n,
                           M, N, stride_cm, stride_cn, ACCUMULATE)
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
            acc = STEPS(a_desc, b_desc, off_m, off_n, lo - first, hi - first, M, N, A_T, B_T, UPCAST, OPTION,
                        BLOCK_M, BLOCK_N, BLOCK_K)
            tl.static_assert(acc.dtype == tl.float32, "stream-K hands float32 partial sums over")
            last_run = (first + k_steps - 1) // per
            if lo == first and last_run == run:      # the whole tile is this run's: straight to C
                store_quarters(c_ptr, scaled(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_SCALES), off_m,
                               off_n, M, N, stride_cm, stride_cn, False)
            else:
                owner = lo == first
                # two slots a program: a helper's partial (its first segment, at most one) must
                # outlive the partials of the tiles it owns after it
                slot = ws_ptr + (2 * pid + (0 if owner else 1)) * (BLOCK_M * BLOCK_N)
                store_quarters(slot, acc, 0, 0, BLOCK_M, BLOCK_N, BLOCK_N, 1, False)
                tl.debug_barrier()   # every thread's share of the partial is written before it is read or flagged
                if owner:            # wait for the helpers, add their partials, write C
                    add_partials(c_ptr, ws_ptr, flags_ptr, epoch, scale_a_ptr, scale_b_ptr, pid, run + 1, last_run,
                                 off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, PROGRAMS, ROW_SCALES)
                else:                # a helper: the partial is stored; say so
                    tl.atomic_xchg(flags_ptr + pid, epoch, sem="release")


@triton.jit
def scaled(x, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_SCALES: tl.constexpr):
    """x, C's tile at (off_m, off_n), times the scales where they are given, else x: per-tensor
    (one number each) or, ROW_SCALES, row-wise: scale_a one a row of C, scale_b one a column (unit
    strides; past M and N read as 0: those elements are never stored)."""
    if scale_a_ptr is not None:
        if ROW_SCALES:
            rows = off_m + tl.arange(0, x.shape[0])                                        # (BM,)
            cols = off_n + tl.arange(0, x.shape[1])                                        # (BN,)
            scale_a = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
            scale_b = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
            x = x * (scale_a[:, None] * scale_b[None, :])
        else:
            x = x * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    return x


@triton.jit
def add_partials(c_ptr, ws_ptr, flags_ptr, epoch, scale_a_ptr, scale_b_ptr, pid, run_from, run_to, off_m, off_n,
                 M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PROGRAMS: tl.constexpr,
                 ROW_SCALES: tl.constexpr):
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
        store_tile(c_ptr, scaled(total, scale_a_ptr, scale_b_ptr, off_m, off_n + q * QUARTER, M, N, ROW_SCALES),
                   off_m, off_n + q * QUARTER, M, N, stride_cm, stride_cn, False)


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


@triton.jit
def step_rows(a_ptrs, in_m, offs_k, K, step, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """A's (BLOCK_M, BLOCK_K) tile at K step `step`, pointers given: rows past M (in_m False) and,
    unless EVEN_K, K past its end read as zeros."""
    if EVEN_K:
        return tl.load(a_ptrs, mask=in_m, other=0)
    return tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < K - step * BLOCK_K), other=0)
