"""Operands as the TMA programs read them: rows 16-byte aligned (copied where they are not), a
column-major operand as its transpose's rows, an operand's split parts stacked (digits, TF32 parts), and
C's store alignment."""
from __future__ import annotations

from tilemm.engine.launches import CopyInto, bound_launch

SPLIT_BLOCK = 64   # split passes: 64 x 64 elements a program


def k_major(x) -> bool:
    """x's rows are contiguous, with the 16-byte aligned row stride and base TMA needs."""
    return x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def row_descriptor(x, block_rows: int, block_cols: int, align: int = 16):
    """(TMA descriptor, fill) for x (rows, cols) read row by row: of x itself when its rows are
    contiguous and `align`-byte aligned (16: TMA's rule, k_major), fill None; else of aligned rows
    that fill() copies x into, a pass over x that counts in the caller's time (a row of 8191 bf16
    is 16382 bytes; a transposed view has no rows; align=128 for speed: rows_aligned_pays). Call
    fill before each launch: it reads x's current values."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    x, fill = aligned_rows(x, align)
    return TensorDescriptor.from_tensor(x, [block_rows, block_cols]), fill


def descriptor(x, block_rows: int, block_cols: int, align: int = 16, transposed: bool = True,
               copy_transpose_rows: bool = False):
    """(TMA descriptor, transposed, fill) for the (rows, cols) operand x: of x itself if its rows
    are contiguous, of x^T if its columns are (and transposed allows it), else of aligned rows
    that fill() copies x into (TMA wants 16-byte aligned strides and base; align=128 also copies
    rows whose stride is not a multiple of 128 bytes); fill is None when there is nothing to copy.
    copy_transpose_rows (B): where x must be copied and x^T's rows are contiguous but unaligned,
    copy those rows (B^T, K-major) rather than transpose x: a plain row copy is cheaper than a
    transposing one, and measured faster in whole calls with both operands transposed. Done for A
    as well (rows of A^T, M-major) it lost (the program then reads A M-major), so A keeps its
    transposition."""
    if transposed and not k_major(x) and (k_major(x.T) or (
            copy_transpose_rows and x.T.stride(1) == 1 and x.stride(1) != 1)):
        desc, fill = row_descriptor(x.T, block_cols, block_rows, align)
        return desc, True, fill
    desc, fill = row_descriptor(x, block_rows, block_cols, align)
    return desc, False, fill


def aligned_rows(x, align: int = 16):
    """(rows, fill): x itself where its rows are contiguous and `align`-byte aligned, fill None;
    else a view of fresh rows that are, which fill() copies x into (see row_descriptor)."""
    if k_major(x) and (x.stride(0) * x.element_size()) % align == 0:
        return x, None
    import torch
    rows, cols = x.shape
    per_row = align // x.element_size()
    padded = torch.empty((rows, -(-cols // per_row) * per_row), dtype=x.dtype, device=x.device)
    return padded[:, :cols], rows_copy(x, padded[:, :cols])


COPY_BLOCK = 64
# Bytes from which an operand whose rows are contiguous but not 16-byte aligned is copied by torch:
# faster on the GPU than copy_rows, but about twice a replayed launch's CPU time. Under it, the
# launch: measured in bf16 whole calls with copies of 0.3-2 MB, a clear gain where the call was
# CPU-bound and close to level where it was GPU-bound.
TORCH_COPY_FROM = 2 << 20


def rows_copy(x, rows):
    """A launcher without arguments copying x into rows (contiguous rows, 16-byte aligned): torch's
    copy where x's rows are contiguous but not 16-byte aligned and x has TORCH_COPY_FROM bytes or
    more, else tilemm.engine.programs.copy_rows, 64 x 64 tiles. Measured torch's against Triton's:
    Triton's tiles transpose far faster, and copy 16-byte aligned rows faster, but torch's copy
    wins on rows whose bytes allow no vector loads. torch's copy itself runs faster on 4-byte words: where
    such rows' bytes and x's start divide by 4, it copies int32 views."""
    if x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 and x.numel() * x.element_size() >= TORCH_COPY_FROM:
        row_bytes = x.shape[1] * x.element_size()
        words = x.element_size() < 4 and row_bytes % 4 == 0 and x.stride(0) * x.element_size() % 4 == 0
        return CopyInto(rows, x, "int32" if words and x.data_ptr() % 4 == 0 else None)
    from tilemm.engine.programs import copy_rows     # (Triton loads on first use)
    grid = (-(-x.shape[0] // COPY_BLOCK), -(-x.shape[1] // COPY_BLOCK))
    return bound_launch(copy_rows, grid, (x, rows, x.shape[0], x.shape[1], x.stride(0), x.stride(1), rows.stride(0)),
                        dict(BLOCK_R=COPY_BLOCK, BLOCK_C=COPY_BLOCK))


def stacked_parts_tensor(x, parts: int, dtype, split, **constexprs):
    """x's parts that the split program writes (digit planes), stacked (parts * rows, K
    padded to 16 bytes), K contiguous, written now. Passing B^T as x writes B K-major.
    split(x, out, R, C, C_PAD, stride_r, stride_c, BLOCK_R, BLOCK_C, **constexprs) is the program."""
    out = parts_buffer(x.shape[0], x.shape[1], parts, dtype, x.device)
    parts_fill(x, out, split, **constexprs)()
    return out.view(parts * x.shape[0], out.shape[2])


def parts_buffer(rows: int, k: int, parts: int, dtype, device):
    """An empty (parts, rows, K padded to 16 bytes) tensor for parts_fill."""
    import torch
    per_16_bytes = 16 // dtype.itemsize
    return torch.empty((parts, rows, -(-k // per_16_bytes) * per_16_bytes), dtype=dtype, device=device)


def parts_fill(x, out, split, **constexprs):
    """A launcher without arguments of the split program of x (rows, K) into out (parts_buffer's
    shape)."""
    parts, rows, k_pad = out.shape
    grid = (-(-rows // SPLIT_BLOCK), -(-k_pad // SPLIT_BLOCK))
    return bound_launch(split, grid, (x, out, rows, x.shape[1], k_pad, x.stride(0), x.stride(1)),
                        dict(BLOCK_R=SPLIT_BLOCK, BLOCK_C=SPLIT_BLOCK, **constexprs))


def c_alignment(c) -> int:
    """The largest power of two up to 8 dividing C's width and its row stride, for a C whose rows
    are contiguous (else 1): what the TMA programs are told (C_ALIGN), so that they store rows of
    7026 or 6524 elements 2 or 4 at a time where Triton, knowing only divisibility by 16, stores
    them one by one. Each rung passes it where it was measured to pay."""
    if c.stride(1) != 1:
        return 1
    width, stride = c.shape[1], c.stride(0)
    return min(8, width & -width if width else 8, stride & -stride if stride else 8)
