"""numpy.matmul's keywords (casting, dtype, signature, axes, axis, order, subok) and array-likes,
through tilemm.matmul: each case run by NumPy and by tilemm on the same inputs, the answers (type,
dtype, shape, values, layout) or the refusals (NumPy's exception class, and its words where tilemm
keeps them) the same. Ports of NumPy's own tests keep their assertions: MatmulCommon/TestMatmul and
test_matmul_axes (numpy/_core/tests/test_multiarray.py), test_axes_argument and test_axis_argument
(numpy/_core/tests/test_ufunc.py), with matrix_multiply and vecdot's matmul cases."""
import warnings

import numpy as np
import pytest
from numpy.exceptions import AxisError, ComplexWarning

import tilemm
from tilemm.contract import numpy_rules as contract
from tilemm.plans import cache as plan_cache

CASTINGS = ["no", "equiv", "safe", "same_kind", "unsafe"]


def outcome(call):
    """(value, None) or (None, the exception raised)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ComplexWarning)
            with np.errstate(all="ignore"):
                return call(), None
    except (TypeError, ValueError) as refusal:
        return None, refusal


def same_outcome(ours, theirs, words=True, layout=False):
    """tilemm's call answers as NumPy's does: the same value, or NumPy's exception class (or tilemm's
    subclass of it, for NumPy's private casting errors) and, with ``words``, its message."""
    want, refusal = outcome(theirs)
    got, our_refusal = outcome(ours)
    if refusal is not None:
        assert our_refusal is not None, f"NumPy refused ({refusal!r}); tilemm gave {got!r}"
        assert type(refusal) in type(our_refusal).__mro__[:2], (our_refusal, refusal)
        if words:
            assert str(our_refusal) == str(refusal)
        return None
    assert our_refusal is None, f"tilemm refused ({our_refusal!r}); NumPy gave {want!r}"
    same_answer(got, want, layout)
    return got


def same_answer(got, want, layout=False):
    assert type(got) is type(want)
    assert got.dtype == want.dtype and got.dtype.char == want.dtype.char
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(np.asarray(got, np.complex128), np.asarray(want, np.complex128), rtol=1e-6, atol=1e-6)
    if layout and np.ndim(want) and np.size(want) > 1:
        assert (got.flags.c_contiguous, got.flags.f_contiguous) == (want.flags.c_contiguous, want.flags.f_contiguous)
        assert got.strides == want.strides


def both(a, b, **keywords):
    """The same call to tilemm.matmul and to numpy.matmul, out= a fresh copy for each."""
    def call(matmul):
        def run():
            given = dict(keywords)
            if "out" in given:
                given["out"] = given["out"].copy()
            return matmul(a, b, **given)
        return run
    return call(tilemm.matmul), call(np.matmul)


# --- casting= and dtype= ----------------------------------------------------------------------------

DTYPE_CASES = [("float64", "float64", None, None), ("int64", "float32", None, None), ("float32", "int64", None, None),
               ("float64", "float64", "int64", None), ("float64", "float64", "float32", None),
               ("float64", "float64", "complex128", None), ("float64", "float64", None, "float32"),
               ("float64", "float64", None, "int32"), ("float64", "float64", "int64", "float32"),
               ("int32", "int32", "int64", "bool"), ("int32", "float32", "int64", None),
               ("int8", "int8", "int32", None),
               ("int64", "int64", "bool", None), ("float64", "float64", "bool", None), ("uint8", "int8", None, "int8"),
               ("complex128", "complex128", None, "float64"), ("float32", "float32", "float16", "float16")]


