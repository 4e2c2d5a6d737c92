"""The checker itself must fail wrong answers, or every green test above means nothing."""
import numpy as np

import pytest

from tilemm.numerics.accuracy import compare, compare_on_device, tolerance

from .cases import operands


def test_exact_integers_catch_one_bit():
    a, b = operands(1, 8, 9, 10, "int32")
    c = a @ b
    assert compare(c, a, b, "int32").ok
    c[3, 4] ^= 1
    v = compare(c, a, b, "int32")
    assert not v.ok and "1 of 72" in v.message


def test_float_bound_catches_a_large_error_and_passes_rounding():
    a, b = operands(2, 8, 9, 10, "float32")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert compare(ref.astype(np.float32), a, b, "float32").ok
    c = ref.astype(np.float32)
    c[1, 1] += 1e-3 * abs(c[1, 1]) + 1e-3
    assert not compare(c, a, b, "float32").ok


def test_nan_is_never_a_pass():
    a, b = operands(3, 4, 4, 4, "float64")
    c = a @ b
    c[0, 0] = np.nan
    assert not compare(c, a, b, "float64").ok
    c[0, 0] = np.inf
    assert not compare(c, a, b, "float64").ok


def test_wrong_shape_fails():
    a, b = operands(4, 3, 4, 5, "float64")
    assert not compare((a @ b)[:, :3], a, b, "float64").ok


def test_float16_uses_float32_accumulation_bound():
    rel_sum, rel_out = tolerance("float16", 100)
    assert rel_sum == 2 * 100 * 2.0**-24 and rel_out == 2.0**-11


def test_compare_on_device_checks_host_results_on_the_host():
    """Host results (NumPy, torch CPU tensors incl. bfloat16) take the host path and keep its verdicts."""
    torch = pytest.importorskip("torch")
    a, b = operands(3, 17, 9, 33, "float32")
    good = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert compare_on_device(good, a, b, "float32").ok
    bad = good.copy()
    bad[5, 4] += 1.0
    assert not compare_on_device(torch.from_numpy(bad), a, b, "float32").ok
    assert compare_on_device(torch.from_numpy(good).to(torch.bfloat16), a, b, "bfloat16").ok
    ia, ib = operands(4, 8, 8, 8, "int32")
    wrong = (ia @ ib) + 1
    assert not compare_on_device(wrong, ia, ib, "int32").ok


def test_float16_results_in_the_subnormal_range_pass_and_wrong_ones_fail():
    """float16 sums near zero round to multiples of 2^-24 (its subnormals): that is float16's answer,
    not an error; an error of a few spacings still fails."""
    a = np.array([[1e-3, -1e-3, 3e-4]], dtype=np.float16)
    b = np.array([[1e-3], [0.9e-3], [1e-3]], dtype=np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)            # ~4e-7: float16 subnormal
    c = ref.astype(np.float16)
    assert compare(c, a, b, "float16").ok
    assert not compare(c + np.float16(2.0 ** -20), a, b, "float16").ok


def test_stacks_and_vectors_are_held_to_the_bound_of_their_own_k():
    """K is a's last dimension: for a stack (2, 1, 8, 300) the second dimension (1) gave a bound
    300 times too tight, and a vector raised IndexError."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 1, 8, 300)).astype(np.float32), rng.standard_normal((300, 5)).astype(np.float32)
    c = np.matmul(a, b)                          # NumPy's own float32 sums: inside the bound
    assert compare(c, a, b, "float32").ok
    c_off = c.astype(np.float64) + 300 * 4 * 2.0 ** -24 * np.matmul(np.abs(a), np.abs(b))
    assert not compare(c_off.astype(np.float32), a, b, "float32").ok
    v = a[0, 0, 0]
    assert compare(np.matmul(v, b), v, b, "float32").ok
    assert compare(np.matmul(b.T, v[:300]), b.T, v, "float32").ok
