"""Rung `tensorcore`'s cluster=True (r10_cluster, r10_cluster_kernel): refused before any work
where Triton's Gluon has no clusters or there is no Hopper GPU (the CPU tests: the interpreter);
its program compiled for sm_90 where this Triton's Gluon has the cluster API; and, with the gpu
marker, its answers against a float64 product."""

import numpy as np
import pytest
import torch

import tilemm
from tilemm.numerics.accuracy import compare
from tilemm.ladder.record import Problem
from tilemm.engine import availability
from tilemm.ladder.tensorcore import r10_cluster

from .compiled import run_program
from .conftest import ON_GPU


@pytest.mark.skipif(ON_GPU, reason="the CPU's refusal")
def test_cluster_is_refused_before_any_work_on_the_cpu():
    a = torch.ones(64, 64, dtype=torch.bfloat16)
    with pytest.raises(tilemm.KernelUnavailable, match="cluster=True needs a Hopper GPU"):
        tilemm.matmul(a, a, kernel="tensorcore", cluster=True)
    with pytest.raises(tilemm.KernelUnavailable, match="cluster=True needs a Hopper GPU"):
        tilemm.plan(a, a, kernel="tensorcore", cluster=True)
    assert isinstance(tilemm.KernelUnavailable("x"), ValueError)


@pytest.mark.parametrize("multicast", [False, True])
def test_cluster_is_refused_where_gluon_lacks_multicast(monkeypatch, multicast):
    """On Hopper with a Gluon that has no clusters (Triton 3.6, 3.7) the refusal names what is
    missing; with one that has them, nothing is refused at the rung's defaults."""
    monkeypatch.setattr(availability, "hopper_gluon", lambda: True)
    monkeypatch.setattr(availability, "gluon_multicast", lambda: multicast)
    refusal = r10_cluster.limits(Problem(1000, 1500, 700, "bfloat16"), **r10_cluster.OWN_DEFAULTS)
    if multicast:
        assert refusal is None
    else:
        assert "cluster=True needs a Triton whose Gluon routes mbarrier arrivals" in refusal


def test_cluster_refuses_the_rung_s_tile_parameters_and_other_dtypes(monkeypatch):
    monkeypatch.setattr(availability, "hopper_gluon", lambda: True)
    monkeypatch.setattr(availability, "gluon_multicast", lambda: True)
    p = Problem(1000, 1500, 700, "float16")
    assert r10_cluster.limits(p) is None
    for given in (dict(block_m=128), dict(split_k=2), dict(stream_k=True), dict(autotune=True), dict(tma=False)):
        refusal = r10_cluster.limits(p, **{**r10_cluster.OWN_DEFAULTS, **given})
        assert "takes none of the rung's tile parameters" in refusal and next(iter(given)) in refusal, given
    assert "bfloat16 or float16" in r10_cluster.limits(Problem(64, 64, 64, "float64"))


def test_the_rung_lists_cluster_off_by_default():
    params = {p.name: p for p in tilemm.ladder.registry.get("tensorcore").params}
    assert params["cluster"].default is False and params["cluster"].choices == (False, True)


def test_b_is_read_k_major_only_where_given_so_or_not_in_rows():
    """B's own rows where they are contiguous (copied into aligned ones where they are not), B^T's
    where B is given as (N, K).T, or where neither is contiguous (a copy either way)."""
    assert not r10_cluster.reads_b_k_major(torch.empty(700, 1504, dtype=torch.bfloat16))
    assert r10_cluster.reads_b_k_major(torch.empty(1504, 704, dtype=torch.bfloat16).T)
    assert not r10_cluster.reads_b_k_major(torch.empty(700, 1501, dtype=torch.bfloat16))   # rows copied
    assert r10_cluster.reads_b_k_major(torch.empty(1400, 3000, dtype=torch.bfloat16)[::2, ::2])


