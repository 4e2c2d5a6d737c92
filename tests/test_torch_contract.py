"""torch's contract for torch tensors, through tilemm.matmul and tilemm.nn.Linear: complex
gradients (dA = dC @ B^H), conjugate and negative views, gradients with empty dimensions,
torch.func's transforms, torch.jit.trace and script, meta tensors and FakeTensors, and torch's
dtype rule and errors (NumPy's kept for NumPy arrays). Small shapes, CPU tensors."""
import io
import itertools

import numpy as np
import pytest
import torch
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import tilemm
from tilemm.plans import cache as plan_cache
from tilemm.contract import torch_rules as torch_contract
from tilemm.nn import Linear

from .conftest import ON_GPU

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")   # (torch 2.13 deprecates torch.jit)


def tensors(*shapes, dtype=torch.float64, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, dtype=dtype, generator=g).requires_grad_(grad) for s in shapes]


# ---------------------------------------------------------------- complex gradients, gradcheck


@pytest.mark.parametrize("dtype", [torch.complex128, torch.float64])
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((4,), (4, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (1, 4, 2))])
def test_gradcheck_and_gradgradcheck(dtype, sa, sb):
    a, b = tensors(sa, sb, dtype=dtype, grad=True)
    assert torch.autograd.gradcheck(tilemm.matmul, (a, b))
    assert torch.autograd.gradgradcheck(tilemm.matmul, (a, b))


def test_complex_gradients_are_torch_s():
    """dA = dC @ B^H, dB = A^H @ dC: what torch.matmul gives, not dC @ B^T."""
    a, b = tensors((3, 4), (4, 2), dtype=torch.complex128, grad=True)
    dc = tensors((3, 2), dtype=torch.complex128, seed=1)[0]
    ours = torch.autograd.grad(tilemm.matmul(a, b), (a, b), dc)
    theirs = torch.autograd.grad(torch.matmul(a, b), (a, b), dc)
    assert all(torch.allclose(x, y) for x, y in zip(ours, theirs))
    assert torch.allclose(ours[0], dc @ b.detach().mH)


def test_gradcheck_through_the_custom_op_complex():
    a, b = tensors((3, 4), (4, 2), dtype=torch.complex128, grad=True)
    assert torch.autograd.gradcheck(lambda x, y: torch.ops.tilemm.matmul(x, y, None, "", None), (a, b))


@pytest.mark.parametrize("dtype", [torch.complex128, torch.float64])
def test_linear_gradcheck_and_gradgradcheck(dtype):
    layer = Linear(4, 3, dtype=dtype)
    x, w, bias = tensors((2, 4), (3, 4), (3,), dtype=dtype, seed=2, grad=True)

    def forward(x, w, bias):
        return functional_call(layer, {"weight": w, "bias": bias}, (x,))
    assert torch.autograd.gradcheck(forward, (x, w, bias))
    assert torch.autograd.gradgradcheck(forward, (x, w, bias))


def test_complex_linear_trains_as_torch_s():
    ours = Linear(4, 3, dtype=torch.complex128)
    theirs = torch.nn.Linear(4, 3, dtype=torch.complex128)
    theirs.load_state_dict(ours.state_dict())
    x = tensors((5, 4), dtype=torch.complex128)[0]
    ours(x).abs().sum().backward()
    theirs(x).abs().sum().backward()
    assert torch.allclose(ours.weight.grad, theirs.weight.grad) and torch.allclose(ours.bias.grad, theirs.bias.grad)


# ---------------------------------------------------------------- conjugate and negative views


def views(real=torch.float64, complex=torch.complex128, device="cpu"):
    z, w = (t.to(device) for t in tensors((3, 4), (4, 2), dtype=complex, seed=3))
    x, y = (t.to(device) for t in tensors((3, 4), (4, 2), dtype=real, seed=4))
    return [("conj", z.conj(), w), ("conj both", z.conj(), w.conj()), ("mH", w.mH, z.mH), ("neg", z._neg_view(), w),
            ("real neg", x._neg_view(), y), ("conj imag", z.conj().imag, y.to(z.real.dtype)), ("neg of b", x, y._neg_view())]


