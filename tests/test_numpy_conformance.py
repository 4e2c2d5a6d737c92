"""tilemm.matmul answers as numpy.matmul answers, case by case, each checked against NumPy itself:
out= (its dtype casts, its shapes, by position), the result's dtype object on every call, bool,
complex, longdouble, ndarray subclasses; on the host, under the simulator and interpreter, and
(tests marked gpu) on the GPU."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilemm
from tilemm.numerics.accuracy import compare, compare_on_device
from tilemm.contract.numpy_rules import OutputCastingError
from tilemm.numerics.data import operands

from .conftest import ON_GPU

TYPECODES = "?bBhHiIlLqQefdgFDG"      # every numeric dtype NumPy multiplies, each spelling of its int64
HOST_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
               "float64", "complex64", "complex128", "longdouble", "clongdouble"]
SMALL = dict(block_m=16, block_n=16, block_k=16, num_warps=1, num_stages=1)     # the Triton rungs, interpreted


def values(rng, shape, dtype):
    """Small values of dtype (both parts of complex ones): sums stay exact where NumPy's are."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -9, 10, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def numpy_outcome(call):
    """(value, None) or (None, the exception NumPy raised)."""
    try:
        with np.errstate(all="ignore"):
            return call(), None
    except (TypeError, ValueError) as refusal:
        return None, refusal


def same_answer(got, want):
    """got is exactly what NumPy gave: type, dtype object (char too), shape, values."""
    assert type(got) is type(want)
    assert got.dtype == want.dtype and got.dtype.char == want.dtype.char
    assert np.shape(got) == np.shape(want)
    if np.asarray(want).dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(np.asarray(got, np.clongdouble), np.asarray(want, np.clongdouble), rtol=1e-5,
                                   atol=1e-5)


# --- out=: its dtype ------------------------------------------------------------------------------

def test_an_uncastable_out_raises_numpys_type_error_with_numpys_words():
    a, b, out = np.ones((5, 2)), np.ones((2, 2)), np.zeros((5, 2), np.int32)
    _, theirs = numpy_outcome(lambda: np.matmul(a, b, out=out))
    with pytest.raises(TypeError) as ours:
        tilemm.matmul(a, b, out=out)
    assert isinstance(ours.value, OutputCastingError) and isinstance(theirs, TypeError)
    assert str(ours.value) == str(theirs)
    assert not out.any()                                  # refused before any work


@pytest.mark.parametrize("result", HOST_DTYPES)
def test_every_out_dtype_as_numpy(result):
    """Each result dtype into an out of each dtype: written where NumPy writes (cast with
    "same_kind"), refused with a TypeError where NumPy refuses."""
    rng = np.random.default_rng(len(result))
    a, b = values(rng, (3, 4), result), values(rng, (4, 2), result)
    for into in HOST_DTYPES:
        want_out, got_out = np.full((3, 2), 7, into), np.full((3, 2), 7, into)
        want, refusal = numpy_outcome(lambda: np.matmul(a, b, out=want_out))
        if refusal is not None:
            with pytest.raises(TypeError, match="Cannot cast ufunc 'matmul' output"):
                tilemm.matmul(a, b, out=got_out)
            continue
        with np.errstate(all="ignore"):
            got = tilemm.matmul(a, b, out=got_out)
        assert got is got_out, into
        same_answer(got, want)


@pytest.mark.parametrize("kernel", ["numpy", "cpu-naive", "cpu-tiled"])
@pytest.mark.parametrize("operands,into", [(("int8", "int16"), "int8"), (("float64", "float64"), "float32"),
                                           (("int32", "int32"), "float64"), (("float32", "float32"), "float16"),
                                           (("uint8", "uint8"), "int16"), (("bool", "bool"), "int32")])
def test_out_cast_on_each_host_rung(kernel, operands, into):
    """Computed in the result's dtype, then cast: int16 sums past int8 wrap once, at the end."""
    rng = np.random.default_rng(3)
    a = values(rng, (6, 40), operands[0])
    a = a * 9 if a.dtype.kind in "iu" else a                  # int8 * int16 sums past int8's range
    b = values(rng, (40, 5), operands[1])
    want = np.matmul(a, b, out=np.empty((6, 5), into))
    out = np.empty((6, 5), into)
    assert tilemm.matmul(a, b, out=out, kernel=kernel) is out
    same_answer(out, want)


# --- out=: its shape, by position -----------------------------------------------------------------

