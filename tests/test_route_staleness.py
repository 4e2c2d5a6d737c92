"""A tilemm.nn.Linear's kept routes (tilemm.torch.nn_routes, nn_fused_routes) never serve a call
they should not: after the weight or bias changed in place, was replaced, resized, re-strided,
moved to another dtype, shared, loaded or copied, and for inputs of other strides, offsets, ranks
and row counts, gradient modes, hooks and functional_call, every output and gradient is torch's
(float64 from the same parameters). The launches run under Triton's interpreter, replayed through
a stand-in C launcher that reads the addresses it is given (tests/interpreted_replays.py): a
stale address or a route kept past a change gives a wrong answer here."""
import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

import tilemm.nn

from .conftest import ON_GPU
from .interpreted_replays import replayed_on_the_host
from .test_nn_routes import address_replays

BF = torch.bfloat16
ACTIVATIONS = {None: lambda t: t, "gelu": F.gelu, "silu": F.silu}


def make(activation, bias=True, seed=0):
    torch.manual_seed(seed)
    return tilemm.nn.Linear(16, 24, bias=bias, dtype=BF, kernel="tensorcore", activation=activation)


def reference(layer, x, grad=None, weight=None, bias=None, pre=None):
    """(y, dx, dw, db) in float64 by torch from the layer's parameters (or weight, bias given)."""
    weight = layer.weight if weight is None else weight
    bias = layer.bias if bias is None else bias
    xd = x.detach().double().requires_grad_()
    wd = weight.detach().double().requires_grad_()
    bd = None if bias is None else bias.detach().double().requires_grad_()
    y = ACTIVATIONS[layer.activation](F.linear(xd if pre is None else pre(xd), wd, bd))
    if grad is None:
        return y.detach(), None, None, None
    y.backward(grad.double())
    return y.detach(), xd.grad, wd.grad, None if bd is None else bd.grad


def close(ours, theirs) -> bool:
    if ours is None or theirs is None:
        return ours is None and theirs is None
    scale = 1 + (theirs.abs().max().item() if theirs.numel() else 0)
    return ours.shape == theirs.shape and torch.allclose(ours.double(), theirs, rtol=2e-2, atol=2e-2 * scale)


def check(layer, x, train=True):
    """The layer's output (and, where train, its gradients on a fresh leaf) are torch's."""
    assert close(layer(x), reference(layer, x)[0])
    if not train or not x.numel():
        return
    layer.zero_grad(set_to_none=True)
    leaf = x.detach().clone().requires_grad_()
    y = layer(leaf)
    grad = torch.randn_like(y)
    y.backward(grad)
    theirs = reference(layer, x, grad)
    ours = (y, leaf.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad)
    assert all(close(a, b) for a, b in zip(ours[1:], theirs[1:]))


@pytest.fixture(autouse=True)
def replayed(request, monkeypatch):
    """The host's stand-in replays for the tests on the host (Triton's interpreter); a gpu test's
    replays are the compiled program's."""
    if "gpu" in request.keywords:
        return None
    if ON_GPU:
        pytest.skip("the host's replays under Triton's interpreter")
    return replayed_on_the_host(monkeypatch)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_parameters_changed_in_place_replaced_or_moved(activation):
    layer, x = make(activation), torch.randn(8, 16, dtype=BF)
    check(layer, x)
    check(layer, x)                                    # the replays
    with torch.no_grad():
        layer.weight.mul_(2)
        layer.bias.zero_()
    check(layer, x)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(24, 16))
    check(layer, x, train=False)
    layer.weight = torch.nn.Parameter(torch.randn(24, 16, dtype=BF))        # a new Parameter
    check(layer, x)
    layer.weight.data = torch.randn(16, 24, dtype=BF).T                     # column-major
    check(layer, x)
    memory = torch.randn(24 * 16 + 8, dtype=BF)
    layer.weight.data = memory[1:1 + 24 * 16].view(24, 16)                  # at another alignment
    check(layer, x)
    layer.weight.data = torch.randn(30, 16, dtype=BF)                       # resized (as torch: no grad)
    layer.bias.data = torch.randn(30, dtype=BF)
    check(layer, x, train=False)
    layer.weight.data, layer.bias.data = torch.randn(24, 16, dtype=BF), torch.randn(48, dtype=BF)[::2]
    check(layer, x)
    layer.bias = None
    check(layer, x)
    layer.bias = torch.nn.Parameter(torch.randn(24, dtype=BF))
    check(layer, x)
    layer.weight.requires_grad_(False)
    check(layer, x, train=False)
    layer.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_()
    layer(leaf).backward(torch.ones(8, 24, dtype=BF))
    assert layer.weight.grad is None and close(leaf.grad, reference(layer, x, torch.ones(8, 24))[1])
    layer.weight.requires_grad_(True)
    layer.half()
    check(layer, x.half(), train=False)
    layer.to(BF)
    check(layer, x)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_loaded_copied_pickled_and_shared_parameters(activation):
    layer, x = make(activation), torch.randn(5, 16, dtype=BF)
    check(layer, x)
    layer.load_state_dict(make(activation, seed=1).state_dict())
    check(layer, x)
    layer.load_state_dict(make(activation, seed=2).state_dict(), assign=True)
    check(layer, x)
    twin = copy.deepcopy(layer)                 # its routes copied: they follow the copy's parameters
    with torch.no_grad():
        twin.weight.mul_(-1)
    check(twin, x)
    check(layer, x)
    check(pickle.loads(pickle.dumps(layer)), x, train=False)
    other = make(activation, seed=3)
    other.weight = layer.weight
    check(other, x)
    with torch.no_grad():
        layer.weight.mul_(3)
    check(layer, x, train=False)
    check(other, x, train=False)


