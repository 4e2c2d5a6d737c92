"""Operands framed inside larger buffers, for the tests that a program stays inside its operands:
each view MARGIN elements in from every edge of its buffer (its row stride past its width), the
buffer around a view a program reads holding a value that spoils any answer it reaches (NaN, or
the largest int8), and the buffer around one it writes a sentinel that no answer is."""
import torch

from .conftest import ON_GPU

DEVICE = "cuda" if ON_GPU else "cpu"     # the programs under Triton's interpreter on the host
MARGIN = 16        # elements of buffer before and after a view, in every dimension (16 bytes: int8 TMA's alignment)


def poison(dtype: torch.dtype) -> float:
    """What a read past an operand brings in: NaN, or for integers the largest int8 (exact sums move)."""
    return float("nan") if dtype.is_floating_point else 127


def sentinel(dtype: torch.dtype) -> float:
    """What the buffer around a result holds: exact in 16 bits, and past what an int32 sum here reaches."""
    return -77.0 if dtype.is_floating_point else -(2**31) + 77


def framed(shape, fill, dtype: torch.dtype, g=None, pitch: int | None = None):
    """(view, buffer): a view of `shape` (1-D, 2-D or 3-D) at MARGIN along every dimension of a
    buffer `fill` elsewhere, whose rows are `pitch` elements apart (default: the width and both
    margins, rounded up to 16 elements: 16-byte aligned rows and start). The view random (normal,
    or int8 over its whole range) where a generator g is given, else `fill` too."""
    if len(shape) == 1:
        pitch = shape[0] + 2 * MARGIN
    pitch = pitch or -(-(shape[-1] + 2 * MARGIN) // 16) * 16
    assert pitch >= shape[-1] + MARGIN, "a margin past the view's rows too"
    buffer = torch.full((*(s + 2 * MARGIN for s in shape[:-1]), pitch), fill, dtype=dtype)
    view = buffer[inside(shape)]
    if g is not None:
        view.copy_(random(shape, dtype, g))
    buffer = buffer.to(DEVICE)
    return buffer[inside(shape)], buffer


def packed(shape, fill, dtype: torch.dtype, g):
    """A contiguous random tensor of `shape` MARGIN elements into a 1-D buffer `fill` elsewhere:
    an operand a program must read packed (no row stride of its own), framed still."""
    view, _ = framed((torch.Size(shape).numel(),), fill, dtype)
    view.copy_(random(shape, dtype, g).flatten())
    return view.view(shape)


def random(shape, dtype: torch.dtype, g):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-128, 128, shape, generator=g).to(dtype)


def inside(shape) -> tuple:
    return tuple(slice(MARGIN, MARGIN + s) for s in shape)


def untouched_around(view, buffer) -> bool:
    """Whether every element of buffer outside framed's view is still the sentinel of its dtype."""
    outside = torch.ones(buffer.shape, dtype=torch.bool, device=buffer.device)
    outside[inside(view.shape)] = False
    return bool((buffer[outside] == sentinel(buffer.dtype)).all())
