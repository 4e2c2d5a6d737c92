"""Properties of the exact integer route through float64 GEMMs on 11-bit digits
(tilemm.ladder.int_dgemm) and the library rung's use of it (run_cublas, run_stack, fast_product,
integer_limits), on CPU torch tensors: every operand dtype pair (int8, int16, int32, int64, uint8,
bool, mixed as narrow_operands hands them over) into an int32 or int64 C, values over the whole
range with the extremes, shapes of 0, 1 and odd sizes, 1-D operands, broadcast stacks, views
(transposed, stepped, expanded with zero strides) and a C that is itself a view, against NumPy
on Python integers wrapped to C's width."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from tilemm.ladder import int_dgemm, library
from tilemm.ladder.registry import Problem

torch = pytest.importorskip("torch")

OPERANDS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]
NUMPY = {torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
         torch.uint8: np.uint8, torch.bool: np.bool_}
RESULTS = [torch.int32, torch.int64]
SIZES = st.sampled_from([0, 1, 2, 3, 5, 7])
HALF_EDGE = 1024        # a digit's bounds: ±2^10 (the carry into the next digit)
PROPERTIES = settings(max_examples=100, deadline=None)


def exact(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    """NumPy's matmul on Python integers (no overflow), wrapped to `bits` as two's complement."""
    wide = np.matmul(a.astype(np.int64).astype(object), b.astype(np.int64).astype(object))
    half = 1 << (bits - 1)
    wrap = np.frompyfunc(lambda v: (int(v) + half) % (1 << bits) - half, 1, 1)
    return np.asarray(wrap(wide), dtype=object).astype(np.int64)


def values(dtype, shape):
    """Arrays of dtype over its whole range, its least and greatest values and 0, ±1 favoured."""
    if dtype == torch.bool:
        return hnp.arrays(np.bool_, shape)
    info = torch.iinfo(dtype)
    edges = st.sampled_from(sorted(v for v in {info.min, info.max, 0, 1, info.max - 1, info.min + 1, -1,
                                               HALF_EDGE - 1, HALF_EDGE, -HALF_EDGE, -HALF_EDGE - 1}
                                   if info.min <= v <= info.max))
    whole = st.integers(info.min, info.max)
    return hnp.arrays(NUMPY[dtype], shape, elements=st.one_of(edges, whole))


@st.composite
def tensor(draw, dtype, shape):
    """(tensor, the same values as a NumPy array): contiguous, transposed, stepped or expanded
    along a dimension of 1 (zero stride)."""
    shape = tuple(shape)
    layout = draw(st.sampled_from(["rows", "transposed", "stepped", "expanded"]))
    if layout == "expanded" and shape:
        dim = draw(st.integers(0, len(shape) - 1))
        small = draw(values(dtype, shape[:dim] + (1,) + shape[dim + 1:]))
        return torch.from_numpy(small.copy()).expand(shape), np.broadcast_to(small, shape)
    x = draw(values(dtype, shape))
    if layout == "transposed" and len(shape) >= 2:
        return torch.from_numpy(np.ascontiguousarray(np.swapaxes(x, -1, -2))).mT, x
    if layout == "stepped" and shape:
        big = torch.zeros(shape[:-1] + (2 * shape[-1] + 1,), dtype=dtype)
        big[..., 1::2] = torch.from_numpy(x.copy())
        return big[..., 1::2], x
    return torch.from_numpy(x.copy()), x


def result_buffer(draw, shape, dtype):
    """C: contiguous, transposed, or every other column of a wider buffer; poisoned (0xA5 bytes),
    with the buffer it lies in (to check nothing outside C is written)."""
    shape = tuple(shape)
    layout = draw(st.sampled_from(["rows", "transposed", "stepped"]))
    if layout == "transposed" and len(shape) >= 2:
        buffer = torch.empty(shape[:-2] + (shape[-1], shape[-2]), dtype=dtype)
        c = buffer.mT
    elif layout == "stepped" and shape:
        buffer = torch.empty(shape[:-1] + (2 * shape[-1],), dtype=dtype)
        c = buffer[..., ::2]
    else:
        buffer = torch.empty(shape, dtype=dtype)
        c = buffer
    buffer.fill_(poison(dtype))
    return c, buffer


def poison(dtype) -> int:
    """0xA5 in every byte, read as dtype."""
    return int.from_bytes(b"\xa5" * (torch.iinfo(dtype).bits // 8), "little", signed=True)


def check_c(c, buffer, expected):
    """C holds the expected values and the rest of its buffer still the poison."""
    assert c.shape == expected.shape
    assert np.array_equal(c.numpy(), expected)
    inside = torch.zeros(buffer.shape, dtype=torch.bool)
    if c.numel():
        inside.as_strided(c.shape, c.stride(), c.storage_offset()).fill_(True)
    assert (buffer[~inside] == poison(buffer.dtype)).all()


@st.composite
def operands(draw, batched: bool):
    """(a, b, a's values, b's values, C's shape, C's dtype): 1-D or 2-D operands, or broadcast stacks."""
    a_dtype, b_dtype = draw(st.sampled_from(OPERANDS)), draw(st.sampled_from(OPERANDS))
    m, k, n = draw(SIZES), draw(SIZES), draw(SIZES)
    if batched:
        batch = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3))
        a_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))):]
        b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))):]
        a_shape = a_batch + [m, k] if draw(st.integers(0, 2)) else [k]      # a vector has no batch
        b_shape = b_batch + [k, n] if draw(st.integers(0, 2)) else [k]
    else:
        a_shape = [m, k] if draw(st.integers(0, 3)) else [k]
        b_shape = [k, n] if draw(st.integers(0, 3)) else [k]
    a, a_np = draw(tensor(a_dtype, a_shape))
    b, b_np = draw(tensor(b_dtype, b_shape))
    c_shape = np.matmul(np.zeros(a_np.shape, np.int8), np.zeros(b_np.shape, np.int8)).shape
    return a, b, a_np, b_np, c_shape, draw(st.sampled_from(RESULTS))


@PROPERTIES
@given(st.data())
def test_run_cublas_is_numpy_s_exact_product(data):
    a, b, a_np, b_np, c_shape, c_dtype = data.draw(operands(batched=False))
    assert int_dgemm.takes(a, b, torch.empty(0, dtype=c_dtype))
    c, buffer = result_buffer(data.draw, c_shape, c_dtype)
    library.run_cublas(a, b, c)
    check_c(c, buffer, exact(a_np, b_np, torch.iinfo(c_dtype).bits))



@PROPERTIES
@given(st.data(), st.sampled_from(["one call", "a matrix a call"]))
def test_run_stack_broadcasts_as_numpy(data, path):
    a, b, a_np, b_np, c_shape, c_dtype = data.draw(operands(batched=True))
    c, buffer = result_buffer(data.draw, c_shape, c_dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library, "cupy_installed", lambda: False)     # the digit route, as without CuPy
        patch.setattr(int_dgemm, "WORKSPACE_BYTES", 2**40 if path == "one call" else 0)
        library.run_stack(a, b, c)
    check_c(c, buffer, exact(a_np, b_np, torch.iinfo(c_dtype).bits))


@PROPERTIES
@given(st.data(), st.integers(0, 4000))
def test_blocks_of_a_s_rows_give_the_same_product(data, workspace):
    """rows_a_block at any WORKSPACE_BYTES: blocks of one row, some rows, a ragged last block."""
    a_dtype, b_dtype = data.draw(st.sampled_from(OPERANDS)), data.draw(st.sampled_from(OPERANDS))
    m, k, n = data.draw(st.integers(0, 9)), data.draw(SIZES), data.draw(SIZES)
    a, a_np = data.draw(tensor(a_dtype, (m, k)))
    b, b_np = data.draw(tensor(b_dtype, (k, n)))
    c_dtype = data.draw(st.sampled_from(RESULTS))
    c, buffer = result_buffer(data.draw, (m, n), c_dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(int_dgemm, "WORKSPACE_BYTES", workspace)
        step = int_dgemm.rows_a_block(m, n, k, 6)
        assert 1 <= step <= max(1, m)
        int_dgemm.run(a, b, c)
    check_c(c, buffer, exact(a_np, b_np, torch.iinfo(c_dtype).bits))


def digit_bounds(bits: int) -> list:
    """Each digit's exact range for a signed integer of `bits`: [-1024, 1023] but the last, which
    holds what remains (about x / 2^(11 (count - 1)), rounded)."""
    count = int_dgemm.digit_count(bits)
    last = 1 << (bits - 1 - 11 * (count - 1))
    return [(-1024, 1023)] * (count - 1) + [(-last, last)]


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_digits_rebuild_each_integer_within_their_bounds(dtype, data):
    info = torch.iinfo(dtype)
    xs = data.draw(st.lists(st.one_of(st.sampled_from([info.min, info.max, 0, -1, 1023, 1024, -1024, -1025]),
                                      st.integers(info.min, info.max)), min_size=1, max_size=20))
    x = torch.tensor([v for v in xs if info.min <= v <= info.max] or [0], dtype=dtype)
    parts = int_dgemm.digits(x, int_dgemm.digit_count(info.bits))
    for part, (low, high) in zip(parts, digit_bounds(info.bits)):
        assert part.dtype == torch.float64 and low <= part.min() and part.max() <= high
    assert [sum(int(p[i]) << (11 * d) for d, p in enumerate(parts)) for i in range(len(x))] == x.tolist()


@pytest.mark.parametrize("dtype, extreme, last_digit", [
    (torch.int64, -2**63, -256), (torch.int64, 2**63 - 1, 256), (torch.int32, -2**31, -512),
    (torch.int32, 2**31 - 1, 512), (torch.int16, -2**15, -16), (torch.int16, 2**15 - 1, 16),
    (torch.int8, -128, -128), (torch.int8, 127, 127)])
def test_the_extremes_last_digit(dtype, extreme, last_digit):
    """The last digit's bounds, reached: ±256 for int64, ±512 for int32, far inside a digit's ±1024."""
    parts = int_dgemm.digits(torch.tensor([extreme], dtype=dtype), int_dgemm.digit_count(torch.iinfo(dtype).bits))
    assert int(parts[-1][0]) == last_digit
    assert sum(int(p[0]) << (11 * d) for d, p in enumerate(parts)) == extreme


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**53, 2**53), min_size=1, max_size=8), st.integers(0, 5), st.integers(0, 5),
       st.sampled_from([32, 64]))
def test_limbs_hold_the_shifted_sums_modulo_the_width(sums, i, j, bits):
    """limbs' bounds and congruence at every shift product() gives it, and wrapped's two's complement."""
    shift = 11 * (i + j)
    if shift >= bits:
        return
    t = torch.tensor(sums, dtype=torch.int64)
    low, high = int_dgemm.limbs(t, shift, bits)
    low_values = low.tolist() if low is not None else [0] * len(sums)
    high_values = high.tolist() if high is not None else [0] * len(sums)
    for s, lo, hi in zip(sums, low_values, high_values):
        assert 0 <= lo < 2**54 and abs(hi) < 2**44
        assert (lo + hi * 2**32 - s * 2**shift) % 2**bits == 0
    zeros = torch.zeros_like(t)
    value = int_dgemm.wrapped(low if low is not None else zeros, high if high is not None else zeros, bits)
    half = 1 << (bits - 1)
    assert value.tolist() == [(s * 2**shift + half) % 2**bits - half for s in sums]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_largest_digit_sums_stay_exact(dtype):
    """Every digit product at its largest (±2^20) in a long row: the sums' extremes are exact."""
    k = 5000
    info = torch.iinfo(dtype)
    for fill_a, fill_b in [(info.min, info.min), (info.min, info.max), (info.max, info.max), (-1024 * 2049, -1024)]:
        a = torch.full((2, k), fill_a, dtype=dtype)
        b = torch.full((k, 3), fill_b, dtype=dtype)
        c = torch.empty(2, 3, dtype=dtype)
        int_dgemm.run(a, b, c)
        half = 1 << (info.bits - 1)
        assert (c == (fill_a * fill_b * k + half) % (2 * half) - half).all()


