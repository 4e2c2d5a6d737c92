"""tilemm.grouped_matmul on torch CPU tensors outside Triton's interpreter (a CPU-only user, or CPU
tensors on a GPU machine): a loop of products on the host, in every layout, against float64 and
against torch._grouped_mm on the CPU; its gradients; a repeated call; and what it refuses."""
import pytest
import torch

import tilemm

from .test_grouped import LAYOUTS, check, operand


@pytest.fixture(autouse=True)
def no_interpreter(monkeypatch):
    """As a process without TRITON_INTERPRET sees CPU tensors (conftest sets it for the rungs)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8])
def test_every_layout_on_the_host(name, dtype):
    a_shape, b_shape, cut = LAYOUTS[name]
    a, b = operand(a_shape, dtype, 1).cpu(), operand(b_shape, dtype, 2).cpu()
    offs = torch.tensor(cut, dtype=torch.int32) if cut is not None else None
    for _ in range(3):               # the first call and the repeated ones (tilemm.products.grouped_calls)
        c = tilemm.grouped_matmul(a, b, offs)
        assert c.device.type == "cpu"
        check(c, a, b, offs)


def test_counts_and_out_on_the_host():
    a, b = operand((5, 6, 24), torch.bfloat16, 3).cpu(), operand((5, 24, 20), torch.bfloat16, 4).cpu()
    counts = torch.tensor([0, 6, 1, 3, 2], dtype=torch.int32)
    out = torch.full((5, 6, 20), 7.0, dtype=torch.bfloat16)
    c = tilemm.grouped_matmul(a, b, counts=counts, out=out)
    assert c is out
    covered = torch.arange(6)[None, :, None] < counts[:, None, None]
    assert torch.all(c[~covered.expand_as(c)] == 7)            # rows past a group's count: not written
    check(torch.where(covered, c, 0), a, b, counts, counted=True)


def test_gradients_on_the_host_as_float64_autograd():
    a = operand((19, 24), torch.float32, 5).cpu().requires_grad_()
    b = operand((5, 24, 20), torch.float32, 6).cpu().requires_grad_()
    offs = torch.tensor([0, 1, 1, 18, 19], dtype=torch.int32)
    tilemm.grouped_matmul(a, b, offs).square().sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ends = [0] + offs.tolist()
    torch.cat([a64[s:e] @ b64[g] for g, (s, e) in enumerate(zip(ends, ends[1:]))]).square().sum().backward()
    assert torch.allclose(a.grad.double(), a64.grad, rtol=1e-4, atol=1e-4)
    assert torch.allclose(b.grad.double(), b64.grad, rtol=1e-4, atol=1e-4)


def test_the_host_refuses_the_gpu_program_s_parameters_and_block_scales():
    a, b = torch.ones(4, 32, dtype=torch.bfloat16), torch.ones(2, 32, 16, dtype=torch.bfloat16)
    offs = torch.tensor([1, 4], dtype=torch.int32)
    with pytest.raises(TypeError, match="GPU program's"):
        tilemm.grouped_matmul(a, b, offs, block_m=64)
    with pytest.raises(ValueError, match="sorted|offs"):
        tilemm.grouped_matmul(a, b, torch.tensor([3, 1], dtype=torch.int32))


@pytest.mark.parametrize("seed", range(6))
def test_the_host_gives_torch_s_grouped_mm(seed):
    """Against torch._grouped_mm on the CPU (where torch has it): random groups, empty ones
    included, weights (G, K, N) or (G, N, K) transposed, bf16 and float32."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 12, (1 + seed % 5,), generator=g)
    offs = sizes.cumsum(0).to(torch.int32)
    k, n = 8 * (1 + seed % 4), 16
    dtype = (torch.bfloat16, torch.float32)[seed % 2]
    a = torch.randn(int(offs[-1]), k, generator=g).to(dtype)
    if seed % 3:
        b = torch.randn(len(sizes), n, k, generator=g).to(dtype).mT       # (G, N, K) transposed, as MoE layers hold it
    else:
        b = torch.randn(len(sizes), k, n, generator=g).to(dtype)
    try:
        expected = torch._grouped_mm(a, b, offs)
    except (RuntimeError, AttributeError) as e:
        pytest.skip(f"torch._grouped_mm on the CPU: {e}")
    got = tilemm.grouped_matmul(a, b, offs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance)
