"""The fp8 program behind ``tilemm.scaled_matmul``: float8 (e4m3 / e5m2) products with per-tensor scales on Hopper's
8-bit tensor cores, in Triton; what torch._scaled_mm computes. Called by tilemm.scaled_matmul
(NumPy has no fp8 dtype: its record, `scaled-fp8`, is a product program that tilemm.matmul never
picks; run directly, it multiplies with unit scales).

C = (scale_a * scale_b) * (A @ B), float32 sums, one rounding to C's dtype (bfloat16, float16 or
float32). Row-wise scales (scale_a (M, 1), scale_b (1, N): bind's row_wise) run the same programs,
each element of C times its row's and its column's scale as it is written: C = sums *
(scale_a[m] * scale_b[n]), the scales' vectors loaded once a tile, after the K loop. The 8-bit instruction reads both operands K-major: A row-major and B given as
(N, K).T (torch._scaled_mm's own requirement) are used as they are; any other layout is copied
K-major first, a pass whose time counts.

On Hopper, float32 sums with the default tiles and K >= 4096 run a warp-specialized Gluon program
instead (scaled_fp8_gluon_kernel.py: each 64-row warpgroup adds its own products while the other's
run): faster than the Triton program there, measured on the wide sweep's held-out half. cluster=True runs it, where
Triton's Gluon can (3.9), in clusters of two CTAs that load each B tile once for both
(scaled_fp8_cluster_kernel.py): not the default, hardly faster (docs/ladder/scaled-fp8.md). Products of a few rows take
64-row tiles, with stream-K where K is deep (thin_tiles); those whose tiles would
fill half the SMs or fewer, 128 x 128 tiles (MID_TILES).

Constraints: float8_e4m3fn / float8_e5m2 (mixed too); compute capability 8.9 or newer; BLOCK_K a
multiple of 32 on the GPU; shared memory of a configuration must fit (checked before launch);
cluster=True with per-tensor scales only.
"""
from __future__ import annotations

from tilemm.system import compat
from tilemm.ladder.record import Kernel, Param, Traffic, register
from tilemm.engine import availability, launches, operand_copies
from tilemm.engine.persistent import persistent_launch

DEFAULTS = dict(block_m=None, block_n=None, block_k=128, group_m=8, num_warps=8, num_stages=4, stream_k=False,
                warp_specialized=None, cluster=False)
TILE_PARAMS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "stream_k")
# K from which float32 sums take the warp-specialized program (warp_specialized=None). It writes
# each tile's C before it loads the next tile's first stages, where the Triton program overlaps
# the two: a tile needs K steps enough to hide that. Chosen on the wide sweep's fit half (whole
# calls, against the Triton program): the 2048 <= K < 4096 band gained nothing, and short K lost
# badly; the held-out half confirmed the threshold.
WARP_SPECIALIZED_FROM_K = 4096
# A product of a few rows (M <= THIN_M: decode) takes THIN_TILES where they make less than a round
# of tiles, with the K steps shared out among all SMs (stream-K) where those tiles fill half the
# SMs or fewer and K is deep (from THIN_STREAM_K_FROM_K). Fitted in whole calls, M of 1-128
# against N x K of transformer weights: the thin tiles win where the default's tiles leave most
# SMs idle, stream-K on top of them only where K is deep (at K = 8192 it gained nothing, at 4096 it
# lost); they are level where the default's tiles are few already (4096 x 4096, 14336 x 4096) and
# slower past a round (28672 x 8192).
THIN_M = 256
THIN_TILES = dict(block_m=64, block_n=128, num_warps=4)
THIN_STREAM_K_FROM_K = 12288
# A product whose default tiles fill half the SMs or fewer, and that thin_tiles does not take,
# takes MID_TILES: twice as many tiles. Fitted in whole calls, M of 256-2048 against N x K of
# transformer weights: faster where the default's tiles leave more than half the SMs idle (both
# accumulations), level at 512 x 3072 x 2048; where the default's tiles fill more than half the
# SMs the smaller ones ran slower.
MID_TILES = dict(block_m=128, block_n=128, num_warps=8)