@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("first,second,dtype,into", DTYPE_CASES)
def test_casting_and_dtype_as_numpy(casting, first, second, dtype, into):
    """Every casting rule with dtype= and out= of each kind: NumPy's input and output casting errors
    (input 0 before input 1 before the output), with its words, or NumPy's answer."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((3, 4)) * 4).astype(first)
    b = (rng.standard_normal((4, 2)) * 4).astype(second)
    keywords = dict(casting=casting)
    if dtype is not None:
        keywords["dtype"] = dtype
    if into is not None:
        keywords["out"] = np.zeros((3, 2), into)
    same_outcome(*both(a, b, **keywords))


def test_numpys_casting_error_classes():
    a, b = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(TypeError) as theirs:
        np.matmul(a, b, dtype=np.int64)
    with pytest.raises(contract.InputCastingError) as ours:
        tilemm.matmul(a, b, dtype=np.int64)
    assert isinstance(ours.value, type(theirs.value)) and isinstance(ours.value, TypeError)
    assert str(ours.value) == ("Cannot cast ufunc 'matmul' input 0 from dtype('float64') to dtype('int64') with "
                               "casting rule 'same_kind'")
    with pytest.raises(TypeError) as theirs:
        np.matmul(a, b, out=np.zeros((2, 2), np.int32))
    with pytest.raises(contract.OutputCastingError) as ours:
        tilemm.matmul(a, b, out=np.zeros((2, 2), np.int32))
    assert isinstance(ours.value, type(theirs.value)) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kernel", [None, "numpy", "cpu-tiled"])
def test_unsafe_dtype_casts_the_operands_then_multiplies_exactly(kernel):
    """float -> int with casting='unsafe': the operands truncated to int64 first, then an exact
    integer product, as NumPy computes it (and again from the second call on)."""
    a = np.array([[1.7, -2.9, 3.5], [100.2, 0.9, -0.9]])
    b = np.array([[1.5, 2.5], [2.5, -7.9], [4.0, 3.99]])
    want = np.matmul(a, b, dtype=np.int64, casting="unsafe")
    for _ in range(2):
        got = tilemm.matmul(a, b, dtype=np.int64, casting="unsafe", kernel=kernel)
        same_answer(got, want)
    assert want.tolist() == [[1 - 4 + 12, 2 + 14 + 9], [100, 200]]


@pytest.mark.parametrize("kernel", [None, "cpu-naive"])
def test_unsafe_out_casts_the_result_into_out(kernel):
    a, b = np.full((2, 3), 0.75), np.ones((3, 2))
    out = np.zeros((2, 2), np.int32)
    assert tilemm.matmul(a, b, out=out, casting="unsafe", kernel=kernel) is out
    np.testing.assert_array_equal(out, np.matmul(a, b, out=np.zeros((2, 2), np.int32), casting="unsafe"))
    assert out.tolist() == [[2, 2], [2, 2]]


def test_out_arg():
    """numpy's TestMatmul.test_out_arg, and the unsafe cast it refuses by default."""
    a = np.ones((5, 2), dtype=float)
    b = np.array([[1, 3], [5, 7]], dtype=float)
    tgt = np.dot(a, b)
    # test as positional argument
    out = np.zeros((5, 2), dtype=float)
    tilemm.matmul(a, b, out)
    np.testing.assert_array_equal(out, tgt, err_msg="out positional argument")
    # test as keyword argument
    out = np.zeros((5, 2), dtype=float)
    tilemm.matmul(a, b, out=out)
    np.testing.assert_array_equal(out, tgt, err_msg="out keyword argument")
    # test out with not allowed type cast (safe casting)
    out = np.zeros((5, 2), dtype=np.int32)
    with pytest.raises(TypeError, match="Cannot cast ufunc .* output"):
        tilemm.matmul(a, b, out=out)
    assert tilemm.matmul(a, b, out=out, casting="unsafe") is out           # allowed where asked
    np.testing.assert_array_equal(out, tgt)
    # test out with type upcast to complex
    out = np.zeros((5, 2), dtype=np.complex128)
    c = tilemm.matmul(a, b, out=out)
    assert c is out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ComplexWarning)
        c = c.astype(tgt.dtype)
    np.testing.assert_array_equal(c, tgt)


def test_matmul_out_overlapping_its_operand():
    """numpy's test_matmul_out: out is an operand."""
    a = np.arange(18).reshape(2, 3, 3)
    b = np.matmul(a, a)
    c = tilemm.matmul(a, a, out=a, casting="no")
    assert c is a
    np.testing.assert_array_equal(c, b)


@pytest.mark.parametrize("dt", "?bhilqBHILQefdgFDG")
def test_result_types_through_dtype(dt):
    """MatmulCommon.test_result_types with the dtype named (dtype=, signature=) and casting="no":
    the result of that very dtype, a vector product a scalar of its type."""
    mat, vec = np.ones((1, 1)).astype(dt), np.ones((1,)).astype(dt)
    for keywords in (dict(dtype=dt, casting="no"), dict(signature=(None, None, dt), casting="equiv"),
                     dict(signature=f"{dt}{dt}->{dt}")):
        for arg in [(mat, vec), (vec, mat), (mat, mat)]:
            res = same_outcome(*both(*arg, **keywords))
            assert res.dtype == dt
        res = same_outcome(*both(vec, vec, **keywords))
        assert type(res) is np.dtype(dt).type


def test_byte_order_is_equivalent():
    a = np.arange(6.0).reshape(2, 3).astype(">f8")
    b = np.ones((3, 2))
    for casting in CASTINGS:
        same_outcome(*both(a, b, casting=casting))
        same_outcome(*both(b.T, b, casting=casting, out=np.zeros((2, 2), ">f8")))


def test_dtype_and_out_dtype_together_are_refused():
    with pytest.raises(TypeError, match="dtype= .* and out_dtype= .* give one"):
        tilemm.matmul(np.ones((2, 2)), np.ones((2, 2)), dtype="float32", out_dtype="float32")


def test_dtype_none_and_the_spelling_of_dtype():
    a = np.ones((2, 2), np.int32)
    same_outcome(*both(a, a, dtype=None))
    for spelling in ("l", "q", np.int64, "float32", np.dtype("e")):
        same_outcome(*both(a, a, dtype=spelling))


@pytest.mark.parametrize("dtype", [">f4", "M8", "U", "nonsense"])
def test_dtypes_numpy_refuses(dtype):
    """A byte order (NumPy's words), no loop (tilemm: a dtype it does not multiply), not a dtype:
    TypeErrors both."""
    a = np.ones((2, 2))
    with pytest.raises(TypeError) as theirs:
        np.matmul(a, a, dtype=dtype)
    with pytest.raises(TypeError) as ours:
        tilemm.matmul(a, a, dtype=dtype)
    if dtype == ">f4":
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("value", ["bogus", "UNSAFE", 1, None, b"unsafe", np.str_("safe")])
def test_casting_values_as_numpy_reads_them(value):
    same_outcome(*both(np.ones((2, 2)), np.ones((2, 2)), casting=value))


