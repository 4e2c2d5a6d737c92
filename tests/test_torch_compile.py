"""tilemm under torch.compile: the custom ops pass torch.library.opcheck, a compiled function keeps
each product as one node with no graph break (fullgraph=True, torch._dynamo.explain), the kernel
and its parameters travel in the op's arguments, and compiled results and gradients equal eager
ones. On the CPU with backend="aot_eager" (AOTAutograd's graphs, run eagerly): inductor's C++
compile takes tens of seconds here, and the GPU test runs inductor."""
import contextlib
import copy
import sys
import threading
import types
import warnings

import numpy as np
import pytest
import torch

import tilemm
from tilemm import api
from tilemm.contract import numpy_keywords
from tilemm.torch import ops as torch_ops

from .conftest import ON_GPU
from .test_nn import tiny_model, train
from .test_torch_autograd import FP8, FP8_DEVICE, float8

OPCHECK_CASES = [((8, 16), (16, 4), "numpy", "", None), ((16,), (16, 4), "cpu-tiled", "block_m=16", None),
                 ((2, 3, 8), (8, 5), "cpu-naive", "", "float64"), ((2, 1, 3, 8), (4, 8, 5), None, "", None)]


@pytest.mark.parametrize("sa,sb,kernel,params,out_dtype", OPCHECK_CASES)
def test_opcheck_matmul(sa, sb, kernel, params, out_dtype):
    a, b = torch.randn(sa, requires_grad=True), torch.randn(sb)
    torch.library.opcheck(torch.ops.tilemm.matmul, (a, b, kernel, params, out_dtype))


def test_opcheck_matmul_of_integers():
    a, b = torch.randint(-9, 9, (5, 7), dtype=torch.int32), torch.randint(-9, 9, (7, 3), dtype=torch.int32)
    torch.library.opcheck(torch.ops.tilemm.matmul, (a, b, None, "", None))


