"""Rung 12, `tensorcore-f64`: float64 on Hopper's FP64 tensor cores (DMMA), in Triton: the
programs of `tensorcore` with float64 tiles and a float64 accumulator (r12_fp64_kernel.py), launched
as rung 10 launches its own (tilemm.engine.tensorcore_launch): the engine's persistent schedule with
float64 sums of K steps (f64_steps) past one round of tiles, the pointer program otherwise. On Hopper, where 128 x 128
tiles fill more than half the SMs, a Gluon program instead (r12_fp64_dmma_kernel.py): DMMA's
m16n8k8 shape, which Triton does not issue, on operands read as that instruction takes them.

Constraints: float64 only; any M, N, K, any strides; shared memory of a configuration (eight
bytes an element) must fit the GPU (checked before launch); Triton 3.5 or newer (tl.dot of
float64). The Gluon program needs Gluon TMA descriptors of float64 elements, which Triton 3.6
makes and later releases refuse: there the Triton programs run every product, and dmma=True is
refused, naming the Triton version.
"""
from __future__ import annotations

from tilemm.ladder.record import Kernel, Param, Traffic, register
from tilemm.ladder.tensorcore.tile_params import tile_params
from tilemm.engine import availability, launches, operand_copies, tensorcore_launch
from tilemm.engine.tile_model import DMMA_STAGES, DMMA_TILES

TILES = ("block_m", "block_n", "block_k", "num_warps", "num_stages")
TRITON_DEFAULTS = dict(persistent=True, copy_transposed="a")
# K from which the DMMA program takes a product (dmma=None). It writes each tile's C once its K
# steps are done, where the persistent Triton program writes one tile while loading the next: with
# few K steps C's writes dominate, and the Triton program is faster; from K = 256 (measured) the
# DMMA program is ahead.
DMMA_FROM_K = 256
# Triton's tl.dot multiplies float64 from 3.5 on (3.4 refuses float64 operands, at compile time
# and in the interpreter alike)
FLOAT64_DOT_FROM = (3, 5)


def available() -> str | None:
    """Why the rung can't run here, or None: the Triton rungs' reasons, or a Triton whose tl.dot
    takes no float64."""
    reason = availability.available()
    if reason is None and availability.triton_version() < FLOAT64_DOT_FROM:
        installed = ".".join(map(str, availability.triton_version()))
        return f"needs Triton 3.5 or newer, whose tl.dot multiplies float64 (this is Triton {installed})"
    return reason


def default_tiles(m: int, n: int) -> dict:
    """The Triton programs' tiles: 128 x 128 x 32, 8 warps, 3 stages when they fill the SMs;
    64 x 64 x 32 (4 warps, 4 stages) when they do not (more, smaller tiles keep more SMs busy);
    16-wide tiles for a skinny product, bound by reading the other operand."""
    if min(m, n) <= 64:
        return dict(block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=4) if m <= 64 else \
            dict(block_m=64, block_n=16, block_k=64, num_warps=4, num_stages=4)
    if -(-m // 128) * -(-n // 128) >= availability.multiprocessors():
        return dict(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=3)
    return dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=4)


