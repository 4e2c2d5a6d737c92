"""tilemm.matmul in torch's autograd: gradcheck in float64 on the host rungs, the CUDA simulator's
and the Triton interpreter's (CPU tensors), numpy.matmul's shapes (1-D operands, broadcast stacks),
double backward, the kernel and parameters carried to the backward, out= refused as torch refuses
it, and scaled_matmul's rule (torch._scaled_mm's: no derivative)."""
import warnings

import numpy as np
import pytest
import torch

import tilemm
from tilemm.contract import torch_rules as torch_contract
from tilemm.torch import ops as torch_ops

from .conftest import ON_GPU

HOST = ["numpy", "cpu-naive", "cpu-tiled"]
# the SIMT rungs under the CUDA simulator and tensorcore-f64 under Triton's interpreter, at small tiles
EMULATED = {"naive": dict(block=4), "naive-global": dict(block=4), "uncoalesced": dict(block=4),
            "tiled": dict(tile=8), "rect": dict(tile=8),
            "regblock": dict(block_m=8, block_n=8, block_k=4, thread_m=2, thread_n=2),
            "tensorcore-f64": dict(block_m=16, block_n=16, block_k=16, persistent=False)}
SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
          ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 5)), ((2, 3, 4), (2, 4, 5))]


def leaves(sa, sb, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(sa, dtype=dtype, generator=g).requires_grad_(),
            torch.randn(sb, dtype=dtype, generator=g).requires_grad_())


@pytest.mark.parametrize("kernel", HOST)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_gradcheck_host_rungs(kernel, sa, sb):
    a, b = leaves(sa, sb)
    assert torch.autograd.gradcheck(lambda x, y: tilemm.matmul(x, y, kernel=kernel), (a, b))
    c = tilemm.matmul(a, b, kernel=kernel)
    c.backward(torch.ones_like(c))
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    torch.matmul(a2, b2).backward(torch.ones_like(c))
    assert torch.allclose(a.grad, a2.grad) and torch.allclose(b.grad, b2.grad)


@pytest.mark.parametrize("kernel", list(EMULATED))
def test_gradcheck_emulated_gpu_rungs(kernel):
    a, b = leaves((3, 5), (5, 4))
    params = EMULATED[kernel]
    assert torch.autograd.gradcheck(lambda x, y: tilemm.matmul(x, y, kernel=kernel, **params), (a, b),
                                    fast_mode=True)


@pytest.mark.parametrize("kernel", ["numpy", "cpu-tiled"])
def test_double_backward(kernel):
    a, b = leaves((2, 3, 4), (4, 5))
    assert torch.autograd.gradgradcheck(lambda x, y: tilemm.matmul(x, y, kernel=kernel), (a, b))


@pytest.mark.parametrize("sa,sb", SHAPES[:2] + SHAPES[-2:])
def test_gradcheck_through_the_custom_op(sa, sb):
    a, b = leaves(sa, sb)
    assert torch.autograd.gradcheck(lambda x, y: torch.ops.tilemm.matmul(x, y, "cpu-tiled", "block_m=16", None),
                                    (a, b))


def test_the_backward_uses_the_forward_s_kernel_and_parameters(monkeypatch):
    calls = []
    plain = tilemm.plans.calls.matmul

    def recorded(x, y, **options):
        calls.append(options)
        return plain(x, y, **options)
    monkeypatch.setattr(torch_ops.calls, "matmul", recorded)
    a, b = leaves((6, 4), (4, 3))
    torch_ops.differentiable_matmul(a, b, "cpu-tiled", None, None, None, {"block_m": 16}).sum().backward()
    assert len(calls) == 3          # C, dA, dB
    assert all(c["kernel"] == "cpu-tiled" and c["block_m"] == 16 for c in calls)


def test_only_the_gradients_needed_are_computed(monkeypatch):
    a, b = leaves((6, 4), (4, 3))
    b.requires_grad_(False)
    calls = []
    plain = tilemm.plans.calls.matmul
    monkeypatch.setattr(torch_ops.calls, "matmul", lambda x, y, **o: calls.append(o) or plain(x, y, **o))
    tilemm.matmul(a, b, kernel="numpy").sum().backward()
    assert len(calls) == 2 and b.grad is None and a.grad is not None


def test_a_linear_s_weight_gradient_comes_out_contiguous():
    """input @ weight.T: weight.T is a transposed view; its gradient is computed transposed, so
    weight.grad is laid out as weight (as torch's mm backward does)."""
    x, w = leaves((8, 5), (3, 5))
    tilemm.matmul(x, w.T).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (x2 @ w2.T).sum().backward()
    assert w.grad.is_contiguous() and torch.allclose(w.grad, w2.grad) and torch.allclose(x.grad, x2.grad)


