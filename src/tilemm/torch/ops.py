"""tilemm's products in PyTorch's autograd, torch.func, torch.jit and torch.compile.

- A ``tilemm.matmul`` of torch tensors that would record a gradient (one requires grad, grad
  mode on), or under a ``torch.func`` transform (grad, vjp, jacrev, vmap, jvp, jacfwd), goes
  through ``MatmulFunction``: its forward is the call's plan (tilemm.plans.calls); its backward dA = dC @ B^H and
  dB = A^H @ dC (torch's rule: the conjugate transposes for complex operands), its forward-mode
  derivative dC = dA @ B + A @ dB, and its vmap rule one product with the vmapped dimension as a
  stack dimension; each computed by tilemm with the same kernel and parameters.
- Inside ``torch.compile`` (and ``torch.export``), under ``torch.jit.trace``, and on tensors that
  hold no memory (the meta device, FakeTensors and other tensors dispatched by Python),
  ``tilemm.matmul`` calls the custom op ``torch.ops.tilemm.matmul`` (and ``tilemm.scaled_matmul``
  ``torch.ops.tilemm.scaled_matmul``), each with a fake implementation and its autograd formula,
  so that a graph or a trace holds one node a product and the shapes come from the fake. The
  kernel name and its parameters travel in the op's schema: ``kernel: str?`` and the parameters
  as one string, ``"block_m=64;tma=True"``.
- A plain call (no gradient recorded, no transform, not tracing or compiling) touches none of this.

Importing this module registers the ops (``torch.export``-ed programs and saved TorchScript modules need it).
"""
import functools
from typing import Optional

import torch

from tilemm.contract import numpy_rules as contract, torch_rules as torch_contract
from tilemm.numerics import arrays, dtypes
from tilemm.plans import calls
from tilemm.products import scaled
from tilemm.torch.batched_grads import batched
from tilemm.torch.compiled_transforms import eager_only
# (the ops' arguments as text; tilemm.torch_ops' public names too)
from tilemm.torch.op_args import TORCH_DTYPES, decode_params, dtype_text, encode_params, specialized  # noqa: F401

# ---------------------------------------------------------------- the gradients, for any product


def operand_grads(grad, a, b, need_a: bool, need_b: bool, product):
    """(dA, dB) of C = A @ B (numpy.matmul's rules: 1-D operands, broadcast stacks) given dC, as
    torch gives them: dA = dC @ B^H, dB = A^H @ dC (conjugate transposes, for complex operands),
    each summed back to its operand's shape and cast to its dtype (None where not needed); zeros
    where a dimension is empty (an empty sum; DTensors' by the products, placed as torch's are).
    ``product(x, y)`` multiplies two tensors (tilemm with the forward's kernel and parameters)."""
    if not (grad.numel() and a.numel() and b.numel()) and type(grad).__name__ != "DTensor":
        # M, N, K or the stack empty: no product to make (a DTensor's makes one, placed as torch's mm places it)
        return (torch.zeros(a.shape, dtype=a.dtype, device=a.device) if need_a else None,
                torch.zeros(b.shape, dtype=b.dtype, device=b.device) if need_b else None)
    common = torch.promote_types(grad.dtype, a.dtype)    # dC's dtype where out_dtype widened C: the products'
    a2 = (a.unsqueeze(0) if a.dim() == 1 else a).to(common)          # (m=1, k)
    b2 = (b.unsqueeze(1) if b.dim() == 1 else b).to(common)          # (k, n=1)
    if a.dim() == 3 and b.dim() == 3 and bool(a.shape[0] == 1) != bool(b.shape[0] == 1):    # (SymBools: bool())
        # torch multiplies a stack by a stack of one as by one matrix, and so sums that one's
        # gradient over the stack in one product, rounded once: the same here
        a2, b2 = (a2[0], b2) if a.shape[0] == 1 else (a2, b2[0])
    g = grad.unsqueeze(-1) if b.dim() == 1 else grad                 # batch + (m, n)
    g = (g.unsqueeze(-2) if a.dim() == 1 else g).to(common)
    grad_a = grad_b = None
    if need_a:
        grad_a = _as_operand(_grad_a(g, a2, conjugate(b2), product).sum_to_size(a2.shape), a)
    if need_b:
        grad_b = _as_operand(_grad_b(g, conjugate(a2), b2, product).sum_to_size(b2.shape), b)
    return grad_a, grad_b