@pytest.mark.parametrize("kernel", [None, "cpu-tiled", "tensorcore-f64"])
def test_conjugate_and_negative_views_give_their_values(kernel):
    """Each view's values, on the first call and on a repeated call whose plan a plain operand of
    the same layout made (tensorcore-f64 reads the memory itself, under Triton's interpreter)."""
    params = dict(block_m=16, block_n=16, block_k=16, persistent=False) if kernel == "tensorcore-f64" else {}
    for name, a, b in views():
        if kernel is not None and a.is_complex():        # (the real rungs' views: the real ones)
            continue
        plain_a, plain_b = a.resolve_conj().resolve_neg(), b.resolve_conj().resolve_neg()
        want = torch.matmul(plain_a, plain_b)
        tilemm.matmul(a.conj_physical() if a.is_complex() else a.clone(), b.clone(), kernel=kernel, **params)
        for _ in range(2):
            assert torch.allclose(tilemm.matmul(a, b, kernel=kernel, **params), want), name


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [None, "tiled", "regblock", "tensorcore-f64", "tensorcore-f32",
                                    "tensorcore-complex"])
def test_gpu_views_after_a_plain_call_of_their_layout(kernel):
    """On the GPU a rung reads memory as it is: each view gives its values, on its first call and
    when a plain call of the same layout made the plan (and its replay) first."""
    kinds = {"tensorcore-f64": [(torch.float64, None)], "tensorcore-f32": [(torch.float32, None)],
             "tensorcore-complex": [(None, torch.complex64), (None, torch.complex128)]}
    for real, complex in kinds.get(kernel, [(torch.float64, torch.complex128), (torch.float32, None)]):
        for name, a, b in views(real or torch.float64, complex or torch.complex128, "cuda"):
            if (a.dtype != (complex if a.is_complex() else real) or b.dtype != a.dtype
                    or (a.is_complex() and kernel in ("tiled", "regblock"))):
                continue
            want = torch.matmul(a.resolve_conj().resolve_neg(), b.resolve_conj().resolve_neg())
            assert torch.allclose(tilemm.matmul(a, b, kernel=kernel), want, rtol=1e-3, atol=1e-3), name
            tilemm.matmul(a.resolve_conj().resolve_neg().clone(), b.resolve_conj().resolve_neg().clone(),
                          kernel=kernel)
            for _ in range(2):
                assert torch.allclose(tilemm.matmul(a, b, kernel=kernel), want, rtol=1e-3, atol=1e-3), name


def test_a_replay_refuses_a_view():
    """A view meets a plain tensor's plan (the key does not tell them apart): a replay, which
    reads memory as it is, refuses it (then the plan's usual path reads its values)."""
    from tilemm.engine import replay
    x, y = tensors((3, 4), (4, 2))
    z = tensors((3, 4), dtype=torch.complex128)[0]
    assert not replay.lazy(x) and replay.lazy(x._neg_view()) and replay.lazy(z.conj()) and replay.lazy(z.conj().imag)
    plain = plan_cache.call_key(x, y, None, None, None, {})
    assert plain is not None and plan_cache.call_key(x._neg_view(), y, None, None, None, {}) == plain


def test_a_view_s_gradient():
    z, w = tensors((3, 4), (4, 2), dtype=torch.complex128, grad=True)
    ours = torch.autograd.grad(tilemm.matmul(z.conj(), w._neg_view()).abs().sum(), (z, w))
    theirs = torch.autograd.grad(torch.matmul(z.conj(), w._neg_view()).abs().sum(), (z, w))
    assert all(torch.allclose(x, y) for x, y in zip(ours, theirs))


def test_linear_takes_a_conjugate_view():
    layer = Linear(4, 3, dtype=torch.complex128, bias=False)
    x = tensors((5, 4), dtype=torch.complex128)[0]
    layer(x.conj_physical())              # the layout's plan, learned on a plain input
    assert torch.allclose(layer(x.conj()), x.conj() @ layer.weight.detach().T)


# ---------------------------------------------------------------- empty dimensions in the backward


