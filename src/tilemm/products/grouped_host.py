"""tilemm.grouped_matmul on the host: a loop of products, one a group, for NumPy arrays and for
torch CPU tensors outside Triton's interpreter (under it, CPU tensors run the rung's program).
Sums are float32 (int64 for int8, exact, wrapped to int32), rounded once to C's dtype; float8
groups' block scales multiply the operands' blocks first (as scaled_matmul's host product does)."""
from __future__ import annotations

import numpy as np

from tilemm.products import scaled_common as scaled_out
from tilemm.products.grouped_checks import BATCHED, COUNTED_M, SCALE_BLOCK, SPLIT_K, SPLIT_M


def slices(a, b, values, lay):
    """(rows of A_g, A_g, B_g, where C_g lies in C) for each group: the layouts' meaning, written
    as plain slicing (the host loop, and the reference the program is tested against)."""
    start = 0
    for g in range(lay.groups):
        end = values[g] if values is not None else 0
        everything = slice(None)
        if lay.split == BATCHED:
            yield everything, a[g], b[g], g
        elif lay.split == COUNTED_M:
            yield slice(0, end), a[g], b[g], (g, slice(0, end))
        elif lay.split == SPLIT_M:
            yield slice(start, end), a, b[g], slice(start, end)
        elif lay.split == SPLIT_K:
            yield everything, a[:, start:end], b[start:end], g
        else:
            yield everything, a[g], b[:, start:end], (everything, slice(start, end))
        start = end if lay.split != COUNTED_M else 0


def numpy_products(a, b, c, values, lay) -> None:
    """C's groups of NumPy operands written into c (values: the offsets or counts as ints)."""
    wide = np.int64 if lay.dtype == "int32" else np.float32
    for rows, a_g, b_g, c_at in slices(a, b, values, lay):
        c[c_at] = (a_g[rows].astype(wide) @ b_g.astype(wide)).astype(lay.dtype)


def torch_products(a, b, c, values, lay, scales=None) -> None:
    """C's groups of torch CPU tensors written into c, as numpy_products does; scales: float8
    groups' block scales (scale_a, scale_b), checked (grouped_checks.check_scales)."""
    import torch
    wide = torch.int64 if lay.dtype == "int32" else torch.float32
    if scales is not None:
        a, b = scaled_out.scaled_blocks(a, b, *scales, SCALE_BLOCK)
    for rows, a_g, b_g, c_at in slices(a, b, values, lay):
        c[c_at] = (a_g[rows].to(wide) @ b_g.to(wide)).to(c.dtype)
