"""PyTorch's own tests of torch.matmul (test/test_linalg.py, TestLinalg), ported: each calls
tilemm.matmul where the original calls torch.matmul (torch.mm, torch.bmm, torch.mv and torch.dot
are torch.matmul on 2-D, 3-D, 2-D @ 1-D and 1-D operands) and keeps the original's assertions,
on CPU tensors (the default kernel for them runs for real: the sizes are the originals' or
smaller where noted). An ``out`` of another shape is resized, as torch resizes it
(tilemm.contract.torch_rules)."""
import itertools
import math
import random
import warnings
from functools import partial

import numpy as np
import pytest
import torch
from torch.testing import assert_close, make_tensor

import tilemm


# ---------------------------------------------------------------- test_matmul_small_brute_force_*


def check_single_matmul(x, y):
    """The original's: x @ y against np.matmul, contiguous, and again into an out of the result's
    shape (empty_like, as the original), which comes back as the result."""
    def assert_equal(answer, expected):
        if x.dtype.is_floating_point or x.dtype.is_complex:
            k = max(x.shape[-1], 1)       # the tolerance scales with the size of the matrix
            assert_close(answer, expected, atol=k * 5e-5, rtol=1e-4, msg=f"{x.shape} x {y.shape} = {answer.shape}")
        else:
            assert torch.equal(answer, expected), f"{x.shape} x {y.shape} = {answer.shape}"

    expected = torch.from_numpy(np.asarray(np.matmul(x.cpu().numpy(), y.cpu().numpy())))
    ans = tilemm.matmul(x, y)
    assert ans.is_contiguous()
    assert_equal(ans, expected)

    out = torch.empty_like(ans)
    ans = tilemm.matmul(x, y, out=out)
    assert ans is out
    assert ans.is_contiguous()
    assert_equal(ans, expected)


def gen_sizes_matmul(x_dim, y_dim=4, matrix_size=4, batch_size=3):
    """The original's: pairs (size_x, size_y) with len(size_x) = x_dim and len(size_y) <= y_dim
    that matmul takes, every size of each dimension below matrix_size (0 included) or batch_size."""
    assert x_dim >= 1 and y_dim >= 2
    x = x_dim
    for y in range(1, y_dim + 1):
        for batch, mn in itertools.product(itertools.product(range(batch_size), repeat=max(x - 2, y - 2, 0)),
                                           itertools.product(range(matrix_size), repeat=min(y, 2))):
            if x == 1:
                yield mn[:1], batch + mn
            else:
                for k in range(matrix_size):
                    size_x = (k,) + mn[:1]
                    if x > 2:
                        size_x = batch[-(x - 2):] + size_x
                    size_y = mn
                    if y > 2:
                        size_y = batch[-(y - 2):] + size_y
                    yield size_x, size_y


# float as the originals, complex and an integer dtype on the CPU too. Each runs a fixed stride
# through the original's sequence of (sizes, contiguity) (the 3-D one holds ~4,000 products): every
# kind of shape, 0 included, every contiguity, in a fraction of the time; an odd stride, so that
# the contiguities' cycle of four is not skipped over.
@pytest.mark.parametrize("x_dim,dtype,stride", [(1, torch.float, 3), (1, torch.cfloat, 7), (1, torch.int64, 7),
                                                (2, torch.float, 13), (3, torch.float, 15)])
def test_matmul_small_brute_force(x_dim, dtype, stride):
    make_arg = partial(make_tensor, device="cpu", dtype=dtype)
    cases = itertools.product(gen_sizes_matmul(x_dim), (True, False), (True, False))
    for (size_x, size_y), nctg_x, nctg_y in itertools.islice(cases, 0, None, stride):
        x = make_arg(size_x, noncontiguous=nctg_x)
        y = make_arg(size_y, noncontiguous=nctg_y)
        check_single_matmul(x, y)


# ---------------------------------------------------------------- out= and autograd