EMPTY = [((2, 3, 0), (0, 4)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((3, 4), (4, 0)), ((0, 3, 4), (4, 5)),
         ((2, 0, 4), (4, 5)), ((0,), (0,)), ((0,), (0, 4)), ((3, 0), (0,)), ((3,), (2, 3, 0)),
         ((2, 1, 3, 0), (4, 0, 2))]


@pytest.mark.parametrize("sa,sb", EMPTY)
def test_backward_with_an_empty_dimension_gives_torch_s_zeros(sa, sb):
    a, b = tensors(sa, sb, grad=True)
    c = tilemm.matmul(a, b)
    dc = torch.ones_like(c)
    ours = torch.autograd.grad(c, (a, b), dc)
    theirs = torch.autograd.grad(torch.matmul(a, b), (a, b), dc)
    for x, y in zip(ours, theirs):
        assert x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)


def test_linear_backward_of_no_rows():
    layer = Linear(4, 3, dtype=torch.float64)
    x = torch.empty(0, 4, dtype=torch.float64, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.shape == (0, 4) and torch.equal(layer.weight.grad, torch.zeros(3, 4, dtype=torch.float64))


# ---------------------------------------------------------------- torch.func


def test_grad_jacrev_jacfwd_vjp_and_jvp_match_torch_s():
    a, b = tensors((3, 4), (4, 2))
    ours, theirs = (lambda x, y: tilemm.matmul(x, y)), (lambda x, y: torch.matmul(x, y))
    tilemm.matmul(a, b)                                   # a plain call's plan, which the transforms must not take
    for transform in (lambda f: grad(lambda x, y: f(x, y).square().sum(), argnums=(0, 1)),
                      lambda f: jacrev(f, argnums=(0, 1)), lambda f: jacfwd(f, argnums=(0, 1))):
        for x, y in zip(transform(ours)(a, b), transform(theirs)(a, b)):
            assert torch.allclose(x, y)
    da, db = tensors((3, 4), (4, 2), seed=5)
    for x, y in zip(jvp(ours, (a, b), (da, db)), jvp(theirs, (a, b), (da, db))):
        assert torch.allclose(x, y)
    (out, back), (out2, back2) = vjp(ours, a, b), vjp(theirs, a, b)
    dc = torch.ones_like(out)
    assert torch.allclose(out, out2) and all(torch.allclose(x, y) for x, y in zip(back(dc), back2(dc)))


@pytest.mark.parametrize("sa,sb,dims", [((5, 3, 4), (4, 2), (0, None)), ((4, 5), (4, 2), (1, None)),
                                        ((5, 4), (5, 4), (0, 0)), ((3, 4), (4, 5), (None, 1)),
                                        ((5, 4), (2, 4, 3), (0, None)), ((5, 2, 3, 4), (5, 4), (0, 0))])
def test_vmap_matches_torch_s(sa, sb, dims):
    a, b = tensors(sa, sb)
    assert torch.allclose(vmap(tilemm.matmul, dims)(a, b), vmap(torch.matmul, dims)(a, b))


def test_the_custom_op_s_vmap_rule():
    a, b = tensors((5, 3, 4), (4, 5))
    op = lambda x, y: torch.ops.tilemm.matmul(x, y, None, "", None)     # noqa: E731
    assert torch.allclose(vmap(op, (0, 1))(a, b), vmap(torch.matmul, (0, 1))(a, b))


def test_jacrev_of_a_complex_product():
    real, imag = tensors((2, 3), (2, 3))
    b = tensors((3, 2), dtype=torch.complex128, seed=9)[0]

    def loss(product):        # (jacrev takes real inputs: the complex operand made of two)
        return lambda x, y: product(torch.complex(x, y), b).abs()
    ours = jacrev(loss(tilemm.matmul), argnums=(0, 1))(real, imag)
    theirs = jacrev(loss(torch.matmul), argnums=(0, 1))(real, imag)
    assert all(torch.allclose(x, y) for x, y in zip(ours, theirs))


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,))])
@pytest.mark.parametrize("which", [0, 1])
def test_second_derivatives_through_a_negative_view(sa, sb, which):
    """hessian and jacfwd(jacrev) of a product of which one operand is a negative view: torch's
    values (forward-mode AD over tilemm's backward, which viewed the negative view, tripped an
    internal assert of torch's: has_fw_view)."""
    x, y = tensors(sa, sb, seed=10)
    a, b = (x._neg_view(), y) if which == 0 else (x, y._neg_view())

    def loss(product):
        return lambda p, q: product(p, q).square().sum()
    assert torch.allclose(hessian(loss(tilemm.matmul), which)(a, b), hessian(loss(torch.matmul), which)(a, b))
    ours = jacfwd(jacrev(tilemm.matmul, which), which)(a, b)
    assert torch.allclose(ours, jacfwd(jacrev(torch.matmul, which), which)(a, b))