def test_out_dtype_gives_each_operand_its_own_dtype_and_mixed_dtypes_are_refused():
    a, b = leaves((3, 4), (4, 2), dtype=torch.float32)
    c = tilemm.matmul(a, b, out_dtype="float64")
    assert c.dtype == torch.float64
    c.sum().backward()
    assert a.grad.dtype == b.grad.dtype == torch.float32
    assert torch.allclose(a.grad, torch.ones(3, 2) @ b.detach().T)
    ints = torch.arange(12, dtype=torch.int32).reshape(3, 4)          # torch's rule: one dtype
    y = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        tilemm.matmul(ints, y)


def test_integer_products_record_no_gradient():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(2, 2, dtype=torch.int32).requires_grad_()            # torch's own rule
    c = tilemm.matmul(torch.ones(2, 3, dtype=torch.int64), torch.ones(3, 2, dtype=torch.int64))
    assert not c.requires_grad and c.grad_fn is None


def test_out_with_a_tensor_that_requires_grad_is_refused_as_torch_refuses_it():
    a, b = leaves((3, 4), (4, 2))
    out = torch.empty(3, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        torch.matmul(a, b, out=out)
    with pytest.raises(TypeError, match="out=... arguments don't support automatic differentiation"):
        tilemm.matmul(a, b, out=out)
    with torch.no_grad():
        assert tilemm.matmul(a, b, out=out) is out
    assert torch.allclose(out, (a @ b).detach())


@pytest.mark.parametrize("sa,sb,out_shape", [((3, 4), (4, 2), (3, 2)), ((4,), (4,), ()), ((3, 4), (4,), (3,)),
                                             ((2, 3, 4), (2, 4, 2), (2, 3, 2)), ((3, 4), (4, 2), (5,))])
@pytest.mark.parametrize("leaf", [True, False])
def test_an_out_that_requires_grad_is_refused_in_torch_s_words(sa, sb, out_shape, leaf):
    """torch.matmul refuses out= where out itself requires grad (the operands do not), first of
    all its checks and in its words; under torch.no_grad() it writes out, resized where its shape
    is another. (tilemm wrote a non-leaf out and recorded a copy in the graph, or raised autograd's
    in-place error for a leaf, after the product.)"""
    a, b = (x.detach() for x in leaves(sa, sb))

    def out():
        made = torch.zeros(out_shape, dtype=torch.float64, requires_grad=True)
        return made if leaf else made * 1
    for bad in (b, b[..., :1] if b.dim() > 1 else b[:1]):        # shapes that multiply, and shapes that do not
        given = out()
        with pytest.raises(RuntimeError) as theirs:
            torch.matmul(a, bad, out=out())
        with pytest.raises(RuntimeError) as ours:
            tilemm.matmul(a, bad, out=given)
        assert str(ours.value) == str(theirs.value) == torch_contract.OUT_GRADIENT
        assert given.shape == out_shape and not given.detach().any()
    given = out()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")                           # (the resize's warning: tested elsewhere)
        assert tilemm.matmul(a, b, out=given) is given
    assert torch.allclose(given.detach(), a @ b) and given.requires_grad


def test_a_result_needing_no_gradient_takes_the_plain_path():
    a, b = leaves((3, 4), (4, 2))
    with torch.no_grad():
        c = tilemm.matmul(a, b)
    assert c.grad_fn is None and not c.requires_grad
    assert tilemm.matmul(a.detach(), b.detach()).grad_fn is None
    assert type(tilemm.matmul(a, b).grad_fn).__name__ == "MatmulFunctionBackward"


FP8 = dict(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)


FP8_DEVICE = "cuda" if ON_GPU else "cpu"     # (scaled_matmul's operands: a GPU's, or the interpreter's CPU)


def float8(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g).to(torch.float8_e4m3fn).to(FP8_DEVICE)


def test_scaled_matmul_follows_scaled_mm_s_rule():
    """torch._scaled_mm's result of operands requiring grad carries a node whose backward raises
    (its derivative is not implemented); tilemm.scaled_matmul's does the same, and refuses out=."""
    a, b = float8(16, 32, 1).requires_grad_(), float8(32, 16, 2)
    c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32", **FP8)
    with torch.no_grad():
        plain = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32", **FP8)
    assert c.requires_grad and not plain.requires_grad and torch.equal(c.detach(), plain)
    with pytest.raises(RuntimeError, match="derivative for tilemm.scaled_matmul is not implemented"):
        c.sum().backward()
    with pytest.raises(TypeError, match="out=... arguments don't support automatic differentiation"):
        tilemm.scaled_matmul(a, b, out_dtype="float32", out=torch.empty(16, 16, device=FP8_DEVICE), **FP8)
    scale = torch.tensor(2.0, device=FP8_DEVICE, requires_grad=True)       # a scale that requires grad: the same
    assert tilemm.scaled_matmul(a.detach(), b, scale, **FP8).requires_grad


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,params", [(None, {}), ("cublas", {}), ("tensorcore-f64", {}), ("tiled", {}),
                                           ("regblock", {})])