def test_opcheck_scaled_matmul():
    """opcheck's schema test compares each inner op's float8 inputs before and after with
    torch.allclose, which torch does not implement for float8 on the CPU: that one is replaced
    by a bitwise check that the op leaves its inputs as they were."""
    a, b, scale = float8(16, 32, 1), float8(32, 16, 2), torch.tensor([0.5], device=FP8_DEVICE)
    args = (a, b, scale, scale, "float32", False, torch_ops.encode_params(FP8))
    before = [x.view(torch.uint8).clone() for x in (a, b)]
    torch.library.opcheck(torch.ops.tilemm.scaled_matmul, args,
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    torch.ops.tilemm.scaled_matmul(*args)
    assert all(torch.equal(x.view(torch.uint8), y) for x, y in zip((a, b), before))


def test_parameters_round_trip_through_the_op_s_string():
    params = {"block_m": 64, "tma": True, "precision": "tf32", "block_k": None}
    assert torch_ops.decode_params(torch_ops.encode_params(params)) == params
    assert torch_ops.encode_params({}) == "" and torch_ops.decode_params("") == {}


def product_nodes(explained, name="matmul"):
    op = getattr(torch.ops.tilemm, name)
    return [n for g in explained.graphs for n in g.graph.nodes
            if n.op == "call_function" and n.target in (op, op.default)]


def test_one_node_a_product_and_no_graph_break(monkeypatch):
    """Compiled before any eager call (tilemm's check of torch.compile is bound on first use)."""
    monkeypatch.setattr(api, "compiling", api.torch_compiling)

    def f(x, w1, w2):
        h = torch.relu(tilemm.matmul(x, w1, kernel="cpu-tiled", block_m=16))
        return tilemm.matmul(h, w2, out_dtype=torch.float64).sum()
    args = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 2)
    explained = torch._dynamo.explain(f)(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    nodes = product_nodes(explained)
    assert len(nodes) == 2
    assert nodes[0].args[2:] == ("cpu-tiled", "block_m=16", None) and nodes[1].args[2:] == (None, "", "float64")


def test_compiled_results_and_gradients_equal_eager_ones():
    def f(x, w):
        return torch.tanh(tilemm.matmul(x, w.T, kernel="cpu-tiled")).square().sum()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for rows in (6, 9):                                   # a second shape: recompiled or dynamic, no break
        x, w = torch.randn(rows, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
        grads = []
        for fn in (f, compiled):
            xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
            value = fn(xr, wr)
            value.backward()
            grads.append((value.detach(), xr.grad, wr.grad))
        for eager, traced in zip(*grads):
            assert torch.allclose(eager, traced, rtol=1e-12)


@pytest.mark.parametrize("sa,sb", [((1, 3, 5), (2, 5, 4)), ((2, 3, 5), (1, 5, 4))])
def test_dynamic_shapes_gradients_of_a_stack_times_a_stack_of_one(sa, sb):
    """With dynamic=True the stack of one is a constant and the other a symbol: comparing the two
    SymBool-wise failed the backward's trace ("BooleanAtom not allowed in this context")."""
    torch._dynamo.reset()
    a, b = torch.randn(sa, dtype=torch.float64), torch.randn(sb, dtype=torch.float64)
    compiled = torch.compile(lambda x, y: tilemm.matmul(x.exp(), y, kernel="cpu-tiled") * 2, fullgraph=True,
                             backend="aot_eager", dynamic=True)
    grads = []
    for fn in (compiled, lambda x, y: torch.matmul(x.exp(), y) * 2):
        ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
        grads.append(torch.autograd.grad(fn(ar, br).sum(), (ar, br)))
    for ours, torchs in zip(*grads):
        assert torch.allclose(ours, torchs, rtol=1e-12)


def test_dynamic_float_alpha_and_beta_of_matmul_epilogue_compile_whole():
    """dynamic=True makes Python floats symbolic: alpha and beta's check met them with hasattr, a
    graph break (fullgraph=True refused); each call's values, not the first's, are used."""
    torch._dynamo.reset()

    def f(a, b, c, alpha, beta):
        return tilemm.matmul_epilogue(a, b, alpha=alpha, beta=beta, c=c) * 3
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    a, b, c = (torch.randn(s, dtype=torch.float64) for s in ((3, 5), (5, 4), (3, 4)))
    for alpha, beta in ((2.0, 0.5), (-1.0, 0.25)):
        assert torch.allclose(compiled(a, b, c, alpha, beta), (alpha * (a @ b) + beta * c) * 3, rtol=1e-12)


def test_autocast_around_compiled_calls_casts_as_torch_does():
    """The custom ops have no autocast rule: under CPU bf16 autocast a compiled tilemm.matmul,
    tilemm.nn.Linear and matmul_epilogue gave float32 where eager calls and torch's give bfloat16."""
    torch._dynamo.reset()
    x, w, bias = torch.randn(8, 16), torch.randn(4, 16), torch.randn(4)
    layer = tilemm.nn.Linear(16, 4)
    calls = {"matmul": (lambda x: tilemm.matmul(x, w.T) + 1, lambda x: x @ w.T + 1),
             "Linear": (layer, lambda x: torch.nn.functional.linear(x, layer.weight, layer.bias)),
             "matmul_epilogue": (lambda x: tilemm.matmul_epilogue(x, w.T, bias=bias, activation="relu"),
                                 lambda x: torch.relu(torch.addmm(bias, x, w.T)))}
    for name, (ours, torchs) in calls.items():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, eager, want = torch.compile(ours, fullgraph=True, backend="aot_eager")(x), ours(x), torchs(x)
        assert got.dtype == eager.dtype == want.dtype == torch.bfloat16, (name, got.dtype, eager.dtype, want.dtype)
        assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2), name


# torch.func's transforms of a function that calls tilemm, inside torch.compile: (transform, ...)
TRANSFORMS = {
    "jvp": lambda f, x, t: torch.func.jvp(f, (x,), (t,))[1],
    "jacfwd": lambda f, x, t: torch.func.jacfwd(f)(x[:2]),
    "grad": lambda f, x, t: torch.func.grad(lambda y: (f(y) * f(t)).sum())(x),
    "vmap": lambda f, x, t: torch.func.vmap(f)(x.reshape(2, -1, x.shape[-1])),
}
W, BIAS = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
CALLS = {        # tilemm's call, torch's
    "matmul": (lambda x: tilemm.matmul(x, W.T), lambda x: x @ W.T),
    "linear": (lambda x: tilemm.linear(x, W, BIAS, "gelu"), lambda x: torch.nn.functional.gelu(x @ W.T + BIAS)),
    "matmul_epilogue": (lambda x: tilemm.matmul_epilogue(x, W.T, bias=BIAS, activation="silu"),
                        lambda x: torch.nn.functional.silu(x @ W.T + BIAS)),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_torch_func_transforms_inside_compile_give_torchs_answers(call, transform):
    """The custom ops have no forward-mode rule (torch gave a zero tangent, silently) and their
    fakes failed under grad: inside a transform a compiled call runs outside the graph, eagerly."""
    torch._dynamo.reset()
    ours, theirs = CALLS[call]
    x, t = torch.randn(6, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    got = torch.compile(lambda x, t: TRANSFORMS[transform](ours, x, t), backend="aot_eager")(x, t)
    assert torch.allclose(got, TRANSFORMS[transform](theirs, x, t), rtol=1e-10, atol=1e-12)


def test_out_under_compile():
    def f(x, w, out):
        return tilemm.matmul(x, w, out=out)
    x, w, out = torch.randn(3, 4), torch.randn(4, 2), torch.empty(3, 2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert torch.compile(f, fullgraph=True, backend="aot_eager")(x, w, out) is out
    assert not [w for w in seen if "Dynamo" in str(w.message)], [str(w.message) for w in seen]
    assert torch.allclose(out, x @ w, rtol=1e-5, atol=1e-6)     # (float32: another order of sums near zero)


def test_scaled_matmul_is_one_node():
    def f(a, b):
        return tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32", **FP8).sum()
    a, b = float8(16, 32, 1), float8(32, 16, 2)
    explained = torch._dynamo.explain(f)(a, b)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, "scaled_matmul")) == 1
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(a, b), f(a, b))


def test_tiny_transformer_with_tilemm_linears_compiles_whole_and_trains_as_eager():
    model = tiny_model()
    tilemm.nn.swap_linears(model, kernel="cpu-tiled")
    tokens = torch.randint(0, 50, (2, 9))
    explained = torch._dynamo.explain(model)(tokens)
    assert explained.graph_break_count == 0 and len(product_nodes(explained)) == 2 * 6 + 1
    eager = train(model, 3)
    model = tiny_model()
    tilemm.nn.swap_linears(model, kernel="cpu-tiled")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert train(model, 3, step_fn=compiled) == pytest.approx(eager, rel=1e-10)


@pytest.mark.skipif(ON_GPU, reason="the host's tensors: the interpreter's route (llama_compiled.py runs the programs)")
@pytest.mark.parametrize("dtype, kernel, op", [(torch.bfloat16, "tensorcore", "linear"),
                                               (torch.bfloat16, "tensorcore-tutorial", "linear"),
                                               (torch.float32, "tensorcore-f32", "matmul"),
                                               (torch.bfloat16, None, "linear"),
                                               (torch.float32, None, "matmul")])
def test_swapped_linears_of_a_triton_rung_compile_to_the_program_s_op(dtype, kernel, op):
    """Without fuse_activations, a Linear of a Triton rung's 16-bit product, or of tilemm's default,
    is a tilemm::linear node in the compiled graph (the fused-epilogue program, its bias in the
    epilogue, or torch's operators where the default's table takes the library), as with
    fuse_activations; float32 keeps tilemm::matmul. The compiled model trains as the eager one (the
    interpreter's traced calls sum by torch)."""
    torch._dynamo.reset()
    model = tiny_model(dtype)
    tilemm.nn.swap_linears(model, kernel=kernel)
    tokens = torch.randint(0, 50, (2, 9))
    explained = torch._dynamo.explain(model)(tokens)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, op)) == 2 * 6 + 1
    assert not product_nodes(explained, "matmul" if op == "linear" else "linear")
    eager = train(model, 2)
    model = tiny_model(dtype)
    tilemm.nn.swap_linears(model, kernel=kernel)
    compiled = train(model, 2, step_fn=torch.compile(model, fullgraph=True, backend="aot_eager"))
    assert compiled == pytest.approx(eager, rel=2e-2 if dtype != torch.float32 else 1e-4)