def test_functional_call_over_a_linear():
    ours = Linear(4, 3, dtype=torch.float64)
    theirs = torch.nn.Linear(4, 3, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())
    x = tensors((5, 4), seed=6)[0]
    params = {name: p.detach() for name, p in ours.named_parameters()}
    ours(x)                                                # the layer's layouts, learned eagerly

    def loss(module):
        return lambda p, x: functional_call(module, p, (x,)).square().sum()
    for name, g in jacrev(loss(ours))(params, x).items():
        assert torch.allclose(g, jacrev(loss(theirs))(params, x)[name])
    assert torch.allclose(vmap(ours)(x[:, None]), vmap(theirs)(x[:, None]))
    assert torch.allclose(grad(loss(ours), argnums=1)(params, x), grad(loss(theirs), argnums=1)(params, x))


# ---------------------------------------------------------------- torch.jit, meta, FakeTensor


def test_jit_trace_records_the_op():
    a, b = tensors((3, 4), (4, 2))
    tilemm.matmul(a, b)                                    # a plain call's plan first: the trace must not take it
    traced = torch.jit.trace(lambda x, y: tilemm.matmul(x, y), (a, b))
    assert "tilemm::matmul" in str(traced.graph)
    a2, b2 = tensors((3, 4), (4, 2), seed=7)
    assert torch.allclose(traced(a2, b2), a2 @ b2)


def test_jit_trace_of_a_linear():
    layer = Linear(4, 3, dtype=torch.float64)
    x = tensors((2, 4))[0]
    layer(x)
    traced = torch.jit.trace(layer, (x,))
    x2 = tensors((2, 4), seed=8)[0]
    assert torch.allclose(traced(x2), torch.nn.functional.linear(x2, layer.weight, layer.bias))


def test_jit_script_of_a_model_with_linears():
    model = torch.nn.Sequential(Linear(4, 8, dtype=torch.float64, kernel="cpu-tiled", block_m=16), torch.nn.ReLU(),
                                Linear(8, 2, bias=False, dtype=torch.float64))
    scripted = torch.jit.script(model)
    x = tensors((3, 5, 4))[0]
    assert torch.allclose(scripted(x), model(x))
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    assert torch.allclose(torch.jit.load(buffer)(x), model(x))
    assert type(model[0]) is Linear and model[0](x).grad_fn is not None   # the model itself as it was


def test_meta_tensors_and_fake_tensors_get_the_op_s_fake():
    layer = Linear(4, 3, device="meta")
    y = layer(torch.empty(2, 5, 4, device="meta"))
    assert y.device.type == "meta" and y.shape == (2, 5, 3)
    c = tilemm.matmul(torch.empty(2, 3, 4, device="meta"), torch.empty(4, device="meta"))
    assert c.device.type == "meta" and c.shape == (2, 3)
    with pytest.raises(RuntimeError, match="10x9 and 8x25"):
        tilemm.matmul(torch.empty(10, 9, device="meta"), torch.empty(8, 25, device="meta"))
    from torch._subclasses.fake_tensor import FakeTensorMode
    a, b = tensors((3, 4), (4, 2))
    tilemm.matmul(a, b)
    with FakeTensorMode() as mode:
        fa, fb = mode.from_tensor(a), mode.from_tensor(b)
        c = tilemm.matmul(fa, fb)
        assert type(c).__name__ == "FakeTensor" and c.shape == (3, 2) and c.dtype == torch.float64


# ---------------------------------------------------------------- dtypes and errors