def _as_operand(grad, x):
    """A gradient in x's shape and dtype (the real part for a real x of a complex product, as torch gives)."""
    grad = grad.real if grad.is_complex() and not x.is_complex() else grad
    return grad.reshape(x.shape).to(x.dtype)


def conjugate(x):
    """x's complex conjugate, as a tensor of its own (a kernel reads memory, not torch's conjugate
    bit); x itself where it is real."""
    return x.conj_physical() if x.is_complex() else x


def _grad_a(g, a2, b2, product):
    """dC @ B^T, batch + (m, k) (b2 conjugated already); a stack over one B or one A over a stack
    folded into one product."""
    m, n, k = g.shape[-2], g.shape[-1], a2.shape[-1]
    if b2.dim() == 2:
        if g.dim() == 2:
            return _product_like(g, b2.mT, a2, product)
        return product(g.reshape(-1, n), b2.mT).reshape(g.shape[:-1] + (k,))      # the stack's rows
    if a2.dim() == 2:       # one A: sum_i g_i @ B_i^T = [g_1 | g_2 | ...] @ [B_1^T; B_2^T; ...]
        return _product_like(g.movedim(-2, 0).reshape(m, -1), b2.mT.reshape(-1, k), a2, product)
    return product(g, b2.mT)


def _grad_b(g, a2, b2, product):
    """A^T @ dC, batch + (k, n) (a2 conjugated already), folded as _grad_a folds."""
    m, n, k = g.shape[-2], g.shape[-1], a2.shape[-1]
    if a2.dim() == 2:
        if g.dim() == 2:
            return _product_like(a2.mT, g, b2, product)
        columns = product(a2.mT, g.movedim(-2, 0).reshape(m, -1))                 # (k, batch * n)
        return columns.reshape((k,) + g.shape[:-2] + (n,)).movedim(0, -2)
    if b2.dim() == 2:       # one B: sum_i A_i^T @ g_i = [A_1; A_2; ...]^T @ [g_1; g_2; ...]
        return _product_like(a2.reshape(-1, k).mT, g.reshape(-1, n), b2, product)
    return product(a2.mT, g)


def _product_like(x, y, like, product):
    """x @ y laid out as ``like``: for a transposed view (a Linear's weight.T) its gradient is
    computed transposed, (y^T @ x^T)^T, so that the weight's own gradient comes out contiguous
    (torch's mm backward does the same)."""
    if like.dim() == 2 and like.stride(0) == 1 and like.stride(1) != 1:
        return product(y.mT, x.mT).mT
    return product(x, y)


def tangent(da, db, a, b, product):
    """dC = dA @ B + A @ dB, the forward-mode derivative of C = A @ B (None where neither operand
    has a tangent)."""
    terms = [product(da, b) if da is not None else None, product(a, db) if db is not None else None]
    terms = [t for t in terms if t is not None]
    return None if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]


def vmapped(product, a, b, a_dim, b_dim):
    """product(a, b) for operands vmapped along a_dim and b_dim (None: not vmapped) as one
    product: the vmapped dimension moved first and made a stack dimension, in front of the
    logical stack of either operand (1-D operands as matrices of one row or column). Returns
    (C, its vmapped dimension)."""
    ra, rb = a.dim() - (a_dim is not None), b.dim() - (b_dim is not None)     # the logical ranks
    a = a.movedim(a_dim, 0) if a_dim is not None else a
    b = b.movedim(b_dim, 0) if b_dim is not None else b
    a = a.unsqueeze(-2) if ra == 1 else a
    b = b.unsqueeze(-1) if rb == 1 else b
    stack = max(ra, rb, 2) - 2

    def lifted(x, mapped, rank):     # (B, s..., r, c) -> (B, 1, ..., 1, s..., r, c): B ahead of every stack
        own = max(rank, 2) - 2
        return x.reshape(x.shape[:1] + (1,) * (stack - own) + x.shape[1:]) if mapped else x
    c = product(lifted(a, a_dim is not None, ra), lifted(b, b_dim is not None, rb))
    c = c.squeeze(-2) if ra == 1 else c          # A's row first: B's column is last either way
    return (c.squeeze(-1) if rb == 1 else c), 0


