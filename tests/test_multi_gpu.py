"""Several GPUs in one process: every rung computes on the GPU its operands live on, whichever
device is current, and leaves the current device as it found it.

Marked ``gpu`` and ``multigpu``: they run on a machine with two or more GPUs
(``TILEMM_TEST_GPU=1 pytest -m multigpu``) and are skipped elsewhere.
"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tilemm
from tilemm.numerics import accuracy
from tilemm.ladder import registry
from tilemm.numerics.data import operands

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytestmark.append(pytest.mark.skip(reason="needs two or more CUDA GPUs"))

# the dtype each rung is tried in: the first it computes of these
PREFERRED = ("float32", "float16", "float64", "int32", "complex64")
M, N, K = 67, 53, 45          # past no tile: ragged edges everywhere


def dtype_for(kernel) -> str | None:
    return next((d for d in PREFERRED if d in kernel.dtypes), None)


def cuda_rungs() -> list[str]:
    return [k.name for k in registry.kernels("cuda")]


def tensors(dtype: str, device: str, seed: int = 0):
    a, b = operands(seed, M, N, K, dtype)
    return a, b, torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)


def assert_right(c, a, b, dtype: str) -> None:
    host = c.cpu().numpy()
    verdict = accuracy.compare(host, a, b, dtype)
    assert verdict.ok, verdict.message


@pytest.fixture
def restore_device():
    before = torch.cuda.current_device()
    yield
    torch.cuda.set_device(before)


@pytest.mark.parametrize("data, current", [(1, 0), (0, 1)])
@pytest.mark.parametrize("name", cuda_rungs())
def test_every_rung_computes_on_its_operands_gpu(name, data, current, restore_device):
    kernel = registry.get(name)
    reason = kernel.available()
    if reason:
        pytest.skip(reason)
    dtype = dtype_for(kernel)
    if dtype is None:           # float8 alone: scales to give, test_scaled_matmul_on_another_device below
        pytest.skip(f"{name} takes float8 operands with scales alone")
    a, b, a_t, b_t = tensors(dtype, f"cuda:{data}")
    torch.cuda.set_device(current)
    for _ in range(3):                  # the first call, then the repeated calls' path
        c = tilemm.matmul(a_t, b_t, kernel=name)
        assert c.device == a_t.device
        assert torch.cuda.current_device() == current
        assert_right(c, a, b, dtype)
    out = torch.full((M, N), 7, dtype=c.dtype, device=a_t.device)
    assert tilemm.matmul(a_t, b_t, out=out, kernel=name) is out
    assert_right(out, a, b, dtype)
    assert torch.cuda.current_device() == current


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64", "int32", "int8", "complex64"])
def test_the_default_on_a_gpu_that_is_not_current(dtype, restore_device):
    torch.cuda.set_device(0)
    a, b = operands(3, 300, 257, 129, dtype if dtype != "bfloat16" else "float32")
    a_t, b_t = torch.from_numpy(a).to("cuda:1"), torch.from_numpy(b).to("cuda:1")
    if dtype == "bfloat16":
        a_t, b_t = a_t.bfloat16(), b_t.bfloat16()
        a, b = a_t.float().cpu().numpy(), b_t.float().cpu().numpy()
    extra = {"out_dtype": "int32"} if dtype == "int8" else {}
    for _ in range(3):
        c = tilemm.matmul(a_t, b_t, **extra)
        assert c.device == a_t.device and torch.cuda.current_device() == 0
        result = "int32" if dtype == "int8" else dtype
        host = c.float().cpu().numpy() if dtype == "bfloat16" else c.cpu().numpy()
        verdict = accuracy.compare(host, a.astype(result) if dtype == "int8" else a,
                                   b.astype(result) if dtype == "int8" else b, result)
        assert verdict.ok, verdict.message


def test_auto_on_a_gpu_that_is_not_current(restore_device, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    a, b, a_t, b_t = tensors("float16", "cuda:1")
    torch.cuda.set_device(0)
    c = tilemm.matmul(a_t, b_t, kernel="auto")
    assert c.device == a_t.device and torch.cuda.current_device() == 0
    assert_right(c, a, b, "float16")


@pytest.mark.parametrize("how", ["jit.trace", "inductor", "aot_eager"])
def test_fused_linears_on_a_gpu_that_is_not_current(how, restore_device):
    """tilemm's fused program (swapped Linears, kernel="tensorcore") on cuda:1 with cuda:0 current:
    under torch.jit.trace and Inductor the operands' GPU, as eager; a backend that sets no device
    for its launches (aot_eager) gets the program's clear refusal, never a read across devices."""
    import copy
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    model = model.to("cuda:1", torch.bfloat16)
    ref = copy.deepcopy(model)
    tilemm.nn.swap_linears(model, kernel="tensorcore", fuse_activations=True)
    x = torch.randn(2048, 512, device="cuda:1", dtype=torch.bfloat16)
    want = ref(x).float()
    if how == "jit.trace":
        with torch.no_grad():
            run = torch.jit.trace(model, (x,), check_trace=False)
    else:
        torch._dynamo.reset()
        run = torch.compile(model, backend=how, fullgraph=True)
    if how == "aot_eager":
        with pytest.raises(ValueError, match="current GPU is cuda:0"):
            run(x)
        with torch.cuda.device(1):
            got = run(x).float()
    else:
        got = run(x).float()
    assert torch.cuda.current_device() == 0
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_operands_on_two_gpus_or_out_on_another_are_refused_before_any_work(restore_device):
    a, b, a_t, b_t = tensors("float32", "cuda:0")
    with pytest.raises(ValueError, match="cuda:0.*cuda:1"):
        tilemm.matmul(a_t, b_t.to("cuda:1"))
    out = torch.full((M, N), 7.0, device="cuda:1")
    with pytest.raises(TypeError, match="cuda:1"):
        tilemm.matmul(a_t, b_t, out=out)
    assert bool((out == 7.0).all())