# --- signature= -------------------------------------------------------------------------------------

SIGNATURES = ["dd->d", "ff->f", "df->d", "ii->i", "d", "ff->", "f,f->f", "xx->x", ("f",), (None, None),
              (None, None, None), (None, None, "f"), ("f", None, None), (None, "f", None), ("f", "f", None),
              ("f", None, "f"), (None, "f", "f"), ("f", "d", None), ("i", None, "f"), ("f", "f", "f"),
              (None, None, np.float32), (None, None, ">f4"), [None, None, "f"], np.float32, 1, None]


@pytest.mark.parametrize("signature", SIGNATURES, ids=repr)
def test_signature_as_numpy(signature):
    ours, theirs = both(np.ones((2, 3)), np.ones((3, 2)), signature=signature)
    _, refusal = outcome(theirs)
    if isinstance(refusal, TypeError) and type(refusal).__name__ == "UFuncTypeError" and "casting" not in str(refusal):
        # NumPy's "no loop" refusal: a plain TypeError on a first call, its _UFuncNoLoopError once its
        # dispatch cache has seen the dtypes; tilemm's is the first one's
        pytest.raises(TypeError, ours)
        return
    same_outcome(ours, theirs)


def test_signature_with_casting_and_dtype():
    a, b = np.full((2, 3), 1.5), np.ones((3, 2))
    same_outcome(*both(a, b, signature="ii->i", casting="unsafe"))
    same_outcome(*both(a, b, signature="dd->d", dtype="f"))


@pytest.mark.parametrize("casting", ["no", "safe", "same_kind", "unsafe"])
@pytest.mark.parametrize("signature", [("d", None, None), (None, "d", None), ("f", None, None), (None, "f", None),
                                       ("e", None, None), ("D", None, None), ("O", None, None), (None, "h", None)],
                         ids=repr)
@pytest.mark.parametrize("dtypes", [("int16", "int16"), ("float32", "float64"), ("float64", "float32"),
                                    ("object", "float64")], ids="@".join)
def test_a_signature_naming_one_operand_searches_numpys_loops(dtypes, signature, casting):
    """NumPy searches its loops for the one the signature names: the operand it leaves unnamed is
    cast to it "safe" at most, the named one under the casting rule, and the object loop is for
    object operands. int16 operands with ("d", None, None) multiply in float64; float32 @ float64
    with (None, "f", None) in float32; float64 ones with ("f", None, None) find no loop."""
    a, b = np.arange(6).reshape(2, 3).astype(dtypes[0]), np.ones((3, 2), dtypes[1])
    ours, theirs = both(a, b, signature=signature, casting=casting)
    _, refusal = outcome(theirs)
    if refusal is not None and "casting rule" not in str(refusal):    # NumPy's "no loop" (see above)
        with pytest.raises(TypeError, match="No loop matching"):
            ours()
        return
    same_outcome(ours, theirs)


@pytest.mark.parametrize("keywords", [dict(dtype=np.dtypes.Float32DType),
                                      dict(signature=(None, None, np.dtypes.Float32DType)),
                                      dict(dtype=np.dtypes.Int64DType, casting="unsafe")], ids=repr)
def test_dtype_classes_name_their_dtype(keywords):
    """np.dtypes' classes name the dtype they are the class of (np.dtype() reads a class as a
    Python type: object, which tilemm once multiplied in and returned)."""
    got = same_outcome(*both(np.full((2, 3), 1.5), np.ones((3, 2)), **keywords))
    assert got is not None and got.dtype != object


@pytest.mark.parametrize("dtype", ["U3", "S2", "V8", "M8[s]", "m8[D]", [("x", "f8")]], ids=str)
def test_a_dtype_with_a_size_or_a_unit_is_refused_first(dtype):
    """NumPy's dtype= selects a DType alone: one with a size or time unit is its TypeError, before
    the other keywords' values are read."""
    same_outcome(*both(np.ones((2, 2)), np.ones((2, 2)), dtype=dtype, casting="bogus"))


# --- the keywords numpy.matmul refuses --------------------------------------------------------------

@pytest.mark.parametrize("keyword", [dict(where=True), dict(keepdims=True), dict(axis=0), dict(axis=None),
                                     dict(axis=1, axes=[(0, 1), (0, 1), (0, 1)])], ids=repr)
def test_keywords_numpy_matmul_refuses(keyword):
    a = np.ones((2, 2))
    with pytest.raises(TypeError) as theirs:
        np.matmul(a, a, **keyword)
    with pytest.raises(TypeError) as ours:
        tilemm.matmul(a, a, **keyword)
    if "where" not in keyword and "keepdims" not in keyword:
        assert str(ours.value) == str(theirs.value)


