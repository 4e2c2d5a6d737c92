"""tilemm under torch.compile with dynamic shapes and arguments (dynamic=True, mark_dynamic, an
int argument that changes), and products with no input or output feature, eager and compiled.
On the CPU with backend="aot_eager"; tilemm's Triton programs under the interpreter."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo.testing

import tilemm
import tilemm.nn
from tilemm import products_api

from .conftest import ON_GPU

TILES = dict(block_n=32, block_k=16)
WHERE = "cuda" if ON_GPU else "cpu"     # kernel="tensorcore": a GPU's tensors, or the interpreter's host ones
SOURCE = Path(__file__).resolve().parent.parent / "src"


def counted(fn, **options):
    """fn compiled whole by aot_eager, and the counter of its compiled frames."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    return torch.compile(fn, fullgraph=True, backend=counter, **options), counter


@pytest.mark.parametrize("call", ["matmul", "linear"])
def test_tile_parameters_passed_as_arguments_compile_under_dynamic_shapes(call):
    """dynamic=True makes an int argument symbolic (Dynamo shows it as an int): the op's parameter
    string sorted (name, SymInt) pairs and formatted the SymInt, a graph break in tilemm's code
    that fullgraph=True refused. Each value is its own graph, with the value's tiles."""
    where = WHERE if call == "linear" else "cpu"
    x, w = torch.randn(8, 7, device=where), torch.randn(13, 7, device=where)
    if call == "matmul":
        def f(x, w, block_m):
            return tilemm.matmul(x, w.T, kernel="cpu-tiled", block_m=block_m)
    else:
        def f(x, w, block_m):
            return tilemm.linear(x, w, None, "relu", kernel="tensorcore", block_m=block_m, **TILES)
    compiled, counter = counted(f, dynamic=True)
    want = f(x, w, 16)
    for block_m in (16, 32, 16):
        torch.testing.assert_close(compiled(x, w, block_m), want, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 2
    encoded = [n.args for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"
               and "tilemm" in str(n.target)]
    assert any("block_m=32" in str(args) for args in encoded) and any("block_m=16" in str(args) for args in encoded)


def test_a_row_bias_of_a_size_proved_equal_under_dynamic_shapes():
    """A bias (1, N) whose N is b's columns by another symbol (b a strided view): the bias check's
    `shape in (...)` was False under Dynamo where `==` guards and is True, and refused the bias."""
    def f(a, b, bias):
        return tilemm.matmul_epilogue(a[..., ::2], b[..., ::2], bias=bias, activation="silu")
    a, b, bias = torch.randn(3, 2), torch.randn(1, 4), torch.randn(1, 2)
    compiled, _ = counted(f, dynamic=True)
    want = torch.nn.functional.silu(a[..., ::2] @ b[..., ::2] + bias)
    torch.testing.assert_close(compiled(a, b, bias), want)


def test_mark_dynamic_rows_of_linear_stay_dynamic():
    """The fused op's body asked for its route with int(M): a guard that specialized the rows
    marked dynamic (ConstraintViolationError). On the host the route does not depend on the shape."""
    w, bias = torch.randn(3, 4), torch.randn(3)
    compiled, counter = counted(lambda x: tilemm.linear(x, w, bias, "gelu"))
    for rows in (3, 7, 12):
        x = torch.randn(rows, 4, requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        y.sum().backward()
        torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w.T + bias))
    assert counter.frame_count == 1


def test_first_compiled_linear_compiles_once(monkeypatch):
    """The first traced tilemm.linear of a process imported its module through a dict Dynamo
    guards on: the next call failed the guard and compiled again."""
    monkeypatch.setattr(products_api, "IMPORTED", {})
    w = torch.randn(3, 4)
    compiled, counter = counted(lambda x: tilemm.linear(x, w, None, "relu"))
    for _ in range(2):
        compiled(torch.randn(5, 4))
    assert counter.frame_count == 1


ZERO_FEATURES = {     # (call, torch's), on x (2, 5, 0) or (2, 5, 4)
    "nn.Linear in=0": (lambda: tilemm.nn.Linear(0, 3, kernel="cpu-tiled"), 0),
    "nn.Linear in=0 fused": (lambda: tilemm.nn.Linear(0, 3, activation="relu", kernel="tensorcore", **TILES), 0),
    "nn.Linear out=0": (lambda: tilemm.nn.Linear(4, 0), 4),
}