OUT_SHAPES = [
    ((3,), (3,), (1, 1)), ((3,), (3,), ()), ((3,), (3,), (1,)), ((3,), (3,), (2,)), ((3,), (3,), (1, 1, 1)),
    ((3,), (3,), (3, 2)), ((5, 2), (2, 2), (5, 2)), ((5, 2), (2, 2), (3, 5, 2)), ((5, 2), (2, 2), (1, 5, 2)),
    ((5, 2), (2, 2), (5, 1)), ((5, 2), (2, 2), (2, 5)), ((5, 2), (2, 2), (1, 1, 1)), ((5, 2), (2, 2), (5,)),
    ((5, 2), (2, 2), ()), ((3, 5, 2), (2, 2), (5, 2)), ((3, 5, 2), (2, 2), (1, 5, 2)), ((3, 5, 2), (2, 2), (2, 5, 2)),
    ((3, 5, 2), (2, 2), (4, 3, 5, 2)), ((3, 5, 2), (2, 2), (4, 1, 5, 2)), ((5, 2), (2,), (5,)), ((5, 2), (2,), (5, 1)),
    ((5, 2), (2,), (1, 5)), ((2,), (2, 4), (4,)), ((2,), (2, 4), (3, 4)), ((3, 1, 5, 2), (4, 2, 2), (3, 4, 5, 2)),
    ((3, 1, 5, 2), (4, 2, 2), (3, 1, 5, 2)), ((0, 5, 2), (2, 2), (0, 5, 2)), ((5, 0), (0, 2), (5, 2)),
    ((5, 0), (0, 2), (2, 5, 2)),
]


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
@pytest.mark.parametrize("shape_a,shape_b,out_shape", OUT_SHAPES)
def test_out_shapes_as_numpy(kernel, shape_a, shape_b, out_shape):
    """The shapes NumPy's gufunc takes for out (leading loop dimensions that the stack broadcasts
    to, the result repeated along them), refused with a ValueError where NumPy refuses them."""
    rng = np.random.default_rng(sum(out_shape))
    a, b = values(rng, shape_a, "int64"), values(rng, shape_b, "int64")
    want, refusal = numpy_outcome(lambda: np.matmul(a, b, out=np.full(out_shape, 7, np.int64)))
    out = np.full(out_shape, 7, np.int64)
    if refusal is not None:
        with pytest.raises(ValueError, match="non-broadcastable output operand|mismatch in its core dimension"):
            tilemm.matmul(a, b, out=out, kernel=kernel)
        assert (out == 7).all()
        return
    assert tilemm.matmul(a, b, out=out, kernel=kernel) is out
    same_answer(out, want)


def test_a_vector_dot_into_a_one_by_one_out():
    v = np.array([1, 0, 2])
    out = np.zeros((1, 1), np.int64)
    assert tilemm.matmul(v, v, out=out) is out and out.tolist() == [[5]]


def test_a_non_broadcastable_out_is_named_as_numpy_names_it():
    with pytest.raises(ValueError, match=r"non-broadcastable output operand with shape \(1,5,2\) doesn't match the "
                                         r"broadcast shape \(3,5,2\)"):
        tilemm.matmul(np.ones((3, 5, 2)), np.ones((2, 2)), out=np.zeros((1, 5, 2)))


def test_positional_and_tuple_out():
    a, b = np.ones((4, 3)), np.ones((3, 2))
    out = np.zeros((4, 2), np.float32)
    assert tilemm.matmul(a, b, out) is out and (out == 3).all()
    again = np.zeros((4, 2))
    assert tilemm.matmul(a, b, (again,)) is again and (again == 3).all()
    with pytest.raises(TypeError):                       # NumPy: "cannot specify 'out' as both ..."
        tilemm.matmul(a, b, out, out=again)
    with pytest.raises(ValueError, match="exactly one entry"):
        tilemm.matmul(a, b, out=(out, again))


def test_a_read_only_out_is_refused():
    out = np.zeros((2, 2))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        tilemm.matmul(np.ones((2, 2)), np.ones((2, 2)), out=out)


@pytest.mark.parametrize("operands", [(np.ones((2, 2)), np.ones((2, 2))), (3.0, np.ones((2, 2))),
                                      (np.array([["a", "b"]]), np.ones((2, 2)))], ids=["float", "scalar", "str"])
def test_a_read_only_out_is_refused_before_its_dtype_and_the_operands(operands):
    """NumPy's first refusal: before the out's cast (float64 into int32), a 0-d operand, a dtype
    with no loop."""
    out = np.zeros((2, 2), np.int32)
    out.flags.writeable = False
    for matmul in (np.matmul, tilemm.matmul):
        with pytest.raises(ValueError, match="read-only"):
            matmul(*operands, out=out)


def test_a_repeated_call_with_out_checks_and_writes_again():
    """The plan cache keys on out's kind, dtype and shape: a second call writes its own answer."""
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    for scale in (1, 3):
        out = np.zeros((2, 2), np.int8)
        tilemm.matmul(a * scale, a.T.copy(), out=out)
        np.testing.assert_array_equal(out, np.matmul(a * scale, a.T.copy(), out=np.zeros((2, 2), np.int8)))


# --- torch outs: torch.matmul's rules ----------------------------------------------------------------

