"""matmul's contract at the boundary: NumPy's shapes and dtypes, and clear errors."""
import numpy as np
import pytest
import torch

import tilemm
from tilemm.numerics.accuracy import compare
from tilemm.plans import cache as plan_cache
from tilemm.engine import workspaces

from .cases import operands

CPU_KERNELS = ["numpy", "cpu-naive", "cpu-tiled"]


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)),
                                   ((2, 4, 5), (5, 3)), ((4, 5), (3, 5, 2)), ((2, 1, 4, 5), (3, 5, 2))])
def test_shapes_as_numpy(kernel, sa, sb):
    """NumPy's shapes and types, a repeated call too: 1-D @ 1-D is a NumPy scalar, a 0-d tensor."""
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, sa).astype(np.int32)
    b = rng.integers(-50, 50, sb).astype(np.int32)
    expected = np.matmul(a, b)
    for _ in range(2):
        c = tilemm.matmul(a, b, kernel=kernel)
        assert type(c) is type(expected) and np.shape(c) == expected.shape
        np.testing.assert_array_equal(c, expected)
        t = tilemm.matmul(torch.from_numpy(a), torch.from_numpy(b), kernel=kernel)
        assert t.shape == expected.shape and t.dtype == torch.int32
        np.testing.assert_array_equal(t.numpy(), expected)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_dot_of_vectors_into_out(kind):
    """1-D @ 1-D into a 0-d out (it once came back as shape (1,) for torch, and failed to copy)."""
    a = np.arange(5, dtype=np.float32)
    x, out = (a, np.full((), 7, np.float32)) if kind == "numpy" else (torch.from_numpy(a), torch.full((), 7.0))
    assert tilemm.matmul(x, x, kernel="cpu-tiled", out=out) is out and float(out) == 30.0


@pytest.mark.parametrize("da,db", [("int8", "uint8"), ("int8", "float32"), ("float16", "float32"),
                                   ("uint32", "int32"), ("uint64", "int64"), ("float16", "float16")])
def test_mixed_dtypes_follow_numpy(da, db):
    a, _ = operands(1, 6, 5, 7, da)
    _, b = operands(2, 6, 5, 7, db)
    c = tilemm.matmul(a, b, kernel="cpu-tiled")
    assert c.dtype == np.matmul(a, b).dtype


def test_torch_in_torch_out_bfloat16():
    a = torch.randn(9, 17, dtype=torch.bfloat16)
    b = torch.randn(17, 5, dtype=torch.bfloat16)
    c = tilemm.matmul(a, b, kernel="cpu-tiled")
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and c.shape == (9, 5)
    ref = a.double() @ b.double()
    assert torch.allclose(c.double(), ref, rtol=2**-7, atol=1e-2)


def test_torch_integers_exact():
    a = torch.randint(-2**31, 2**31 - 1, (13, 31), dtype=torch.int32)
    b = torch.randint(-2**31, 2**31 - 1, (31, 7), dtype=torch.int32)
    c = tilemm.matmul(a, b, kernel="cpu-tiled")
    assert c.dtype == torch.int32
    np.testing.assert_array_equal(c.numpy(), np.matmul(a.numpy(), b.numpy()))


def test_out_is_filled_and_returned():
    a, b = operands(3, 4, 5, 6, "float64")
    out = np.empty((4, 5))
    assert tilemm.matmul(a, b, kernel="cpu-naive", out=out) is out
    np.testing.assert_allclose(out, a @ b)


def test_default_kernel_on_host_is_numpy():
    a, b = operands(3, 4, 5, 6, "float32")
    assert tilemm.plan(a, b).kernel.name == "numpy"


