"""A fused tilemm.nn.Linear's route (tilemm.torch.nn_fused_routes): its output and gradients
(dX, dW, dBias, the AUX the backward reads) the same bits as tilemm.linear's eager path, on the
host under Triton's interpreter (the launches as tilemm.linear makes them; and replayed through a
stand-in C launcher that runs the program on the addresses it is given: tests/interpreted_replays.py),
at ragged shapes, 1-D and 3-D inputs, with and without bias; the route refused where it does not
serve a call. The gpu-marked tests replay the compiled program."""
import pytest
import torch

import tilemm
import tilemm.nn
from tilemm.engine import direct_replay
from tilemm.torch import linear_calls, nn_fused_routes
from tilemm.torch.nn_fused_routes import FusedRoute

from .conftest import ON_GPU
from .interpreted_replays import linear_replays, replayed_on_the_host

DEVICE = "cuda" if ON_GPU else "cpu"
ACTIVATIONS = ("gelu", "relu", "silu", "gelu_tanh", "identity")
# the TMA program (bfloat16, tiles that walk a ragged product) and the pointer program (float32)
PROGRAMS = {"tma": (torch.bfloat16, dict(block_m=16, block_n=64, block_k=16, tma=True)),
            "pointers": (torch.float32, dict(block_m=32, block_n=32, block_k=16))}


def fused_linear(in_features, out_features, activation, dtype, params, bias=True, seed=0):
    torch.manual_seed(seed)
    layer = tilemm.nn.Linear(in_features, out_features, bias=bias, kernel="tensorcore", activation=activation,
                             device=DEVICE, dtype=dtype, **params)
    with torch.no_grad():
        layer.weight.mul_(4)          # values of both signs past relu's and gelu's bend
    return layer


def today(layer, x):
    """tilemm.linear's general eager path for the layer (the route's reference, bit for bit): its
    keys forgotten first, so that the call is checked and routed anew and each launch made
    through Triton (a key's first call), not replayed by its key's repeated call."""
    linear_calls.release()
    return tilemm.linear(x, layer.weight, layer.bias, layer.activation, kernel=layer.kernel, **layer.params)


def train_both(layer, x, grad):
    """((y, dx, dw, db) by the layer's call, the same by tilemm.linear's path), fresh leaves each."""
    got = []
    for call in (layer, lambda x: today(layer, x)):
        layer.zero_grad(set_to_none=True)
        xx = x.detach().clone().requires_grad_()
        y = call(xx)
        y.backward(grad)
        got.append((y.detach(), xx.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad))
    return got


def same(a, b) -> bool:
    return all((p is None and q is None) or (p is not None and q is not None and p.shape == q.shape
                                             and p.stride() == q.stride() and torch.equal(p, q)) for p, q in zip(a, b))


def the_route(layer, x) -> FusedRoute:
    route = layer.products.routes.get((x.shape, x.stride(), x.dtype))
    assert isinstance(route, FusedRoute)
    return route


CASES = ([(activation, "tma", True) for activation in ACTIVATIONS] + [("gelu", "pointers", True), ("relu", "pointers", True),
         ("gelu", "tma", False), ("silu", "pointers", False)])


@pytest.mark.parametrize("activation,program,replayed", CASES)
def test_the_route_gives_tilemm_linear_s_bits(activation, program, replayed, monkeypatch):
    """A 3-D input (2 x 9 rows, K = 24, N = 40: ragged tiles), inference and training twice, on
    new operands each: Y, dX, dW and dBias as tilemm.linear's path gives them; the graph holds
    the route's node alone on the input; replayed, every launch after the first of each product
    is a replay past Triton's runner (the C launcher's)."""
    c_launches = replayed_on_the_host(monkeypatch) if replayed else None
    theirs = linear_replays(monkeypatch)        # (tilemm.linear's own replays: the reference's launches)
    dtype, params = PROGRAMS[program]
    layer = fused_linear(24, 40, activation, dtype, params)
    for call in range(2):
        x = torch.randn(2, 9, 24, device=DEVICE, dtype=dtype)
        grad = torch.randn(2, 9, 40, device=DEVICE, dtype=dtype)
        with torch.no_grad():
            assert same([layer(x)], [today(layer, x)])
        ours, reference = train_both(layer, x, grad)
        assert same(ours, reference)
        assert layer(x.requires_grad_()).grad_fn.name() == "FusedLinearBackward"
    route = the_route(layer, x)
    used = [name for name in route.PRODUCTS if route.save_aux or name != "forward_aux_fast"]
    kinds = {name: getattr(getattr(route, name), "__module__", "") for name in used}
    if replayed:
        assert set(kinds.values()) == {direct_replay.__name__}
        # the second call's five launches (inference, training's forward, dX, dW, the last forward), and the
        # first call's last forward (and its training forward where that is inference's)
        assert len(c_launches) == 5 + 1 + (not route.save_aux) + len(theirs)
    elif ON_GPU:           # (no stand-in for the C launcher: the replays' own quick calls)
        assert set(kinds.values()) == {direct_replay.__name__}
    else:                  # the interpreter's launches have no runner to replay: tilemm.linear's launch each call
        assert all(getattr(route, name) == route.declined for name in used)