def test_an_out_on_another_gpu_meets_torchs_own_refusal(restore_device):
    """An out on another GPU than the operands', of their shape or another, or of another dtype:
    tilemm.matmul raises what torch.matmul raises, in its words, with its warnings (a product with
    a stack resizes the out before it is refused, as torch's does)."""
    from .test_numpy_conformance import torch_outcome
    for sa, sb in (((5, 3), (3, 2)), ((3,), (3,)), ((5, 3), (3,)), ((3,), (3, 2)), ((2, 5, 3), (3, 2)),
                   ((2, 5, 3), (2, 3, 2)), ((2, 5, 3), (3,)), ((5, 3), (2, 3, 2))):
        a, b = torch.ones(sa, device="cuda:0"), torch.ones(sb, device="cuda:0")
        shape = torch.matmul(a, b).shape
        for where in ("cuda:1", "cpu"):
            for out in (torch.full(shape, 7.0, device=where), torch.full((4, 4), 7.0, device=where),
                        torch.full(shape, 7.0, dtype=torch.float64, device=where), torch.empty(0, device=where)):
                ours = torch_outcome(tilemm.matmul, a, b, out.clone())
                assert ours == torch_outcome(torch.matmul, a, b, out.clone()), (sa, sb, tuple(out.shape), where)


def test_cupy_arrays_on_another_device():
    cupy = pytest.importorskip("cupy")
    a, b = operands(5, M, N, K, "float32")
    with cupy.cuda.Device(1):
        a_c, b_c = cupy.asarray(a), cupy.asarray(b)
    with cupy.cuda.Device(0):
        for name in ("naive", "tiled", "tensorcore-f32", "cublas", None):
            c = tilemm.matmul(a_c, b_c, kernel=name)
            assert c.device.id == 1 and cupy.cuda.runtime.getDevice() == 0
            assert accuracy.compare(cupy.asnumpy(c), a, b, "float32").ok, name


def test_host_operands_run_on_the_current_device(restore_device):
    a, b = operands(6, M, N, K, "float32")
    torch.cuda.set_device(1)
    for name in ("tiled", "tensorcore-f32", None):
        assert accuracy.compare(tilemm.matmul(a, b, kernel=name), a, b, "float32").ok, name
    assert torch.cuda.current_device() == 1