def test_gpu_gradcheck(kernel, params):
    g = torch.Generator(device="cuda").manual_seed(0)
    for sa, sb in [((7, 5), (5, 3)), ((2, 7, 5), (5, 3)), ((5,), (3, 5, 4))]:
        a = torch.randn(sa, dtype=torch.float64, device="cuda", generator=g).requires_grad_()
        b = torch.randn(sb, dtype=torch.float64, device="cuda", generator=g).requires_grad_()
        assert torch.autograd.gradcheck(lambda x, y: tilemm.matmul(x, y, kernel=kernel, **params), (a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [None, "tensorcore"])
def test_gpu_bfloat16_linear_gradients_match_torch_s(kernel):
    """bf16 (rows, in) @ weight.T: the gradients within bf16 rounding of torch's (float32 sums
    both; a relative error of a few units of bf16)."""
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(256, 384, device="cuda", dtype=torch.bfloat16)
    tilemm.matmul(x, w.T, kernel=kernel).backward(dy)
    grads = x.grad, w.grad
    x.grad = w.grad = None
    (x @ w.T).backward(dy)
    for ours, theirs in zip(grads, (x.grad, w.grad)):
        scale = theirs.float().abs().max()
        assert float((ours.float() - theirs.float()).abs().max() / scale) < 2**-6
    assert grads[1].is_contiguous()
    np.testing.assert_equal(grads[0].shape, x.shape)


def test_dual_tensors_keep_their_tangents_first_and_repeated_calls():
    """Forward-mode AD (torch.autograd.forward_ad): a dual operand that does not require grad keeps
    its tangent, as torch.matmul's, also where a plan for the same shapes was kept before the level
    opened (a plan would drop the tangent)."""
    import torch.autograd.forward_ad as fwAD
    g = torch.Generator().manual_seed(3)
    x, w, t = (torch.randn(5, 7, dtype=torch.float64, generator=g) for _ in range(3))
    for _ in range(2):
        tilemm.matmul(x, w.T)                          # a plain call's plan, kept
    for _ in range(2):                                 # first and repeated calls inside the level
        with fwAD.dual_level():
            got = fwAD.unpack_dual(tilemm.matmul(fwAD.make_dual(x, t), w.T))
            want = fwAD.unpack_dual(torch.matmul(fwAD.make_dual(x, t), w.T))
        assert got.tangent is not None
        assert torch.allclose(got.primal, want.primal) and torch.allclose(got.tangent, want.tangent)


def test_autocast_casts_operands_as_torch_does():
    """Under torch.autocast tilemm.matmul and tilemm.nn.Linear multiply in autocast's dtype as
    torch.matmul and torch.nn.Linear do (float64 and out= calls are not cast), gradients reaching
    the float32 leaves in float32; repeated calls (plans) and calls after the region as before."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 8, generator=g, requires_grad=True)
    w = torch.randn(8, 5, generator=g)
    lin = tilemm.nn.Linear(8, 5)
    ref = torch.nn.Linear(8, 5)
    ref.load_state_dict(lin.state_dict())
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = tilemm.matmul(x.detach(), w), torch.matmul(x.detach(), w)
            assert got.dtype == want.dtype == torch.bfloat16
            assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2)
            assert tilemm.matmul(x.detach().double(), w.double()).dtype == torch.float64
            out = torch.empty(6, 5)
            assert tilemm.matmul(x.detach(), w, out=out) is out and out.dtype == torch.float32
            y, y_ref = lin(x), ref(x)
            assert y.dtype == y_ref.dtype == torch.bfloat16
            assert torch.allclose(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2)
            grad = torch.autograd.grad(tilemm.matmul(x, w).float().sum(), x)[0]
            assert grad.dtype == torch.float32
        assert tilemm.matmul(x.detach(), w).dtype == torch.float32 and lin(x).dtype == torch.float32
