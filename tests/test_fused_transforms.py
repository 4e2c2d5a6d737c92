"""The fused epilogues under torch.func's transforms and forward-mode AD (tilemm.torch.fused_transforms):
tilemm.linear, tilemm.matmul_epilogue, a fused tilemm.nn.Linear and a model after
swap_linears(fuse_activations=True), each against torch's own composite (F.linear or mm, the adds
and the activation) in float64: values, gradients, second derivatives, vmap over the input's and
the weight's batch, jvp against jacfwd, dual tensors; gradcheck and gradgradcheck of the eager
nodes. On the host the Triton route runs under the interpreter (kernel="tensorcore")."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import tilemm
import tilemm.nn
from tilemm.products import fused
from tilemm.torch.nn_fused_routes import FusedRoute

from .conftest import ON_GPU

DEVICE = "cuda" if ON_GPU else "cpu"
F64 = dict(dtype=torch.float64, device=DEVICE)
KERNEL = dict(kernel="tensorcore", block_m=16, block_n=16, block_k=16)     # the program's smallest tiles: fast
ACTIVATIONS = ("identity", "relu", "gelu", "gelu_tanh", "silu")
TORCH = {"identity": lambda z: z, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
         "silu": F.silu}


def randn(*shape, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(*shape, generator=g, **F64)


def ours_linear(activation):
    return lambda x, w, b, r: tilemm.linear(x, w, b, activation, residual=r, **KERNEL)


def torch_linear(activation):
    return lambda x, w, b, r: TORCH[activation](F.linear(x, w, b)) + r


def close(x, y) -> bool:
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(close(p, q) for p, q in zip(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)
    return x.shape == y.shape and torch.allclose(x, y, rtol=1e-9, atol=1e-9)


@pytest.fixture
def products_made(monkeypatch):
    """The routes fused.forward is called with (the program's, or the library's)."""
    ways, forward = [], fused.forward
    monkeypatch.setattr(fused, "forward", lambda *args, **kw: ways.append(args[9]) or forward(*args, **kw))
    return ways


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_grad_vjp_jvp_jacrev_and_jacfwd(activation, products_made):
    args = (randn(2, 3, 8), randn(5, 8, seed=1), randn(5, seed=2), randn(2, 3, 5, seed=3))
    ours, theirs = ours_linear(activation), torch_linear(activation)
    assert close(ours(*args), theirs(*args))
    loss = lambda f: lambda *a: f(*a).square().sum()                                # noqa: E731
    assert close(grad(loss(ours), argnums=(0, 1, 2, 3))(*args), grad(loss(theirs), argnums=(0, 1, 2, 3))(*args))
    (y, back), (y2, back2) = vjp(ours, *args), vjp(theirs, *args)
    dy = randn(2, 3, 5, seed=4)
    assert close(y, y2) and close(back(dy), back2(dy))
    tangents = tuple(randn(*a.shape, seed=10 + i) for i, a in enumerate(args))
    out, tangent = jvp(ours, args, tangents)
    assert close((out, tangent), jvp(theirs, args, tangents))
    # jvp against jacfwd: the tangent is the Jacobian applied to the tangents
    jac = jacfwd(ours, argnums=(0, 1, 2, 3))(*args)
    by_jacobian = sum((j * t).flatten(-t.dim()).sum(-1) for j, t in zip(jac, tangents))
    assert close(tangent, by_jacobian)
    assert close(jacrev(ours, argnums=(0, 1))(*args), jacrev(theirs, argnums=(0, 1))(*args))
    assert products_made and set(products_made) == {fused.TRITON}       # each product the program's


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_second_derivatives(activation):
    x, w, b, r = randn(2, 3), randn(2, 3, seed=1), randn(2, seed=2), randn(2, 2, seed=3)

    def second(f):        # grad of grad, and the weight's Hessian (jacfwd over jacrev)
        def loss(x, w):
            return f(x, w, b, r).sin().sum()
        return grad(lambda x: grad(loss)(x, w).sum())(x), hessian(loss, argnums=1)(x, w)
    assert close(second(ours_linear(activation)), second(torch_linear(activation)))


def test_linear_gradcheck_and_gradgradcheck():
    """The eager node (EpilogueFunction): its backward, and under create_graph the composite's."""
    args = tuple(t.requires_grad_() for t in (randn(2, 3), randn(2, 3, seed=1), randn(2, seed=2), randn(2, 2, seed=3)))
    ours = ours_linear("gelu")
    assert torch.autograd.gradcheck(ours, args) and torch.autograd.gradgradcheck(ours, args, fast_mode=True)