def test_matmul_out_kernel_errors_with_autograd():
    # the original's layout ((1, 256, 512) @ (4, 512, 128) into a (4, 256, 128) out seen through
    # movedim) at a sixteenth of its size in each dimension; zeros where it has torch.empty's
    # leftover values (the products' overflows would only warn)
    a = torch.zeros((16, 32), dtype=torch.float, requires_grad=True).unsqueeze(0)
    b = torch.zeros((4, 8, 32), dtype=torch.float, requires_grad=True).transpose(-1, -2)
    c = torch.empty((16, 4, 8), dtype=torch.float).movedim(1, 0)

    tilemm.matmul(a.detach(), b.detach(), out=c)

    with pytest.raises(RuntimeError, match="functions with out=... arguments don't support automatic differentiation"):
        tilemm.matmul(a, b, out=c)

    with torch.no_grad():
        tilemm.matmul(a, b, out=c)


# ---------------------------------------------------------------- test_blas_empty (matmul's forms)


def call_with_shapes(*args, test_out=False):
    """The original's fn: random tensors of the shapes given, multiplied; with test_out, into a
    NaN-filled out of the result's shape, which is returned."""
    def call(*args, **kwargs):
        return tilemm.matmul(*(torch.randn(shape) if isinstance(shape, tuple) else shape for shape in args), **kwargs)
    result = call(*args)
    if not test_out:
        return result
    out = torch.full_like(result, math.nan)
    call(*args, out=out)
    return out


def test_blas_empty():
    fn = call_with_shapes
    # mm
    assert (0, 0) == fn((0, 0), (0, 0)).shape
    assert (0, 5) == fn((0, 0), (0, 5)).shape
    assert (5, 0) == fn((5, 0), (0, 0)).shape
    assert (3, 0) == fn((3, 2), (2, 0)).shape
    assert torch.equal(torch.zeros((5, 6)), fn((5, 0), (0, 6)))
    assert torch.equal(torch.zeros((5, 6)), fn((5, 0), (0, 6), test_out=True))
    # mv
    assert (0,) == fn((0, 0), (0,)).shape
    assert (0,) == fn((0, 2), (2,)).shape
    assert torch.equal(torch.zeros((3,)), fn((3, 0), (0,)))
    assert torch.equal(torch.zeros((3,)), fn((3, 0), (0,), test_out=True))
    # bmm
    assert (0, 0, 0) == fn((0, 0, 0), (0, 0, 0)).shape
    assert (3, 0, 5) == fn((3, 0, 0), (3, 0, 5)).shape
    assert (0, 5, 6) == fn((0, 5, 0), (0, 0, 6)).shape
    assert torch.equal(torch.zeros((3, 5, 6)), fn((3, 5, 0), (3, 0, 6)))
    assert torch.equal(torch.zeros((3, 5, 6)), fn((3, 5, 0), (3, 0, 6), test_out=True))
    # matmul
    assert torch.equal(torch.tensor(0.0), fn((0,), (0,)))
    assert torch.equal(torch.tensor(0.0), fn((0,), (0,), test_out=True))
    assert (0, 0) == fn((0, 0), (0, 0)).shape
    assert (0, 0, 0) == fn((0, 0, 0), (0, 0, 0)).shape
    assert (5, 0, 0) == fn((5, 0, 0), (5, 0, 0)).shape
    assert torch.equal(torch.zeros((5, 3, 4)), fn((5, 3, 0), (5, 0, 4)))
    assert torch.equal(torch.zeros((5, 3, 4)), fn((5, 3, 0), (5, 0, 4), test_out=True))
    # dot
    assert torch.equal(torch.tensor(0.0), fn((0,), (0,)))


# ---------------------------------------------------------------- errors


def test_mm_empty_inputs_mixed_dtype_errors():
    a = torch.randint(0, 10, [1, 10], dtype=torch.int16)
    b = torch.randn(10, 20, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="expected .* and .* to have the same dtype, but got:"):
        tilemm.matmul(a, b)