@PROPERTIES
@given(st.data())
def test_fast_product_and_product_for_are_exact(data):
    operands_dtype = data.draw(st.sampled_from(["int8", "int32", "int64"]))
    result = "int32" if operands_dtype == "int8" else operands_dtype
    m, k, n = data.draw(SIZES), data.draw(SIZES), data.draw(SIZES)
    a, a_np = data.draw(tensor(getattr(torch, operands_dtype), (m, k)))
    b, b_np = data.draw(tensor(getattr(torch, operands_dtype), (k, n)))
    product = library.fast_product(a, b, operands_dtype, result, result)
    assert product is not None
    for call in (product, int_dgemm.product_for(a, b, result)):
        c = call(a, b)
        assert c.dtype == getattr(torch, result) and c.shape == (m, n)
        assert np.array_equal(c.numpy(), exact(a_np, b_np, torch.iinfo(c.dtype).bits))


@pytest.mark.parametrize("k, taken", [(int_dgemm.EXACT_K, True), (int_dgemm.EXACT_K + 1, False)])
def test_past_exact_k_the_route_refuses(k, taken):
    """At 2^33 the route takes the product, past it refuses: takes, matmul, product_for,
    fast_product, and integer_limits without CuPy (tensors of no elements, or on the meta device)."""
    a = torch.empty(0, k, dtype=torch.int32)
    b = torch.empty(k, 0, dtype=torch.int32, device="meta")
    c = torch.empty(0, 0, dtype=torch.int32)
    assert int_dgemm.takes(a, b, c) is taken
    assert (int_dgemm.product_for(a, b, "int32") is not None) is taken
    assert (library.fast_product(a, b, "int32", "int32", "int32") is not None) is taken
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library, "cupy_installed", lambda: False)
        why = library.integer_limits(Problem(4, 4, k, "int32"))
    assert (why is None) is taken
    if not taken:
        assert "2^33" in why and "CuPy is not installed" in why
        with pytest.raises(ValueError, match="2\\^33"):
            int_dgemm.matmul(a, torch.empty(k, 0, dtype=torch.int32), 32)