CASES = [((3, 4), (4, 2)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((2, 3, 4), (4, 2)), ((2, 3, 4), (2, 4, 2)),
         ((3, 4), (2, 4, 2)), ((10, 9), (8, 25)), ((9,), (8,)), ((2, 9), (8,)), ((9,), (8, 3)), ((2, 2, 9), (8, 3)),
         ((2, 2, 9), (2, 8, 3)), ((2, 2, 9), (3, 9, 3)), ((9,), (2, 8, 3)), ((2, 2, 9), (8,)), ((), (4,)),
         ((4,), ())]
DTYPES = [(torch.float32, torch.float64), (torch.int16, torch.float32), (torch.complex64, torch.complex128),
          (torch.float16, torch.bfloat16), (torch.int8, torch.int32), (torch.float32, torch.float32)]


def test_torch_s_errors_and_words():
    """Where torch.matmul refuses, tilemm raises an error that is a RuntimeError (torch's class)
    and NumPy's class (ValueError for shapes, TypeError for dtypes), with torch's words."""
    for (sa, sb), (da, db) in itertools.product(CASES, DTYPES):
        a, b = torch.zeros(sa, dtype=da), torch.ones(sb, dtype=db)
        try:
            want = torch.matmul(a, b)
        except RuntimeError as refusal:
            with pytest.raises(RuntimeError) as raised:
                tilemm.matmul(a, b)
            assert str(raised.value) == str(refusal), (sa, sb, da, db)
            assert isinstance(raised.value, (torch_contract.TorchShapeError, torch_contract.TorchTypeError))
            assert isinstance(raised.value, ValueError if "dtype" not in str(refusal) and "scalar type" not in
                              str(refusal) else TypeError)
            continue
        got = tilemm.matmul(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype


def stack_out_of_order(shape, dtype):
    """A tensor of this shape (3 dimensions or more) whose first two dimensions are swapped in
    memory: its stack's rows do not lie one after another, so torch multiplies it by bmm."""
    return torch.zeros((shape[1], shape[0], *shape[2:]), dtype=dtype).transpose(0, 1)


@pytest.mark.parametrize("make_a, make_b, grads", [
    (lambda: stack_out_of_order((2, 3, 4), torch.float32), lambda: torch.zeros(4, dtype=torch.float64), (False, False)),
    (lambda: stack_out_of_order((2, 3, 4), torch.float32), lambda: torch.zeros(5, dtype=torch.float32), (False, False)),
    (lambda: stack_out_of_order((2, 3, 4), torch.bool), lambda: torch.zeros(4, 2, dtype=torch.int8), (False, False)),
    (lambda: stack_out_of_order((2, 3, 4), torch.bool), lambda: torch.zeros(4, dtype=torch.int8), (False, False)),
    (lambda: stack_out_of_order((2, 3, 4), torch.float32), lambda: torch.zeros(5, 2), (False, False)),
    (lambda: torch.zeros(2, 3, 4, dtype=torch.bool), lambda: torch.zeros(4, 2, dtype=torch.int8), (False, False)),
    (lambda: torch.zeros(3, 4), lambda: torch.zeros(2, 4, 5, dtype=torch.float64), (True, False)),
    (lambda: torch.zeros(3, 4), lambda: torch.zeros(2, 5, 5), (True, False)),
    (lambda: torch.zeros(4), lambda: torch.zeros(2, 3, 4).mT.to(torch.float64), (False, False)),
    (lambda: torch.zeros(4, dtype=torch.bool), lambda: torch.zeros(2, 4, 3, dtype=torch.int8), (False, False)),
    (lambda: torch.zeros(1, 3, 2), lambda: torch.zeros(3, 2, 4, dtype=torch.int64), (True, False)),
    (lambda: torch.zeros(3, 1, 2, dtype=torch.float64), lambda: torch.zeros(1, 0, 0), (False, True)),
    (lambda: torch.zeros(3, 1, 2, dtype=torch.float64), lambda: torch.zeros(1, 0, 0), (False, False))])
def test_torch_s_errors_where_its_stacks_are_laid_out_otherwise(make_a, make_b, grads):
    """torch multiplies a stack by mm or mv of its rows where they lie one after another in memory,
    or where the other operand records a gradient, and by bmm otherwise; a stack of one matrix
    that requires grad beside a stack of another count as that matrix. Each refuses in its own
    class and words (a bool stack by bmm: NotImplementedError): tilemm's error is torch's."""
    a, b = make_a().requires_grad_(grads[0]), make_b().requires_grad_(grads[1])
    with pytest.raises(Exception) as theirs:
        torch.matmul(a, b)
    with pytest.raises(type(theirs.value)) as ours:
        tilemm.matmul(a, b)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("sa, sb, da, db, out_dtype, out_shape", [
    ((3,), (3,), torch.float32, torch.float64, torch.float64, (0,)),       # dot: the out's dtype first
    ((1,), (3,), torch.bool, torch.bool, torch.float32, (0,)),             # ... before the sizes
    ((2, 3), (3,), torch.float32, torch.float64, torch.int8, (2,)),        # mv: the out is addmv's self
    ((2, 3), (3,), torch.float32, torch.float64, torch.int8, (1,)),
    ((2, 3), (3,), torch.float32, torch.float64, torch.int8, (0,)),        # ... else one like the vector
    ((2, 2, 3), (3,), torch.float32, torch.float64, torch.int8, (0,)),     # a folded stack's out: self
    ((2, 3), (3,), torch.float32, torch.float64, torch.float16, (2,)),     # (torch 2.11: the vector's dtype
    ((2, 3), (3,), torch.float64, torch.float32, torch.int8, (2,)),        # expected of the out, first)
    ((2, 3), (3,), torch.int8, torch.float64, torch.float32, (2,)),
    ((2, 3), (3, 4), torch.float32, torch.float64, torch.float64, (0,)),   # mm: A's dtype expected
    ((3,), (3, 2), torch.float32, torch.float64, torch.int8, (0,)),
    ((2, 2, 3), (2, 3, 4), torch.float32, torch.float64, torch.float32, (0,)),   # bmm: B's dtype expected
    ((3,), (2, 3, 4), torch.float32, torch.float64, torch.int8, (0,)),
    ((1,), (2, 1, 3), torch.float32, torch.float32, torch.float64, (0,)),  # a vector times a folded stack: mv
    ((3, 2), (2,), torch.float32, torch.float32, torch.float64, (1,))])
def test_torch_s_errors_for_an_out_of_another_dtype(sa, sb, da, db, out_dtype, out_shape):
    """An out of another dtype than the product's, beside operands of one dtype or two: each
    product torch picks reads it in its own order and words (dot and mm before the operands'
    dtypes, mv naming it as addmv's self where it is one): tilemm's error is torch's."""
    a, b = torch.zeros(sa, dtype=da), torch.zeros(sb, dtype=db)
    with pytest.raises(Exception) as theirs:
        torch.matmul(a, b, out=torch.zeros(out_shape, dtype=out_dtype))
    with pytest.raises(type(theirs.value)) as ours:
        tilemm.matmul(a, b, out=torch.zeros(out_shape, dtype=out_dtype))
    assert str(ours.value) == str(theirs.value)


def test_the_refusals_of_cuda_s_kernels(monkeypatch):
    """On CUDA, torch's mm words a mismatch as "mat1 and mat2" (the CPU's: "m1 and m2"), and torch
    2.11's mv picks a kernel by the matrix's dtype before it reads the vector's: a matrix of an
    integer or bool dtype is NotImplementedError there (the classes and words a GPU run of torch
    2.11 gave; 2.13 reads the dtypes first, on the CPU in addmv's words)."""
    mm = torch_contract.refusal((3, 4), (4, 2), "float32", "bfloat16", device="cuda:0")
    assert isinstance(mm, torch_contract.TorchTypeError)
    assert str(mm) == "expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16"
    assert "m1 and m2" in str(torch_contract.refusal((3, 4), (4, 2), "float32", "bfloat16"))
    if not torch_contract.torch_before(2, 13):
        assert str(torch_contract.refusal((3, 4), (4,), "int64", "float16", device="cuda:0")) == (
            "addmv input tensors must have the same dtype, but got Half, Long, and Half")
    monkeypatch.setattr(torch_contract, "torch_before", lambda major, minor: (major, minor) > (2, 11))   # torch 2.11
    mv = torch_contract.refusal((3, 4), (4,), "int64", "float16", device="cuda:0")
    assert type(mv) is NotImplementedError and str(mv) == "\"addmv_impl_cuda\" not implemented for 'Long'"
    folded = torch_contract.refusal((1,), (2, 1, 3), "float16", "bool", device="cuda:0")   # mv of B^T's rows
    assert type(folded) is NotImplementedError and "'Bool'" in str(folded)
    assert isinstance(torch_contract.refusal((3, 4), (4,), "float32", "int8", device="cuda:0"),
                      torch_contract.TorchTypeError)


@pytest.mark.skipif(torch_contract.torch_before(2, 13), reason="torch 2.13's words (mv's out read on 2.13 only)")
@pytest.mark.parametrize("sa,sb", [((33, 7), (7,)), ((1, 1), (1,)), ((0, 7), (7,)), ((3, 0), (0,))])
@pytest.mark.parametrize("out_shape", ["result", (5,), (0,)])
def test_an_out_of_another_dtype_for_a_matrix_times_a_vector_in_torch_s_words(sa, sb, out_shape):
    """torch.mv takes an out of the result's shape as addmv's `self`, and refuses its dtype in
    addmv's words; an out of another shape in the words of any other product (tilemm said the
    latter for both). The out is left as it was."""
    shape = sa[:1] if out_shape == "result" else out_shape
    a, b = torch.ones(sa), torch.ones(sb)
    theirs, ours = torch.zeros(shape, dtype=torch.uint8), torch.zeros(shape, dtype=torch.uint8)
    with pytest.raises(RuntimeError) as refusal:
        torch.matmul(a, b, out=theirs)
    with pytest.raises(TypeError) as raised:
        tilemm.matmul(a, b, out=ours)
    assert str(raised.value) == str(refusal.value) and ours.shape == theirs.shape == shape


FOLDED = [((3,), (2, 0, 4, 5)), ((3,), (2, 0, 3, 5)), ((3,), (2, 1, 5)), ((1,), (2, 1, 5)), ((3,), (0, 3, 5)),
          ((2, 3), (2, 4, 5)), ((2, 3), (2, 3, 5)), ((0, 3), (2, 0, 4, 0))]


@pytest.mark.skipif(torch_contract.torch_before(2, 13), reason="torch 2.13's words (its mv's read on 2.13 only)")
@pytest.mark.parametrize("sa,sb", FOLDED)
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float32, torch.float64)])
@pytest.mark.parametrize("grad", [False, True])
def test_a_folded_stack_of_b_is_refused_in_torch_s_words(sa, sb, dtypes, grad):
    """A vector or matrix times a stack: torch folds the stack of B into the rows of B^T (mv or mm
    with A on the right) where A requires grad, where the stack is empty, or (a vector A) where
    its matrices have one row; its errors then say so (tilemm said bmm's words)."""
    a, b = torch.ones(sa, dtype=dtypes[0], requires_grad=grad), torch.ones(sb, dtype=dtypes[1])
    try:
        torch.matmul(a, b)
    except RuntimeError as refusal:
        with pytest.raises(RuntimeError) as raised:
            tilemm.matmul(a, b)
        assert str(raised.value) == str(refusal)
        return
    if dtypes[0] == dtypes[1]:
        assert tilemm.matmul(a, b).shape == torch.matmul(a, b).shape


