"""Rung 16, `tensorcore-block-scaled`: float8 products whose scales change along K (the
program and its launcher are in r16_block_scaled_kernel.py; ``tilemm.scaled_matmul`` takes it when
its scales are block scales). The fp8 program before it (scaled_fp8.py) multiplies the whole
product by one scale_a * scale_b at the end. One number per tensor lets one large value flatten
every small one to zero in 8 bits; fp8 training scales finer:

- row-wise: scale_a (M, 1), one a row of A, and scale_b (1, N), one a column of B, as
  torch._scaled_mm takes them. They still factor out of each sum, so they need no program of
  their own: the fp8 program applies them once, to the float32 sums, as it writes C (the
  per-tensor product's cost; scaled_fp8.bind's row_wise).
- block-wise (DeepGEMM's, DeepSeek-V3's): scale_a (M, ceil(K/128)), one a 1 x 128 block of a row of
  A, and scale_b (ceil(K/128), ceil(N/128)), one a 128 x 128 block of B. A sum now runs over
  blocks of different scales: each K step's products (a step lies inside one 128-block:
  BLOCK_SIZE_K divides 128) come out of the tensor cores as a float32 partial sum, are multiplied
  by their rows' and columns' scales, and only then added to the float32 accumulator. That is
  Triton tutorial 10's lesson (block-scaled matmul), in the 1x128 / 128x128 form DeepGEMM serves.

C = sum over blocks kb of scale_a[m, kb] * scale_b[kb, n // 128] * (A[m, kb] . B[kb, n]), float32
sums, one rounding to C's dtype (bfloat16, float16 or float32).

In the Triton program every warp of a tile waits for each K step's partial before any scales and
adds it, and the tensor cores idle meanwhile. On Hopper, block scales take a warp-specialized
Gluon program instead (r16_block_scaled_ws_kernel.py, DeepGEMM's plan): each 64-row warpgroup of
a 128-row tile waits only for its own partials and scales and adds them while the other
warpgroup's products run, and one loading warp keeps a ring of TMA stages full.

Constraints:
- float8_e4m3fn / float8_e5m2 operands (mixed too), float32 block scales of exactly the shapes above;
- compute capability 8.9 or newer (fp8 tensor cores); on the CPU, Triton's interpreter;
- BLOCK_K divides 128 and, on the GPU, is a multiple of 32 (the 8-bit instruction's K);
- any M, N, K and strides: A row-major and B as (N, K).T are read as they are, other layouts are
  copied K-major first; with K a multiple of 16 the tiles come in by TMA (tma=None: where the
  operands allow; False: pointer loads with masks);
- the warp-specialized program (warp_specialized=None: block scales on Hopper with Gluon; True
  asks for it, False refuses it): block_m 128 (two multiplying warpgroups) or 64 (one), block_k
  128, block_n 128 or 256, any K (its rows of A and B are copied into 16-byte aligned rows where
  K is not a multiple of 16);
- the shared memory of num_stages stages of tiles must fit the GPU (checked before launch).
"""
from __future__ import annotations

from tilemm.engine import availability

DEFAULTS = dict(block_m=None, block_n=None, block_k=128, group_m=None, num_warps=8, num_stages=None, tma=None,
                warp_specialized=None)
SCALE_BLOCK = 128          # r16_block_scaled_kernel.SCALE_BLOCK (kept here: this module imports no Triton)
# the parameters left None, as each program takes them: the Triton program's tiles, and the
# warp-specialized program's: 128 x 256 (two halves of one B scale each, as the per-tensor Gluon
# program's tiles), or 128 x 128 where its rounds of tiles over the SMs take less time (ws_block_n),
# or 64 x 128 (one multiplying warpgroup) where even 128 x 128 tiles would leave SMs idle (a few
# rows: 56 tiles of 128 x 7168 at 128 rows, 112 at 64); as many stages as fit beside C's block
TRITON_TILES = dict(block_m=128, block_n=128, group_m=8, num_stages=4)
WS_GROUP_M = 16
WS_STAGES = {(128, 256): 4, (128, 128): 6, (64, 256): 5, (64, 128): 8}
# what a 128 x 128 tile is taken to cost over half a 128 x 256 one (it reads more from L2 per
# product): a guess for the rounds model of ws_block_n, to be fitted by block_scaled_vs_torch.py --tune
NARROW_TILE_COST = 1.1