def test_the_numpy_rung_sums_float16_in_float32_through_blas():
    """NumPy's float16 loop sums in float32 and rounds once (4096 ones add up to 4096, where float16
    sums would stop at 2048); the rung makes the same sums as a float32 product, rounded once."""
    assert tilemm.kernel("numpy").compute_dtype("float16") == "float32"
    ones_a, ones_b = np.ones((2, 4096), np.float16), np.ones((4096, 3), np.float16)
    for kernel in ("numpy", None):
        c = tilemm.matmul(ones_a, ones_b, kernel=kernel)
        assert c.dtype == np.float16 and np.array_equal(c, np.matmul(ones_a, ones_b)) and c[0, 0] == 4096
        a, b = operands(5, 70, 90, 300, "float16")
        verdict = compare(tilemm.matmul(a, b, kernel=kernel), a, b, "float16")
        assert verdict.ok, verdict.message


@pytest.mark.parametrize("compiled", [False, True])
def test_default_kernel_for_host_integers(compiled, monkeypatch):
    """NumPy's integer matmul is a plain loop: cpu-tiled is the default from 2^27 multiply-adds,
    and from 2^18 where this process has compiled it for the dtype it computes in (int8 in int32)."""
    from tilemm.ladder import r02_cpu_tiled as cpu
    monkeypatch.setattr(cpu, "tiled_compiled_for", lambda dtype: compiled and dtype == "int32")
    a = np.ones((512, 512), np.int32)
    assert tilemm.plan(a, a).kernel.name == "cpu-tiled"                       # 2^27
    assert tilemm.plan(a[:256], a).kernel.name == ("cpu-tiled" if compiled else "numpy")
    assert tilemm.plan(a[:256].astype(np.int8), a.astype(np.int8)).kernel.name == ("cpu-tiled" if compiled else "numpy")
    assert tilemm.plan(a[:256].astype(np.int64), a.astype(np.int64)).kernel.name == "numpy"     # not compiled
    assert tilemm.plan(a[:32, :32], a[:32, :32]).kernel.name == "numpy"       # under 2^18
    assert tilemm.plan(a.astype(np.float32), a.astype(np.float32)).kernel.name == "numpy"


def test_cpu_tiled_knows_what_it_has_compiled():
    from tilemm.ladder import r02_cpu_tiled as cpu
    a = np.ones((8, 8), np.int64)
    tilemm.matmul(a, a, kernel="cpu-tiled")
    assert cpu.tiled_compiled_for("int64") and not cpu.tiled_compiled_for("float16")


def test_kernels_have_metadata():
    for k in tilemm.kernels():
        assert k.name and k.device in ("cpu", "cuda") and k.dtypes and k.seed and k.summary
        t = k.traffic(tilemm.ladder.registry.Problem(64, 64, 64, "float32"), **{p.name: p.default for p in k.params})
        assert t.read >= 2 * 64 * 64 and t.written >= 64 * 64
    assert [k.rung for k in tilemm.kernels()] == sorted(k.rung for k in tilemm.kernels())


# --- bad input: the error names the problem, before any kernel runs -------------------------

def bad(exc, match, *args, **kwargs):
    with pytest.raises(exc, match=match):
        tilemm.matmul(*args, **kwargs)


def test_mismatched_inner_dimensions_show_both_shapes():
    bad(ValueError, r"mismatch in its core dimension 0.*size 4 is different from 3.*\(2, 3\) and \(4, 5\)",
        np.ones((2, 3)), np.ones((4, 5)))


def test_scalars_refused():
    bad(ValueError, "operand 0 does not have enough dimensions", np.array(3.0), np.ones(3))


def test_unbroadcastable_stacks():
    bad(ValueError, "can't be broadcast", np.ones((2, 3, 4)), np.ones((3, 4, 5)))


@pytest.mark.parametrize("dtype,word", [("U3", "dtype <U3"), ("M8[s]", "datetime64"), ("m8[s]", "timedelta64")])
def test_unsupported_dtypes(dtype, word):
    bad(TypeError, word, np.ones((2, 2)).astype(dtype), np.ones((2, 2)))


