"""tilemm.scaled_matmul on torch CPU tensors outside Triton's interpreter (a CPU-only user, or CPU
tensors on a GPU machine): torch._scaled_mm's CPU answer with per-tensor and row-wise scales (to
the rounding of float32 sums, whose order torch's CPU kernels choose), block scales against the
float64 product of the scaled operands, out=, torch.compile, and what it refuses."""
import pytest
import torch

import tilemm
from tilemm.system import compat

M, K, N = 24, 300, 136           # K and N past a 128-wide block, not multiples of it
E4M3 = torch.float8_e4m3fn
ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


@pytest.fixture(autouse=True)
def no_interpreter(monkeypatch):
    """As a process without TRITON_INTERPRET sees CPU tensors (conftest sets it for the rungs)."""
    # (tilemm's own check, not the environment: Triton, imported meanwhile by torch.compile, would
    # make its language's functions for compiled programs, and later tests' interpreted ones fail)
    monkeypatch.setattr(compat, "triton_interpreter", lambda: False)


def operands(seed, b_dtype=E4M3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(E4M3)
    b = torch.randn(N, K, generator=g).to(b_dtype).T          # (K, N), its columns contiguous
    return a, b, g


def within_float32_sums(got, expected, a, b, scale_a, scale_b) -> bool:
    """got and expected (one dtype) apart by no more than two float32 sums' rounding of the scaled
    products, 2K u sum |a_i b_i|, and a rounding each to their dtype."""
    size = (a.double().abs() * scale_a.double()) @ (b.double().abs() * scale_b.double())
    bound = 2 * a.shape[1] * 2.0**-24 * size + 2 * ROUNDING[got.dtype] * expected.double().abs() + 1e-30
    return bool(torch.all((got.double() - expected.double()).abs() <= bound))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("kind", ["numbers", "tensors", "row-wise"])
def test_torch_s_scaled_mm(kind, out_dtype):
    a, b, g = operands(1)
    if kind == "row-wise":
        scale_a, scale_b = torch.rand(M, 1, generator=g) + 0.5, torch.rand(1, N, generator=g) + 0.5
    else:
        scale_a, scale_b = (0.3, 1.7) if kind == "numbers" else (torch.tensor(0.3), torch.tensor(1.7))
    try:
        expected = torch._scaled_mm(a, b, torch.as_tensor(scale_a, dtype=torch.float32),
                                    torch.as_tensor(scale_b, dtype=torch.float32), out_dtype=out_dtype)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm on the CPU: {e}")
    got = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype)
    assert got.dtype == out_dtype and got.shape == expected.shape
    assert within_float32_sums(got, expected, a, b, torch.as_tensor(scale_a), torch.as_tensor(scale_b))


def test_block_scales_against_float64():
    a, b, g = operands(2, torch.float8_e5m2)
    scale_a, scale_b = torch.rand(M, 3, generator=g) + 0.5, torch.rand(3, 2, generator=g) + 0.5
    got = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype=torch.float32)
    blocks_a = scale_a.double().repeat_interleave(128, 1)[:, :K]
    blocks_b = scale_b.double().repeat_interleave(128, 0)[:K].repeat_interleave(128, 1)[:, :N]
    expected = (a.double() * blocks_a) @ (b.double() * blocks_b)
    size = (a.double().abs() * blocks_a) @ (b.double().abs() * blocks_b)
    assert torch.all((got.double() - expected).abs() <= 2 * K * 2.0**-24 * size + 1e-30)


def test_out_compile_and_an_empty_sum():
    a, b, _ = operands(3)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    assert tilemm.scaled_matmul(a, b, 0.5, 2.0, out=out) is out
    compiled = torch.compile(lambda a, b: tilemm.scaled_matmul(a, b, 0.5, 2.0), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(a, b), out)
    assert torch.equal(tilemm.scaled_matmul(a[:, :0], b[:0], 1.0, 1.0), torch.zeros(M, N, dtype=torch.bfloat16))


def test_the_host_refuses_what_is_the_gpu_s():
    a, b, _ = operands(4)
    with pytest.raises(TypeError, match="GPU program's"):
        tilemm.scaled_matmul(a, b, 1.0, 1.0, block_m=64)
    with pytest.raises(ValueError, match="library=True"):
        tilemm.scaled_matmul(a, b, torch.ones(M, 3), torch.ones(3, 2), library=True)
    with pytest.raises(ValueError, match="scales of shapes"):
        tilemm.scaled_matmul(a, b, torch.ones(M, 2), torch.ones(2, 2))
    with pytest.raises(TypeError, match="out_dtype"):
        tilemm.scaled_matmul(a, b, 1.0, 1.0, out_dtype=torch.int32)
