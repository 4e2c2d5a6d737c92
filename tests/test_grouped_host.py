"""tilemm.grouped_matmul on torch CPU tensors outside Triton's interpreter (a CPU-only user, or CPU
tensors on a GPU machine): a loop of products on the host, in every layout, against float64 and
against torch._grouped_mm on the CPU; its gradients; float8 groups with block scales; a repeated
call; and what it refuses."""
import pytest
import torch

import tilemm
from tilemm.products.grouped_checks import layout
from tilemm.products.grouped_host import slices
from tilemm.system import compat

from .test_grouped import LAYOUTS, ROUNDING, check, dequantized, operand, scales_like


@pytest.fixture(autouse=True)
def no_interpreter(monkeypatch):
    """As a process without TRITON_INTERPRET sees CPU tensors (conftest sets it for the rungs)."""
    # (tilemm's own check, not the environment: Triton, imported meanwhile by torch.compile, would
    # make its language's functions for compiled programs, and later tests' interpreted ones fail)
    monkeypatch.setattr(compat, "triton_interpreter", lambda: False)


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


@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_float8_groups_with_block_scales_on_the_host(counted, out_dtype):
    """Each block of the operands times its scale, then the groups' float32 products, against the
    float64 product of the dequantized operands (K and N past one 128-block); a second call too."""
    e4m3, k, n = torch.float8_e4m3fn, 144, 130
    b = (torch.randn(3, n, k) * 3).to(e4m3).mT
    a = (torch.randn((3, 9, k) if counted else (20, k)) * 3).to(e4m3)
    scale_a, scale_b = scales_like(a.shape[:-1] + (2,), 23), scales_like((3, 2, 2), 22)
    cut = torch.tensor([9, 0, 4] if counted else [0, 7, 20], dtype=torch.int32)
    offs, counts = (None, cut) if counted else (cut, None)
    a64, b64 = dequantized(a, scale_a, 1), dequantized(b.mT, scale_b.mT, 128).mT
    lay = layout(a.float(), b.float(), offs, counts, None)
    ref, size = torch.zeros(lay.shape, dtype=torch.float64), torch.zeros(lay.shape, dtype=torch.float64)
    for (rows, a_g, b_g, at), (_, x, y, _) in zip(slices(a64, b64, cut.tolist(), lay),
                                                  slices(a64.abs(), b64.abs(), cut.tolist(), lay)):
        ref[at], size[at] = a_g[rows] @ b_g, x[rows] @ y
    for _ in range(2):
        c = tilemm.grouped_matmul(a, b, offs, counts=counts, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
        assert c.dtype == out_dtype
        assert torch.all((c.double() - ref).abs() <= ROUNDING[out_dtype] * ref.abs() + 2 * k * 2.0**-24 * size + 1e-30)


def test_the_host_refuses_the_gpu_program_s_parameters():
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
