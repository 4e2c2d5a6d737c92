"""tensorcore-f32's operands as its TMA programs read them: split into TF32 parts, stacked and
K-major (split_tf32), A's rows read across and B^T's (B row-major) down its columns by one
program."""
from __future__ import annotations

from tilemm.engine import launches, operand_copies


def parts_of(x, parts: int, block_rows: int, block_k: int):
    """(TMA descriptor, fill) of x's parts stacked, (parts * rows, K), K contiguous, and the
    launcher that writes them; of x itself, fill None, for one part (TF32) when x is already
    K-major with TMA's alignment."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    if parts == 1 and operand_copies.k_major(x):
        return TensorDescriptor.from_tensor(x, [block_rows, block_k]), None
    out = operand_copies.parts_buffer(x.shape[0], x.shape[1], parts, torch.float32, x.device)
    stacked = out.view(parts * x.shape[0], out.shape[2])
    return TensorDescriptor.from_tensor(stacked, [block_rows, block_k]), split_launch(x, out)


def split_launch(x, out):
    """A launcher without arguments of split_tf32, x (rows, K) into out (parts, rows, K padded):
    read along x's smaller stride (down its columns where they are contiguous, B^T's case), that
    stride passed last, so that the launches for A and for B^T ask Triton for one program."""
    from tilemm.ladder.tensorcore.r13_f32_kernel import split_tf32    # (Triton loads on first use)
    parts, rows, k_pad = out.shape
    down = x.stride(0) < x.stride(1)
    outer, inner = (x.stride(1), x.stride(0)) if down else (x.stride(0), x.stride(1))
    block = operand_copies.SPLIT_BLOCK
    grid = (-(-rows // block), -(-k_pad // block))
    return launches.bound_launch(split_tf32, grid, (x, out, rows, x.shape[1], k_pad, outer, inner, int(down)),
                                 dict(PARTS=parts, BLOCK_R=block, BLOCK_C=block))
