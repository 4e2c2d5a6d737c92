"""Exact integer products through float64 GEMMs on 11-bit digits (tilemm.ladder.int_dgemm), the
library rung's integer route on torch tensors: the digit arithmetic as pure functions on CPU torch
tensors against NumPy's wrapping integer matmul (full ranges, wraparound, K in the thousands,
shapes of 0, 1 and odd sizes, stacks, views); the library rung's use of it; the default's rule
that takes the library for integer products while Triton is not loaded. On a GPU (marked gpu):
tilemm.matmul through the route, and a fresh process whose integer products load no Triton."""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tilemm.choose import by_shape as choice, default as dispatch
from tilemm.engine import availability
from tilemm.ladder import int_dgemm, record as kernel_record, registry
from tilemm.ladder.registry import Problem
from tilemm.system import machine

torch = pytest.importorskip("torch")

INT = {torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64}


def full_range(shape, dtype, generator):
    """Random integers over dtype's whole range, its least and greatest values among them."""
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, shape, dtype=dtype, generator=generator)
    if x.numel():
        x.view(-1)[0], x.view(-1)[-1] = info.min, info.max
    return x


def numpy_product(a, b, bits):
    """NumPy's matmul in the result's dtype: exact modulo 2^bits, wrapped as two's complement."""
    wide = np.int64 if bits == 64 else np.int32
    return np.matmul(a.numpy().astype(wide), b.numpy().astype(wide))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
def test_digits_rebuild_the_integers(dtype):
    g = torch.Generator().manual_seed(1)
    x = full_range((4000,), dtype, g)
    parts = int_dgemm.digits(x, int_dgemm.digit_count(torch.iinfo(dtype).bits))
    assert len(parts) == {torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 6}[dtype]
    assert all(p.dtype == torch.float64 and p.min() >= -1024 and p.max() <= 1023 for p in parts)
    rebuilt = [sum(int(p[i]) << (11 * d) for d, p in enumerate(parts)) for i in range(0, 4000, 37)]
    assert rebuilt == [int(v) for v in x[::37]]


@pytest.mark.parametrize("a_dtype, b_dtype, bits", [
    (torch.int32, torch.int32, 32), (torch.int64, torch.int64, 64), (torch.int8, torch.int8, 32),
    (torch.int16, torch.int16, 32), (torch.int32, torch.int32, 64), (torch.int8, torch.int8, 64)])
@pytest.mark.parametrize("m, k, n", [(5, 7, 3), (1, 1, 1), (0, 3, 2), (4, 0, 3), (3, 5, 0), (1, 9, 1),
                                     (33, 2999, 17)])
def test_the_product_is_numpy_s(a_dtype, b_dtype, bits, m, k, n):
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    a, b = full_range((m, k), a_dtype, g), full_range((k, n), b_dtype, g)
    got = int_dgemm.matmul(a, b, bits)
    assert got.dtype == torch.int64 and got.shape == (m, n)
    assert np.array_equal(got.numpy(), numpy_product(a, b, bits))


@pytest.mark.parametrize("bits", [32, 64])
def test_wraparound(bits):
    """Sums far past the result's range wrap as NumPy's: all least values, all greatest, and
    mixed, over K = 4096."""
    dtype = torch.int32 if bits == 32 else torch.int64
    info, k = torch.iinfo(dtype), 4096
    for a_value, b_value in [(info.min, info.min), (info.max, info.max), (info.min, info.max), (-1, info.min)]:
        a = torch.full((3, k), a_value, dtype=dtype)
        b = torch.full((k, 2), b_value, dtype=dtype)
        expected = (a_value * b_value * k) % 2**bits
        expected -= 2**bits if expected >= 2**(bits - 1) else 0
        got = int_dgemm.matmul(a, b, bits)
        assert (got == expected).all(), (a_value, b_value)
        assert np.array_equal(got.numpy(), numpy_product(a, b, bits))


