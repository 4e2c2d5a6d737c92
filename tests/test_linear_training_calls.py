"""tilemm.linear's training calls by key (tilemm.torch.linear_calls: from a key's first call that
records a gradient, the key's FusedRoute and one FusedLinear node, its products launched, then
recorded, then replayed): the same bits as EpilogueFunction's node on the rows (the general path
of what a key does not serve), and float64's answers through calls that differ from a key in one
thing each (which operands require grad, a bias or none, the activation, dtype, shape, a weight or
dY laid out otherwise), with create_graph, gradcheck, activation checkpointing, and for an empty
product. On the host the replays run through a stand-in C launcher that runs the program on the
addresses it is given (tests/interpreted_replays.py): a stale address gives a wrong answer."""
import pytest
import torch
import torch.nn.functional as F

import tilemm
from tilemm.engine.epilogue_launch import config_for
from tilemm.numerics.epilogue_math import activate_torch
from tilemm.torch import linear_calls
from tilemm.torch.fused_autograd import EpilogueFunction

from .conftest import ON_GPU
from .interpreted_replays import replayed_on_the_host

DEVICE = "cuda" if ON_GPU else "cpu"
POINTERS = dict(block_m=16, block_n=32, block_k=16)
PARAMS = {torch.float32: POINTERS, torch.float64: POINTERS,
          torch.bfloat16: dict(block_m=16, block_n=64, block_k=16, tma=True)}
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1.6e-2}


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=DEVICE, dtype=dtype)


def linear(x, w, b, activation):
    return tilemm.linear(x, w, b, activation, kernel="tensorcore", **PARAMS[x.dtype])


def general(x, w, b, activation):
    """EpilogueFunction's node on these operands (the rows and weight.T)."""
    spec = (False, activation, 1.0, 0.0, config_for(x.dtype, PARAMS[x.dtype]))
    y = EpilogueFunction.apply(x.reshape(-1, x.shape[-1]), w.mT, b, None, None, spec)
    return y.reshape(x.shape[:-1] + w.shape[:1])


