"""Rung 9, `tensorcore-tutorial`: the tiled GEMM on tensor cores at the size of Triton's matmul
tutorial (the program and its launcher are in r09_tutorial_kernel.py). Each program computes one
BLOCK_SIZE_M x BLOCK_SIZE_N tile of C: per K step it loads a (BLOCK_SIZE_M, BLOCK_SIZE_K) tile of A
and a (BLOCK_SIZE_K, BLOCK_SIZE_N) tile of B through pointers and masks, and `tl.dot` multiplies
them on the tensor cores into float32 sums; Triton stages the tiles through shared memory
(num_stages deep) itself. Programs are numbered in groups of GROUP_SIZE_M block rows, so that
neighbours share their tiles of B in L2. C is rounded once from the float32 sums to the inputs'
16-bit type: what NumPy does for float16 (and torch for bfloat16).

Constraints:
- float16 or bfloat16, both operands the same;
- any M, N, K (edges are masked, K = 0 gives zeros) and any strides (transposed views as they are);
- tiles are powers of two, 16 or more (tl.dot's smallest);
- each operand and C within 2^31 elements of its start (32-bit offsets);
- the shared memory of num_stages stages of tiles must fit the GPU (checked before launch).

Rung 10 (`tensorcore`, r10_tensorcore.py) is the same product made fast, and its additions are
the next lessons: tiles brought in by TMA (Hopper's bulk copy engine, no address arithmetic and
no masks) past a size where its descriptors pay; persistent programs, one an SM, that write one
tile while the next one loads; split K (and stream-K), so that products with few tiles of C still
fill the SMs; copies of operands into 16-byte (or 128-byte) aligned rows where TMA needs them;
tiles chosen by shape and predicted wave quantization; 64-bit offsets; and replay, which launches
a repeated call's compiled program directly, past Triton's Python layers.
"""
from __future__ import annotations

from tilemm.ladder.record import Kernel, Traffic, register
from tilemm.engine import availability
from tilemm.ladder.tensorcore.tile_params import tile_params

OFFSET_LIMIT = 2**31        # the kernel's offsets are 32-bit (r09_tutorial_kernel.OFFSET_LIMIT)


def run(a, b, c, **params):
    from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul    # Triton loads on first use
    matmul(a, b, c, **params)


def traffic(p, block_m, block_n, **_):
    """A read once per block column of C and B once per block row; C written once (elements)."""
    return Traffic(read=p.m * p.k * -(-p.n // block_n) + p.k * p.n * -(-p.m // block_m), written=p.m * p.n)


def limits(p, block_m, block_n, block_k, num_stages, **_):
    """Why the kernel can't compute p at these parameters, or None: an operand of contiguous rows
    past its 32-bit offsets, a dimension past the tensor-core rungs' tile coordinates, or stages
    of tiles past the shared memory a block may use."""
    largest = max(p.m * p.k, p.k * p.n, p.m * p.n)
    if largest >= OFFSET_LIMIT:
        return (f"an operand or C of {largest} elements: the tutorial's kernel addresses elements with 32-bit "
                f"offsets (under {OFFSET_LIMIT}); rung 10, kernel='tensorcore', takes it")
    return availability.dimension_limit(p.m, p.n, p.k) or availability.check_shared(block_m, block_n, block_k, num_stages,
                                                                          p.itemsize)


register(Kernel(
    name="tensorcore-tutorial", rung=9, device="cuda", backend="triton", dtypes=("float16", "bfloat16"),
    seed="beyond", summary="Triton's matmul tutorial: tl.dot on tensor cores, grouped order, masked edges",
    run=run, traffic=traffic, limits=limits, available=availability.available,
    # the tutorial's first configuration for CUDA
    params=tile_params(128, 256, 64, num_warps=8, num_stages=3),
))
