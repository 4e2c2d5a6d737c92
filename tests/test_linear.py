"""tilemm.linear, tilemm.nn.Linear(activation=...) and swap_linears(fuse_activations=True): forward
and backward against torch, and torch.compile(fullgraph=True) of a model of fused Linears (0 graph
breaks, one tilemm::linear node a layer, opcheck). On the host the fused-epilogue program runs
under Triton's interpreter (kernel="tensorcore") and compiles with backend="aot_eager"; the tests
marked gpu run Inductor, whose graph must hold the program itself."""
import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tilemm
import tilemm.nn
from tilemm.torch import fused_ops  # noqa: F401  (registers the operators)
from tilemm.numerics.epilogue_math import ACTIVATIONS, activate_torch

from .conftest import ON_GPU
from .test_epilogue import program_taken as tma_taken     # (a spy on the TMA program's launches)

DEVICE = "cuda" if ON_GPU else "cpu"     # the program under Triton's interpreter on the host


def relative(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def mlp(dtype=torch.float64, device=DEVICE):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 24),
                               torch.nn.ReLU(), torch.nn.Linear(24, 8), torch.nn.SiLU(),
                               torch.nn.Linear(8, 12), torch.nn.GELU(approximate="tanh"),
                               torch.nn.Linear(12, 4)).to(device=device, dtype=dtype)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_against_torch_forward_and_backward(activation):
    """Leading batch dimensions, a residual that broadcasts, every gradient (float64)."""
    g = torch.Generator().manual_seed(1)
    x, w, b, r = (torch.randn(s, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
                  for s in ((2, 3, 24), (20, 24), (20,), (3, 20)))
    y = tilemm.linear(x, w, b, activation, residual=r, kernel="tensorcore")
    ref = activate_torch(F.linear(x, w, b), activation) + r
    grad = torch.randn(ref.shape, generator=g, dtype=torch.float64).to(DEVICE)
    got, want = torch.autograd.grad(y, (x, w, b, r), grad), torch.autograd.grad(ref, (x, w, b, r), grad)
    assert y.shape == ref.shape and relative(y, ref) <= 1e-12
    assert all(a.shape == e.shape and relative(a, e) <= 1e-12 for a, e in zip(got, want))
    assert got[1].is_contiguous()        # the weight's gradient in the weight's layout


@pytest.mark.parametrize("activation", ["identity", "gelu"])
def test_batched_gradients_of_each_call_of_a_key(activation):
    """is_grads_batched=True (jacobian(vectorize=True), hessian(vectorize=True)): torch's products
    for autograd's batched dY at a key's first call (EpilogueFunction), its later ones (the key's
    FusedRoute), a double backward's composite; each failed inside the launch before."""
    from .test_epilogue import batched_against_one_by_one
    g = torch.Generator().manual_seed(4)
    x, w, b = (torch.randn(s, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
               for s in ((2, 3, 8), (5, 8), (5,)))

    def f(x, w, b):
        return tilemm.linear(x, w, b, activation, kernel="tensorcore")
    for _ in range(3):
        assert batched_against_one_by_one(f, (x, w, b)) <= 1e-12
    x0 = x.detach()[0]
    hessian = torch.autograd.functional.hessian(lambda x: f(x, w.detach(), b.detach()).pow(2).sum(), x0,
                                                vectorize=True)
    want = torch.autograd.functional.hessian(
        lambda x: activate_torch(F.linear(x, w.detach(), b.detach()), activation).pow(2).sum(), x0)
    assert relative(hessian, want) <= 1e-12


@pytest.mark.parametrize("requires_grad", [False, True])
def test_jit_trace_of_the_program_s_route_holds_its_op(requires_grad):
    """torch.jit.trace of tilemm.linear and matmul_epilogue on the program's route: one tilemm::
    node each (the launch under the tracer failed inside Triton's interpreter: 'invalid operands
    of type pointer<int64> and triton.language.int32'), the pre-activation kept whether or not
    the traced call recorded (its check trace differed: 'Graphs differed across invocations');
    the trace's values and gradients on new inputs are torch's."""
    g = torch.Generator().manual_seed(7)
    x, w, b, r = (torch.randn(s, generator=g, dtype=torch.float64).to(DEVICE) for s in ((2, 3, 8), (6, 8), (6,), (6,)))
    x.requires_grad_(requires_grad)
    traced = torch.jit.trace(lambda x: tilemm.linear(x, w, b, "gelu", residual=r, kernel="tensorcore"), (x,))
    epilogue = torch.jit.trace(lambda a: tilemm.matmul_epilogue(a, w.T, bias=b, activation="silu", alpha=2.0,
                                                                kernel="tensorcore"), (x[0],))
    assert [n.kind() for n in traced.graph.nodes() if "tilemm" in n.kind()] == ["tilemm::linear"]
    x2 = torch.randn(x.shape, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
    y, want = traced(x2), F.gelu(F.linear(x2, w, b)) + r
    assert relative(y, want) <= 1e-12
    assert relative(torch.autograd.grad(y.sum(), x2)[0], torch.autograd.grad(want.sum(), x2)[0]) <= 1e-12
    assert relative(epilogue(x2[0]), F.silu(2.0 * x2[0] @ w.T + b)) <= 1e-12


def test_linear_bfloat16_against_float32_autograd():
    g = torch.Generator().manual_seed(2)
    x, w, b = (torch.randn(s, generator=g).bfloat16().to(DEVICE).requires_grad_() for s in ((40, 32), (24, 32), (24,)))
    y = tilemm.linear(x, w, b, "silu", kernel="tensorcore")
    x32, w32, b32 = (t.detach().float().requires_grad_() for t in (x, w, b))
    ref = F.silu(F.linear(x32, w32, b32))
    grad = torch.randn(ref.shape, generator=g).to(DEVICE)
    got = torch.autograd.grad(y, (x, w, b), grad.bfloat16())
    want = torch.autograd.grad(ref, (x32, w32, b32), grad)
    assert y.dtype == torch.bfloat16 and relative(y, ref) <= 1e-2
    assert all(relative(a, e) <= 2e-2 for a, e in zip(got, want))


def test_linear_under_autocast_multiplies_in_autocast_s_dtype():
    x, w, b = (torch.randn(s, device=DEVICE, requires_grad=True) for s in ((6, 32), (8, 32), (8,)))
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        y = tilemm.linear(x, w, b, "gelu", kernel="tensorcore")
        ref = F.gelu(F.linear(x, w, b))
    assert y.dtype == ref.dtype == torch.bfloat16 and relative(y, ref) <= 1e-2
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and relative(w.grad, torch.autograd.grad(ref.float().sum(), w)[0]) <= 2e-2


def test_linear_under_autocast_leaves_float64_alone():
    """Autocast casts floating point but float64 (torch's rule): float64 operands multiply in
    float64, as F.linear's do."""
    x, w, b = (torch.randn(s, device=DEVICE, dtype=torch.float64) for s in ((5, 24), (7, 24), (7,)))
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        y = tilemm.linear(x, w, b, "relu")
        ref = F.relu(F.linear(x, w, b))
    assert y.dtype == ref.dtype == torch.float64 and relative(y, ref) <= 1e-12


def test_linear_without_grad_and_1d_input():
    x, w = torch.randn(16, dtype=torch.float64, device=DEVICE), torch.randn(5, 16, dtype=torch.float64, device=DEVICE)
    y = tilemm.linear(x, w, activation="relu", kernel="tensorcore")
    assert y.shape == (5,) and relative(y, F.relu(F.linear(x, w))) <= 1e-12


@pytest.mark.skipif(ON_GPU, reason="the host's route")
def test_linear_by_the_library_is_torch_s_own():
    """kernel None on the host: F.linear then the activation, bit for bit, torch's graph."""
    x, w, b = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8), torch.randn(6)
    y = tilemm.linear(x, w, b, "gelu")
    assert torch.equal(y, F.gelu(F.linear(x, w, b))) and y.grad_fn.name() == "GeluBackward0"


def test_linear_of_numpy_arrays():
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((2, 5, 8)), rng.standard_normal((3, 8)), rng.standard_normal(3)
    y = tilemm.linear(x, w, b, "gelu_tanh", residual=np.ones(3))
    ref = F.gelu(F.linear(*map(torch.from_numpy, (x, w, b))), approximate="tanh").numpy() + 1
    assert isinstance(y, np.ndarray) and y.shape == (2, 5, 3) and np.allclose(y, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("residual", [np.ones((4, 2, 3)), np.ones((2, 3, 3)), np.ones((5, 1, 1, 3))])
def test_a_numpy_residual_that_would_widen_the_result_is_refused_as_a_tensor_is(residual):
    """The result keeps x's leading shape: a residual that broadcasts only to a larger one is a
    ValueError naming both shapes, for NumPy arrays as for torch tensors (NumPy's broadcasting
    returned a (4, 2, 3) or (5, 2, 2, 3) result, or NumPy's own message)."""
    x, w = np.ones((2, 8)), np.ones((3, 8))
    for operands in ((x, w, residual), tuple(map(torch.from_numpy, (x, w, residual)))):
        with pytest.raises(ValueError, match=r"linear: residual of shape .* does not broadcast to the result's "
                                             r"shape \(2, 3\)"):
            tilemm.linear(operands[0], operands[1], residual=operands[2])


@pytest.mark.parametrize("call,error,words", [
    (lambda x, w: tilemm.linear(x, w, activation="swish"), ValueError, "activation='swish'"),
    (lambda x, w: tilemm.linear(x, w.T), ValueError, "in_features"),
    (lambda x, w: tilemm.linear(x, w, torch.ones(2)), ValueError, "bias has shape (2,)"),
    (lambda x, w: tilemm.linear(x, w, residual=torch.ones(2, 2)), ValueError, "does not broadcast"),
    (lambda x, w: tilemm.linear(x, w.half()), TypeError, "one dtype"),
    (lambda x, w: tilemm.linear(x, w.numpy()), TypeError, "every operand is a NumPy array"),
])
def test_linear_refuses_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call(torch.ones(3, 8), torch.ones(5, 8))
    assert words in str(info.value)


def test_nn_linear_takes_an_activation():
    layer = tilemm.nn.Linear(8, 6, activation="relu", kernel="tensorcore", dtype=torch.float64, device=DEVICE)
    x = torch.randn(3, 8, dtype=torch.float64, device=DEVICE)
    assert relative(layer(x), F.relu(F.linear(x, layer.weight, layer.bias))) <= 1e-12
    assert "activation='relu'" in repr(layer)
    with pytest.raises(TypeError, match="out_dtype"):
        tilemm.nn.Linear(8, 6, activation="relu", out_dtype="float64")
    with pytest.raises(ValueError, match="activation='tanh'"):
        tilemm.nn.Linear(8, 6, activation="tanh")


def test_swap_linears_fuses_activations_and_restores_them():
    model, ref = mlp(), mlp()
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    assert [type(m).__name__ for m in model] == ["Linear", "Identity"] * 4 + ["Linear"]
    assert [model[i].activation for i in (0, 2, 4, 6, 8)] == ["gelu", "relu", "silu", "gelu_tanh", "identity"]
    x = torch.randn(5, 16, dtype=torch.float64, device=DEVICE)
    y, y_ref = model(x), ref(x)
    assert relative(y, y_ref) <= 1e-12
    y.sum().backward()
    y_ref.sum().backward()
    assert all(relative(p.grad, q.grad) <= 1e-12 for p, q in zip(model.parameters(), ref.parameters()))
    tilemm.nn.restore_linears(model)
    assert [type(m) for m in model] == [type(m) for m in ref] and model[1].approximate == "none"
    assert torch.equal(model(x), ref(x))


class LlamaMLP(torch.nn.Module):        # transformers' form: down(act(gate(x)) * up(x))
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(8, 16, bias=False), torch.nn.Linear(8, 16, bias=False)
        self.down_proj, self.act_fn = torch.nn.Linear(16, 8, bias=False), torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_a_gated_mlp_of_transformers_fuses_its_gate():
    model = LlamaMLP().to(DEVICE, torch.float64)
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    assert model.gate_proj.activation == "silu" and isinstance(model.act_fn, torch.nn.Identity)
    x = torch.randn(3, 8, dtype=torch.float64, device=DEVICE)
    assert relative(model(x), ref(x)) <= 1e-12


def test_a_compiled_gated_mlp_leaves_the_gate_s_activation_to_the_compiler():
    """Under torch.compile the gate's product is a tilemm::linear node with no activation and
    the SiLU torch's own (Inductor fuses it into the product with up_proj); values and
    gradients as eager's, and as torch's module's."""
    torch.manual_seed(0)
    model = LlamaMLP().to(DEVICE, torch.float64)
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    x = torch.randn(5, 8, dtype=torch.float64, device=DEVICE)
    explained = torch._dynamo.explain(model)(x)
    nodes = [n for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
    linears = [n for n in nodes if n.target in (torch.ops.tilemm.linear, torch.ops.tilemm.linear.default)]
    assert explained.graph_break_count == 0 and len(linears) == 3
    assert {n.args[4] for n in linears} == {"identity"}
    assert any(n.target is F.silu for n in nodes)
    y = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    y.sum().backward()
    y_ref = ref(x)
    y_ref.sum().backward()
    assert relative(y, y_ref) <= 1e-12
    assert all(relative(p.grad, q.grad) <= 1e-12 for p, q in zip(model.parameters(), ref.parameters()))
    tilemm.nn.restore_linears(model)
    assert type(model.act_fn) is torch.nn.SiLU


class Branches(torch.nn.Sequential):
    """A Sequential subclass whose forward is its own: the sum of its modules' outputs, no chain."""

    def forward(self, x):
        return sum(module(x) for module in self)


class SharedLayer(torch.nn.Module):
    """One Linear held twice: called alone, and first in a Sequential before a ReLU."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.seq = torch.nn.Sequential(self.fc, torch.nn.ReLU())

    def forward(self, x):
        return self.fc(x) + self.seq(x)


def called_twice_in_the_chain():
    fc = torch.nn.Linear(8, 8)
    return torch.nn.Sequential(fc, torch.nn.GELU(), fc)


@pytest.mark.parametrize("make", [SharedLayer, lambda: Branches(torch.nn.Linear(8, 8), torch.nn.ReLU()),
                                  called_twice_in_the_chain], ids=["held-twice", "sequential-subclass", "called-twice"])
def test_fuse_activations_leaves_a_linear_whose_output_is_read_without_the_activation(make):
    """A Linear the model holds in two places, or in a Sequential subclass that is no chain, keeps
    its activation module: fused, its other calls would return activation(x @ W.T + b)."""
    torch.manual_seed(0)
    model = make().to(DEVICE, torch.float64)
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    assert not [m for m in model.modules() if isinstance(m, torch.nn.Identity)]
    x = torch.randn(3, 8, dtype=torch.float64, device=DEVICE)
    assert relative(model(x), ref(x)) <= 1e-12


def test_compiled_model_of_fused_linears():
    """fullgraph=True, no graph break, a tilemm::linear node a layer, and compiled = eager
    (values and gradients)."""
    model = mlp()
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    x = torch.randn(6, 16, dtype=torch.float64, device=DEVICE)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0
    nodes = [n for g in explained.graphs for n in g.graph.nodes
             if n.op == "call_function" and n.target in (torch.ops.tilemm.linear, torch.ops.tilemm.linear.default)]
    assert len(nodes) == 5
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with warnings.catch_warnings(record=True) as seen:     # (functools.cache on the path: Dynamo warned)
        warnings.simplefilter("always")
        y = compiled(x)
        y.sum().backward()
    assert not [w for w in seen if "Dynamo" in str(w.message)], [str(w.message) for w in seen]
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_eager = model(x)
    y_eager.sum().backward()
    assert relative(y, y_eager) <= 1e-12
    assert all(relative(a, p.grad) <= 1e-12 for a, p in zip(grads, model.parameters()))


@pytest.mark.skipif(ON_GPU, reason="the host's route")
def test_the_operator_decomposes_where_the_route_is_the_library():
    """A triton_op's body is what AOTAutograd traces: the library's route reaches the backend
    as aten.addmm and the activation, not as an opaque node."""
    from torch._dynamo.backends.common import aot_autograd
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm
    x, w, b = torch.randn(6, 8), torch.randn(4, 8), torch.randn(4)
    y = torch.compile(lambda x: tilemm.linear(x, w, b, "gelu"), fullgraph=True,
                      backend=aot_autograd(fw_compiler=keep))(x)
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert "aten.addmm.default" in targets and "aten.gelu.default" in targets
    assert not any("tilemm" in t for t in targets)
    assert torch.allclose(y, F.gelu(F.linear(x, w, b)))


@pytest.mark.parametrize("activation,kernel", [("gelu", "tensorcore"), ("relu", None)])
def test_opcheck_linear(activation, kernel):
    x, w, b, r = (torch.randn(s, dtype=torch.float64, device=DEVICE, requires_grad=True)
                  for s in ((6, 12), (10, 12), (10,), (6, 10)))
    torch.library.opcheck(torch.ops.tilemm.linear, (x, w, b, r, activation, True, kernel, ""))


# ---------------------------------------------------------------- on the GPU (TILEMM_TEST_GPU=1)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gpu_linear_bfloat16_against_float64(activation):
    g = torch.Generator(device="cuda").manual_seed(4)
    x, w, b = (torch.randn(s, generator=g, device="cuda").bfloat16().requires_grad_()
               for s in ((300, 264), (392, 264), (392,)))
    r = torch.randn(300, 392, generator=g, device="cuda").bfloat16().requires_grad_()
    y = tilemm.linear(x, w, b, activation, residual=r, kernel="tensorcore")
    x64, w64, b64, r64 = (t.detach().double().requires_grad_() for t in (x, w, b, r))
    ref = activate_torch(F.linear(x64, w64, b64), activation) + r64
    grad = torch.randn(ref.shape, generator=g, device="cuda")
    got = torch.autograd.grad(y, (x, w, b, r), grad.bfloat16())
    want = torch.autograd.grad(ref, (x64, w64, b64, r64), grad.double())
    assert relative(y, ref) <= 1e-2 and all(relative(a, e) <= 2e-2 for a, e in zip(got, want))


@pytest.mark.gpu
def test_gpu_inductor_graph_holds_the_program():
    from torch._inductor.utils import run_and_get_code
    model = mlp(torch.bfloat16, "cuda")
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    x = torch.randn(64, 16, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, fullgraph=True)
    y, code = run_and_get_code(compiled, x)
    assert "matmul_epilogue_kernel" in "\n".join(code)
    assert relative(y, ref(x)) <= 2e-2


@pytest.mark.skipif(ON_GPU, reason="the interpreter's walk of the TMA program (on the GPU: the test below)")
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_linear_by_the_tma_program_forward_and_backward_against_float64(activation, monkeypatch):
    """tma=True under Triton's interpreter: the forward (B = weight^T read K-major) and both
    backward products (dX = dZ @ W; dW = dZ^T @ X, dZ^T read through a descriptor of dZ) by the
    persistent TMA program, no copy; values and every gradient against float64 autograd."""
    taken = tma_taken(monkeypatch)
    g = torch.Generator().manual_seed(7)
    x, w, b = (torch.randn(s, generator=g).bfloat16().requires_grad_() for s in ((40, 48), (64, 48), (64,)))
    y = tilemm.linear(x, w, b, activation, kernel="tensorcore", tma=True, block_m=16, block_n=32, block_k=16)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = activate_torch(F.linear(x64, w64, b64), activation)
    grad = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(y, (x, w, b), grad.bfloat16())
    want = torch.autograd.grad(ref, (x64, w64, b64), grad)
    assert taken == [(False, True), (False, False), (True, False)]
    assert relative(y, ref) <= 1e-2 and all(relative(a, e) <= 2e-2 for a, e in zip(got, want))
    assert got[1].is_contiguous()


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_gpu_linear_by_the_tma_program_forward_and_backward(activation, monkeypatch):
    """An MLP-sized Linear (1000 x 1536 x 512: past 2^28 multiply-adds) takes the persistent TMA
    program by default, forward (B = weight^T read K-major) and both backward products (dX: dZ @ W,
    dW^T: dZ^T @ X with dZ read M-major), none through a copy; each within bfloat16's rounding."""
    taken = tma_taken(monkeypatch)
    g = torch.Generator(device="cuda").manual_seed(5)
    x, w, b = (torch.randn(s, generator=g, device="cuda").bfloat16().requires_grad_()
               for s in ((1000, 512), (1536, 512), (1536,)))
    y = tilemm.linear(x, w, b, activation, kernel="tensorcore")
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = activate_torch(F.linear(x64, w64, b64), activation)
    grad = torch.randn(ref.shape, generator=g, device="cuda")
    got = torch.autograd.grad(y, (x, w, b), grad.bfloat16())
    want = torch.autograd.grad(ref, (x64, w64, b64), grad.double())
    assert taken == [(False, True), (False, False), (True, False)]
    assert relative(y, ref) <= 1e-2 and all(relative(a, e) <= 2e-2 for a, e in zip(got, want))
    assert got[1].is_contiguous()


@pytest.mark.gpu
def test_gpu_inductor_graph_holds_the_tma_program():
    """Under Inductor the TMA program runs inside the compiled graph, its descriptors made in the
    program; forward and backward right."""
    from torch._inductor.utils import run_and_get_code
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1536), torch.nn.GELU(), torch.nn.Linear(1536, 512)).cuda().bfloat16()
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    x = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    y, code = run_and_get_code(compiled, x)
    assert "matmul_epilogue_persistent" in "\n".join(code)
    assert relative(y, ref(x)) <= 2e-2
    y.sum().backward()
    want = torch.autograd.grad(ref(x).float().sum(), ref[0].weight)[0]
    assert relative(model[0].weight.grad, want) <= 2e-2