def torch_outcome(f, a, b, out, **keywords):
    """(the error's class and words, or out's shape, strides and values; the warnings' words)."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = f(a, b, out=out, **keywords)
            seen = (got is out, tuple(out.shape), out.stride(), out.tolist())
        except RuntimeError as error:
            seen = (RuntimeError, str(error))
    return seen, [str(w.message).split(" (Triggered internally")[0] for w in caught]


def test_torch_outs_follow_torchs_rules():
    """torch.matmul(out=) resizes an out of another shape (warning where it held elements) and
    refuses another dtype, in its words: tilemm.matmul does the same for torch tensors."""
    torch = pytest.importorskip("torch")
    for sa, sb in (((5, 3), (3, 2)), ((3,), (3,)), ((5, 3), (3,)), ((3,), (3, 2)), ((2, 5, 3), (3, 2)),
                   ((2, 5, 3), (2, 3, 2)), ((2, 5, 3), (3,))):
        a, b = torch.ones(sa, dtype=torch.float64), torch.ones(sb, dtype=torch.float64)
        for out in (torch.zeros(5, 2, dtype=torch.float32), torch.zeros(5, 2, dtype=torch.int32),
                    torch.zeros(4, 4, dtype=torch.float64), torch.zeros(3, 5, 2, dtype=torch.float64),
                    torch.empty(0, dtype=torch.float64), torch.zeros(2, 5, dtype=torch.float64).T):
            ours = torch_outcome(tilemm.matmul, a, b, out.clone() if out.is_contiguous() else out.T.clone().T)
            theirs = torch_outcome(torch.matmul, a, b, out.clone() if out.is_contiguous() else out.T.clone().T)
            assert ours == theirs, (sa, sb, tuple(out.shape), out.dtype)


def test_a_resized_out_is_never_a_repeated_call_s():
    """A call that resized its out keeps no plan under the key of the out it was given: the next
    call with such an out (empty again) is resized and written as the first was, not replayed into
    the empty one."""
    torch = pytest.importorskip("torch")
    from tilemm.plans import cache
    a, b = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    for _ in range(3):
        out = torch.empty(0, dtype=torch.float64)
        assert tilemm.matmul(a, b, out=out) is out and out.shape == (5, 2)
        assert torch.allclose(out, a @ b)
        assert cache.lookup(a, b, None, torch.empty(0, dtype=torch.float64), None, {})[1] is None


def test_torch_outs_under_numpys_keywords_take_numpys_rules():
    """A call that names NumPy's keywords (casting=, dtype=, ...) takes NumPy's rules for its out
    too: a same_kind cast into it, NumPy's shapes, nothing resized."""
    torch = pytest.importorskip("torch")
    a, b = torch.ones(5, 3, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    narrower = torch.zeros(5, 2, dtype=torch.float32)
    assert tilemm.matmul(a, b, out=narrower, casting="same_kind") is narrower and bool((narrower == 3).all())
    with pytest.raises(OutputCastingError, match=r"dtype\('float64'\) to dtype\('int32'\)"):
        tilemm.matmul(a, b, out=torch.zeros(5, 2, dtype=torch.int32), casting="same_kind")
    wrong = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        tilemm.matmul(a, b, out=wrong, casting="same_kind")
    assert wrong.shape == (4, 4) and not wrong.any()      # not resized, not written
    stacked = torch.zeros(3, 5, 2, dtype=torch.float64)   # leading dimensions: the result repeated
    tilemm.matmul(a, b, out=stacked, casting="same_kind")
    assert bool((stacked == 3).all())


# --- the result's dtype object, on every call -----------------------------------------------------

@pytest.mark.parametrize("first", TYPECODES)
def test_result_dtype_objects_as_numpy_on_every_call(first):
    """For each pair of type codes, twice over (the second call takes the plan cache): the dtype
    object NumPy returns (np.longlong gives 'q', longlong @ intc 'l') and, for 1-D @ 1-D, the
    scalar type (np.ulonglong, not np.uint64)."""
    for second in TYPECODES:
        a, b = np.ones((2, 3), first), np.ones((3, 2), second)
        for _ in range(2):
            for x, y in ((a, b), (a[0], b[:, 0]), (b.T, a.T)):
                want, refusal = numpy_outcome(lambda: np.matmul(x, y))
                got = tilemm.matmul(x, y)
                same_answer(got, want)


def test_equal_dtypes_of_another_char_never_share_a_plan():
    """np.dtype('l') == np.dtype('q') and their hashes agree: the plan cache must tell them apart,
    whichever runs first, on every kernel."""
    for kernel in (None, "numpy", "cpu-tiled", "cpu-naive"):
        for order in ("lq", "ql"):
            for char in order * 2:
                x = np.ones((3, 3), char)
                got = tilemm.matmul(x, x, kernel=kernel)
                assert got.dtype.char == np.matmul(x, x).dtype.char == char, (kernel, order)
                v = np.ones(3, char.upper())
                assert type(tilemm.matmul(v, v, kernel=kernel)) is type(np.matmul(v, v))


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
def test_out_dtype_keeps_its_spelling(kernel):
    x = np.ones((2, 2), np.int32)
    for spelling in ("l", "q", "l"):
        got = tilemm.matmul(x, x, out_dtype=np.dtype(spelling), kernel=kernel)
        assert got.dtype.char == np.matmul(x, x, dtype=np.dtype(spelling)).dtype.char == spelling


# --- bool -----------------------------------------------------------------------------------------

BOOL_KERNELS = [None, "numpy", "cpu-naive", "cpu-tiled", "naive", "tensorcore-int"]


@pytest.mark.parametrize("kernel", BOOL_KERNELS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 5, 300), (3, 4, 0), (0, 3, 2), (9, 6, 17)])
def test_bool_is_the_or_of_ands(kernel, m, n, k):
    """K = 300 of all-true rows: 300 true pairs, which a count in 8 bits would wrap to 44 (true)
    and at 256 to 0 (false)."""
    if kernel == "tensorcore-int" and m * n * k > 2000:
        pytest.skip("the interpreter is slow: tiny products only")
    rng = np.random.default_rng(m * 100 + k)
    a, b = rng.random((m, k)) < 0.3, rng.random((k, n)) < 0.3
    if k >= 256 and m and n:
        a[0], b[:, 0] = True, True
        a[1, :256], a[1, 256:], b[:256, 1], b[256:, 1] = True, False, True, False    # exactly 256 pairs
    tiles = SMALL if kernel == "tensorcore-int" and not ON_GPU else {}     # (on a GPU: its own, K steps of 32 or more)
    got = tilemm.plan(a, b, kernel=kernel, **tiles).execute(poison=True)
    same_answer(got, np.matmul(a, b))
    v = a[0] if m else np.ones(k, bool)
    same_answer(tilemm.matmul(v, v), np.matmul(v, v))