def test_a_compiled_vmap_of_swapped_linears_keeps_the_matmul_op():
    """Under torch.func's vmap in a compiled function a swapped Linear keeps tilemm::matmul, whose
    vmap rule makes one product (tilemm::linear has none: torch's fallback multiplies each
    example apart, with a warning); the values are torch's."""
    from tilemm.torch import fused_ops  # noqa: F401  (registers tilemm::linear, which the check names)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4)).bfloat16()
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore")
    x = torch.randn(3, 5, 8, dtype=torch.bfloat16)
    explained = torch._dynamo.explain(torch.vmap(model))(x)
    assert product_nodes(explained, "matmul") and not product_nodes(explained, "linear")
    got = torch.compile(torch.vmap(model), backend="aot_eager")(x)
    torch.testing.assert_close(got.float(), torch.vmap(ref)(x).float(), rtol=3e-2, atol=3e-2)


@pytest.mark.skipif(ON_GPU, reason="the host's tensors with a Triton rung: the interpreter's route")
@pytest.mark.parametrize("fuse", [False, True])
def test_fused_ops_of_symbolic_rows_launch_the_program_at_run(fuse):
    """Sizes marked dynamic stay symbolic through tilemm::linear of tilemm's program: its tiles
    would read M (a guard that specializes it, refused for marked sizes), so the op's body is
    then tilemm::epilogue_at_run, which launches the program with each run's sizes. One graph
    for every row count, values as the eager call's to the bit, gradients as torch's (within bf16)."""
    import torch._dynamo.testing
    torch._dynamo.reset()
    from torch._dynamo.backends.common import aot_autograd
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).bfloat16()
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=fuse)
    counter = torch._dynamo.testing.CompileCounterWithBackend(aot_autograd(fw_compiler=keep, bw_compiler=keep))
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    for rows in (5, 9, 12):
        x = torch.randn(rows, 16, dtype=torch.bfloat16, requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        y.float().sum().backward()
        if fuse:       # (unfused, the GELU module between is Inductor's, which rounds otherwise than eager torch)
            assert torch.equal(y, model(x))
        x_ref = x.detach().clone().requires_grad_()
        y_ref = ref(x_ref)
        y_ref.float().sum().backward()
        torch.testing.assert_close(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(x.grad.float(), x_ref.grad.float(), rtol=2e-2, atol=5e-2)
    assert counter.frame_count == 1
    targets = {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert "tilemm.epilogue_at_run.default" in targets and "tilemm.matmul.default" not in targets
    assert not any("triton" in t for t in targets)


def swapped_gelu_mlp(fuse: bool):
    """A bf16 Linear(512, 1024), GELU, Linear(1024, 256) on the GPU with its Linears swapped to
    tilemm's program (kernel="tensorcore", the GELU fused where fuse), and an untouched copy of it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    model = model.cuda().bfloat16()
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=fuse)
    return model, ref


@pytest.mark.gpu
@pytest.mark.parametrize("fuse", [False, True])
def test_gpu_symbolic_rows_keep_the_program_in_the_graph(fuse, monkeypatch):
    """On a GPU, rows marked dynamic go into the graph with tilemm's program (its tiles chosen
    for the sizes seen when traced, each run's sizes its arguments; the weight gradient's K is
    the rows): one frame (Inductor) for 2052, 2048, 100 and 3000 rows, and no run calls the
    fused product's Python (tilemm::epilogue_at_run's eager launch); values and gradients as
    torch's within bf16."""
    import torch._dynamo.testing
    from tilemm.products import fused
    torch._dynamo.reset()
    model, ref = swapped_gelu_mlp(fuse)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    forward, launched_at_run = fused.forward, []

    def counted(*args, wrap=None, **kwargs):
        launched_at_run.append(wrap is None)
        return forward(*args, wrap=wrap, **kwargs)
    for rows in (2052, 2048, 100, 3000):
        x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        y.float().sum().backward()
        monkeypatch.setattr(fused, "forward", counted)      # (after the first call's compile)
        x_ref = x.detach().clone().requires_grad_()
        y_ref = ref(x_ref)
        y_ref.float().sum().backward()
        torch.testing.assert_close(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(x.grad.float(), x_ref.grad.float(), rtol=2e-2, atol=5e-2)
    assert counter.frame_count == 1 and not any(launched_at_run), launched_at_run


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_gpu_compiled_backward_and_calls_from_another_thread(backend, dynamic):
    """The TMA program makes its descriptors in the program in a compiled graph, and their
    scratch comes from Triton's allocator, which Triton keeps per thread: a backward (autograd's
    device thread) and a call from a worker thread run, under a backend that sets no allocator
    (aot_eager) and under Inductor; gradients as torch's within bf16."""
    torch._dynamo.reset()
    model, ref = swapped_gelu_mlp(fuse=True)
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)
    answers = []

    def step(rows):
        x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        compiled(x).float().sum().backward()
        x_ref = x.detach().clone().requires_grad_()
        ref(x_ref).float().sum().backward()
        answers.append((x.grad.float(), x_ref.grad.float()))
    step(2052)
    worker = threading.Thread(target=step, args=(2048,))
    worker.start()
    worker.join()
    assert len(answers) == 2
    for got, want in answers:
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
def test_gpu_autocast_matmul_epilogue_eager_and_compiled_as_torchs():
    """Under CUDA bf16 autocast matmul_epilogue casts a, b, bias and c as torch.addmm does (the
    Triton route of bfloat16 operands), eager and compiled."""
    torch._dynamo.reset()
    a, b, bias, c = (torch.randn(s, device="cuda") for s in ((64, 96), (96, 80), (80,), (64, 80)))

    def f(a):
        return tilemm.matmul_epilogue(a, b, bias=bias, c=c, beta=0.5, activation="gelu")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = torch.nn.functional.gelu(torch.addmm(bias, a, b) + 0.5 * c.bfloat16())
        got = [f(a), torch.compile(f, fullgraph=True)(a)]
    for y in got:
        assert y.dtype == want.dtype == torch.bfloat16
        assert torch.allclose(y.float(), want.float(), rtol=3e-2, atol=6e-2)


@pytest.mark.gpu
def test_gpu_inductor_linear_stack_matches_eager():
    """bf16 on the GPU under inductor: no graph break, each swapped Linear of the default one
    tilemm::linear node, the same result as eager within bf16."""
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
    model = model.to("cuda", torch.bfloat16)
    tilemm.nn.swap_linears(model)
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, "linear")) == 2
    assert not product_nodes(explained)
    compiled = torch.compile(model, fullgraph=True)
    eager, traced = model(x), compiled(x)
    assert float((eager.float() - traced.float()).abs().max()) <= 2**-6 * float(eager.float().abs().max())