# ---------------------------------------------------------------- eager: torch.autograd.Function


@eager_only
class MatmulFunction(torch.autograd.Function):
    """tilemm.matmul with autograd and torch.func's transforms, for eager calls; options =
    (kernel, out_dtype, stream, params, own). own: None, or a layer's own products for its
    operands' layout (a tilemm.nn.Linear's: tilemm.torch.nn_products.Layout): own.forward(a, b)
    computes C, and own.gradients(grad, a, b, need_a, need_b) gives (dA, dB) where it has faster
    ones than the general rule's (else None); the rule, its double backward and its derivatives
    are this Function's for every caller."""

    @staticmethod
    def forward(a, b, options):
        kernel, out_dtype, stream, params, own = options
        if own is not None:
            return own.forward(a, b)
        return calls.matmul(a, b, kernel=kernel, out_dtype=out_dtype, stream=stream, **params)   # grad mode off here

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, options = inputs
        ctx.save_for_backward(a, b)
        ctx.save_for_forward(a, b)
        ctx.options = options

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        kernel, _, _, params, own = ctx.options
        batched_grad = batched(grad)
        if own is not None and not torch.is_grad_enabled() and not batched_grad:
            grads = own.gradients(grad, a, b, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
            if grads is not None:
                return grads + (None,)
        # under create_graph=True each product records its own graph (double backward): eager_product
        product = torch.matmul if batched_grad else functools.partial(eager_product, kernel=kernel, params=params)
        grad_a, grad_b = operand_grads(grad, a, b, ctx.needs_input_grad[0], ctx.needs_input_grad[1], product)
        return grad_a, grad_b, None

    @staticmethod
    def jvp(ctx, da, db, _):
        a, b = ctx.saved_tensors
        kernel, out_dtype, _, params, _ = ctx.options
        return tangent(da, db, a, b, functools.partial(eager_product, kernel=kernel, params=params,
                                                       out_dtype=out_dtype))

    @staticmethod
    def vmap(info, in_dims, a, b, options):
        return vmapped(lambda x, y: MatmulFunction.apply(x, y, options), a, b, in_dims[0], in_dims[1])


def eager_product(x, y, kernel, params, out_dtype=None):
    """x @ y of torch tensors, with the kernel and parameters given: through MatmulFunction (or
    the custom op) where it records a gradient or runs under a transform or a trace (a
    backward's products under create_graph=True, a tangent's), else by its plan."""
    if contract.torch_routed(x, y):
        return routed_matmul(x, y, kernel, None, out_dtype, None, params)
    return calls.matmul(x, y, kernel=kernel, out_dtype=out_dtype, **params)


def routed_matmul(a, b, kernel, out, out_dtype, stream, params: dict):
    """tilemm.matmul(a, b, ...) of torch tensors that a plain call would not serve as torch does
    (contract.torch_routed): the custom op where a trace should record it or the operands hold
    no memory (recorded_as_op), else MatmulFunction (a gradient to record, a torch.func transform)."""
    if recorded_as_op(a, b):
        return traced_matmul(a, b, kernel, out, out_dtype, stream, params)
    return differentiable_matmul(a, b, kernel, out, out_dtype, stream, params)


def differentiable_matmul(a, b, kernel, out, out_dtype, stream, params: dict):
    """tilemm.matmul(a, b, ...) of torch tensors that record a gradient (one requires grad, grad
    mode on) or under a torch.func transform: MatmulFunction (out= refused where a gradient is
    recorded, as torch.matmul refuses it). Conjugate and negative views are resolved first (the
    kernels read their values from a copy anyway): forward-mode AD over a backward that views a
    negative view trips an internal assert of torch's (hessian of a 1-D product)."""
    a, b = arrays.resolved_view(a), arrays.resolved_view(b)
    if out is not None:
        torch_contract.check_out_gradient(a, b, out)      # (torch.matmul's words)
        return copied_into(out, MatmulFunction.apply(a, b, (kernel, out_dtype, stream, params, None)), a, b)
    return MatmulFunction.apply(a, b, (kernel, out_dtype, stream, params, None))


def recorded_as_op(a, b) -> bool:
    """Whether a call on a and b goes through the custom op: under torch.jit.trace (the trace
    records it), or on tensors that hold no memory a kernel could read (the meta device, and
    tensor subclasses dispatched by Python: FakeTensor and the like), whose op's fake answers."""
    return (torch._C._is_tracing() or a.is_meta or b.is_meta or contract.python_dispatched(torch, a)
            or contract.python_dispatched(torch, b))


def copied_into(out, c, a, b):
    """c, the product of a and b, written into out by torch's rule for outs (tilemm.contract.torch_rules:
    refused of another dtype, its elements sharing memory, resized to c's shape)."""
    contract.check_out_elements(tuple(out.shape), out.stride())   # (compiled: copy_ raised torch's RuntimeError)
    torch_contract.check_out_dtype(out, tuple(a.shape), tuple(b.shape), dtypes.torch_dtype_name(c.dtype),
                                   dtypes.torch_dtype_name(out.dtype), tuple(c.shape),
                                   torch_contract.folds_of(a, b, True))
    torch_contract.resize_out(out, tuple(c.shape), tuple(a.shape), tuple(b.shape))
    return out.copy_(c)


# ---------------------------------------------------------------- torch.compile: the custom ops


@torch.library.custom_op("tilemm::matmul", mutates_args=())
def matmul_op(a: torch.Tensor, b: torch.Tensor, kernel: Optional[str], params: str,
              out_dtype: Optional[str]) -> torch.Tensor:
    """tilemm.matmul(a, b, kernel=kernel, out_dtype=out_dtype, **params) as one operator."""
    c = calls.matmul(a.detach(), b.detach(), kernel=kernel, out_dtype=out_dtype, **decode_params(params))
    return c.contiguous()          # the fake's layout (a rung may hand back a view of its own buffer)


@matmul_op.register_fake
def _matmul_fake(a, b, kernel, params, out_dtype):
    name_a, name_b = dtypes.torch_dtype_name(a.dtype), dtypes.torch_dtype_name(b.dtype)
    torch_contract.check_operands(a, b, name_a, name_b, device=a.device.type)
    name = out_dtype or name_a
    return a.new_empty(result_shape(tuple(a.shape), tuple(b.shape)), dtype=getattr(torch, name))


def result_shape(sa: tuple, sb: tuple) -> tuple:
    """numpy.matmul's result shape for operands of shapes sa and sb (ValueError where it refuses)."""
    if not sa or not sb:
        raise ValueError(f"matmul: operands of shapes {sa} and {sb}: a 0-d operand has no matrix to multiply")
    k, k2 = sa[-1], (sb[0] if len(sb) == 1 else sb[-2])
    if k != k2:
        raise ValueError(f"matmul: shapes {sa} and {sb} do not line up (core dimensions {k} and {k2})")
    batch = tuple(torch.broadcast_shapes(sa[:-2], sb[:-2]))
    return batch + sa[-2:-1] + (sb[-1:] if len(sb) > 1 else ())


def _matmul_setup(ctx, inputs, output):
    a, b, kernel, params, _ = inputs
    ctx.save_for_backward(a, b)
    ctx.kernel, ctx.params = kernel, params


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    product = functools.partial(_op_product, kernel=ctx.kernel, params=ctx.params)
    grad_a, grad_b = operand_grads(grad, a, b, ctx.needs_input_grad[0], ctx.needs_input_grad[1], product)
    return grad_a, grad_b, None, None, None


def _op_product(x, y, kernel, params):
    return torch.ops.tilemm.matmul(x, y, kernel, params, None)


matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)


