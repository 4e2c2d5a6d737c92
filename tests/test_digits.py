"""The digit split behind exact integer matmul on int8 tensor cores (docs/exact_integers.md)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from tilemm.numerics import digits

from .cases import operands

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@given(x=hnp.arrays(np.int64, st.integers(1, 50), elements=st.integers(-2**63, 2**63 - 1)),
       ndigits=st.sampled_from([4, 8]))
def test_split_digits_are_int8_and_sum_back(x, ndigits):
    d = digits.split(x, ndigits)
    assert d.dtype == np.int8
    total = sum(d[i].astype(object) * 256**i for i in range(ndigits))
    mod = 2 ** (8 * ndigits)
    assert all((int(t) - int(v)) % mod == 0 for t, v in zip(total, x))


@given(m=st.integers(1, 6), n=st.integers(1, 6), k=st.integers(0, 70), dtype=st.sampled_from(INT_DTYPES),
       seed=st.integers(0, 2**16))
def test_digit_matmul_is_bit_exact(m, n, k, dtype, seed):
    a, b = operands(seed, m, n, k, dtype)
    np.testing.assert_array_equal(digits.matmul(a, b, dtype), np.matmul(a, b))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint64"])
def test_extremes(dtype):
    info = np.iinfo(dtype)
    for fill in (info.min, info.max, -1 if info.min < 0 else info.max, 0x55):
        a = np.full((3, 33), fill, dtype)
        b = np.full((33, 2), info.max, dtype)
        b[::2] = fill
        np.testing.assert_array_equal(digits.matmul(a, b, dtype), np.matmul(a, b))


def test_int64_long_k_needs_the_chunks():
    """All digits -128 (the value -128) with K = 2^17: the low digit pair sums to exactly 2^31,
    one past int32. Chunks of 2^17 - 1 keep it exact; one int32 sum would wrap."""
    k = 2**17
    a = np.full((1, k), -128, np.int64)
    b = np.full((k, 1), -128, np.int64)
    assert digits.matmul(a, b, "int64")[0, 0] == 128 * 128 * k
    unchunked = digits.int8_gemm(digits.split(a, 8)[0], digits.split(b, 8)[0])[0, 0]
    assert unchunked == -2**31  # what a single int32 accumulator would have given


def test_shift_pairs_are_the_digit_pairs_of_each_shift():
    for nd_a in range(1, 9):
        for nd_b in range(1, 9):
            for s in range(nd_a + nd_b + 1):
                want = [i for i in range(nd_a) for j in range(nd_b) if i + j == s]
                assert list(digits.shift_pairs(s, nd_a, nd_b)) == want, (s, nd_a, nd_b)
