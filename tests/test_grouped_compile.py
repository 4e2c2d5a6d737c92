"""tilemm.grouped_matmul under torch.compile and torch.export: one ``torch.ops.tilemm.grouped_matmul``
node a call and no graph break, in every layout; compiled results and gradients equal eager ones
and float64 products; the op passes torch.library.opcheck; bad input is refused with the eager
call's words; torch.export keeps the op. On the CPU (Triton's interpreter) at toy sizes with an
empty group and a group of one row; backend="aot_eager" traces the backward as Inductor would,
and the GPU test runs Inductor."""
import warnings

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import tilemm
from tilemm import api
from tilemm.torch import grouped_ops
from tilemm.torch.ops import encode_params
from tilemm.ladder.tensorcore import r15_grouped_kernel

from .test_grouped import SMALL, WHERE, check, operand, scales_like
from .test_torch_compile import product_nodes

CUT = [1, 1, 8]            # groups of 1, 0 and 7 along the dimension the offsets cut
COUNTS = [0, 1, 5]         # the masked layout: an empty group, one row, a full one
LAYOUTS = {                # name: (a's shape, b's shape, offs, counts)
    "2d-3d": ((8, 16), (3, 16, 4), CUT, None),
    "3d-3d": ((3, 5, 16), (3, 16, 4), None, None),
    "masked": ((3, 5, 16), (3, 16, 4), None, COUNTS),
    "2d-2d": ((5, 8), (8, 4), CUT, None),
    "3d-2d": ((3, 5, 16), (16, 8), CUT, None),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles afresh (the shared helpers' code would pass Dynamo's recompile limit)."""
    torch._dynamo.reset()
    yield


def arguments(name, dtype=torch.float32, grad=False):
    """(a, b, offs, counts) of a layout: tensors on the tier's device, the cut as int32 there."""
    a_shape, b_shape, offs, counts = LAYOUTS[name]
    a, b = operand(a_shape, dtype, 1), operand(b_shape, dtype, 2)
    if grad:
        a, b = a.requires_grad_(), b.requires_grad_()
    offs, counts = (None if x is None else torch.tensor(x, dtype=torch.int32, device=WHERE) for x in (offs, counts))
    return a, b, offs, counts


def grouped(a, b, offs, counts):
    return tilemm.grouped_matmul(a, b, offs, counts=counts, **SMALL)


def forward_and_gradients(fn, a, b, offs, counts):
    """fn's result and the operands' gradients of a weighted sum of it (fresh leaves of a and b)."""
    a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    c = fn(a, b, offs, counts)
    (c * torch.linspace(-1, 1, c.numel(), dtype=c.dtype, device=c.device).reshape(c.shape)).sum().backward()
    return c.detach(), a.grad, b.grad


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", LAYOUTS)
def test_compiled_results_and_gradients_equal_eager_ones(name, backend):
    a, b, offs, counts = arguments(name)
    compiled = torch.compile(grouped, fullgraph=True, backend=backend)
    eager = forward_and_gradients(grouped, a, b, offs, counts)
    traced = forward_and_gradients(compiled, a, b, offs, counts)
    for want, got in zip(eager, traced):
        assert torch.equal(want, got)            # the same programs on the same operands
    check(traced[0], a, b, offs if counts is None else counts, counted=counts is not None)


def test_dynamic_shapes_take_other_token_counts_without_recompiling():
    """A MoE layer's token count changes from step to step: the fake's shapes are symbolic."""
    counted = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(grouped, fullgraph=True, backend=counted, dynamic=True)
    b = operand((3, 16, 4), torch.float32, 2)
    for rows in (8, 11):
        a = operand((rows, 16), torch.float32, rows)
        offs = torch.tensor([1, 1, rows], dtype=torch.int32, device=WHERE)
        eager, traced = (forward_and_gradients(fn, a, b, offs, None) for fn in (grouped, compiled))
        assert all(torch.equal(want, got) for want, got in zip(eager, traced))
    assert counted.frame_count == 1


@pytest.mark.parametrize("name", ["2d-3d", "masked"])
def test_one_node_and_no_graph_break(name, monkeypatch):
    """Traced before any eager call (tilemm's check of torch.compile is bound on first use)."""
    monkeypatch.setattr(api, "compiling", api.torch_compiling)
    a, b, offs, counts = arguments(name, grad=True)

    def f(a, b):
        return torch.relu(tilemm.grouped_matmul(a, b, offs, counts=counts, out_dtype=torch.float32, **SMALL)).sum()
    explained = torch._dynamo.explain(f)(a, b)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    nodes = product_nodes(explained, "grouped_matmul")
    assert len(nodes) == 1
    assert nodes[0].args[3:] == (counts is not None, None, None, "float32", encode_params(SMALL), False)


def test_no_warning_under_compile():
    """Dynamo once warned of the functools cache the eager path reads its repeated calls through."""
    a, b, offs, _ = arguments("2d-3d", grad=True)
    compiled = torch.compile(grouped, fullgraph=True, backend="aot_eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(a, b, offs, None).sum().backward()
    words = [str(w.message) for w in caught]
    assert not [w for w in words if "lru_cache" in w or "functools" in w or "Dynamo" in w], words


OPCHECK = [("2d-3d", torch.float32, None), ("3d-3d", torch.float16, "float32"), ("masked", torch.float32, None),
           ("2d-2d", torch.float32, None), ("3d-2d", torch.float16, None), ("2d-3d", torch.int8, None)]


@pytest.mark.parametrize("name,dtype,out_dtype", OPCHECK)
def test_opcheck(name, dtype, out_dtype):
    a, b, offs, counts = arguments(name, dtype, grad=dtype.is_floating_point)
    result = {torch.int8: "int32"}.get(dtype, out_dtype or str(dtype).removeprefix("torch."))
    cut = offs if counts is None else counts
    torch.library.opcheck(torch.ops.tilemm.grouped_matmul,
                          (a, b, cut, counts is not None, None, None, result, encode_params(SMALL), False))


def test_gradient_products_zero_the_rows_no_group_covers():
    """zero_uncovered: rows past offs[-1] are 0 in a gradient's product, as grouped_autograd's."""
    a, b = operand((8, 16), torch.float32, 3), operand((2, 16, 4), torch.float32, 4)
    offs = torch.tensor([2, 5], dtype=torch.int32, device=WHERE)
    c = torch.ops.tilemm.grouped_matmul(a, b, offs, False, None, None, "float32", encode_params(SMALL), True)
    assert torch.all(c[5:] == 0)
    check(c, a, b, offs)


def test_offsets_as_a_list_or_an_array_a_list_of_problems_and_out():
    a, b = operand((8, 16), torch.float32, 5), operand((2, 16, 4), torch.float32, 6)
    out = torch.full((8, 4), 7.0, device=WHERE)

    def f(a, b, out):
        pairs = tilemm.grouped_matmul([a[:3], a[3:]], [b[0], b[1]], **SMALL)
        by_array = tilemm.grouped_matmul(a, b, np.array([3, 8], dtype=np.int32), **SMALL)
        return tilemm.grouped_matmul(a, b, [3, 8], out=out, **SMALL), pairs, by_array
    explained = torch._dynamo.explain(f)(a, b, out)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, "grouped_matmul")) == 4
    c, pairs, by_array = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, out)
    assert c is out
    check(out, a, b, torch.tensor([3, 8], dtype=torch.int32))
    assert torch.equal(torch.cat(pairs), out) and torch.equal(by_array, out)