@pytest.mark.parametrize("transform", ["jvp", "grad"])
def test_transforms_of_tilemms_own_programs_inside_compile(transform):
    """tilemm's Triton programs (tensorcore-f32; the fused epilogue's) under jvp and grad inside
    torch.compile: where Dynamo can't trace the transform it runs it eagerly and may start
    compiling at a frame under it; the autograd Functions' steps are never traced (Dynamo traced
    Triton's launch: on the GPU the program's kernel read as None; in the interpreter a fake
    tensor of uint64 failed). torch's answers."""
    torch._dynamo.reset()
    w, x, t = (torch.randn(*shape, device="cuda" if ON_GPU else "cpu") for shape in ((24, 16), (12, 16), (12, 16)))
    tiles = dict(block_m=16, block_n=32, block_k=16)
    calls = [(lambda x: tilemm.matmul(x, w.T, kernel="tensorcore-f32", **tiles), lambda x: x @ w.T),
             (lambda x: tilemm.linear(x, w, None, "gelu", kernel="tensorcore", **tiles),
              lambda x: torch.nn.functional.gelu(x @ w.T))]
    for ours, theirs in calls:
        got = torch.compile(lambda x, t: TRANSFORMS[transform](ours, x, t), backend="aot_eager")(x, t)
        assert torch.allclose(got, TRANSFORMS[transform](theirs, x, t), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("transform", ["jvp", "grad", "vmap"])
def test_gpu_transforms_of_tilemms_own_kernels_inside_compile(transform):
    """float32 on the GPU with tilemm's Triton programs (tensorcore-f32, the fused epilogue, the grouped
    rung) under torch.func inside torch.compile (Inductor): torch's answers."""
    torch._dynamo.reset()
    w, bias = torch.randn(64, 32, device="cuda"), torch.randn(64, device="cuda")
    stacked, offs = torch.stack([w.T, 2 * w.T]), torch.tensor([16, 48], device="cuda", dtype=torch.int32)
    x, t = torch.randn(48, 32, device="cuda"), torch.randn(48, 32, device="cuda")
    calls = [(lambda x: tilemm.matmul(x, w.T, kernel="tensorcore-f32"), lambda x: x @ w.T),
             (lambda x: tilemm.linear(x, w, bias, "gelu", kernel="tensorcore"),
              lambda x: torch.nn.functional.gelu(x @ w.T + bias))]
    if transform != "vmap":        # (its offsets cut each batch element's rows)
        calls.append((lambda x: tilemm.grouped_matmul(x, stacked, offs),
                      lambda x: torch.cat([x[:16] @ stacked[0], x[16:] @ stacked[1]])))
    for ours, theirs in calls:
        got = torch.compile(lambda x, t: TRANSFORMS[transform](ours, x, t))(x, t)
        want = TRANSFORMS[transform](theirs, x, t)
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))


