"""tilemm.spread.multi: one product over several devices from one process. On the CPU the same threads run
the same steps with devices=["cpu", ...] (streams and events do nothing there); the GPU tier runs on
a machine with two or more GPUs (marked gpu and multigpu)."""
import numpy as np
import pytest

import tilemm
from tilemm.spread import multi

torch = pytest.importorskip("torch")

SHAPES = [(13, 11, 7), (5, 3, 41), (2, 9, 3), (7, 5, 0), (1, 1, 1), (0, 4, 3)]


def reference(a, b):
    return a.double() @ b.double() if a.is_floating_point() else a.long() @ b.long()


def operands(m, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    return (torch.randint(-50, 50, s, generator=g, dtype=dtype) for s in ((m, k), (k, n)))


def assert_close(c, a, b, dtype):
    assert c.shape == (a.shape[0], b.shape[1]) and c.dtype == dtype
    want = reference(a, b)
    if not dtype.is_floating_point:
        assert torch.equal(c.long(), want)
    else:
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        assert torch.allclose(c.double(), want, atol=tol * max(1.0, float(want.abs().max()) if want.numel() else 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("count", [2, 3, 4])
def test_cpu_devices_run_the_peer_copy_pipeline(dtype, count):
    for m, n, k in SHAPES:
        a, b = operands(m, n, k, dtype)
        assert_close(multi.matmul(a, b, devices=["cpu"] * count, panel_k=4), a, b, dtype)


@pytest.mark.parametrize("count", [2, 4])
def test_cpu_devices_run_the_out_of_core_pipeline(count):
    a, b = operands(37, 29, 45, torch.float32, seed=1)
    c = multi.matmul(a, b, devices=["cpu"] * count, out_of_core=True, memory_limit=6000)
    assert_close(c, a, b, torch.float32)
    an, bn = a.numpy(), b.numpy()
    cn = multi.matmul(an, bn, devices=["cpu"] * count, out_of_core=True, memory_limit=6000)
    assert isinstance(cn, np.ndarray) and np.allclose(cn, an.astype(np.float64) @ bn, atol=1e-4)
    cn = multi.matmul(an, bn, devices=["cpu"] * count)
    assert isinstance(cn, np.ndarray) and np.allclose(cn, an.astype(np.float64) @ bn, atol=1e-4)


def test_tilemm_matmul_takes_devices():
    a, b = operands(9, 8, 7, torch.float32)
    assert_close(tilemm.matmul(a, b, devices=["cpu", "cpu"], panel_k=3), a, b, torch.float32)
    with pytest.raises(TypeError, match="kernel"):
        tilemm.matmul(a, b, devices=["cpu", "cpu"], kernel="numpy")


def test_the_split_moves_the_fewest_bytes():
    assert multi.split(65536, 65536, 65536, 4) == (2, 2)          # square: each GPU a quarter of C
    assert multi.split(100000, 1000, 1000, 4) == (4, 1)           # tall C: rows
    assert multi.split(1000, 100000, 1000, 4) == (1, 4)           # wide C: columns
    assert multi.split(64, 64, 64, 3) == (3, 1)                   # a prime count: rows
    assert multi.split(64, 64, 64, 1) == (1, 1)


@pytest.mark.parametrize("devices, message", [
    ([], "names no device"), ("cpu", "give a list"), (["cpu", 0], "all CUDA GPUs, or all 'cpu'"),
    ([7], "out of range"), ([True], "ints"), (["nonsense"], "not a device")])
def test_bad_devices_are_refused_before_any_work(devices, message):
    a, b = operands(4, 4, 4, torch.float32)
    with pytest.raises(ValueError, match=message):
        multi.matmul(a, b, devices=devices)


def test_a_gpu_named_twice_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)      # a host of four GPUs, as it reads
    with pytest.raises(ValueError, match="twice"):
        multi.checked_devices([0, 1, "cuda:1"])
    assert [d.index for d in multi.checked_devices([3, "cuda:0", torch.device("cuda", 2)])] == [3, 0, 2]


def test_bad_operands_are_refused():
    a, b = operands(4, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="on meta and cpu"):
        multi.matmul(a.to("meta"), b, devices=["cpu", "cpu"])
    with pytest.raises(ValueError, match="do not line up"):
        multi.matmul(a, b[:3], devices=["cpu", "cpu"])
    with pytest.raises(ValueError, match="2-D"):
        multi.matmul(a[0], b, devices=["cpu", "cpu"])
    with pytest.raises(TypeError, match="dtype"):
        multi.matmul(a.to(torch.complex64), b.to(torch.complex64), devices=["cpu", "cpu"])
    with pytest.raises(ValueError, match="panel_k"):
        multi.matmul(a, b, devices=["cpu", "cpu"], panel_k=0)


def test_operands_it_cannot_multiply_are_refused_before_any_thread(monkeypatch):
    """Operands on the meta device, operands that require grad (no autograd graph is recorded: an
    error, not a result that silently drops the gradient) and an out_of_core that is not a bool,
    each refused in the caller's thread before any device's thread starts."""
    monkeypatch.setattr(multi, "_run_threads", lambda *args: pytest.fail("a device's thread started"))
    a, b = operands(4, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="meta"):
        tilemm.matmul(a.to("meta"), b.to("meta"), devices=["cpu", "cpu"])
    with pytest.raises(TypeError, match="operand 1 requires grad"):
        tilemm.matmul(a, b.requires_grad_(), devices=["cpu", "cpu"])
    with pytest.raises(ValueError, match="out_of_core"):
        multi.matmul(a, b.detach(), devices=["cpu", "cpu"], out_of_core="yes")
    monkeypatch.undo()
    with torch.no_grad():           # no graph wanted: the product
        assert_close(multi.matmul(a, b, devices=["cpu", "cpu"]), a, b.detach(), torch.float32)


def test_an_error_in_one_thread_reaches_the_caller(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a device failed")
    monkeypatch.setattr(multi, "accumulate", broken)
    a, b = operands(8, 8, 8, torch.float32)
    with pytest.raises(RuntimeError, match="a device failed"):
        multi.matmul(a, b, devices=["cpu"] * 3)


needs_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two or more CUDA GPUs")


@pytest.mark.gpu
@pytest.mark.multigpu
@needs_gpus
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int32])
@pytest.mark.parametrize("home", [0, 1])
def test_gpu_operands_over_every_gpu(dtype, home):
    count = torch.cuda.device_count()
    a, b = operands(3001, 2049, 5003, dtype)
    c = multi.matmul(a.to(f"cuda:{home}"), b.to(f"cuda:{home}"), devices=list(range(count)), panel_k=1024)
    assert c.device == torch.device("cuda", home)
    assert_close(c.cpu(), a, b, dtype)


@pytest.mark.gpu
@pytest.mark.multigpu
@needs_gpus
def test_host_operands_out_of_core_on_every_gpu():
    a, b = operands(4099, 3001, 2051, torch.bfloat16)
    c = multi.matmul(a.pin_memory(), b.pin_memory(), devices=list(range(torch.cuda.device_count())),
                     memory_limit=48 << 20)                 # each GPU's block in several steps
    assert c.device.type == "cpu"
    assert_close(c, a, b, torch.bfloat16)


def test_torch_tensors_of_two_dtypes_get_torch_s_error():
    """torch's contract, as tilemm.matmul keeps it without devices=: torch.matmul refuses int32 x float32
    (RuntimeError); NumPy arrays of two dtypes still promote."""
    a, b = torch.ones(3, 4, dtype=torch.int32), torch.ones(4, 2)
    for call in (lambda: multi.matmul(a, b, devices=["cpu", "cpu"]),
                 lambda: tilemm.matmul(a, b, devices=["cpu", "cpu"], out_of_core=True)):
        with pytest.raises(RuntimeError, match="same dtype"):
            call()
    assert multi.matmul(a.numpy(), b.numpy(), devices=["cpu", "cpu"]).dtype == np.float64


def test_numpy_views_of_negative_strides_are_multiplied():
    """a[::-1], which torch can't view (torch.from_numpy refused it): multiplied from a copy."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((9, 7)), rng.standard_normal((7, 5))
    c = tilemm.matmul(a[::-1], b[:, ::-1], devices=["cpu", "cpu"])
    np.testing.assert_allclose(c, a[::-1] @ b[:, ::-1], atol=1e-12)


def test_an_ndarray_subclass_comes_back_as_numpy_matmul_gives_it():
    """np.matrix operands: np.matrix back, as numpy.matmul and tilemm.matmul without devices= give."""
    a = np.matrix(np.arange(12.0).reshape(3, 4))
    b = np.matrix(np.ones((4, 2)))
    for x, y in ((a, b), (np.asarray(a), b)):
        c = tilemm.matmul(x, y, devices=["cpu", "cpu"])
        assert type(c) is type(np.matmul(x, y)) is np.matrix
        np.testing.assert_array_equal(c, np.matmul(x, y))


def test_operands_tilemm_matmul_refuses_are_refused_with_devices_too():
    """A NumPy array beside a torch tensor, a sparse tensor: tilemm.matmul's errors, not an answer or
    torch's NotImplementedError from inside a device's thread."""
    a, b = operands(4, 4, 4, torch.float32)
    with pytest.raises(TypeError, match="same kind"):
        tilemm.matmul(a.numpy(), b, devices=["cpu", "cpu"])
    with pytest.raises(TypeError, match="sparse"):
        tilemm.matmul(a.to_sparse(), b, devices=["cpu", "cpu"])