@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
def test_inputs_of_other_strides_offsets_ranks_and_rows(activation):
    layer = make(activation)
    x = torch.randn(8, 16, dtype=BF)
    check(layer, x)
    check(layer, torch.randn(16, 8, dtype=BF).T)                # transposed
    check(layer, torch.randn(8, 32, dtype=BF)[:, :16])          # a slice
    memory = torch.randn(8 * 16 + 8, dtype=BF)
    for offset in (1, 4, 8):                                    # at other alignments, one layout
        check(layer, memory[offset:offset + 128].view(8, 16), train=offset == 1)
    check(layer, x.view(2, 4, 16))                              # 3-D after 2-D, the same rows
    check(layer, torch.randn(4, 2, 16, dtype=BF).transpose(0, 1))     # rows no view of the input
    check(layer, torch.randn(0, 16, dtype=BF))
    check(layer, torch.randn(1, 16, dtype=BF))
    check(layer, torch.randn(16, dtype=BF), train=False)
    check(layer, x)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_grad_modes_and_backward_passes(activation):
    layer, x = make(activation), torch.randn(8, 16, dtype=BF)
    check(layer, x)
    with torch.no_grad():
        check(layer, x, train=False)
    with torch.inference_mode():
        y = layer(x)
    assert y.grad_fn is None and close(y, reference(layer, x)[0])
    with torch.set_grad_enabled(False):
        assert layer(x.requires_grad_()).grad_fn is None
    x = x.detach()
    with torch.autocast("cpu", dtype=BF):
        assert close(layer(x), reference(layer, x)[0])
    leaf = x.clone().requires_grad_()
    y = layer(leaf)
    grad = torch.randn(24, 8, dtype=BF).T                       # not contiguous
    y.backward(grad)
    assert close(leaf.grad, reference(layer, x, grad)[1])
    layer.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_()
    y, grad = layer(leaf), torch.randn(8, 24, dtype=BF)
    y.backward(grad, retain_graph=True)
    y.backward(grad)
    for _ in range(2):                                          # accumulated over calls
        layer(leaf).backward(grad)
    theirs = reference(layer, x, 4 * grad.double())
    assert close(leaf.grad, theirs[1]) and close(layer.weight.grad, theirs[2]) and close(layer.bias.grad, theirs[3])
    leaf = x.clone().requires_grad_()
    d_input, = torch.autograd.grad(layer(leaf).square().sum(), leaf, create_graph=True)
    d_input.sum().backward()
    xd = x.double().requires_grad_()
    wd, bd = layer.weight.detach().double(), layer.bias.detach().double()
    d_theirs, = torch.autograd.grad(ACTIVATIONS[activation](F.linear(xd, wd, bd)).square().sum(), xd, create_graph=True)
    d_theirs.sum().backward()
    assert close(d_input, d_theirs) and close(leaf.grad, xd.grad)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_hooks_and_functional_call(activation):
    layer, x = make(activation), torch.randn(8, 16, dtype=BF)
    check(layer, x)
    handle = layer.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    assert close(layer(x), reference(layer, x, pre=lambda t: 2 * t)[0])
    handle.remove()
    seen = []
    handle = layer.register_full_backward_hook(lambda module, d_in, d_out: seen.append(d_in[0]))
    leaf = x.clone().requires_grad_()
    layer(leaf).sum().backward()
    handle.remove()
    assert torch.equal(seen[0], leaf.grad) and close(leaf.grad, reference(layer, x, torch.ones(8, 24))[1])
    params = {name: torch.randn_like(p) for name, p in layer.named_parameters()}
    y = torch.func.functional_call(layer, params, (x,))
    assert close(y, reference(layer, x, weight=params["weight"], bias=params["bias"])[0])
    check(layer, x)