@pytest.mark.parametrize("strict", [True, False])
def test_export_keeps_the_op(strict):
    """torch.export, through Dynamo (strict) or not: one tilemm.matmul node, the same result
    (after an eager call of the same shapes, whose plan the tracing must not replay)."""
    class Layer(torch.nn.Module):
        def forward(self, x, w):
            return torch.relu(tilemm.matmul(x, w, kernel="cpu-tiled"))
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    eager = Layer()(x, w)
    exported = torch.export.export(Layer(), (x, w), strict=strict)
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.tilemm.matmul.default) == 1
    assert torch.allclose(exported.module()(x, w), eager)


@pytest.mark.parametrize("sa,sb", [((5, 1, 6), (3, 6, 4)), ((4, 6), (5, 3)), ((6,), (5,))])
def test_compiled_shape_errors_are_the_eager_call_s(sa, sb):
    """A product of shapes that do not line up raised Dynamo's TorchRuntimeError from the op's
    fake (not a ValueError, which tilemm documents); checked while tracing, the frame runs eagerly
    and raises the eager error (fullgraph=True: Dynamo's Unsupported, whose message names it)."""
    torch._dynamo.reset()
    a, b = torch.randn(sa, requires_grad=True), torch.randn(sb)
    with pytest.raises(ValueError) as eager:
        tilemm.matmul(a, b)
    with pytest.raises(ValueError) as compiled:
        torch.compile(lambda x, y: tilemm.matmul(x, y) * 2, backend="aot_eager")(a, b)
    assert type(compiled.value) is type(eager.value) and str(compiled.value) == str(eager.value)
    with pytest.raises(torch._dynamo.exc.Unsupported) as whole:
        torch.compile(lambda x, y: tilemm.matmul(x, y) * 2, backend="aot_eager", fullgraph=True)(a, b)
    assert str(eager.value) in str(whole.value)