@pytest.mark.parametrize("vector", ["a", "b"])
def test_a_vector_times_a_stack_of_three_batch_dimensions_a_matrix_a_call(vector):
    """run_stack's matrix-a-call path with a vector operand: C has no row (or column) then, and
    its batch is not C's shape but its last two; read so, the stack's first index was lost
    (b[i1] for b[i0, i1], silently)."""
    stack = torch.arange(2 * 1 * 2 * 3 * 2, dtype=torch.int32).reshape(2, 1, 2, 3, 2)
    vec = torch.tensor([1, -2, 3], dtype=torch.int32)
    a, b = (vec, stack) if vector == "a" else (stack.mT, vec)
    c = torch.full(np.matmul(a.numpy(), b.numpy()).shape, -7, dtype=torch.int32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library, "cupy_installed", lambda: False)
        patch.setattr(int_dgemm, "WORKSPACE_BYTES", 0)
        library.run_stack(a, b, c)
    assert np.array_equal(c.numpy(), np.matmul(a.numpy(), b.numpy()))


def test_workspace_counts_the_digits_run_takes():
    """bool and uint8 operands are cast to C's dtype first: as many digits as C's (6 for int64)."""
    c = torch.empty(4, 4, dtype=torch.int64)
    a = torch.empty(4, 4, dtype=torch.int64)
    for narrow in (torch.uint8, torch.bool):
        b = torch.empty(4, 4, dtype=narrow)
        assert int_dgemm.workspace(a, b, c) == int_dgemm.workspace(a, b.to(torch.int64), c)
