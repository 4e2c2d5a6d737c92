"""A result's layout on the host is the library's it stands for: torch.matmul's strides for CPU
torch tensors (on every dimension of more than one element: torch's `is_contiguous` reads no
other), numpy.matmul's strides and flags for NumPy arrays; and a repeated call (a kept plan's
shorter path) lays its result out as the first call did. Shapes with dimensions of 1 and 0,
broadcast stacks, expanded, transposed and sliced operands, 1-D operands on either side."""
import numpy as np
import pytest
import torch

import tilemm

SHAPES = [((1, 3), (2, 3, 4)), ((4, 3), (2, 3, 1)), ((3,), (2, 3, 4)), ((2, 4, 3), (3,)), ((2, 4, 3), (3, 1)),
          ((2, 1, 3), (3, 5)), ((1, 3), (1, 3, 4)), ((1, 1, 3), (4, 3, 5)), ((1, 1, 3), (3, 1)), ((2, 3), (3, 1)),
          ((3,), (3, 1)), ((1, 3), (3,)), ((3,), (3,)), ((0, 3), (3, 2)), ((2, 0, 3), (3, 2)), ((3, 5), (0, 5, 1)),
          ((2, 1, 1, 3), (1, 3, 3, 2)), ((1, 1), (1, 1, 1))]
KERNELS = [{}, {"kernel": "numpy"}, {"kernel": "cpu-tiled"}]


def operand(shape, how, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if how == "transposed" and len(shape) > 1:
        return torch.randn(shape[:-2] + shape[:-3:-1], generator=g, dtype=dtype).mT
    if how == "expanded":
        return torch.randn(tuple(min(s, 1) for s in shape), generator=g, dtype=dtype).expand(shape)
    if how == "sliced":
        return torch.randn(tuple(2 * s for s in shape), generator=g, dtype=dtype)[tuple(slice(None, None, 2)
                                                                                          for _ in shape)]
    return torch.randn(shape, generator=g, dtype=dtype)


def same_on_dims_of_many(shape, want, got) -> bool:
    """Strides equal on every dimension of more than one element (and all equal where the
    result is not empty: an empty tensor's strides are nobody's contract)."""
    return 0 in shape or all(w == s for w, s, n in zip(want, got, shape) if n > 1)


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("how", ["plain", "transposed", "expanded", "sliced"])
@pytest.mark.parametrize("grad", [False, True])
def test_torch_results_have_torch_s_strides_and_repeats_the_first_s(sa, sb, how, grad):
    dtype = torch.float64
    a, b = operand(sa, how, dtype, 0).requires_grad_(grad), operand(sb, "plain", dtype, 1)
    want = torch.matmul(a, b)
    for kw in KERNELS:
        results = [tilemm.matmul(a, b, **kw) for _ in range(3)]
        first = results[0]
        assert first.shape == want.shape and first.dtype == want.dtype
        assert first.is_contiguous() == want.is_contiguous()
        assert same_on_dims_of_many(want.shape, want.stride(), first.stride()), (kw, want.stride(), first.stride())
        if not grad:   # (an operand that requires grad: torch's own is_contiguous call picks size-1 strides)
            assert first.stride() == want.stride(), (kw, want.stride(), first.stride())
        for c in results[1:]:
            assert c.stride() == first.stride(), (kw, first.stride(), c.stride())
            torch.testing.assert_close(c, first, rtol=0, atol=0)
        torch.testing.assert_close(first, want.detach())


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("how", ["plain", "transposed", "expanded", "sliced", "fortran"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_numpy_results_have_numpy_s_strides_and_flags(sa, sb, how, dtype):
    a = operand(sa, "plain" if how == "fortran" else how, torch.float64, 0).numpy().astype(dtype, copy=False)
    a = np.asfortranarray(a) if how == "fortran" else a
    b = operand(sb, "transposed", torch.float64, 1).numpy().astype(dtype, copy=False)
    want = np.asarray(np.matmul(a, b))
    for kw in KERNELS:
        for _ in range(3):
            got = np.asarray(tilemm.matmul(a, b, **kw))
            assert got.shape == want.shape and got.dtype == want.dtype and got.strides == want.strides, kw
            assert [got.flags[f] for f in ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA")] == \
                   [want.flags[f] for f in ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA")], kw
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)   # (float32 sums in another order)


@pytest.mark.parametrize("sa,sb", [s for s in SHAPES if len(s[0]) > 1 or len(s[1]) > 1])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_an_out_keeps_its_strides(sa, sb, order):
    """An out keeps its strides in both libraries (where torch's folded path refuses a strided
    out with a broadcast error, tilemm writes it, as the PyTorch guide says)."""
    a, b = operand(sa, "plain", torch.float64, 0), operand(sb, "plain", torch.float64, 1)
    shape = torch.matmul(a, b).shape
    make = (lambda: torch.empty(shape, dtype=torch.float64)) if order == "C" else \
        (lambda: torch.empty(shape[::-1], dtype=torch.float64).permute(*reversed(range(len(shape)))))
    for kw in KERNELS:
        want, out = make(), make()
        strides = out.stride()
        try:
            torch.matmul(a, b, out=want)
            assert want.stride() == strides
        except RuntimeError:        # (torch's folded path: "The size of tensor a ... must match")
            want = torch.matmul(a, b)
        assert tilemm.matmul(a, b, out=out, **kw) is out and out.stride() == strides
        torch.testing.assert_close(out, want)
        an, bn = a.numpy(), b.numpy()
        want_n, out_n = np.empty(shape, order=order), np.empty(shape, order=order)
        np.matmul(an, bn, out=want_n)
        assert tilemm.matmul(an, bn, out=out_n, **kw) is out_n and out_n.strides == want_n.strides
        np.testing.assert_allclose(out_n, want_n)


@pytest.mark.gpu
@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("how", ["plain", "transposed", "expanded", "sliced"])
@pytest.mark.parametrize("kw", [{}, {"kernel": "tensorcore-f32"}, {"kernel": "tiled"}])
def test_gpu_torch_results_have_torch_s_strides_and_repeats_the_first_s(sa, sb, how, kw):
    """CUDA tensors: torch.matmul's strides on every dimension of more than one element, and a
    repeated call (a replay, the library's product) lays its result out as the first did."""
    a = operand(sa, how, torch.float32, 0).cuda()
    b = operand(sb, "plain", torch.float32, 1).cuda()
    want = torch.matmul(a, b)
    results = [tilemm.matmul(a, b, **kw) for _ in range(3)]
    first = results[0]
    assert first.shape == want.shape and first.dtype == want.dtype and first.is_cuda
    assert first.is_contiguous() == want.is_contiguous()
    assert same_on_dims_of_many(want.shape, want.stride(), first.stride()), (want.stride(), first.stride())
    for c in results[1:]:
        assert c.stride() == first.stride(), (first.stride(), c.stride())
        torch.testing.assert_close(c, first, rtol=0, atol=0)
    torch.testing.assert_close(first, want, rtol=1e-2, atol=1e-2)    # (tf32 where torch's flags allow it)
