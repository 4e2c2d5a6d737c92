"""A tilemm.nn.Linear route's bias and gradients (tilemm.torch.nn_routes): the bias added in the
route's own node (no add node after it), its gradient dY summed over the rows, a broadcast dY
(``y.sum()``'s) through the recorded gradient products, a bias of another shape added after as
torch broadcasts it, a bias that alone requires grad, and its forward-mode derivative: torch's
values (float64) and the general path's bits, call after call, as the layer's parameters,
dtype and inputs change. The launches replay under Triton's interpreter (tests/interpreted_replays.py)."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

import tilemm.nn

from .conftest import ON_GPU
from .interpreted_replays import replayed_on_the_host
from .test_nn_routes import general, nodes
from .test_route_staleness import check, close, reference

BF = torch.bfloat16


@pytest.fixture(autouse=True)
def replayed(request, monkeypatch):
    """The host's stand-in replays (Triton's interpreter); a gpu test's are the compiled program's."""
    if "gpu" in request.keywords:
        return None
    if ON_GPU:
        pytest.skip("the host's replays under Triton's interpreter")
    return replayed_on_the_host(monkeypatch)


def layer_of(seed=0, **options):
    torch.manual_seed(seed)
    return tilemm.nn.Linear(16, 24, dtype=BF, kernel="tensorcore", **options)


def grads(forward, layer, x, dy=None):
    """(y, dx, dw, db) of forward on a fresh leaf: y.backward(dy), or y.sum().backward()."""
    leaf = x.detach().clone().requires_grad_()
    layer.zero_grad(set_to_none=True)
    y = forward(leaf)
    if dy is None:
        y.sum().backward()
    else:
        y.backward(dy)
    return y.detach(), leaf.grad, layer.weight.grad, layer.bias.grad


@pytest.mark.parametrize("shape", [(8, 16), (2, 4, 16)])
def test_the_bias_is_added_in_the_route_s_node_with_the_general_path_s_bits(shape):
    layer = layer_of()
    x = torch.randn(shape, dtype=BF)
    dy = torch.randn(shape[:-1] + (24,), dtype=BF)
    for grad in (None, dy):              # None: y.sum()'s dY, broadcast from a scalar (not contiguous)
        theirs = grads(lambda t: general(layer, t), layer, x, grad)
        for _ in range(3):               # the first calls, then the repeated ones
            ours = grads(layer, layer, x, grad)
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
        route = layer.products.routes[x.shape, x.stride(), x.dtype]
        for name in route.PRODUCTS:      # a broadcast dY's gradients too by the route's products, not the general rule
            assert getattr(getattr(route, name), "func", None) != route.first, name
    y = layer(x.requires_grad_())
    node = y.grad_fn if len(shape) == 2 else y.grad_fn.next_functions[0][0]   # (on the host: rows, viewed)
    assert type(node).__name__ == "KernelLinearBackward" and "AddBackward0" not in nodes(y)
    with torch.no_grad():
        assert torch.equal(layer(x), theirs[0])


def test_a_bias_of_another_shape_dtype_or_requires_grad():
    layer, x = layer_of(1), torch.randn(8, 16, dtype=BF)
    check(layer, x)
    check(layer, x)
    layer.bias.data = torch.randn(1, dtype=BF)               # broadcast, as torch adds it: added after
    check(layer, x)
    check(layer, x)
    layer.bias.data = torch.randn(24, dtype=BF)
    check(layer, x)
    layer.bias.data = torch.randn(24, dtype=torch.float16)   # another dtype: torch's error, as the general path's
    with pytest.raises(RuntimeError, match="dtype"):
        layer(x)
    layer.bias.data = torch.randn(24, dtype=BF)
    layer.weight.requires_grad_(False)                       # the bias alone records a gradient
    layer.zero_grad(set_to_none=True)
    y = layer(x)
    assert type(y.grad_fn).__name__ == "KernelLinearBackward"
    grad = torch.randn(8, 24, dtype=BF)
    y.backward(grad)
    assert layer.weight.grad is None and close(layer.bias.grad, reference(layer, x, grad)[3])
    layer.bias.requires_grad_(False)
    layer.weight.requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_()
    layer(leaf).backward(grad)
    theirs = reference(layer, x, grad)
    assert layer.bias.grad is None and close(leaf.grad, theirs[1]) and close(layer.weight.grad, theirs[2])
    layer.bias.requires_grad_(True)
    check(layer, x)
    layer.half()                                             # another dtype: planned again
    check(layer, x.half())
    layer.to(BF)
    layer.weight = torch.nn.Parameter(torch.randn(24, 16, dtype=BF))     # replaced
    check(layer, x)


def test_inputs_of_other_shapes_keep_their_bias_gradients_apart():
    layer = layer_of(2)
    for x in (torch.randn(8, 16, dtype=BF), torch.randn(2, 4, 16, dtype=BF), torch.randn(3, 16, dtype=BF),
              torch.randn(4, 2, 16, dtype=BF).transpose(0, 1), torch.randn(16, dtype=BF), torch.randn(8, 16, dtype=BF)):
        check(layer, x, train=x.dim() > 1)
        check(layer, x, train=x.dim() > 1)
        leaf = x.clone().requires_grad_()
        layer.zero_grad(set_to_none=True)
        layer(leaf).sum().backward()
        theirs = reference(layer, x, torch.ones(x.shape[:-1] + (24,)))
        assert close(leaf.grad, theirs[1]) and close(layer.weight.grad, theirs[2]) and close(layer.bias.grad, theirs[3])


def test_forward_mode_derivatives_with_the_bias_s_tangent():
    layer, x = layer_of(3), torch.randn(2, 4, 16, dtype=BF)
    layer(x)
    layer.requires_grad_(False)
    weight, bias = layer.weight.detach(), layer.bias.detach()
    d_x, d_bias = torch.randn_like(x), torch.randn_like(bias)
    for tangents in ((None, d_bias), (d_x, d_bias), (d_x, None)):
        with fwAD.dual_level():
            xs = x if tangents[0] is None else fwAD.make_dual(x, tangents[0])
            bs = bias if tangents[1] is None else fwAD.make_dual(bias, tangents[1])
            ours = fwAD.unpack_dual(torch.func.functional_call(layer, {"weight": weight, "bias": bs}, (xs,))).tangent
        _, expected = torch.func.jvp(lambda t, b: F.linear(t, weight.double(), b), (x.double(), bias.double()),
                                     tuple(torch.zeros(s.shape, dtype=torch.float64) if t is None else t.double()
                                           for t, s in zip(tangents, (x, bias))))
        assert close(ours, expected)
        with fwAD.dual_level(), torch.no_grad():        # a frozen layer's derivative, grad mode off
            y = layer(fwAD.make_dual(x, d_x))
            tangent = fwAD.unpack_dual(y).tangent
        assert y.grad_fn is None and close(tangent, d_x.double() @ weight.double().T)


def test_gradcheck_of_input_weight_and_bias_with_the_route_s_node():
    """float64 (the numpy rung's route): backward, double backward and forward-mode derivatives of
    input, weight and bias by finite differences, for 2-D and 3-D inputs."""
    torch.manual_seed(4)
    layer = tilemm.nn.Linear(5, 3, dtype=torch.float64, kernel="numpy")
    for shape in ((4, 5), (2, 3, 5)):
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        w, b = (p.detach().clone().requires_grad_() for p in (layer.weight, layer.bias))

        def through_layer(x, w, b):
            return torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,))
        through_layer(x, w, b)
        assert len(layer.products.routes) >= 1 and "AddBackward0" not in nodes(through_layer(x, w, b))
        assert torch.autograd.gradcheck(through_layer, (x, w, b), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(through_layer, (x, w, b))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [16, 512])
def test_gpu_the_bias_in_the_route_s_node_and_a_broadcast_dy(rows):
    """On the GPU, bfloat16, a 3-D input: with dY given, the output and all three gradients are the
    general path's bits, call after call; with y.sum()'s broadcast dY, within float64's bound; each
    product is a replay, and no add node follows the route's."""
    torch.manual_seed(0)
    layer = tilemm.nn.Linear(2048, 1024, device="cuda", dtype=BF, kernel="tensorcore")
    x = torch.randn(2, rows // 2, 2048, device="cuda", dtype=BF)
    dy = torch.randn(2, rows // 2, 1024, device="cuda", dtype=BF)
    theirs = grads(lambda t: general(layer, t), layer, x, dy)
    for _ in range(3):
        assert all(torch.equal(a, b) for a, b in zip(grads(layer, layer, x, dy), theirs))
    for _ in range(3):
        ours = grads(layer, layer, x)
        expected = reference(layer, x, torch.ones(x.shape[:-1] + (1024,), device="cuda"))
        assert close(ours[0], expected[0]) and all(close(a, b) for a, b in zip(ours[1:], expected[1:]))
    route = layer.products.routes[x.shape, x.stride(), x.dtype]
    for name in route.PRODUCTS:
        assert getattr(route, name).__module__ in ("tilemm.engine.direct_replay", "tilemm.engine.replay"), name
    y = layer(x.requires_grad_())
    assert type(y.grad_fn).__name__ == "KernelLinearBackward" and "AddBackward0" not in nodes(y)