def test_stacks_and_views():
    g = torch.Generator().manual_seed(7)
    a = full_range((2, 1, 9, 40), torch.int32, g)
    b = full_range((3, 40, 6), torch.int32, g)
    assert np.array_equal(int_dgemm.matmul(a, b, 32).numpy(), numpy_product(a, b, 32))     # broadcast stacks
    wide = full_range((40, 30), torch.int32, g)
    for x, y in [(wide.T, wide), (wide[::3, ::2].T, wide[::3, :7]), (wide.T[:, ::4], wide[::4])]:
        assert not (x.is_contiguous() and y.is_contiguous())
        assert np.array_equal(int_dgemm.matmul(x, y, 32).numpy(), numpy_product(x.contiguous(), y.contiguous(), 32))


def test_k_past_the_exact_limit_is_refused():
    """Past K = 2^33 a float64 sum of digit products could round: refused, never a wrong answer
    (a broadcast view: no memory)."""
    long_k = int_dgemm.EXACT_K + 1
    a = torch.zeros(1, dtype=torch.int32).expand(2, long_k)
    b = torch.zeros(1, dtype=torch.int32).expand(long_k, 2)
    with pytest.raises(ValueError, match="2\\^33"):
        int_dgemm.matmul(a, b, 32)
    assert not int_dgemm.takes(a, b, torch.empty(2, 2, dtype=torch.int32))
    assert int_dgemm.product_for(a, b, "int32") is None
    assert int_dgemm.takes(a[:, :int_dgemm.EXACT_K], b[:int_dgemm.EXACT_K], torch.empty(2, 2, dtype=torch.int32))


def test_run_writes_c_in_blocks_of_rows_vectors_and_other_operands(monkeypatch):
    g = torch.Generator().manual_seed(11)
    monkeypatch.setattr(int_dgemm, "WORKSPACE_BYTES", 8 * (5 * 50 + 7 * 20) * 3)     # 3 rows a block
    a, b = full_range((10, 50), torch.int32, g), full_range((50, 20), torch.int32, g)
    assert int_dgemm.rows_a_block(10, 20, 50, 3) == 3
    c = torch.empty(10, 20, dtype=torch.int32)
    int_dgemm.run(a, b, c)
    assert np.array_equal(c.numpy(), numpy_product(a, b, 32))
    c = torch.empty(1, 20, dtype=torch.int32)          # a vector A: one row
    int_dgemm.run(a[4], b, c)
    assert np.array_equal(c.numpy()[0], numpy_product(a, b, 32)[4])
    c = torch.empty(10, 1, dtype=torch.int64)          # a vector B: one column, into int64
    int_dgemm.run(a, b[:, 3], c)
    assert np.array_equal(c.numpy()[:, 0], numpy_product(a, b, 64)[:, 3])
    u, flags = torch.randint(0, 256, (6, 50), dtype=torch.uint8, generator=g), torch.rand(50, 20, generator=g) < 0.5
    c = torch.empty(6, 20, dtype=torch.int32)          # uint8 and bool operands: as C's dtype
    int_dgemm.run(u, flags, c)
    assert np.array_equal(c.numpy(), u.numpy().astype(np.int32) @ flags.numpy().astype(np.int32))
    fast = int_dgemm.product_for(a, b, "int32")
    assert fast(a, b).dtype == torch.int32 and np.array_equal(fast(a, b).numpy(), numpy_product(a, b, 32))


def test_a_shift_s_pairs_split_into_runs_whose_sums_stay_exact(monkeypatch):
    """A shift's pairs go to one GEMM while pairs·K stays within EXACT_K; past it (K over 2^31,
    here EXACT_K made small) in runs of fewer pairs, added in int64: the product unchanged."""
    assert int_dgemm.pair_blocks(2, 3, 3, 1000) == [(0, 3)]
    assert int_dgemm.pair_blocks(4, 3, 3, 1000) == [(2, 3)]          # (2, 2) only: B has digits 0 to 2
    assert int_dgemm.pair_blocks(3, 6, 1, 1000) == [(3, 4)]          # an int8 B: one digit
    monkeypatch.setattr(int_dgemm, "EXACT_K", 100)
    assert int_dgemm.pair_blocks(2, 3, 3, 40) == [(0, 2), (2, 3)]
    assert int_dgemm.pair_blocks(5, 6, 6, 60) == [(i, i + 1) for i in range(6)]
    g = torch.Generator().manual_seed(17)
    for dtype, bits, k in [(torch.int32, 32, 60), (torch.int64, 64, 60), (torch.int64, 64, 40), (torch.int32, 64, 100)]:
        a, b = full_range((7, k), dtype, g), full_range((k, 5), dtype, g)
        assert np.array_equal(int_dgemm.matmul(a, b, bits).numpy(), numpy_product(a, b, bits)), (dtype, bits, k)