def test_refusals_in_numpys_order():
    """The keywords' values first, then the dtypes, then axes and axis, then the shapes."""
    a, b = np.ones((2, 3)), np.ones((2, 3))
    for keywords in (dict(casting="x", order="X"), dict(order="X", subok=1), dict(signature="bad", casting="x"),
                     dict(signature="bad", dtype="i8"), dict(axes=1, axis=0, casting="x"),
                     dict(signature=("f", None, None), casting="x"), dict(dtype=">f4", casting="x"),
                     dict(subok=1, signature="bad"), dict(dtype="i8", axes=[(0, 9)]),
                     dict(dtype="i8", axis=0), dict(axes=[(0, 1), (0, 9), (0, 1)]), dict(dtype="i8"),
                     dict(out=np.zeros((3, 3), "i8"))):
        same_outcome(*both(a, b, **keywords))


@pytest.mark.parametrize("keywords", [dict(casting="equiv"), dict(casting="bogus"), dict(order="X"), dict(subok=3),
                                      dict(dtype="int64"), dict(casting="no", axes=[(0, 1), (0, 1), (0, 1)])], ids=repr)
def test_a_read_only_out_is_refused_before_the_dtypes_and_values(keywords):
    """NumPy refuses a read-only out before it reads casting=, order= or subok=, or casts a dtype."""
    out = np.zeros((2, 2), np.int32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        np.matmul(np.ones((2, 2)), np.ones((2, 2)), out=out, **keywords)
    with pytest.raises(ValueError, match="read-only"):
        tilemm.matmul(np.ones((2, 2)), np.ones((2, 2)), out=out, **keywords)


@pytest.mark.parametrize("scalar", [3, np.int64(3), np.array(3), 3.5, np.float32(2), 2j, True])
@pytest.mark.parametrize("keywords", [dict(casting="no"), dict(dtype="i8"), dict(axes=[0, 0, ()]),
                                      dict(casting="same_kind"), dict(dtype="f4", casting="safe")], ids=repr)
def test_a_scalar_is_refused_after_the_dtypes_before_the_axes(scalar, keywords):
    """NumPy resolves dtypes first (a Python scalar weakly: 3 takes float64 from a float64 operand
    even with casting="no"), then refuses the 0-d operand, before it reads axes."""
    same_outcome(*both(scalar, np.ones((2, 2), np.float32), **keywords))
    same_outcome(*both(np.ones((2, 2)), scalar, **keywords))


# --- axes= (test_ufunc.py's test_axes_argument and test_axis_argument, matrix_multiply's part) -------

def test_axes_argument():
    a = np.arange(12).reshape((2, 3, 2))
    b = np.arange(8).reshape((2, 2, 2, 1)) + 1
    # Sanity check.
    c = tilemm.matmul(a, b)
    np.testing.assert_array_equal(c, np.matmul(a, b))
    # Default axes.
    c = tilemm.matmul(a, b, axes=[(-2, -1), (-2, -1), (-2, -1)])
    np.testing.assert_array_equal(c, np.matmul(a, b))
    # Default with explicit axes.
    c = tilemm.matmul(a, b, axes=[(1, 2), (2, 3), (2, 3)])
    np.testing.assert_array_equal(c, np.matmul(a, b))
    # swap some axes.
    c = tilemm.matmul(a, b, axes=[(0, -1), (1, 2), (-2, -1)])
    np.testing.assert_array_equal(c, np.matmul(a.transpose(1, 0, 2), b.transpose(0, 3, 1, 2)))
    # Default with output array.
    c = np.empty((2, 2, 3, 1))
    d = tilemm.matmul(a, b, out=c, axes=[(1, 2), (2, 3), (2, 3)])
    assert c is d
    np.testing.assert_array_equal(c, np.matmul(a, b))
    # Transposed output array
    c = np.empty((1, 2, 2, 3))
    d = tilemm.matmul(a, b, out=c, axes=[(-2, -1), (-2, -1), (3, 0)])
    assert c is d
    np.testing.assert_array_equal(c, np.matmul(a, b).transpose(3, 0, 1, 2))


AXES_REFUSED = [
    (TypeError, dict(axis=1)),                                      # wrong argument
    (TypeError, dict(axes=1)),                                      # axes should be list
    (TypeError, dict(axes=((-2, -1), (-2, -1), (-2, -1)))),
    (TypeError, dict(axes=None)),
    (ValueError, dict(axes=[])),                                    # list needs to have right length
    (ValueError, dict(axes=[(-2, -1)])),
    (ValueError, dict(axes=[(-2, -1)] * 4)),
    (TypeError, dict(axes=[None, None, None])),                     # list should not contain None, or lists
    (TypeError, dict(axes=[[-2, -1], [-2, -1], [-2, -1]])),
    (TypeError, dict(axes=[(-2, -1), (-2, -1), [-2, -1]])),
    (TypeError, dict(axes=[(-2, -1), (-2, -1), None])),
    (AxisError, dict(axes=[-1, -1, -1])),                           # single integers where more are required
    (AxisError, dict(axes=[(-2, -1), (-2, -1), -1])),
    (ValueError, dict(axes=[(-2, -1), (-2, -1), (-2, -2)])),        # tuples should not have duplicated values
    (AxisError, dict(axes=[(0, 9), (0, 1), (0, 1)])),               # out of bounds
    (AxisError, dict(axes=[(-5, 1), (0, 1), (0, 1)])),
    (AxisError, dict(axes=[(0,), (0, 1), (0, 1)])),                 # too few in a tuple, too many
    (AxisError, dict(axes=[(0, 1), (0, 1, 2), (0, 1)])),
    (TypeError, dict(axes=[(0.0, 1), (0, 1), (0, 1)])),             # indices only
    (ValueError, dict(axes=[(0, 0), (0, 9), (0, 1)])),              # item by item
    (TypeError, dict(axes=[(-2, -1), (-2, -1), (-2, -1)], parrot=True)),  # and an unrelated keyword
    (TypeError, dict(axes=[0, 1], parrot=True)),                   # which NumPy names before bad axes
]


@pytest.mark.parametrize("error,keywords", AXES_REFUSED, ids=repr)
def test_improper_axes_refused_as_numpy(error, keywords):
    a = np.arange(12.0).reshape((2, 3, 2))
    b = np.arange(8.0).reshape((2, 2, 2, 1)) + 1
    if "parrot" in keywords:            # an unknown keyword: NumPy's TypeError and words
        with pytest.raises(TypeError, match="unexpected keyword argument 'parrot'"):
            tilemm.matmul(a, b, **keywords)
    with pytest.raises(error):
        np.matmul(a, b, **keywords)
    same_outcome(*both(a, b, **keywords))


def test_arrays_need_enough_axes():
    """matrix_multiply's cases, with matmul's answers: (2, 2) @ (2,) is a product for matmul."""
    z = np.zeros((2, 2))
    same_outcome(*both(z, z[0]))
    for x, y, keywords in ((z, z, dict(out=z[:, 0])), (z[1], z, dict(axes=[0, 1])),
                           (z, z, dict(out=z[0], axes=[0, 1]))):
        with pytest.raises(ValueError):
            tilemm.matmul(x, y, **keywords)
        same_outcome(*both(x, y, **keywords), words=False)


VECTOR_AXES = [((3,), (3,), [0, 0, ()]), ((3,), (3,), [0, 0]), ((3,), (3,), [(0,), (0,)]), ((3,), (3,), [0, 0, 0]),
               ((3,), (3,), [(0,), 0, ()]), ((3,), (3,), [(0, 1), 0, ()]), ((3,), (3,), [0.0, 0, ()]),
               ((3,), (3,), [np.int8(0), np.array(-1), ()]), ((3,), (3, 2), [0, (0, 1), 0]),
               ((3,), (3, 2), [0, (0, 1)]), ((3,), (3, 2), [(0,), (0, 1), (0,)]), ((2, 3), (3,), [(0, 1), 0, 0]),
               ((3, 2), (3,), [(1, 0), 0, 0]), ((4, 3, 2), (3,), [(2, 1), 0, 0]), ((4, 3, 2), (3,), [(2, 1), 0, 1])]


@pytest.mark.parametrize("shape_a,shape_b,axes", VECTOR_AXES, ids=repr)
def test_axes_of_vectors_as_numpy(shape_a, shape_b, axes):
    """A 1-D operand's core axis by an int or a 1-tuple; the result's entry omitted only where it has
    no core axis (1-D @ 1-D)."""
    a = np.arange(float(np.prod(shape_a))).reshape(shape_a)
    b = np.arange(float(np.prod(shape_b))).reshape(shape_b) + 1
    same_outcome(*both(a, b, axes=axes), layout=True)


def test_matmul_axes():
    """numpy's test_matmul_axes."""
    a = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    c = tilemm.matmul(a, a, axes=[(-2, -1), (-1, -2), (1, 2)])
    assert c.shape == (3, 4, 4)
    d = tilemm.matmul(a, a, axes=[(-2, -1), (-1, -2), (0, 1)])
    assert d.shape == (4, 4, 3)
    e = np.swapaxes(d, 0, 2)
    np.testing.assert_array_equal(e, c)
    f = tilemm.matmul(a, np.arange(3), axes=[(1, 0), (0), (0)])
    assert f.shape == (4, 5)
    np.testing.assert_array_equal(f, np.matmul(a, np.arange(3), axes=[(1, 0), (0), (0)]))


def test_axes_give_numpys_view():
    """The result is NumPy's: a view of a C-contiguous product with the core axes placed (its strides)."""
    a, b = np.arange(24.0).reshape(2, 3, 4), np.arange(40.0).reshape(2, 4, 5)
    for axes in ([(1, 2), (1, 2), (2, 0)], [(1, 2), (1, 2), (0, 1)], [(1, 2), (1, 2), (2, 1)]):
        for order in ("K", "C", "F", "A"):
            same_outcome(*both(a, b, axes=axes, order=order), layout=True)
    same_outcome(*both(a, b, axes=[(1, 2), (1, 2), (0, 1)]), words=False)     # shapes that don't meet


@pytest.mark.parametrize("axes", [[(-2, -1)] * 3, [(1, 2), (1, 2), (2, 0)], [(1, 2), (1, 2), (2, 1)]], ids=str)
def test_axes_results_own_their_data(axes):
    """NumPy allocates an axes= result with its core axes placed: an array of its own (its strides
    permuted), not a view of another (tilemm's moved view, even for the default axes, before)."""
    a, b = np.arange(24.0).reshape(2, 3, 4), np.arange(40.0).reshape(2, 4, 5)
    want = np.matmul(a, b, axes=axes)
    for kernel in (None, "cpu-tiled"):
        got = tilemm.matmul(a, b, axes=axes, kernel=kernel)
        same_answer(got, want, layout=True)
        assert got.flags.owndata == want.flags.owndata


def test_axes_on_a_kernel_of_the_ladder_and_again():
    a, b = np.arange(24).reshape(2, 3, 4), np.arange(40).reshape(2, 4, 5)
    want = np.matmul(a, b, axes=[(1, 2), (1, 2), (2, 0)])
    for _ in range(2):
        same_answer(tilemm.matmul(a, b, axes=[(1, 2), (1, 2), (2, 0)], kernel="cpu-tiled"), want)


def test_axes_with_an_unsafe_out():
    a, b = np.full((2, 3, 4), 0.5), np.ones((2, 4, 5))
    keywords = dict(axes=[(1, 2), (1, 2), (2, 0)], casting="unsafe", out=np.zeros((5, 2, 3), np.int16))
    same_outcome(*both(a, b, **keywords))


# --- order= -----------------------------------------------------------------------------------------

def layouts():
    c, f = np.arange(6.0).reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(3, 2))
    stack_c, stack_f = np.arange(24.0).reshape(4, 2, 3), np.asfortranarray(np.arange(18.0).reshape(3, 3, 2)[:1])
    return {"CC": (c, c.T.copy()), "FF": (np.asfortranarray(c), f), "CF": (c, f), "FC": (np.asfortranarray(c), c.T),
            "strided": (c[:, ::2], np.ones((2, 5))[:, ::2]), "stackC": (stack_c, c.T.copy()),
            "stackF": (np.asfortranarray(stack_c), f), "column": (np.asfortranarray(c), np.ones((3, 1))),
            "vector": (np.asfortranarray(stack_c), np.ones(3)), "both-vectors": (np.ones(3), np.ones(3)),
            "F-stack-of-one": (stack_f, np.ones((2, 2)))}


