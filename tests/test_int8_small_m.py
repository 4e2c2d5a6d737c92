"""tensorcore-int's small-M program (tilemm.ladder.tensorcore.r11_int8_small_m): int8 x int8 ->
int32 in small tiles with K split into runs whose partials the last run adds. Under Triton's
interpreter at odd sizes against exact products (M not a multiple of the tile, N and K neither,
splits of several runs, the workspace's counts left at zero); the rule that picks it and the
count of runs as functions of the sizes and SMs; the program compiled for sm_90 as each tile class
runs it; and exact answers on the GPU."""
import pytest

from tilemm.engine import workspaces
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

from .compiled import run_program
from .conftest import ON_GPU

torch = pytest.importorskip("torch")

H200_SMS = 132
TINY = (16, 32, 32, 1, 2, 1)     # interpreter-sized tiles: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, programs an SM


def operands(m, n, k, seed, device="cpu"):
    """A (m, k) and B as torch.nn.Linear keeps a weight: (n, k) given as its .T."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    weight = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    return a.to(device), weight.T.to(device)


def counts_at_zero() -> bool:
    """Every split-K workspace's counts back at zero (stream-K's flags, raised to each launch's
    epoch, are never cleared: other rungs' earlier calls leave them set)."""
    return all(not counts.any() for (kind, *_), (_, counts) in workspaces.WORKSPACES.items() if kind == "split-k")


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k,runs", [(1, 33, 70, 3), (3, 45, 300, 2), (17, 130, 129, 4), (17, 70, 96, 1),
                                        (40, 20, 600, None), (3, 7, 9, 2)])
def test_interpreter_exact_at_odd_sizes(m, n, k, runs):
    a, b = operands(m, n, k, m + n + k)
    c = torch.full((m, n), 7, dtype=torch.int32)
    small_m.launcher(a, b, c, runs, tiles=TINY)()
    assert torch.equal(c.long(), a.long() @ b.long())
    assert counts_at_zero()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,runs", [(1, 2), (3, 3), (17, None)])
def test_interpreter_through_the_rung(m, runs):
    """small_m=True on the rung, its own tiles, twice (a prepared launch again); any layout of B."""
    import tilemm
    a, b = operands(m, 40, 520, m)
    for b_given in (b, b.contiguous()):
        for _ in range(2):
            c = tilemm.matmul(a, b_given, out_dtype="int32", kernel="tensorcore-int", small_m=True, split_k=runs)
            assert c.dtype == torch.int32 and torch.equal(c.long(), a.long() @ b.long())
    assert counts_at_zero()