def test_float8_groups_with_block_scales_are_one_node_with_no_gradient():
    e4m3 = torch.float8_e4m3fn
    a, b = (torch.randn(6, 32) * 3).to(e4m3).to(WHERE), (torch.randn(2, 8, 32) * 3).to(e4m3).to(WHERE).mT
    scale_a, scale_b = scales_like((6, 1), 1).to(WHERE), scales_like((2, 1, 1), 2).to(WHERE)
    params = dict(SMALL, block_k=32)

    def f(a, b):
        return tilemm.grouped_matmul(a, b, [2, 6], scale_a=scale_a, scale_b=scale_b, out_dtype="float32", **params)
    explained = torch._dynamo.explain(f)(a, b)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, "grouped_matmul")) == 1
    c = torch.compile(f, fullgraph=True, backend="aot_eager")(a.requires_grad_(), b)
    assert torch.equal(c, f(a.detach(), b)) and not c.requires_grad


BAD = [   # (a, b, offs, kwargs, the eager call's words): shapes, dtypes and parameters, found while tracing
    ((6, 5), (2, 4, 3), [2, 6], {}, "do not line up"),
    ((6, 4), (2, 4, 3), [6], {}, "1 entries for 2 groups"),
    ((6, 4), (2, 4, 3), None, {}, "need offs"),
    ((6, 4), (2, 4, 3), [2, 6], dict(out_dtype="int32"), "out_dtype"),
    ((6, 4), (2, 4, 3), [2, 6], dict(block_q=3), "no parameter"),
    ((6, 4), (2, 4, 3), [2, 6], dict(block_m=48), "block_m=48"),
    ((6, 4), (2, 4, 3), [2, 6.0], {}, "whole numbers"),
    ((6, 4), (2, 4, 3), [2, 6], dict(out=torch.empty(6, 4)), r"out must be a \(6, 3\)"),
]


