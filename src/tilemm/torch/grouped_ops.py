"""tilemm.grouped_matmul inside torch.compile and torch.export: the custom op
``torch.ops.tilemm.grouped_matmul``, one graph node a call.

Its arguments: a, b, the offsets or counts (``cut``; None for a batch), ``counted`` (cut holds
the masked layout's counts), the block scales of float8 groups (or None), the result's dtype as
a name, the program's parameters as one string (tilemm.torch.ops.encode_params) and
``zero_uncovered`` (a gradient's product: rows no group covers are zeroed even where the offsets
are on the GPU). The layout follows from the operands' ranks and ``counted``, as in the eager call.

- Tracing (traced_grouped_matmul) runs the eager call's checks of shapes, dtypes, out_dtype and
  out, whose errors come at trace time; the fake implementation gives the result's shape and
  dtype from the same Layout (tilemm.products.grouped_checks) and checks the parameters.
- The op's body is the eager path (a repeated call's plan, tilemm.products.grouped_calls), which
  checks offsets or counts on the host at every call, before the launch.
- Its gradients are tilemm.torch.grouped_autograd's, each product a call of this same op, so
  that AOTAutograd traces the backward too. Float8 groups record no gradient, as eager ones.

A list of problems is a call of the op a problem (the public function's loop).
"""
from typing import Optional      # (no postponed annotations: the op's schema is read from them)

import numpy as np
import torch

from tilemm.ladder import registry
from tilemm.products import grouped, grouped_calls
from tilemm.products.grouped_checks import COUNTED_M, check_scales, dtype_name, layout
from tilemm.products.grouped_launch import check_listed, check_out, device_grouped
from tilemm.torch.grouped_autograd import gradients, per_element
from tilemm.torch.ops import decode_params, encode_params


def traced_grouped_matmul(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params: dict):
    """tilemm.grouped_matmul(a, b, offs, counts=..., ...) on torch tensors while torch.compile or
    torch.export traces it: the eager call's checks, then the op."""
    if not isinstance(b, torch.Tensor):
        raise TypeError(f"grouped_matmul: operands are {type(a).__name__} and {type(b).__name__}; pass two NumPy "
                        "arrays, two CuPy arrays or two torch tensors (or two lists of them)")
    scaled = scale_a is not None or scale_b is not None
    offs, counts, lay = grouped.torch_layout(a, b, cut_as_tensor(offs), cut_as_tensor(counts), out_dtype, scaled)
    if scaled:
        check_scales(scale_a, scale_b, a, b, lay, torch)
        a, b = a.detach(), b.detach()          # float8 groups record no gradient, as eager ones
    elif grouped.records_gradient(a, b, None, None):
        grouped.check_differentiable(a, lay, out)
    check_out(out, lay, a.device)
    cut = offs if counts is None else counts
    c = torch.ops.tilemm.grouped_matmul(a, b, cut, counts is not None, scale_a, scale_b, lay.dtype,
                                        encode_params(params), False)
    return c if out is None else out.copy_(c)


def cut_as_tensor(cut):
    """offs or counts as a tensor: a list of ints (checked as the eager call checks it) as a host
    int32 tensor, a NumPy array as a host tensor of its dtype (Dynamo reads no NumPy array's
    dtype); a tensor or None as it is."""
    if isinstance(cut, (list, tuple)):
        check_listed(cut)
        return torch.tensor(list(cut), dtype=torch.int32)
    if isinstance(cut, np.ndarray):
        return torch.from_numpy(cut)
    return cut


@torch.library.custom_op("tilemm::grouped_matmul", mutates_args=())
def grouped_matmul_op(a: torch.Tensor, b: torch.Tensor, cut: Optional[torch.Tensor], counted: bool,
                      scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor], out_dtype: str, params: str,
                      zero_uncovered: bool) -> torch.Tensor:
    """tilemm.grouped_matmul(a, b, offs or counts, ...) as one operator: the eager path."""
    a, b = a.detach(), b.detach()      # (the autograd of the op is its own: the plans serve detached tensors)
    offs, counts = (None, cut) if counted else (cut, None)
    kwargs = decode_params(params)
    if zero_uncovered:                 # (a gradient's product: grouped_autograd's launch)
        lay = layout(a, b, offs, counts, out_dtype)
        return device_grouped(a, b, cut, lay, None, kwargs, zero_uncovered=True)
    c = grouped_calls.call(a, b, offs, counts, scale_a, scale_b, out_dtype, None, kwargs)
    if c is grouped_calls.NOT_SERVED:
        c = grouped.grouped_matmul(a, b, offs, counts=counts, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                                   **kwargs)
    return c


@grouped_matmul_op.register_fake
def grouped_matmul_fake(a, b, cut, counted, scale_a, scale_b, out_dtype, params, zero_uncovered):
    """The result's shape and dtype by the eager call's Layout (its errors where the call is bad),
    the parameters checked by the program's record."""
    offs, counts = (None, cut) if counted else (cut, None)
    lay = layout(a, b, offs, counts, out_dtype, scale_a is not None or scale_b is not None)
    registry.program("tensorcore-grouped").KERNEL.resolve(decode_params(params))
    return a.new_empty(lay.shape, dtype=getattr(torch, lay.dtype))


def save_operands(ctx, inputs, output):
    """What the backward reads: the operands, the offsets or counts, the layout and the parameters."""
    a, b, cut, counted, scale_a, _, _, params, _ = inputs
    ctx.save_for_backward(a, b, cut)
    offs, counts = (None, cut) if counted else (cut, None)
    ctx.split, ctx.params = layout(a, b, offs, counts, None, scale_a is not None).split, params


def operand_gradients(ctx, dc):
    """(dA, dB) by grouped_autograd's rule, each product a call of the op; none for the rest."""
    a, b, cut = ctx.saved_tensors
    da, db = gradients(a, b, cut, ctx.split, dc.to(a.dtype), ctx.params, *ctx.needs_input_grad[:2],
                       product=op_product)
    return da, db, None, None, None, None, None, None, None


def op_product(a, b, cut, split, params: str):
    """A gradient's grouped product (grouped_autograd.gradients' product) as a call of the op."""
    return torch.ops.tilemm.grouped_matmul(a, b, cut, split == COUNTED_M, None, None, dtype_name(a), params, True)


grouped_matmul_op.register_autograd(operand_gradients, setup_context=save_operands)


@grouped_matmul_op.register_vmap
def grouped_matmul_vmap(info, in_dims, a, b, cut, counted, scale_a, scale_b, out_dtype, params, zero_uncovered):
    """torch.func.vmap of the op: a call a batch element (grouped_autograd.per_element)."""
    return per_element(info.batch_size, (a, b, cut, scale_a, scale_b), in_dims[:3] + in_dims[4:6],
                       lambda a, b, cut, scale_a, scale_b: torch.ops.tilemm.grouped_matmul(
                           a, b, cut, counted, scale_a, scale_b, out_dtype, params, zero_uncovered))