@pytest.mark.parametrize("shape,bias", [((1, 24), False), ((24,), True), ((3, 1, 24), True), ((5, 24), False)])
def test_awkward_shapes_and_no_bias(shape, bias, monkeypatch):
    """One row, a 1-D input, a size-1 middle dimension; no bias (dBias absent): the same bits,
    replayed twice on new operands."""
    replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["tma"]
    layer = fused_linear(24, 64, "gelu", dtype, params, bias=bias, seed=1)
    for _ in range(3):
        x = torch.randn(shape, device=DEVICE, dtype=dtype)
        grad = torch.randn(shape[:-1] + (64,), device=DEVICE, dtype=dtype)
        ours, reference = train_both(layer, x, grad)
        assert same(ours, reference)
        with torch.no_grad():
            assert same([layer(x)], [today(layer, x)])


def test_the_aux_is_the_pre_activation_and_relu_saves_y(monkeypatch):
    """gelu's node saves Z = X W^T + b (as tilemm.linear computes it), relu's the output."""
    replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["tma"]
    x = torch.randn(6, 24, device=DEVICE, dtype=dtype, requires_grad=True)
    for activation in ("gelu", "relu"):
        layer = fused_linear(24, 64, activation, dtype, params)
        for _ in range(2):             # the first call's launch, then the replay's
            y = layer(x)
            saved = y.grad_fn.saved_tensors[2]
            if activation == "relu":
                assert saved.data_ptr() == y.data_ptr()
            else:
                z = tilemm.linear(x.detach(), layer.weight.detach(), layer.bias.detach(), None, kernel="tensorcore",
                                  **params)
                assert torch.equal(saved, z) and saved.shape == y.shape


def test_a_non_contiguous_grad_and_a_transposed_weight_take_tilemm_linear_s_rule(monkeypatch):
    replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "silu", dtype, params)
    x = torch.randn(7, 24, device=DEVICE, dtype=dtype)
    grad = torch.randn(40, 7, device=DEVICE, dtype=dtype).T          # dY's columns contiguous
    assert same(*train_both(layer, x, grad))
    with torch.no_grad():               # a weight of another layout: a route of its own for it
        layer.weight = torch.nn.Parameter(layer.weight.T.contiguous().T)
    assert same(*train_both(layer, x, grad.contiguous()))
    assert not the_route(layer, x).usual


def test_a_weight_replaced_behind_the_module_s_back_is_refused(monkeypatch):
    """weight.data of another shape or layout: the route declines, tilemm.linear's path answers."""
    replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "gelu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype)
    layer(x)
    route = the_route(layer, x)
    # (made on the device: a copy to a GPU would make the strided view contiguous)
    for replaced in (torch.randn(40, 48, device=DEVICE)[:, ::2], torch.randn(40, 24, dtype=torch.float64, device=DEVICE)):
        with torch.no_grad():
            layer.weight.data = replaced
        assert route(x.to(replaced.dtype), layer.weight, layer.bias) is None
        if replaced.dtype == dtype:        # a route learned for the new weight in the old one's place
            with torch.no_grad():
                assert same([layer(x)], [today(layer, x)])
            assert the_route(layer, x) is not route and the_route(layer, x).weight_stride == (48, 2)


def test_bias_of_another_layout_or_none_is_refused():
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "relu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype)
    layer(x)
    route = the_route(layer, x)
    assert route(x, layer.weight, None) is None
    assert route(x, layer.weight, torch.randn(80, device=DEVICE, dtype=dtype)[::2]) is None
    assert route(x, layer.weight, layer.bias) is not None


def test_no_route_under_autocast_tracing_and_transforms(monkeypatch):
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "gelu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype)
    calls = []
    route_call = FusedRoute.__call__
    FusedRoute.__call__ = lambda self, *args: calls.append(1) or route_call(self, *args)
    try:
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            y = layer(x)
        assert y.dtype == torch.bfloat16 and layer.products.routes == {}      # (not kept: a later call may take it)
        # (tilemm.linear's composite under a transform or a dual level: tests/test_fused_transforms.py)
        assert torch.allclose(torch.func.vmap(layer)(x[None])[0], today(layer, x), atol=1e-5)
        torch.func.grad(lambda x: layer(x).sum())(x)
        with torch.autograd.forward_ad.dual_level():
            layer(torch.autograd.forward_ad.make_dual(x, torch.ones_like(x)))
        with monkeypatch.context() as patched:     # (a jit trace running: tilemm.linear's own path)
            patched.setattr(tilemm.nn, "tracing", lambda: True)
            assert torch.equal(layer(x), today(layer, x))
        assert calls == [] and layer.products.routes == {}
        layer(x)
        assert calls == [1]
    finally:
        FusedRoute.__call__ = route_call


