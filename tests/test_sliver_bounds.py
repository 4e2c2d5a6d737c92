"""The TMA epilogue program stays inside its operands, with a sliver in its launch and without,
its descriptors made in the program (a compiled graph's form: every slot launched) or on the
host: each operand a view inside a larger buffer, NaN around the ones it reads (a read past
them reaches the answer) and a sentinel around the ones it writes (a write past them is seen);
Y and AUX within a rounding of float64's."""
import pytest
import torch

from tilemm.engine import epilogue_tma_launch
from tilemm.engine.epilogue_launch import ACTIVATION_CODES

from .test_epilogue import DEVICE, TOLERANCE, reference, relative

SENTINEL = -77.0                 # exact in 16 bits, never an answer here
MARGIN = 8                       # rows and columns of the buffer around each view


def framed(rows: int, cols: int, pitch: int, fill: float, dtype, g=None):
    """(view, buffer): a rows x cols view at (MARGIN, MARGIN) of a buffer of row stride `pitch`
    (16-byte aligned start and rows where 8 divides pitch), the buffer `fill` elsewhere; the view
    random normal where g is given, else `fill` too."""
    buffer = torch.full((rows + 2 * MARGIN, pitch), fill, dtype=dtype)
    view = buffer[MARGIN:MARGIN + rows, MARGIN:MARGIN + cols]
    if g is not None:
        view.copy_(torch.randn(rows, cols, generator=g, dtype=torch.float64).to(dtype))
    buffer = buffer.to(DEVICE)
    return buffer[MARGIN:MARGIN + rows, MARGIN:MARGIN + cols], buffer


def untouched_around(view, buffer) -> bool:
    """Whether every element of buffer outside view is still SENTINEL."""
    outside = torch.ones(buffer.shape, dtype=torch.bool, device=buffer.device)
    outside[MARGIN:MARGIN + view.shape[0], MARGIN:MARGIN + view.shape[1]] = False
    return bool((buffer[outside] == SENTINEL).all())