def test_mixed_dtypes_refused_for_torch_promoted_for_numpy():
    with pytest.raises(RuntimeError, match="expected .* and .* to have the same dtype, but got:"):
        tilemm.matmul(torch.ones(2, 3, dtype=torch.int16), torch.ones(3, 2))
    c = tilemm.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float64))
    assert c.dtype == np.float64                           # NumPy's rule for NumPy arrays
    with pytest.raises(ValueError, match="mismatch in its core dimension") as raised:
        tilemm.matmul(np.ones((10, 9)), np.ones((8, 25)))
    assert not isinstance(raised.value, RuntimeError)
    assert tilemm.matmul(torch.ones(2, 3), torch.ones(3, 2), out_dtype="float64").dtype == torch.float64


def test_linear_refuses_an_input_of_another_dtype():
    layer = Linear(4, 3)
    with pytest.raises(RuntimeError, match="same dtype"):
        layer(torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="same dtype"):
        Linear(4, 3, out_dtype="float64")(torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="2x5 and 4x3"):
        layer(torch.ones(2, 5))


def test_out_with_autograd_is_torch_s_runtime_error():
    a, b = tensors((3, 4), (4, 2), grad=True)
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        tilemm.matmul(a, b, out=torch.empty(3, 2, dtype=torch.float64))