def test_compiled_out_of_elements_sharing_memory_is_refused_as_eager():
    """An expanded out (a zero stride): eager refuses it with OverlappingOutError (a ValueError);
    compiled, torch's copy_ into it raised its own RuntimeError."""
    torch._dynamo.reset()
    x, w, out = torch.randn(5, 4), torch.randn(4, 3), torch.empty(1, 3).expand(5, 3)
    with pytest.raises(ValueError) as eager:
        tilemm.matmul(x, w, out=out)
    with pytest.raises(ValueError) as compiled:
        torch.compile(lambda x, w, o: tilemm.matmul(x, w, out=o), backend="aot_eager")(x, w, out)
    assert type(compiled.value) is type(eager.value)


@contextlib.contextmanager
def another_thread_importing():
    """A thread that puts a module into sys.modules and takes it out again and again, as a
    thread's imports do, the threads taking turns often: the race, made likely."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    stop = threading.Event()

    def importing():
        while not stop.is_set():
            sys.modules["tilemm_test_importing"] = types.ModuleType("tilemm_test_importing")
            stop.is_set()                # (a Python call: where the thread may hand over, the module in)
            sys.modules.pop("tilemm_test_importing", None)

    thread = threading.Thread(target=importing, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)


def test_compiling_while_another_thread_imports(monkeypatch):
    """Dynamo wraps a dict that traced code reads as a whole: tilemm's traced checks read
    sys.modules, so a compile failed with 'dictionary changed size during iteration' when another
    thread imported a module meanwhile. The traced calls read no sys.modules now, in either order
    of import (torch_compiling is the check where tilemm was imported before torch: an eager call
    makes torch's own check tilemm's)."""
    monkeypatch.setattr(api, "compiling", api.torch_compiling)
    tilemm.matmul(torch.ones(2, 2), torch.ones(2, 2))
    assert api.compiling is torch.compiler.is_compiling
    where = "cuda" if ON_GPU else "cpu"          # (grouped_matmul: the GPU, or Triton's interpreter on the host)
    w, layer = torch.randn(4, 16, device=where), tilemm.nn.Linear(16, 4).to(where)
    stacked, offs = torch.randn(2, 16, 4, device=where), torch.tensor([3, 8], dtype=torch.int32, device=where)
    eights = torch.randint(-4, 5, (16, 32), device=where).to(torch.float8_e4m3fn)    # (exact: small whole numbers)
    with another_thread_importing():
        for _ in range(3):
            torch._dynamo.reset()
            x = torch.randn(8, 16, device=where)
            for ours, torchs in ((lambda x: tilemm.matmul(x, w.T), lambda x: x @ w.T),
                                 (layer, lambda x: torch.nn.functional.linear(x, layer.weight, layer.bias)),
                                 (lambda x: tilemm.grouped_matmul(x, stacked, offs=offs),
                                  lambda x: torch.cat([x[:3] @ stacked[0], x[3:] @ stacked[1]]))):
                got = torch.compile(ours, fullgraph=True, backend="aot_eager")(x)
                torch.testing.assert_close(got, torchs(x), rtol=1e-3, atol=1e-3)   # (float32 on the GPU: TF32 sums)
            # scaled_matmul (per-tensor scales: one op, its checks traced before it)
            got = torch.compile(lambda a, b: tilemm.scaled_matmul(a, b, 2.0, 0.5, **FP8), fullgraph=True,
                                backend="aot_eager")(eights, eights.T)
            torch.testing.assert_close(got.float(), (eights.float() @ eights.float().T).bfloat16().float())


def test_compiling_a_frame_python_runs_while_another_thread_imports(monkeypatch):
    """The same race where a compiled function's frame is run by Python after all and Dynamo then
    traces tilemm's own frames, the eager checks: shapes that do not line up with an operand that
    records a gradient, NumPy operands (matmul, with NumPy's keywords, lists, linear,
    grouped_matmul). Their checks know torch and CuPy from the operands' types (arrays.torch_of,
    cupy_of), not from sys.modules, also in a program whose first tilemm calls these are (no
    module kept yet)."""
    from tilemm.numerics import arrays
    w = torch.randn(4, 16)
    a, b = np.ones((3, 4), dtype=np.float32), np.ones((4, 2), dtype=np.float32)
    calls = [lambda a, b: tilemm.matmul(a, b), lambda a, b: tilemm.matmul(a, b, dtype=np.float64),
             lambda a, b: tilemm.matmul(a.tolist(), b.tolist()), lambda a, b: tilemm.linear(a, b.T, activation="relu"),
             lambda a, b: tilemm.grouped_matmul(a, np.stack([b, b]), offs=np.array([1, 3], dtype=np.int32))]
    with another_thread_importing():
        for call in calls:
            for name in ("TORCH", "CUPY"):
                monkeypatch.setattr(arrays, name, None)
            torch._dynamo.reset()
            np.testing.assert_array_equal(torch.compile(lambda a, b: call(a, b) + 1, backend="aot_eager")(a, b), a @ b + 1)
        monkeypatch.setattr(arrays, "TORCH", None)
        with pytest.raises(ValueError):
            torch.compile(lambda x, y: tilemm.matmul(x, y) * 2, backend="aot_eager")(torch.randn(8, 16,
                                                                                                requires_grad=True), w)


def test_numpy_operands_under_compile():
    """NumPy arrays inside a compiled function: Dynamo gives the frame back to Python, where the
    call is the eager one; with fullgraph=True, tilemm's TypeError inside Dynamo's own error, not
    Dynamo's complaint about a check it cannot trace. The kernels' parameter names are read first,
    as after any earlier call (torch 2.11's Dynamo then traced the keywords' check and failed)."""
    numpy_keywords.parameter_names()
    torch._dynamo.reset()
    a, b = np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(6, dtype=np.float32).reshape(3, 2)
    got = torch.compile(lambda a, b: tilemm.matmul(a, b) + 1, backend="aot_eager")(a, b)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, a @ b + 1)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:      # (NumPy's keywords read a kept set of names)
        warnings.simplefilter("always")
        got = torch.compile(lambda a, b: tilemm.matmul(a, b, dtype=np.float64) + 1, backend="aot_eager")(a, b)
    assert got.dtype == np.float64 and not [w for w in caught if "lru_cache" in str(w.message)]
    np.testing.assert_array_equal(got, a @ b + 1)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="tilemm multiplies torch tensors"):
        torch.compile(lambda a, b: tilemm.matmul(a, b) + 1, backend="aot_eager", fullgraph=True)(a, b)


def test_torch_of_knows_torch_tensors_by_their_type():
    """arrays.torch_of, which the traced checks ask instead of sys.modules: torch for a torch
    tensor (a subclass's and a parameter's too), None for anything else, an object that takes part
    in __torch_function__ without being a tensor among them."""
    from tilemm.numerics import arrays

    class Tagged(torch.Tensor):
        pass

    class Protocol:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented
    for x in (torch.ones(2), torch.ones(2).as_subclass(Tagged), torch.nn.Parameter(torch.ones(2))):
        assert arrays.torch_of(x) is torch
    for x in (np.ones(2), 1.0, None, [torch.ones(2)], Protocol()):
        assert arrays.torch_of(x) is None


def test_cupy_of_knows_cupy_arrays_by_their_type():
    """arrays.cupy_of, as torch_of for CuPy: None for NumPy arrays, torch tensors and a class of
    another module whose name starts as CuPy's (no import of cupy tried)."""
    from tilemm.numerics import arrays
    Lookalike = type("Lookalike", (), {"__module__": "cupyish"})
    for x in (np.ones(2), torch.ones(2), 1.0, None, [np.ones(2)], Lookalike()):
        assert arrays.cupy_of(x) is None


def test_gpu_cupy_of_a_cupy_array_is_cupy():
    cupy = pytest.importorskip("cupy")
    from tilemm.numerics import arrays
    assert arrays.cupy_of(cupy.ones(2)) is cupy and arrays.cupy_of(cupy.ones(2)[::2]) is cupy