@matmul_op.register_vmap
def _matmul_vmap(info, in_dims, a, b, kernel, params, out_dtype):
    return vmapped(lambda x, y: torch.ops.tilemm.matmul(x, y, kernel, params, out_dtype), a, b, in_dims[0], in_dims[1])


def traced_matmul(a, b, kernel, out, out_dtype, stream, params: dict):
    """tilemm.matmul as the custom op: while torch.compile, torch.export or torch.jit.trace traces
    it, and on tensors that hold no memory (meta, FakeTensor)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError("matmul: under torch.compile tilemm multiplies torch tensors; call it on NumPy arrays "
                        "outside the compiled function, or on torch tensors (torch.from_numpy) inside it")
    if stream is not None:
        raise TypeError("matmul: stream= is not taken under torch.compile or torch.jit.trace: the graph runs on "
                        "torch's current stream (use torch.cuda.stream(...) around the compiled call)")
    if out is not None:
        torch_contract.check_out_gradient(a, b, out)
    # the fake's check, here too: traced, its error is the eager call's (Dynamo runs the frame
    # eagerly; fullgraph=True: its cause), not Dynamo's TorchRuntimeError from the fake
    torch_contract.check_operands(a, b, dtypes.torch_dtype_name(a.dtype), dtypes.torch_dtype_name(b.dtype), out,
                                 a.device.type, torch_out=out_dtype is None)
    c = torch.ops.tilemm.matmul(a, b, kernel, encode_params(params), dtype_text(out_dtype))
    return c if out is None else copied_into(out, c, a, b)


# ---------------------------------------------------------------- scaled_matmul: no derivative


NO_DERIVATIVE = ("derivative for tilemm.scaled_matmul is not implemented, as torch._scaled_mm's is not: float8 "
                 "products are for the forward pass; detach its operands or call it under torch.no_grad()")


@torch.library.custom_op("tilemm::scaled_matmul", mutates_args=())
def scaled_matmul_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     out_dtype: str, fast_accum: bool, params: str) -> torch.Tensor:
    """tilemm.scaled_matmul as one operator (per-tensor scales as one-element tensors)."""
    return scaled.scaled_matmul(a.detach(), b.detach(), scale_a.detach(), scale_b.detach(), out_dtype=out_dtype,
                                fast_accum=fast_accum, **decode_params(params))


@scaled_matmul_op.register_fake
def _scaled_matmul_fake(a, b, scale_a, scale_b, out_dtype, fast_accum, params):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)}: it takes (M, K) @ (K, N)")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=getattr(torch, out_dtype))


def _scaled_backward(ctx, grad):
    raise RuntimeError(NO_DERIVATIVE)


scaled_matmul_op.register_autograd(_scaled_backward, setup_context=lambda ctx, inputs, output: None)


def traced_scaled_matmul(a, b, scale_a, scale_b, out_dtype, fast_accum, out, stream, params: dict):
    """tilemm.scaled_matmul while torch.compile traces it: the custom op."""
    if stream is not None or out is not None:
        raise TypeError("scaled_matmul: out= and stream= are not taken under torch.compile")
    scales = [s if isinstance(s, torch.Tensor) else torch.tensor(float(s), device=a.device)
              for s in (scale_a, scale_b)]
    scales = [s.reshape(1).to(device=a.device, dtype=torch.float32) for s in scales]
    return torch.ops.tilemm.scaled_matmul(a, b, *scales, dtype_text(out_dtype), bool(fast_accum),
                                          encode_params(params))


class NoDerivative(torch.autograd.Function):
    """A product computed by ``compute()`` whose graph node refuses a backward pass, as torch's
    nodes for _scaled_mm do (the forward is allowed; the backward raises)."""

    @staticmethod
    def forward(ctx, compute, *inputs):
        return compute()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(NO_DERIVATIVE)


def not_differentiable(compute, *inputs):
    """compute()'s result, attached to inputs by a node whose backward raises (NoDerivative)."""
    return NoDerivative.apply(compute, *inputs)
