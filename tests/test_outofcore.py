"""tilemm.spread.outofcore on the CPU: the same code the GPU runs, with a memory limit small enough to force
3 x 3 blocks of C or more and K split into chunks, on every dtype family, checked against NumPy."""
import numpy as np
import pytest

import tilemm.spread.outofcore as ooc
from tilemm.numerics.accuracy import compare
from tilemm.numerics.data import random_operand


def test_a_small_limit_forces_blocks_and_split_k():
    plan = ooc.plan_blocks(48, 48, 48, 4, 4, 4, limit=8000)
    rows, cols, chunks = plan.count(48, 48, 48)
    assert rows * cols >= 8 and chunks >= 2 and plan.device_bytes <= 8000


def test_blocks_are_shaped_to_copy_little():
    """128000^3 bf16 in 66.5 GiB (an H100's free memory): K stays whole, so A crosses once, and
    tall blocks make B cross twice, not once per block."""
    plan = ooc.plan_blocks(128000, 128000, 128000, 2, 4, 2, int(66.5 * 2**30))
    rows, cols, chunks = plan.count(128000, 128000, 128000)
    assert chunks == 1 and rows <= 2 and plan.device_bytes <= 66.5 * 2**30


def test_blocks_stay_whole_when_they_fit():
    assert ooc.plan_blocks(100, 200, 300, 2, 4, 2, limit=10**9).count(100, 200, 300) == (1, 1, 1)


def test_what_no_block_fits_is_said():
    with pytest.raises(ValueError, match="even 16 x 16 blocks .* need .* bytes"):
        ooc.plan_blocks(4096, 4096, 4096, 4, 4, 4, limit=1000)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int8", "float16", "bfloat16"])
@pytest.mark.parametrize("m, n, k", [(48, 45, 47), (50, 33, 100), (17, 3, 5)])
def test_out_of_core_matches_numpy(dtype, m, n, k):
    import torch
    rng = np.random.default_rng([m, n, k])
    a, b = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
    if dtype == "bfloat16":
        a_in, b_in = torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16()
    else:
        a_in, b_in = a, b
    size = 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize
    sums = 4 if size == 2 else size
    limit = ooc.device_bytes(16, 16, 12, size, sums, size)      # blocks of 16 at most, K in chunks of 12
    c = ooc.matmul(a_in, b_in, memory_limit=limit, device="cpu")
    got = c.float().numpy() if dtype == "bfloat16" else c
    assert compare(got, a, b, dtype).ok
    rows, cols, chunks = ooc.plan_blocks(m, n, k, size, sums, size, limit).count(m, n, k)
    assert rows * cols >= 2 and chunks >= 2 or k <= 12


def test_out_is_written_and_returned_and_k0_is_zeros():
    a, b = np.ones((5, 0), np.float32), np.ones((0, 4), np.float32)
    out = np.full((5, 4), np.nan, np.float32)
    assert ooc.matmul(a, b, out=out, device="cpu") is out and (out == 0).all()


@pytest.mark.parametrize("a, b, exc, match", [
    (np.ones((3, 4)), np.ones((5, 2)), ValueError, "mismatch"),
    (np.ones((3, 4)), [[1.0]], TypeError, "NumPy array or a torch"),
    (np.ones((3, 4), np.complex64), np.ones((4, 2), np.complex64), TypeError, "dtype complex64"),
    (np.ones(4), np.ones((4, 2)), ValueError, "2-D"),
])
def test_bad_input_is_refused_before_any_work(a, b, exc, match):
    with pytest.raises(exc, match=match):
        ooc.matmul(a, b, device="cpu")


def test_a_bad_out_is_refused():
    with pytest.raises(ValueError, match="out must be"):
        ooc.matmul(np.ones((3, 4)), np.ones((4, 2)), out=np.empty((2, 3)), device="cpu")


