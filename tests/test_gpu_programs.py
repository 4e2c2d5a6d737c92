"""The GPU tier of tests/test_concurrency.py: tilemm inside a real program on the device.

Side-stream producers for every rung and dtype (the producer sleeps first, so a call that does not
wait for it reads stale operands and fails), CuPy streams, stream=, CUDA-graph capture of the
Triton rungs and the library, results and operands past 2^31 elements, eight threads on every rung
in a fresh process, four processes on one tuning cache. Run on the device machine:
TILEMM_TEST_GPU=1 python3 -m pytest tests/test_gpu_programs.py
"""
import json
import threading

import numpy as np
import pytest

import tilemm
from tilemm.numerics import arrays
from tilemm.numerics.accuracy import compare
from tilemm.numerics.data import random_operand
from tilemm.choose import default as dispatch
from tilemm.plans import cache as plan_cache

from .test_concurrency import run_in_threads, run_processes

pytestmark = pytest.mark.gpu

SIMT = ["naive", "naive-global", "uncoalesced", "tiled", "rect", "regblock"]
# (kernel, operand dtype, params): every GPU rung on every dtype it computes natively
CASES = ([(k, d, {}) for k in SIMT for d in ("int32", "int64", "float32", "float64")]
         + [("tensorcore", d, {}) for d in ("float16", "bfloat16")]
         + [("tensorcore", "bfloat16", {"stream_k": True}), ("tensorcore", "float16", {"split_k": 3})]
         + [("tensorcore-int", d, {}) for d in ("int8", "int16", "int32", "int64")]
         + [("tensorcore-f64", "float64", {}), ("tensorcore-f64", "float64", {"dmma": True})]
         + [("tensorcore-f32", "float32", {"precision": p}) for p in ("3xtf32", "tf32", "int8")]
         + [("cublas", d, {}) for d in ("int32", "int64", "float16", "bfloat16", "float32", "float64")]
         + [(None, d, {}) for d in ("int8", "int32", "int64", "float16", "bfloat16", "float32", "float64")])
TRITON_AND_LIBRARY = [c for c in CASES if c[0] and c[0] not in SIMT]
SLEEP_CYCLES = 30_000_000       # ~15 ms at the H100's clock: the producer is surely still running


def torch_pair(dtype, m, n, k, seed):
    """(A, B) as host arrays (float32 for bfloat16) and as torch CUDA tensors."""
    import torch
    rng = np.random.default_rng(seed)
    a, b = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
    to = (lambda x: arrays.host_bfloat16(x).cuda()) if dtype == "bfloat16" else (lambda x: torch.from_numpy(x).cuda())
    return a, b, to(a), to(b)


def laid_out(layout, a_t, b_t):
    """a_t and b_t as layout says: "n" as they are (row-major), "t" the same values column-major."""
    return tuple(x.T.contiguous().T if how == "t" else x for how, x in zip(layout, (a_t, b_t)))


def result_dtype(kernel, dtype):
    return "int32" if kernel == "tensorcore-int" and dtype == "int8" else None


def check(c, a, b, dtype, what, params=None):
    out = str(c.dtype).removeprefix("torch.")
    c_host = arrays.to_host(c, out) if out != "bfloat16" else c.float().cpu().numpy()
    a, b = (a.astype(out), b.astype(out)) if out not in (dtype, "bfloat16") else (a, b)
    if (params or {}).get("precision") == "tf32":   # TF32 by request: 10-bit products, not float32's bound
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.linalg.norm(c_host - ref) / np.linalg.norm(ref)
        assert err < 2e-3, f"{what}: relative error {err:.2e}, TF32's is ~3e-4"
        return
    verdict = compare(c_host, a, b, out)
    assert verdict.ok, f"{what}: {verdict.message}"


def shape_for(kernel):
    return (67, 45, 33) if kernel in SIMT else (1030, 1100, 520)


def late_producer(kernel, dtype, seed):
    """(A and B on the host, x, B on the GPU, a side stream) where x holds other values until the side
    stream, after sleeping, copies A into it: a call that does not wait for the side stream reads them."""
    import torch
    a, b, a_t, b_t = torch_pair(dtype, *shape_for(kernel), seed=seed)
    x = torch_pair(dtype, *shape_for(kernel), seed=seed + 1)[2]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.copy_(a_t)
    return a, b, x, b_t, side


