"""The sum of K steps of the fp8 program behind tilemm.scaled_matmul (see scaled_fp8.py), which the
engine's persistent schedule (tilemm.engine.programs.matmul_persistent) runs on each tile and scales
by the per-tensor scales as it writes C. Kept apart so that importing tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import step_tiles


# --8<-- [start:steps]
@triton.jit
def scaled_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
                 UPCAST: tl.constexpr, FAST_ACCUM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """The float32 sum of K steps step_from..step_to - 1 of the tile at (off_m, off_n), float8
    tiles brought in by TMA (8-bit operands come K-major only: A_T = False, B_T = True). Hopper
    adds fp8 products into the accumulator with fewer bits than float32 keeps; unless FAST_ACCUM
    (the schedule's OPTION) each K step's products go into a fresh accumulator added to the float32
    sum (max_num_imprecise_acc), as cuBLAS does unless asked for fast accumulation
    (torch._scaled_mm's use_fast_accum). UPCAST: unused."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        a, b = step_tiles(a_desc, b_desc, off_m, off_n, k0, A_T, B_T)
        if FAST_ACCUM:
            acc = tl.dot(a, b, acc)
        else:
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
    return acc
# --8<-- [end:steps]