@pytest.mark.parametrize("a_shape,b_shape,offs,kwargs,match", BAD)
def test_bad_input_is_refused_while_tracing(monkeypatch, a_shape, b_shape, offs, kwargs, match):
    """The error names the problem in the eager call's words (Dynamo wraps it, with fullgraph)."""
    monkeypatch.setattr(r15_grouped_kernel, "launch", lambda *_, **__: pytest.fail("launched"))
    a, b = torch.ones(a_shape, dtype=torch.float16, device=WHERE), torch.ones(b_shape, dtype=torch.float16,
                                                                                device=WHERE)
    compiled = torch.compile(lambda a, b: tilemm.grouped_matmul(a, b, offs, **kwargs), fullgraph=True,
                             backend="eager")
    with pytest.raises(Exception, match=match):
        compiled(a, b)


def test_offsets_on_the_host_are_checked_at_each_run_before_the_launch(monkeypatch):
    a, b = operand((6, 4), torch.float16, 7), operand((2, 4, 3), torch.float16, 8)
    compiled = torch.compile(grouped, fullgraph=True, backend="aot_eager")
    compiled(a, b, torch.tensor([2, 6], dtype=torch.int32), None)
    monkeypatch.setattr(r15_grouped_kernel, "launch", lambda *_, **__: pytest.fail("launched"))
    with pytest.raises(ValueError, match="not sorted"):
        compiled(a, b, torch.tensor([4, 2], dtype=torch.int32), None)


def test_a_widened_result_records_no_gradient_under_compile_either():
    a, b, offs, _ = arguments("2d-3d", torch.float16, grad=True)
    compiled = torch.compile(lambda a, b: tilemm.grouped_matmul(a, b, offs, out_dtype=torch.float32, **SMALL),
                             fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="gradients flow for floating operands with the result in their dtype"):
        compiled(a, b)


@pytest.mark.parametrize("strict", [True, False])
def test_export_keeps_the_op(strict):
    """torch.export, through Dynamo (strict) or not: one grouped_matmul node, the same result
    (after an eager call of the same shapes, whose plan the tracing must not replay)."""
    offs = torch.tensor(CUT, dtype=torch.int32, device=WHERE)

    class Experts(torch.nn.Module):
        def forward(self, x, w, offs):
            return torch.relu(tilemm.grouped_matmul(x, w, offs, **SMALL))
    x, w = operand((8, 16), torch.float32, 9), operand((3, 16, 4), torch.float32, 10)
    eager = Experts()(x, w, offs)
    exported = torch.export.export(Experts(), (x, w, offs), strict=strict)
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.tilemm.grouped_matmul.default) == 1
    assert torch.equal(exported.module()(x, w, offs), eager)


def test_the_op_is_registered_by_tilemm_torch_ops():
    """A program exported with the op needs it registered where it is loaded: ``import tilemm.torch_ops``."""
    import tilemm.torch_ops  # noqa: F401
    assert torch.ops.tilemm.grouped_matmul.default._schema.name == "tilemm::grouped_matmul"
    assert grouped_ops.grouped_matmul_op._opoverload is torch.ops.tilemm.grouped_matmul.default


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["2d-3d", "masked", "2d-2d"])
def test_gpu_inductor_forward_and_backward_match_eager(name):
    """bf16 on the GPU under Inductor, offsets on the GPU: one node, no graph break, the result
    and gradients as eager's within a bf16 rounding (the same programs, but Inductor lays out dC as
    it likes, and another layout may take the TMA form of the program)."""
    shapes = {"2d-3d": ((1000, 512), (8, 512, 384)), "masked": ((8, 128, 512), (8, 512, 384)),
              "2d-2d": ((384, 1000), (1000, 512))}[name]
    sizes = torch.tensor([0, 1, 300, 17, 0, 128, 500, 54], dtype=torch.int32)
    cut = sizes.clamp(max=128) if name == "masked" else sizes.cumsum(0).to(torch.int32)
    offs, counts = (None, cut.cuda()) if name == "masked" else (cut.cuda(), None)
    a = torch.randn(shapes[0], device="cuda", dtype=torch.bfloat16)
    b = torch.randn(shapes[1], device="cuda", dtype=torch.bfloat16)

    def f(a, b):
        return tilemm.grouped_matmul(a, b, offs, counts=counts)
    explained = torch._dynamo.explain(f)(a, b)
    assert explained.graph_break_count == 0 and len(product_nodes(explained, "grouped_matmul")) == 1
    eager = forward_and_gradients(lambda a, b, *_: f(a, b), a, b, None, None)
    traced = forward_and_gradients(torch.compile(lambda a, b, *_: f(a, b), fullgraph=True), a, b, None, None)
    for want, got in zip(eager, traced):
        assert torch.allclose(got.float(), want.float(), rtol=2**-7, atol=2**-7 * float(want.float().abs().max()))
    check(traced[0], a, b, cut, counted=name == "masked")
