"""The exercises: one a rung, each the rung's own kernel with its lesson left for the learner.

An exercise names the module of the rung's kernel and the function that holds it (a factory for the
numba-cuda rungs, the kernel itself for the CPU and Triton rungs); the lines the learner writes
are those between ``# --- exercise: begin`` and ``# --- exercise: end`` in the rung's source, so
an exercise can't drift from its rung. ``todo`` holds, for each such region in order, what to
write there.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exercise:
    name: str                 # the rung's kernel name (registry), also the exercise's
    rung: int
    module: str               # the module whose source holds the kernel
    function: str             # the top-level function the learner completes
    backend: str              # "numba" (CPU), "numba-cuda" (SIMT) or "triton"
    idea: str                 # one line: the lesson
    todo: tuple               # what to write in each exercise region, in order
    sim_params: dict = field(default_factory=dict)   # small tiles: quick in the simulator
    # where sim_params' block is one warp of a square tile, which hides which thread axis walks the
    # rows: larger tiles, for a second count of the sectors a warp's access touches
    coalescing_params: dict = field(default_factory=dict)
    # where sim_params are symmetric (block_m == block_n, one run of vec_m values a thread), which makes
    # a_step and b_step equal or unused: uneven tiles, for one more ragged product that tells them apart
    uneven_params: dict = field(default_factory=dict)
    before: str = ""          # the rung before, timed beside it on a GPU
    uses_shared: bool = False


EXERCISES = (
    Exercise(
        "cpu-naive", 1, "tilemm.ladder.r01_cpu_naive_kernel", "naive", "numba",
        "the triple loop: one sum per output, kept in a register",
        ("For every row i of C and every column j: start a sum at `zero`, add a[i, p] * b[p, j] for\n"
         "every p in range(k), and store the sum in c[i, j] once.",),
        before="numpy"),
    Exercise(
        "naive", 3, "tilemm.ladder.simt.r03_naive_kernel", "make_naive", "numba-cuda",
        "one thread per output of C, the sum in a register",
        ("This thread computes one element of C. Its row is blockIdx.y * blockDim.y + threadIdx.y and\n"
         "its column blockIdx.x * blockDim.x + threadIdx.x (threadIdx.x walks the columns, so a warp\n"
         "reads neighbouring elements of B). Threads past the edge of C (row >= m or col >= n) do\n"
         "nothing. Keep the sum in a local variable (acc(0) to start), walk p from 0 to k with a\n"
         "uint32 counter, and store c[row, col] once at the end.",),
        sim_params={"block": 8}, before="cpu-tiled"),
    Exercise(
        "naive-global", 4, "tilemm.ladder.simt.r04_naive_global_kernel", "make_naive_global", "numba-cuda",
        "naive, accumulating straight into C in global memory (the slow way, on purpose)",
        ("As in `naive`, one thread per element of C (threadIdx.x walks the columns, threads past the\n"
         "edge do nothing), but keep the sum in C itself: set c[row, col] to acc(0), then at every\n"
         "step p add a[row, p] * b[p, col] to c[row, col]. Each step reads and writes C in global\n"
         "memory: that traffic is the lesson.",),
        sim_params={"block": 8}, before="naive"),
    Exercise(
        "uncoalesced", 5, "tilemm.ladder.simt.r05_uncoalesced_kernel", "make_uncoalesced", "numba-cuda",
        "naive with threadIdx.x walking the rows of C: the coalescing lesson",
        ("Write `naive` with the thread axes swapped: the row is blockIdx.x * blockDim.x + threadIdx.x\n"
         "and the column blockIdx.y * blockDim.y + threadIdx.y, so the 32 threads of a warp read 32\n"
         "different rows of A. Threads past the edge of C do nothing; the sum stays in a register.",),
        sim_params={"block": 8}, before="naive"),
    Exercise(
        "tiled", 6, "tilemm.ladder.simt.r06_tiled_kernel", "make_tiled", "numba-cuda",
        "shared-memory tiles: each element of A and B loaded once per block, not once per thread",
        ("Walk K in phases of TILE. In each phase, this thread copies one element of A, a[row, phase + tx],\n"
         "into tile_a[ty, tx] and one of B, b[phase + ty, col], into tile_b[ty, tx] (a zero where the\n"
         "element lies past an edge of A or B), then cuda.syncthreads() so the whole tile is there;\n"
         "then add the TILE products tile_a[ty, j] * tile_b[j, tx] to a sum in a register, and\n"
         "cuda.syncthreads() again before the next phase overwrites the tiles. Phases: ceil(K / TILE),\n"
         "never derived from the grid. At the end, store the sum where (row, col) lies inside C.",),
        sim_params={"tile": 4}, coalescing_params={"tile": 8}, before="uncoalesced", uses_shared=True),
    Exercise(
        "rect", 7, "tilemm.ladder.simt.r07_rect_kernel", "make_rect", "numba-cuda",
        "one A tile and F B tiles per phase: F outputs per thread, A read F times less",
        ("This thread computes F outputs, in columns col0 + i * TILE (i < F), summed in total[i]\n"
         "(zero them first). Per phase of TILE along K: copy a[row, phase + tx] into tile_a[ty, tx] and,\n"
         "for each i, b[phase + ty, col0 + i * TILE] into tile_b[ty, tx + i * TILE] (zeros past the\n"
         "edges); cuda.syncthreads(); for each j read tile_a[ty, j] once and use it for the F products\n"
         "with tile_b[j, tx + i * TILE]; cuda.syncthreads(). At the end store each total[i] that lies\n"
         "inside C.",),
        sim_params={"tile": 4, "f": 2}, coalescing_params={"tile": 8, "f": 2}, before="tiled", uses_shared=True),
    Exercise(
        "regblock", 8, "tilemm.ladder.simt.r08_regblock_kernel", "make_regblock", "numba-cuda",
        "register tiles: per K step a thread reads THREAD_M + THREAD_N values and does THREAD_M x "
        "THREAD_N products",
        ("read_step: copy this thread's THREAD_M values of A at step p into a_v and its THREAD_N values\n"
         "of B into b_v. Value i of A lies at a_s[buf, p, (i // vec_m) * a_step + a_base + i % vec_m]:\n"
         "runs of vec_m neighbouring rows, runs a_step apart; value j of B at\n"
         "b_s[buf, p, (j // vec_n) * b_step + b_base + j % vec_n].",
         "outer_product: one K step of the register tile: for every i < THREAD_M and j < THREAD_N, add\n"
         "a_v[i] * b_v[j] to c_r[i, j] (as acc(...)). Each value read from shared memory feeds\n"
         "THREAD_N (or THREAD_M) products: that reuse is the lesson."),
        sim_params={"block_m": 16, "block_n": 16, "block_k": 4, "thread_m": 4, "thread_n": 4},
        uneven_params={"block_m": 32, "block_n": 16, "block_k": 4, "thread_m": 8, "thread_n": 8},
        before="rect", uses_shared=True),
    Exercise(
        "tensorcore-tutorial", 9, "tilemm.ladder.tensorcore.r09_tutorial_kernel", "matmul_kernel", "triton",
        "Triton's tiled GEMM: tl.dot on tensor cores, masked edges",
        ("Walk K a tile at a time, ceil(K / BLOCK_SIZE_K) tiles. For each: load the (BLOCK_SIZE_M,\n"
         "BLOCK_SIZE_K) tile of A at a_ptrs and the (BLOCK_SIZE_K, BLOCK_SIZE_N) tile of B at b_ptrs\n"
         "with tl.load, masked so that rows past M, columns past N and k past K read 0.0; add their\n"
         "product into the accumulator with tl.dot(a, b, accumulator); then move a_ptrs right and\n"
         "b_ptrs down by BLOCK_SIZE_K elements (strides stride_ak and stride_bk).",),
        sim_params={"block_m": 16, "block_n": 16, "block_k": 16, "group_m": 2}, before="regblock"),
)

BY_NAME = {e.name: e for e in EXERCISES}


def find(name: str) -> Exercise:
    """The exercise of a rung, by its kernel name or its number."""
    if name in BY_NAME:
        return BY_NAME[name]
    for e in EXERCISES:
        if name.isdigit() and int(name) == e.rung:
            return e
    raise ValueError(f"no exercise {name!r}; the exercises: "
                     + ", ".join(f"{e.rung} {e.name}" for e in EXERCISES))