@pytest.mark.parametrize("kernel, dtype, params", CASES)
def test_side_stream_producer(kernel, dtype, params):
    """with torch.cuda.stream(s): x.copy_(a); c = matmul(x, b): the call waits for the copy."""
    import torch
    a, b, x, b_t, side = late_producer(kernel, dtype, seed=1)
    with torch.cuda.stream(side):
        c = tilemm.matmul(x, b_t, kernel=kernel, out_dtype=result_dtype(kernel, dtype), **params)
    torch.cuda.synchronize()
    check(c, a, b, dtype, f"{kernel} {dtype} on a side stream", params)


@pytest.mark.parametrize("kernel, dtype, params", [c for c in CASES if c[1] != "bfloat16"][::3])
def test_explicit_stream_argument(kernel, dtype, params):
    """matmul(..., stream=s) from the default stream: queued on s, after s's producer."""
    import torch
    a, b, x, b_t, side = late_producer(kernel, dtype, seed=3)
    c = tilemm.matmul(x, b_t, kernel=kernel, stream=side, out_dtype=result_dtype(kernel, dtype), **params)
    torch.cuda.synchronize()
    check(c, a, b, dtype, f"{kernel} {dtype} with stream=", params)


@pytest.mark.parametrize("kernel, dtype, params", [c for c in CASES if c[1] != "bfloat16"][1::3])
def test_cupy_stream_producer(kernel, dtype, params):
    """CuPy arrays: the call is queued on CuPy's current stream."""
    cupy = pytest.importorskip("cupy")
    import torch
    rng = np.random.default_rng(5)
    m, n, k = shape_for(kernel)
    a, b, stale = (random_operand(rng, s, dtype) for s in ((m, k), (k, n), (m, k)))
    a_c, b_c, x = cupy.asarray(a), cupy.asarray(b), cupy.asarray(stale)
    cupy.cuda.Device().synchronize()
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        with torch.cuda.stream(torch.cuda.ExternalStream(side.ptr)):
            torch.cuda._sleep(SLEEP_CYCLES)
        x[...] = a_c
        c = tilemm.matmul(x, b_c, kernel=kernel, out_dtype=result_dtype(kernel, dtype), **params)
    side.synchronize()
    check(torch.as_tensor(c, device="cuda"), a, b, dtype, f"{kernel} {dtype} on a CuPy stream", params)


@pytest.mark.parametrize("kernel, dtype, params", [c for c in CASES if c[1] != "bfloat16"])
def test_cupy_operands_with_negative_strides(kernel, dtype, params):
    """CuPy views walked backwards (a[::-1, ::-1]), both operands: torch, which the Triton rungs
    and the library read them through, can't represent such strides and ended the process
    ("Storage size calculation overflowed") instead of raising."""
    cupy = pytest.importorskip("cupy")
    m, n, k = shape_for(kernel)
    rng = np.random.default_rng(11)
    a_big, b_big = random_operand(rng, (m + 3, k + 5), dtype), random_operand(rng, (k + 2, n + 7), dtype)
    a = cupy.asarray(a_big)[::-1, ::-1][:m, :k]
    b = cupy.asarray(b_big)[::-1][:k, ::-1][:, :n]
    assert min(a.strides) < 0 and min(b.strides) < 0
    c = tilemm.matmul(a, b, kernel=kernel, out_dtype=result_dtype(kernel, dtype), **params)
    assert isinstance(c, cupy.ndarray)
    check(c, cupy.asnumpy(a), cupy.asnumpy(b), dtype, f"{kernel} {dtype} {params}", params)


@pytest.mark.parametrize("kind, dtype", [(kind, dtype) for kind in ("torch", "cupy")
                                         for dtype in ("int8", "int32", "int64", "float16", "bfloat16", "float32",
                                                       "float64") if (kind, dtype) != ("cupy", "bfloat16")])
@pytest.mark.parametrize("kernel", [None, "cublas"])
def test_stacks_in_one_library_call(kind, dtype, kernel):
    """Stacks of matrices, their batch dimensions broadcast (a (3, 1, M, K) by (4, K, N)): the
    default takes the library's batched call for them; every matrix checked, a repeated call too."""
    cupy = pytest.importorskip("cupy") if kind == "cupy" else None
    rng = np.random.default_rng(12)
    a, b = random_operand(rng, (3, 1, 37, 70), dtype), random_operand(rng, (4, 70, 45), dtype)
    if kind == "cupy":
        a_d, b_d = cupy.asarray(a), cupy.asarray(b)
    else:
        import torch
        a_d, b_d = (arrays.host_bfloat16(x).cuda() if dtype == "bfloat16" else torch.from_numpy(x).cuda() for x in (a, b))
    plan = tilemm.plan(a_d, b_d, kernel=kernel)
    assert plan.kernel.name == "cublas"
    for c in (plan.execute(poison=True), tilemm.matmul(a_d, b_d, kernel=kernel), tilemm.matmul(a_d, b_d, kernel=kernel)):
        assert tuple(c.shape) == (3, 4, 37, 45)
        for i in range(3):
            for j in range(4):
                check(c[i, j], a[i, 0], b[j], dtype, f"{kind} {dtype} matrix ({i}, {j})")