# --- complex --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtypes", [("complex64", "complex64"), ("complex128", "complex128"),
                                    ("float32", "complex64"), ("complex64", "float64"), ("int16", "complex64"),
                                    ("clongdouble", "complex64")])
def test_complex_on_the_host(dtypes):
    rng = np.random.default_rng(5)
    a, b = values(rng, (2, 7, 33), dtypes[0]), values(rng, (33, 6), dtypes[1])
    for x, y in ((a, b), (a[0, 0], b), (a, b[:, 0]), (a[0, 0], b[:, 1])):
        got, want = tilemm.matmul(x, y), np.matmul(x, y)
        same_answer(got, want)
    c = tilemm.matmul(a[1], b)
    assert compare(c, a[1], b, c.dtype.name).ok


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (17, 9, 33, "nn"), (8, 20, 24, "tn"), (5, 7, 40, "nt"),
                                          (6, 5, 18, "ss"), (3, 5, 0, "nn"), (0, 4, 3, "nn")])
def test_interpreter_tensorcore_complex_within_its_bound(dtype, m, n, k, layout):
    """The complex rung's real block product on tensorcore-f32 (3xTF32) / tensorcore-f64, under
    Triton's interpreter: every layout (transposed A reaches it as columns, copied into rows)."""
    a, b = operands(m + n + k, m, n, k, dtype, layout)      # both parts random
    c = tilemm.plan(a, b, kernel="tensorcore-complex", **SMALL).execute(poison=True)
    assert c.dtype == np.dtype(dtype) and c.shape == (m, n)
    verdict = compare(c, a, b, dtype)
    assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_tensorcore_complex_on_torch_tensors_stacks_vectors_and_conjugates():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    a, b = values(rng, (2, 6, 20), "complex64"), values(rng, (20, 5), "complex64")
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    c = tilemm.matmul(ta, tb, kernel="tensorcore-complex", **SMALL)           # a stack
    assert c.dtype == torch.complex64 and c.shape == (2, 6, 5)
    for i in range(2):
        assert compare(c[i].numpy(), a[i], b, "complex64").ok
    conj = tilemm.matmul(ta[0].conj(), tb.conj(), kernel="tensorcore-complex", **SMALL)   # torch's lazy conjugates
    assert compare(conj.numpy(), a[0].conj(), b.conj(), "complex64").ok
    dot = tilemm.matmul(ta[0, 0], tb[:, 0], kernel="tensorcore-complex", **SMALL)
    assert dot.shape == () and abs(complex(dot) - complex(a[0, 0] @ b[:, 0])) < 1e-4
    with pytest.raises(RuntimeError, match="same dtype"):                  # torch's rule for its tensors
        tilemm.matmul(torch.from_numpy(a[0].real.copy()), tb, kernel="tensorcore-complex", **SMALL)
    mixed = tilemm.matmul(a[0].real.copy(), b, kernel="tensorcore-complex", **SMALL)   # NumPy's: promoted
    assert mixed.dtype == np.complex64 and compare(mixed, a[0].real.copy(), b, "complex64").ok


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_tensorcore_complex_into_a_strided_and_a_wider_out():
    """An out of columns (not rows) is written through a copy; a complex128 out takes the complex64
    result cast."""
    rng = np.random.default_rng(2)
    a, b = values(rng, (9, 17), "complex64"), values(rng, (17, 6), "complex64")
    columns = np.zeros((6, 9), np.complex64).T
    tilemm.matmul(a, b, out=columns, kernel="tensorcore-complex", **SMALL)
    assert compare(columns, a, b, "complex64").ok
    wider = np.zeros((9, 6), np.complex128)
    tilemm.matmul(a, b, out=wider, kernel="tensorcore-complex", **SMALL)
    assert compare(wider.astype(np.complex64), a, b, "complex64").ok
    with pytest.raises(OutputCastingError):
        tilemm.matmul(a, b, out=np.zeros((9, 6), np.float32), kernel="tensorcore-complex", **SMALL)