def test_linear_algebra_scalar_raises():
    # the original multiplies by a 0-d tensor through mv and addmv; matmul's form of it
    m = torch.randn(5, 5)
    v = torch.randn(5)
    s = torch.tensor(7)
    with pytest.raises(RuntimeError):
        tilemm.matmul(m, s)
    with pytest.raises(RuntimeError):
        tilemm.matmul(s, v)
    with pytest.raises(RuntimeError):
        tilemm.matmul(v, s.to(v.dtype))


def test_mm_shapes_error_names_both_shapes():
    # torch's tests of mm and linear look for both shapes in the message
    with pytest.raises(RuntimeError, match=r"10x9.*8x25"):
        tilemm.matmul(torch.randn(10, 9), torch.randn(8, 25))
    with pytest.raises(RuntimeError, match=r"size mismatch, got input \(3\), mat \(3x4\), vec \(5\)"):
        tilemm.matmul(torch.randn(3, 4), torch.randn(5))


# ---------------------------------------------------------------- layouts: test_mm, non-dense conjugates


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.int64])
def test_mm(dtype):
    """The original's layouts of torch.mm: contiguous, transposed operands, a zero-stride
    (expanded) operand, and an out that is itself transposed; against NumPy."""
    def genf(*shape):
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(*shape, dtype=dtype)
        return torch.randint(-5, 5, shape, dtype=dtype)

    def check(m1, m2):
        want = torch.from_numpy(np.asarray(np.matmul(m1.numpy(), m2.numpy())))
        assert_close(tilemm.matmul(m1, m2), want)
        out = torch.empty(m2.shape[1], m1.shape[0], dtype=dtype).t()       # a transposed out
        assert tilemm.matmul(m1, m2, out=out) is out
        assert_close(out, want)

    n, m, p = 20, 10, 15
    check(genf(n, m), genf(m, p))
    check(genf(m, n).t(), genf(m, p))
    check(genf(n, m), genf(p, m).t())
    check(genf(m, n).t(), genf(p, m).t())
    check(genf(n, 1).expand(n, m), genf(m, p))          # zero strides
    check(genf(n, m), genf(1, p).expand(m, p))


def test_mm_bmm_non_memory_dense():
    """Conjugate views sliced to non-dense layouts give what their materialized values give."""
    def sliced(tensor, fn):
        return fn(tensor)[..., ::2]
    A = torch.randn(3, 6, dtype=torch.cfloat)
    B = torch.randn(3, 3, dtype=torch.cfloat)
    out = torch.empty(3, 3, dtype=torch.complex64).t()
    out1 = torch.empty(3, 3, dtype=torch.complex64).t()
    A_conj = sliced(A, torch.conj)
    A_conj_physical = sliced(A, torch.conj_physical)

    assert_close(tilemm.matmul(A_conj, B, out=out), tilemm.matmul(A_conj_physical, B, out=out1))
    assert_close(tilemm.matmul(A_conj.t(), B, out=out), tilemm.matmul(A_conj_physical.t(), B, out=out1))

    Ab = torch.randn(2, 3, 6, dtype=torch.cfloat)
    Bb = torch.randn(2, 3, 3, dtype=torch.cfloat)
    Bb_ = torch.randn(1, 3, 3, dtype=torch.cfloat).expand(2, 3, 3)
    out_b = torch.empty(2, 3, 3, dtype=torch.complex64).mT
    Ab_conj = sliced(Ab, torch.conj)
    Ab_conj_physical = sliced(Ab, torch.conj_physical)

    def t_b(tensor):
        return tensor.mT
    assert_close(tilemm.matmul(Ab_conj, Bb, out=out_b), tilemm.matmul(Ab_conj_physical, Bb))
    assert_close(tilemm.matmul(t_b(Ab_conj), Bb_), tilemm.matmul(t_b(Ab_conj_physical), Bb_))
    assert_close(tilemm.matmul(Bb_.conj(), t_b(Ab_conj)), Bb_.conj_physical() @ t_b(Ab_conj_physical))


