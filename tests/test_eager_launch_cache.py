"""Eager fused calls repeated by key (tilemm.torch.linear_calls, tilemm.engine.epilogue_repeats):
from a key's third call on, tilemm.linear's launch (and where a gradient is recorded its FusedLinear
node's forward and products; tilemm.matmul_epilogue's, and EpilogueFunction's products) is a replay, on the host through a stand-in C launcher that runs the
program on the addresses it is given (tests/interpreted_replays.py: a stale or wrong address gives
a wrong answer). A call of another specialization (an operand's alignment, strides, bias or none,
activation, dtype, alpha, device) is never served another key's launch: every answer is checked
against float64."""
import pytest
import torch
import torch.nn.functional as F

import tilemm
from tilemm.engine import direct_replay, epilogue_repeats, replay
from tilemm.engine.epilogue_launch import config_for
from tilemm.numerics.epilogue_math import activate_torch
from tilemm.torch import linear_calls

from .conftest import ON_GPU
from .interpreted_replays import replayed_on_the_host

DEVICE = "cuda" if ON_GPU else "cpu"
# the pointer program (float32, float64) and the TMA program (bfloat16), in tiles that walk ragged products
POINTERS = dict(block_m=16, block_n=32, block_k=16)
PARAMS = {torch.float32: POINTERS, torch.float64: POINTERS,
          torch.bfloat16: dict(block_m=16, block_n=64, block_k=16, tma=True)}
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1.6e-2}


@pytest.fixture
def c_launches(monkeypatch):
    """The stand-in C launcher's log on the host (None on a GPU: the compiled program's own)."""
    return None if ON_GPU else replayed_on_the_host(monkeypatch)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=DEVICE, dtype=dtype)


def misaligned(shape, dtype, seed):
    """A tensor of `shape` one element past a 16-byte boundary (a slice of a longer one)."""
    flat = randn(1 + torch.Size(shape).numel(), dtype=dtype, seed=seed)[1:]
    assert flat.data_ptr() % 16 != 0
    return flat.view(shape)


def expected(x, w, b, activation):
    return activate_torch(F.linear(x.double(), w.double(), None if b is None else b.double()), activation)


def close(y, want, dtype) -> bool:
    return y.shape == want.shape and bool(((y.double() - want).abs().max() <= TOLERANCE[dtype] * want.abs().max()))