def test_complex_rung_refuses_real_and_host_only_dtypes_before_work():
    for dtype in ("float32", "longdouble"):
        with pytest.raises(TypeError, match="does not compute"):
            tilemm.plan(np.ones((2, 2), dtype), np.ones((2, 2), dtype), kernel="tensorcore-complex")


def test_the_complex_bound_catches_an_error_in_either_part():
    rng = np.random.default_rng(4)
    a, b = values(rng, (5, 30), "complex64"), values(rng, (30, 4), "complex64")
    c = (a.astype(np.complex128) @ b.astype(np.complex128)).astype(np.complex64)
    assert compare(c, a, b, "complex64").ok
    for part in (1e-3, 1e-3j):
        wrong = c.copy()
        wrong[2, 1] += part * abs(wrong[2, 1])
        assert not compare(wrong, a, b, "complex64").ok
    naive = a.astype(np.complex64) @ b.astype(np.complex64)       # OpenBLAS's CGEMM: within it
    assert compare(naive, a, b, "complex64").ok


# --- longdouble -----------------------------------------------------------------------------------

def test_longdouble_on_the_host_and_refused_by_other_rungs_before_work():
    rng = np.random.default_rng(6)
    a, b = values(rng, (4, 9), "longdouble"), values(rng, (9, 3), "float64")
    same_answer(tilemm.matmul(a, b), np.matmul(a, b))
    c = tilemm.matmul(a, b)
    assert compare(c, a, b.astype(np.longdouble), c.dtype.name).ok
    for kernel in ("cpu-tiled", "tensorcore-f64", "cublas", "tensorcore-complex"):
        with pytest.raises(TypeError, match="does not compute"):
            tilemm.plan(a, b, kernel=kernel)


# --- ndarray subclasses ---------------------------------------------------------------------------

def test_matrix_in_gives_a_matrix_out():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    for x, y in ((m, m), (m, np.ones((2, 2))), (np.ones((2, 2)), m), (m, np.ones(2)), (np.ones(2), m)):
        got, want = tilemm.matmul(x, y), np.matmul(x, y)
        assert type(got) is type(want) is np.matrix and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    out = np.zeros((2, 2))
    assert tilemm.matmul(m, m, out=out) is out


def test_a_subclass_wrap_gets_numpys_context():
    seen = []

    class Tagged(np.ndarray):
        def __array_wrap__(self, array, context=None, return_scalar=False):
            if context[0] is np.matmul:                  # (the test's own == wraps too)
                seen.append((type(array), context[0], len(context[1]), context[2], return_scalar))
            return super().__array_wrap__(array, context, return_scalar)

    v = np.arange(3.0).view(Tagged)
    numpy_type = type(np.matmul(v, v))                   # a 0-d Tagged: ndarray's wrap keeps the subclass
    seen.clear()
    for _ in range(2):                                   # the second call from the plan cache
        dot = tilemm.matmul(v, v)
        assert dot == 5.0 and type(dot) is numpy_type
        row = tilemm.matmul(v, np.ones((3, 2)))
        assert type(row) is Tagged and row.tolist() == [3.0, 3.0]
    ours = seen[:]
    seen.clear()
    for _ in range(2):
        np.matmul(v, v), np.matmul(v, np.ones((3, 2)))
    assert ours == seen == [(np.ndarray, np.matmul, 2, 0, True), (np.ndarray, np.matmul, 2, 0, False)] * 2


