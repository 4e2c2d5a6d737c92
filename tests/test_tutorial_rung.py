"""Rung 9, `tensorcore-tutorial`: under Triton's interpreter (set by conftest) on CPU torch tensors
at small ragged shapes against a float64 reference, its launcher's checks, its place in the ladder
(never the default), its program compiled for sm_90 on this CPU machine, and on the GPU."""

import numpy as np
import pytest
import torch

import tilemm
from tilemm.choose import by_shape as choice
from tilemm.engine import availability
from tilemm.numerics.accuracy import compare
from tilemm.ladder.registry import Problem
from tilemm.choose import default as dispatch

from .compiled import run_program
from .conftest import ON_GPU

NAME = "tensorcore-tutorial"
SMALL = dict(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=1, num_stages=1)
DTYPES = [torch.float16, torch.bfloat16]
# ragged sizes: 1, primes, one past a small tile, K = 0 and 1
SHAPES = [(1, 1, 1), (17, 33, 9), (31, 7, 1), (5, 3, 0), (37, 41, 53), (65, 19, 29)]


def checked(a, b, **params):
    """The rung's answer through tilemm.plan, its output poisoned first, and its verdict."""
    c = tilemm.plan(a, b, kernel=NAME, **params).execute(poison=True)
    host = lambda x: x.float().cpu().numpy()  # noqa: E731
    return c, compare(host(c), host(a), host(b), str(a.dtype).removeprefix("torch."))


def laid_out(m, n, k, layout, dtype, device="cpu"):
    """Random A (m, k) and B (k, n), each a transposed view where layout says "t"."""
    a = torch.randn(k, m, dtype=dtype).T if layout[0] == "t" else torch.randn(m, k, dtype=dtype)
    b = torch.randn(n, k, dtype=dtype).T if layout[1] == "t" else torch.randn(k, n, dtype=dtype)
    return a.to(device), b.to(device)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests: test_gpu_* run it on the device")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_interpreter_ragged_shapes(dtype, m, n, k, layout):
    torch.manual_seed(m * 100 + n * 10 + k)
    a, b = laid_out(m, n, k, layout, dtype)
    c, verdict = checked(a, b, **SMALL)
    assert c.dtype == dtype and c.shape == (m, n) and verdict.ok, verdict.message
    if k == 0:
        assert not c.any()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreter_default_tiles_and_grouped_order(dtype):
    """The default 128 x 256 x 64 tiles over a C of several tiles, and small tiles whose groups of
    block rows do not divide the block rows (group_size_m shrinks for the last group)."""
    torch.manual_seed(7)
    a, b = laid_out(300, 520, 70, "nt", dtype)
    c, verdict = checked(a, b)
    assert verdict.ok, verdict.message
    c, verdict = checked(a, b, **{**SMALL, "group_m": 4})       # 19 block rows, groups of 4
    assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_launcher_writes_the_c_it_is_given_and_allocates_one_otherwise():
    from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul
    a = torch.randn(23, 13, dtype=torch.float16)
    b = torch.randn(13, 29, dtype=torch.float16)
    c = torch.full((23, 29), float("nan"), dtype=torch.float16)
    assert matmul(a, b, c, **SMALL) is c
    expected = (a.double() @ b.double()).half()
    assert torch.allclose(c.float(), expected.float(), rtol=1e-2, atol=1e-2)
    fresh = matmul(a, b, **SMALL)
    assert fresh.shape == (23, 29) and fresh.dtype == torch.float16 and torch.equal(fresh, c)
    zeros = torch.full((23, 29), float("nan"), dtype=torch.float16)
    matmul(a[:, :0], b[:0], zeros, **SMALL)                       # K = 0: an empty sum
    assert not zeros.any()


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((torch.ones(4, 5, dtype=torch.float16), torch.ones(6, 3, dtype=torch.float16)), {}, ValueError, "not \\(M, K\\)"),
    ((torch.ones(4, 5), torch.ones(5, 3)), {}, TypeError, "float16"),
    ((torch.ones(4, 5, dtype=torch.float16), torch.ones(5, 3, dtype=torch.bfloat16)), {}, TypeError, "both"),
    ((np.ones((4, 5), np.float16), torch.ones(5, 3, dtype=torch.float16)), {}, TypeError, "torch tensors"),
    ((torch.ones(4, 5, dtype=torch.float16), torch.ones(5, 3, dtype=torch.float16)),
     dict(c=torch.empty(3, 4, dtype=torch.float16)), ValueError, "c is"),
    ((torch.ones(4, 5, dtype=torch.float16), torch.ones(5, 3, dtype=torch.float16)), dict(block_k=24), ValueError,
     "block_k=24"),
    ((torch.ones(4, 5, dtype=torch.float16), torch.ones(5, 3, dtype=torch.float16)), dict(block_m=8), ValueError,
     "16 or more"),
])
def test_launcher_refuses_before_any_launch(args, kwargs, error, match):
    from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul
    with pytest.raises(error, match=match):
        matmul(*args, **kwargs)


def test_launcher_refuses_operands_past_32_bit_offsets():
    """A view whose last element lies 2^31 elements or more past its first (a stride, not memory)."""
    from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul
    far = torch.empty((2, 4), dtype=torch.float16, device="meta").as_strided((2, 4), (2**31, 1))
    with pytest.raises(ValueError, match="32-bit offsets"):
        matmul(far, torch.ones(4, 3, dtype=torch.float16, device="meta"))