def test_matmul_on_host_matrices_past_the_gpu_goes_out_of_core(monkeypatch):
    """tilemm.matmul(a, b, kernel=<a GPU rung>) on host matrices whose A + B + C pass the GPU's free
    memory runs tilemm.spread.outofcore (here with no GPU: the rung's checks stood in for, the free memory
    made small, the CPU path of out of core); a product that fits keeps the in-core plan."""
    import tilemm
    from tilemm import api
    from tilemm.ladder import registry
    monkeypatch.setattr(registry.Kernel, "why_not", lambda self, problem, params: None)   # as on a GPU
    monkeypatch.setattr(ooc, "free_device_bytes", lambda device=None: 40 * 40 * 4 * 3)
    real = ooc.matmul
    monkeypatch.setattr(ooc, "matmul", lambda a, b, out=None: real(a, b, out=out, memory_limit=8000, device="cpu"))
    rng = np.random.default_rng(1)
    a, b = random_operand(rng, (50, 41), "float32"), random_operand(rng, (41, 47), "float32")
    plan = tilemm.plan(a, b, kernel="cublas")
    assert plan.out_of_core
    out = np.full((50, 47), np.nan, np.float32)
    assert plan.execute() is not None and compare(plan.execute(), a, b, "float32").ok
    assert tilemm.plan(a, b, kernel="cublas", out=out).execute() is out and compare(out, a, b, "float32").ok
    with pytest.raises(api.KernelUnavailable, match="out of core"):
        plan.prepare()
    small = random_operand(rng, (10, 10), "float32")
    assert not tilemm.plan(small, small, kernel="cublas").out_of_core
    assert not tilemm.plan(a, b, kernel="numpy").out_of_core          # a host rung: never


@pytest.mark.parametrize("which", ["a", "b", "a view of a"])
def test_an_out_that_is_an_operand_gets_the_product(which):
    """out holding an operand's memory: the blocks written early would be read back as later panels
    (a silent wrong answer); the product goes to a buffer of its own, then into out."""
    import torch
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((40, 40)), rng.standard_normal((40, 40))
    want = a @ b
    if which == "a view of a":
        whole = torch.from_numpy(np.concatenate([a, np.zeros((40, 40))], axis=1))
        a_in, out = whole[:, :40], whole[:, 20:60]
    else:
        a_in, b_in = a.copy(), b.copy()
        out = a_in if which == "a" else b_in
    c = ooc.matmul(a_in, b if which == "a view of a" else b_in, out=out, memory_limit=8000, device="cpu")
    assert c is out and np.allclose(np.asarray(c), want, atol=1e-12)


@pytest.mark.parametrize("limit", [float("nan"), float("inf")])
def test_a_memory_limit_that_is_no_number_of_bytes_is_named(limit):
    with pytest.raises(ValueError, match="memory_limit=.*finite number of bytes"):
        ooc.matmul(np.ones((3, 4)), np.ones((4, 2)), memory_limit=limit, device="cpu")


@pytest.mark.parametrize("which", ["a", "b", "out", "out over a"])
def test_negative_strides_are_read_and_written(which):
    """NumPy views torch can't represent (a[::-1]): operands copied, an out written through a buffer."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 40)), rng.standard_normal((40, 40))
    x = a[::-1] if which == "a" else a
    y = b[:, ::-1] if which == "b" else b
    want = x @ y
    out = {"out": np.full((40, 40), np.nan)[::-1], "out over a": a[::-1]}.get(which)
    c = ooc.matmul(x, y, out=out, memory_limit=8000, device="cpu")
    assert (out is None or c is out) and np.allclose(c, want, atol=1e-12)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_a_read_only_operand_is_viewed_not_copied():
    """A read-only NumPy operand (np.load(mmap_mode="r"), say) may be larger than the GPU's memory:
    viewed where it lies, as a writable one is (torch warns, and takes it), and multiplied."""
    from tilemm.spread.outofcore_args import host_tensor
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    a.flags.writeable = False
    assert host_tensor(a, "0").data_ptr() == a.ctypes.data
    assert np.allclose(ooc.matmul(a, b, memory_limit=8000, device="cpu"), a @ b, atol=1e-12)