@pytest.mark.parametrize("name", ZERO_FEATURES)
@pytest.mark.parametrize("compiled", [False, True])
def test_a_linear_of_no_input_or_output_features_is_torchs(name, compiled):
    """reshape(-1, 0) is refused for a tensor with no element: a Linear of 0 in_features (its
    output the bias) raised, eager and compiled; F.linear takes it."""
    make, features = ZERO_FEATURES[name]
    layer = make()
    where = WHERE if layer.kernel == "tensorcore" else "cpu"
    layer = layer.to(where)
    with torch.no_grad():
        layer.bias.copy_(torch.randn(layer.bias.shape))
    x = torch.randn(2, 5, features, requires_grad=True, device=where)
    y = (counted(layer)[0] if compiled else layer)(x)
    xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, layer.weight, layer.bias))
    want = torch.nn.functional.linear(xr, wr, br)
    want = torch.relu(want) if layer.activation == "relu" else want
    torch.testing.assert_close(y, want)
    y.square().sum().backward()
    want.square().sum().backward()
    for ours, torchs in ((x, xr), (layer.weight, wr), (layer.bias, br)):
        torch.testing.assert_close(ours.grad, torchs.grad)


@pytest.mark.parametrize("kernel", [None, "tensorcore"])
def test_linear_of_no_input_features_and_a_residual_of_no_output_features(kernel):
    tiles = TILES if kernel else {}
    where = WHERE if kernel else "cpu"
    x, w, bias = (torch.randn(shape, device=where) for shape in ((2, 5, 0), (3, 0), (3,)))
    torch.testing.assert_close(tilemm.linear(x, w, bias, "silu", kernel=kernel, **tiles),
                               torch.nn.functional.silu(bias).expand(2, 5, 3))
    y = tilemm.linear(torch.randn(2, 5, 4, device=where), torch.randn(0, 4, device=where), None, "relu",
                      residual=torch.randn(2, 5, 0, device=where), kernel=kernel, **tiles)
    assert y.shape == (2, 5, 0)


def test_jit_script_of_a_linear_of_no_input_features_and_of_a_vector():
    layer = tilemm.nn.Linear(0, 3, kernel="cpu-tiled")
    scripted = torch.jit.script(layer)
    for x in (torch.randn(2, 5, 0), torch.randn(0)):
        torch.testing.assert_close(scripted(x), torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_exported_fused_products_load_in_a_fresh_process_after_import_tilemm_torch_ops(tmp_path):
    """tilemm.torch_ops registered tilemm::matmul and tilemm::grouped_matmul, not the fused ops:
    a saved program holding tilemm::linear or tilemm::matmul_epilogue failed to load."""
    w, bias = torch.randn(3, 4), torch.randn(3)

    class Layer(torch.nn.Module):
        def forward(self, x):
            y = tilemm.linear(x, w, bias, "silu")
            return tilemm.matmul_epilogue(y, w, bias=torch.ones(4), alpha=2.0, activation="relu")
    x = torch.randn(5, 4)
    exported = torch.export.export(Layer(), (x,))
    targets = {str(n.target) for n in exported.graph.nodes}
    assert {"tilemm.linear.default", "tilemm.matmul_epilogue.default"} <= targets, targets
    torch.export.save(exported, tmp_path / "program.pt2")
    torch.save((x, Layer()(x)), tmp_path / "io.pt")
    program = (f"import torch, tilemm.torch_ops\nx, want = torch.load({str(tmp_path / 'io.pt')!r})\n"
               f"got = torch.export.load({str(tmp_path / 'program.pt2')!r}).module()(x)\n"
               "torch.testing.assert_close(got, want)\nprint('loaded')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("loaded"), done.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["cublas", None])
def test_gpu_mark_dynamic_rows_of_linear_on_torchs_route_stay_dynamic(kernel):
    """kernel="cublas", and tilemm's default where a size is symbolic: the route does not read the
    rows, so marked rows stay symbolic (Inductor)."""
    torch._dynamo.reset()
    w, bias = torch.randn(64, 32, device="cuda"), torch.randn(64, device="cuda")
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda x: tilemm.linear(x, w, bias, "gelu", kernel=kernel), fullgraph=True,
                             backend=counter)
    for rows in (48, 80, 200):
        x = torch.randn(rows, 32, device="cuda", requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        y.sum().backward()
        torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w.T + bias), rtol=1e-3, atol=1e-3)
    assert counter.frame_count == 1


def test_jit_script_refuses_a_forward_calling_tilemm_matmul_and_takes_the_op():
    """What the guide says: TorchScript refuses tilemm.matmul's **params with its own error, and
    scripts the op called with the parameters' string."""
    class Calls(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3))

        def forward(self, x):
            return tilemm.matmul(x, self.w)

    class CallsTheOp(Calls):
        def forward(self, x):
            return torch.ops.tilemm.matmul(x, self.w, "cpu-tiled", "block_m=16", None)
    with pytest.raises(torch.jit.frontend.NotSupportedError, match="variable number of arguments"):
        torch.jit.script(Calls())
    scripted, x = torch.jit.script(CallsTheOp()), torch.randn(5, 4)
    torch.testing.assert_close(scripted(x), x @ scripted.w)