def linear(x, w, b, activation):
    return tilemm.linear(x, w, b, activation, kernel="tensorcore", **PARAMS[x.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_key_s_third_call_replays_its_launch(dtype, c_launches):
    """A 3-D input (2 x 9 rows), new operands at each call: the first two calls launch through
    Triton, the later ones through the replay's C launcher, each the float64 answer."""
    for call in range(4):
        x, w, b = randn(2, 9, 24, dtype=dtype, seed=call), randn(40, 24, dtype=dtype, seed=10 + call), \
            randn(40, dtype=dtype, seed=20 + call)
        with torch.no_grad():
            assert close(linear(x, w, b, "gelu"), expected(x, w, b, "gelu"), dtype)
        if c_launches is not None:
            assert len(c_launches) == max(0, call - 1)
    (call,) = linear_calls.CALLS.values()      # (on a GPU whose Triton's launcher is another layout: the replay's own)
    replayers = {direct_replay.__name__, replay.__name__} if ON_GPU else {direct_replay.__name__}
    assert call.forward.__module__ in replayers


def test_no_call_is_served_another_specialization_s_launch(c_launches):
    """A key replayed, then calls that differ from it in one thing each (an operand one element
    past 16 bytes, other strides, a 3-D input whose rows are a copy, no bias, another activation,
    another dtype), three calls each
    (a replay of their own), then the first key again: each call's answer is float64's."""
    dtype = torch.float32

    def operands(seed):
        return randn(9, 24, dtype=dtype, seed=seed), randn(40, 24, dtype=dtype, seed=seed + 1), \
            randn(40, dtype=dtype, seed=seed + 2)
    variants = {
        "as recorded": lambda x, w, b: (x, w, b, "silu"),
        "x misaligned": lambda x, w, b: (misaligned(x.shape, dtype, 5).copy_(x), w, b, "silu"),
        "weight misaligned": lambda x, w, b: (x, misaligned(w.shape, dtype, 6).copy_(w), b, "silu"),
        "bias misaligned": lambda x, w, b: (x, w, misaligned(b.shape, dtype, 7).copy_(b), "silu"),
        "x by columns": lambda x, w, b: (x.T.contiguous().T, w, b, "silu"),
        "weight transposed": lambda x, w, b: (x, w.T.contiguous().T, b, "silu"),
        "x 3-D, its rows a copy": lambda x, w, b: (x.reshape(3, 3, 24).transpose(0, 1), w, b, "silu"),
        "no bias": lambda x, w, b: (x, w, None, "silu"),
        "relu": lambda x, w, b: (x, w, b, "relu"),
        "float64": lambda x, w, b: (x.double(), w.double(), b.double(), "silu"),
        "again": lambda x, w, b: (x, w, b, "silu"),
    }
    seed = 0
    with torch.no_grad():
        for name, make in variants.items():
            for _ in range(3):
                seed += 3
                x, w, b, activation = make(*operands(seed))
                assert close(linear(x, w, b, activation), expected(x, w, b, activation), x.dtype), name
    if c_launches is not None:
        assert len(c_launches) >= len(variants)        # (each variant's third call at least)


def test_a_recorded_gradient_replays_the_products(c_launches):
    """Training calls, new operands each: Y, dX, dW and dBias float64's; each call's node is the
    key's FusedLinear (on the leaves themselves); from the third call on, the forward and both
    products are replays."""
    dtype = torch.float32
    for call in range(4):
        leaves = [randn(2, 9, 24, seed=call), randn(40, 24, seed=10 + call), randn(40, seed=20 + call)]
        x, w, b = (t.clone().requires_grad_() for t in leaves)
        ref = [t.clone().double().requires_grad_() for t in leaves]
        grad = randn(2, 9, 40, seed=30 + call)
        y = linear(x, w, b, "silu")
        assert y.grad_fn.name() == "FusedLinearBackward"
        assert [f.variable for f, _ in y.grad_fn.next_functions] == [x, w, b]
        y.backward(grad)
        want = expected(*ref, "silu")
        want.backward(grad.double())
        assert close(y.detach(), want.detach(), dtype)
        for got, r in zip((x, w, b), ref):
            assert close(got.grad, r.grad, dtype)
        if c_launches is not None:
            assert len(c_launches) == 3 * max(0, call - 1)


def test_matmul_epilogue_s_alpha_beta_and_bias_side_make_keys_of_their_own(c_launches):
    """tilemm.matmul_epilogue with C and a residual: alpha, beta and a bias over rows or columns
    changed between calls, each three times: float64's answer every time."""
    dtype = torch.float32
    seed = 0
    for alpha, beta, over_m in ((0.5, 2.0, False), (2.0, 2.0, False), (0.5, -1.0, False), (0.5, 2.0, True),
                                (0.5, 2.0, False)):
        for _ in range(3):
            seed += 5
            a, b = randn(9, 24, seed=seed), randn(24, 40, seed=seed + 1)
            c, residual = randn(9, 40, seed=seed + 2), randn(9, 40, seed=seed + 3)
            bias = randn(9, 1, seed=seed + 4) if over_m else randn(40, seed=seed + 4)
            with torch.no_grad():
                y = tilemm.matmul_epilogue(a, b, bias=bias, activation="gelu", alpha=alpha, beta=beta, c=c,
                                           residual=residual, kernel="tensorcore", **PARAMS[dtype])
            z = alpha * a.double() @ b.double() + beta * c.double() + bias.double()
            assert close(y, F.gelu(z) + residual.double(), dtype), (alpha, beta, over_m)


def test_operands_overlapping_in_memory_are_launched_as_before(c_launches):
    """x and the weight views of one tensor: the launch is not replayed (a replay marks an
    operand's views by its storage), then the key's calls on apart operands: float64's answer."""
    dtype = torch.float32
    with torch.no_grad():
        for seed in range(3):
            both = randn(49, 24, seed=seed)
            x, w = both[40:], both[:40]
            assert close(linear(x, w, None, "gelu"), expected(x, w, None, "gelu"), dtype)
        for seed in range(3, 6):
            x, w = randn(9, 24, seed=seed), randn(40, 24, seed=seed + 10)
            assert close(linear(x, w, None, "gelu"), expected(x, w, None, "gelu"), dtype)


def test_the_keys_hold_the_device(monkeypatch):
    """The same operands on another GPU (the device mocked): neither key is the first's."""
    x, w, b = randn(9, 24), randn(40, 24), randn(40)
    config = config_for(x.dtype, PARAMS[x.dtype])

    def keys():
        return (linear_calls.call_key(x, w, b, "gelu", "tensorcore", PARAMS[x.dtype]),
                epilogue_repeats.product_key(x, w.mT, b, False, None, None, "gelu", 1.0, 0.0, config, False))
    here = keys()
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 1)))
    there = keys()
    assert None not in here and None not in there
    assert here[0] != there[0] and here[1] != there[1]


