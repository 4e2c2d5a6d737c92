"""tilemm.grouped_matmul under torch.func's transforms (grad, vmap, jvp, jacrev, vmap of grad)
and torch.jit.trace, on torch tensors in every layout: each transform's answer equals what the
eager call and its autograd give (themselves checked against float64 in tests/test_grouped.py),
as torch's own grouped_mm composes with them. CPU: Triton's interpreter at toy sizes, with an
empty group and a group of one row."""
import pytest
import torch

import tilemm

from .test_grouped import SMALL
from .test_grouped_compile import LAYOUTS, arguments, forward_and_gradients, grouped

TIGHT = dict(rtol=1e-6, atol=1e-6)     # the same programs on the same operands: float32 rounding only


def weights(c):
    """A fixed weighting of a result's elements (its weighted sum's gradient is not all ones)."""
    return torch.linspace(-1, 1, c.numel(), dtype=c.dtype, device=c.device).reshape(c.shape)


@pytest.mark.parametrize("name", LAYOUTS)
def test_grad_equals_autograd(name):
    a, b, offs, counts = arguments(name)
    _, want_a, want_b = forward_and_gradients(grouped, a, b, offs, counts)

    def loss(a, b):
        c = grouped(a, b, offs, counts)
        return (c * weights(c)).sum()
    got_a, got_b = torch.func.grad(loss, argnums=(0, 1))(a, b)
    assert torch.allclose(got_a, want_a, **TIGHT) and torch.allclose(got_b, want_b, **TIGHT)


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("mapped", ["a", "b", "both"])
def test_vmap_equals_a_loop(name, mapped):
    a, b, offs, counts = arguments(name)
    a2 = torch.stack([a, 2 * a]) if mapped in ("a", "both") else a
    b2 = torch.stack([b, -b]) if mapped in ("b", "both") else b
    dims = (0 if mapped in ("a", "both") else None, 0 if mapped in ("b", "both") else None)
    got = torch.func.vmap(lambda x, y: grouped(x, y, offs, counts), in_dims=dims)(a2, b2)
    want = torch.stack([grouped(a2[i] if dims[0] == 0 else a2, b2[i] if dims[1] == 0 else b2, offs, counts)
                        for i in range(2)])
    assert got.shape == want.shape and torch.allclose(got, want, **TIGHT)


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("dtype,out_dtype", [(torch.int8, None), (torch.float16, torch.float32)])
def test_vmap_takes_what_the_eager_call_takes_where_no_gradient_is_recorded(name, dtype, out_dtype):
    """vmap alone records no gradient: int8 operands and a widened out_dtype are taken, as the eager
    call takes them (refused with 'gradients flow for floating operands' before); out=, which the
    transforms' Function would not write, is a TypeError that names the transforms."""
    a, b, offs, counts = arguments(name, dtype)

    def product(x, **options):
        return tilemm.grouped_matmul(x, b, offs, counts=counts, out_dtype=out_dtype, **SMALL, **options)
    got = torch.func.vmap(product)(torch.stack([a, a]))
    want = product(a)
    assert got.dtype == want.dtype and torch.equal(got[0], want) and torch.equal(got[1], want)
    with pytest.raises(TypeError, match="out= is not taken under torch.func's transforms"):
        torch.func.vmap(lambda x: product(x, out=torch.empty_like(want)))(torch.stack([a, a]))


@pytest.mark.parametrize("name", ["2d-3d", "masked", "3d-2d"])
def test_jvp_is_the_product_of_each_tangent(name):
    a, b, offs, counts = arguments(name)
    da, db = torch.ones_like(a), torch.linspace(-1, 1, b.numel(), device=b.device).reshape(b.shape)
    primal, tangent = torch.func.jvp(lambda x, y: grouped(x, y, offs, counts), (a, b), (da, db))
    assert torch.allclose(primal, grouped(a, b, offs, counts), **TIGHT)
    want = grouped(da, b, offs, counts) + grouped(a, db, offs, counts)
    assert torch.allclose(tangent, want, **TIGHT)


def test_jacrev_and_per_sample_gradients():
    a, b, offs, counts = arguments("2d-3d")
    jac = torch.func.jacrev(lambda x: grouped(x, b, offs, counts))(a)          # (T, N, T, K)
    want = torch.zeros_like(jac)
    start = 0
    for g, end in enumerate(offs.tolist()):
        for t in range(start, end):
            want[t, :, t, :] = b[g].T
        start = end
    assert torch.allclose(jac, want, **TIGHT)
    batch = torch.stack([a, 2 * a, -a])
    per_sample = torch.func.vmap(torch.func.grad(lambda x: grouped(x, b, offs, counts).pow(2).sum()))(batch)
    looped = torch.stack([torch.func.grad(lambda x: grouped(x, b, offs, counts).pow(2).sum())(x) for x in batch])
    assert torch.allclose(per_sample, looped, **TIGHT)


def test_jit_trace_holds_the_op_and_runs_again():
    a, b, offs, counts = arguments("2d-3d")
    traced = torch.jit.trace(lambda x: grouped(x, b, offs, counts), (a,))
    assert "tilemm::grouped_matmul" in str(traced.graph)
    assert torch.allclose(traced(3 * a), grouped(3 * a, b, offs, counts), **TIGHT)


@pytest.mark.parametrize("name", ["2d-3d", "3d-3d"])
def test_compiled_vmap_keeps_the_op_and_its_vmap_rule(name):
    """Inside torch.compile, vmap of a grouped call is the op's own vmap rule (an op call a batch
    element), and equals the eager loop."""
    torch._dynamo.reset()
    a, b, offs, counts = arguments(name)
    batch = torch.stack([a, -a])
    got = torch.compile(lambda x: torch.func.vmap(lambda r: grouped(r, b, offs, counts))(x), backend="aot_eager")(batch)
    want = torch.stack([grouped(x, b, offs, counts) for x in batch])
    assert torch.allclose(got, want, **TIGHT)
