"""Rung 15's grouped programs stay inside their operands: the pointer program in every layout of
torch._grouped_mm and the masked one, and the TMA program in the MoE forward layouts, reached
through tilemm.grouped_matmul in Triton's interpreter. Every operand a view inside a larger buffer
(tests/framed.py): NaN (int8: 127) around A and B (a read past them reaches the answer), a sentinel
around C, given as out= (a write past it is seen). Groups empty, of one row, and the last ending
short of the dimension offs cuts: what no group covers is not written (grouped_matmul's
contract), so it still holds the sentinel. float16 and int8 (under the interpreter bfloat16
groups are computed from float32 copies, which would hide the operands' own buffers)."""
import pytest
import torch

import tilemm
from tilemm.products.grouped_host import slices
from tilemm.products.grouped_checks import layout
from tilemm.ladder.tensorcore import r15_grouped_kernel, r15_grouped_tma_kernel

from .conftest import ON_GPU
from .framed import framed, packed, poison, sentinel, untouched_around
from .test_grouped import check

TILES = dict(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2)
# the TMA program: tall tiles of 32 rows, a group's last 16 or fewer in short tiles of 16, K steps of 32
TMA_TILES = dict(block_m=32, block_n=16, block_k=32, small_m=16, num_warps=4, num_stages=2)


def result_dtype(dtype):
    return torch.int32 if dtype == torch.int8 else dtype


def covered(a, b, cut, counted: bool):
    """Where the groups put their products in the result (slices' `at`): True there."""
    lay = layout(a, b, None if counted else cut, cut if counted else None, None)
    where = torch.zeros(lay.shape, dtype=torch.bool)
    for _, _, _, at in slices(a, b, cut.tolist() if cut is not None else None, lay):
        where[at] = True
    return where


def assert_inside_and_right(c, buffer, a, b, cut, counted=False):
    """C within a rounding of float64's (int8: exact) where a group covers it, the sentinel where none
    does, and the sentinel all around it."""
    assert untouched_around(c, buffer), "a store past C"
    where = covered(a, b, cut, counted)
    assert (c.cpu()[~where] == sentinel(c.dtype)).all(), "a store where no group covers C"
    check(torch.where(where, c.cpu(), 0), a, b, cut, counted)


def pointer_case(a_shape, b_shape, cut, dtype, seed, counted=False):
    """A with rows past its width, B a 2-D or 3-D view with rows past its width, C from out= in a
    sentinel buffer of odd row stride: grouped_matmul with tma=False (the pointer program)."""
    g = torch.Generator().manual_seed(seed)
    a, _ = framed(a_shape, poison(dtype), dtype, g)
    b, _ = framed(b_shape, poison(dtype), dtype, g)
    cut = torch.tensor(cut, dtype=torch.int32) if cut is not None else None
    shape = layout(a, b, None if counted else cut, cut if counted else None, None).shape
    c, buffer = framed(shape, sentinel(result_dtype(dtype)), result_dtype(dtype), pitch=(shape[-1] + 16) | 1)
    tiles = {**TILES, "block_k": 32} if ON_GPU and dtype.itemsize == 1 else TILES   # (8-bit tensor cores' K)
    assert tilemm.grouped_matmul(a, b, None if counted else cut, counts=cut if counted else None, out=c,
                                 tma=False, **tiles) is c
    assert_inside_and_right(c, buffer, a, b, cut, counted)