def test_runs_fill_the_sms_and_none_is_short_or_empty():
    # M = 1, N = 3584, K = 18944: 28 tiles of 16 x 128, 74 K steps of 256: 5 runs (132 programs
    # an SM wanted), of 15 steps (the last 14)
    assert small_m.runs_of_k(1, 3584, 18944, H200_SMS) == 5
    # tiles enough to fill the SMs: one run each
    assert small_m.runs_of_k(1, 28672, 4096, H200_SMS) == 1
    # short K: no run under LEAST_RUN steps (2048 / 256 = 8 steps: 2 runs)
    assert small_m.runs_of_k(1, 2048, 2048, H200_SMS) == 2
    for m, n, k in [(1, 2048, 2048), (33, 3584, 18944), (100, 8192, 6144), (7, 300, 1000), (1, 8, 8)]:
        runs = small_m.runs_of_k(m, n, k, H200_SMS)
        steps = -(-k // small_m.tiles_for(m)[2])
        per_run = -(-steps // runs)
        assert runs >= 1 and (runs - 1) * per_run < steps and (runs == 1 or per_run >= small_m.LEAST_RUN)


def test_the_rung_takes_it_where_its_tiles_leave_sms_idle():
    assert small_m.preferred(16, 3584, 18944, H200_SMS)          # 14 tiles of 128 x 256
    assert small_m.preferred(512, 8192, 6144, H200_SMS)          # 128 tiles
    assert not small_m.preferred(768, 8192, 6144, H200_SMS)      # 192 tiles: the rung's own
    assert not small_m.preferred(16, 3584, 0, H200_SMS)          # an empty sum


def test_takes_int8_into_int32_in_the_fast_layout(monkeypatch):
    monkeypatch.setattr(small_m.availability, "multiprocessors", lambda: H200_SMS)
    a, b = operands(16, 64, 128, 0)
    c = torch.empty(16, 64, dtype=torch.int32)
    assert small_m.takes(a, b, c)
    assert not small_m.takes(a, b.contiguous(), c)                  # B row-major: the rung's copies
    assert small_m.takes(a, b.contiguous(), c, small_m=True)        # ... unless asked for
    assert not small_m.takes(a, b, c, small_m=False)
    assert not small_m.takes(a, b, c.to(torch.int8))                # int8 C: the rung's wrap
    assert not small_m.takes(a.short(), b.short(), c)               # int16 operands: digits
    big = torch.empty(1024, 64, dtype=torch.int8)
    assert not small_m.takes(big, torch.empty(28672, 64, dtype=torch.int8).T, torch.empty(1024, 28672, dtype=torch.int32))


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.ladder.tensorcore.r11_int8_small_m_kernel import small_m_matmul
from tilemm.ladder.tensorcore.r11_int8_small_m import TILES
from tilemm.engine.availability import H100_SHARED_OPTIN
out = {}
for rows, (bm, bn, bk, warps, stages, _) in TILES:
    sig = dict(a_ptr="*i8", b_ptr="*i8", c_ptr="*i32", M="i32", N="i32", K="i32", stride_am="i32",
               stride_ak="constexpr", stride_bk="constexpr", stride_bn="i32", stride_cm="i32", stride_cn="constexpr",
               BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", EVEN_K="constexpr",
               split_steps="i32", ws_ptr="*fp32", counts_ptr="*i32")
    const = dict(stride_ak=1, stride_bk=1, stride_cn=1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=True)
    # as a launch specializes them: pointers, N, K and the row strides divisible by 16
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(sig)
             if name in ("a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bn", "stride_cm", "ws_ptr")}
    k = triton.compile(ASTSource(fn=small_m_matmul, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    ptx = k.asm["ptx"]
    out[str(rows)] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, pipelined="cp.async" in ptx,
                          wgmma="wgmma" in ptx, mma="mma.sync" in ptx, block_m=bm, cubin=len(k.asm["cubin"]))
print(json.dumps(out))
"""


@pytest.mark.skipif(ON_GPU, reason="compile-only tier: the GPU runs the programs")
def test_compiles_for_sm90_at_every_tile_class():
    """Each row of TILES compiled for sm_90 as a launch specializes it (split K: the hand-over
    compiled too), outside the interpreter: its shared memory fits, the loads are pipelined
    (cp.async), and 64 rows and more take wgmma."""
    out = run_program(COMPILE)
    assert len(out) == len(small_m.TILES)
    for rows, k in out.items():
        assert 0 < k["shared"] <= k["limit"] and k["pipelined"] and k["cubin"] > 0, (rows, k)
        assert k["wgmma"] if k["block_m"] >= 64 else k["mma"], (rows, k)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 16, 17, 33, 100, 200, 512])
def test_exact_on_the_gpu(m):
    """The default and the program asked for, the plan's path and a repeated call's replay, split
    and not, B as a weight's .T and row-major."""
    import tilemm
    for n, k in [(3584, 18944), (28672, 4096), (2048, 2048), (1000, 1000), (130, 72)]:
        a, b = operands(m, n, k, m + n, "cuda")
        expected = a.double() @ b.double()
        for b_given in (b, b.contiguous()):
            for params in ({}, {"kernel": "tensorcore-int", "small_m": True}, {"kernel": "tensorcore-int", "small_m": True,
                                                                                 "split_k": 3}):
                for _ in range(3):
                    c = tilemm.matmul(a, b_given, out_dtype="int32", **params)
                    assert c.dtype == torch.int32 and torch.equal(c.double(), expected), (m, n, k, params)
    torch.cuda.synchronize()
    assert counts_at_zero()