# NumPy's own tests of object arrays (numpy/_core/tests/test_multiarray.py, TestMatmul), with
# tilemm.matmul where they call np.matmul: NumPy's loop on the host, the objects' own + and *
def test_object_arrays_of_fractions_as_numpy():
    import fractions
    f = np.vectorize(fractions.Fraction)
    rng = np.random.default_rng(0)

    def random_ints():
        return rng.integers(1, 1000, size=(10, 3, 3))
    m1, m2 = f(random_ints(), random_ints()), f(random_ints(), random_ints())
    m3 = tilemm.matmul(m1, m2)
    assert m3.dtype == object and (m3 == np.matmul(m1, m2)).all()       # exact: fractions
    n1, n2, n3 = (x.astype(float) for x in (m1, m2, m3))
    np.testing.assert_allclose(n3, tilemm.matmul(n1, n2))


def test_object_vectors_give_numpy_s_scalar_type():
    from fractions import Fraction as F
    v = np.array([F(2, 3), F(5, 7)])
    res = tilemm.matmul(v, v)
    assert type(res) is F and res == np.matmul(v, v)


@pytest.mark.parametrize("kernel", [None, "numpy"])
def test_empty_object_products_as_numpy(kernel):
    a, b = np.empty((3, 0), dtype=object), np.empty((0, 3), dtype=object)
    c = tilemm.matmul(a, b, kernel=kernel)
    np.testing.assert_array_equal(c, np.zeros((3, 3)))
    assert c.dtype == np.matmul(a, b).dtype
    c = tilemm.matmul(a.T, b.T, kernel=kernel)
    assert c.shape == (0, 0) and c.dtype == object


def test_object_arrays_beside_numbers_and_into_out_as_numpy():
    from decimal import Decimal
    a = np.array([[Decimal(1), Decimal("0.5")], [Decimal(2), Decimal(3)]])
    b = np.array([[1, 2], [3, 4]])
    want = np.matmul(a, b)
    got = tilemm.matmul(a, b)
    assert got.dtype == want.dtype == object and (got == want).all()
    out = np.empty((2, 2), dtype=object)
    assert tilemm.matmul(a, b, out=out) is out and (out == want).all()
    with pytest.raises(TypeError):                       # object into float64: not a same-kind cast
        np.matmul(a, b, out=np.empty((2, 2)))
    with pytest.raises(TypeError):
        tilemm.matmul(a, b, out=np.empty((2, 2)))


def test_object_arrays_on_a_gpu_rung_are_refused_naming_the_numpy_rung():
    bad(TypeError, "kernel='numpy'", np.ones((2, 2), dtype=object), np.ones((2, 2), dtype=object), kernel="cpu-tiled")


def test_lists_beside_a_torch_tensor_are_refused_with_a_hint():
    """Array-likes become NumPy arrays as numpy.matmul converts them (tests/test_numpy_keywords.py);
    beside a torch tensor there is no NumPy array to make."""
    torch = pytest.importorskip("torch")
    bad(TypeError, "torch.as_tensor", [[1.0, 2.0]], torch.ones(2, 1))
    np.testing.assert_array_equal(tilemm.matmul([[1, 2]], np.ones((2, 1))), np.matmul([[1, 2]], np.ones((2, 1))))


@pytest.mark.parametrize("kernel", [None, "numpy", "cpu-naive", "cpu-tiled"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "uint16", "float32", "float64", "float16"])
def test_operands_in_the_other_byte_order_as_numpy(kernel, dtype):
    """Data read from a file in the other byte order: NumPy multiplies it, and so does tilemm, into a
    native result (a repeated call too, which must not replay the first call's copies)."""
    rng = np.random.default_rng(3)
    a = rng.integers(-9, 9, (7, 5)).astype(dtype)
    b = rng.integers(-9, 9, (5, 6)).astype(dtype)
    swapped = np.dtype(dtype).newbyteorder()
    for scale in (1, 2):                                     # the second call: other values, same key
        a2, b2 = (a * scale).astype(swapped), (b * scale).astype(swapped)
        c = tilemm.matmul(a2, b2, kernel=kernel)
        ref = np.matmul(a2, b2)
        assert c.dtype == ref.dtype and c.dtype.isnative and np.array_equal(c, ref)