# ---------------------------------------------------------------- test_broadcast_batched_matmul


@pytest.mark.parametrize("seed", range(3))
def test_broadcast_batched_matmul(seed):
    """The original's: a full stack against a broadcastable smaller one (its dimensions dropped
    from the front or set to 1) and against a matrix or vector, each also expanded, equal to the
    expanded operands' product and to torch.bmm's; with out= of the squeezed result's shape, which
    is resized as torch resizes it."""
    rng = random.Random(seed)
    n_dim, m_dim, p_dim = rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 8)
    full_batch_dims = [rng.randint(1, 3) for _ in range(rng.randint(1, 3))]
    batch_dims_small = [1 if rng.random() < 0.5 else d for d in full_batch_dims[rng.randint(0, len(full_batch_dims)):]]

    def verify_batched_matmul(full_lhs, one_dimensional):
        if not one_dimensional:
            lhs_dims, rhs_dims, result_dims = [n_dim, m_dim], [m_dim, p_dim], [n_dim, p_dim]
        else:
            lhs_dims = [n_dim, m_dim] if full_lhs else [m_dim]
            rhs_dims = [m_dim, p_dim] if not full_lhs else [m_dim]
            result_dims = [n_dim] if full_lhs else [p_dim]
        lhs_mat_dims = lhs_dims if len(lhs_dims) != 1 else [1, m_dim]
        rhs_mat_dims = rhs_dims if len(rhs_dims) != 1 else [m_dim, 1]
        full_mat_dims = lhs_mat_dims if full_lhs else rhs_mat_dims
        dim0_dims = rhs_dims if full_lhs else lhs_dims
        small_dims = batch_dims_small + (rhs_mat_dims if full_lhs else lhs_mat_dims)

        small = torch.randn(*small_dims)
        dim0 = torch.randn(*dim0_dims)
        full = torch.randn(*(full_batch_dims + full_mat_dims))
        if not one_dimensional:
            lhs_tensors, rhs_tensors = ((full,), (small, dim0)) if full_lhs else ((small, dim0), (full,))
        else:
            lhs_tensors, rhs_tensors = ((full,), (dim0,)) if full_lhs else ((dim0,), (full,))

        def maybe_squeeze_result(l, r, result):
            if len(lhs_dims) == 1 and l.dim() != 1:
                return result.squeeze(-2)
            if len(rhs_dims) == 1 and r.dim() != 1:
                return result.squeeze(-1)
            return result

        for lhs in lhs_tensors:
            lhs_expanded = lhs.expand(*(torch.Size(full_batch_dims) + torch.Size(lhs_mat_dims)))
            for rhs in rhs_tensors:
                rhs_expanded = ((rhs if len(rhs_dims) != 1 else rhs.unsqueeze(-1))
                                .expand(*(torch.Size(full_batch_dims) + torch.Size(rhs_mat_dims))))
                truth = maybe_squeeze_result(lhs_expanded, rhs_expanded, tilemm.matmul(lhs_expanded, rhs_expanded))
                for l in (lhs, lhs_expanded):
                    for r in (rhs, rhs_expanded):
                        result = tilemm.matmul(l, r)
                        assert_close(truth, maybe_squeeze_result(l, r, result))
                        out = torch.zeros_like(maybe_squeeze_result(l, r, result))   # resized where squeezed
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", UserWarning)       # (torch's, on resizing it)
                            tilemm.matmul(l, r, out=out)
                        assert_close(truth, maybe_squeeze_result(l, r, out))
                # compare to bmm
                bmm_result = tilemm.matmul(lhs_expanded.contiguous().view(-1, *lhs_mat_dims),
                                           rhs_expanded.contiguous().view(-1, *rhs_mat_dims))
                assert_close(truth.view(-1, *result_dims), bmm_result.view(-1, *result_dims))

    for indices in itertools.product((True, False), repeat=2):
        verify_batched_matmul(*indices)