def takes_dmma(m: int, n: int, k: int, params: dict) -> bool:
    """Whether a product runs the Gluon DMMA program: dmma=True, or dmma=None with the Triton
    programs' parameters at their defaults (tiles None), on Hopper, where its 128 x 128 tiles fill
    more than half the SMs (a skinny product keeps its own tiles) and K from DMMA_FROM_K, with a
    Triton whose Gluon describes float64 for TMA. An empty product never (the Triton launcher
    writes its zeros). Measured in whole calls against DGEMM over four layouts: ahead of the Triton
    programs on large products and down to a little over half a round of tiles; at half a round or fewer
    the 64 x 64 Triton tiles, which keep more SMs busy, are faster (docs/ladder/r12-tensorcore-f64.md)."""
    if m * n * k == 0:
        return False
    if params.get("dmma") is not None:
        return bool(params["dmma"])
    own = all(params.get(name) is None for name in TILES) and all(
        params.get(name, value) == value for name, value in TRITON_DEFAULTS.items())
    return (own and min(m, n) > 64 and k >= DMMA_FROM_K and 2 * -(-m // 128) * -(-n // 128) > availability.multiprocessors()
            and availability.hopper_gluon() and availability.gluon_float64_descriptors() is None)


def dmma_refusal() -> str | None:
    """Why dmma=True can't be had here, or None."""
    refusal = availability.hopper_gluon_refusal("dmma=True")
    if refusal:
        return refusal
    why = availability.gluon_float64_descriptors()
    return f"dmma=True: {why}; dmma=None or False runs the Triton programs" if why else None


def dmma_operands(a, b):
    """(x, y, transposed): the program computes X^T Y^T, for C itself from X = A^T, Y = B^T, or for
    C^T from X = B, Y = A. X must be stored M-major (rows along C's rows) and Y K-major, rows
    contiguous and 16-byte aligned: the form whose operands are so as given (A and B both
    row-major: C^T; both column-major: C), else the one with fewer elements to copy."""
    forms = ((a.T, b.T, False), (b, a, True))
    return min(forms, key=lambda form: sum(t.numel() for t in form[:2] if not operand_copies.k_major(t)))


def dmma_bind(a, b, c):
    """c = a @ b by the DMMA program, as a Steps: any operand copied into rows first, then the product."""
    from tilemm.ladder.tensorcore import r12_fp64_dmma_kernel as program
    x, y, transposed = dmma_operands(a, b)
    x, x_fill = operand_copies.aligned_rows(x)
    y, y_fill = operand_copies.aligned_rows(y)
    strides = c.stride()[::-1] if transposed else c.stride()
    return launches.Steps([x_fill, y_fill, program.launcher(x, y, c, *strides)])


def resolved(m: int, n: int, params: dict) -> dict:
    """params with the shape's tiles where they are None."""
    chosen = default_tiles(m, n)
    return {k: chosen[k] if k in TILES and v is None else v for k, v in params.items()}


def run(a, b, c, **params):
    bind(a, b, c, **params)()


def bind(a, b, c, dmma=None, **params):
    m, k = a.shape
    n = b.shape[1]
    if takes_dmma(m, n, k, dict(params, dmma=dmma)):
        return dmma_bind(a, b, c)
    from tilemm.ladder.tensorcore import r12_fp64_kernel as kernel      # Triton loads on first use
    programs = tensorcore_launch.Programs(kernel.matmul_kernel, None, kernel.f64_steps)
    return tensorcore_launch.launcher(programs, a, b, c, **resolved(m, n, params))


def traffic(p, dmma=None, **params):
    """The traffic of the program that runs: the DMMA program's tiles where takes_dmma."""
    tiles = DMMA_TILES if takes_dmma(p.m, p.n, p.k, dict(params, dmma=dmma)) else resolved(p.m, p.n, params)
    read, written = tensorcore_launch.traffic(p, **tiles)
    return Traffic(read=read, written=written)


def limits(p, dmma=None, **params):
    refusal = dmma_refusal() if dmma else None
    if refusal:
        return refusal
    if takes_dmma(p.m, p.n, p.k, dict(params, dmma=dmma)):
        return availability.dimension_limit(p.m, p.n, p.k) or availability.check_shared(
            DMMA_TILES["block_m"], DMMA_TILES["block_n"], DMMA_TILES["block_k"], DMMA_STAGES, 8)
    return tensorcore_launch.limits(p, **resolved(p.m, p.n, params))


register(Kernel(
    name="tensorcore-f64", rung=12, device="cuda", backend="triton", dtypes=("float64",),
    seed="beyond", summary="float64 on the FP64 tensor cores: DMMA m16n8k8 in Gluon on Hopper, Triton tl.dot elsewhere",
    run=run, bind=bind, traffic=traffic, limits=limits, available=available,
    params=tile_params(None, None, None, num_warps=None, num_stages=None) + (
        # past one round of tiles the persistent program measured faster than one program a tile
        # (it loads the next tile while writing this one's C)
        Param("persistent", True, (False, True),
              "past one round of tiles: the persistent TMA program (float64 sums); False: one program a tile"),
        Param("copy_transposed", "a", ("none", "a", "ab"),
              "past one round: operands stored column-major (A, or A and B) copied into rows first, a pass "
              "that counts in the rung's time (DMMA reads a transposed A's tiles slowly)"),
        Param("dmma", None, (None, False, True),
              "Hopper: the Gluon program issuing DMMA m16n8k8 (its own 128 x 128 x 32 tiles; the other "
              "parameters ignored; needs a Triton whose Gluon describes float64 for TMA, as 3.6's does); None: "
              "where the tile parameters are None and 128 x 128 tiles fill more than half the SMs "
              "(takes_dmma); False: the Triton programs"),),
))