@pytest.mark.parametrize("order", ["K", "A", "C", "F", "k", "f", b"F", None])
@pytest.mark.parametrize("operands", list(layouts()))
def test_order_as_numpy(order, operands):
    """K and C: C-contiguous (matmul's K); F: Fortran over every dimension; A: Fortran where every
    operand is Fortran-contiguous."""
    a, b = layouts()[operands]
    same_outcome(*both(a, b, order=order), layout=True)


def stacks():
    """Stacks of two batch axes or more, laid out so that NumPy's iterator orders the result's stack
    otherwise than C (order="K"): Fortran, batch axes swapped in memory, walked backwards, broadcast."""
    swapped = np.arange(360.0).reshape(4, 3, 5, 6).transpose(1, 0, 2, 3)
    backwards = np.arange(360.0).reshape(3, 4, 5, 6)[::-1, ::-1]
    fortran = np.asfortranarray(np.arange(360.0).reshape(3, 4, 5, 6))
    return {"F": (fortran, np.asfortranarray(np.ones((3, 4, 6, 2)))),
            "swapped": (swapped, np.ones((4, 3, 6, 2)).transpose(1, 0, 2, 3)),
            "backwards": (backwards, np.ones((3, 4, 6, 2))[::-1, ::-1]),
            "broadcast": (fortran[:, :1], np.asfortranarray(np.ones((4, 6, 2)))),
            "three": (np.asfortranarray(np.ones((2, 3, 2, 5, 6))), np.asfortranarray(np.ones((2, 3, 2, 6, 1)))),
            "vector": (np.asfortranarray(np.ones((2, 3, 5, 6))), np.ones(6))}


