"""Rung 15, `tensorcore-grouped`: many products in one launch, the grouped GEMM of a mixture of
experts (the program and its launcher are in r15_grouped_kernel.py; ``tilemm.grouped_matmul`` is
its public face). Rung 9 computes one product, a program a tile of C. Here a fixed grid of
programs (persistent: about one an SM) walks the list of every group's tiles: program p takes
tiles p, p + P, p + 2P..., and finds which group a tile belongs to by walking the groups' sizes,
read from `offs` on the device. The launch does not depend on the sizes (no host read, so a CUDA
graph can replay it), and an empty group or a group of one row costs its tiles only: no program
waits on a group it has no tile of. Triton's tutorial 08 (grouped GEMM) is the model; this
program reads each group's slice through strides instead of a table of pointers, so every layout
of ``torch._grouped_mm`` is one program with a different SPLIT:

- 2-D a (tokens sorted by expert, offs cutting its rows) x 3-D b (G, K, N): the MoE forward pass;
- 3-D a x 3-D b: a batch of same-sized products; with `counts`, the masked layout (a
  fixed-capacity buffer per expert, counts[g] valid rows);
- 2-D a x 2-D b with offs cutting K: (G, M, N), the weight gradient;
- 3-D a (G, M, K) x 2-D b with offs cutting N.

Within a group, tiles are numbered GROUP_SIZE_M block rows at a time (the matmul tutorial's L2
order). For the MoE forward layouts with both operands K-major (a row-major, b the transpose of a
contiguous (G, N, K): how torch's MoE layers hold their weights), r15_grouped_tma_kernel.py's
form of the program brings its tiles in by TMA, one 2-D descriptor of each operand's stacked
rows (tma=None takes it where the operands allow); there a group's last block row, where small_m
rows or fewer are left, is computed in short tiles of small_m rows (32), so an expert routed 20
rows does not pay for a 128-row product. Sums are float32 for 16-bit and float32
operands (float32 products exact: IEEE, not TF32) and int32 for int8 (exact), rounded once to C's
type. Float8 groups take rung 16's block scales (r15_grouped_scales.py), applied to each K step's
float32 partial sums.

Constraints:
- float16, bfloat16, float32 or int8, both operands the same; C of the operands' type, or float32
  (int8: int32); float8 with block scales in the MoE forward layouts (C bfloat16, float16 or float32);
- any sizes and strides, empty groups included; offsets and counts are clamped into the operands
  on the device, so bad ones compute nonsense but never touch memory outside them;
- tiles are powers of two, 16 or more (tl.dot's smallest); small_m at most block_m;
- the shared memory of num_stages stages of tiles must fit the GPU (checked before launch).

Registered on matmul's ladder as one group (a batch of one): kernel="tensorcore-grouped" computes
a plain product with this program.
"""
from __future__ import annotations

from tilemm.ladder.record import Kernel, Param, Traffic, WholeNumbers, register
from tilemm.engine import availability

BLOCKS = (16, 32, 64, 128, 256)
DEFAULTS = dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4, programs=None, tma=None,
                small_m=None)
# the interpreter's tiles: small, so the tests walk the tile loop at toy sizes
INTERPRETER_TILES = dict(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2)


def launch(*args, **kwargs):
    """The one launch (r15_grouped_kernel.launch; Triton loads here, on first use)."""
    from tilemm.ladder.tensorcore.r15_grouped_kernel import launch as launch_program
    launch_program(*args, **kwargs)


def bound_launch(*args, **kwargs):
    """launch()'s one launch as a launcher without arguments, or None where there is none
    (r15_grouped_kernel.bound_launch): what a repeated call records and replays."""
    from tilemm.ladder.tensorcore.r15_grouped_kernel import bound_launch as bound
    return bound(*args, **kwargs)


def tma_eligible(a, b, split: int) -> bool:
    """Whether the operands can be read by TMA (r15_grouped_tma_kernel.eligible)."""
    from tilemm.ladder.tensorcore.r15_grouped_tma_kernel import eligible
    return eligible(a, b, split)


def programs_for(tiles_bound: int, programs: int | None) -> int:
    """The persistent grid: one program an SM (or `programs`), never more than there may be tiles."""
    return max(0, min(tiles_bound, programs or availability.multiprocessors()))


def run(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, programs, tma, small_m):
    """c = a @ b as a group of one (2-D torch tensors on one device)."""
    from tilemm.ladder.tensorcore.r15_grouped_kernel import BATCHED, launch
    m, n = c.shape
    if not (m and n):
        return
    tiles = -(-m // block_m) * -(-n // block_n)
    launch(a[None], b[None], c[None], None, BATCHED, 0, programs_for(tiles, programs), block_m, block_n, block_k,
           group_m, num_warps, num_stages, tma, small_m=small_m)


def traffic(p, block_m, block_n, **_):
    """A read once per block column of C and B once per block row; C written once (elements)."""
    return Traffic(read=p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m), written=p.m * p.n)


def limits(p, block_m, block_n, block_k, num_stages, **_):
    """Why the program can't compute p at these parameters, or None: a dimension past the
    tensor-core rungs' tile coordinates, or stages of tiles past the shared memory of a block."""
    return availability.dimension_limit(p.m, p.n, p.k) or shared_limit(block_m, block_n, block_k, num_stages,
                                                                        p.itemsize)


def shared_limit(block_m: int, block_n: int, block_k: int, num_stages: int, itemsize: int) -> str | None:
    return availability.check_shared(block_m, block_n, block_k, num_stages, itemsize)


PARAMS = (
    Param("block_m", DEFAULTS["block_m"], BLOCKS, "rows of C per tile"),
    Param("block_n", DEFAULTS["block_n"], BLOCKS, "columns of C per tile"),
    Param("block_k", DEFAULTS["block_k"], (16, 32, 64, 128), "depth of one K step"),
    Param("group_m", DEFAULTS["group_m"], (1, 2, 4, 8, 16), "block rows walked before the next column (L2 reuse)"),
    Param("num_warps", DEFAULTS["num_warps"], (1, 2, 4, 8, 16), "warps per program"),
    Param("num_stages", DEFAULTS["num_stages"], (1, 2, 3, 4, 5),
          "software-pipelining depth (shared-memory stages); neither given: shorter K steps, then fewer stages, where the "
          "tiles would not fit (float32)"),
    Param("programs", None, WholeNumbers(1, 65536), "persistent programs (None: one an SM)"),
    Param("tma", None, (None, False, True), "tiles brought in by TMA (the MoE forward layouts, both operands "
                                            "K-major; None: where the operands allow)"),
    Param("small_m", None, (None, 16, 32, 64, 128), "rows of the TMA program's short tiles, a group's last "
                                                   "rows where that few are left (None: 32, at most block_m; "
                                                   "block_m: none)"),
)

KERNEL = register(Kernel(
    name="tensorcore-grouped", rung=15, device="cuda", backend="triton", dtypes=("float16", "bfloat16"),
    seed="beyond", summary="grouped GEMM (Triton tutorial 08): persistent programs walk every group's tiles, "
                           "sizes read on the device",
    run=run, traffic=traffic, limits=limits, available=availability.available, params=PARAMS,
))