def test_an_integer_stack_past_2_31_elements_runs_a_matrix_a_call():
    """CuPy's integer kernel indexes a whole stack in 32 bits: a stack whose C passes 2^31
    elements (3 x 27000 x 27000 int32) is multiplied a matrix a call, every matrix right."""
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(13)
    a = cupy.asarray(rng.integers(-100, 100, (3, 27000, 8)).astype(np.int32))
    b = cupy.asarray(rng.integers(-100, 100, (8, 27000)).astype(np.int32))
    c = tilemm.matmul(a, b, kernel="cublas")
    rows = [0, 1, 13501, 26999]
    for i in range(3):
        want = cupy.asnumpy(a[i, rows]).astype(np.int64) @ cupy.asnumpy(b).astype(np.int64)
        assert np.array_equal(cupy.asnumpy(c[i, rows]), want.astype(np.int32))
    del c
    cupy.get_default_memory_pool().free_all_blocks()


@pytest.mark.parametrize("kernel, dtype, params", TRITON_AND_LIBRARY)
def test_cuda_graph_capture(kernel, dtype, params):
    """Captured once, replayed on new operand values: each replay computes the new product."""
    m, n, k = (3000, 3000, 1024) if params.get("stream_k") else shape_for(kernel)
    _, _, x, b_t = torch_pair(dtype, m, n, k, seed=6)
    out_dtype = result_dtype(kernel, dtype)
    call = lambda: tilemm.matmul(x, b_t, kernel=kernel, out=c, out_dtype=out_dtype, **params)  # noqa: E731
    c = tilemm.matmul(x, b_t, kernel=kernel, out_dtype=out_dtype, **params)
    graph, _ = captured(call)
    check_graph_replays(graph, c, x, b_t, dtype, (m, n, k), (7, 8), f"{kernel} {dtype} replayed", params)


def captured(call):
    """call() run once on a side stream (as torch asks before a capture), then captured in a CUDA
    graph: (the graph, what the captured call returned)."""
    import torch
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        call()
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result


def check_graph_replays(graph, c, x, y, dtype, shape, seeds, what, params=None):
    """Each replay of graph, its operands x and y given new values first, leaves their product in c."""
    import torch
    m, n, k = shape
    for seed in seeds:
        a, b, a_t, b_t = torch_pair(dtype, m, n, k, seed=seed)
        x.copy_(a_t)
        y.copy_(b_t)
        graph.replay()
        torch.cuda.synchronize()
        check(c, a, b, dtype, what, params)


# ---- past 2^31 elements: right, or refused before launch ----

def check_rows(c, a_t, b_t, rows, what):
    """Rows of C against float64 on the GPU (exact for the small integers used here)."""
    import torch
    ref = a_t[rows].double() @ b_t.double()
    got = c[rows].double()
    tol = 1e-2 if c.dtype in (torch.bfloat16, torch.float16) else 1e-5
    err = ((got - ref).norm() / ref.norm()).item()
    assert err < tol, f"{what}: relative error {err:.2e} in rows {rows}"