def test_registered_as_rung_9_with_its_limits_and_traffic():
    kernel = tilemm.kernel(NAME)
    assert kernel.rung == 9 and kernel.device == "cuda" and kernel.backend == "triton"
    assert kernel.dtypes == ("float16", "bfloat16")
    ladder = [k.name for k in tilemm.kernels("cuda")]
    assert ladder.index(NAME) + 1 == ladder.index("tensorcore")
    params = kernel.resolve({})
    assert params == dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)
    assert kernel.limits(Problem(4096, 4096, 4096, "bfloat16"), **params) is None
    assert "32-bit offsets" in kernel.limits(Problem(2**16, 2**15 + 1, 2**15, "float16"), **params)
    assert "shared memory" in kernel.limits(Problem(64, 64, 64, "float16"),
                                            **{**params, "block_k": 128, "num_stages": 5})
    with pytest.raises(ValueError, match="block_m"):
        kernel.resolve({"block_m": 24})
    t = kernel.traffic(Problem(1000, 600, 300, "float16"), **params)      # 3 block columns, 8 block rows
    assert t.read == 1000 * 300 * 3 + 300 * 600 * 8 and t.written == 1000 * 600


def test_never_the_default(monkeypatch):
    """dispatch.default_kernel walks the ladder down from its highest rung and takes the first that can
    run a problem here. `tensorcore` (rung 10) comes before this rung, runs where it runs (one
    available()) and takes every 16-bit problem it takes: this rung is never reached. And in the
    walk itself, every Triton rung made available (the H100's table), it is never chosen."""
    tutorial, production = tilemm.kernel(NAME), tilemm.kernel("tensorcore")
    assert production.rung > tutorial.rung and production.available is tutorial.available
    sizes = (0, 1, 15, 16, 17, 127, 129, 1000, 4097, 2**16, 2**20 + 1, 2**28 - 1, 2**28)
    problems = [Problem(m, n, k, dtype) for dtype in ("float16", "bfloat16")
                for m in sizes for n in sizes for k in sizes]
    for p in problems:
        if tutorial.limits(p, **tutorial.resolve({})) is None:
            assert production.limits(p, **production.resolve({})) is None, p
    monkeypatch.setattr(availability, "available_under", lambda interpreter: None)
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    chosen = {dispatch.default_kernel("cuda:0", p.dtype, p.m, p.n, p.k, p.dtype, (p.k, p.n)).name
              for p in problems[::7]}
    assert NAME not in chosen


COMPILE = r"""
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import tilemm
from tilemm.engine.availability import H100_SHARED_OPTIN
from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul_kernel
default = tilemm.kernel("tensorcore-tutorial").resolve({})
from tests.compiled import resource_usage
PTX_TYPE = dict(fp16="f16", bf16="bf16")
ORDER = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
         "stride_cn"]
out = {}
for name, p in (("default", default), ("small", dict(block_m=64, block_n=64, block_k=32, group_m=8, num_warps=4,
                                                     num_stages=4))):
    for ty in ("fp16", "bf16"):
        # as a launch on row-major 4096 x 4096 operands specializes it: strides of 1 are constants,
        # pointers and integers that divide by 16 are marked so
        const = dict(BLOCK_SIZE_M=p["block_m"], BLOCK_SIZE_N=p["block_n"], BLOCK_SIZE_K=p["block_k"],
                     GROUP_SIZE_M=p["group_m"], stride_ak=1, stride_bn=1, stride_cn=1)
        sig = {name: "*" + ty for name in ORDER[:3]}
        sig.update({name: "constexpr" if name in const else "i32" for name in ORDER[3:]})
        sig.update({name: "constexpr" for name in const if name not in sig})
        attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(ORDER) if sig[name] != "constexpr"}
        k = triton.compile(ASTSource(fn=matmul_kernel, signature=sig, constexprs=const, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
        ptx = k.asm["ptx"]
        out[f"{name}-{ty}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
                                   wgmma=re.search(rf"wgmma.mma_async.sync.aligned.m64n\d+k16.f32.{PTX_TYPE[ty]}", ptx) is not None,
                                   stack=resource_usage(k.asm["cubin"])["stack"])
print(json.dumps(out))
"""


def test_compiles_for_sm90_to_wgmma():
    """The interpreter can't see what the compiler refuses; compiling for Hopper can: the default
    and a small configuration, float16 and bfloat16, each on wgmma with float32 sums, within the
    shared memory a block may use, and with no registers spilled to the stack."""
    compiled = run_program(COMPILE, fp_fusion=True)
    assert set(compiled) == {f"{n}-{t}" for n in ("default", "small") for t in ("fp16", "bf16")}
    for name, info in compiled.items():
        assert info["cubin"] > 0 and info["wgmma"] and info["stack"] == 0, (name, info)
        assert 0 < info["shared"] <= info["limit"], (name, info)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 0), (127, 129, 131), (1000, 1000, 1000), (4097, 3001, 1531),
                                   (64, 8192, 4096)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_gpu_matches_float64(dtype, m, n, k, layout):
    torch.manual_seed(m + n + k)
    a, b = laid_out(m, n, k, layout, dtype, "cuda")
    c, verdict = checked(a, b)
    assert c.is_cuda and c.dtype == dtype and verdict.ok, verdict.message


@pytest.mark.gpu
def test_gpu_launcher_and_the_default_is_another_rung():
    from tilemm.ladder.tensorcore.r09_tutorial_kernel import matmul
    a = torch.randn(513, 257, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(257, 1025, dtype=torch.bfloat16, device="cuda")
    c = matmul(a, b)
    expected = (a.double() @ b.double()).to(torch.bfloat16)
    assert (c.float() - expected.float()).abs().max().item() <= 2 ** -7 * expected.float().abs().max().item()
    assert tilemm.plan(a, b).kernel.name != NAME
