"""Every kernel that can run here x every dtype it claims x the conformance shapes.

The output is poisoned before each launch; integers must be bit-exact with
numpy.matmul, floats within the bound of tilemm.accuracy; NaN must be seen.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilemm
from tilemm.accuracy import compare
from tilemm.dtypes import compute_dtype

from .cases import NUMPY_DTYPES, SHAPES, operands

from .conftest import ON_GPU

# Simulated CUDA kernels are slow: on the CPU they have their own, smaller table (test_simt.py).
RUNNABLE = [k for k in tilemm.kernels() if k.available() is None and (ON_GPU or k.device == "cpu")]


def claims(kernel, dtype):
    return compute_dtype(dtype, kernel.dtypes) is not None


CASES = [(k.name, d) for k in RUNNABLE for d in NUMPY_DTYPES if claims(k, d)]


def device_operands(kernel, a, b):
    """On the GPU, CUDA rungs get device tensors (any strides); on the host, NumPy arrays."""
    if ON_GPU and tilemm.kernel(kernel).device == "cuda":
        import torch
        return torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()  # transposed views stay transposed
    return a, b


def checked(kernel, a, b, **params):
    da, db = device_operands(kernel, a, b)
    c = tilemm.plan(da, db, kernel=kernel, **params).execute(poison=True)
    if not isinstance(c, np.ndarray):
        c = c.cpu().numpy()
    return c, compare(c, a, b, c.dtype.name)


@pytest.mark.parametrize("kernel,dtype", CASES)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_shapes(kernel, dtype, m, n, k):
    a, b = operands(m * 1000 + n * 10 + k, m, n, k, dtype)
    c, verdict = checked(kernel, a, b)
    assert c.dtype == np.matmul(a, b).dtype
    assert verdict.ok, verdict.message


@pytest.mark.parametrize("kernel", [k.name for k in RUNNABLE])
@pytest.mark.parametrize("layout", ["tn", "nt", "tt", "sn", "ns"])
def test_layouts(kernel, layout):
    for dtype in [d for d in ("int32", "float32", "float16") if claims(tilemm.kernel(kernel), d)]:
        a, b = operands(7, 19, 23, 21, dtype, layout)
        c, verdict = checked(kernel, a, b)
        assert verdict.ok, f"{dtype} {layout}: {verdict.message}"


FLOATS = ("float32", "float16", "float64")


@pytest.mark.parametrize("kernel", [k.name for k in RUNNABLE if any(claims(k, d) for d in FLOATS)])
def test_nan_and_inf_propagate(kernel):
    dtype = next(d for d in FLOATS if claims(tilemm.kernel(kernel), d))
    a, b = operands(3, 9, 10, 11, dtype)
    a[2, 4] = np.nan
    a[5, 0] = np.inf
    b[3, 7] = -np.inf
    c, verdict = checked(kernel, a, b)
    assert verdict.ok, verdict.message
    assert np.isnan(c[2]).all()
    np.testing.assert_array_equal(np.isnan(c), np.isnan(a @ b))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(a @ b))


@pytest.mark.parametrize("kernel", [k.name for k in RUNNABLE])
def test_integer_extremes_wrap(kernel):
    for dtype in [d for d in ("int32", "int64", "uint32", "int8") if claims(tilemm.kernel(kernel), d)]:
        info = np.iinfo(dtype)
        for fill in (info.min, info.max, -1 if info.min < 0 else info.max):
            a = np.full((5, 37), fill, dtype)
            b = np.full((37, 6), fill, dtype)
            b[::3] = info.max
            c, verdict = checked(kernel, a, b)
            assert verdict.ok, f"{dtype} fill {fill}: {verdict.message}"


@pytest.mark.parametrize("kernel", [k.name for k in RUNNABLE])
@given(m=st.integers(1, 24), n=st.integers(1, 24), k=st.integers(0, 40),
       dtype=st.sampled_from(NUMPY_DTYPES), layout=st.sampled_from(["nn", "tn", "nt", "ss"]),
       seed=st.integers(0, 2**16))
def test_random_problems(kernel, m, n, k, dtype, layout, seed):
    if not claims(tilemm.kernel(kernel), dtype):
        return
    a, b = operands(seed, m, n, k, dtype, layout)
    c, verdict = checked(kernel, a, b)
    assert verdict.ok, verdict.message


def test_every_cpu_kernel_is_covered():
    """The table above must reach the CPU rungs: a registry change can't silently drop them."""
    names = {k for k, _ in CASES}
    assert {"numpy", "cpu-naive", "cpu-tiled"} <= names


@pytest.mark.parametrize("params", [dict(block_m=4, block_n=4, block_k=4), dict(block_m=8, block_n=16, block_k=4),
                                    dict(block_m=16, block_n=4, block_k=32)])
def test_cpu_tiled_small_tiles_ragged(params):
    """Tiles much smaller than the matrix: many tiles, ragged in all three dimensions."""
    for dtype in ("float64", "int64"):
        a, b = operands(11, 37, 29, 41, dtype, "tn")
        c, verdict = checked("cpu-tiled", a, b, **params)
        assert verdict.ok, verdict.message
