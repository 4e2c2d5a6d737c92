"""torch's own tests of torch._grouped_mm (test/test_matmul_cuda.py: test_grouped_gemm_2d_2d,
_2d_3d, _3d_3d, _3d_2d and _compiled), with tilemm.grouped_matmul in its place: operands row- or
column-major, strided views, an empty first group, gradients against torch.mm's, and the compiled
call against the eager one. torch's sizes (16 x 32 x 64, 4 groups); on the CPU in Triton's
interpreter with small tiles, on a GPU with the defaults."""
import itertools

import pytest
import torch

import tilemm

from .test_grouped import SMALL, WHERE

LAYOUTS = list(itertools.product([False, True], repeat=3))    # (strided, a_row_major, b_row_major)
M, N, K, GROUPS = 16, 32, 64, 4


def grouped(a, b, offs=None):
    return tilemm.grouped_matmul(a, b, offs, **SMALL)


def randn(*shape):
    return torch.randn(*shape, device=WHERE, dtype=torch.bfloat16)


def stack(rows, row_major, s):
    """torch's (GROUPS, rows, K) operand: rows K-contiguous or a transposed view, every other
    group and half of K where strided (s = 1)."""
    if row_major:
        return randn(GROUPS * (1 + s), rows, K * (1 + s))[::1 + s, :, :K]
    return randn(GROUPS * (1 + s), K * (1 + s), rows).transpose(-2, -1)[::1 + s, :, :K]


def run_cut(a, b, offs, zero_size):
    """(out, its upstream gradient) of grouped(a, b^T, offs), an empty first group where zero_size
    (torch records no backward then)."""
    a.requires_grad_(True)
    b.requires_grad_(True)
    if zero_size:
        offs[0] = offs[1]
    out = grouped(a, b.transpose(-2, -1), offs)
    g = torch.rand_like(out)
    if not zero_size:
        out.backward(g)
    return out, g


def check_groups(alist, blist, grads_out, a_grads, b_grads, outs):
    """torch's grouped_mm_helper: each group's result and gradients as torch.mm's (bf16, torch's
    default tolerances for it)."""
    for a, b, g, a_grad, b_grad, out in zip(alist, blist, grads_out, a_grads, b_grads, outs):
        a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        want = torch.mm(a, b.t())
        want.backward(g)
        torch.testing.assert_close(out, want)
        if a_grad is not None:
            torch.testing.assert_close(a_grad, a.grad)
            torch.testing.assert_close(b_grad, b.grad)


def pieces(x, offs, dim):
    """x cut along dim at the offsets (torch's loop over offs_cpu)."""
    cut, start = [], 0
    for end in offs.tolist():
        cut.append(x.narrow(dim, start, end - start))
        start = end
    return cut


@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_grouped_gemm_2d_2d(strided, a_row_major, b_row_major):
    s = int(strided)
    a = randn(M, K * GROUPS + K * s)[:, :K * GROUPS] if a_row_major else randn(K * GROUPS + K * s, M).t()[:, :K * GROUPS]
    b = randn(N, K * GROUPS + K * s)[:, :K * GROUPS] if b_row_major else randn(K * GROUPS + K * s, N).t()[:, :K * GROUPS]
    a.requires_grad_(True)
    b.requires_grad_(True)
    offs = torch.arange(K, GROUPS * K + 1, K, device=WHERE, dtype=torch.int32)
    out = grouped(a, b.t(), offs)
    g = torch.rand_like(out)
    out.backward(g)
    check_groups(pieces(a, offs, 1), pieces(b, offs, 1), g, pieces(a.grad, offs, 1), pieces(b.grad, offs, 1), out)


@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
@pytest.mark.parametrize("zero_size", [False, True])
def test_grouped_gemm_2d_3d(strided, a_row_major, b_row_major, zero_size):
    s = int(strided)
    a = randn(M * GROUPS, K * (1 + s))[:, :K] if a_row_major else randn(K, (M + 2 * s) * GROUPS).t()[:M * GROUPS, :]
    b = stack(N, b_row_major, s)
    offs = torch.arange(M, GROUPS * M + 1, M, device=WHERE, dtype=torch.int32)
    out, g = run_cut(a, b, offs, zero_size)
    a_grads = [None] * GROUPS if zero_size else pieces(a.grad, offs, 0)
    b_grads = [None] * GROUPS if zero_size else b.grad
    check_groups(pieces(a, offs, 0), b, pieces(g, offs, 0), a_grads, b_grads, pieces(out, offs, 0))