@pytest.mark.parametrize("sa,sb", [((0, 3), (3, 5)), ((4, 3), (3, 0)), ((2, 0, 3), (3, 5)), ((3, 0), (0,)),
                                   ((0, 3), (3,))])
def test_empty_results_are_laid_out_as_torch_s(sa, sb):
    """An empty result (and a K = 0 one, all zeros) has torch.matmul's shape and strides: a
    contiguous tensor's, not the zero strides NumPy gives an empty array."""
    a, b = torch.randn(sa), torch.randn(sb)
    want, got = torch.matmul(a, b), tilemm.matmul(a, b)
    assert got.shape == want.shape and got.stride() == want.stride() and torch.equal(got, want)


# torch 2.11's words for an out on another device than CUDA operands', read on two H200s
# (a on cuda:0, out on cuda:1 or the host): the op torch.matmul picks checks devices first
OUT_DEVICE_WORDS = {
    ((5, 3), (3, 2), (5, 2)): "self is on cuda:0, different from other tensors on {o} (when checking argument in "
                              "method wrapper_CUDA_mm_out_out)",
    ((3,), (3, 2), (2,)): "self is on cuda:0, different from other tensors on {o} (when checking argument in "
                          "method wrapper_CUDA_mm_out_out)",
    ((2, 5, 3), (3, 2), (4, 4)): "self is on cuda:0, different from other tensors on {o} (when checking argument "
                                 "in method wrapper_CUDA_mm_out_out)",
    ((2, 5, 3), (2, 3, 2), (2, 5, 2)): "self is on cuda:0, different from other tensors on {o} (when checking "
                                       "argument in method wrapper_CUDA_bmm_out_out)",
    ((5, 3), (2, 3, 2), (0,)): "self is on cuda:0, different from other tensors on {o} (when checking argument in "
                               "method wrapper_CUDA_bmm_out_out)",
    ((5, 3), (3,), (5,)): "mat is on cuda:0, different from other tensors on {o} (when checking argument in "
                          "method wrapper_CUDA_addmv_out_out)",
    ((5, 3), (3,), (4, 4)): "self is on cuda:0, different from other tensors on {o} (when checking argument in "
                            "method wrapper_CUDA_addmv_out_out)",
    ((2, 5, 3), (3,), (0,)): "mat is on cuda:0, different from other tensors on {o} (when checking argument in "
                             "method wrapper_CUDA_addmv_out_out)",
}