def test_layouts_not_served_are_kept_as_none():
    """kernel None on the host: torch's own functions (the library's route), as tilemm.linear's."""
    layer = tilemm.nn.Linear(8, 6, activation="gelu", device=DEVICE)
    x = torch.randn(3, 8, device=DEVICE)
    y = layer(x)
    assert layer.products.routes == {(x.shape, x.stride(), x.dtype): None} or ON_GPU
    assert torch.equal(y, today(layer, x))
    assert nn_fused_routes.learn(x, layer.weight, layer.bias, "gelu", "tensorcore", {"block_m": 3}) == (None, True)
    assert nn_fused_routes.learn(x, layer.weight.double(), layer.bias, "gelu", "tensorcore", {}) == (None, False)


def test_swap_linears_fuse_activations_takes_the_routes(monkeypatch):
    replayed_on_the_host(monkeypatch)
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(), torch.nn.Linear(64, 24))
    model = model.to(DEVICE, torch.bfloat16)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True, tma=True, block_m=16, block_n=64,
                           block_k=16)
    x = torch.randn(4, 24, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(2):
        y = model(x)
    assert all(isinstance(route, FusedRoute) for i in (0, 2) for route in model[i].products.routes.values())
    h = tilemm.linear(x, model[0].weight, model[0].bias, "gelu", kernel="tensorcore", **model[0].params)
    assert torch.equal(y, tilemm.linear(h, model[2].weight, model[2].bias, None, kernel="tensorcore",
                                        **model[2].params))


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("rows", [2048, 40])
def test_on_the_gpu_the_route_replays_tilemm_linear_s_launches(activation, rows):
    """The compiled program (TMA where tilemm.linear takes it), replayed past Triton's runner:
    the same bits as tilemm.linear's path, forward and backward, over new operands."""
    layer = tilemm.nn.Linear(768, 3072, kernel="tensorcore", activation=activation, device="cuda",
                             dtype=torch.bfloat16)
    for _ in range(3):
        x = torch.randn(2, rows // 2, 768, device="cuda", dtype=torch.bfloat16)
        grad = torch.randn(2, rows // 2, 3072, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            assert same([layer(x)], [today(layer, x)])
        assert same(*train_both(layer, x, grad))
    route = the_route(layer, x)
    used = [name for name in route.PRODUCTS if route.save_aux or name != "forward_aux_fast"]
    assert all(getattr(getattr(route, name), "__module__", "") == direct_replay.__name__ for name in used)


def test_create_graph_gives_tilemm_linear_s_gradients():
    """A gradient taken with create_graph: tilemm.linear's, a graph of its own (the composite's
    gradients: tilemm.torch.fused_transforms), so that a second derivative is torch's."""
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "gelu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype, requires_grad=True)
    dx, = torch.autograd.grad(layer(x).sum(), x, create_graph=True)
    want, = torch.autograd.grad(today(layer, x).sum(), x, create_graph=True)
    assert torch.equal(dx, want) and dx.requires_grad and want.requires_grad
    dy = torch.ones(5, 40, device=DEVICE, dtype=dtype, requires_grad=True)
    dx, = torch.autograd.grad(layer(x), x, dy, create_graph=True)
    want, = torch.autograd.grad(today(layer, x), x, dy, create_graph=True)
    assert torch.equal(torch.autograd.grad(dx.square().sum(), (x, dy))[1],
                       torch.autograd.grad(want.square().sum(), (x, dy))[1])


def test_an_input_aligned_otherwise_is_launched_as_tilemm_linear_launches_it(monkeypatch):
    """The same layout 4 bytes further into memory: the replay declines it (its program was
    specialized on the first input's 16-byte alignment), tilemm.linear's launch answers."""
    c_launches = replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "silu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        layer(x)
        layer(x)
        replayed = len(c_launches)
        shifted = torch.randn(5 * 24 + 1, device=DEVICE, dtype=dtype)[1:].view(5, 24)
        assert same([layer(shifted)], [today(layer, shifted)])
    assert replayed == 1 and len(c_launches) == 1


def test_a_negative_view_input_is_multiplied_by_its_values(monkeypatch):
    """torch._neg_view (what x.conj().imag gives) holds the values before the negation: a
    layout's route learned and replayed, then an input of that layout as a negative view of the
    same values (with and without a gradient) gives the plain input's answer, as does its
    first call."""
    replayed_on_the_host(monkeypatch)
    dtype, params = PROGRAMS["pointers"]
    layer = fused_linear(24, 40, "relu", dtype, params)
    x = torch.randn(5, 24, device=DEVICE, dtype=dtype)
    negative = torch._neg_view(-x)
    want = today(layer, x)
    assert torch.equal(fused_linear(24, 40, "relu", dtype, params)(negative).detach(), want)   # a first call
    for _ in range(3):
        assert torch.equal(layer(x).detach(), want)
    assert torch.equal(layer(negative).detach(), want)
    with torch.no_grad():
        assert torch.equal(layer(negative), want)