def test_the_constants_while_a_cuda_graph_is_captured(monkeypatch):
    """The digits' constants go to the device once and are kept; while a graph is captured (no
    copy from the host then) they are filled on the device, the same values, and not kept."""
    from tilemm.engine import device_constants, streams
    cpu = torch.device("cpu")
    monkeypatch.setattr(device_constants, "KEPT", {})
    monkeypatch.setattr(streams, "capturing", lambda: True)
    filled = int_dgemm.digit_constants(3, 1, True, cpu)
    assert [row.view(-1).tolist() for row in filled] == [list(row[1]) for row in int_dgemm.table_values(3)]
    assert filled[0].shape == (3, 1) and device_constants.KEPT == {}
    a = full_range((4, 9), torch.int64, torch.Generator().manual_seed(2))
    assert np.array_equal(int_dgemm.matmul(a, a.T, 64).numpy(), numpy_product(a, a.T, 64))
    assert device_constants.KEPT == {}
    monkeypatch.setattr(streams, "capturing", lambda: False)
    kept = int_dgemm.digit_constants(3, 1, True, cpu)
    assert kept is int_dgemm.digit_constants(3, 1, True, cpu)
    assert all(torch.equal(x, y) for x, y in zip(kept, filled))


def kernel_kinds(call) -> tuple:
    """(the distinct (op, tensor dtypes) a call dispatches that may launch a kernel, in place or not
    one kind; how many such ops it dispatches): views and allocations left out."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket).replace("aten.__i", "aten.__").rstrip("_")
            if not func.is_view and name not in ("aten._unsafe_view", "aten.empty", "aten.empty_strided"):
                flat = list(args) + list((kwargs or {}).values())
                self.ops.append((name, tuple(x.dtype for x in flat if isinstance(x, torch.Tensor))))
            return func(*args, **(kwargs or {}))

    with Log() as log:
        call()
    return set(log.ops), len(log.ops)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("a_shape, b_shape", [((40, 30), (30, 20)), ((3, 40, 30), (30, 20))])
def test_a_call_runs_few_kinds_of_kernels(dtype, a_shape, b_shape):
    """A process's first call loads each kind of kernel it launches: the route runs nine kinds at
    most (digits: an add, a shift, a mask and a subtraction written as float64; the GEMM; the
    sums to int64; the limbs' shifts, masks and adds; C's copy), each step one op for all digits
    (int32: 19 ops a call, int64: 40)."""
    g = torch.Generator().manual_seed(4)
    a, b = full_range(a_shape, dtype, g), full_range(b_shape, dtype, g)
    c = torch.empty(a_shape[:-1] + b_shape[-1:], dtype=dtype)
    int_dgemm.run(a, b, c)                    # (the constants made)
    kinds, ops = kernel_kinds(lambda: int_dgemm.run(a, b, c))
    assert np.array_equal(c.numpy(), numpy_product(a, b, torch.iinfo(dtype).bits))
    assert len(kinds) <= 9, sorted(map(str, kinds))
    assert len({name for name, _ in kinds} - {"aten.mm", "aten.bmm", "aten.copy", "aten._to_copy"}) <= 5
    assert ops <= (19 if dtype == torch.int32 else 40)


def test_the_library_rung_takes_integers_through_the_digits(monkeypatch):
    """run_cublas sends integer torch tensors to the digits (int8 into int32 to _int_mm where it
    takes them; here torch has no CUDA, so the digits), stacks in one call or a matrix a call past
    the workspace; its limits take integers with torch up to EXACT_K, CuPy's kernel past it."""
    from tilemm.ladder import library
    g = torch.Generator().manual_seed(5)
    for a_dtype, c_dtype in [(torch.int32, torch.int32), (torch.int64, torch.int64), (torch.int8, torch.int32),
                             (torch.int16, torch.int64)]:
        a, b = full_range((9, 61), a_dtype, g), full_range((61, 13), a_dtype, g)
        c = torch.empty(9, 13, dtype=c_dtype)
        library.run_cublas(a, b, c)
        assert np.array_equal(c.numpy(), numpy_product(a, b, torch.iinfo(c_dtype).bits)), (a_dtype, c_dtype)
    a, b = full_range((4, 9, 30), torch.int32, g), full_range((30, 5), torch.int32, g)
    monkeypatch.setattr(library, "cupy_installed", lambda: False)      # (with CuPy: its kernel, a launch a stack)
    for workspace in (2**30, 1):           # one batched call; a matrix a call
        monkeypatch.setattr(int_dgemm, "WORKSPACE_BYTES", workspace)
        c = torch.empty(4, 9, 5, dtype=torch.int32)
        library.run_stack(a, b, c)
        assert np.array_equal(c.numpy(), numpy_product(a, b, 32))
    fast = library.fast_product(a[0], b, "int32", "int32", "int32")
    assert np.array_equal(fast(a[0], b).numpy(), numpy_product(a[0], b, 32))
    assert library.limits(Problem(64, 64, 64, "int32")) is None
    monkeypatch.setattr(library, "installed", lambda name: name == "torch")
    assert library.limits(Problem(1, 1, int_dgemm.EXACT_K, "int64")) is None
    assert "over 2^33" in library.limits(Problem(1, 1, int_dgemm.EXACT_K + 1, "int32"))