def test_vmap_over_the_input_s_and_the_weight_s_batch():
    ours, theirs = ours_linear("gelu"), torch_linear("gelu")
    xs, ws = randn(4, 3, 8), randn(4, 5, 8, seed=1)
    x, w, b, r = randn(3, 8, seed=2), randn(5, 8, seed=3), randn(5, seed=4), randn(3, 5, seed=5)
    for dims, args in (((0, None, None, None), (xs, w, b, r)), ((None, 0, None, None), (x, ws, b, r)),
                       ((0, 0, None, None), (xs, ws, b, r)), ((1, 0, None, None), (xs.movedim(0, 1), ws, b, r))):
        assert close(vmap(ours, dims)(*args), vmap(theirs, dims)(*args))
    # per-sample gradients of the weight: vmap over grad
    loss = lambda f: lambda w, x: f(x, w, b, r).square().sum()                    # noqa: E731
    assert close(vmap(grad(loss(ours)), (None, 0))(w, xs), vmap(grad(loss(theirs)), (None, 0))(w, xs))


@pytest.mark.parametrize("bias_shape", [(7,), (1, 7), (6, 1), None])
def test_matmul_epilogue_under_the_transforms(bias_shape):
    a, b, c, r = randn(6, 4), randn(4, 7, seed=1), randn(6, 7, seed=2), randn(6, 7, seed=3)
    bias = None if bias_shape is None else randn(*bias_shape, seed=4)

    def ours(a, b, c, r):
        return tilemm.matmul_epilogue(a, b, bias=bias, c=c, alpha=1.5, beta=-0.5, residual=r, activation="silu",
                                      **KERNEL)

    def theirs(a, b, c, r):
        return F.silu(1.5 * a @ b - 0.5 * c + (0 if bias is None else bias)) + r
    args = (a, b, c, r)
    assert close(ours(*args), theirs(*args))
    loss = lambda f: lambda *x: f(*x).square().sum()                                # noqa: E731
    assert close(grad(loss(ours), argnums=(0, 1, 2, 3))(*args), grad(loss(theirs), argnums=(0, 1, 2, 3))(*args))
    tangents = tuple(randn(*t.shape, seed=9 + i) for i, t in enumerate(args))
    assert close(jvp(ours, args, tangents), jvp(theirs, args, tangents))
    assert close(jacfwd(ours, argnums=1)(*args), jacrev(theirs, argnums=1)(*args))
    stack = randn(3, 6, 4, seed=7)
    assert close(vmap(ours, (0, None, None, None))(stack, b, c, r), vmap(theirs, (0, None, None, None))(stack, b, c, r))
    bs, rs = randn(3, 4, 7, seed=8), randn(3, 6, 7, seed=9)
    assert close(vmap(ours, (None, 0, None, 0))(a, bs, c, rs), vmap(theirs, (None, 0, None, 0))(a, bs, c, rs))


def test_matmul_epilogue_gradcheck_and_gradgradcheck():
    a, b, c, bias = (t.requires_grad_() for t in (randn(2, 3), randn(3, 2, seed=1), randn(2, 2, seed=2),
                                                  randn(2, 1, seed=3)))

    def ours(a, b, c, bias):
        return tilemm.matmul_epilogue(a, b, bias=bias, c=c, alpha=2.0, beta=0.5, activation="gelu_tanh", **KERNEL)
    args = (a, b, c, bias)
    assert torch.autograd.gradcheck(ours, args) and torch.autograd.gradgradcheck(ours, args, fast_mode=True)