def trained(call, operands, grad, requires=(True, True, True)):
    """[Y, dX, dW, dBias] of call on fresh leaves (those of `requires` requiring grad; None for
    the others' gradients and an absent bias's)."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(r) for t, r in zip(operands, requires)]
    y = call(*leaves)
    y.backward(grad)
    return [y.detach()] + [None if t is None else t.grad for t in leaves]


def bit_for_bit(ours, theirs) -> bool:
    return all((p is None and q is None) or (p is not None and q is not None and p.shape == q.shape
                                             and p.stride() == q.stride() and torch.equal(p, q))
               for p, q in zip(ours, theirs))


def float64s(operands, grad, activation, requires):
    return trained(lambda x, w, b: activate_torch(F.linear(x, w, b), activation),
                   [None if t is None else t.double() for t in operands], grad.double(), requires)


def close(got, want, dtype) -> bool:
    """Each within the dtype's tolerance of its float64 reference's largest value (1 at least)."""
    def near(p, q):
        bound = TOLERANCE[dtype] * max(1.0, q.abs().max().item() if q.numel() else 1.0)
        return p.shape == q.shape and bool(((p.double() - q).abs() <= bound).all())
    return all((p is None and q is None) or (p is not None and q is not None and near(p, q)) for p, q in zip(got, want))


@pytest.mark.parametrize("activation,dtype", [("silu", torch.bfloat16), ("identity", torch.float32),
                                              ("relu", torch.float32), ("gelu", torch.bfloat16)])
def test_a_repeated_training_call_gives_the_general_path_s_bits(activation, dtype, monkeypatch):
    """A 3-D input (2 x 9 rows, K = 24, N = 40: ragged tiles), new operands each call: Y, dX, dW
    and dBias (values, shapes, strides) as EpilogueFunction's; one FusedLinear node at every call;
    from the key's third call the forward and both products are replays (the stand-in's C
    launches)."""
    c_launches = None if ON_GPU else replayed_on_the_host(monkeypatch)
    for call in range(4):
        operands = [randn(2, 9, 24, dtype=dtype, seed=call), randn(40, 24, dtype=dtype, seed=10 + call),
                    randn(40, dtype=dtype, seed=20 + call)]
        grad = randn(2, 9, 40, dtype=dtype, seed=30 + call)
        launched = None if c_launches is None else len(c_launches)
        ours = trained(lambda x, w, b: linear(x, w, b, activation), operands, grad)
        if c_launches is not None and call >= 2:
            assert len(c_launches) - launched == 3          # the forward, dX, dW: the key's replays
        assert bit_for_bit(ours, trained(lambda x, w, b: general(x, w, b, activation), operands, grad))
        assert linear(*(t.requires_grad_() for t in operands), activation).grad_fn.name() == "FusedLinearBackward"
        assert close(ours, float64s(operands, grad, activation, (True,) * 3), dtype)
    (kept,) = linear_calls.CALLS.values()
    assert kept.route and kept.route.activation == activation


def test_calls_that_differ_from_a_key_in_one_thing_each(monkeypatch):
    """A key learned, then calls that differ from it in one thing each, three calls each (the same
    key with other operands requiring grad; keys of their own), then the first key again: Y and
    the gradients asked for float64's, no gradient for an operand that does not require one."""
    if not ON_GPU:
        replayed_on_the_host(monkeypatch)
    base = (torch.float32, (9, 24), True, "silu")

    def operands(dtype, shape, bias, seed, weight_transposed=False):
        w = randn(40, 24, dtype=dtype, seed=seed + 1)
        return [randn(*shape, dtype=dtype, seed=seed), w.T.contiguous().T if weight_transposed else w,
                randn(40, dtype=dtype, seed=seed + 2) if bias else None]
    rows_a_copy, weight_transposed, dy_by_columns = "rows a copy", "weight transposed", "dY by columns"
    variants = {        # name: ((dtype, x's shape, bias, activation), which require grad, a layout otherwise)
        "as learned": (base, (True, True, True), None),
        "x alone requires grad": (base, (True, False, False), None),
        "the weight alone": (base, (False, True, False), None),
        "the bias alone": (base, (False, False, True), None),
        "no bias": ((torch.float32, (9, 24), False, "silu"), (True, True, False), None),
        "identity": ((torch.float32, (9, 24), True, "identity"), (True, True, True), None),
        "relu": ((torch.float32, (9, 24), True, "relu"), (True, True, True), None),
        "gelu_tanh": ((torch.float32, (9, 24), True, "gelu_tanh"), (True, True, True), None),
        "float64": ((torch.float64, (9, 24), True, "silu"), (True, True, True), None),
        "bfloat16": ((torch.bfloat16, (9, 24), True, "silu"), (True, True, True), None),
        "3-D": ((torch.float32, (3, 3, 24), True, "silu"), (True, True, True), None),
        "3-D, its rows a copy": ((torch.float32, (3, 3, 24), True, "silu"), (True, True, True), rows_a_copy),
        "1-D": ((torch.float32, (24,), True, "silu"), (True, True, True), None),
        "weight transposed": (base, (True, True, True), weight_transposed),
        "dY by columns, identity": ((torch.float32, (9, 24), True, "identity"), (True, True, True), dy_by_columns),
        "again": (base, (True, True, True), None),
    }
    seed = 0
    for name, ((dtype, shape, bias, activation), requires, otherwise) in variants.items():
        for _ in range(3):
            seed += 4
            given = operands(dtype, shape, bias, seed, otherwise == weight_transposed)
            if otherwise == rows_a_copy:
                given[0] = given[0].transpose(0, 1)
            grad = randn(*given[0].shape[:-1], 40, dtype=dtype, seed=seed + 3)
            grad = grad.T.contiguous().T if otherwise == dy_by_columns else grad
            got = trained(lambda x, w, b: linear(x, w, b, activation), given, grad, requires)
            assert close(got, float64s(given, grad, activation, requires), dtype), name
            assert [g is None for g in got[1:]] == [not r or t is None for r, t in zip(requires, given)], name
    routes = [call.route for call in linear_calls.CALLS.values()]
    assert routes.count(False) == 1 and None not in routes       # (the rows' copy: EpilogueFunction's)
    with torch.no_grad():            # (the key's inference, after its training calls)
        x, w, b = operands(torch.float32, (9, 24), True, 99)
        assert close([linear(x, w, b, "silu")], [activate_torch(F.linear(x.double(), w.double(), b.double()),
                                                               "silu")], torch.float32)


