"""Gradients of tilemm.grouped_matmul for torch tensors. Each layout's two gradients are grouped
products of the same program in another layout: for C_g = A_g @ B_g, dA_g = dC_g @ B_g^T and
dB_g = A_g^T @ dC_g, where the group axis that offs cut in C becomes a cut of K (the weight's
gradient of the MoE forward pass is the K-cut product) and the reverse."""
from __future__ import annotations

import torch

from tilemm.products.grouped_launch import device_grouped
from tilemm.products.grouped_checks import BATCHED, COUNTED_M, SPLIT_K, SPLIT_M, SPLIT_N, layout
from tilemm.torch import batched_grads
from tilemm.torch.compiled_transforms import eager_only
from tilemm.torch.ops import tangent


def differentiable(a, b, offs, counts, lay, params):
    """grouped_matmul(a, b, offs or counts) recorded for autograd."""
    cut = offs if counts is None else counts
    if cut is not None and not isinstance(cut, torch.Tensor):
        cut = torch.as_tensor(cut, dtype=torch.int32)
    return GroupedMatmul.apply(a, b, cut, lay, params)


def product(a, b, cut, split, params):
    """One grouped product for a gradient: a new result, rows that no group covers zeroed;
    itself recorded (a double backward; jacrev and vmap of grad transform the backward's products)."""
    offs, counts = (None, cut) if split == COUNTED_M else (cut, None)
    if split == BATCHED:
        offs = None
    lay = layout(a, b, offs, counts, None)
    return GroupedMatmul.apply(a, b, cut if split != BATCHED else None, lay, params, True)


def gradients(a, b, cut, split, dc, params, need_a: bool, need_b: bool, product=product):
    """(dA, dB) of C = grouped(a, b, cut) in layout `split` (None where not needed), each a
    product(a, b, cut, split, params): this module's launch for eager autograd, the custom op
    (tilemm.torch.grouped_ops) where torch.compile traces the backward."""
    da = db = None
    if split in (BATCHED, COUNTED_M):
        if split == COUNTED_M:
            # rows past a group's count are not functions of a or b: their gradient is dropped
            rows = torch.arange(a.shape[1], device=dc.device)
            dc = dc * (rows[None, :, None] < cut.to(dc.device)[:, None, None]).to(dc.dtype)
        if need_a:
            da = product(dc, b.mT, None, BATCHED, params)
        if need_b:
            db = product(a.mT, dc, None, BATCHED, params)
    elif split == SPLIT_M:          # a (T, K) rows cut, b (G, K, N), c (T, N)
        if need_a:
            da = product(dc, b.mT, cut, SPLIT_M, params)             # (T, N) x (G, N, K)
        if need_b:
            db = product(a.T, dc, cut, SPLIT_K, params)              # (K, T) x (T, N), T cut
    elif split == SPLIT_K:          # a (M, T), b (T, N), T cut, c (G, M, N)
        if need_a:
            da = product(dc, b.T, cut, SPLIT_N, params)              # (G, M, N) x (N, T), T cut
        if need_b:
            db = product(a.T, dc, cut, SPLIT_M, params)              # (T, M) rows cut x (G, M, N)
    elif split == SPLIT_N:          # a (G, M, K), b (K, T) columns cut, c (M, T)
        if need_a:
            da = product(dc, b.T, cut, SPLIT_K, params)              # (M, T) x (T, K), T cut
        if need_b:
            db = product(a.mT, dc, cut, SPLIT_N, params)             # (G, K, M) x (M, T) columns cut
    return da, db


@eager_only
class GroupedMatmul(torch.autograd.Function):
    """The grouped product for autograd and torch.func's transforms (grad, vjp, jacrev, vmap,
    jvp), as tilemm.torch.ops' MatmulFunction is the plain product's."""

    @staticmethod
    def forward(a, b, cut, lay, params, zero_uncovered=False):
        return device_grouped(a, b, cut, lay, None, params, zero_uncovered=zero_uncovered)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, cut, lay, params, zero_uncovered = (inputs + (False,))[:6]
        ctx.save_for_backward(a, b, cut) if cut is not None else ctx.save_for_backward(a, b)
        ctx.save_for_forward(a, b)
        ctx.cut, ctx.lay, ctx.params, ctx.zero_uncovered = cut, lay, params, zero_uncovered

    @staticmethod
    def backward(ctx, dc):
        a, b, *rest = ctx.saved_tensors
        cut = rest[0] if rest else None
        # (autograd's batched dC, is_grads_batched: torch's products, tilemm.torch.batched_grads)
        da, db = gradients(a, b, cut, ctx.lay.split, dc.to(a.dtype), ctx.params, *ctx.needs_input_grad[:2],
                           batched_grads.grouped_product if batched_grads.batched(dc) else product)
        return da, db, None, None, None, None

    @staticmethod
    def jvp(ctx, da, db, *_):
        """dC_g = dA_g @ B_g + A_g @ dB_g: the same grouped product (linear in each operand)."""
        a, b = ctx.saved_tensors[:2]
        return tangent(da, db, a, b, lambda x, y: GroupedMatmul.apply(x, y, ctx.cut, ctx.lay, ctx.params,
                                                                        ctx.zero_uncovered))

    @staticmethod
    def vmap(info, in_dims, a, b, cut, lay, params, zero_uncovered=False):
        return per_element(info.batch_size, (a, b, cut), in_dims[:3],
                           lambda a, b, cut: GroupedMatmul.apply(a, b, cut, lay, params, zero_uncovered))


def per_element(size: int, tensors: tuple, dims: tuple, product):
    """vmap of a grouped product: product(*elements) for each of `size` batch elements (a tensor's
    slice along its vmapped dimension; where that is None, the tensor itself), stacked along
    dimension 0 (the groups are the program's own batch, and the vmapped dimension may lie in any
    operand). Returns (the stack, 0)."""
    def element(x, dim, i):
        return x if dim is None else x.select(dim, i)
    return torch.stack([product(*(element(x, d, i) for x, d in zip(tensors, dims))) for i in range(size)]), 0
