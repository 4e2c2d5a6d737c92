"""Rung 16, `tensorcore-block-scaled`: float8 products whose scales change along the matrices (the
program and its launcher are in r16_block_scaled_kernel.py; ``tilemm.scaled_matmul`` takes it when
its scales are not single numbers). The fp8 program before it (scaled_fp8.py) multiplies the whole
product by one scale_a * scale_b at the end. One number per tensor lets one large value flatten
every small one to zero in 8 bits; fp8 training scales finer:

- row-wise: scale_a (M, 1), one a row of A, and scale_b (1, N), one a column of B, as
  torch._scaled_mm takes them. They still factor out of each sum, so the program applies them once,
  to the float32 sums, as it writes C: the cost of the per-tensor product.
- block-wise (DeepGEMM's, DeepSeek-V3's): scale_a (M, ceil(K/128)), one a 1 x 128 block of a row of
  A, and scale_b (ceil(K/128), ceil(N/128)), one a 128 x 128 block of B. A sum now runs over
  blocks of different scales: each K step's products (a step lies inside one 128-block:
  BLOCK_SIZE_K divides 128) come out of the tensor cores as a float32 partial sum, are multiplied
  by their rows' and columns' scales, and only then added to the float32 accumulator. That is
  Triton tutorial 10's lesson (block-scaled matmul), in the 1x128 / 128x128 form DeepGEMM serves.

C = sum over blocks kb of scale_a[m, kb] * scale_b[kb, n // 128] * (A[m, kb] . B[kb, n]), float32
sums, one rounding to C's dtype (bfloat16, float16 or float32).

Constraints:
- float8_e4m3fn / float8_e5m2 operands (mixed too), float32 scales of exactly the shapes above;
- compute capability 8.9 or newer (fp8 tensor cores); on the CPU, Triton's interpreter;
- BLOCK_K divides 128 (block scales) and, on the GPU, is a multiple of 32 (the 8-bit instruction's K);
- any M, N, K and strides: A row-major and B as (N, K).T are read as they are, other layouts are
  copied K-major first; with K a multiple of 16 the tiles come in by TMA (tma=None: where the
  operands allow; False: pointer loads with masks);
- the shared memory of num_stages stages of tiles must fit the GPU (checked before launch).
"""
from __future__ import annotations

from tilemm.engine import availability

DEFAULTS = dict(block_m=128, block_n=128, block_k=128, group_m=8, num_warps=8, num_stages=4, tma=None)
SCALE_BLOCK = 128          # r16_block_scaled_kernel.SCALE_BLOCK (kept here: this module imports no Triton)


def launch(*args, **kwargs):
    """The program's launch (r16_block_scaled_kernel.launch; Triton loads here, on first use)."""
    from tilemm.ladder.tensorcore.r16_block_scaled_kernel import launch as launch_program
    launch_program(*args, **kwargs)


def resolve(params: dict) -> dict:
    """The program's parameters, defaults filled in; unknown names a TypeError, bad values a ValueError."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"scaled_matmul: unknown parameter(s) {', '.join(sorted(unknown))} for block or row-wise "
                        f"scales; it takes {', '.join(DEFAULTS)}")
    config = {**DEFAULTS, **params}
    if config["tma"] is not None and not isinstance(config["tma"], bool):
        raise ValueError(f"scaled_matmul: tma={config['tma']!r} must be None (where the operands allow), True or False")
    for name, value in config.items():
        if name == "tma":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"scaled_matmul: {name}={value!r} must be a positive integer")
    for name in ("block_m", "block_n", "block_k"):
        if config[name] < 16 or config[name] & (config[name] - 1):
            raise ValueError(f"scaled_matmul: {name}={config[name]} must be a power of two, 16 or more")
    return config


def limits(config: dict, row_wise: bool, interpreter: bool) -> str | None:
    """Why the program can't run at these parameters, or None."""
    block_k = config["block_k"]
    if not row_wise and SCALE_BLOCK % block_k:
        return f"block_k={block_k}: a K step must lie inside one {SCALE_BLOCK}-wide block of the scales"
    if block_k % 32 and not interpreter:
        return f"block_k={block_k}: the 8-bit tensor-core instruction takes K in multiples of 32"
    return availability.check_shared(config["block_m"], config["block_n"], block_k, config["num_stages"], 1)


def scale_shapes(m: int, n: int, k: int) -> dict:
    """{"row-wise": (scale_a's shape, scale_b's), "block": (...)}: the shapes each kind takes."""
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return {"row-wise": ((m, 1), (1, n)), "block": ((m, kb), (kb, nb))}