class Rewrapped(np.ndarray):
    """An ndarray subclass whose __array_wrap__ returns a new view, tagged with what it was given."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        view = super().__array_wrap__(array, context, return_scalar).view(Rewrapped)
        if context is not None and context[0] is np.matmul:       # (the test's own checks wrap too)
            view.given = (array is self, len(context[1]), context[1][2] is self, context[2], return_scalar)
        return view


@pytest.mark.parametrize("operands", [(np.ones((2, 3)), np.ones((3, 2))), (np.ones(3), np.ones(3)),
                                      (np.ones((2, 3)).tolist(), np.ones((3, 2)))], ids=["matrices", "dot", "list"])
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("keywords", [{}, dict(kernel="cpu-tiled"), dict(subok=False), dict(casting="unsafe")],
                         ids=repr)
def test_an_out_of_a_subclass_comes_back_through_its_wrap(operands, keywords):
    """numpy.matmul returns what out's own __array_wrap__ makes of out once written (its context:
    the operands and out; never a scalar), not out itself; np.matrix's gives out itself."""
    shape = np.shape(np.matmul(*operands)) or (1, 1)
    numpy_keywords = {name: value for name, value in keywords.items() if name != "kernel"}
    want_out, got_out = np.zeros(shape).view(Rewrapped), np.zeros(shape).view(Rewrapped)
    want = np.matmul(*operands, out=want_out, **numpy_keywords)
    for _ in range(2):                                     # the second call from the plan cache
        got = tilemm.matmul(*operands, out=got_out, **keywords)
        assert type(got) is type(want) is Rewrapped and got is not got_out and got.given == want.given
        np.testing.assert_array_equal(got_out, want_out)
    m = np.asmatrix(np.zeros((2, 2)))
    assert tilemm.matmul(np.ones((2, 3)), np.ones((3, 2)), out=m) is m and (m == 3).all()


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_masked_out_is_wrapped_as_numpy_wraps_it():
    """A masked array out: NumPy calls its __array_wrap__, which refuses matmul's operands (its
    masks of the operands' shapes do not broadcast); the same refusal, once out is written."""
    a, b = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(ValueError) as theirs:
        np.matmul(a, b, out=np.ma.zeros((2, 2)))
    out = np.ma.zeros((2, 2))
    with pytest.raises(ValueError) as ours:
        tilemm.matmul(a, b, out=out)
    assert str(ours.value) == str(theirs.value) and (out == 3).all()


@pytest.mark.parametrize("other", [np.array(["a", "b"]), np.array([b"a", b"b"]),
                                   np.array([1, 2], "m8[s]")], ids=["str", "bytes", "timedelta"])
def test_objects_beside_any_dtype_numpy_makes_objects_of(other):
    """Object operands beside str, bytes or timedelta ones: NumPy's object loop (their Python
    objects' own + and *), where tilemm once refused the other operand's dtype."""
    objects = np.array([2, 3], dtype=object)
    for a, b in ((objects, other), (other, objects)):
        want = np.matmul(a, b)
        got = tilemm.matmul(a, b)
        assert type(got) is type(want) and got == want
        assert tilemm.matmul(a[None], b).tolist() == np.matmul(a[None], b).tolist()


@pytest.mark.parametrize("kernel", ["tensorcore-int"] + ([None, "cublas"] if ON_GPU else []))
def test_unsigned_long_long_operands_on_the_triton_rungs_and_the_library(kernel):
    """NumPy's unsigned long long ('Q', uint64 by another char than np.uint64's 'L'), which
    torch.from_numpy refuses: viewed as np.uint64 on its way to torch (once a TypeError from the
    Triton rungs and the library); exact and wrapping, the result's char kept."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**64, (5, 7), dtype=np.uint64, endpoint=False).astype("Q")
    b = rng.integers(0, 2**64, (7, 3), dtype=np.uint64, endpoint=False).astype("Q")
    want = np.matmul(a, b)
    for x, y in ((a, b), (a, np.asfortranarray(b)), (a[0], b)):
        got = tilemm.matmul(x, y, kernel=kernel)
        assert got.dtype.char == np.matmul(x, y).dtype.char == "Q"
        np.testing.assert_array_equal(got, np.matmul(x, y))
    assert want.dtype.char == "Q"


@pytest.mark.parametrize("kernel", [None, "numpy", "cpu-naive", "cpu-tiled", "naive", "tensorcore-f64"])
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((3, 4), (4,)), ((4,), (4, 5)), ((2, 3, 4), (4,)),
                                    ((2, 3, 4), (4, 5))], ids=str)
@pytest.mark.parametrize("dtype", ["float64", "q"])
def test_results_own_their_data_as_numpys_do(kernel, shapes, dtype):
    """A new result owns its data, as NumPy's does (ndarray.resize takes it): not a view of the
    kernel's output taken off a promoted 1-D operand's dimension, respelled ('l' as 'q') or read
    from a torch tensor's memory."""
    a, b = np.ones(shapes[0], dtype), np.ones(shapes[1], dtype)
    want = np.matmul(a, b)
    for _ in range(2):                                     # the second call from the plan cache
        try:
            got = tilemm.matmul(a, b, kernel=kernel)
        except TypeError:                                  # (a rung that does not compute the dtype)
            return
        assert got.flags.owndata == want.flags.owndata and got.dtype.char == want.dtype.char
        got.resize(got.size)
        np.testing.assert_array_equal(got, want.ravel())


class Outranked(np.ndarray):
    __array_priority__ = -1.0