def test_meta_tensors_get_the_op_s_fake_and_a_plan_refuses_them():
    a = torch.ones(3, 4, device="meta")
    c = tilemm.matmul(a, a.T)                    # the shape, as torch.matmul infers it
    assert c.device.type == "meta" and c.shape == (3, 3)
    with pytest.raises(ValueError, match="torch device meta"):     # a plan needs memory to read
        tilemm.plan(a, a.T)


def test_mixed_kinds_refused():
    bad(TypeError, "numpy array and operand 1 a torch", np.ones((2, 2)), torch.ones(2, 2, dtype=torch.float64))


def test_unknown_kernel_lists_known_ones():
    bad(ValueError, "unknown kernel 'tilde'.*cpu-tiled", np.ones((2, 2)), np.ones((2, 2)), kernel="tilde")


def test_unknown_parameter_lists_parameters():
    bad(TypeError, "no parameter 'tile'.*block_m", np.ones((2, 2)), np.ones((2, 2)), kernel="cpu-tiled", tile=3)


def test_bad_parameter_value():
    bad(ValueError, "block_m=3 is not allowed", np.ones((2, 2)), np.ones((2, 2)), kernel="cpu-tiled", block_m=3)


@pytest.mark.parametrize("out,match", [(np.empty((3, 3)), "mismatch in its core dimension"),
                                       (np.empty((2, 2), np.int32), "Cannot cast ufunc 'matmul' output"),
                                       (torch.empty(2, 2, dtype=torch.float64), "torch")])
def test_bad_out(out, match):
    """(an out of a narrower float is cast into, as NumPy casts: tests/test_numpy_conformance.py)"""
    bad((ValueError, TypeError), match, np.ones((2, 3)), np.ones((3, 2)), out=out)


@pytest.mark.parametrize("kernel", ["numpy", "cpu-naive", "cpu-tiled"])
@pytest.mark.parametrize("out_dtype", ["int32", np.int32, torch.int32, np.dtype("int64"), np.dtypes.Int32DType])
def test_out_dtype_is_numpy_matmul_dtype(kernel, out_dtype):
    """(a DType class names its dtype, as NumPy's dtype= reads it: np.dtype() reads it as object)"""
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (9, 70), dtype=np.int8)
    b = rng.integers(-128, 128, (70, 5), dtype=np.int8)
    c = tilemm.matmul(a, b, kernel=kernel, out_dtype=out_dtype)
    name = str(out_dtype).removeprefix("torch.") if isinstance(out_dtype, torch.dtype) else out_dtype
    want = np.matmul(a, b, dtype=name)
    assert c.dtype == want.dtype
    np.testing.assert_array_equal(c, want)
    assert not np.array_equal(c, np.matmul(a, b))          # int8's own sums wrap