def resolve(config: dict, fast_accum: bool, m: int = 0, n: int = 0, k: int = 0) -> dict:
    """The tiles where block_m / block_n are None, the fastest at 8192³: 128 x 256 with fast
    accumulation, 256 x 128 without
    (the extra float32 sum of each K step runs better on two 128-row warp groups); and
    warp_specialized where it is None: float32 sums with the default tiles, K from
    WARP_SPECIALIZED_FROM_K, on Hopper. With every tile parameter at its default and
    warp_specialized not True, a product of a few rows takes thin_tiles', and one whose tiles fill
    half the SMs or fewer MID_TILES, either accumulation. cluster=True asks for the
    warp-specialized program in clusters of two CTAs (warp_specialized None becomes True)."""
    if config["cluster"] and config["warp_specialized"] is None:
        config = {**config, "warp_specialized": True}
    defaults = all(config[p] == DEFAULTS[p] for p in TILE_PARAMS)
    # the tiles are the rung's to choose
    free = defaults and config["warp_specialized"] is not True and not config["cluster"]
    thin = thin_tiles(m, n, k) if free else None
    if thin is not None:
        return {**config, **thin, "warp_specialized": False}
    tile_m, tile_n = (128, 256) if fast_accum else (256, 128)
    warp_specialized = config["warp_specialized"]
    if warp_specialized is None:
        warp_specialized = not fast_accum and k >= WARP_SPECIALIZED_FROM_K and defaults and availability.hopper_gluon()
    if warp_specialized:
        from tilemm.ladder.tensorcore import scaled_fp8_gluon_kernel as ws
        tile_m, tile_n = ws.BLOCK_M, ws.BLOCK_N
    if free and m and n and -(-m // tile_m) * -(-n // tile_n) <= availability.multiprocessors() // 2:
        return {**config, **MID_TILES, "warp_specialized": False}
    return {**config, "block_m": config["block_m"] or tile_m, "block_n": config["block_n"] or tile_n,
            "warp_specialized": warp_specialized}


def thin_tiles(m: int, n: int, k: int) -> dict | None:
    """The tile parameters of an M x N x K product of a few rows (THIN_TILES, stream_k where it
    pays), or None where the default's tiles stay."""
    tiles = -(-m // THIN_TILES["block_m"]) * -(-n // THIN_TILES["block_n"])
    sms = availability.multiprocessors()
    if not 0 < m <= THIN_M or tiles >= sms:
        return None
    return {**THIN_TILES, "stream_k": 2 * tiles <= sms and k >= THIN_STREAM_K_FROM_K}


def limits(block_m: int, block_n: int, block_k: int, num_stages: int, interpreter: bool, fast_accum: bool = False,
           warp_specialized: bool = False, cluster: bool = False, row_wise: bool = False) -> str | None:
    if cluster:
        if row_wise:
            return "cluster=True takes per-tensor scales; row-wise scales run on one CTA a tile"
        if not warp_specialized:
            return "cluster=True is the warp-specialized program's; warp_specialized=False refuses it"
        if fast_accum:
            return "cluster=True is the float32 sums' program; fast_accum=True takes the Triton one"
        refusal = availability.gluon_multicast_refusal("cluster=True")
        if refusal:
            return refusal
    if warp_specialized:
        if fast_accum:
            return "warp_specialized=True is the float32 sums' program; fast_accum=True takes the Triton one"
        refusal = availability.hopper_gluon_refusal("warp_specialized=True")
        if refusal:
            return refusal
        from tilemm.ladder.tensorcore import scaled_fp8_gluon_kernel as ws
        return availability.check_shared(ws.BLOCK_M, ws.BLOCK_N, ws.BLOCK_K, ws.STAGES, 1)
    if block_k % 32 and not interpreter:
        return f"block_k={block_k}: the 8-bit tensor-core instruction takes K in multiples of 32"
    # C is written in float32 quarters while the next tile's stages load
    return availability.check_shared(block_m, block_n, block_k, num_stages, 1, epilogue=block_m * block_n)


def bind(a, b, c, scale_a, scale_b, fast_accum, block_m, block_n, block_k, group_m, num_warps, num_stages,
         stream_k=False, warp_specialized=False, cluster=False, row_wise=False):
    """c = scale_a * scale_b * (a @ b) as a launcher without arguments (a Steps: any copy of an
    operand K-major, then the product), which tilemm.engine.replay can run again on other operands:
    a (M, K), b (K, N) fp8; scale_a, scale_b one-element float32 tensors on a's device, or with
    row_wise (M, 1) and (1, N) ones (row-wise scales: the same programs, which multiply each
    element of C by its row's and its column's scale as they write it); c (M, N) on the GPU,
    M, N, K > 0. warp_specialized: the Gluon program (its own tiles; the others ignored); with
    cluster, its form in clusters of two CTAs (per-tensor scales only)."""
    m, k = a.shape
    n = b.shape[1]
    scale_fills = []
    if row_wise and cluster:
        raise ValueError("scaled-fp8: cluster=True takes per-tensor scales")
    if row_wise:      # the programs read the scales as vectors of unit stride: copies where they are not
        (scale_a, fill_a), (scale_b, fill_b) = unit_stride(scale_a), unit_stride(scale_b)
        scale_fills = [fill_a, fill_b]
    if warp_specialized and cluster:
        from tilemm.ladder.tensorcore import scaled_fp8_cluster_kernel as clustered
        a_rows, a_fill = operand_copies.aligned_rows(a)
        b_rows, b_fill = operand_copies.aligned_rows(b.T)              # (N, K): B K-major
        product = clustered.launcher(*clustered.descriptors(a_rows, b_rows), c, scale_a, scale_b, m, n, k,
                                     availability.multiprocessors())
        return launches.Steps([a_fill, b_fill, product])
    if warp_specialized:
        from tilemm.ladder.tensorcore import scaled_fp8_gluon_kernel as ws
        from tilemm.engine.gluon_helpers import descriptor
        # the operands (copied into aligned rows where TMA needs it) as row_descriptor reads them
        a_rows, a_fill = operand_copies.row_descriptor(a, ws.BLOCK_M, ws.BLOCK_K)
        b_rows, b_fill = operand_copies.row_descriptor(b.T, ws.BLOCK_N, ws.BLOCK_K)
        product = ws.launcher(descriptor(a_rows.base, ws.BLOCK_M, ws.BLOCK_K),
                              descriptor(b_rows.base, ws.BLOCK_N, ws.BLOCK_K), c, scale_a, scale_b, m, n, k,
                              availability.multiprocessors(), row_scales=row_wise)
        return launches.Steps([*scale_fills, a_fill, b_fill, product])
    a_desc, a_fill = operand_copies.row_descriptor(a, block_m, block_k)
    b_desc, b_fill = operand_copies.row_descriptor(b.T, block_n, block_k)  # (N, K): B K-major
    # C's alignment told: measured much faster for float32 C of unaligned widths, 16-bit C unchanged
    c_align = operand_copies.c_alignment(c) if c.element_size() == 4 else 1
    from tilemm.ladder.tensorcore.scaled_fp8_kernel import scaled_steps     # Triton loads on first use
    product = persistent_launch(a_desc, b_desc, c, m, n, k, scaled_steps, (scale_a, scale_b), stream_k,
                                OPTION=bool(fast_accum), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                GROUP_M=group_m, num_warps=num_warps, num_stages=num_stages, C_ALIGN=c_align,
                                ROW_SCALES=row_wise)
    return launches.Steps([*scale_fills, a_fill, b_fill, product])


def unit_stride(scale):
    """(scale, None) where the row-wise scale (M, 1) or (1, N) has its elements one apart, else
    (a copy that has, the CopyInto step that fills it)."""
    if scale.numel() <= 1 or scale.stride(0 if scale.shape[1] == 1 else 1) == 1:
        return scale, None
    copy = scale.new_empty(scale.shape)
    return copy, launches.CopyInto(copy, scale)


def launch(a, b, c, scale_a, scale_b, fast_accum, row_wise=False, **config):
    """c = scale_a * scale_b * (a @ b), as bind's launcher run once (on the CPU under Triton's
    interpreter too); returns that launcher where it wrote c itself, else None."""
    # Triton 3.9's interpreter rounds float32 -> bfloat16 by truncation: there, torch rounds
    upcast = compat.triton_interpreter() and str(c.dtype) == "torch.bfloat16"
    out = c.float() if upcast else c
    steps = bind(a, b, out, scale_a, scale_b, fast_accum, row_wise=row_wise, **config)
    steps()
    if upcast:
        c.copy_(out)
        return None
    return steps


def run(a, b, c, fast_accum=False, **config):
    """c = a @ b with unit scales (the record's run; tilemm.scaled_matmul passes its scales)."""
    import torch
    one = torch.ones((), dtype=torch.float32, device=a.device)
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    if k == 0:
        c.zero_()
        return
    launch(a, b, c, one, one, bool(fast_accum), **resolve({**DEFAULTS, **config}, bool(fast_accum), m, n, k))


def traffic(p, block_m=None, block_n=None, **config):
    """A read once per block column of C and B once per block row; C written once (elements)."""
    t = resolve({**DEFAULTS, **config, "block_m": block_m, "block_n": block_n}, bool(config.get("fast_accum")),
                p.m, p.n, p.k)
    return Traffic(read=p.m * p.k * -(-p.n // t["block_n"]) + p.k * p.n * -(-p.m // t["block_m"]),
                   written=p.m * p.n)


def problem_limits(p, fast_accum=False, **config):
    """Why the program can't compute problem p at these parameters, or None."""
    t = resolve({**DEFAULTS, **config}, bool(fast_accum), p.m, p.n, p.k)
    return availability.dimension_limit(p.m, p.n, p.k) or limits(
        t["block_m"], t["block_n"], t["block_k"], t["num_stages"], compat.triton_interpreter(), bool(fast_accum),
        t["warp_specialized"], t["cluster"])


KERNEL = register(Kernel(
    name="scaled-fp8", rung=17, device="cuda", backend="triton", dtypes=("float8_e4m3fn", "float8_e5m2"),
    seed="beyond", summary="float8 with per-tensor scales (tilemm.scaled_matmul): the engine's persistent schedule, "
                           "fp8 sums of K steps; never tilemm.matmul's default",
    run=run, traffic=traffic, limits=problem_limits, available=availability.available,
    params=(Param("block_m", None, (None, 64, 128, 256), "rows of C per program (None: chosen by shape, resolve)"),
            Param("block_n", None, (None, 64, 128, 256), "columns of C per program (None: chosen by shape)"),
            Param("block_k", 128, (32, 64, 128, 256), "depth of one K step"),
            Param("group_m", 8, (1, 2, 4, 8, 16), "block rows walked before the next column (L2 reuse)"),
            Param("num_warps", 8, (4, 8), "warps per program"),
            Param("num_stages", 4, (1, 2, 3, 4, 5), "software-pipelining depth (shared-memory stages)"),
            Param("stream_k", False, (False, True), "a last, partial round of tiles shared out by K steps"),
            Param("fast_accum", False, (False, True),
                  "the tensor cores' own (shorter) accumulator carries the sums (torch._scaled_mm's use_fast_accum)"),
            Param("warp_specialized", None, (None, False, True),
                  "Hopper: the warp-specialized Gluon program (None: float32 sums, default tiles, K >= 4096)"),
            Param("cluster", False, (False, True), "the Gluon program in clusters of two CTAs (Triton 3.9's Gluon)")),
))