# name: (a's shape, b's shape, offs or counts): groups of 0, 1, 0, 17 (one past a tile) and 1 along the
# dimension cut, 2 past offs[-1] uncovered (K's: read by no group)
POINTER_LAYOUTS = {
    "2d-3d": ((21, 24), (5, 24, 20), [0, 1, 1, 18, 19]),
    "2d-3d one row, K and N of 1": ((1, 1), (2, 1, 1), [0, 1]),
    "2d-2d": ((7, 21), (21, 20), [0, 1, 1, 18, 19]),
    "3d-2d": ((5, 7, 24), (24, 21), [0, 1, 1, 18, 19]),
    "3d-3d": ((3, 5, 24), (3, 24, 20), None),
    "masked": ((4, 18, 24), (4, 24, 20), [0, 1, 18, 17]),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("name", POINTER_LAYOUTS)
def test_the_pointer_program_stays_inside(name, dtype):
    a_shape, b_shape, cut = POINTER_LAYOUTS[name]
    pointer_case(a_shape, b_shape, cut, dtype, seed=len(name), counted=name == "masked")


# rows a group: none, one, a short tile's (16), one past it, a tall tile's (32) and one past, a tall
# tile and a short one; 3 rows of A past offs[-1]
TMA_GROUPS = [0, 1, 16, 17, 0, 32, 33, 48, 5]


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("name", ["2d-3d", "masked", "3d-3d"])
def test_the_tma_program_stays_inside(name, dtype):
    """A's rows framed with a row stride past K (3-D: groups of rows packed one after another, as
    the TMA program reads them), B the transpose of a packed (G, N, K) framed in a 1-D buffer, K = 48
    (a partial K step of 32), N = 24 (a partial tile of 16)."""
    g = torch.Generator().manual_seed(7)
    counted = name == "masked"
    if name == "2d-3d":
        cut = torch.tensor(TMA_GROUPS, dtype=torch.int32).cumsum(0).to(torch.int32)
        a, _ = framed((int(cut[-1]) + 3, 48), poison(dtype), dtype, g)
        groups = len(cut)
    else:
        cut = torch.tensor([0, 1, 17, 40], dtype=torch.int32) if counted else None
        groups = 4
        a = framed((groups * 40, 48), poison(dtype), dtype, g)[0].view(groups, 40, 48)     # 40 = 32 + 8
    b = packed((groups, 24, 48), poison(dtype), dtype, g).mT
    assert r15_grouped_tma_kernel.eligible(a, b, 1 if name == "2d-3d" else 0)
    shape = layout(a, b, None if counted else cut, cut if counted else None, None).shape
    c, buffer = framed(shape, sentinel(result_dtype(dtype)), result_dtype(dtype), pitch=(shape[-1] + 16) | 1)
    assert tilemm.grouped_matmul(a, b, None if counted else cut, counts=cut if counted else None, out=c,
                                 tma=True, programs=3, **TMA_TILES) is c
    assert_inside_and_right(c, buffer, a, b, cut, counted)


@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
def test_bad_offsets_on_the_device_stay_inside(tma):
    """Offsets a GPU holds are not checked (the program clamps them into the operands): unsorted,
    and past the rows of A, they give an answer, but read and write nothing outside the operands.
    (Under the interpreter grouped_matmul checks CPU offsets, so the launcher is called directly.)"""
    g = torch.Generator().manual_seed(8)
    a, _ = framed((37, 48), float("nan"), torch.float16, g)
    b = packed((4, 24, 48), float("nan"), torch.float16, g).mT
    c, buffer = framed((37, 24), sentinel(torch.float16), torch.float16, pitch=41)
    offs = torch.tensor([20, 5, 36, 1000], dtype=torch.int32, device=a.device)
    tiles = dict(TMA_TILES, block_m=16 if not tma else 32)
    small_m = tiles.pop("small_m")
    r15_grouped_kernel.launch(a, b, c, offs, r15_grouped_kernel.SPLIT_M, 37, 3, group_m=8, tma=tma,
                              small_m=small_m, **tiles)
    assert untouched_around(c, buffer), "a store past C"
    assert not c.isnan().any(), "a read past A or B"


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
def test_on_the_gpu_the_programs_stay_inside_at_their_own_tiles(tma):
    """On the GPU, a mixture of experts' forward pass in the rung's default tiles (128 x 256 x 64, 4
    stages; the TMA program's short tiles of 32): 8 experts routed 0, 1, 31, 33, 0, 300, 129 and 500
    rows of 1000, 6 rows past the last; bfloat16, K = 520, N = 700."""
    g = torch.Generator().manual_seed(9)
    cut = torch.tensor([0, 1, 31, 33, 0, 300, 129, 500], dtype=torch.int32).cumsum(0).to(torch.int32)
    a, _ = framed((int(cut[-1]) + 6, 520), float("nan"), torch.bfloat16, g)
    b = packed((8, 700, 520), float("nan"), torch.bfloat16, g).mT
    c, buffer = framed((a.shape[0], 700), sentinel(torch.bfloat16), torch.bfloat16, pitch=733)
    assert tilemm.grouped_matmul(a, b, cut, out=c, tma=tma) is c
    assert_inside_and_right(c, buffer, a, b, cut)