def test_triton_loaded_is_triton_in_sys_modules(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", sys.modules.get("triton") or object())
    assert availability.triton_loaded()
    monkeypatch.delitem(sys.modules, "triton")
    assert not availability.triton_loaded()


@pytest.fixture
def h200_with_library(monkeypatch):
    """What the default sees on an H200 with the library rung running (the CPU tests have no cuBLAS)."""
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    monkeypatch.setattr(machine, "gpu", lambda: dataclasses.replace(machine.H100, sms=132))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(
        registry.get("cublas"), available=lambda: None, limits=lambda problem: None))


@pytest.mark.parametrize("loaded", [False, True])
def test_integers_take_the_library_until_triton_is_loaded(h200_with_library, monkeypatch, loaded):
    monkeypatch.setattr(availability, "triton_loaded", lambda: loaded)

    def default(m, n, k, result="int32", operands="int32", **layout):
        return dispatch.default_kernel("cuda:0", result, m, n, k, operands, **layout).name
    table = "tensorcore-int"              # what the int tables name for these shapes
    first = "cublas" if not loaded else table
    assert default(512, 512, 512) == first
    assert default(512, 512, 512, "int32", "int8", b_rows=True) == first
    assert default(512, 512, 512, "int64", "int64") == (first if not loaded else default(512, 512, 512, "int64", "int64"))
    assert default(1024, 1024, 1024) == first                    # 2^30 multiply-adds: the last size it covers
    assert default(1024, 1024, 1025) == table                    # past it: the table's, Triton or not
    assert default(4096, 4096, 4096, "int8", "int8") == table
    assert default(512, 512, 512, "bool", "bool") == (first if not loaded else table)
    assert default(512, 512, 512, "float32", "float32") == "cublas"     # floats: the library as ever
    assert default(4096, 4096, 4096, "int32", "int32", stacked=True) == table   # a stack: its own rule
    assert dispatch.library_before_triton("int32", 512, 512, 512) is not loaded
    assert not dispatch.library_before_triton("float64", 512, 512, 512)
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(
        registry.get("cublas"), limits=lambda problem: "refused"))
    assert default(512, 512, 512) == table                       # the library refuses: the table's