def test_a_plain_ndarray_outranks_a_subclass_of_lower_priority(tmp_path):
    """numpy.matmul wraps through the operand of highest __array_priority__, a plain ndarray
    counting as 0: beside one, a subclass of negative priority (np.memmap's is -100) gives a plain
    ndarray of NumPy's own, where tilemm once wrapped it in the subclass (a memmap's wrap: a view)."""
    x = np.arange(4.0).reshape(2, 2)
    mapped = np.memmap(tmp_path / "m.dat", dtype=np.float64, mode="w+", shape=(2, 2))
    mapped[...] = x
    pairs = ((x, x.view(Outranked)), (x.view(Outranked), x), (mapped, x), (x, mapped), (x.view(Outranked), [[1.0]] * 2))
    for a, b in pairs:
        want = np.matmul(a, b)
        for kernel in (None, "cpu-tiled"):
            got = tilemm.matmul(a, b, kernel=kernel)
            assert type(got) is type(want) and got.flags.owndata == want.flags.owndata
            np.testing.assert_array_equal(got, want)


def test_a_subclass_that_decides_matmul_itself_is_refused():
    class Own(np.ndarray):
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return NotImplemented
    with pytest.raises(TypeError, match="__array_ufunc__"):
        tilemm.matmul(np.ones((2, 2)).view(Own), np.ones((2, 2)))


# --- neighbours: random calls across every dtype and out --------------------------------------------

BATCH = st.lists(st.integers(1, 3), max_size=2).map(tuple)


@settings(max_examples=200, deadline=None)
@given(kernel=st.sampled_from([None, "numpy", "cpu-tiled"]),
       dtypes=st.tuples(st.sampled_from(TYPECODES), st.sampled_from(TYPECODES)),
       out_dtype=st.one_of(st.none(), st.sampled_from(TYPECODES)), batches=st.tuples(BATCH, BATCH),
       vectors=st.tuples(st.booleans(), st.booleans()), mnk=st.tuples(st.integers(0, 5), st.integers(0, 5),
                                                                       st.integers(0, 12)),
       out_batch=st.sampled_from([None, (), (1,), (2,)]), seed=st.integers(0, 2**16))
def test_random_calls_across_every_dtype(kernel, dtypes, out_dtype, batches, vectors, mnk, out_batch, seed):
    """Any dtypes, stacks that broadcast, vectors, 0-d and empty products, an out of any dtype and of
    leading dimensions of its own: NumPy's answer or NumPy's refusal, by class."""
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    a = values(rng, (k,) if vectors[0] else batches[0] + (m, k), dtypes[0])
    b = values(rng, (k,) if vectors[1] else batches[1] + (k, n), dtypes[1])
    shape, refusal = numpy_outcome(lambda: np.matmul(a, b).shape)
    out = None
    if out_dtype is not None and out_batch is not None and refusal is None:
        out = np.full(out_batch + shape, 3, out_dtype)
    expected_out = None if out is None else out.copy()
    want, refusal = numpy_outcome(lambda: np.matmul(a, b, out=expected_out))
    if refusal is not None:
        with pytest.raises(TypeError if isinstance(refusal, TypeError) else ValueError):
            tilemm.matmul(a, b, out, kernel=kernel)
        return
    try:
        with np.errstate(all="ignore"):
            got = tilemm.matmul(a, b, out, kernel=kernel)
    except TypeError as why:      # cpu-tiled computes neither complex nor longdouble: the numpy rung does
        assert kernel == "cpu-tiled" and "does not compute" in str(why)
        return
    if out is not None:
        assert got is out
    same_answer(got, want)


# --- the GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("kernel,params", [(None, {}), ("cublas", {}), ("tensorcore-complex", {}),
                                           ("tensorcore-complex", {"products": 3})])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (257, 129, 511, "nn"), (1000, 999, 1001, "tn"),
                                          (512, 384, 640, "nt"), (3, 5, 0, "nn"), (64, 1, 300, "nn"),
                                          (2048, 2048, 2048, "nn")])
def test_gpu_complex_within_its_bound(kernel, params, dtype, m, n, k, layout):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(m + n + k)
    a = values(rng, (k, m), dtype).T if layout[0] == "t" else values(rng, (m, k), dtype)
    b = values(rng, (n, k), dtype).T if layout[1] == "t" else values(rng, (k, n), dtype)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    if params and dtype == "complex64":
        pytest.skip("products=3 is complex128's")
    c = tilemm.plan(ta, tb, kernel=kernel, **params).execute(poison=True)
    assert c.dtype == getattr(torch, dtype) and c.is_cuda and c.shape == (m, n)
    verdict = compare_on_device(c, a, b, dtype)
    assert verdict.ok, verdict.message
    if kernel is None:
        from tilemm.ladder.tensorcore import r14_complex
        rule = r14_complex.preferred(dtype, m, n, k, torch.cuda.get_device_capability())
        assert tilemm.plan(ta, tb).kernel.name == (rule or "cublas")   # the complex default: its rule, else the library


@pytest.mark.gpu
def test_gpu_complex_default_never_takes_tf32(monkeypatch):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a, b = values(rng, (512, 1024), "complex64"), values(rng, (1024, 256), "complex64")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for _ in range(3):                                           # the first call and the fast path's
            assert compare_on_device(tilemm.matmul(ta, tb), a, b, "complex64").ok
        assert torch.backends.cuda.matmul.allow_tf32                 # the caller's flag put back
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [None, "cublas", "tensorcore-int"])
def test_gpu_bool(kernel):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, b = rng.random((300, 700)) < 0.01, rng.random((700, 200)) < 0.01
    a[0], b[:, 0] = True, True
    c = tilemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), kernel=kernel)
    assert c.dtype == torch.bool
    np.testing.assert_array_equal(c.cpu().numpy(), np.matmul(a, b))