@pytest.mark.parametrize("kernel", ["cpu-naive", "cpu-tiled", "tensorcore-f32"])
def test_a_narrower_out_dtype_rounds_the_operands_first(kernel):
    """out_dtype="float16" on float64 and int32 operands: numpy.matmul multiplies their float16
    values (inf past 65504), and so does a rung that computes float16 in float32; a bfloat16 result
    the same, from float32 tensors. Once those rungs multiplied the wider values, 54x off float16's
    bound at 87 x 6 x 2."""
    from tilemm.numerics.accuracy import compare
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((87, 2)), rng.standard_normal((2, 6))
    c = tilemm.matmul(a, b, kernel=kernel, out_dtype="float16")
    verdict = compare(c, a.astype(np.float16), b.astype(np.float16), "float16")
    assert c.dtype == np.float16 and verdict.ok, verdict.message
    ai, bi = np.array([[70000, 1], [2, 3]], np.int32), np.array([[1, 0], [0, 1]], np.int32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(tilemm.matmul(ai, bi, kernel=kernel, out_dtype="float16"),
                                      np.matmul(ai, bi, dtype=np.float16))      # inf, 1; 2, 3
    t = torch.from_numpy(a.astype(np.float32))
    want = (t.bfloat16().double() @ t.T.bfloat16().double()).bfloat16()
    got = tilemm.matmul(t, t.T, kernel=kernel, out_dtype="bfloat16")
    assert got.dtype == torch.bfloat16 and (got.double() - want.double()).abs().max() <= 2**-7 * want.abs().max()


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
def test_a_tensor_that_requires_grad_records_a_gradient(kernel):
    """Where torch.matmul's result would carry a gradient, tilemm's does (a repeated call too, and
    after a plain call of the same shapes); under torch.no_grad() or detached it carries none.
    A plan records no graph: it refuses such a tensor."""
    a, b = torch.randn(5, 4, requires_grad=True), torch.randn(4, 3)
    with torch.no_grad():
        assert not tilemm.matmul(a, b, kernel=kernel).requires_grad
    assert not tilemm.matmul(a.detach(), b, kernel=kernel).requires_grad
    for _ in range(2):
        c = tilemm.matmul(b.T, a.T, kernel=kernel)
        assert c.requires_grad and torch.allclose(c, b.T @ a.T.detach(), atol=1e-5)
        c.sum().backward()
        assert torch.allclose(a.grad, torch.ones(3, 5).T @ b.T, atol=1e-5)
        a.grad = None
    with pytest.raises(TypeError, match="operand 0 requires grad"):
        tilemm.plan(a, b, kernel=kernel)


def test_bfloat16_out_dtype_needs_torch():
    with pytest.raises(TypeError, match="needs torch tensors"):
        tilemm.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), out_dtype="bfloat16")


@pytest.mark.parametrize("operands,out_dtype", [("float32", "int32"), ("int32", "uint8"), ("float32", "bool")])
def test_out_dtype_refused_as_numpy_refuses(operands, out_dtype):
    a = np.ones((2, 2), operands)
    with pytest.raises(TypeError) as theirs:
        np.matmul(a, a, dtype=out_dtype)
    with pytest.raises(TypeError) as ours:           # NumPy's class and words
        tilemm.matmul(a, a, out_dtype=out_dtype)
    assert isinstance(ours.value, type(theirs.value)) and str(ours.value) == str(theirs.value)


def test_auto_times_the_fast_rungs_once_and_caches_the_winner(tmp_path, monkeypatch):
    from tilemm.system import tuning
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(5)
    a = rng.integers(-2**31, 2**31 - 1, (70, 90), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, (90, 40), dtype=np.int64).astype(np.int32)
    c = tilemm.matmul(a, b, kernel="auto")
    np.testing.assert_array_equal(c, np.matmul(a, b))
    assert tuning.last["cached"] is False and tuning.last["params"]["kernel"] in ("numpy", "cpu-tiled")
    assert tuning.last["tried"] == 2 and tuning.last["key"].endswith("|int32|70x40x90|nn")
    np.testing.assert_array_equal(tilemm.matmul(a, b.T.copy().T, kernel="auto"), np.matmul(a, b))
    assert tuning.last["key"].endswith("|nt")                      # the layout is part of the key
    tilemm.plan(a, b, kernel="auto")                               # (a repeated matmul reuses its plan)
    assert tuning.last["cached"] is True


def test_a_repeated_call_reuses_its_plan_and_keeps_no_operand():
    a, b = np.ones((5, 7), np.float32), np.ones((7, 3), np.float32)
    tilemm.matmul(a, b, kernel="cpu-tiled", block_m=8)
    key = plan_cache.call_key(a, b, "cpu-tiled", None, None, {"block_m": 8})
    kept = plan_cache.PLANS[key]
    assert kept.a is None and kept.b is None and kept.params["block_m"] == 8
    a2 = np.arange(35, dtype=np.float32).reshape(5, 7)
    np.testing.assert_array_equal(tilemm.matmul(a2, b, kernel="cpu-tiled", block_m=8), a2 @ b)   # the new operands
    assert plan_cache.PLANS[key] is kept
    assert plan_cache.call_key(a2.T.copy().T, b, "cpu-tiled", None, None, {"block_m": 8}) != key           # strides count
    with pytest.raises(ValueError, match="mismatch"):                 # a bad call is checked, never cached
        tilemm.matmul(a, a, kernel="cpu-tiled")


