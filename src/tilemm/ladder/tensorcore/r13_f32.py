"""Rung 13, `tensorcore-f32`: float32 products on TF32 tensor cores, in Triton.

precision="3xtf32" (the default) keeps float32 accuracy: each operand is split into a TF32 part
(rounded to nearest) and the rest, x = hi + lo, and C = A_hi B_hi + A_hi B_lo + A_lo B_hi (the
dropped A_lo B_lo is 2^-22 of a product). That is 22 significant bits, not 24: within float32's
error bound for sums of 16 terms and more (shorter ones are computed in IEEE float32). The tensor
cores chain the products of a chunk of K steps, which joins the float32 total by one float32 add
(tf32_matmul): at n = 4096 twice SGEMM's speed at half its error. precision="tf32" is one
TF32 product (10 mantissa bits in, float32 sums), what torch's allow_tf32 gives: faster, and only
as accurate as TF32.

Hopper's tensor cores read 32-bit operands K-major only (wgmma transposes 16-bit types alone), so
a split pass writes both operands' parts K-major, B transposed (its time counts in the rung's);
the product then takes its tiles by TMA, four tiles a K step shared by the three products. Small
products (DIRECT_WORK) skip the split passes: one launch loads float32 tiles and splits them in
registers (tf32x3_direct), since there the passes' launches cost more than the product. Where
a last round of tiles would leave many SMs idle, 3xTF32 runs on the persistent program with
stream-K (STREAM_K_ROUNDS). For large products B is written in panels of columns on a second
stream, each panel's product starting once its panel is written, so that the copying hides
behind the multiplying (products_by_panel).

Inf and NaN: the cross terms would turn Inf times a low part (0, or of the other sign) into NaN
or -Inf where IEEE float32 gives Inf; the small products are summed apart, dropped when not
finite, and the a_hi b_hi product carries Inf and NaN as IEEE does (one exception: Inf times a
subnormal below TF32's reach, whose a_hi is 0, gives NaN).

precision="int8" (Ozaki's scheme, on the integer rung's tensor cores): r13_f32_int8.py.

Constraints: float32 only; any M, N, K, any strides; shared memory of a configuration must fit.
"""
from __future__ import annotations

from tilemm.system import compat
from tilemm.ladder.record import Kernel, Param, Traffic, register
from tilemm.engine import availability, operand_copies
from tilemm.engine import launches
from tilemm.engine.persistent import persistent_launch
from tilemm.engine.tensorcore_launch import stream_k_pays
from tilemm.ladder.tensorcore.tile_params import tile_params
from tilemm.ladder.tensorcore.r13_f32_panels import overlapped, panel_bounds, panels_pay
from tilemm.ladder.tensorcore.r13_f32_int8 import FIXED_K, run_int8
from tilemm.ladder.tensorcore.r13_f32_direct import DIRECT_BLOCK, direct_launch, takes_direct
from tilemm.ladder.tensorcore.r13_f32_parts import parts_of

# TF32 keeps 11 significant bits, so hi + lo carries 22 of float32's 24: each 3xTF32 product is
# off by up to ~3 * 2^-22 of |a||b|, which float32's error bound (2K * 2^-24 of the sum of
# |a||b|) covers from K = 12 on. Shorter sums take IEEE float32 (tl.dot on the FMA units).
IEEE_BELOW_K = 16


def tiles(precision: str, block_n, block_k, num_stages) -> tuple[int, int, int]:
    """(block_n, block_k, num_stages) with the defaults (None) filled in: 128 x 256 x 32 tiles,
    4 stages for TF32. 3xTF32 keeps three accumulators (the total, a chunk's big and small
    products), which at 128 x 256 spill registers (measured far slower): 128 x 128 x 32, 3 stages.
    int8: the integer rung's int64 tiles, 128 x 128 x 128 with 4 stages."""
    if precision == "int8":
        return block_n or 128, block_k or 128, num_stages or 4
    if precision == "3xtf32":
        return block_n or 128, block_k or 32, num_stages or 3
    return block_n or 256, block_k or 32, num_stages or 4


# 3xTF32: K steps whose products the tensor cores chain before one float32 add (tf32_matmul).
# Longer chunks drain the tensor cores' pipeline less often (faster) and drop more low bits (less
# accurate); measured at 4096³ / 8192³ against 4- and 8-step chunks, 16 steps was the fastest and
# still below SGEMM's error (docs/ladder/r13-tensorcore-f32.md, docs/guides/precision.md).
CHUNK_STEPS = 16
# A chunk's error does not shrink with K, SGEMM's grows with it: with 16 steps (512 of K) the
# error was above SGEMM's for K of 256-1024, below it from 2048 on. So K has at least MIN_CHUNKS
# chunks: with them every K measured (64 to 16384, M = N = 2048) came out below SGEMM's error.
# Not every shape: at M = N = 1024 cuBLAS splits K from 2048 on and errs less than this rung there
# (still within float32's bound; shorter chunks would close that gap at a cost in speed everywhere).
MIN_CHUNKS = 8