def big(shape, dtype, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    if dtype in (torch.int8, torch.int32):
        return torch.randint(-8, 8, shape, generator=g, device="cuda", dtype=dtype)
    return torch.randn(shape, generator=g, device="cuda", dtype=dtype)


@pytest.mark.parametrize("kernel, dtype, m, n, k, out_dtype", [
    ("tensorcore", "bfloat16", 70000, 70000, 16, None),            # C: 4.9e9 elements
    ("tensorcore-f32", "float32", 50000, 50000, 32, None),         # C: 2.5e9
    ("tensorcore-int", "int8", 50000, 50000, 32, "int32"),
    ("tensorcore-int", "int32", 47000, 47000, 16, None),
    ("tensorcore-f64", "float64", 46500, 46500, 16, None),
    ("cublas", "float32", 50000, 50000, 16, None),
    (None, "int32", 47000, 47000, 16, None),                      # the default: tensorcore-int, not CuPy
    ("tensorcore", "bfloat16", 135000, 48, 16000, None),           # A: 2.16e9 elements, pointer program
    ("tensorcore", "bfloat16", 135000, 256, 16000, None),          # A: 2.16e9, TMA
    ("tensorcore-int", "int8", 135000, 128, 16000, "int32"),
    ("tensorcore-f32", "float32", 70000, 128, 31000, None),
    ("tensorcore-f64", "float64", 46500, 64, 46500, None),
])
def test_past_2_31_elements(kernel, dtype, m, n, k, out_dtype):
    import torch
    torch.cuda.empty_cache()
    a_t, b_t = big((m, k), getattr(torch, dtype), 1), big((k, n), getattr(torch, dtype), 2)
    c = tilemm.matmul(a_t, b_t, kernel=kernel, out_dtype=out_dtype)
    torch.cuda.synchronize()
    rows = [0, 1, m // 2, m - 2, m - 1]
    if out_dtype:
        a_t = a_t.to(getattr(torch, out_dtype))
    check_rows(c, a_t, b_t, rows, f"{kernel} {dtype} {m}x{n}x{k}")
    del a_t, b_t, c
    torch.cuda.empty_cache()


def test_float64_dmma_past_2_31_elements():
    """A C of 2.16e9 elements from the DMMA program (the default's choice here), stored through
    64-bit offsets, and C^T's strides: both operands row-major."""
    import torch
    from tilemm.ladder.tensorcore.r12_fp64 import takes_dmma
    m = n = 46500
    k = 256
    assert takes_dmma(m, n, k, {}), "the default should take the DMMA program here"
    torch.cuda.empty_cache()
    a_t, b_t = big((m, k), torch.float64, 1), big((k, n), torch.float64, 2)
    c = tilemm.matmul(a_t, b_t, kernel="tensorcore-f64")
    torch.cuda.synchronize()
    check_rows(c, a_t, b_t, [0, 1, m // 2, m - 2, m - 1], f"DMMA {m}x{n}x{k}")
    del a_t, b_t, c
    torch.cuda.empty_cache()


@pytest.mark.parametrize("shape", [(2049, 2051, 1001), (17, 300, 5), (2048, 2048, 1), (300, 4100, 33)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_float64_dmma_every_layout_and_odd_sizes(layout, shape):
    """The DMMA program in both of its forms (C, or C^T), on operands read as they are or copied
    into aligned rows, at sizes that are no tile's multiple, into a poisoned C."""
    import torch
    m, n, k = shape
    a, b, a_t, b_t = torch_pair("float64", m, n, k, seed=m + n + k)
    a_t, b_t = laid_out(layout, a_t, b_t)
    poison = torch.full((m, n), float("nan"), dtype=torch.float64, device="cuda")
    del poison
    check(tilemm.matmul(a_t, b_t, kernel="tensorcore-f64", dmma=True), a, b, "float64", f"DMMA {layout} {shape}")


@pytest.mark.parametrize("shape, layout", [((3001, 5003, 3999), "nn"), ((6007, 6007, 1999), "tt"),
                                           ((9001, 12001, 100), "tn"), ((33, 984, 9), "nt"), ((1, 5001, 100), "nn"),
                                           ((5001, 1, 77), "tn"), ((1, 5001, 0), "nn")])
def test_the_float64_default_on_its_table_classes(shape, layout):
    """kernel=None on float64 device operands of the classes tilemm.choose.by_shape gives `tensorcore-f64`
    (unaligned products of 1e11 flops and more, of K under 128 from 1e10, small skinny ones and
    vectors of K under 128; K = 0 an empty sum): the rung runs, and answers right."""
    import torch
    from tilemm.choose import by_shape as choice
    m, n, k = shape
    a, b, a_t, b_t = torch_pair("float64", m, n, k, seed=m + n + k)
    a_t, b_t = laid_out(layout, a_t, b_t)
    assert choice.preferred("float64", m, n, k, lds=dispatch.leading_dims(a_t, b_t, k, n)) == "tensorcore-f64"
    assert tilemm.plan(a_t, b_t).kernel.name == "tensorcore-f64"
    check(tilemm.matmul(a_t, b_t), a, b, "float64", f"default {layout} {shape}")


@pytest.mark.parametrize("kernel, dtype", [(k, "float32") for k in SIMT])
def test_32_bit_rungs_refuse_past_2_31_before_any_work(kernel, dtype):
    """The SIMT rungs index in 32 bits."""
    import torch
    a = torch.ones(1, device="cuda", dtype=getattr(torch, dtype)).expand(70000, 16)   # the shape alone
    b = torch.ones(1, device="cuda", dtype=getattr(torch, dtype)).expand(16, 70000)
    with pytest.raises(tilemm.KernelUnavailable, match="2\\^31"):
        tilemm.matmul(a, b, kernel=kernel)


@pytest.mark.parametrize("dtype, stack", [("int32", ()), ("int64", ()), ("int32", (2,))])
def test_library_integers_past_2_31_elements(dtype, stack):
    """The library rung's integers past 2^31 elements a matrix go through the float64 digits
    (64-bit indices), never CuPy's kernel, which indexes in 32 bits (it faulted at 47000²): a
    matrix, and a stack that would otherwise take CuPy's one launch."""
    import torch
    rows = 70000 if not stack else 47000
    a = torch.arange(16, device="cuda", dtype=getattr(torch, dtype)).expand(*stack, rows, 16)
    b = torch.ones(1, device="cuda", dtype=getattr(torch, dtype)).expand(*stack, 16, rows)
    c = tilemm.matmul(a, b, kernel="cublas")
    assert c.shape == (*stack, rows, rows) and c.dtype == a.dtype
    assert int(c.min()) == int(c.max()) == 120        # every entry: 0 + 1 + ... + 15
    del c
    torch.cuda.empty_cache()


# ---- threads and processes ----

def _every_rung_in_threads():
    """In a fresh process: eight threads call every case at once, twice (first and later calls)."""
    import torch
    errors = []
    start = threading.Barrier(8)

    def body(i):
        try:
            start.wait()
            for _ in range(2):
                for kernel, dtype, params in CASES[i::8] + CASES[(i + 3) % 8::8]:
                    a, b, a_t, b_t = torch_pair(dtype, *shape_for(kernel), seed=i)
                    c = tilemm.matmul(a_t, b_t, kernel=kernel, out_dtype=result_dtype(kernel, dtype), **params)
                    torch.cuda.current_stream().synchronize()
                    check(c, a, b, dtype, f"thread {i}: {kernel} {dtype}", params)
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=body, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("\n".join(errors))


def test_eight_threads_on_every_rung_from_a_fresh_process():
    assert run_processes(_every_rung_in_threads, [()], 600) == [0]


def _auto_in_a_process(cache_dir, seed):
    import os
    os.environ["TILEMM_CACHE_DIR"] = cache_dir
    a, b, a_t, b_t = torch_pair("float32", 512, 512, 512, seed)
    check(tilemm.matmul(a_t, b_t, kernel="auto"), a, b, "float32", f"auto in process {seed}")


def test_four_processes_tune_into_one_cache(tmp_path):
    from tilemm.choose import auto
    from tilemm.ladder.registry import Problem
    # a problem where auto times more than one rung (the shipped table leaves float32 unmeasured)
    assert len(auto.candidates("cuda", "float32", lambda kern: Problem(512, 512, 512, "float32"), 512, 512, 512)) > 1
    assert run_processes(_auto_in_a_process, [(str(tmp_path), i) for i in range(4)], 600) == [0] * 4
    entries = json.loads((tmp_path / "tuning.json").read_text())
    assert len(entries) == 1


@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float64"])
def test_the_check_on_the_gpu_fails_a_wrong_entry(dtype):
    """The bench and `tilemm check` check torch CUDA results on the GPU: it must still catch one
    wrong entry (and pass the right answer)."""
    import torch
    from tilemm.numerics.accuracy import compare_on_device
    a, b, da, db = torch_pair(dtype, 300, 200, 100, 7)
    c = tilemm.matmul(da, db, kernel="cublas")
    assert compare_on_device(c, a, b, dtype).ok
    c[17, 3] += 1 if dtype == "int32" else 0.5 * abs(float(c[17, 3])) + 1
    assert not compare_on_device(c, a, b, dtype).ok
    torch.cuda.synchronize()


# (kernel, dtype, params, (m, n, k)): repeated calls that replay the first call's launches
REPLAYED = [("tensorcore", "bfloat16", {}, (1024, 1024, 1024)), ("tensorcore", "float16", {}, (300, 512, 200)),
            ("tensorcore", "bfloat16", {}, (8192, 8192, 512)),                 # persistent: more tiles than SMs
            ("tensorcore", "bfloat16", {"stream_k": True}, (4096, 4160, 1024)),
            ("tensorcore", "bfloat16", {}, (1001, 1003, 999)),                 # rows copied to 16-byte strides
            ("tensorcore", "float16", {"align_rows": True}, (700, 650, 900)),  # ... and to 128-byte ones
            ("tensorcore", "bfloat16", {}, (16, 27, 59150)),         # split K, the pointer program: 48 runs
            ("tensorcore", "bfloat16", {}, (720, 1455, 139)),        # the pointer program on odd rows: 8 warps
            ("tensorcore", "float16", {}, (404, 108, 32491)),        # split K, TMA: 7 tiles in 18 runs each
            ("tensorcore", "bfloat16", {"split_k": 3}, (1000, 1000, 2000)),  # as asked, with many tiles
            ("tensorcore-f32", "float32", {"direct": False}, (1024, 1024, 1024)),   # 3xTF32: split passes, stream-K
            ("tensorcore-f32", "float32", {}, (512, 384, 700)),               # 3xTF32 in one launch
            ("tensorcore-f32", "float32", {"precision": "tf32"}, (700, 900, 300)),
            ("tensorcore-f64", "float64", {}, (2048, 2048, 256)),              # the DMMA program, C^T's form
            ("tensorcore-f64", "float64", {"dmma": True}, (1001, 1003, 999)),  # ... on rows copied aligned
            ("tensorcore-int", "int8", {}, (256, 512, 128)),                  # the Gluon program alone
            ("tensorcore-int", "int32", {}, (300, 200, 100)),                 # digit passes, then the product
            ("regblock", "float32", {}, (256, 256, 256)), ("regblock", "float64", {}, (300, 200, 100)),
            ("tiled", "int32", {}, (67, 45, 33)), ("naive", "int64", {}, (64, 32, 16))]


@pytest.mark.parametrize("kernel, dtype, params, shape", REPLAYED)
def test_repeated_calls_replay_on_new_operands(kernel, dtype, params, shape):
    """The first call records its launches; later ones with new operands (a view that starts inside
    its storage, a side stream whose producer is late, an operand 2 bytes off alignment, which the
    replay must leave to the usual path) each compute their own product."""
    import torch
    m, n, k = shape
    a, b, a_t, b_t = torch_pair(dtype, m, n, k, seed=11)
    check(tilemm.matmul(a_t, b_t, kernel=kernel, **params), a, b, dtype, f"{kernel} first call", params)
    key = plan_cache.call_key(a_t, b_t, kernel, None, None, params)
    known = plan_cache.PLANS[key]
    assert known.replay is not None, "this call's launches should be replayable"
    if getattr(known.replay, "single", None) is not None:         # one program: the shortest path
        assert known.fast is known.replay.quick is not None, "one program's replay should be the quick call"
    for seed in (12, 13):
        a, b, a_t, b_t = torch_pair(dtype, m, n, k, seed=seed)
        check(tilemm.matmul(a_t, b_t, kernel=kernel, **params), a, b, dtype, f"{kernel} replayed", params)
    big = torch.empty(m + 1, k, dtype=a_t.dtype, device="cuda")
    big[1:] = a_t
    view = big[1:] if (k * a_t.element_size()) % 16 == 0 else None
    if view is not None:
        check(tilemm.matmul(view, b_t, kernel=kernel, **params), a, b, dtype, f"{kernel} on a view", params)
    offset = torch.empty(m * k + 1, dtype=a_t.dtype, device="cuda")[1:].view(m, k)
    offset.copy_(a_t)
    check(tilemm.matmul(offset, b_t, kernel=kernel, **params), a, b, dtype, f"{kernel} off alignment", params)
    stale = torch.zeros_like(a_t)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        stale.copy_(a_t)
        c = tilemm.matmul(stale, b_t, kernel=kernel, **params)
    torch.cuda.synchronize()
    check(c, a, b, dtype, f"{kernel} replayed on a side stream", params)


@pytest.mark.parametrize("kernel, dtype, shape", [("tensorcore", "bfloat16", (64, 64, 64)),
                                                  ("tensorcore", "float16", (300, 200, 100)),
                                                  ("tensorcore", "bfloat16", (512, 2048, 2048)),   # TMA descriptors
                                                  ("tensorcore-f64", "float64", (129, 65, 33))])
def test_replayed_call_captured_in_a_cuda_graph(kernel, dtype, shape):
    """A repeated call of one program (the replay's shortest path, which a capture does not turn
    away) captured without out=: C comes from the graph's pool, and each replay of the graph
    computes the product of the operands' new values."""
    m, n, k = shape
    _, _, x, y = torch_pair(dtype, m, n, k, seed=30)
    tilemm.matmul(x, y, kernel=kernel)
    replay = plan_cache.PLANS[plan_cache.call_key(x, y, kernel, None, None, {})].replay
    assert replay is not None and replay.single is not None, "one program's launch should be replayed"
    graph, c = captured(lambda: tilemm.matmul(x, y, kernel=kernel))
    check_graph_replays(graph, c, x, y, dtype, shape, (31, 32), f"{kernel} {shape}: a replayed call, captured")


@pytest.mark.parametrize("shape", [(1001, 1003, 999), (1024, 512, 768)])
@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
def test_replayed_copies_of_transposed_operands(layout, shape):
    """Transposed operands whose rows TMA can't read as they are (odd K, M, N) are copied into
    aligned rows before the product; a repeated call copies its own operands again. Aligned ones
    are read through their transposes, whose descriptors a repeated call points at its own."""
    import torch
    m, n, k = shape
    for seed in (21, 22, 23):
        a, b, a_t, b_t = torch_pair("bfloat16", m, n, k, seed=seed)
        a_t, b_t = laid_out(layout, a_t, b_t)
        check(tilemm.matmul(a_t, b_t, kernel="tensorcore"), a, b, "bfloat16", f"tensorcore {layout} seed {seed}")
        assert plan_cache.PLANS[plan_cache.call_key(a_t, b_t, "tensorcore", None, None, {})].replay is not None


def test_threads_replaying_copies_on_one_stream_keep_their_own_scratch():
    """Four threads repeat a product whose operands are copied into scratch before it (transposed,
    odd sizes), all on torch's default stream: each thread's scratch is its own, so no call's
    product reads another's copy, whatever order their launches interleave in."""
    import torch
    m, n, k = 1001, 1003, 999
    pairs = []
    for seed in range(4):
        a, b, a_t, b_t = torch_pair("bfloat16", m, n, k, seed=40 + seed)
        pairs.append((a, b, *laid_out("tt", a_t, b_t)))
    tilemm.matmul(pairs[0][2], pairs[0][3], kernel="tensorcore")      # compiled and recorded once
    results = {}

    def work(i):
        results[i] = [tilemm.matmul(pairs[(i + j) % 4][2], pairs[(i + j) % 4][3], kernel="tensorcore")
                      for j in range(12)]
    run_in_threads(work, 4)
    torch.cuda.synchronize()
    assert len(results) == 4
    for i, cs in results.items():
        for j, c in enumerate(cs):
            a, b = pairs[(i + j) % 4][:2]
            check(c, a, b, "bfloat16", f"thread {i} call {j}")


def test_triton_3_6_launches_past_its_python_layers():
    """Where Triton's launcher has the layout tilemm.engine.direct_launch knows, a prepared
    program's runner is the direct one (elsewhere Triton's own: this test then says so)."""
    import torch
    from triton.backends import nvidia  # noqa: F401
    from triton.backends.nvidia import driver as nvidia_driver
    from tilemm.engine.direct_launch import KNOWN_BASE_FORMAT
    if getattr(nvidia_driver, "_BASE_ARGS_FORMAT", None) != KNOWN_BASE_FORMAT:
        pytest.skip("this Triton's launcher has another layout: Triton's runner launches")
    a, b, a_t, b_t = torch_pair("bfloat16", 1024, 1024, 1024, seed=5)
    tilemm.matmul(a_t, b_t, kernel="tensorcore")
    replay = plan_cache.PLANS[plan_cache.call_key(a_t, b_t, "tensorcore", None, None, {})].replay
    launch = replay.launches[-1][0]
    assert launch.runner.__qualname__.startswith("make_runner"), launch.runner
    cells = dict(zip(launch.runner.__code__.co_freevars, launch.runner.__closure__))
    tritons = cells["runner"].cell_contents

    def refuse(*args, **kwargs):
        raise AssertionError("Triton's runner launched: the direct launch was not taken")
    cells["runner"].cell_contents = refuse      # a launch that falls back to Triton's runner fails
    try:
        check(tilemm.matmul(a_t, b_t, kernel="tensorcore"), a, b, "bfloat16", "direct launch")
    finally:
        cells["runner"].cell_contents = tritons
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int32"])
@pytest.mark.parametrize("pinned_out", [True, False])
def test_out_of_core_on_the_gpu_with_pinned_operands(dtype, pinned_out):
    """Pinned host operands go to the GPU as 2-D copies a panel and (pinned C) come back the same
    way: 4 x 4 ragged blocks of C, K in four chunks, every entry checked; and a panel arriving in pieces."""
    import torch
    import tilemm.spread.outofcore as ooc
    m, n, k = 1000, 900, 1100
    rng = np.random.default_rng(3)
    a, b = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
    host = (lambda x: arrays.host_bfloat16(x)) if dtype == "bfloat16" else torch.from_numpy
    a_p, b_p = host(a).pin_memory(), host(b).pin_memory()
    size = a_p.element_size()
    limit = ooc.device_bytes(300, 300, 200, size, 4 if size == 2 else size, size)
    assert ooc.plan_blocks(m, n, k, size, 4 if size == 2 else size, size, limit).count(m, n, k) == (4, 4, 4)
    out = torch.full((m, n), 7, dtype=a_p.dtype).pin_memory() if pinned_out else None
    c = ooc.matmul(a_p, b_p, out=out, memory_limit=limit)
    assert out is None or c is out
    check(c, a, b, dtype, f"out of core, {dtype}, pinned out {pinned_out}")
    pieces = (ooc.ARRIVAL_PIECES, ooc.ARRIVAL_ROWS)
    try:                                           # A's panels in pieces of 100 rows
        ooc.ARRIVAL_PIECES, ooc.ARRIVAL_ROWS = 3, 100
        check(ooc.matmul(a_p, b_p, memory_limit=limit), a, b, dtype, f"out of core, {dtype}, panels in pieces")
    finally:
        ooc.ARRIVAL_PIECES, ooc.ARRIVAL_ROWS = pieces


def test_matmul_on_host_matrices_past_free_memory_goes_out_of_core(monkeypatch):
    """tilemm.matmul with a GPU rung on NumPy matrices whose A + B + C pass the free memory (made
    small here) streams them through tilemm.spread.outofcore; every entry checked."""
    import tilemm.spread.outofcore as ooc
    monkeypatch.setattr(ooc, "free_device_bytes", lambda device=None: 6 << 20)
    rng = np.random.default_rng(9)
    a, b = random_operand(rng, (1000, 1100), "float32"), random_operand(rng, (1100, 900), "float32")
    assert tilemm.plan(a, b, kernel="cublas").out_of_core
    c = tilemm.matmul(a, b, kernel="cublas")
    assert isinstance(c, np.ndarray) and compare(c, a, b, "float32").ok



@pytest.mark.parametrize("kernel,dtype,params", [c for c in CASES if c[0] is None or c[0] in SIMT or
                                                 c[2] == {} and c[1] in ("bfloat16", "int8", "float64")])
@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_stacks_of_transposed_matrices(kernel, dtype, params, kind):
    """Stacks whose matrices are F-ordered (a stack's .mT), times a stack, a matrix and a vector,
    torch and CuPy: numba-cuda's own index of such a stack gave its matrices C-ordered strides, and
    the SIMT rungs read every element from the wrong place."""
    import torch
    if kind == "cupy" and dtype == "bfloat16":
        pytest.skip("CuPy has no bfloat16")
    cupy = pytest.importorskip("cupy") if kind == "cupy" else None
    to = ((lambda x: arrays.host_bfloat16(x).cuda()) if dtype == "bfloat16" else
          (lambda x: torch.from_numpy(x).cuda()) if kind == "torch" else cupy.asarray)
    rng = np.random.default_rng(11)
    a = random_operand(rng, (3, 37, 21), dtype)                 # its .mT: (3, 21, 37), F-ordered
    b = random_operand(rng, (3, 29, 37), dtype)
    a_d, b_d = to(a).mT if kind == "torch" else to(a).transpose(0, 2, 1), to(b)
    b_d = b_d.mT if kind == "torch" else b_d.transpose(0, 2, 1)
    a, b = a.transpose(0, 2, 1), b.transpose(0, 2, 1)
    for b_h, b_x in ((b, b_d), (b[0], b_d[0]), (b[0, :, 0], b_d[0, :, 0])):
        c = tilemm.matmul(a_d, b_x, kernel=kernel, out_dtype=result_dtype(kernel, dtype), **params)
        check(c, a, b_h, dtype, f"{kernel} {kind}: (3, 21, 37).mT-ordered @ {b_h.shape}")