def ws_block_n(m: int, n: int, sms: int) -> int:
    """The warp-specialized program's block_n for an M x N product on `sms` SMs: 256 or 128,
    whichever's rounds of tiles (the last one counted whole: SMs idle in it) take less time, a
    128-wide tile costing NARROW_TILE_COST halves of a 256-wide one. 128 where 256-wide tiles
    leave most SMs idle (few rows: 28 tiles of 128 x 7168) or a thin last column of
    tiles (N = 2112: eight 256-wide tiles and a 64-wide one)."""
    def rounds(block_n):
        return -(-(-(-m // 128) * -(-n // block_n)) // sms)
    return 128 if rounds(128) * NARROW_TILE_COST < 2 * rounds(256) else 256


def launch(a, b, c, scale_a, scale_b, warp_specialized: bool = False, **config):
    """The program's launch, as resolve chose it (Triton or Gluon loads here, on first use):
    r16_block_scaled_ws_kernel.launch where warp_specialized, else r16_block_scaled_kernel.launch.
    Returns what ran where tilemm.engine.replay can run it again on other operands, else None."""
    if warp_specialized:
        from tilemm.ladder.tensorcore.r16_block_scaled_ws_kernel import launch as launch_ws
        return launch_ws(a, b, c, scale_a, scale_b, config["block_m"], config["block_n"], config["group_m"],
                         config["num_stages"])
    from tilemm.ladder.tensorcore.r16_block_scaled_kernel import launch as launch_program
    return launch_program(a, b, c, scale_a, scale_b, **config)


def resolve(params: dict, m: int = 0, n: int = 0) -> dict:
    """The program's parameters, defaults filled in (warp_specialized None: on Hopper with Gluon;
    block_m, block_n, group_m, num_stages None: the chosen program's, by shape); unknown names a
    TypeError, bad values a ValueError."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"scaled_matmul: unknown parameter(s) {', '.join(sorted(unknown))} for block scales; "
                        f"it takes {', '.join(DEFAULTS)}")
    config = {**DEFAULTS, **params}
    for name in ("tma", "warp_specialized"):
        if config[name] is not None and not isinstance(config[name], bool):
            raise ValueError(f"scaled_matmul: {name}={config[name]!r} must be None (the rung chooses), True or False")
    for name, value in config.items():
        if name in ("tma", "warp_specialized") or (value is None and DEFAULTS[name] is None):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"scaled_matmul: {name}={value!r} must be a positive integer")
    for name in ("block_m", "block_n", "block_k"):
        if config[name] is not None and (config[name] < 16 or config[name] & (config[name] - 1)):
            raise ValueError(f"scaled_matmul: {name}={config[name]} must be a power of two, 16 or more")
    ws = config["warp_specialized"]
    if ws is None:
        ws = config["tma"] is not False and availability.hopper_gluon()
    tiles = TRITON_TILES
    if ws:
        sms = availability.multiprocessors()
        few_rows = 0 < -(-m // 128) * -(-n // 128) < sms
        block_m = config["block_m"] or (64 if few_rows and config["block_n"] in (None, 128) else 128)
        block_n = config["block_n"] or (128 if block_m == 64 else ws_block_n(m, n, sms))
        tiles = dict(block_m=block_m, block_n=block_n, group_m=WS_GROUP_M,
                     num_stages=WS_STAGES.get((block_m, block_n), 4))
    return {**config, **{k: v for k, v in tiles.items() if config[k] is None}, "warp_specialized": bool(ws)}


def limits(config: dict, interpreter: bool) -> str | None:
    """Why the program can't run at these (resolved) parameters, or None."""
    block_k = config["block_k"]
    if config["warp_specialized"]:
        refusal = availability.hopper_gluon_refusal("warp_specialized=True")
        if refusal:
            return refusal
        shape = (config["block_m"], block_k, config["block_n"])
        if shape[:2] not in ((128, 128), (64, 128)) or shape[2] not in (128, 256):
            return (f"the warp-specialized program takes block_m 128 or 64, block_k=128 and block_n 128 or 256 "
                    f"(asked: {shape[0]}, {shape[1]}, {shape[2]})")
        # and a 64 x 128 block of 16-bit C a warpgroup, for its TMA stores
        return availability.check_shared(config["block_m"], config["block_n"], block_k, config["num_stages"], 1,
                                         epilogue=config["block_m"] * 128 * 2)
    if SCALE_BLOCK % block_k:
        return f"block_k={block_k}: a K step must lie inside one {SCALE_BLOCK}-wide block of the scales"
    if block_k % 32 and not interpreter:
        return f"block_k={block_k}: the 8-bit tensor-core instruction takes K in multiples of 32"
    return availability.check_shared(config["block_m"], config["block_n"], block_k, config["num_stages"], 1)


def scale_shapes(m: int, n: int, k: int) -> dict:
    """{"row-wise": (scale_a's shape, scale_b's), "block": (...)}: the shapes each kind takes."""
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return {"row-wise": ((m, 1), (1, n)), "block": ((m, kb), (kb, nb))}
