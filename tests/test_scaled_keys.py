"""The keys of repeated float8 calls (tilemm.products.scaled_common.replay_key over
tilemm.plans.cache.torch_tensors_key): what they tell apart, and no key at all while torch's
autocast is on or a forward-mode AD level is open, where every call takes the usual path (a key
then made of the operands' Nones once let a call of other shapes replay the first one's launches).
With the gpu marker, calls of changing shapes under autocast, and a repeated block-scaled call
through the early path, against the dequantized float64 product."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD

import tilemm
from tilemm.plans.cache import torch_tensors_key
from tilemm.products import block_scaled

from .conftest import ON_GPU
from .test_block_scaled import check, operand, scales


def tensors(m=4, n=8, k=16, transposed=False):
    a = torch.zeros(m, k)
    b = torch.zeros(n, k).T if transposed else torch.zeros(k, n)
    return a, b


def test_the_key_tells_shapes_strides_and_gradients_apart():
    base = torch_tensors_key(torch, tensors())
    assert base == torch_tensors_key(torch, tensors())
    assert base != torch_tensors_key(torch, tensors(m=5))
    assert base != torch_tensors_key(torch, tensors(transposed=True))
    a, b = tensors()
    assert base != torch_tensors_key(torch, (a.requires_grad_(), b))
    with torch.no_grad():
        assert base != torch_tensors_key(torch, tensors())
    hash(base)


def test_no_key_under_autocast_or_forward_ad():
    with torch.autocast("cpu"):
        assert torch_tensors_key(torch, tensors()) is None
    with fwAD.dual_level():
        assert torch_tensors_key(torch, tensors()) is None
    assert torch_tensors_key(torch, tensors()) is not None


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="replays are kept for CUDA tensors")
@pytest.mark.parametrize("library", [None, False])
def test_gpu_calls_of_changing_shapes_under_autocast(library):
    """Block scales (torch's product and rung 16's) and per-tensor ones: under autocast each call
    takes the usual path and multiplies its own operands."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for seed, (m, n, k) in enumerate([(256, 512, 1024), (128, 256, 512), (64, 1024, 2048), (256, 512, 1024)]):
            a = operand(m, k, torch.float8_e4m3fn, False, seed)
            b = operand(k, n, torch.float8_e4m3fn, True, seed + 10)
            scale_a, scale_b = scales((m, -(-k // 128)), seed), scales((-(-k // 128), -(-n // 128)), seed + 1)
            check(tilemm.scaled_matmul(a, b, scale_a, scale_b, library=library), a, b, scale_a, scale_b, True)
            one_a, one_b = scales((1, 1), seed + 2), scales((1, 1), seed + 3)
            check(tilemm.scaled_matmul(a, b, one_a.reshape(()), one_b.reshape(())), a, b, one_a, one_b, False)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="replays are kept for CUDA tensors")
@pytest.mark.parametrize("library", [None, False])
def test_gpu_a_repeated_block_scaled_call_takes_the_early_path(library, monkeypatch):
    """The second call of a key is its replay, before any of the first call's checks."""
    m, n, k = 128, 512, 1024
    a, b = operand(m, k, torch.float8_e4m3fn, False, 1), operand(k, n, torch.float8_e4m3fn, True, 2)
    scale_a, scale_b = scales((m, k // 128), 3), scales((k // 128, n // 128), 4)
    first = tilemm.scaled_matmul(a, b, scale_a, scale_b, library=library)

    def refused(*args, **kwargs):
        raise AssertionError("the first call's checks made again")
    monkeypatch.setattr(block_scaled, "block_scaled_matmul", refused)
    again = tilemm.scaled_matmul(a, b, scale_a, scale_b, library=library)
    assert torch.equal(first, again)
    check(again, a, b, scale_a, scale_b, True)