@pytest.mark.parametrize("keywords", [{}, dict(kernel="numpy"), dict(kernel="cpu-naive"), dict(kernel="cpu-tiled"),
                                      dict(order="K"), dict(order="C"), dict(order="A"), dict(dtype="float32"),
                                      dict(casting="unsafe", dtype="int64")], ids=repr)
@pytest.mark.parametrize("operands", list(stacks()))
def test_stacks_laid_out_as_numpys_iterator_lays_them_out(operands, keywords):
    """The result's stack axes in the order NumPy's iterator gives them for order="K" (its strides
    exactly), on the first call and a repeated one; C for "C"."""
    a, b = stacks()[operands]
    numpy_keywords = {name: value for name, value in keywords.items() if name != "kernel"}
    for _ in range(2):
        want = np.matmul(a, b, **numpy_keywords)
        same_answer(tilemm.matmul(a, b, **keywords), want, layout=True)


@pytest.mark.parametrize("order", ["X", "", "kk", 1])
def test_orders_numpy_refuses(order):
    same_outcome(*both(np.ones((2, 2)), np.ones((2, 2)), order=order))


def test_order_is_ignored_with_out():
    a = np.asfortranarray(np.ones((2, 3)))
    out = np.zeros((2, 2))
    assert tilemm.matmul(a, a.T, out=out, order="F") is out and out.flags.c_contiguous and (out == 3).all()


# --- subok= -----------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("subok", [True, False, 0, None, "x", np.True_])
def test_subok_as_numpy(subok):
    m = np.matrix([[1, 2], [3, 4]])
    got = same_outcome(*both(m, m, subok=subok))
    if got is not None:
        assert type(got) is (np.matrix if subok else np.ndarray)


# --- array-likes ------------------------------------------------------------------------------------