def test_a_subclass_and_an_unhashable_parameter_take_the_checked_path():
    """A tensor subclass has no key; a parameter of an unhashable value is refused by the checks,
    as it is without a key."""
    class Marked(torch.Tensor):
        pass
    x, w = randn(9, 24), randn(40, 24)
    assert linear_calls.call_key(x.as_subclass(Marked), w, None, "gelu", "tensorcore", {}) is None
    with pytest.raises(ValueError, match="block_m"):
        tilemm.linear(x, w, kernel="tensorcore", block_m=[16])


def test_the_library_route_is_kept_by_key_too():
    """kernel="cublas": torch's functions, the activation of each call's own."""
    x, w, b = randn(9, 24), randn(40, 24), randn(40)
    with torch.no_grad():
        for activation in ("gelu", "gelu", "relu", "gelu", "relu", None):
            y = tilemm.linear(x, w, b, activation, kernel="cublas")
            assert close(y, expected(x, w, b, activation or "identity"), x.dtype)
    assert all(call.library for call in linear_calls.CALLS.values()) and len(linear_calls.CALLS) == 3


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [16, 2048])
def test_on_the_gpu_a_replayed_call_gives_the_first_call_s_bits(rows):
    """A Linear's shapes (bfloat16, 2048 -> 2048, bias, silu; the pointer program at 16 rows, the
    TMA program at 2048): the first call (through Triton's JIT) and the third and fourth
    (replays) on the same operands give the same bits, Y and the gradients; a replay ran."""
    g = torch.Generator(device="cuda").manual_seed(rows)
    x = torch.randn(rows, 2048, device="cuda", generator=g).bfloat16()
    w = (torch.randn(2048, 2048, device="cuda", generator=g) / 45).bfloat16()
    b = torch.randn(2048, device="cuda", generator=g).bfloat16()
    grad = torch.randn(rows, 2048, device="cuda", generator=g).bfloat16()

    def call():
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        with torch.no_grad():
            y = tilemm.linear(x, w, b, "silu", kernel="tensorcore")
        trained = tilemm.linear(*leaves, "silu", kernel="tensorcore")
        trained.backward(grad)
        return [y, trained.detach(), *(t.grad for t in leaves)]
    first = call()
    for _ in range(3):
        again = call()
        assert all(torch.equal(p, q) for p, q in zip(first, again))
    replayers = (direct_replay.__name__, replay.__name__)
    assert all(call.forward.__module__ in replayers for call in linear_calls.CALLS.values())
    # the training calls' node is the key's route, whose forward (with the pre-activation) and two
    # products replay from the third call on
    routes = [call.route for call in linear_calls.CALLS.values() if call.route]
    assert routes and all(getattr(getattr(route, name), "__module__", None) in replayers for route in routes
                          for name in ("forward_aux_fast", "input_fast", "weight_fast"))
    want = F.silu(F.linear(x.float(), w.float(), b.float()))
    assert close(first[0], want.double(), torch.bfloat16)


def test_a_negative_view_is_multiplied_by_its_values(c_launches):
    """torch._neg_view (what x.conj().imag gives): its memory holds the values before the
    negation. A key replayed, then each operand of tilemm.linear and tilemm.matmul_epilogue as
    a negative view of the same layout, with and without a gradient: float64's answer, never the
    product of the memory as it is."""
    dtype = torch.float32
    x, w, b = randn(9, 24, seed=1), randn(40, 24, seed=2), randn(40, seed=3)
    with torch.no_grad():
        for _ in range(3):
            assert close(linear(x, w, b, "relu"), expected(x, w, b, "relu"), dtype)
        for i in range(3):
            views = [x, w, b]
            views[i] = torch._neg_view(-views[i])        # the same values, its negative bit set
            assert close(linear(*views, "relu"), expected(x, w, b, "relu"), dtype)
    wg = torch._neg_view(-w).requires_grad_()
    y = linear(x, wg, b, "identity")
    assert close(y.detach(), expected(x, w, b, "identity"), dtype)
    y.sum().backward()
    assert close(wg.grad, torch.ones(9, 40, dtype=torch.float64, device=DEVICE).T @ x.double(), dtype)
    a, bm, c, r = randn(9, 24, seed=4), randn(24, 40, seed=5), randn(9, 40, seed=6), randn(9, 40, seed=7)
    want = 2 * (a.double() @ bm.double()) + 0.5 * c.double() + b.double() + r.double()
    operands = dict(a=a, b=bm, bias=b, c=c, residual=r)
    for name in (None, *operands):
        given = dict(operands)
        if name is not None:
            given[name] = torch._neg_view(-given[name])
        y = tilemm.matmul_epilogue(given.pop("a"), given.pop("b"), alpha=2.0, beta=0.5, kernel="tensorcore",
                                   **given, **POINTERS)
        assert close(y, want, dtype), name
