"""Repeated calls with out= on torch tensors written by the repeated call's short path
(tilemm.plans.out_writes): the same bits as a call without out, the out returned, autograd told of
the write; straight into a contiguous CUDA out, copied in where the out shares the operands'
memory or is not aligned. The GPU cases run on the GPU machine."""
import numpy as np
import pytest
import torch

import tilemm
from tilemm.plans import cache, out_writes


def kept_plan(a, b, out, **params):
    """The plan a first call with this out kept for its repeats."""
    tilemm.matmul(a, b, out=out, **params)
    key, plan = cache.lookup(a, b, params.pop("kernel", None), out, None, params)
    assert plan is not None
    return plan


def test_host_outs_are_written_by_the_repeated_calls_path():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    out = torch.empty(5, 4)
    assert kept_plan(a, b, out).into is not None
    for _ in range(3):
        a2 = torch.randn(5, 3)
        version = out._version
        assert tilemm.matmul(a2, b, out=out) is out
        assert out._version > version
        torch.testing.assert_close(out, a2 @ b)


def test_a_host_out_in_an_operands_memory_gets_the_operands_product():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    kept_plan(a, b, torch.empty(4, 4))
    want = a @ b
    assert tilemm.matmul(a, b, out=a) is a
    torch.testing.assert_close(a, want)


def test_outs_that_record_a_gradient_or_of_another_shape_take_the_plans_path():
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    with torch.no_grad():
        assert kept_plan(a, b, torch.empty(2, 2, requires_grad=True)).into is None
    wide = torch.empty(3, 5)                               # resized, as torch resizes it: never kept
    with pytest.warns(UserWarning):
        tilemm.matmul(a, b, out=wide)
    assert wide.shape == (2, 2) and cache.lookup(a, b, None, torch.empty(3, 5), None, {})[1] is None


def test_numpy_outs_take_the_plans_path():
    a, b = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    out = np.empty((4, 2), np.float32)
    assert kept_plan(a, b, out).into is None


def gpu_cases():
    cases = [("bfloat16", None, (300, 77, 129)), ("float32", None, (64, 64, 64)), ("float16", "cublas", (2, 33, 17, 40))]
    cases += [("bfloat16", "tensorcore", (1000, 300, 77)), ("float16", "tensorcore", (128, 128, 128)),
              ("bfloat16", "tensorcore", (2048, 512, 256))]
    return cases


def operands(dtype, shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    *batch, m, k, n = shape
    dt = getattr(torch, dtype)
    return (torch.randn(*batch, m, k, device="cuda", generator=g).to(dt),
            torch.randn(*batch, k, n, device="cuda", generator=g).to(dt))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, kernel, shape", gpu_cases())
def test_repeated_outs_hold_a_call_without_outs_bits(dtype, kernel, shape):
    params = {} if kernel is None else {"kernel": kernel}
    a, b = operands(dtype, shape, 0)
    out = torch.full(tilemm.matmul(a, b, **params).shape, float("nan"), device="cuda", dtype=a.dtype)
    plan = kept_plan(a, b, out, **params)
    assert plan.into is not None, (plan.kernel.name, plan.replay)
    for seed in range(1, 4):
        a, b = operands(dtype, shape, seed)
        out.fill_(float("nan"))
        version = out._version
        assert tilemm.matmul(a, b, out=out, **params) is out
        assert out._version > version
        assert torch.equal(out, tilemm.matmul(a, b, **params)), seed


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [None, "tensorcore"])
def test_an_out_in_an_operands_memory_is_copied_in(kernel):
    params = {} if kernel is None else {"kernel": kernel}
    a, b = operands("bfloat16", (256, 256, 256), 5)
    kept_plan(a, b, torch.empty(256, 256, device="cuda", dtype=a.dtype), **params)
    want = tilemm.matmul(a, b, **params)
    assert tilemm.matmul(a, b, out=a, **params) is a       # out is a: read before written
    assert torch.equal(a, want)


@pytest.mark.gpu
def test_an_out_not_16_byte_aligned_is_copied_in():
    a, b = operands("bfloat16", (128, 64, 128), 6)
    kept_plan(a, b, torch.empty(128, 128, device="cuda", dtype=a.dtype), kernel="tensorcore")
    room = torch.empty(128 * 128 + 1, device="cuda", dtype=a.dtype)
    out = room[1:].view(128, 128)                          # 2 bytes past 16-byte alignment, contiguous
    assert tilemm.matmul(a, b, out=out, kernel="tensorcore") is out
    assert torch.equal(out, tilemm.matmul(a, b, kernel="tensorcore"))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [None, "tensorcore"])
def test_autograd_sees_the_write(kernel):
    params = {} if kernel is None else {"kernel": kernel}
    a, b = operands("bfloat16", (128, 64, 128), 7)
    out = torch.empty(128, 128, device="cuda", dtype=a.dtype)
    kept_plan(a, b, out, **params)
    w = torch.ones(128, 128, device="cuda", dtype=a.dtype, requires_grad=True)
    loss = (out * w).sum()                                 # saves out for w's gradient
    tilemm.matmul(a, b, out=out, **params)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_a_repeated_out_call_finds_its_plan_by_the_outs_layout():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    out = torch.empty(5, 4)
    tilemm.matmul(a, b, out=out)
    assert cache.lookup(a, b, None, out, None, {})[1] is not None
    other = torch.empty(4, 5).T                            # the result's shape, laid out by columns
    assert cache.lookup(a, b, None, other, None, {})[1] is None
    for target in (out, other, out):
        a = torch.randn(5, 3)
        assert tilemm.matmul(a, b, out=target) is target
        torch.testing.assert_close(target, a @ b)