class WithArray:
    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


class WithInterface:
    def __init__(self, values):
        self.values = np.ascontiguousarray(values)
        self.__array_interface__ = self.values.__array_interface__


class RefusesConversion:
    def __array__(self, *args, **kwargs):
        raise NotImplementedError


class AnswersUfuncs:
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return "its own"


class RefusesUfuncs:
    __array_ufunc__ = None


ARRAY_LIKES = {
    "lists": ([[1, 2], [3, 4]], [[1], [2]]),
    "tuples": (((1.5, 2.0),), ((1,), (2,))),
    "list-and-array": ([1, 2, 3], np.arange(6).reshape(3, 2)),
    "vectors": ([1, 2], (3, 4)),
    "python-scalar": (3, np.ones((2, 2))),
    "numpy-scalar": (np.ones(2), np.float64(2)),
    "empty-lists": ([], []),
    "ragged": ([[1, 2], [1]], [[1], [2]]),
    "strings": ([["1", "a"]], [[1], [2]]),
    "string-scalar": ("ab", [1, 2]),
    "__array__": (WithArray(np.arange(6.0).reshape(2, 3)), WithArray(np.ones((3, 2), np.int32))),
    "__array_interface__": (WithInterface(np.arange(6).reshape(2, 3)), np.ones((3, 2))),
    "bools": ([[True, False]], [[True], [True]]),
}


@pytest.mark.parametrize("operands", list(ARRAY_LIKES))
def test_array_likes_as_numpy(operands):
    """Converted as np.asarray converts them (a scalar: NumPy's 0-d refusal; ragged lists: NumPy's
    ValueError; strings: a dtype neither multiplies, TypeError)."""
    a, b = ARRAY_LIKES[operands]
    if operands.startswith("string"):   # no loop in NumPy; a dtype tilemm does not multiply: TypeErrors both
        for keywords in ({}, dict(casting="same_kind")):
            pytest.raises(TypeError, np.matmul, a, b, **keywords)
            pytest.raises(TypeError, tilemm.matmul, a, b, **keywords)
        return
    same_outcome(*both(a, b), words=operands in ("python-scalar", "numpy-scalar", "ragged"))
    same_outcome(*both(a, b, casting="same_kind"), words=operands in ("python-scalar", "numpy-scalar", "ragged"))


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
@pytest.mark.parametrize("operands", [(np.array([["1", "2.5"]]), np.array([[3], [4]])),
                                      (np.array([[b"7", b"1"]]), np.array([[3], [4]])),
                                      (np.array([[1, 2]], "m8[s]"), np.array([[3], [4]])),
                                      (np.array([["1", "a"]]), np.array([[3], [4]])), ("12", [])],
                         ids=["str", "bytes", "timedelta", "not-a-number", "str-scalar"])
@pytest.mark.parametrize("keywords", [dict(dtype="float64", casting="unsafe"), dict(dtype="int64", casting="unsafe"),
                                      dict(dtype="float32")], ids=repr)
def test_strings_and_datetimes_cast_by_dtype_as_numpy_casts_them(operands, keywords, kernel):
    """str, bytes and datetime operands with dtype= and casting="unsafe": cast as NumPy casts them
    (strings parsed as numbers, NumPy's ValueError where one is not), then multiplied; refused
    under "same_kind" with NumPy's casting error (a TypeError)."""
    ours, theirs = both(*operands, **keywords)
    same_outcome(lambda: ours() if kernel is None else tilemm.matmul(*operands, kernel=kernel, **keywords), theirs,
                 words=False)


@pytest.mark.parametrize("keywords", [{}, dict(casting="same_kind")], ids=repr)
def test_an_array_like_that_decides_ufuncs_itself_is_refused(keywords):
    """numpy.matmul hands the call to an operand's own __array_ufunc__ (its answer is its own), and
    refuses one whose __array_ufunc__ is None: a TypeError from tilemm for both, not a product of
    its 0-d np.asarray."""
    assert np.matmul(AnswersUfuncs(), np.ones(2), **keywords) == "its own"
    with pytest.raises(TypeError, match="__array_ufunc__"):
        tilemm.matmul(AnswersUfuncs(), np.ones(2), **keywords)
    with pytest.raises(TypeError, match="__array_ufunc__"):
        tilemm.matmul([1.0, 2.0], AnswersUfuncs(), **keywords)
    same_outcome(*both(np.ones(2), RefusesUfuncs(), **keywords))


def test_a_failing_conversion_passes_its_error_on():
    """numpy's test_dot_matmul_inner_array_casting_fails: __array__'s own error, not a TypeError."""
    with pytest.raises(NotImplementedError):
        np.matmul(RefusesConversion(), RefusesConversion())
    with pytest.raises(NotImplementedError):
        tilemm.matmul(RefusesConversion(), RefusesConversion())


# --- tilemm.plan and the plan cache -----------------------------------------------------------------