def dual_tangents(f, primals, tangents, requires_grad: bool):
    """f's output and tangent through forward_ad's dual tensors."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p.detach().requires_grad_(requires_grad), t) for p, t in zip(primals, tangents)]
        y = fwAD.unpack_dual(f(*duals))
        return y.primal.detach(), y.tangent


@pytest.mark.parametrize("requires_grad", [False, True])
def test_dual_tensors(requires_grad):
    args = (randn(3, 8), randn(5, 8, seed=1), randn(5, seed=2), randn(3, 5, seed=3))
    tangents = tuple(randn(*t.shape, seed=5 + i) for i, t in enumerate(args))
    for activation in ("relu", "gelu"):
        ours = dual_tangents(ours_linear(activation), args, tangents, requires_grad)
        assert ours[1] is not None and close(ours, dual_tangents(torch_linear(activation), args, tangents, False))
    epilogue = lambda a, b: tilemm.matmul_epilogue(a, b, activation="silu", alpha=0.5, **KERNEL)   # noqa: E731
    ours = dual_tangents(epilogue, (args[0], args[1].T), (tangents[0], tangents[1].T), requires_grad)
    theirs = dual_tangents(lambda a, b: F.silu(0.5 * a @ b), (args[0], args[1].T), (tangents[0], tangents[1].T), False)
    assert close(ours, theirs)


def fused_layer(activation="gelu", seed=0):
    torch.manual_seed(seed)
    return tilemm.nn.Linear(8, 5, activation=activation, **F64, **KERNEL)


def plain_copy(layer):
    theirs = torch.nn.Linear(8, 5, **F64)
    theirs.load_state_dict(layer.state_dict())
    return lambda x: TORCH[layer.activation](theirs(x))


@pytest.fixture
def routes_called(monkeypatch):
    calls, call = [], FusedRoute.__call__
    monkeypatch.setattr(FusedRoute, "__call__", lambda self, *args: calls.append(1) or call(self, *args))
    return calls


def test_a_fused_linear_under_functional_call_vmap_jvp_and_dual_tensors(routes_called):
    layer = fused_layer("gelu")
    theirs = plain_copy(layer)
    x = randn(4, 8, seed=1)
    params = {name: p.detach() for name, p in layer.named_parameters()}

    def loss(module):
        return lambda p, x: functional_call(module, p, (x,)).square().sum()
    ours_grads = grad(loss(layer))(params, x)
    with torch.no_grad():
        assert close(layer(x), theirs(x))                          # (the eager route, learned here)
    assert routes_called == [1]
    linear = torch.nn.Linear(8, 5, **F64)
    linear.load_state_dict(layer.state_dict())
    expected = grad(lambda p, x: F.gelu(functional_call(linear, p, (x,))).square().sum())(params, x)
    assert close(ours_grads, expected)
    assert close(vmap(layer)(x.reshape(2, 2, 8)), theirs(x).reshape(2, 2, 5))
    t = randn(4, 8, seed=2)
    assert close(jvp(layer, (x,), (t,)), jvp(theirs, (x,), (t,)))
    for requires_grad in (False, True):
        assert close(dual_tangents(layer, (x,), (t,), requires_grad), dual_tangents(theirs, (x,), (t,), False))
    assert routes_called == [1]                                    # no transform or dual level took the route


def test_a_fused_linear_s_gradcheck_and_gradgradcheck(routes_called):
    """The eager route's node (FusedLinear): its backward, and under create_graph the composite's."""
    torch.manual_seed(0)
    layer = tilemm.nn.Linear(3, 2, activation="silu", **F64, **KERNEL)
    x = randn(2, 3).requires_grad_()
    assert type(layer(x).grad_fn).__name__ == "FusedLinearBackward"
    assert torch.autograd.gradcheck(layer, (x,)) and torch.autograd.gradgradcheck(layer, (x,))
    assert len(routes_called) > 2


def test_a_swapped_model_with_fused_activations():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.SiLU(), torch.nn.Linear(6, 3), torch.nn.ReLU())
    model = model.to(**F64)
    theirs = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.SiLU(), torch.nn.Linear(6, 3), torch.nn.ReLU())
    theirs = theirs.to(**F64)
    theirs.load_state_dict(model.state_dict())
    tilemm.nn.swap_linears(model, fuse_activations=True, **KERNEL)
    assert model[0].activation == "silu" and model[2].activation == "relu"
    x = randn(5, 8, seed=1)
    model(x)                                                      # the eager routes, learned
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(module):
        return lambda p, x: functional_call(module, p, (x,)).sum()
    assert close(jacrev(loss(model))(params, x), jacrev(loss(theirs))(params, x))
    assert close(vmap(model)(x[:, None]), vmap(theirs)(x[:, None]))
    t = randn(5, 8, seed=2)
    assert close(jvp(model, (x,), (t,)), jvp(theirs, (x,), (t,)))
    assert close(dual_tangents(model, (x,), (t,), False), dual_tangents(theirs, (x,), (t,), False))


def node_names(y) -> set:
    """The names of the nodes of y's graph."""
    names, nodes = set(), [y.grad_fn]
    while nodes:
        node = nodes.pop()
        if node is not None and node.name() not in names:
            names.add(node.name())
            nodes.extend(next_node for next_node, _ in node.next_functions)
    return names


def test_the_eager_call_keeps_its_node():
    x, w, b = (t.requires_grad_() for t in (randn(2, 3, 8), randn(5, 8, seed=1), randn(5, seed=2)))
    names = node_names(tilemm.linear(x, w, b, "gelu", **KERNEL))     # (its key's node: tilemm.torch.linear_calls)
    assert "FusedLinearBackward" in names and "EpilogueProductBackward" not in names
    names = node_names(tilemm.linear(x, w, b, "gelu", residual=randn(3, 5, seed=3), **KERNEL))
    assert "EpilogueFunctionBackward" in names and "EpilogueProductBackward" not in names
    with fwAD.dual_level():            # a dual level: the composite, the program's product a node of its own
        names = node_names(tilemm.linear(x, w, b, "gelu", **KERNEL))
    assert not {"FusedLinearBackward", "EpilogueFunctionBackward"} & names
    assert {"EpilogueProductBackward", "GeluBackward0"} <= names
