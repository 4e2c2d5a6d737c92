"""Backward passes whose dY is batched by autograd itself: ``torch.autograd.grad(...,
is_grads_batched=True)``, which ``torch.autograd.functional.jacobian(vectorize=True)``, its
hessian and gradcheck's ``check_batched_grad`` call. autograd then runs a Function's backward
under its own (legacy) vmap, where dY is a batched tensor with no memory of its own: a Triton
launch or tilemm's checks could not read it (NotImplementedError, "Cannot access storage of
BatchedTensorImpl"). There tilemm's Functions take their gradients' products from torch's own
operators, which that vmap batches; every other backward launches tilemm's programs."""
from __future__ import annotations

import torch

# (a torch without it has no legacy batched tensors to tell apart)
is_legacy_batched = getattr(torch._C._functorch, "is_legacy_batchedtensor", lambda t: False)


def batched(grad) -> bool:
    """Whether dY is autograd's batched tensor (is_grads_batched=True)."""
    return grad is not None and is_legacy_batched(grad)


def product(x, y, alpha: float = 1.0, config=None):
    """alpha * x @ y by torch's matmul (x, y: the gradients' operands, dY's batch among them;
    config: the program's, not read)."""
    z = torch.matmul(x, y)
    return z if alpha == 1 else z * alpha


def grouped_product(a, b, cut, split: int, params=None):
    """A grouped product of tilemm.torch.grouped_autograd's gradients (its product's arguments) by
    torch's operators, a product a group: offs or counts read on the host, groups joined by
    concatenation (an in-place write into a result would not take a batched operand)."""
    from tilemm.products.grouped_checks import BATCHED, SPLIT_K, SPLIT_M, SPLIT_N
    if split == BATCHED:
        return torch.matmul(a, b)
    ends = [int(v) for v in cut.tolist()]
    starts = [0] + ends[:-1]
    if split == SPLIT_K:            # a (M, T), b (T, N): (G, M, N)
        if not ends:
            return torch.zeros(0, a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        return torch.stack([torch.matmul(a[:, s:e], b[s:e]) for s, e in zip(starts, ends)])
    if split == SPLIT_M:            # a (T, K), b (G, K, N): (T, N), rows past offs[-1] zero
        parts = [torch.matmul(a[s:e], b[g]) for g, (s, e) in enumerate(zip(starts, ends))]
        rest = a.shape[0] - (ends[-1] if ends else 0)
        return torch.cat(parts + [torch.zeros(rest, b.shape[-1], dtype=a.dtype, device=a.device)], 0)
    if split == SPLIT_N:            # a (G, M, K), b (K, T): (M, T), columns past offs[-1] zero
        parts = [torch.matmul(a[g], b[:, s:e]) for g, (s, e) in enumerate(zip(starts, ends))]
        rest = b.shape[1] - (ends[-1] if ends else 0)
        return torch.cat(parts + [torch.zeros(a.shape[-2], rest, dtype=a.dtype, device=a.device)], 1)
    raise ValueError(f"grouped gradient: layout {split} has no product here")
