"""The Triton sum of K steps of rung `tensorcore-int` (see r11_int_digits.py) for int8 data, which the
engine's persistent schedule (tilemm.engine.programs.matmul_persistent) runs on each tile; the
digit programs the rung shares with tensorcore-f32 are tilemm.engine.digit_programs. Kept apart so
that importing tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import step_tiles


# --8<-- [start:steps]
@triton.jit
def int8_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
               UPCAST: tl.constexpr, OPTION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """The int32 sum (wrapping, as the result must) of K steps step_from..step_to - 1 of the tile at
    (off_m, off_n), int8 tiles brought in by TMA, both K-major (A row-major, B given as B^T): what
    the engine's persistent schedule runs on each tile for int8 data (UPCAST, OPTION: unused)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        a, b = step_tiles(a_desc, b_desc, off_m, off_n, k0, A_T, B_T)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)    # Triton 3.6 needs out_dtype for int8
    return acc
# --8<-- [end:steps]