@pytest.mark.gpu
def test_gpu_longdouble_refused_before_work_and_outs_follow_torch():
    """longdouble refused; a CUDA tensor's out takes torch's rules (its dtype exactly, resized to the
    result's shape), and NumPy's where the call names NumPy's keywords."""
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="longdouble"):
        tilemm.plan(np.ones((4, 4), np.longdouble), np.ones((4, 4), np.longdouble), kernel="cublas")
    a, b = torch.ones(5, 3, device="cuda", dtype=torch.float64), torch.ones(3, 2, device="cuda", dtype=torch.float64)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype double, but got float instead"):
        tilemm.matmul(a, b, out=torch.zeros(5, 2, device="cuda", dtype=torch.float32))
    resized = torch.empty(0, device="cuda", dtype=torch.float64)
    assert tilemm.matmul(a, b, resized) is resized and resized.shape == (5, 2) and bool((resized == 3).all())
    out = torch.zeros(5, 2, device="cuda", dtype=torch.float32)
    assert tilemm.matmul(a, b, out, casting="same_kind") is out and bool((out == 3).all())
    with pytest.raises(OutputCastingError):
        tilemm.matmul(a, b, out=torch.zeros(5, 2, device="cuda", dtype=torch.int64), casting="same_kind")
    with pytest.raises(TypeError, match="Expected all tensors to be on the same device"):     # (torch's words)
        tilemm.matmul(a, b, out=torch.zeros(5, 2, dtype=torch.float64))


@pytest.mark.gpu
def test_gpu_cupy_result_dtype_objects():
    cupy = pytest.importorskip("cupy")
    for char in "lq":
        x = cupy.ones((3, 3), char)
        for _ in range(2):
            got = tilemm.matmul(x, x)
            assert got.dtype.char == np.matmul(np.ones((3, 3), char), np.ones((3, 3), char)).dtype.char


def test_the_complex_default_takes_the_rung_only_where_it_was_measured_faster():
    """complex64 products that fill a Hopper GPU take tensorcore-complex; skinny, shallow and small
    ones, complex128 and GPUs before Hopper stay with the library."""
    from tilemm.ladder.tensorcore import r14_complex
    hopper = (9, 0)
    assert r14_complex.preferred("complex64", 8192, 8192, 8192, hopper) == "tensorcore-complex"
    assert r14_complex.preferred("complex64", 1500, 3000, 1000, hopper) == "tensorcore-complex"
    assert r14_complex.preferred("complex64", 1024, 1024, 1024, hopper) is None         # under 2^32
    assert r14_complex.preferred("complex64", 64, 8192, 8192, hopper) is None           # skinny
    assert r14_complex.preferred("complex64", 8192, 8192, 64, hopper) is None           # shallow
    assert r14_complex.preferred("complex64", 8192, 8192, 8192, (8, 0)) is None
    assert r14_complex.preferred("complex64", 8192, 8192, 8192, None) is None
    assert r14_complex.preferred("complex128", 8192, 8192, 8192, hopper) is None


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k,layout", [(17, 9, 33, "nn"), (8, 20, 24, "tn"), (5, 7, 40, "nt"), (4, 3, 5, "nn")])
def test_interpreter_gauss_products_within_the_complex_bound(m, n, k, layout):
    """products=3 (complex128): Gauss's three real products, within the same bound (K = 5: the four)."""
    rng = np.random.default_rng(m * n + k)
    a = values(rng, (k, m), "complex128").T if layout[0] == "t" else values(rng, (m, k), "complex128")
    b = values(rng, (n, k), "complex128").T if layout[1] == "t" else values(rng, (k, n), "complex128")
    c = tilemm.plan(a, b, kernel="tensorcore-complex", products=3, **SMALL).execute(poison=True)
    verdict = compare(c, a, b, "complex128")
    assert c.dtype == np.complex128 and verdict.ok, verdict.message
    with pytest.raises(tilemm.KernelUnavailable, match="products=3"):
        tilemm.plan(a.astype(np.complex64), b.astype(np.complex64), kernel="tensorcore-complex", products=3)


def test_complex_rung_models_count_its_real_products():
    rung = tilemm.kernel("tensorcore-complex")
    problem = tilemm.ladder.registry.Problem(4096, 4096, 4096, "complex128")
    four, three = rung.resolve({}), rung.resolve({"products": 3})
    assert rung.unit(problem, four)[1] == 4 and rung.unit(problem, three)[1] == 3
    assert rung.unit(tilemm.ladder.registry.Problem(64, 64, 64, "complex64"), four) == ("tf32", 12)
    assert rung.traffic(problem, **three).read < rung.traffic(problem, **four).read
