"""Rung 10, `tensorcore`: the tiled GEMM on tensor cores, in Triton: rung 9's program (Triton's
matmul tutorial, r09_tutorial.py) made fast; the programs themselves are in
r10_tensorcore_kernel.py. Each program computes a BLOCK_M x BLOCK_N tile of C: per K step it loads
a (BLOCK_M, BLOCK_K) tile of A and a (BLOCK_K, BLOCK_N) tile of B and `tl.dot` multiplies them on
the tensor cores into float32 accumulators; Triton stages the tiles through shared memory
(num_stages deep) itself. Programs are numbered in groups of GROUP_M block rows so that
neighbours share their B tiles in L2.

What it adds to rung 9: tiles brought in by TMA where a product pays for it (takes_tma: no address
arithmetic, no masks); persistent programs, one an SM, that write one tile while the next one loads;
split K (and stream-K, on request) where the tiles of C leave SMs idle; operands copied into aligned
rows where TMA needs them or reads them faster; tiles chosen by shape (tile_model); 64-bit offsets;
and a bound launcher (bind) that tilemm.engine.replay launches again on a repeated call's operands.

float16 and bfloat16 in, float32 accumulation, rounded once to the input type: what NumPy
does for float16 (and torch for bfloat16). The same program multiplies float64 for rung
`tensorcore-f64` (r12_fp64.py).

Constraints: float16 / bfloat16 only; BLOCK_* >= 16 (tl.dot's smallest tile); any M, N, K,
any strides; shared memory of a configuration must fit the GPU (checked before launch).
"""
from __future__ import annotations

from tilemm.system import compat, tuning
from tilemm.ladder.record import Kernel, Param, Traffic, WholeNumbers, register
from tilemm.engine import availability, operand_copies
from tilemm.ladder.tensorcore import r10_cluster
from tilemm.engine.operand_copies import descriptor
from tilemm.engine import launches, workspaces
from tilemm.engine.persistent import persistent_launch
from tilemm.engine.tile_model import MIN_SPLIT_STEPS, THIN_SIDE, halved_tiles_fill_more, k_splits, model_tiles, read_k_major, thick_from_k, thin_splits


# Candidates for autotune=True (configurations are data, never edits of the kernel); each is
# checked against the shared-memory limit before it is tried.
CANDIDATES = [
    dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),
    dict(block_m=256, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=4),
    dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=4, num_stages=5),
    dict(block_m=64, block_n=256, block_k=64, group_m=8, num_warps=4, num_stages=4),
    dict(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4),
]


def run(a, b, c, **params):
    if params.get("autotune"):
        config, _ = tuned(a, b, c)
        return launch(a, b, c, **config)
    bind(a, b, c, **params)()


def bind(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, persistent=True, stream_k=False,
         split_k=None, align_rows=None, tma=None, autotune=False, cluster=False):
    """run(a, b, c, ...) as a launcher without arguments, the tiles and descriptors worked out
    once: a prepared plan launched many times pays Triton's launch alone (with autotune, the
    configuration is tuned, or read from the tuning cache, here; cluster: r10_cluster's program)."""
    if cluster:
        return r10_cluster.bind(a, b, c)
    if autotune:
        config, _ = tuned(a, b, c)
        return launcher(a, b, c, **config)
    m, k = a.shape
    n = b.shape[1]
    tiles = resolve_tiles(m, n, k, dict(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps,
                                     num_stages=num_stages))
    return launcher(a, b, c, group_m=group_m, persistent=persistent, stream_k=stream_k, split_k=split_k,
                    align_rows=align_rows, tma=tma if tma is not None else takes_tma(m, n, k), **tiles)


