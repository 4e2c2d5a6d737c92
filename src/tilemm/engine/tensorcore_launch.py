"""The launch of the tensor-core rungs' programs (`tensorcore` and `tensorcore-f64`): which program
a product takes (the pointer program, the TMA program, or the engine's persistent schedule), the
tiles a shape gets, split K, stream-K, operands copied into aligned rows, and the traffic and
limits of a configuration. The programs themselves are the rung's, passed in (`Programs`): this
module imports nothing of the ladder."""
from __future__ import annotations

from typing import NamedTuple

from tilemm.system import compat
from tilemm.engine import availability, launches, operand_copies, workspaces
from tilemm.engine.operand_copies import descriptor
from tilemm.engine.persistent import persistent_launch
from tilemm.engine.tile_model import (MIN_SPLIT_STEPS, THIN_SIDE, halved_tiles_fill_more, k_splits, model_tiles,
                                      read_k_major, thick_from_k, thin_splits)


class Programs(NamedTuple):
    """A rung's Triton programs, as launcher takes them: its pointer program (matmul_kernel's
    arguments), its TMA program (matmul_tma's; None for a rung that has none) and its sum of a
    tile's K steps, which the persistent schedule (tilemm.engine.programs.matmul_persistent) runs."""
    pointers: object
    tma: object
    steps: object


