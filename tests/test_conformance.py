"""Every kernel that can run here x every dtype it claims x the conformance shapes.

The output is poisoned before each launch; integers must be bit-exact with
numpy.matmul, floats within the bound of tilemm.numerics.accuracy; NaN must be seen.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilemm
from tilemm.contract import torch_rules as torch_contract
from tilemm.numerics.accuracy import compare
from tilemm.numerics.dtypes import compute_dtype

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


def small_values(rng, shape, dtype):
    """Integers of -20..20 (0..20 unsigned), floats of a standard normal."""
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0 if np.dtype(dtype).kind == "u" else -20, 21, shape).astype(dtype)


HOST_DTYPES = ["int8", "int16", "int32", "uint8", "uint32", "float16", "float32", "float64"]
BATCH = st.lists(st.integers(1, 3), max_size=2).map(tuple)


@settings(max_examples=150, deadline=None)
@given(kernel=st.sampled_from([None, "numpy", "cpu-naive", "cpu-tiled"]),
       dtypes=st.tuples(st.sampled_from(HOST_DTYPES), st.sampled_from(HOST_DTYPES)),
       out_dtype=st.one_of(st.none(), st.sampled_from(HOST_DTYPES)), kind=st.sampled_from(["numpy", "torch"]),
       batches=st.tuples(BATCH, BATCH), vectors=st.tuples(st.booleans(), st.booleans()),
       mnk=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 40)), into_out=st.booleans(),
       seed=st.integers(0, 2**16))
def test_random_calls_as_numpy(kernel, dtypes, out_dtype, kind, batches, vectors, mnk, into_out, seed):
    """Calls as users make them, answered as numpy.matmul answers: stacks that broadcast, vectors,
    mixed dtypes (refused for torch tensors, as torch refuses them), out_dtype (narrower ones too),
    out=, NumPy or torch; refused where NumPy refuses.
    This table found 1-D @ 1-D coming back as shape (1,) on torch, and narrower float out_dtypes
    multiplying the unrounded operands."""
    import torch
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    shape_a = (k,) if vectors[0] else batches[0] + (m, k)
    shape_b = (k,) if vectors[1] else batches[1] + (k, n)
    a, b = small_values(rng, shape_a, dtypes[0]), small_values(rng, shape_b, dtypes[1])
    try:
        with np.errstate(all="ignore"):
            want = np.matmul(a, b, dtype=out_dtype)
    except (TypeError, ValueError) as refusal:
        with pytest.raises(TypeError if isinstance(refusal, TypeError) else ValueError):
            tilemm.matmul(a, b, kernel=kernel, out_dtype=out_dtype)
        return
    numpy_type, want = type(want), np.asarray(want)       # a NumPy scalar for 1-D @ 1-D
    wrap = (lambda x: torch.from_numpy(np.asarray(x))) if kind == "torch" else (lambda x: x)
    if kind == "torch" and dtypes[0] != dtypes[1]:        # torch's rule for its tensors: one dtype
        # (its TypeError, or torch's NotImplementedError where its bmm has no kernel for A's dtype)
        with pytest.raises((torch_contract.TorchTypeError, NotImplementedError)):
            tilemm.matmul(wrap(a), wrap(b), kernel=kernel, out_dtype=out_dtype)
        return
    out = wrap(np.full(want.shape, 7, want.dtype)) if into_out else None
    with np.errstate(all="ignore"):
        got = tilemm.matmul(wrap(a), wrap(b), kernel=kernel, out_dtype=out_dtype, out=out)
    assert out is None or got is out
    if kind == "numpy" and not into_out:
        assert type(got) is numpy_type
    host = np.asarray(got.numpy() if kind == "torch" else got)
    assert host.shape == want.shape and host.dtype == want.dtype
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(host, want)
        return
    a2 = (a[None, :] if vectors[0] else a).astype(want.dtype)     # NumPy multiplies the cast operands
    b2 = (b[:, None] if vectors[1] else b).astype(want.dtype)
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2, b2 = np.broadcast_to(a2, batch + a2.shape[-2:]), np.broadcast_to(b2, batch + b2.shape[-2:])
    c2 = host.reshape(batch + (a2.shape[-2], b2.shape[-1]))
    for idx in np.ndindex(batch):
        verdict = compare(c2[idx], a2[idx], b2[idx], want.dtype.name)
        assert verdict.ok, f"{idx}: {verdict.message}"