@pytest.mark.parametrize("sa, sb, out_shape", OUT_DEVICE_WORDS)
@pytest.mark.parametrize("out_device", ["cuda:1", "cpu"])
def test_an_out_on_another_device_is_refused_in_torchs_words(sa, sb, out_shape, out_device):
    words = OUT_DEVICE_WORDS[(sa, sb, out_shape)].format(o=out_device)
    error = torch_contract.out_device_refusal(sa, sb, out_shape, "cuda:0", out_device)
    assert isinstance(error, RuntimeError)
    assert str(error) == "Expected all tensors to be on the same device, but got " + words
    dot = torch_contract.out_device_refusal((3,), (3,), out_shape, "cuda:0", out_device)
    assert str(dot) == ("dot: Expected the output and input tensors to be on the same device, but got the output "
                        f"tensor on {out_device}, the 'input' tensor on cuda:0, and the 'other' tensor on cuda:0")


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if ON_GPU else []))
@pytest.mark.parametrize("da", ["bool", "uint8", "int32", "uint16", "uint32", "uint64", "float16"])
@pytest.mark.parametrize("sa, sb", [((2, 3, 2), (2, 2, 4)), ((2,), (3, 2, 4)), ((1, 3, 2), (4, 2, 1))])
def test_a_stack_of_two_dtypes_gets_torch_s_error_on_each_device(device, da, sa, sb):
    """torch's bmm picks its kernel by A's dtype before it reads B as of that dtype: A of a dtype
    its kernels on this device do not take, B of another, gives its NotImplementedError, else its
    dtype error; tilemm's error is torch's class with torch's words."""
    a = torch.ones(sa, dtype=getattr(torch, da), device=device)
    b = torch.ones(sb, dtype=torch.float64, device=device)
    with pytest.raises(RuntimeError) as want:
        torch.matmul(a, b)
    with pytest.raises(RuntimeError) as got:
        tilemm.matmul(a, b)
    assert isinstance(got.value, type(want.value)) and str(got.value) == str(want.value)