COMPILE = r"""
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.engine.availability import H100_SHARED_OPTIN
from tilemm.ladder.tensorcore import r10_cluster_kernel as ck
from tests.compiled import resource_usage
out = {}
# bf16 with B's rows and C by TMA stores; fp16 with B^T's rows and C from registers
for ty, element, k_major in (("bf16", gl.bfloat16, False), ("fp16", gl.float16, True)):
    b_block = [ck.BLOCK_N, ck.BLOCK_K] if k_major else [ck.BLOCK_K, ck.BLOCK_N]
    ptx_ty = {"bf16": "bf16", "fp16": "f16"}[ty]
    la = repr(gl.NVMMASharedLayout.get_default_for([ck.LOAD_ROWS, ck.BLOCK_K], element, cga_layout=ck.SPLIT_ROWS))
    lb = repr(gl.NVMMASharedLayout.get_default_for(b_block, element, cga_layout=ck.WHOLE))
    lc = repr(gl.NVMMASharedLayout.get_default_for([ck.LOAD_ROWS, ck.BLOCK_N // 2], element,
                                                   cga_layout=ck.SPLIT_ROWS))
    sig = dict(a_desc=f"tensordesc<{ty}[{ck.LOAD_ROWS}, {ck.BLOCK_K}],{la}>",
               b_desc=f"tensordesc<{ty}[{b_block[0]}, {b_block[1]}],{lb}>",
               c_desc=f"tensordesc<{ty}[{ck.LOAD_ROWS}, {ck.BLOCK_N // 2}],{lc}>", c_ptr=f"*{ty}", M="i32",
               N="i32", K="i32", stride_cm="i32", stride_cn="i32", TMA_STORE="constexpr", GROUP_M="constexpr",
               PROGRAMS="constexpr", STAGES="constexpr", WORKER_REGISTERS="constexpr")
    const = dict(TMA_STORE=not k_major, GROUP_M=ck.GROUP_M, PROGRAMS=66, STAGES=ck.STAGES,
                 WORKER_REGISTERS=ck.WORKER_REGISTERS)
    k = triton.compile(GluonASTSource(fn=ck.matmul_cluster, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_ctas=ck.CTAS))
    ptx = k.asm["ptx"]
    out[f"{ty}-{'k-major' if k_major else 'rows'}"] = dict(
        shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
        wgmma=f"wgmma.mma_async.sync.aligned.m64n{ck.BLOCK_N}k16.f32.{ptx_ty}.{ptx_ty}" in ptx,
        in_flight="wgmma.wait_group.sync.aligned 1" in ptx, multicast=".multicast::cluster" in ptx,
        arrive="mbarrier.arrive.shared::cluster" in ptx, pair=".reqnctapercluster 2" in ptx,
        tma_store=("cp.async.bulk.tensor.2d.global.shared" in ptx) == (not k_major),
        stack=resource_usage(k.asm["cubin"])["stack"])
print(json.dumps(out))
"""


@pytest.mark.skipif(not availability.gluon_cluster_api(), reason="this Triton's Gluon has no cluster API")
def test_cluster_program_compiles_for_sm90():
    """Both dtypes, both B layouts and both ways of writing C: 64 x 256 wgmma with float32 sums, one
    group left in flight, B multicast, arrivals routed to the lead's barriers, two CTAs a cluster,
    C by TMA stores where asked, no spills, and shared memory within Hopper's."""
    compiled = run_program(COMPILE)
    assert len(compiled) == 2
    for name, info in compiled.items():
        assert info["cubin"] > 0 and info["shared"] <= info["limit"], (name, info)
        checks = ("wgmma", "in_flight", "multicast", "arrive", "pair", "tma_store")
        assert all(info[key] for key in checks), (name, info)
        assert info["stack"] == 0, (name, info)


def operands(m, n, k, layout, dtype, seed):
    """A (m, k) and B (k, n) on the GPU, each a transposed view where layout says "t"."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(k, m, generator=g, device="cuda").to(dtype).T if layout[0] == "t" else torch.randn(
        m, k, generator=g, device="cuda").to(dtype)
    b = torch.randn(n, k, generator=g, device="cuda").to(dtype).T if layout[1] == "t" else torch.randn(
        k, n, generator=g, device="cuda").to(dtype)
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1500, 700), (1, 1, 1), (257, 255, 65), (2048, 4096, 1024)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_cluster_matches_float64(m, n, k, layout, dtype):
    """Ragged tiles, every layout (operands copied into rows where TMA needs it), C poisoned,
    written by TMA stores (a fresh C) and from registers (out= a column-major C); then a prepared
    plan launched again on changed values of A, and a repeated call on new ones."""
    if not availability.gluon_multicast():
        pytest.skip("this Triton's Gluon has no clusters")
    a, b = operands(m, n, k, layout, dtype, m + n + k)
    host = lambda x: x.float().cpu().numpy()  # noqa: E731
    c = tilemm.plan(a, b, kernel="tensorcore", cluster=True).execute(poison=True)
    verdict = compare(host(c), host(a), host(b), str(dtype).removeprefix("torch."))
    assert c.dtype == dtype and verdict.ok, verdict.message
    out = torch.full((n, m), float("nan"), dtype=dtype, device="cuda").T     # no rows to store by TMA
    c = tilemm.matmul(a, b, out=out, kernel="tensorcore", cluster=True)
    verdict = compare(host(out), host(a), host(b), str(dtype).removeprefix("torch."))
    assert c.data_ptr() == out.data_ptr() and verdict.ok, verdict.message
    launch, result = tilemm.plan(a, b, kernel="tensorcore", cluster=True).prepare()
    for scale in (-2.0, 0.5):
        a.mul_(scale)                                 # powers of two: exact
        c = result().fill_(float("nan"))
        launch()
        got, want = c.double().cpu().numpy(), (a.double() @ b.double()).cpu().numpy()
        assert np.isfinite(got).all() and np.abs(got - want).max() <= 2e-2 * np.abs(want).max(), scale
    for x in (a, a.clone().neg_()):                   # a repeated call (same strides) replays on new operands
        got = tilemm.matmul(x, b, kernel="tensorcore", cluster=True).double().cpu().numpy()
        want = (x.double() @ b.double()).cpu().numpy()
        assert np.isfinite(got).all() and np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