def test_create_graph_on_a_key_s_calls_is_epilogue_function_s():
    """A gradient taken with create_graph on a key's calls: EpilogueFunction's bits, a graph of its
    own; its second derivative float64's."""
    x, w, b = randn(5, 24, seed=1), randn(40, 24, seed=2), randn(40, seed=3)
    dy = randn(5, 40, seed=4)
    for call in range(3):
        found = []
        for forward in (linear, general):
            xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
            dx, = torch.autograd.grad(forward(xx, ww, b, "gelu"), xx, dy, create_graph=True)
            assert dx.requires_grad
            found.append((dx.detach(), torch.autograd.grad(dx.square().sum(), ww)[0]))
        assert bit_for_bit(found[0], found[1])
    x64, w64 = x.double(), w.double().requires_grad_()
    xx = x64.clone().requires_grad_()
    dx, = torch.autograd.grad(F.gelu(F.linear(xx, w64, b.double())), xx, dy.double(), create_graph=True)
    assert close([found[0][1]], [torch.autograd.grad(dx.square().sum(), w64)[0]], torch.float32)


def test_an_empty_product_s_repeated_gradients():
    """No rows, or no output features: the gradients' zeros in their shapes, at every call (the
    general path's node: a key of an empty product keeps no route)."""
    for shape, weight_shape in (((0, 24), (40, 24)), ((5, 24), (0, 24))):
        linear_calls.release()
        for _ in range(3):
            given = [randn(*shape), randn(*weight_shape, seed=1), randn(weight_shape[0], seed=2)]
            grad = randn(shape[0], weight_shape[0], seed=3)
            got = trained(lambda x, w, b: linear(x, w, b, "silu"), given, grad)
            assert close(got, float64s(given, grad, "silu", (True,) * 3), torch.float32)
        (kept,) = linear_calls.CALLS.values()
        assert kept.route is False


def test_gradcheck_and_gradgradcheck():
    """float64 operands, every operand requiring grad: a key's node against finite differences,
    first and second derivatives."""
    args = tuple(t.requires_grad_() for t in (randn(2, 3, dtype=torch.float64), randn(2, 3, dtype=torch.float64,
                 seed=1), randn(2, dtype=torch.float64, seed=2)))

    def ours(x, w, b):
        return linear(x, w, b, "gelu")
    assert torch.autograd.gradcheck(ours, args) and torch.autograd.gradgradcheck(ours, args, fast_mode=True)


def test_activation_checkpointing_recomputes_the_key_s_node(monkeypatch):
    """torch.utils.checkpoint (non-reentrant) from a key's first call: the recomputation (the key's
    second call) saves what the forward saved; the gradients float64's at each step."""
    if not ON_GPU:
        replayed_on_the_host(monkeypatch)
    from torch.utils.checkpoint import checkpoint
    operands = [randn(9, 24, seed=1), randn(40, 24, seed=2), randn(40, seed=3)]
    grad = randn(9, 40, seed=4)
    for _ in range(3):
        got = trained(lambda x, w, b: checkpoint(linear, x, w, b, "silu", use_reentrant=False), operands, grad)
        assert close(got, float64s(operands, grad, "silu", (True,) * 3), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [16, 2048])
@pytest.mark.parametrize("activation", ["silu", "identity"])
def test_on_the_gpu_a_key_s_training_calls_replay_epilogue_function_s_bits(rows, activation):
    """A Linear's shapes (bfloat16, 2048 -> 2048, bias; the pointer program at 16 rows, the TMA
    program at 2048): each call's Y and gradients EpilogueFunction's bits; from the third call the
    key's forward and both products are replays of the compiled program."""
    from tilemm.engine import direct_replay, replay
    g = torch.Generator(device="cuda").manual_seed(rows)
    operands = [torch.randn(rows, 2048, device="cuda", generator=g).bfloat16(),
                (torch.randn(2048, 2048, device="cuda", generator=g) / 45).bfloat16(),
                torch.randn(2048, device="cuda", generator=g).bfloat16()]
    grad = torch.randn(rows, 2048, device="cuda", generator=g).bfloat16()

    def tensorcore(x, w, b):
        return tilemm.linear(x, w, b, activation, kernel="tensorcore")

    def epilogue_function(x, w, b):
        spec = (False, activation, 1.0, 0.0, config_for(x.dtype, {}))
        return EpilogueFunction.apply(x, w.mT, b, None, None, spec)
    for _ in range(4):
        assert bit_for_bit(trained(tensorcore, operands, grad), trained(epilogue_function, operands, grad))
    (kept,) = linear_calls.CALLS.values()
    used = [name for name in kept.route.PRODUCTS if name != ("forward_fast" if kept.route.save_aux else
                                                               "forward_aux_fast")]
    assert all(getattr(kept.route, name).__module__ in (direct_replay.__name__, replay.__name__) for name in used)