def test_auto_takes_no_parameters():
    a = np.ones((3, 3))
    with pytest.raises(TypeError, match="takes no kernel parameters"):
        tilemm.matmul(a, a, kernel="auto", tile=16)


# --- the library rung (cublas) ------------------------------------------------------------------

def test_library_sets_torch_flags_for_one_call_only():
    from tilemm.ladder.library import torch_matmul_flags
    settings = torch.backends.cuda.matmul
    before = settings.allow_bf16_reduced_precision_reduction
    settings.allow_bf16_reduced_precision_reduction = True
    try:
        with torch_matmul_flags(allow_bf16_reduced_precision_reduction=False):
            assert settings.allow_bf16_reduced_precision_reduction is False
        assert settings.allow_bf16_reduced_precision_reduction is True
    finally:
        settings.allow_bf16_reduced_precision_reduction = before


@pytest.mark.parametrize("dtype, flag", [("bfloat16", "allow_bf16_reduced_precision_reduction"),
                                         ("float16", "allow_fp16_reduced_precision_reduction"),
                                         ("float32", "allow_tf32")])
def test_the_fast_library_product_turns_off_the_one_flag_its_dtype_reads(dtype, flag, monkeypatch):
    """A repeated default call's product (library.torch_product) multiplies with the flag off and
    puts the caller's setting back as it was."""
    from tilemm.ladder.library import torch_product
    settings = torch.backends.cuda.matmul
    get = getattr(torch._C, f"_get_cublas_{flag}")
    seen = []
    matmul = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda a, b: seen.append(getattr(settings, flag)) or matmul(a, b))
    before = get()
    try:
        setattr(settings, flag, True)
        caller = get()
        a = torch.ones(2, 3, dtype=getattr(torch, dtype))
        assert torch.equal(torch_product(dtype)(a, a.T), torch.full((2, 2), 3, dtype=a.dtype))
        assert seen == [False] and get() == caller
        setattr(settings, flag, False)
        torch_product(dtype)(a, a.T)
        assert seen == [False, False] and getattr(settings, flag) is False
    finally:
        setattr(settings, flag, before)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (130, 257, 129), (64, 100, 4096), (3, 5, 0)])
def test_gpu_library_16_bit_floats(dtype, m, n, k):
    """16-bit CUDA tensors: the default kernel for a stack is the library's batched call, in their
    own dtype (not float32 copies), float32 sums within the bound, torch's flags as the caller left
    them."""
    from tilemm.numerics.accuracy import compare
    torch.manual_seed(m + n + k)
    a, b = torch.randn(2, m, k, dtype=dtype, device="cuda"), torch.randn(k, n, dtype=dtype, device="cuda")
    plan = tilemm.plan(a, b)
    name = str(dtype).removeprefix("torch.")
    assert plan.kernel.name == "cublas" and plan.problem.dtype == name
    settings = torch.backends.cuda.matmul
    before = (settings.allow_tf32, settings.allow_fp16_reduced_precision_reduction,
              settings.allow_bf16_reduced_precision_reduction)
    c = plan.execute(poison=True)
    assert c.dtype == dtype and c.shape == (2, m, n) and c.is_cuda
    assert before == (settings.allow_tf32, settings.allow_fp16_reduced_precision_reduction,
                      settings.allow_bf16_reduced_precision_reduction)
    for i in range(2):
        verdict = compare(c[i].float().cpu().numpy(), a[i].float().cpu().numpy(), b.float().cpu().numpy(),
                          str(dtype).removeprefix("torch."))
        assert verdict.ok, verdict.message