# Multiply-adds up to which a product takes the pointer program (tma=None): Triton launches a
# program whose arguments are TMA descriptors more slowly (it encodes them at each launch), and a
# copy into aligned rows costs a launch more, while the TMA program's speed only shows past them
# (measured in bf16: at 256³ / 512³ the GPU times are close and the pointer launch is cheaper on the
# CPU; at 2048³ TMA is clearly ahead).
POINTERS_UP_TO = 2**28
# ... and whatever its size, a product whose C is FEW_TILES 128 x 128 tiles or fewer: its deep K is
# split across the SMs either way, and TMA's descriptors and copies into aligned rows cost more than
# its loads save (measured in bf16, kernel alone: pointers far ahead at 3 tiles, TMA ahead from 12
# tiles on).
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
    (tl.dot's smallest). 16-row tiles read B four times over at M = 64, so with N and K large they
    run at about half the speed; where fewer tiles leave SMs idle the 16-row ones are faster (their
    extra programs keep more SMs reading)."""
    return max(16, 1 << max(0, rows - 1).bit_length())


def resolve_tiles(m: int, n: int, k: int, given: dict) -> dict:
    """The caller's tile parameters, with the shape's defaults where they gave None."""
    chosen = default_tiles(m, n, k)
    return {name: chosen[name] if value is None else value for name, value in given.items()}


def stream_k_pays(tiles: int, programs: int, k_steps: int, min_rounds: int) -> bool:
    """Whether to share a last, partial round of tiles out by K steps: when that round leaves most
    SMs idle, after min_rounds whole rounds, with K steps enough to share (3xTF32's stream_k=None,
    r13_f32). Not for 16-bit tiles, whose hand-over of partial sums did not pay: measured kernel
    alone in 128 x 256 tiles, stream-K was slower than none wherever this rule (min_rounds 8) took
    it, and with fewer tiles than SMs far slower than split K."""
    whole, left = divmod(tiles, programs)
    return whole >= min_rounds and 0 < left < 0.6 * programs and k_steps >= 32


def launcher(programs: Programs, a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, persistent=True,
             stream_k=False, split_k=None, align_rows=None, accumulate=False, copy_transposed="a", tma=True):
    """c = a @ b, float16/bfloat16 (float32 sums) or float64, as a function without arguments.
    16-bit operands go through TMA (copied at each launch into 16-byte aligned rows if their
    strides are not), by the persistent program when there is more than one round of tiles and
    persistent is not False (measured as fast or faster on the shapes suite; one
    round is launched more cheaply one program a tile), with stream_k the tiles of a last, partial round shared out by K steps
    (see tilemm.engine.programs.matmul_persistent; also under one round, then every tile's), with split_k > 1 each tile's K steps split
    into that many runs (programs of their own, whose float32 partials the last one adds: see
    hand_over; None: k_splits, or thin_splits for a skinny product whose thin operand is not read
    K-major; 16-bit operands, not with accumulate), and with align_rows rows that
    are not a multiple of 128 bytes copied into rows that are (None: where rows_aligned_pays);
    float64 takes the persistent program (float64 sums) past one round if persistent, else the
    pointer program, as skinny products do (M or N <= 64: bound by reading the other operand,
    where the pointer program's many small loads in flight measured close to the HBM bound and TMA
    far below it); tma=False: the pointer program whatever the shape. accumulate: c += a @ b (c may be
    float32 for 16-bit a and b: tilemm.spread.distributed's panels).
    copy_transposed ("a", "ab", "none"): float64 operands stored column-major that are copied into
    rows first on the TMA path (A by default: see below). programs: the rung's (Programs).
    """
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
        # float64: an M-major A is copied into rows first: DMMA read its transposed tiles far more
        # slowly than a row-major A's (measured on products from 2048), and the copy is a small
        # share of such a product's time
        a_desc, a_t, a_fill = descriptor(a, block_m, block_k, align, transposed=not (f64 and copy_transposed != "none"))
        b_desc, b_t, b_fill = descriptor(b, block_k, block_n, align, transposed=not (f64 and copy_transposed == "ab"),
                                         copy_transpose_rows=not f64)
        fills = [f for f in (a_fill, b_fill) if f]
        tiles = dict(A_T=a_t, B_T=b_t, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                     UPCAST=upcast, ACCUMULATE=accumulate, C_ALIGN=operand_copies.c_alignment(out),
                     num_warps=num_warps, num_stages=num_stages)
        if rounds:
            program = persistent_launch(a_desc, b_desc, out, m, n, k, programs.steps,
                                        stream_k=bool(stream_k) and not f64, **tiles)
        else:
            program = bound(programs.tma, (a_desc, b_desc, out, m, n, k, out.stride(0), out.stride(1)), tiles)
    else:
        target = out
        if accumulate:               # the pointer program writes C whole: its product is added after
            import torch
            partial = target = torch.empty_like(out)
        args = (a, b, target, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), target.stride(0),
                target.stride(1))
        align = load_alignment(m, n, k, *a.stride(), *b.stride(), *target.stride())
        tiles = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, ALIGN=align,
                     num_warps=pointer_warps(block_m, num_warps, narrow_loads(align, a.stride(), b.stride())),
                     num_stages=min(num_stages, per_run))   # stages past a program's K steps only load zeros
        if not f64:                  # float64's pointer program has float64 sums only
            tiles["UPCAST"] = upcast
        program = bound(programs.pointers, args, tiles)

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
    are (align_rows=None). TMA reads such rows much slower (bf16 3000³ in 6000-byte rows against the
    same values in 6016-byte ones, measured). The copies (torch's) read and write each operand once,
    so they pay where the product has many multiply-adds for each operand element: measured kernel
    alone, they gained at 5000³ and lost at 3000³ and 2000³, hence m n k / (m k + k n) from
    ALIGN_ROWS_FROM (n >= 4000 for a square product)."""
    return m * n * k >= ALIGN_ROWS_FROM * (m * k + k * n)


def traffic(p, block_m, block_n, block_k=None, split_k=None, **_) -> tuple:
    """(elements read, elements written) in p's dtype (p: a Problem): A read once per block column
    and B once per block row; with split K, the float32 partial of each run of each tile, written
    and read back once (hand_over). The problem has no layout: split_k=None counts k_splits' runs,
    not thin_splits' (which a thin operand not read K-major takes)."""
    tiles = resolve_tiles(p.m, p.n, p.k, dict(block_m=block_m, block_n=block_n, block_k=block_k))
    block_m, block_n = tiles["block_m"], tiles["block_n"]
    splits = split_k or (k_splits(p.m, p.n, p.k, block_m, block_n, tiles["block_k"]) if p.itemsize == 2 else 1)
    slots = -(-p.m // block_m) * -(-p.n // block_n) * block_m * block_n
    partials = slots * splits * 4 / p.itemsize if splits > 1 else 0
    return (p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m) + partials,
            p.m * p.n + partials)


def limits(p, block_m, block_n, block_k, num_stages, persistent=True, stream_k=False, split_k=None, **_):
    """Why a configuration can't run the problem p, or None."""
    if stream_k and split_k not in (None, 1):
        return (f"stream_k=True shares the K steps of a last round of tiles out itself, and takes no split_k "
                f"(got split_k={split_k}); ask for one or the other")
    t = resolve_tiles(p.m, p.n, p.k, dict(block_m=block_m, block_n=block_n, block_k=block_k, num_stages=num_stages))
    quarter_of_c = t["block_m"] * t["block_n"] // 4 * p.itemsize if persistent and p.itemsize in (2, 8) else 0
    return availability.dimension_limit(p.m, p.n, p.k) or availability.check_shared(t["block_m"], t["block_n"], t["block_k"], t["num_stages"], p.itemsize, quarter_of_c)