def test_plan_takes_dtype_signature_and_casting():
    a, b = np.array([[1.5, 2.5]]), np.array([[2.0], [3.0]])
    want = np.matmul(a, b, dtype=np.int64, casting="unsafe")
    np.testing.assert_array_equal(tilemm.plan(a, b, dtype=np.int64, casting="unsafe").execute(), want)
    np.testing.assert_array_equal(tilemm.plan(a, b, signature="ll->l", casting="unsafe").execute(), want)
    with pytest.raises(contract.InputCastingError):
        tilemm.plan(a, b, dtype=np.int64)
    with pytest.raises(contract.InputCastingError, match="casting rule 'no'"):
        tilemm.plan(a.astype(np.float32), b, casting="no")
    for keywords in (dict(axes=[(0, 1), (0, 1), (0, 1)]), dict(order="F"), dict(subok=False)):
        with pytest.raises(TypeError, match="is tilemm.matmul's"):
            tilemm.plan(a, b, **keywords)


def test_unhashable_arguments_get_no_cache_key():
    """A list among a call's arguments: no plan-cache key (plan() says what is wrong with it),
    never the cache's "unhashable type"."""
    a = np.ones((2, 2))
    assert plan_cache.call_key(a, a, "cpu-tiled", None, None, {"block_m": [8]}) is None
    assert plan_cache.call_key(a, a, ["cpu-tiled"], None, None, {}) is None
    with pytest.raises((TypeError, ValueError)) as refusal:
        tilemm.matmul(a, a, kernel="cpu-tiled", block_m=[8])
    assert "unhashable" not in str(refusal.value)


# --- torch tensors: the same keywords, NumPy's meaning -----------------------------------------------

def test_torch_tensors_take_numpys_keywords():
    torch = pytest.importorskip("torch")
    x = np.array([[1.7, -2.9, 3.5], [100.2, 0.9, -0.9]])
    y = np.array([[1.5, 2.5], [2.5, -7.9], [4.0, 3.99]])
    a, b = torch.from_numpy(x), torch.from_numpy(y)
    got = tilemm.matmul(a, b, dtype=torch.int64, casting="unsafe")
    assert got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), np.matmul(x, y, dtype=np.int64, casting="unsafe"))
    with pytest.raises(contract.InputCastingError, match=r"input 0 from dtype\('float64'\) to dtype\('int64'\)"):
        tilemm.matmul(a, b, dtype=torch.int64)
    with pytest.raises(contract.InputCastingError, match="casting rule 'no'"):
        tilemm.matmul(a.float(), b, casting="no")
    s, t = np.arange(24.0).reshape(2, 3, 4), np.arange(40.0).reshape(2, 4, 5)
    moved = tilemm.matmul(torch.from_numpy(s), torch.from_numpy(t), axes=[(1, 2), (1, 2), (2, 0)])
    want = np.matmul(s, t, axes=[(1, 2), (1, 2), (2, 0)])
    assert tuple(moved.shape) == want.shape
    np.testing.assert_allclose(moved.numpy(), want)
    fortran = tilemm.matmul(a, b, order="F")
    assert fortran.mT.is_contiguous() and not fortran.is_contiguous()
    out = torch.zeros(2, 2, dtype=torch.int32)
    assert tilemm.matmul(a, b, out=out, casting="unsafe") is out
    np.testing.assert_array_equal(out.numpy(), np.matmul(x, y, out=np.zeros((2, 2), np.int32), casting="unsafe"))
    with pytest.raises(TypeError, match="torch.as_tensor"):
        tilemm.matmul([[1.0, 2.0, 3.0]], b, dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_gpu_arrays_take_numpys_keywords(kind):
    """On the GPU: an unsafe float -> int dtype, axes, order="F" and an unsafe out, for torch CUDA
    tensors and CuPy arrays, each against NumPy's answer on the host."""
    if kind == "torch":
        torch = pytest.importorskip("torch")

        def device(x):
            return torch.from_numpy(np.ascontiguousarray(x)).cuda()

        def host(x):
            return x.cpu().numpy()
        int64, int32 = torch.int64, torch.int32
    else:
        cupy = pytest.importorskip("cupy")
        device, host, int64, int32 = cupy.asarray, cupy.asnumpy, np.int64, np.int32
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((3, 40, 24)) * 9, rng.standard_normal((3, 24, 16)) * 9
    got = tilemm.matmul(device(x), device(y), dtype=int64, casting="unsafe")
    np.testing.assert_array_equal(host(got), np.matmul(x, y, dtype=np.int64, casting="unsafe"))
    axes = [(0, 2), (1, 2), (2, 0)]
    s, t = np.ascontiguousarray(x.transpose(1, 0, 2)), y
    got = tilemm.matmul(device(s), device(t), axes=axes)
    np.testing.assert_allclose(host(got), np.matmul(s, t, axes=axes), rtol=1e-6, atol=1e-6)
    fortran = tilemm.matmul(device(x), device(y), order="F")
    np.testing.assert_allclose(host(fortran), np.matmul(x, y), rtol=1e-6, atol=1e-6)
    assert fortran.permute(2, 1, 0).is_contiguous() if kind == "torch" else fortran.flags.f_contiguous
    out = device(np.zeros((3, 40, 16), np.int32))
    assert tilemm.matmul(device(x), device(y), out=out, casting="unsafe") is out
    want = np.matmul(x, y, out=np.zeros((3, 40, 16), np.int32), casting="unsafe")
    assert np.abs(host(out).astype(np.int64) - want).max() <= 1     # truncation of sums within the float bound
    assert out.dtype == int32