def test_release_memory_forgets_plans_and_workspaces():
    """tilemm.release_memory() lets go of what repeated calls keep (plans, replays, the stream-K and
    split-K workspaces); calls after it plan again and give the same answer."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    first = tilemm.matmul(a, a.T)
    assert plan_cache.PLANS
    workspaces.split_k_workspace(-1, None, tiles=1, runs=2, block_m=16, block_n=16)   # as split K keeps
    assert workspaces.WORKSPACES
    tilemm.release_memory()
    assert not plan_cache.PLANS and not workspaces.WORKSPACES
    np.testing.assert_array_equal(tilemm.matmul(a, a.T), first)


def test_a_plan_refuses_operands_or_an_out_of_another_layout_before_any_work():
    """tilemm.plan's plan runs again on operands of its own layout alone: another shape, dtype,
    kind or strides (or an out of another) would run with the plan's (a float64 operand was
    multiplied as float32; a NumPy one came back a torch tensor). A ValueError instead."""
    torch = pytest.importorskip("torch")
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    checked = tilemm.plan(a, b, kernel="numpy")
    refused_operands = [(torch.randn(5, 3), b), (a.double(), b.double()), (a.numpy(), b.numpy()),
                        (torch.randn(3, 4).T, b), (a, torch.randn(5, 3).T)]
    for x, y in refused_operands:
        with pytest.raises(ValueError, match="is not laid out as the plan's"):
            checked.run_again(x, y)
    for out in (torch.empty(0), torch.empty(4, 5, dtype=torch.float64), np.empty((4, 5), np.float32)):
        with pytest.raises(ValueError, match="out is not laid out as the plan's"):
            checked.run_again(a, b, out)
    a2, out = torch.randn(4, 3), torch.empty(4, 5)
    assert checked.run_again(a2, b, out) is out and torch.allclose(out, a2 @ b)


@pytest.mark.parametrize("mode", ["autocast", "forward_ad"])
def test_a_plan_refuses_operands_of_another_layout_under_torch_s_modes(mode):
    """Under autocast or a forward-mode AD level a torch tensor's key holds nothing (its operands
    are no part of a repeated call's key there): the layout is read from the tensors, and operands
    of another shape are still refused, not multiplied with the plan's."""
    torch = pytest.importorskip("torch")
    import contextlib
    import torch.autograd.forward_ad as fwAD
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    checked = tilemm.plan(a, b, kernel="numpy")
    with torch.autocast("cpu") if mode == "autocast" else fwAD.dual_level() if mode == "forward_ad" \
            else contextlib.nullcontext():
        for x, y in [(torch.randn(5, 3), b), (torch.randn(3, 4).T, b)]:
            with pytest.raises(ValueError, match="is not laid out as the plan's"):
                checked.run_again(x, y)
        with pytest.raises(ValueError, match="out is not laid out as the plan's"):
            checked.run_again(a, b, torch.empty(4, 5, dtype=torch.float64))


def test_a_plan_runs_again_on_new_operands_without_its_checks(monkeypatch):
    """Plan.run_again: the checked plan's product on new operands of its layout (what a repeated
    tilemm.matmul call runs), with no check made again; into out where one is given."""
    a, b = np.ones((5, 7), np.float32), np.ones((7, 3), np.float32)
    checked = tilemm.plan(a, b, kernel="cpu-tiled", block_m=8)
    monkeypatch.setattr(tilemm.plans.checks, "check", lambda *args, **kwargs: pytest.fail("checked again"))
    a2 = np.arange(35, dtype=np.float32).reshape(5, 7)
    np.testing.assert_array_equal(checked.run_again(a2, b), a2 @ b)
    out = np.empty((5, 3), np.float32)
    assert checked.run_again(a2, b, out=out) is out
    np.testing.assert_array_equal(out, a2 @ b)
    np.testing.assert_array_equal(checked.execute(), a @ b)        # the plan's own operands, as they were