def test_only_a_problems_first_call_takes_the_library_before_triton(h200_with_library, monkeypatch):
    """The library before Triton serves a problem's first call: its plan is not kept, and the
    problem's next call takes the rung (which loads Triton), so a repeated product runs at the
    rung's speed, not the library's (int8 with B row-major: 160 against 19 µs at 32 x 3072 x 8192)."""
    monkeypatch.setattr(availability, "triton_loaded", lambda: False)
    monkeypatch.setattr(dispatch, "SERVED_BEFORE_TRITON", set())

    def choose(first_call, result="int32", operands="int8"):
        return dispatch.default_kernel("cuda:0", result, 512, 512, 512, operands, b_rows=True, first_call=first_call)
    first = choose(True)
    assert first.name == "cublas" and choose(False).name == "tensorcore-int"
    assert dispatch.library_for_first_call_only("int32", 512, 512, 512)
    assert not dispatch.library_for_first_call_only("int32", 512, 512, 512, stacked=True)   # a small stack's own rule
    assert not dispatch.library_for_first_call_only("float32", 512, 512, 512)     # floats: the library for every call


@pytest.mark.parametrize("repeatable", [True, False])
def test_a_plan_for_one_call_is_not_kept(monkeypatch, repeatable):
    from tilemm.plans import cache, calls, checks
    monkeypatch.setattr(cache, "PLANS", {})
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    key, _ = cache.lookup(a, b, None, None, None, {})
    plan = dataclasses.replace(checks.check(a, b), repeatable=repeatable)
    monkeypatch.setattr(dispatch, "SERVED_BEFORE_TRITON", set())
    value = calls.first_call(key, a, b, None, None, None, None, {}, lambda *args, **kw: plan)
    np.testing.assert_array_equal(value, a @ b)
    assert (key in cache.PLANS) is repeatable
    # a plan for one call is the library's before Triton: its problem's next call takes the rung
    assert dispatch.SERVED_BEFORE_TRITON == (set() if repeatable else {("float64", 2, 4, 3)})


def test_the_walk_takes_the_library_last_for_integers(h200_with_library, monkeypatch):
    """Where no rule names a rung, integers go to tensorcore-int before the library's digits
    (int8 into int32 at _int_mm's sizes keeps the library first), floats to the library first."""
    monkeypatch.setattr(availability, "triton_loaded", lambda: True)
    assert choice.preferred("int32", 64, 64, 64, operands="int32") is None
    assert dispatch.default_kernel("cuda:0", "int32", 64, 64, 64, "int32").name == "tensorcore-int"
    assert dispatch.walk("int32", 64, 64, 64, "int32")[-1].name == "cublas"
    assert dispatch.walk("float32", 64, 64, 64, "float32")[0].name == "cublas"
    assert dispatch.walk("int32", 64, 64, 64, "int8")[0].name == "cublas"          # _int_mm takes it
    assert dispatch.walk("int32", 64, 60, 64, "int8")[-1].name == "cublas"         # N = 60: it does not


# ---------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype, out_dtype", [("int32", None), ("int64", None), ("int16", None), ("int8", "int32"),
                                              ("int8", None), ("int16", "int64"), ("uint8", None)])
