"""tilemm.nn.Linear's routes (tilemm.torch.nn_routes): the products of tilemm's own programs in the
fewest steps give the general path's bits (tilemm.matmul with its autograd), forward, backward,
under no_grad and inference_mode; a route is planned again when the weight is replaced, resized,
moved or re-strided, and follows its data when only that changes; each product is repeated by
its plan's repeated call after the first, and the plan's path runs where that call declines."""
import pickle

import pytest
import torch

import tilemm
from tilemm.nn import Linear
from tilemm.plans import calls
from tilemm.torch import nn_routes


def general(layer, x):
    """input @ weight.T through tilemm.matmul's general rules and autograd (tilemm.torch.ops)."""
    rows = x.reshape(-1, layer.in_features)
    y = tilemm.matmul(rows, layer.weight.T, kernel=layer.kernel, **layer.params)
    y = y.reshape(x.shape[:-1] + (layer.weight.shape[0],))
    return y if layer.bias is None else y + layer.bias


def step(forward, layer, x, dy):
    """(y, d input, d weight, d bias) of one forward and backward."""
    x = x.detach().requires_grad_()
    layer.zero_grad()
    y = forward(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad.clone(), None if layer.bias is None else layer.bias.grad.clone()


def nodes(y) -> set:
    """The names of the nodes of y's graph."""
    seen, todo = set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and type(node).__name__ not in seen:
            seen.add(type(node).__name__)
            todo.extend(n for n, _ in node.next_functions)
    return seen


@pytest.mark.parametrize("shape", [(16, 32), (2, 8, 32)])
def test_a_tensorcore_route_gives_the_general_path_s_bits(shape):
    """bfloat16 under Triton's interpreter: forward and both gradients bit for bit, first and
    repeated calls, the route's own node in the graph and no transpose node for the weight."""
    torch.manual_seed(0)
    layer = Linear(32, 48, bias=False, dtype=torch.bfloat16, kernel="tensorcore")
    x, dy = torch.randn(shape, dtype=torch.bfloat16), torch.randn(shape[:-1] + (48,), dtype=torch.bfloat16)
    theirs = step(lambda t: general(layer, t), layer, x, dy)
    for _ in range(2):
        ours = step(layer, layer, x, dy)
        assert all(torch.equal(a, b) for a, b in zip(ours[:3], theirs[:3]))
    assert len(layer.products.routes) == 1
    y = layer(x.requires_grad_())
    graph = nodes(y)
    assert "KernelLinearBackward" in graph and "TBackward0" not in graph
    node = y.grad_fn if len(shape) == 2 else y.grad_fn.next_functions[0][0]     # (the rows' view back: ViewBackward0)
    assert type(node).__name__ == "KernelLinearBackward"
    assert {type(n).__name__ for n, _ in node.next_functions if n} == {"AccumulateGrad"}   # no node for input's rows
    with torch.no_grad():
        assert torch.equal(layer(x), theirs[0])
    with torch.inference_mode():
        y = layer(x)
    assert torch.equal(y, theirs[0]) and y.grad_fn is None


def counting(monkeypatch):
    """calls.repeated wrapped so that each repeated call made is counted by product (a, b shapes)."""
    made = []
    original = calls.repeated

    def repeated(a, b, kernel, params):
        fast = original(a, b, kernel, params)

        def counted(x, y):
            made.append((tuple(x.shape), tuple(y.shape)))
            return fast(x, y)
        return counted
    monkeypatch.setattr(calls, "repeated", repeated)
    return made


def test_each_product_is_repeated_by_its_plan_s_call_after_the_first(monkeypatch):
    made = counting(monkeypatch)
    torch.manual_seed(1)
    layer = Linear(6, 5, dtype=torch.float64, kernel="numpy")
    x, dy = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    first = step(layer, layer, x, dy)
    assert made == []                                  # the first call of each product: by its plan
    again = step(layer, layer, x, dy)
    assert sorted(made) == [((5, 12), (12, 6)), ((12, 5), (5, 6)), ((12, 6), (6, 5))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    with torch.no_grad():
        layer(x)
    assert len(made) == 4


def address_replays(monkeypatch) -> list:
    """calls.replayed standing for a replay on the CPU: it reads memory from each operand's address
    as the plan's operands were laid out (as a compiled program does), and allocates C in the shape
    asked; the shapes each call was given are logged."""
    given = []

    def replayed(a, b, kernel, params, shape=None):
        layouts = (a.shape, a.stride()), (b.shape, b.stride())
        c_shape = tuple(shape) if shape is not None else (a.shape[0], b.shape[1])

        def replay(x, y):
            given.append((tuple(x.shape), tuple(y.shape)))
            return (torch.as_strided(x, *layouts[0]) @ torch.as_strided(y, *layouts[1])).reshape(c_shape).clone()
        return replay
    monkeypatch.setattr(calls, "replayed", replayed)
    return given


def test_a_replay_is_given_the_operands_as_they_come_and_makes_c_in_the_shape_wanted(monkeypatch):
    """A replay reads its operands' addresses alone (calls.replayed): the route gives it the input,
    W and dY as they come (W for the W.T it was planned on, a 3-D input for its rows: the answers
    show it read them where the planned operands start), and takes C in the output's shape (no view of it: an in-place op may follow) and d
    input in the input's."""
    given = address_replays(monkeypatch)
    torch.manual_seed(6)
    layer = Linear(6, 5, bias=False, dtype=torch.float64, kernel="numpy")
    theirs = torch.nn.Linear(6, 5, bias=False, dtype=torch.float64)
    theirs.load_state_dict(layer.state_dict())
    x, dy = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    step(layer, layer, x, dy)
    layer.zero_grad()
    xg = x.clone().requires_grad_()
    y = layer(xg)
    assert y._base is None and type(y.grad_fn).__name__ == "KernelLinearBackward"   # C of the output's shape
    y.mul_(2).backward(dy)
    assert sorted(given) == [((3, 4, 5), (3, 4, 6)), ((3, 4, 5), (5, 6)), ((3, 4, 6), (5, 6))]
    expected = step(lambda t: theirs(t).mul(2), theirs, x, dy)
    assert torch.allclose(y.detach(), expected[0]) and torch.allclose(xg.grad, expected[1])
    assert torch.allclose(layer.weight.grad, expected[2])
    with torch.no_grad():
        assert torch.allclose(layer(x) * 2, expected[0]) and layer(x)._base is None
    import torch.autograd.forward_ad as fwAD
    tangent = torch.randn_like(x)
    with fwAD.dual_level():                           # recorded (xg requires grad): the node's jvp
        ours = fwAD.unpack_dual(layer(fwAD.make_dual(xg, tangent))).tangent
        expected = fwAD.unpack_dual(theirs(fwAD.make_dual(xg, tangent))).tangent
    assert ours.shape == (3, 4, 5) and torch.allclose(ours, expected)


def test_a_declining_repeated_call_leaves_the_product_to_its_plan(monkeypatch):
    monkeypatch.setattr(calls, "repeated", lambda a, b, kernel, params: lambda x, y: None)
    torch.manual_seed(2)
    layer = Linear(6, 5, dtype=torch.float64, kernel="numpy")
    x, dy = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    theirs = step(lambda t: general(layer, t), layer, x, dy)
    for _ in range(2):
        assert all(torch.equal(a, b) for a, b in zip(step(layer, layer, x, dy), theirs))


def test_a_route_is_planned_again_when_the_weight_changes_behind_the_module():
    """New values at a new address (weight.data = ...): followed; another shape, strides or dtype:
    planned again; a new Parameter or .to(): the routes forgotten. Each answer is the general path's."""
    torch.manual_seed(3)
    layer = Linear(6, 5, dtype=torch.float64, kernel="numpy")
    x = torch.randn(2, 3, 6, dtype=torch.float64)

    def check():
        for _ in range(2):
            assert torch.equal(layer(x), general(layer, x))
    check()
    route = layer.products.routes[x.shape, x.stride(), x.dtype]
    layer.weight.data = torch.randn(5, 6, dtype=torch.float64)          # same layout, other memory
    check()
    assert layer.products.routes[x.shape, x.stride(), x.dtype] is route
    layer.weight.data = torch.randn(7, 6, dtype=torch.float64)          # resized
    layer.bias.data = torch.randn(7, dtype=torch.float64)
    check()
    assert layer(x).shape == (2, 3, 7) and layer.products.routes[x.shape, x.stride(), x.dtype] is not route
    layer.weight.data = torch.randn(6, 7, dtype=torch.float64).T        # column-major: the general rule's gradients
    check()
    y = layer(x.requires_grad_())
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, torch.ones(2, 3, 7, dtype=torch.float64) @ layer.weight)
    layer.weight = torch.nn.Parameter(torch.randn(7, 6, dtype=torch.float64))
    assert layer.products.routes == {}
    check()
    layer.float()
    assert layer.products.routes == {}
    x = x.detach().float()
    check()


def test_gradients_a_route_leaves_to_the_general_rule():
    """A dY that is not contiguous, a double backward, forward-mode derivatives: torch's values."""
    torch.manual_seed(4)
    layer = Linear(6, 5, dtype=torch.float64, kernel="numpy")
    theirs = torch.nn.Linear(6, 5, dtype=torch.float64)
    theirs.load_state_dict(layer.state_dict())
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    for module in (layer, layer, theirs):            # dY expanded from a scalar: not contiguous
        module(x).sum().backward()
    assert torch.allclose(x.grad, 3 * layer.weight.sum(0).expand(4, 6))
    assert torch.allclose(layer.weight.grad, 2 * theirs.weight.grad)
    assert torch.autograd.gradgradcheck(lambda t: layer(t), (x,))
    import torch.autograd.forward_ad as fwAD
    tangent = torch.randn(4, 6, dtype=torch.float64)
    with fwAD.dual_level():
        ours = fwAD.unpack_dual(layer(fwAD.make_dual(x, tangent))).tangent
        expected = fwAD.unpack_dual(theirs(fwAD.make_dual(x, tangent))).tangent
    assert torch.allclose(ours, expected)


class Sub(torch.Tensor):
    """A tensor subclass (not dispatched by Python)."""


def test_inputs_a_route_does_not_serve_take_the_module_s_general_path():
    torch.manual_seed(5)
    layer = Linear(6, 5, dtype=torch.float64, kernel="numpy")
    x = torch.randn(4, 6, dtype=torch.float64)
    layer(x)
    assert len(layer.products.routes) == 1
    route = layer.products.routes[x.shape, x.stride(), x.dtype]
    sub = x.as_subclass(Sub)                         # another kind of tensor: the general path
    assert torch.equal(layer(sub).as_subclass(torch.Tensor), general(layer, x))
    assert layer.products.routes[x.shape, x.stride(), x.dtype] is route          # the plain tensors' kept
    assert type(layer(x)) is torch.Tensor and torch.equal(layer(x), general(layer, x))
    meta = Linear(6, 5, dtype=torch.float64, kernel="numpy", device="meta")
    assert meta(torch.randn(4, 6, dtype=torch.float64, device="meta")).is_meta      # no memory: the op's fake
    assert pickle.loads(pickle.dumps(layer)).products.routes == {}


def test_direct_apply_is_autograd_s_own():
    apply = nn_routes.direct_apply(nn_routes.KernelLinear)
    assert apply is not nn_routes.KernelLinear.apply and apply.__self__ is nn_routes.KernelLinear


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [4, 512])
def test_gpu_routes_replay_the_general_path_s_products_bit_for_bit(rows):
    """On the GPU, bfloat16: each of the route's three products is its plan's replay (4 rows: the
    pointer program, K split; 512: a TMA program, launched past Triton's runner where its
    launcher's layout is the one known), and the forward and both gradients are the general
    path's bits, call after call, for a 3-D input."""
    torch.manual_seed(0)
    layer = Linear(2048, 1024, bias=False, device="cuda", dtype=torch.bfloat16, kernel="tensorcore")
    x = torch.randn(2, rows // 2, 2048, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(2, rows // 2, 1024, device="cuda", dtype=torch.bfloat16)
    theirs = step(lambda t: general(layer, t), layer, x, dy)
    for _ in range(3):
        ours = step(layer, layer, x, dy)
        assert all(torch.equal(a, b) for a, b in zip(ours[:3], theirs[:3]))
    route = layer.products.routes[x.shape, x.stride(), x.dtype]
    for name in route.PRODUCTS:
        assert getattr(route, name).__module__ in ("tilemm.engine.direct_replay", "tilemm.engine.replay"), name
    with torch.inference_mode():
        y = layer(x)
    assert torch.equal(y, theirs[0]) and y._base is None