def test_a_route_replays_no_input_whose_rows_are_a_copy(monkeypatch):
    """A 3-D input whose rows are no view of it (x.transpose(0, 1), an expanded one): the plan's
    product was made on the rows' copy, which a replay reading the input's address would take for
    the input's layout (a silent permutation of the rows): the route makes such a layout's
    products by the plan's path, the forward and both gradients torch's, call after call."""
    given = address_replays(monkeypatch)
    torch.manual_seed(7)
    layer = tilemm.nn.Linear(16, 24, dtype=torch.float64, kernel="numpy")
    for _ in range(3):
        x = torch.randn(4, 2, 16, dtype=torch.float64).transpose(0, 1)
        leaf = x.clone().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
        assert leaf.stride() == x.stride()
        y = layer(leaf)
        grad = torch.randn_like(y)
        layer.zero_grad()
        y.backward(grad)
        theirs = reference(layer, x, grad)
        assert torch.allclose(y.detach(), theirs[0]) and torch.allclose(leaf.grad, theirs[1])
        assert torch.allclose(layer.weight.grad, theirs[2])
    for _ in range(3):                                  # broadcast rows: a copy too
        x = torch.randn(1, 4, 16, dtype=torch.float64).expand(2, 4, 16)
        assert torch.allclose(layer(x), reference(layer, x)[0])
    assert all(shape != (2, 4, 16) for shapes in given for shape in shapes)   # no replay given the input
    x = torch.randn(2, 4, 16, dtype=torch.float64)      # rows a view: replayed as before
    for _ in range(2):
        assert torch.allclose(layer(x), reference(layer, x)[0])
    assert ((2, 4, 16), (24, 16)) in given


@pytest.mark.gpu
@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("rows", [4, 512])
def test_gpu_inputs_whose_rows_are_a_copy_and_parameters_changed(activation, rows):
    """On the GPU, the compiled programs' replays: a 3-D input whose rows are no view of it, then
    the weight changed in place and replaced, and an input at another alignment: torch's answers."""
    torch.manual_seed(0)
    layer = tilemm.nn.Linear(256, 128, device="cuda", dtype=BF, kernel="tensorcore", activation=activation)

    def check_cuda(x):
        for _ in range(3):
            assert close(layer(x), reference(layer, x)[0])
        leaf = x.detach().clone().requires_grad_()
        for _ in range(3):
            layer.zero_grad(set_to_none=True)
            y = layer(leaf)
            grad = torch.randn_like(y)
            leaf.grad = None
            y.backward(grad)
            theirs = reference(layer, x, grad)
            assert close(leaf.grad, theirs[1]) and close(layer.weight.grad, theirs[2])
    check_cuda(torch.randn(rows // 2, 2, 256, device="cuda", dtype=BF).transpose(0, 1))
    check_cuda(torch.randn(2, rows // 2, 256, device="cuda", dtype=BF))
    with torch.no_grad():
        layer.weight.mul_(-2)
    check_cuda(torch.randn(2, rows // 2, 256, device="cuda", dtype=BF))
    layer.weight.data = torch.randn(128, 256, device="cuda", dtype=BF)
    memory = torch.randn(rows * 256 + 8, device="cuda", dtype=BF)
    check_cuda(memory[1:1 + rows * 256].view(2, rows // 2, 256))