@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
def test_grouped_gemm_3d_3d(strided, a_row_major, b_row_major):
    s = int(strided)
    a, b = stack(M, a_row_major, s).requires_grad_(True), stack(N, b_row_major, s).requires_grad_(True)
    out = grouped(a, b.transpose(-2, -1))
    g = torch.rand_like(out)
    out.backward(g)
    check_groups(a, b, g, a.grad, b.grad, out)


@pytest.mark.parametrize("strided, a_row_major, b_row_major", LAYOUTS)
@pytest.mark.parametrize("zero_size", [False, True])
def test_grouped_gemm_3d_2d(strided, a_row_major, b_row_major, zero_size):
    s = int(strided)
    a = stack(M, a_row_major, s)
    b = randn(N * GROUPS, K * (1 + s))[:, :K] if b_row_major else randn(K, N * (GROUPS + s)).transpose(-2, -1)[:N * GROUPS, :]
    offs = torch.arange(N, GROUPS * N + 1, N, device=WHERE, dtype=torch.int32)
    out, g = run_cut(a, b, offs, zero_size)
    a_grads = [None] * GROUPS if zero_size else a.grad
    b_grads = [None] * GROUPS if zero_size else pieces(b.grad, offs, 0)
    check_groups(a, pieces(b, offs, 0), pieces(g, offs, 1), a_grads, b_grads, pieces(out, offs, 1))


@pytest.mark.parametrize("op", ["2d/2d", "2d/3d", "3d/2d", "3d/3d"])
@pytest.mark.parametrize("a_row_major, b_row_major", list(itertools.product([False, True], repeat=2)))
def test_grouped_gemm_compiled(op, a_row_major, b_row_major):
    """The compiled call equals the eager one, on torch's awkward sizes (3 x 7 x 13, an empty group)."""
    torch._dynamo.reset()
    align = 8
    up = lambda x: (x + align - 1) // align * align          # noqa: E731
    if op == "2d/2d":
        m, n = 3, 7
        offs = [0, 1, 6, 6, 7] if not a_row_major and not b_row_major else [0, 8, 16, 16, 27]
        k = offs[-1]
        a = randn(m, up(k))[:, :k] if a_row_major else randn(k, up(m)).t()[:m, :]
        b = randn(n, up(k))[:, :k] if b_row_major else randn(k, up(n)).t()[:n, :]
    elif op == "2d/3d":
        n, k = 7, 13
        offs = [0, 1, 3, 3, 5] if a_row_major else [0, 8, 16, 16, 19]
        m, groups = offs[-1], len(offs)
        a = randn(m, up(k))[:, :k] if a_row_major else randn(k, up(m)).t()[:m, :]
        b = randn(groups, n, up(k))[:, :, :k] if b_row_major else randn(groups, k, up(n)).transpose(-2, -1)[:, :n, :]
    elif op == "3d/2d":
        m, k = 3, 13
        offs = [0, 8, 16, 16, 19]
        n, groups = offs[-1], len(offs)
        a = randn(groups, m, up(k))[:, :, :k] if a_row_major else randn(groups, k, up(m)).transpose(-2, -1)[:, :m, :]
        b = randn(n, up(k))[:, :k] if b_row_major else randn(k, up(n)).t()[:n, :]
    else:
        offs, groups, m, n, k = None, 5, 3, 7, 13
        a = randn(groups, m, up(k))[:, :, :k] if a_row_major else randn(groups, k, up(m)).transpose(-2, -1)[:, :m, :]
        b = randn(groups, n, up(k))[:, :, :k] if b_row_major else randn(groups, k, up(n)).transpose(-2, -1)[:, :n, :]
    offs = None if offs is None else torch.tensor(offs, device=WHERE, dtype=torch.int32)
    want = grouped(a, b.transpose(-2, -1), offs)
    got = torch.compile(grouped, fullgraph=True, backend="aot_eager" if WHERE == "cpu" else "inductor")(
        a, b.transpose(-2, -1), offs)
    torch.testing.assert_close(got, want)