def test_the_library_rung_is_exact_on_the_gpu(dtype, out_dtype):
    import tilemm
    g = torch.Generator().manual_seed(3)
    torch_dtype = getattr(torch, dtype)
    for m, n, k in [(1, 1, 1), (5, 3, 7), (17, 24, 64), (100, 90, 3001), (0, 4, 5), (4, 5, 0)]:
        info = torch.iinfo(torch_dtype)
        a = torch.randint(info.min, info.max, (m, k), dtype=torch_dtype, generator=g)
        b = torch.randint(info.min, info.max, (k, n), dtype=torch_dtype, generator=g)
        expected = np.matmul(a.numpy(), b.numpy(), dtype=out_dtype)
        for x, y in [(a, b), (a.T.contiguous().T, b.T.contiguous().T)]:
            for _ in range(2):         # the plan's path, then a repeated call's
                c = tilemm.matmul(x.cuda(), y.cuda(), out_dtype=out_dtype, kernel="cublas")
                assert np.array_equal(c.cpu().numpy(), expected), (dtype, out_dtype, (m, n, k))
    a = torch.randint(-2**31, 2**31 - 1, (3, 40, 50), dtype=torch.int32, generator=g)
    b = torch.randint(-2**31, 2**31 - 1, (50, 30), dtype=torch.int32, generator=g)
    c = tilemm.matmul(a.cuda(), b.cuda(), kernel="cublas")                 # a stack
    assert np.array_equal(c.cpu().numpy(), np.matmul(a.numpy(), b.numpy()))


@pytest.mark.gpu
def test_the_digits_replay_in_a_cuda_graph_whose_capture_made_their_constants(monkeypatch):
    """Captured with no constants on the device yet (filled inside the graph, not kept), then
    replayed on new operand values: each replay's product exact."""
    g = torch.Generator().manual_seed(8)
    x, y = full_range((64, 96), torch.int64, g), full_range((96, 48), torch.int64, g)
    a, b, c = x.cuda(), y.cuda(), torch.empty(64, 48, dtype=torch.int64, device="cuda")
    int_dgemm.run(a, b, c)                     # cuBLAS's handle made outside the capture
    assert np.array_equal(c.cpu().numpy(), numpy_product(x, y, 64))
    from tilemm.engine import device_constants
    monkeypatch.setattr(device_constants, "KEPT", {})
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        int_dgemm.run(a, b, c)
    assert device_constants.KEPT == {}
    for seed in (9, 10):
        g = torch.Generator().manual_seed(seed)
        x, y = full_range((64, 96), torch.int64, g), full_range((96, 48), torch.int64, g)
        a.copy_(x)
        b.copy_(y)
        graph.replay()
        torch.cuda.synchronize()
        assert np.array_equal(c.cpu().numpy(), numpy_product(x, y, 64)), seed


FIRST_CALLS = """
import json, sys
import numpy as np
import torch
a = torch.randint(-2**31, 2**31 - 1, (512, 512), dtype=torch.int32, device="cuda")
b = torch.randint(-2**31, 2**31 - 1, (512, 512), dtype=torch.int32, device="cuda")
a8 = torch.randint(-128, 128, (32, 8192), dtype=torch.int8, device="cuda")     # (the rung's small-M program's
b8 = torch.randint(-128, 128, (8192, 3072), dtype=torch.int8, device="cuda")   # sizes, B row-major)
import tilemm
kernels = [tilemm.plan(a, b).kernel.name, tilemm.plan(a8, b8, out_dtype="int32").kernel.name]
c, c8 = tilemm.matmul(a, b), tilemm.matmul(a8, b8, out_dtype="int32")
exact = (np.array_equal(c.cpu().numpy(), a.cpu().numpy() @ b.cpu().numpy())
         and torch.equal(c8.double(), a8.double() @ b8.double()))        # (sums under 2^53: exact)
triton = "triton" in sys.modules
again = tilemm.matmul(a8, b8, out_dtype="int32")        # a repeated product: the rung's speed from now on
second = tilemm.plan(a8, b8, out_dtype="int32").kernel.name
exact = exact and torch.equal(again, c8)
print(json.dumps(dict(kernels=kernels, exact=exact, triton=triton, second=second)))
"""


@pytest.mark.gpu
def test_a_first_integer_product_loads_no_triton():
    """A fresh process's 512³ int32 product and 32 x 3072 x 8192 int8 product into int32 (B
    row-major) go to the library, exact, and leave Triton unloaded; the int8 product's second call
    takes the rung, which the library reads slowly there."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(FIRST_CALLS)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == dict(kernels=["cublas", "cublas"], exact=True,
                                                                   triton=False, second="tensorcore-int")