def round8(x: int) -> int:
    return -(-x // 8) * 8


# (M, N, K, Y's row stride past N (odd: Y stored an element at a time), activation, bias over M,
# A's layout ("t": A's columns contiguous), B's ("n": B's rows, else a Linear's weight), dtype)
CASES = [(130, 70, 24, 7, "silu", False, "n", "t", torch.bfloat16),
         (257, 40, 40, 8, "gelu", True, "t", "t", torch.float16),
         (257, 70, 40, 3, "relu", False, "n", "n", torch.bfloat16),
         (2052, 70, 24, 2, "gelu_tanh", True, "n", "t", torch.bfloat16)]
TILES = dict(block_m=64, block_n=64, block_k=16, group_m=2, num_warps=4, num_stages=2)


def launched(m, n, k, y_extra, activation, bias_over_m, a_layout, b_layout, dtype, sliver: bool,
             in_program: bool, programs_per_sm: int, tiles: dict = TILES, thin: tuple = (16, 16, 16)):
    """Every epilogue operand given (C, bias, residual, AUX), alpha 0.5 and beta 2: the launch's
    Y and AUX and what it must give, whether the buffers around Y and AUX are untouched, and
    Y_ALIGN. thin: the sliver's tiles (rows, columns, K step)."""
    g = torch.Generator().manual_seed(m + n + k)
    if a_layout == "t":                                   # A^T's rows: K x M
        a_rows, _ = framed(k, m, round8(m + 2 * MARGIN), float("nan"), dtype, g)
        a = a_rows.T
    else:
        a_rows, _ = framed(m, k, round8(k + 2 * MARGIN), float("nan"), dtype, g)
        a = a_rows
    if b_layout == "t":                                   # B^T's rows: a Linear's N x K weight
        b_rows, _ = framed(n, k, round8(k + 2 * MARGIN), float("nan"), dtype, g)
        b = b_rows.T
    else:
        b_rows, _ = framed(k, n, round8(n + 2 * MARGIN), float("nan"), dtype, g)
        b = b_rows
    bias_buffer = torch.full((2 * MARGIN + (m if bias_over_m else n),), float("nan"), dtype=dtype)
    bias_buffer[MARGIN:-MARGIN] = torch.randn(bias_buffer.numel() - 2 * MARGIN, generator=g).to(dtype)
    bias = bias_buffer.to(DEVICE)[MARGIN:-MARGIN]
    c, _ = framed(m, n, n + 2 * MARGIN + 1, float("nan"), dtype, g)
    residual, _ = framed(m, n, n + 2 * MARGIN + 3, float("nan"), dtype, g)
    y, y_buffer = framed(m, n, n + MARGIN + y_extra, SENTINEL, dtype)
    aux, aux_buffer = framed(m, n, n + MARGIN + y_extra, SENTINEL, dtype)
    rest = m % 128
    tiles = dict(tiles, programs_per_sm=programs_per_sm)
    program, grid, args, options = epilogue_tma_launch.arguments(
        a_rows, a_layout == "t", b_rows, b_layout == "t", y, aux, bias, bias_over_m, c, residual,
        ACTIVATION_CODES[activation], 0.5, 2.0, tiles, wrap=(lambda p: p) if in_program else None,
        sliver=dict(zip(("block_m", "block_n", "block_k"), thin), rows=rest) if sliver else None)
    program[grid](*args, **options)
    want_y, want_z = reference(a, b, bias, bias_over_m, c, residual, activation, 0.5, 2.0)
    return (y, aux, want_y, want_z, untouched_around(y, y_buffer), untouched_around(aux, aux_buffer),
            options["Y_ALIGN"])


@pytest.mark.parametrize("case", CASES, ids=lambda case: "x".join(map(str, case[:3])))
@pytest.mark.parametrize("sliver", [True, False], ids=["sliver", "whole"])
def test_descriptors_made_in_the_program_stay_inside(case, sliver):
    """The compiled graph's form: descriptors from the pointers, every slot launched (16 programs:
    more than the tiles of 130 rows, fewer than those of 2052)."""
    y, aux, want_y, want_z, y_kept, aux_kept, y_align = launched(*case, sliver=sliver, in_program=True,
                                                                 programs_per_sm=4)
    assert y_kept and aux_kept
    assert y_align == (1 if case[3] % 2 else 2 if case[1] % 4 else 8)
    tolerance = TOLERANCE[case[-1]]
    assert relative(y, want_y) <= tolerance and relative(aux, want_z) <= tolerance
    rows = case[0] - case[0] % 128          # the sliver's rows alone: a few in the whole's maximum
    assert relative(y[rows:], want_y[rows:]) <= tolerance and relative(aux[rows:], want_z[rows:]) <= tolerance


@pytest.mark.parametrize("case", CASES[:2], ids=lambda case: "x".join(map(str, case[:3])))
def test_host_descriptors_with_a_sliver_stay_inside(case):
    """The eager form: host descriptors over all of A's rows, programs no more than the tiles."""
    y, aux, want_y, want_z, y_kept, aux_kept, _ = launched(*case, sliver=True, in_program=False, programs_per_sm=1)
    assert y_kept and aux_kept
    assert relative(y, want_y) <= TOLERANCE[case[-1]] and relative(aux, want_z) <= TOLERANCE[case[-1]]


@pytest.mark.gpu
@pytest.mark.parametrize("in_program", [True, False], ids=["in the program", "host"])
@pytest.mark.parametrize("sliver", [True, False], ids=["sliver", "whole"])
@pytest.mark.parametrize("y_extra", [8, 1], ids=["Y_ALIGN 8", "Y_ALIGN 1"])
def test_on_the_gpu_the_program_stays_inside(in_program, sliver, y_extra):
    """On the GPU, an MLP's shape (2052 x 2048 x 2048: 4 rows past 2048) in the default tiles (128 x
    256 x 64, 8 warps, 4 stages; the sliver in 16 x 16 tiles, 256 of K a step), one program a
    slot: nothing written outside Y and AUX, nothing read outside the operands (NaN there)."""
    tiles = dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4)
    case = (2052, 2048, 2048, y_extra, "silu", False, "n", "t", torch.bfloat16)
    y, aux, want_y, want_z, y_kept, aux_kept, y_align = launched(*case, sliver=sliver, in_program=in_program,
                                                                 programs_per_sm=1, tiles=tiles, thin=(16, 16, 256))
    torch.cuda.synchronize()
    assert y_kept and aux_kept and y_align == (1 if y_extra % 2 else 8)
    assert relative(y, want_y) <= TOLERANCE[torch.bfloat16] and relative(aux, want_z) <= TOLERANCE[torch.bfloat16]
    assert relative(y[2048:], want_y[2048:]) <= TOLERANCE[torch.bfloat16]