def chunk_steps(k: int, block_k: int) -> int:
    """K steps a chunk of 3xTF32 (a power of two): CHUNK_STEPS, fewer where K would have fewer
    than MIN_CHUNKS chunks."""
    steps = max(1, k // (MIN_CHUNKS * block_k))
    return min(CHUNK_STEPS, 1 << (steps.bit_length() - 1))


def run(a, b, c, **params):
    bind(a, b, c, **params)()


def bind(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, precision, persistent=False,
         copy_panels=None, stream_k=None, direct=None):
    """run(a, b, c, ...) as a launcher without arguments: for TF32 and 3xTF32 the split passes'
    buffers, the descriptors and the launches worked out once (a prepared plan launched many
    times pays the launches alone); precision="int8" plans at each launch."""
    import torch
    m, k = a.shape
    n = b.shape[1]
    if k == 0:
        return c.zero_
    block_n, block_k, num_stages = tiles(precision, block_n, block_k, num_stages)
    if precision == "int8":
        def go():   # longer K in pieces, each its own fixed-point product, added in float32
            for k0 in range(0, k, FIXED_K):
                part = c if k0 == 0 else torch.empty_like(c)
                run_int8(a[:, k0:k0 + FIXED_K], b[k0:k0 + FIXED_K], part, block_m, block_n, block_k, group_m,
                         num_warps, num_stages)
                if k0:
                    c.add_(part)
        return go
    parts = 2 if precision == "3xtf32" else 1
    grid = (-(-m // block_m) * -(-n // block_n),)
    if parts == 2 and k < IEEE_BELOW_K:
        from tilemm.ladder.tensorcore.r13_f32_kernel import ieee_matmul   # short sums: IEEE float32 on the FMA units
        return launches.bound_launch(ieee_matmul, grid, (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                                                        b.stride(1), c.stride(0), c.stride(1)),
                                    dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=16, GROUP_M=group_m,
                                         num_warps=num_warps, num_stages=1))
    if parts == 2 and takes_direct(m, n, k, direct, stream_k, copy_panels):
        return direct_launch(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages,
                             chunk_steps(k, block_k))
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, num_warps=num_warps,
                  num_stages=num_stages)
    a_desc, a_fill = parts_of(a, parts, block_m, block_k)
    persistent = parts == 1 and persistent and grid[0] > availability.multiprocessors()
    b_copied = not (parts == 1 and operand_copies.k_major(b.T))          # TF32 reads a K-major B as it is
    from tilemm.ladder.tensorcore import r13_f32_kernel as kernel     # the sums of K steps (Triton loads here)
    if copy_panels is None:   # measured for TF32; 3xTF32 gained nothing in panels (docs/guides/precision.md)
        copy_panels = panels_pay(m, n, k, block_m, block_n, availability.multiprocessors()) if parts == 1 else 1
    if copy_panels > 1 and b_copied and not persistent:
        steps = [products_by_panel(a_desc, b, c, parts, copy_panels, config)]
    else:
        b_desc, b_fill = parts_of(b.T, parts, block_n, block_k)   # (N, K): B K-major
        if persistent:   # TF32 on the engine's persistent schedule
            product = persistent_launch(a_desc, b_desc, c, m, n, k, kernel.tf32_steps, **config)
        elif parts == 2 and (stream_k if stream_k is not None else
                             stream_k_pays(grid[0], availability.multiprocessors(), -(-k // block_k), STREAM_K_ROUNDS)):
            product = persistent_launch(a_desc, b_desc, c, m, n, k, kernel.tf32x3_steps, stream_k=True,
                                        OPTION=chunk_steps(k, block_k), FLATTEN=False, **config)
        else:
            product = product_launch(a_desc, b_desc, c, k, parts, config)
        steps = [b_fill, product]
    return launches.Steps([a_fill] + steps)


def product_launch(a_desc, b_desc, c, k, parts, config):
    """A launcher without arguments of tf32_matmul: c (M, N) from A's and B's stacked parts."""
    from tilemm.ladder.tensorcore.r13_f32_kernel import tf32_matmul
    m, n = c.shape
    grid = (-(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"]),)
    return launches.bound_launch(tf32_matmul, grid, (a_desc, b_desc, c, m, n, k, c.stride(0), c.stride(1)),
                                dict(PARTS=parts, CHUNK=chunk_steps(k, config["BLOCK_K"]), **config))


# 3xTF32's tiles carry three products each, so handing partial sums over pays with no whole
# round before: stream_k=None shares a last round that leaves 40% of the SMs idle or more
# (tilemm.engine.tensorcore_launch.stream_k_pays). Measured against cuBLAS SGEMM: it gains where the
# last round is nearly empty (a few tiles after many rounds) or the tiles are fewer than the SMs,
# and is within the noise where the last round is mostly full.
STREAM_K_ROUNDS = 0


def products_by_panel(a_desc, b, c, parts, panels, config):
    """A launcher without arguments of c = A @ B with B's parts written K-major a panel of columns
    (whole tiles of C) at a time on a second stream, the product of each panel started once its
    copy is done: the copies (bound by HBM, little shared memory) run on the SMs beside the
    product's programs, and only the first panel's copy is waited for. The products run on a
    stream of the highest priority, so that the SMs take their programs before the copies' (measured
    faster than copying first, kernel alone): overlapped."""
    copies, products, buffers = [], [], []
    for n0, n1 in panel_bounds(c.shape[1], panels, config["BLOCK_N"]):
        b_desc, copy = parts_of(b[:, n0:n1].T, parts, config["BLOCK_N"], config["BLOCK_K"])
        copies.append(copy)
        buffers.append(b_desc.base)
        products.append(product_launch(a_desc, b_desc, c[:, n0:n1], b.shape[0], parts, config))
    return overlapped(copies, products, buffers, c)


def traffic(p, block_m, block_n, block_k, num_stages, precision, direct=None, stream_k=None, copy_panels=None, **_):
    # In float32 elements: the split pass reads A and B and writes their parts; the product reads
    # each part's tiles once per program and writes C. int8: three one-byte digit planes (3/4 of
    # an element), 6 pairs of tiles, C scaled in the Gluon program's epilogue (on Hopper; elsewhere,
    # or with K past one exact chunk, C is first written in int64 and read back: 4 elements more).
    block_n, _, _ = tiles(precision, block_n, block_k, num_stages)
    operands = p.m * p.k + p.k * p.n

    def tiles_read(rows, cols):          # A's and B's tiles, each read once per program
        return p.m * p.k * -(-p.n // cols) + p.k * p.n * -(-p.m // rows)
    if precision == "int8":
        return Traffic(read=operands + 6 * tiles_read(block_m, block_n) / 4, written=0.75 * operands + p.m * p.n)
    parts = 2 if precision == "3xtf32" else 1
    if parts == 2 and p.k >= IEEE_BELOW_K and takes_direct(p.m, p.n, p.k, direct, stream_k, copy_panels):
        # float32 tiles, no parts
        return Traffic(read=tiles_read(min(block_m, DIRECT_BLOCK), min(block_n, DIRECT_BLOCK)), written=p.m * p.n)
    return Traffic(read=operands + parts * tiles_read(block_m, block_n), written=parts * operands + p.m * p.n)


def limits(p, block_m, block_n, block_k, num_stages, precision, **_):
    block_n, block_k, num_stages = tiles(precision, block_n, block_k, num_stages)
    too_long = availability.dimension_limit(p.m, p.n, p.k)
    if too_long or compat.triton_interpreter():
        return too_long
    if precision == "int8" and block_k % 32:
        return f"BLOCK_K={block_k}: the 8-bit tensor-core instruction takes K in multiples of 32"
    elif block_k < 8:
        return f"BLOCK_K={block_k}: the TF32 instruction takes K in multiples of 8"
    if precision == "int8":
        return availability.check_shared(block_m, block_n, block_k, num_stages, 1)
    parts = 2 if precision == "3xtf32" else 1
    return availability.check_shared(block_m, block_n, block_k, num_stages, 4 * parts)


def compute_unit(p, precision, **_):
    """TF32 tensor cores, three products each for 3xTF32; int8 ones, six digit pairs each."""
    return {"3xtf32": ("tf32", 3), "tf32": ("tf32", 1), "int8": ("int8", 6)}[precision]


register(Kernel(
    name="tensorcore-f32", rung=13, device="cuda", backend="triton", dtypes=("float32",),
    seed="beyond", summary="float32 on tensor cores: 3xTF32 split (float32 accuracy), plain TF32, or int8 "
                           "products of 24-bit fixed point",
    run=run, bind=bind, traffic=traffic, limits=limits, available=availability.available, compute_unit=compute_unit,
    params=tile_params(128, None, None, num_warps=8, num_stages=None, chosen_by="precision") + (
        Param("precision", "3xtf32", ("3xtf32", "tf32", "int8"),
              "3xtf32: float32 accuracy from three TF32 products; tf32: one (torch's allow_tf32); int8: "
              "rows and columns in 24-bit fixed point, multiplied exactly on int8 tensor cores (a "
              "normwise bound: docs/guides/precision.md)"),
        Param("persistent", False, (False, True),
              "tf32: one program an SM walks the tiles (the 16-bit rung's program) past one round"),
        Param("stream_k", None, (None, False, True),
              "3xtf32: one program an SM walks the tiles, the tiles of a last, partial round shared out by K "
              "steps (None: where that round leaves 40% of the SMs idle or more)"),
        Param("direct", None, (None, False, True),
              "3xtf32: one launch, the parts split in registers as the tiles load (no split passes); None: for "
              "products of at most 2^28 multiply-adds (r13_f32.takes_direct)"),
        Param("copy_panels", None, (None, 1, 2, 3, 4, 8),
              "tf32 and 3xtf32: B is written K-major in this many panels of columns on a second stream, each "
              "panel's product starting once its copy is done (the copies hide behind the product); None: "
              "for tf32 by the product's size and tiles (panels_pay), 1 for 3xtf32"),),
))
