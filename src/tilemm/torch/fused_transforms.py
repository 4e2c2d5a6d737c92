"""tilemm.linear and tilemm.matmul_epilogue (the Triton route) under torch.func's transforms
(grad, vjp, jvp, vmap, jacrev, jacfwd, hessian, functional_call) and forward-mode AD
(torch.autograd.forward_ad's dual tensors), and their double backward.

There a call is the composite of one product and torch's own functions: Z = alpha * A @ B by
the fused-epilogue program (EpilogueProduct, the program with no epilogue but alpha: the same
sums, tiles and parameters as the fused call's), then beta * C, the bias, the activation and the
residual as torch adds and applies them. EpilogueProduct is an autograd.Function with
setup_context, its gradients and tangent products of itself (differentiable to any order) and a
vmap rule, as tilemm.matmul's MatmulFunction is for a plain product; the rest is torch's, so
every transform and derivative is what torch gives for F.linear and the activation.

The eager call (no transform, no dual level) is not this module's: one launch, and the Function
of tilemm.torch.fused_autograd (or tilemm.torch.nn_fused_routes) where a gradient is recorded,
whose backward launches the program's products; only under create_graph=True does that backward
rebuild the composite and differentiate it (double_backward), so that a second derivative is torch's.
"""
from __future__ import annotations

import torch

from tilemm.contract.numpy_rules import torch_transformed
from tilemm.numerics.arrays import as_rows
from tilemm.numerics.epilogue_math import activate_torch
from tilemm.products import fused
from tilemm.torch import batched_grads
from tilemm.torch.compiled_transforms import eager_only


def active() -> bool:
    """Whether a call runs under a torch.func transform or inside a forward-mode AD dual level
    (where a tensor may carry a tangent): two reads, no tensor inspected."""
    return torch_transformed(torch)


@eager_only
class EpilogueProduct(torch.autograd.Function):
    """alpha * a @ b of 2-D tensors by the fused-epilogue program (tilemm.products.fused.plain_product).
    dA = alpha * dC @ B^T, dB = alpha * A^T @ dC and the tangent alpha * (dA @ B + A @ dB) are
    products of this Function (so a second derivative is one too); the vmap rule folds the mapped
    dimension of one operand into the rows of A or the columns of B (one product), or, where
    both are mapped, makes a product a pair."""

    @staticmethod
    def forward(a, b, alpha: float, config: dict):
        return fused.plain_product(a, b, alpha, fused.TRITON, config)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, alpha, config = inputs
        ctx.save_for_backward(a, b)
        ctx.save_for_forward(a, b)
        ctx.alpha, ctx.config = alpha, config

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad[:2]
        # (autograd's batched dC, is_grads_batched: torch's products, tilemm.torch.batched_grads)
        times = batched_grads.product if batched_grads.batched(grad) else product
        da = times(grad, b.mT, ctx.alpha, ctx.config) if need_a else None
        db = times(a.mT, grad, ctx.alpha, ctx.config) if need_b else None
        return da, db, None, None

    @staticmethod
    def jvp(ctx, da, db, _alpha, _config):
        a, b = ctx.saved_tensors
        terms = [product(da, b, ctx.alpha, ctx.config) if da is not None else None,
                 product(a, db, ctx.alpha, ctx.config) if db is not None else None]
        terms = [t for t in terms if t is not None]
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    @staticmethod
    def vmap(info, in_dims, a, b, alpha, config):
        a_dim, b_dim = in_dims[0], in_dims[1]
        if b_dim is None:              # (V, M, K) @ (K, N): the stack's rows, one product
            a = a.movedim(a_dim, 0)
            c = product(as_rows(a), b, alpha, config)
            return c.reshape(a.shape[0], a.shape[1], c.shape[-1]), 0
        if a_dim is None:              # (M, K) @ (V, K, N): the stack's columns, (K, V * N)
            b = b.movedim(b_dim, 1)
            c = product(a, b.reshape(b.shape[0], -1), alpha, config)
            return c.reshape(c.shape[0], b.shape[1], b.shape[2]), 1
        a, b = a.movedim(a_dim, 0), b.movedim(b_dim, 0)
        return torch.stack([product(x, y, alpha, config) for x, y in zip(a.unbind(0), b.unbind(0))]), 0


def product(a, b, alpha: float, config: dict):
    """alpha * a @ b through EpilogueProduct (recorded by autograd and the transforms about it)."""
    return EpilogueProduct.apply(a, b, alpha, config)


def linear(x, weight, bias, activation: str, residual, config: dict):
    """activation(x @ weight.T + bias) + residual as the composite (the module's docstring)."""
    z = product(as_rows(x), weight.mT, 1.0, config)
    if bias is not None:
        z = z + bias
    y = activate_torch(z, activation).reshape(x.shape[:-1] + weight.shape[:1])
    return y if residual is None else y + residual


def matmul_epilogue(a, b, bias, bias_over_m: bool, c, residual, activation: str, alpha: float, beta: float,
                    config: dict):
    """activation(alpha * a @ b + beta * c + bias) + residual as the composite; bias 1-D (over
    M's rows where bias_over_m, else over N's columns)."""
    return fused.torch_epilogue(product(a, b, alpha, config), bias, bias_over_m, c, residual, activation, beta)


def double_backward(grad, inputs: tuple, needs, compose) -> tuple:
    """The gradients of compose(*inputs) given grad, recorded as a graph of their own: an eager
    fused node's backward under create_graph=True (its forward's value rebuilt as the composite,
    then torch's autograd through it), so that a second derivative is torch's. None for an
    input not needed or absent."""
    wanted = [x for x, need in zip(inputs, needs) if need and x is not None]
    with torch.enable_grad():
        y = compose(*inputs)
    found = iter(torch.autograd.grad(y, wanted, grad, create_graph=True, allow_unused=True,
                                     materialize_grads=True))
    return tuple(next(found) if need and x is not None else None for x, need in zip(inputs, needs))