def test_a_thread_per_gpu(restore_device):
    errors = []

    def work(device: int):
        try:
            a, b, a_t, b_t = tensors("float16", f"cuda:{device}", seed=device)
            for name in ("tensorcore", "tiled", None):
                for _ in range(5):
                    assert_right(tilemm.matmul(a_t, b_t, kernel=name), a, b, "float16")
        except BaseException as error:      # noqa: BLE001 (reported below)
            errors.append(error)
    threads = [threading.Thread(target=work, args=(d,)) for d in range(torch.cuda.device_count())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_scaled_matmul_on_another_device(restore_device):
    if torch.cuda.get_device_capability(1) < (8, 9):
        pytest.skip("float8 tensor cores need compute capability 8.9")
    a = torch.randn(96, 128, device="cuda:1").to(torch.float8_e4m3fn)
    b = torch.randn(128, 80, device="cuda:1").to(torch.float8_e4m3fn)
    torch.cuda.set_device(0)
    c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32")
    assert c.device == a.device and torch.cuda.current_device() == 0
    torch.cuda.set_device(1)
    assert torch.equal(c, tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32"))   # as with its GPU current
    expected = a.cpu().double() @ b.cpu().double()
    size = a.cpu().double().abs() @ b.cpu().double().abs()
    # Hopper adds each 32-deep float8 product into an accumulator of about 13 bits (4 adds a 128-deep
    # K step), then float32: the bound test_scaled.py takes
    bound = 2.0**-24 * expected.abs() + (4 * 2.0**-13 + 2 * 128 * 2.0**-24) * size
    assert torch.all((c.cpu().double() - expected).abs() <= bound)


def test_out_of_core_on_another_device(restore_device):
    a, b = operands(7, 300, 200, 500, "float32")
    torch.cuda.set_device(0)
    c = tilemm.spread.outofcore.matmul(a, b, device="cuda:1", memory_limit=2 << 20)
    assert torch.cuda.current_device() == 0
    assert accuracy.compare(c, a, b, "float32").ok


DISTRIBUTED = textwrap.dedent(r"""
    import os, sys
    import numpy as np, torch, torch.distributed as dist
    import tilemm, tilemm.spread.distributed as td
    from tilemm.numerics import accuracy
    local = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", rank=local, world_size=2)   # no torch.cuda.set_device
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((301, 203)).astype(np.float32), rng.standard_normal((203, 157)).astype(np.float32)
    grid = td.Grid(2, 1)
    mine = td.matmul(td.shard(torch.from_numpy(a), grid, local, "A").to(f"cuda:{local}"),
                     td.shard(torch.from_numpy(b), grid, local, "B").to(f"cuda:{local}"), grid)
    assert mine.device == torch.device(f"cuda:{local}"), mine.device
    assert torch.cuda.current_device() == 0
    rows = td.block(301, 2, local)
    verdict = accuracy.compare(mine.cpu().numpy(), a[rows], b, "float32")
    assert verdict.ok, verdict.message
    dist.destroy_process_group()
    print("rank", local, "ok")
""")


def run_two_ranks(tmp_path, source: str, port: str) -> None:
    """source run as two processes, LOCAL_RANK 0 and 1 (NCCL on two GPUs): each must end well and say so."""
    script = tmp_path / "rank.py"
    script.write_text(source)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    procs = [subprocess.Popen([sys.executable, str(script)], env=dict(env, LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    assert all(f"rank {r} ok" in outputs[r] for r in range(2))


def test_distributed_with_local_rank_and_no_set_device(tmp_path):
    run_two_ranks(tmp_path, DISTRIBUTED, "29517")


WIDE_SUMS = textwrap.dedent(r"""
    import os
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import tilemm, tilemm.spread.distributed as td
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=local, world_size=2)
    # the first product of DTensors is one torch.compile traces: the rule is registered by it
    mesh = init_device_mesh("cuda", (2,))
    torch.manual_seed(0)                                          # the same A and B on both ranks
    x, y = torch.randn(301, 203, device="cuda"), torch.randn(203, 157, device="cuda")
    c = torch.compile(tilemm.matmul, backend="eager", fullgraph=True)(distribute_tensor(x, mesh, [Shard(0)]),
                                                                       distribute_tensor(y, mesh, [Replicate()]))
    assert c.placements == (Shard(0),) and torch.allclose(c.full_tensor(), x @ y, atol=1e-2, rtol=1e-3)
    # out_dtype that widens the sums: int32 products past 2^31 exact in int64, float32 ones in float64
    a = torch.arange(60000, 60000 + 301 * 203, dtype=torch.int64).reshape(301, 203) % 70000
    b = torch.arange(50000, 50000 + 203 * 157, dtype=torch.int64).reshape(203, 157) % 70000
    af, bf = torch.rand(301, 203, dtype=torch.float64) + 1, torch.rand(203, 157, dtype=torch.float64) + 1
    for rows, cols in ((1, 2), (2, 1)):
        grid = td.Grid(rows, cols)
        for x, y, dtype, wide in ((a, b, torch.int32, "int64"), (af, bf, torch.float32, "float64")):
            x, y = x.to(dtype), y.to(dtype)
            mine = td.matmul(td.shard(x, grid, local, "A").contiguous().cuda(),
                             td.shard(y, grid, local, "B").contiguous().cuda(), grid, out_dtype=wide)
            want = td.shard(x.to(getattr(torch, wide)) @ y.to(getattr(torch, wide)), grid, local, "C")
            assert mine.dtype == getattr(torch, wide), mine.dtype
            if dtype == torch.int32:
                assert torch.equal(mine.cpu(), want), (rows, cols)
            else:
                assert torch.allclose(mine.cpu(), want, rtol=1e-12, atol=0), (rows, cols)
    # one rank's block that requires grad: the same ValueError on both ranks, no transfer waiting
    grid = td.Grid(1, 2)
    try:
        td.matmul(torch.ones(4, 2, device="cuda", requires_grad=local == 1), torch.ones(4, 3, device="cuda"), grid)
        raise SystemExit("a block that requires grad was taken")
    except ValueError as e:
        assert "rank 1: " in str(e), e
    dist.destroy_process_group()
    print("rank", local, "ok")
""")


def test_distributed_wide_sums_bad_blocks_and_a_compiled_first_dtensor_product(tmp_path):
    run_two_ranks(tmp_path, WIDE_SUMS, "29518")