# Multiply-adds up to which a product takes the pointer program (tma=None): Triton launches a
# program whose arguments are TMA descriptors ~5 µs slower (it encodes them at each launch), and a
# copy into aligned rows costs a launch more, while the TMA program's speed only shows past them
# (bf16, pointers against TMA: GPU time 3.2 / 4.3 µs against 3.0 / 3.8 µs at 256³ / 512³, CPU time
# of a launch 11.6 / 13.1 µs against 15.9 / 19.8 µs; at 2048³ 37 µs against 27).
POINTERS_UP_TO = 2**28
# ... and whatever its size, a product whose C is FEW_TILES 128 x 128 tiles or fewer: its deep K is
# split across the SMs either way, and TMA's descriptors and copies into aligned rows cost more than
# its loads save (bf16, kernel alone: pointers 0.895x cuBLAS against TMA's 0.375x at 79 x 350 x 12726
# tn, 3 tiles; TMA ahead from 12 tiles on).
FEW_TILES = 8


def takes_tma(m: int, n: int, k: int) -> bool:
    """Whether a product takes the TMA programs when the caller says neither (tma=None)."""
    return m * n * k > POINTERS_UP_TO and -(-m // 128) * -(-n // 128) > FEW_TILES


def default_tiles(m: int, n: int, k: int) -> dict:
    """The configuration a shape gets when the caller names none. A skinny product (M or N <= 64)
    is bound by reading the other operand: K-deep tiles (many loads in flight) 64 long the other
    way, 16 rows (columns) or, where the other side alone gives half the SMs a tile (or, split by
    K, fills them; or, with K from tile_model.thick_from_k, split by k_splits fills half), as tall
    (wide) as M (N), so that the other operand is read once (skinny_block).
    Otherwise the tiles tile_model predicts fastest: wave quantization decides between big efficient
    tiles and enough of them to fill the SMs (bf16 512 x 3072 x 2048: 128 x 128, 96 tiles;
    512 x 5120 x 4096: 128 x 256, 80 tiles); 64 x 64 where 64 x 128 ones, K split, leave SMs idle
    and those fill more (halved_tiles_fill_more)."""
    sms = availability.multiprocessors()
    if min(m, n) <= 64:
        rows, other = (m, n) if m <= n else (n, m)
        cover = max(1, -(-other // 64))        # an empty C (M = N = 0) still plans one tile
        splits = min(sms // cover, -(-k // 128) // MIN_SPLIT_STEPS) if 2 * cover <= sms else 1
        def oriented(side: int) -> tuple:
            return (side, 64) if m <= n else (64, side)
        thick = oriented(skinny_block(rows))
        filled = (2 * cover >= sms or cover * splits >= sms
                  or k >= thick_from_k(rows) and 2 * cover * k_splits(m, n, k, *thick, 128) >= sms)
        tiles = thick if filled else oriented(16)
        return dict(block_m=tiles[0], block_n=tiles[1], block_k=128, num_warps=4, num_stages=4)
    bm, bn, warps = model_tiles(m, n, k)
    if (bm, bn) == (64, 128) and halved_tiles_fill_more(m, n, k):
        bn = 64
    return dict(block_m=bm, block_n=bn, block_k=64, num_warps=warps, num_stages=4)


def skinny_block(rows: int) -> int:
    """The tile side that covers a skinny dimension of 64 or fewer rows: a power of two, 16 or more
    (tl.dot's smallest). 16-row tiles read B four times over at M = 64 (bf16 64 x 8192 x 8192 97.7
    µs against 50.8, cuBLAS 49.9); where fewer tiles leave SMs idle the 16-row ones are faster
    (64 x 2048 x 2048: 25.8 µs against 33.6)."""
    return max(16, 1 << max(0, rows - 1).bit_length())


def resolve_tiles(m: int, n: int, k: int, given: dict) -> dict:
    """The caller's tile parameters, with the shape's defaults where they gave None."""
    chosen = default_tiles(m, n, k)
    return {name: chosen[name] if value is None else value for name, value in given.items()}


def launch(a, b, c, **config):
    """One launch: c = a @ b (see launcher)."""
    launcher(a, b, c, **config)()


def stream_k_pays(tiles: int, programs: int, k_steps: int, min_rounds: int) -> bool:
    """Whether to share a last, partial round of tiles out by K steps: when that round leaves most
    SMs idle, after min_rounds whole rounds, with K steps enough to share (3xTF32's stream_k=None,
    r13_f32). Not for 16-bit tiles, whose hand-over of partial sums did not pay: kernel alone,
    128 x 256 tiles, stream-K against none 0.88-0.99x where this rule (min_rounds 8) took it, e.g.
    4096 x 14336 x 4096 0.93x, 16384 x 8192 x 2048 0.88x, and with fewer tiles than SMs 0.2-0.8x
    against split K."""
    whole, left = divmod(tiles, programs)
    return whole >= min_rounds and 0 < left < 0.6 * programs and k_steps >= 32


def launcher(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, persistent=True, stream_k=False,
             split_k=None, align_rows=None, accumulate=False, copy_transposed="a", tma=True):
    """c = a @ b, float16/bfloat16 (float32 sums) or float64, as a function without arguments.
    16-bit operands go through TMA (copied at each launch into 16-byte aligned rows if their
    strides are not), by the persistent program when there is more than one round of tiles and
    persistent is not False (as fast or faster on the shapes suite, 1.3x at 8192x8192x128; one
    round is launched more cheaply one program a tile), with stream_k the tiles of a last, partial round shared out by K steps
    (see matmul_persistent; also under one round, then every tile's), with split_k > 1 each tile's K steps split
    into that many runs (programs of their own, whose float32 partials the last one adds: see
    hand_over; None: k_splits, or thin_splits for a skinny product whose thin operand is not read
    K-major; 16-bit operands, not with accumulate), and with align_rows rows that
    are not a multiple of 128 bytes copied into rows that are (None: where rows_aligned_pays);
    float64 takes the persistent program (float64 sums) past one round if persistent, else the
    pointer program, as skinny products do (M or N <= 64: bound by reading the other operand,
    where the pointer program's many small loads in flight measured 0.94 of the HBM bound and TMA
    0.5); tma=False: the pointer program whatever the shape. accumulate: c += a @ b (c may be
    float32 for 16-bit a and b: tilemm.spread.distributed's panels).
    copy_transposed ("a", "ab", "none"): float64 operands stored column-major that are copied into
    rows first on the TMA path (A by default: see below).
    """
    from tilemm.engine.programs import matmul_kernel, matmul_tma  # Triton loads on first use
    m, k = a.shape
    n = b.shape[1]
    if k == 0:                       # an empty sum (and no tensor to describe)
        return (lambda: None) if accumulate else c.zero_
    # Triton 3.9's interpreter gets bfloat16 wrong twice (tl.dot, and float32 -> bfloat16 by
    # truncation): there, the kernel multiplies in float32 and torch rounds the result.
    upcast = compat.triton_interpreter() and str(c.dtype) == "torch.bfloat16"
    out = c.float() if upcast else c
    f64 = a.element_size() == 8
    k_steps = -(-k // block_k)
    if accumulate or f64 or stream_k:
        split_k = 1
    elif split_k is None and min(m, n) <= THIN_SIDE and not (read_k_major(a, 1) if m <= n else read_k_major(b, 0)):
        split_k = thin_splits(m, n, k, block_m, block_n, block_k)
    elif split_k is None:
        split_k = k_splits(m, n, k, block_m, block_n, block_k)
    tiles_of_c = -(-m // block_m) * -(-n // block_n)
    slots = (2**31 - 1) // max(1, tiles_of_c * block_m * block_n)      # partials addressed by 32-bit offsets
    per_run = -(-k_steps // max(1, min(split_k, k_steps, slots)))
    splits = -(-k_steps // per_run)              # no empty run
    fills, partial = [], None
    sms = availability.multiprocessors()
    # the persistent program past one round of tiles, or with stream-K asked for under one round
    rounds = persistent and splits == 1 and (tiles_of_c > sms or (stream_k and not f64 and tiles_of_c < sms))

    def bound(program, args, options):
        """program on a grid of tiles, or of tiles and runs of K steps (split K, each run's
        partial handed over in one launch; not while a CUDA graph is captured)."""
        whole = launches.bound_launch(program, (tiles_of_c,), args, options)
        if splits == 1:
            return whole
        return workspaces.SplitKLaunch(program, (tiles_of_c, splits), args, {**options, "split_steps": per_run}, whole,
                                    block_m, block_n)
    if tma and min(m, n) > 64 and (a.element_size() == 2 or (f64 and rounds)):
        if align_rows is None:
            align_rows = rows_aligned_pays(m, n, k)
        align = 128 if align_rows and a.element_size() == 2 else 16
        # float64: an M-major A is copied into rows first: DMMA read its transposed tiles at
        # 0.51-0.70x DGEMM against 0.85-1.03x for a row-major A (products from 2048); the copy is
        # ~1% of such a product's time
        a_desc, a_t, a_fill = descriptor(a, block_m, block_k, align, transposed=not (f64 and copy_transposed != "none"))
        b_desc, b_t, b_fill = descriptor(b, block_k, block_n, align, transposed=not (f64 and copy_transposed == "ab"),
                                         copy_transpose_rows=not f64)
        fills = [f for f in (a_fill, b_fill) if f]
        tiles = dict(A_T=a_t, B_T=b_t, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                     UPCAST=upcast, ACCUMULATE=accumulate, C_ALIGN=operand_copies.c_alignment(out),
                     num_warps=num_warps, num_stages=num_stages)
        if rounds:
            program = persistent_launch(a_desc, b_desc, out, m, n, k, stream_k=bool(stream_k) and not f64,
                                                F64=f64, **tiles)
        else:
            program = bound(matmul_tma, (a_desc, b_desc, out, m, n, k, out.stride(0), out.stride(1)), tiles)
    else:
        target = out
        if accumulate:               # the pointer program writes C whole: its product is added after
            import torch
            partial = target = torch.empty_like(out)
        args = (a, b, target, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), target.stride(0),
                target.stride(1))
        align = load_alignment(m, n, k, *a.stride(), *b.stride(), *target.stride())
        tiles = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, UPCAST=upcast,
                     FP64=str(a.dtype) == "torch.float64", ALIGN=align,
                     num_warps=pointer_warps(block_m, num_warps, narrow_loads(align, a.stride(), b.stride())),
                     num_stages=min(num_stages, per_run))   # stages past a program's K steps only load zeros
        program = bound(matmul_kernel, args, tiles)

    if partial is None and not upcast:
        return launches.Steps([*fills, program])       # copies and launches: a repeated call can replay them

    def go():
        for fill in fills:
            fill()
        program()
        if partial is not None:
            out.add_(partial)
        if upcast:
            c.copy_(out)
    return go


def load_alignment(*values: int) -> tuple:
    """For each of M, N, K and the strides of A, B and C, the largest power of two up to 8 dividing
    it: what the pointer program is told (matmul_kernel's ALIGN), so that its loads of rows of 1000
    or 20 elements go 8 or 4 elements at a time. Triton itself only knows divisibility by 16."""
    return tuple(value & -value if value and value & 7 else 8 for value in values)


def narrow_loads(align: tuple, a_strides: tuple, b_strides: tuple) -> bool:
    """Whether the pointer program loads an operand 2 elements at a time or fewer: along its
    contiguous axis, the extent (K, or M / N) or the other stride divides by no more."""
    m, n, k = align[:3]
    along_a = k if a_strides[1] == 1 else m          # A's contiguous axis: K, else M
    along_b = n if b_strides[1] == 1 else k
    return min(along_a, align[3] if a_strides[1] == 1 else align[4],
               along_b, align[5] if b_strides[1] == 1 else align[6]) <= 2


def pointer_warps(block_m: int, num_warps: int, narrow: bool) -> int:
    """The pointer program's warps: 8 for tiles of 64 rows or more whose loads are narrow, which
    each thread issues element by element (64 x 128 tiles on 4 warps held 96 loads a thread in
    flight: 255 registers and spills, compiled for sm_90)."""
    return 8 if narrow and block_m >= 64 and num_warps == 4 else num_warps


# (m * n * k) / (m * k + k * n) from which copying into 128-byte aligned rows pays (align_rows=None)
ALIGN_ROWS_FROM = 2000


def rows_aligned_pays(m: int, n: int, k: int) -> bool:
    """Whether to copy 16-bit operands whose rows are not a multiple of 128 bytes into rows that
    are (align_rows=None). TMA reads such rows much slower: bf16 3000³ ran 139 µs with 6000-byte
    rows against 103 µs with the same values in 6016-byte ones. The copies (torch's, ~23 µs an
    operand at 3000²) read and write each operand once, so they pay where the product has many
    multiply-adds for each operand element: kernel alone, 5000³ 0.76x cuBLAS with them against
    0.72x, but 3000³ 0.61x against 0.66x and 2000³ 0.52x against 0.79x: m n k / (m k + k n) from
    ALIGN_ROWS_FROM (n >= 4000 for a square product)."""
    return m * n * k >= ALIGN_ROWS_FROM * (m * k + k * n)


def tuned(a, b, c):
    """The fastest candidate for this device, dtype, shape and layout, tuned once and then
    read from tilemm's tuning cache (see tilemm.system.tuning)."""
    import torch
    m, k = a.shape
    n = b.shape[1]
    layout = ("n" if a.stride(1) == 1 else "t") + ("n" if b.stride(1) == 1 else "t")
    device = "interpreter" if compat.triton_interpreter() else torch.cuda.get_device_name(a.device)
    key = f"tensorcore|{device}|{str(a.dtype).removeprefix('torch.')}|{m}x{n}x{k}|{layout}"
    fitting = [cfg for cfg in CANDIDATES
               if availability.check_shared(cfg["block_m"], cfg["block_n"], cfg["block_k"], cfg["num_stages"], 2) is None]

    def time_ms(cfg):
        if compat.triton_interpreter():  # no clock worth reading: run it once, keep the first
            launch(a, b, c, **cfg)
            return float(fitting.index(cfg))
        import triton.testing
        return triton.testing.do_bench(lambda: launch(a, b, c, **cfg), warmup=25, rep=100, return_mode="median")
    return tuning.best(key, fitting, time_ms)


def traffic(p, block_m, block_n, block_k=None, split_k=None, cluster=False, **_):
    """A read once per block column and B once per block row; with split K, the float32 partial
    of each run of each tile, written and read back once (hand_over), in elements of p's dtype.
    The problem has no layout: split_k=None counts k_splits' runs, not thin_splits' (which a
    thin operand not read K-major takes). cluster: its program's tiles."""
    if cluster:
        return traffic(p, **r10_cluster.CLUSTER_TILE, split_k=1)
    tiles = resolve_tiles(p.m, p.n, p.k, dict(block_m=block_m, block_n=block_n, block_k=block_k))
    block_m, block_n = tiles["block_m"], tiles["block_n"]
    splits = split_k or (k_splits(p.m, p.n, p.k, block_m, block_n, tiles["block_k"]) if p.itemsize == 2 else 1)
    slots = -(-p.m // block_m) * -(-p.n // block_n) * block_m * block_n
    partials = slots * splits * 4 / p.itemsize if splits > 1 else 0
    return Traffic(read=p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m) + partials,
                   written=p.m * p.n + partials)


def limits(p, block_m, block_n, block_k, num_stages, persistent=True, stream_k=False, split_k=None, cluster=False,
           **params):
    if cluster:
        return r10_cluster.limits(p, block_m=block_m, block_n=block_n, block_k=block_k, num_stages=num_stages,
                                  persistent=persistent, stream_k=stream_k, split_k=split_k, **params)
    if stream_k and split_k not in (None, 1):
        return (f"stream_k=True shares the K steps of a last round of tiles out itself, and takes no split_k "
                f"(got split_k={split_k}); ask for one or the other")
    t = resolve_tiles(p.m, p.n, p.k, dict(block_m=block_m, block_n=block_n, block_k=block_k, num_stages=num_stages))
    quarter_of_c = t["block_m"] * t["block_n"] // 4 * p.itemsize if persistent and p.itemsize in (2, 8) else 0
    return availability.dimension_limit(p.m, p.n, p.k) or availability.check_shared(t["block_m"], t["block_n"], t["block_k"], t["num_stages"], p.itemsize, quarter_of_c)


BLOCKS = (16, 32, 64, 128, 256)


def tile_params(block_m, block_n, block_k, num_warps, num_stages, group_m=8, chosen_by="shape"):
    """The tile parameters of a Triton GEMM rung, with these defaults (None: chosen by shape, or
    by what chosen_by names)."""
    def doc(default, text):
        return text + (f" (None: chosen by {chosen_by})" if default is None else "")

    def none(default):
        return (None,) * (default is None)
    return (Param("block_m", block_m, none(block_m) + BLOCKS, doc(block_m, "rows of C per program")),
            Param("block_n", block_n, none(block_n) + BLOCKS, doc(block_n, "columns of C per program")),
            Param("block_k", block_k, none(block_k) + (16, 32, 64, 128), doc(block_k, "depth of one K step")),
            Param("group_m", group_m, (1, 2, 4, 8, 16), "block rows walked before the next column (L2 reuse)"),
            Param("num_warps", num_warps, none(num_warps) + (1, 2, 4, 8, 16), doc(num_warps, "warps per program")),
            Param("num_stages", num_stages, none(num_stages) + (1, 2, 3, 4, 5),
                  doc(num_stages, "software-pipelining depth (shared-memory stages)")))


TILE_PARAMS = tile_params(None, None, None, num_warps=None, num_stages=None)
register(Kernel(
    name="tensorcore", rung=10, device="cuda", backend="triton", dtypes=("float16", "bfloat16"),
    seed="beyond", summary="Triton tl.dot on tensor cores: tiles staged through shared memory, grouped order",
    run=run, bind=bind, traffic=traffic, limits=limits, available=availability.available,
    params=TILE_PARAMS + (
            Param("persistent", True, (False, True),
                  "16-bit operands: one program an SM walks the tiles, writing a tile while the next one "
                  "loads; False: one program a tile"),
            Param("stream_k", False, (False, True),
                  "16-bit operands: the tiles of a last, partial round (or of the only one) are shared out by "
                  "K steps among all SMs by the persistent program; off by default: it measured slower "
                  "(stream_k_pays)"),
            Param("split_k", None, WholeNumbers(1, 256),
                  "16-bit operands: each tile's K steps split into this many runs, programs of their own whose "
                  "float32 partials the last to finish adds up (1: no split); None: where one round of tiles "
                  "leaves half the SMs idle, enough runs to fill them (k_splits); for M or N <= 16 with that "
                  "thin operand not read K-major, two rounds of SMs (thin_splits)"),
            Param("align_rows", None, (None, False, True),
                  "16-bit operands whose rows are not a multiple of 128 bytes are copied into rows that are "
                  "(TMA reads them faster); None: where the product does enough work per operand element "
                  "(rows_aligned_pays)"),
            Param("tma", None, (None, False, True),
                  "operands read through TMA descriptors (True) or by pointers (False); None: TMA past 2^28 "
                  "multiply-adds (a smaller product is launched more cheaply by pointers: POINTERS_UP_TO) "
                  "but for a C of 8 tiles or fewer (FEW_TILES)"),
            Param("autotune", False, (False, True),
                  "time the CANDIDATES once per device, dtype, shape and layout, cache the winner on disk, "
                  "and use it (the other parameters are then ignored)"),
            Param("cluster", False, (False, True),
                  "Hopper, with a Triton whose Gluon has clusters (3.9): the Gluon program in clusters of two "
                  "CTAs, 256 x 256 tiles, B loaded once for both (r10_cluster; its own tiles: the tile "
                  "parameters stay at their defaults); refused elsewhere"),),
))
