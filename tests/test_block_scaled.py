"""tilemm.scaled_matmul with row-wise scales (the fp8 program's, scaled_fp8) and block scales (rung
`tensorcore-block-scaled`): against the float64 product of the dequantized operands (each fp8
value times its scale), in Triton's interpreter (set by conftest) on shapes that are not multiples
of the tiles or of the 128-blocks; bad scales refused before any kernel; the programs compiled for
sm_90; and, with the gpu marker, DeepSeek-V3-like shapes on the device."""
import pytest
import torch

import tilemm
from tilemm.engine import availability
from tilemm.ladder.tensorcore import r16_block_scaled, r16_block_scaled_kernel, scaled_fp8

from .compiled import gluon_stack_allowed, run_program
from .conftest import ON_GPU

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
WHERE = "cuda" if ON_GPU else "cpu"
SMALL = {} if ON_GPU else dict(block_m=16, block_n=32, block_k=32, num_warps=4, num_stages=2)
ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


def operand(rows, cols, dtype, transposed, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((cols, rows) if transposed else (rows, cols), generator=g) * 3).to(dtype).to(WHERE)
    return x.T if transposed else x


def scales(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (2.0 ** torch.randint(-3, 4, shape, generator=g) * (1 + torch.rand(shape, generator=g))).to(WHERE)


def dequantized(x, scale, rows_per_scale, cols_per_scale):
    """x (float64) with each element times its scale (a scale covers a rows x cols block)."""
    s = scale.double().cpu().repeat_interleave(rows_per_scale, 0).repeat_interleave(cols_per_scale, 1)
    return x.double().cpu() * s[:x.shape[0], :x.shape[1]]


def check(c, a, b, scale_a, scale_b, block: bool):
    m, k = a.shape
    n = b.shape[1]
    if block:
        a64, b64 = dequantized(a, scale_a, 1, 128), dequantized(b, scale_b, 128, 128)
    else:
        a64, b64 = dequantized(a, scale_a, 1, k), dequantized(b, scale_b, k, 1)
    ref, size = a64 @ b64, a64.abs() @ b64.abs()
    # one rounding to c's dtype; float32 sums: a product, a partial sum of a K step, its scaling
    # and its addition each round (2K + 3 K/16 roundings at most)
    bound = ROUNDING[c.dtype] * ref.abs() + (2 * k + 3 * k / 16 + 2) * 2.0**-24 * size + torch.finfo(c.dtype).tiny
    if ON_GPU:    # Hopper's tensor cores add fp8 products in an accumulator of ~13 bits within a K block
        bound += 4 * 2.0**-13 * size      # (its four k32 steps; as tests/test_scaled.py allows the one-scale program)
    c64 = c.double().cpu()
    # past the out dtype's range C holds an infinity of the sum's sign (as torch._scaled_mm's), or
    # the largest finite value where the sum lies within rounding of it
    past = ref.abs() > 0.99 * torch.finfo(c.dtype).max
    assert torch.all((c64[past].abs() >= 0.99 * torch.finfo(c.dtype).max) & (c64[past].sign() == ref[past].sign()))
    err = torch.where(past, 0.0, c64 - ref).abs()
    assert not torch.isnan(c).any() and torch.all(err <= bound), f"worst error / bound {(err / bound).max():.3g}"


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes; the gpu tests below cover the device")
@pytest.mark.parametrize("m,n,k,dtypes", [(1, 1, 1, (E4M3, E4M3)), (19, 130, 257, (E4M3, E5M2)),
                                          (33, 7, 128, (E5M2, E5M2))])
def test_block_scales_match_the_dequantized_product(m, n, k, dtypes):
    a, b = operand(m, k, dtypes[0], False, 1), operand(k, n, dtypes[1], True, 2)
    scale_a, scale_b = scales((m, -(-k // 128)), 3), scales((-(-k // 128), -(-n // 128)), 4)
    out = torch.full((m, n), float("nan"), device=WHERE)          # poisoned: every entry must be written
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype="float32", out=out, **SMALL)
    assert c is out
    check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
def test_block_scales_with_k_tails_into_16_bit_results(out_dtype):
    m, n, k = 37, 150, 200                     # K: one whole 128-block and a 72-wide tail, as the scales allow
    a, b = operand(m, k, E5M2, False, 21), operand(k, n, E4M3, True, 22)
    scale_a, scale_b = scales((m, -(-k // 128)), 23), scales((-(-k // 128), -(-n // 128)), 24)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, **SMALL)
    assert c.dtype == out_dtype and c.shape == (m, n)
    check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("tma", [True, False])
def test_block_scales_with_tiles_by_tma_and_by_pointers(tma):
    m, n, k = 19, 50, 272                       # K a multiple of 16 (TMA's rows), of no tile: edges zero-filled
    a, b = operand(m, k, E4M3, False, 15), operand(k, n, E5M2, True, 16)
    scale_a, scale_b = scales((m, -(-k // 128)), 17), scales((-(-k // 128), -(-n // 128)), 18)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype="float32", tma=tma, **SMALL)
    check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_row_wise_scales_match_the_dequantized_product(out_dtype, fast_accum):
    m, n, k = 21, 40, 70
    a, b = operand(m, k, E4M3, False, 5), operand(k, n, E4M3, False, 6)          # b row-major: copied K-major
    scale_a, scale_b = scales((m, 1), 7), scales((1, n), 8)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, fast_accum=fast_accum, **SMALL)
    assert c.dtype == out_dtype and c.shape == (m, n)
    check(c, a, b, scale_a, scale_b, block=False)


def strided(scale, step):
    """scale's values in a tensor of its shape whose elements lie `step` apart."""
    wide = torch.zeros(scale.numel() * step, dtype=scale.dtype, device=scale.device)[::step]
    wide.copy_(scale.flatten())
    return wide.view(scale.shape) if scale.shape[1] == 1 else wide.view(1, -1)


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("m,n,k,params", [
    (37, 67, 130, {}),                                  # the rung's own choice: 64 x 128 tiles of few rows
    (1, 129, 33, dict(block_m=32, block_n=64, block_k=32, num_warps=4, num_stages=2)),
    (70, 1, 64, dict(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)),
    (45, 50, 96, dict(block_m=16, block_n=32, block_k=32, num_warps=4, num_stages=2, stream_k=True)),  # shared out
])
def test_row_wise_scales_take_the_fp8_program_at_awkward_shapes(monkeypatch, m, n, k, params):
    """Row-wise scales run the per-tensor fp8 program (scaled_fp8.bind's row_wise: each element of
    C times its row's and column's scales as it is written), never rung 16's program: ragged
    tiles, a row or a column, stream-K's hand-over of partial sums, scales of any strides (copied
    where their elements are not one apart); every entry of a poisoned out written."""
    def refused(*_, **__):
        raise AssertionError("row-wise scales ran rung 16's program")
    monkeypatch.setattr(r16_block_scaled, "launch", refused)
    a, b = operand(m, k, E4M3, False, 31), operand(k, n, E5M2, True, 32)
    for scale_a, scale_b in ((scales((m, 1), 33), scales((1, n), 34)),
                             (strided(scales((m, 1), 35), 3), strided(scales((1, n), 36), 2))):
        out = torch.full((m, n), float("nan"), device=WHERE)
        c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype="float32", out=out, **params)
        assert c is out
        check(c, a, b, scale_a, scale_b, block=False)


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
def test_block_scales_in_a_bfloat16_result_and_transposed_scales():
    m, n, k = 17, 129, 300
    a, b = operand(m, k, E4M3, False, 9), operand(k, n, E4M3, True, 10)
    scale_a = scales((-(-k // 128), m), 11).T                      # DeepGEMM keeps A's scales M-major
    scale_b = scales((-(-k // 128), -(-n // 128)), 12)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, **SMALL)
    assert c.dtype == torch.bfloat16
    check(c, a, b, scale_a, scale_b, block=True)


def test_empty_products():
    a, b = operand(5, 40, E4M3, False, 13), operand(40, 6, E4M3, True, 14)
    zero_k = tilemm.scaled_matmul(a[:, :0], b[:0], scales((5, 1), 1), scales((1, 6), 2), out_dtype="float32",
                                  **SMALL)
    assert torch.equal(zero_k.cpu(), torch.zeros(5, 6))
    assert tilemm.scaled_matmul(a[:0], b, scales((0, 1), 1), scales((1, 1), 2), **SMALL).shape == (0, 6)


ONES = torch.ones(4, 8).to(E4M3), torch.ones(8, 6).to(E4M3)
BAD = [
    ((*ONES, torch.ones(4, 2), torch.ones(1, 1)), {}, ValueError, r"per-tensor .* row-wise \(4, 1\) and \(1, 6\)"),
    ((*ONES, torch.ones(4, 1), torch.ones(6, 1)), {}, ValueError, "shapes"),
    ((*ONES, torch.ones(4, 1), torch.ones(2, 1)), {}, ValueError, r"block \(4, 1\) and \(1, 1\)"),
    ((*ONES, torch.ones(4, 1, dtype=torch.float64), torch.ones(1, 6)), {}, ValueError, "float32"),
    ((*ONES, 1.0, torch.ones(1, 6)), {}, ValueError, "two float32 tensors"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(block_q=1), TypeError, "unknown parameter"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(block_k=48), ValueError, "power of two"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(tma=True), TypeError, "unknown parameter"),   # rung 16's
    ((*ONES, torch.ones(4, 1), torch.ones(1, 1)), dict(stream_k=True), TypeError, "for block scales"),
    ((ONES[0], torch.ones(8, 6).to(E4M3)[:5], torch.ones(4, 1), torch.ones(1, 6)), {}, ValueError, "line up"),
    ((ONES[0].float(), ONES[1], torch.ones(4, 1), torch.ones(1, 6)), {}, TypeError, "dtype float32"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(out_dtype="int8"), TypeError, "out_dtype"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(out=torch.ones(4, 5)), ValueError, "out must"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 1)), dict(block_k=256), tilemm.KernelUnavailable,
     "128-wide block|block_k=128"),    # (on Hopper the warp-specialized program is the one asked, with its own words)
    ((*ONES, torch.ones(4, 1), torch.ones(1, 1)), dict(tma=1), ValueError, "tma=1"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 1)), dict(warp_specialized="yes"), ValueError, "warp_specialized='yes'"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 1)), dict(warp_specialized=True, block_n=64), tilemm.KernelUnavailable,
     "needs a Hopper GPU|block_n 128 or 256"),
    ((*ONES, torch.ones(4, 1), torch.ones(1, 6)), dict(cluster=True), tilemm.KernelUnavailable,
     "needs a Hopper GPU|row-wise scales run on one CTA"),
]


@pytest.mark.parametrize("args,kwargs,error,match", BAD)
def test_bad_scales_are_refused_before_any_kernel(monkeypatch, args, kwargs, error, match):
    def launched(*_, **__):
        raise AssertionError("launched")
    monkeypatch.setattr(r16_block_scaled_kernel, "launch", launched)
    monkeypatch.setattr(r16_block_scaled, "launch", launched)           # the warp-specialized program's too
    monkeypatch.setattr(scaled_fp8, "launch", launched)                 # row-wise scales' program
    args = tuple(x.to(WHERE) if isinstance(x, torch.Tensor) else x for x in args)
    kwargs = {k: v.to(WHERE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        tilemm.scaled_matmul(*args, **kwargs)


def test_gradients_are_refused_as_scaled_mm_s():
    c = tilemm.scaled_matmul(ONES[0].to(WHERE), ONES[1].to(WHERE), torch.ones(4, 1, device=WHERE, requires_grad=True),
                             torch.ones(1, 6, device=WHERE), **SMALL)
    assert c.requires_grad
    with pytest.raises(RuntimeError):
        c.sum().backward()


COMPILE = r"""
import inspect, json, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tilemm.ladder.tensorcore import r16_block_scaled as rung, r16_block_scaled_kernel as s
p = {**rung.DEFAULTS, **rung.TRITON_TILES}
names = list(inspect.signature(s.block_scaled_kernel.fn).parameters)
out = {}
for (ta, tb), tma in ((("fp8e4nv", "fp8e4nv"), False), (("fp8e5", "fp8e5"), False), (("fp8e4nv", "fp8e4nv"), True)):
    sig = {n: "i32" for n in names}
    sig.update(a_ptr=f"*{ta}", b_ptr=f"*{tb}", c_ptr="*bf16", sa_ptr="*fp32", sb_ptr="*fp32")
    if tma:
        sig.update(a_ptr=f"tensordesc<{ta}[{p['block_m']}, {p['block_k']}]>",
                   b_ptr=f"tensordesc<{tb}[{p['block_n']}, {p['block_k']}]>")
    const = dict(stride_ak=1, stride_bk=1, stride_cn=1, SCALE_BLOCK=s.SCALE_BLOCK,
                 BLOCK_SIZE_M=p["block_m"], BLOCK_SIZE_N=p["block_n"], BLOCK_SIZE_K=p["block_k"], GROUP_SIZE_M=p["group_m"],
                 TMA=tma)
    sig.update({n: "constexpr" for n in const})
    aligned = ["c_ptr", "sa_ptr", "sb_ptr", "stride_am", "stride_bn", "stride_cm", "N", "K"] + ["a_ptr", "b_ptr"] * (not tma)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(ASTSource(fn=s.block_scaled_kernel, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
    ptx = k.asm["ptx"]
    pair = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}
    out[f"{ta}-{tma}"] = dict(shared=k.metadata.shared, cp_async="cp.async" in ptx,
                                   wgmma=f"wgmma.mma_async.sync.aligned.m64n{p['block_n']}k32.f32.{pair[ta]}.{pair[tb]}" in ptx)
print(json.dumps(out))
"""


def test_the_program_compiles_for_sm90_with_fp8_wgmma_and_pipelined_loads():
    for name, info in run_program(COMPILE).items():
        assert info["wgmma"] and info["cp_async"] and info["shared"] >= 2 * 256 * 128, (name, info)


@pytest.mark.parametrize("hopper", [False, True])
def test_block_scales_take_the_warp_specialized_program_where_gluon_runs_on_hopper(monkeypatch, hopper):
    monkeypatch.setattr(availability, "hopper_gluon", lambda: hopper)
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    resolve = r16_block_scaled.resolve
    wide = resolve({}, 4096, 7168)               # 32 x 28 tiles of 128 x 256: past a round of SMs
    assert wide["warp_specialized"] is hopper
    tiles = (wide["block_m"], wide["block_n"], wide["group_m"], wide["num_stages"])
    assert tiles == ((128, 256, 16, 4) if hopper else (128, 128, 8, 4))
    few = resolve({}, 128, 7168)                 # 56 tiles of 128 x 128: 64-row tiles where hopper
    assert (few["block_m"], few["block_n"]) == ((64, 128) if hopper else (128, 128))
    assert resolve({}, 4096, 2112)["block_n"] == 128                   # 256: 9 columns, the last 64 wide
    assert resolve(dict(tma=False), 4096, 7168)["warp_specialized"] is False
    assert resolve(dict(warp_specialized=False), 4096, 7168)["block_n"] == 128
    for m, n in ((4096, 24576), (4096, 4096), (8192, 7168), (2048, 32768)):    # whole rounds, near enough
        assert r16_block_scaled.ws_block_n(m, n, 132) == 256
    asked = resolve(dict(warp_specialized=True, block_n=128, num_stages=5), 4096, 7168)
    assert (asked["warp_specialized"], asked["block_n"], asked["group_m"], asked["num_stages"]) == (True, 128, 16, 5)
    assert resolve(dict(warp_specialized=True, block_m=64, block_n=256), 4096, 7168)["num_stages"] == 5


# the opening of both compile scripts: the block scales' Gluon program compiled for sm_90
WS_COMPILE = r"""
import json, re, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.ladder.tensorcore import r16_block_scaled as rung, r16_block_scaled_ws_kernel as ws
from tests.compiled import resource_usage


def compile_ws(block_m, block_n, tma_store, fusion, fma_right=False):
    layouts = [repr(gl.NVMMASharedLayout.get_default_for([rows, 128], gl.float8e4nv)) for rows in (block_m, block_n)]
    c_layout = repr(gl.NVMMASharedLayout.get_default_for([64, 128], gl.bfloat16))
    a_desc = f"tensordesc<fp8e4nv[{block_m}, 128],{layouts[0]}>"
    sig = dict(a_desc=a_desc, b_desc=f"tensordesc<fp8e4nv[{block_n}, 128],{layouts[1]}>",
               c_desc=f"tensordesc<bf16[64, 128],{c_layout}>" if tma_store else a_desc,
               c_ptr="*bf16", sa_ptr="*fp32", sb_ptr="*fp32", M="i32", N="i32", K="i32", stride_cm="i32",
               stride_cn="i32", stride_sam="i32", stride_sak="i32", stride_sbk="i32", stride_sbn="i32",
               TMA_STORE="constexpr", GROUP_M="constexpr", PROGRAMS="constexpr", STAGES="constexpr",
               WORKER_REGISTERS="constexpr", FMA_RIGHT="constexpr")
    const = dict(TMA_STORE=tma_store, GROUP_M=rung.WS_GROUP_M, PROGRAMS=132, STAGES=rung.WS_STAGES[block_m, block_n],
                 WORKER_REGISTERS=ws.WORKER_REGISTERS, FMA_RIGHT=fma_right)
    return triton.compile(GluonASTSource(fn=ws.block_scaled_ws, signature=sig, constexprs=const),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, enable_fp_fusion=fusion))
"""

COMPILE_WS = WS_COMPILE + r"""
out = {}
for block_m, block_n, tma_store in ((128, 256, True), (64, 128, False)):   # both partition sets, both ways C leaves
    k = compile_ws(block_m, block_n, tma_store, ws.fp_fusion(block_n))
    ptx = k.asm["ptx"]
    out[f"{block_m}x{block_n}-{tma_store}"] = dict(
        shared=k.metadata.shared, stack=resource_usage(k.asm["cubin"])["stack"],
        wgmma=len(re.findall(r"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", ptx)),
        waits=sorted(set(re.findall(r"wgmma.wait_group.sync.aligned (\d+);", ptx))), setmaxnreg="setmaxnreg" in ptx,
        tma_store="cp.async.bulk.tensor.2d.global.shared" in ptx)
print(json.dumps(out))
"""


def test_the_warp_specialized_program_compiles_for_sm90_without_spills():
    """Each 64-row warpgroup's products: four k32 wgmma a half (two halves at block_n 256), each
    half waited for (wait_group 0) before it is scaled; registers moved to the multiplying
    warpgroups (setmaxnreg), none spilled (a stack frame would be spills); 16-bit C by TMA stores,
    within the shared memory a block may use with them."""
    compiled = run_program(COMPILE_WS)
    assert set(compiled) == {"128x256-True", "64x128-False"}
    for name, info in compiled.items():
        tile, tma_store = name.split("-")
        block_m, block_n = map(int, tile.split("x"))
        assert info["stack"] == 0 and info["setmaxnreg"] and info["waits"] == ["0"], (name, info)
        # multiplying warpgroups x halves x 4 k32 steps
        assert info["wgmma"] >= 4 * (block_m // 64) * (block_n // 128), (name, info)
        assert info["tma_store"] is (tma_store == "True") and info["shared"] <= 232448, (name, info)  # H100/H200


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,block_m,block_n,out_dtype", [(517, 1030, 333, 128, 256, torch.float32),
                                                             (300, 200, 4096, 128, 128, torch.bfloat16),
                                                             (1024, 640, 1000, 128, 256, torch.float16),
                                                             (100, 700, 2000, 64, 128, torch.bfloat16)])
def test_gpu_warp_specialized_program_matches_the_dequantized_product(m, n, k, block_m, block_n, out_dtype):
    """K not a multiple of 16 (rows copied for TMA) or of 128 (a tail block), N past a 128-block."""
    from tilemm.engine import availability as gpu
    if not gpu.hopper_gluon():
        pytest.skip("the warp-specialized program runs on Hopper with Gluon")
    a, b = operand(m, k, E4M3, False, 5), operand(k, n, E5M2, True, 6)
    scale_a, scale_b = scales((m, -(-k // 128)), 7), scales((-(-k // 128), -(-n // 128)), 8)
    out = torch.full((m, n), float("nan"), device=WHERE, dtype=out_dtype)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out, warp_specialized=True,
                             block_m=block_m, block_n=block_n)
    check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(4096, 7168, 16384), (517, 1030, 333), (128, 7168, 2048), (4096, 2112, 7168)])
def test_gpu_block_scales_match_the_dequantized_product(m, n, k):
    a, b = operand(m, k, E4M3, False, 1), operand(k, n, E4M3, True, 2)
    scale_a, scale_b = scales((m, -(-k // 128)), 3), scales((-(-k // 128), -(-n // 128)), 4)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype="float32")
    if m * n * k > 2**36:           # the float64 reference of the largest on rows of C only
        rows = slice(0, 64)
        a, scale_a, c = a[rows], scale_a[rows], c[rows]
    check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, dict(warp_specialized=False)])
def test_gpu_repeated_calls_replay_on_their_new_operands(params):
    """The second call of a shape replays the first's launches (tilemm.engine.replay) on its own
    operands and scales: K not a multiple of 16, so A's and B's rows go through aligned copies."""
    from tilemm.products import block_scaled
    m, n, k = 300, 520, 1000
    for seed in (1, 11):
        a, b = operand(m, k, E4M3, False, seed), operand(k, n, E4M3, True, seed + 1)
        scale_a, scale_b = scales((m, -(-k // 128)), seed + 2), scales((-(-k // 128), -(-n // 128)), seed + 3)
        c = tilemm.scaled_matmul(a, b, scale_a, scale_b, **params)
        check(c, a, b, scale_a, scale_b, block=True)
    key = block_scaled.replay_key(a, b, scale_a, scale_b, "bfloat16", False, params)
    assert key in block_scaled._REPLAYS


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,params,strided_scales", [
    (1024, 3072, 4096, {}, False),                        # Hopper: the warp-specialized Gluon program (K >= 4096)
    (2048, 4096, 512, {}, False),                         # the persistent Triton program, 256 x 128 tiles
    (64, 4096, 14336, {}, False),                         # a few rows, deep: 64 x 128 tiles and stream-K
    (517, 1030, 333, {}, True),                           # ragged; scales copied to unit strides
    (300, 700, 5000, dict(warp_specialized=True), True),
    (304, 704, 5008, dict(warp_specialized=False, fast_accum=True), False)])
def test_gpu_row_wise_scales_run_the_fp8_programs(m, n, k, params, strided_scales):
    """Row-wise scales on each of the fp8 program's forms, against the dequantized float64 product
    and torch._scaled_mm; the second call of a shape replays the first's launches (tilemm.engine.replay)
    on new scales."""
    from tilemm.products import scaled, scaled_common
    if params.get("warp_specialized") and not availability.hopper_gluon():
        pytest.skip("the warp-specialized program runs on Hopper with Gluon")
    a, b = operand(m, k, E4M3, False, 41), operand(k, n, E4M3, True, 42)
    for seed in (43, 53):
        scale_a, scale_b = scales((m, 1), seed), scales((1, n), seed + 1)
        if strided_scales:
            scale_a, scale_b = strided(scale_a, 3), strided(scale_b, 2)
        c = tilemm.scaled_matmul(a, b, scale_a, scale_b, **params)
        fast = params.get("fast_accum", False)
        if not fast:
            check(c, a, b, scale_a, scale_b, block=False)
        if k % 16 or n % 16:      # torch._scaled_mm takes K and N in multiples of 16 only
            continue
        # the tensor cores' own accumulator across K with fast_accum: k / 32 of its roundings
        want = torch._scaled_mm(a, b, scale_a.contiguous(), scale_b.contiguous(), out_dtype=torch.bfloat16,
                                use_fast_accum=fast)
        assert torch.allclose(c.float(), want.float(), rtol=2e-2, atol=1e-1)
    rest = {name: v for name, v in params.items() if name != "fast_accum"}
    assert scaled_common.replay_key((a, b, scale_a, scale_b), "bfloat16", fast, rest) in scaled._REPLAYS


@pytest.mark.gpu
def test_gpu_row_wise_scales_match_scaled_mm():
    a, b = operand(1024, 2048, E4M3, False, 1), operand(2048, 3072, E4M3, True, 2)
    scale_a, scale_b = scales((1024, 1), 3), scales((1, 3072), 4)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b)
    want = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert torch.allclose(c.float(), want.float(), rtol=2e-2, atol=1e-1)


COMPILE_ROWS = r"""
import json, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.engine.programs import matmul_persistent
from tilemm.ladder.tensorcore import scaled_fp8, scaled_fp8_gluon_kernel as ws
from tilemm.ladder.tensorcore.scaled_fp8_kernel import scaled_steps
from tests.compiled import resource_usage
out = {}
# the default tiles of float32 sums, per-tensor (for comparison) and row-wise; stream-K's hand-over scales too
# (stream-K runs by default on thin tiles only: compiled at those)
for stream_k, rows in ((False, False), (False, True), (True, True)):
    p = {**scaled_fp8.resolve(scaled_fp8.DEFAULTS, False), **(scaled_fp8.THIN_TILES if stream_k else {})}
    sig = dict(a_desc=f"tensordesc<fp8e4nv[{p['block_m']}, 128]>", b_desc=f"tensordesc<fp8e4nv[{p['block_n']}, 128]>",
               c_ptr="*bf16", scale_a_ptr="*fp32", scale_b_ptr="*fp32", ws_ptr="*fp32", flags_ptr="*i32", epoch="i32",
               M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32")
    const = dict(STEPS=scaled_steps, OPTION=False, A_T=False, B_T=True, STREAM_K=stream_k, BLOCK_M=p["block_m"],
                 BLOCK_N=p["block_n"], BLOCK_K=128, GROUP_M=8, PROGRAMS=132, UPCAST=False, FLATTEN=True,
                 ACCUMULATE=False, C_ALIGN=1, STREAM_K_ONLY=False, ROW_SCALES=rows)
    sig.update({n: "constexpr" for n in const})
    k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
    out[f"triton-{stream_k}-{rows}"] = dict(shared=k.metadata.shared, stack=resource_usage(k.asm["cubin"])["stack"],
                                     wgmma="wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in k.asm["ptx"])
la = repr(gl.NVMMASharedLayout.get_default_for([ws.BLOCK_M, ws.BLOCK_K], gl.float8e4nv))
lb = repr(gl.NVMMASharedLayout.get_default_for([ws.BLOCK_N, ws.BLOCK_K], gl.float8e4nv))
sig = dict(a_desc=f"tensordesc<fp8e4nv[{ws.BLOCK_M}, {ws.BLOCK_K}],{la}>",
           b_desc=f"tensordesc<fp8e4nv[{ws.BLOCK_N}, {ws.BLOCK_K}],{lb}>", c_ptr="*bf16", scale_a_ptr="*fp32",
           scale_b_ptr="*fp32", M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32", GROUP_M="constexpr",
           PROGRAMS="constexpr", STAGES="constexpr", WORKER_REGISTERS="constexpr", ROW_SCALES="constexpr")
const = dict(GROUP_M=ws.GROUP_M, PROGRAMS=132, STAGES=ws.STAGES, WORKER_REGISTERS=ws.WORKER_REGISTERS, ROW_SCALES=True)
k = triton.compile(GluonASTSource(fn=ws.fp8_matmul_ws, signature=sig, constexprs=const),
                   target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
out["gluon"] = dict(shared=k.metadata.shared, stack=resource_usage(k.asm["cubin"])["stack"],
                    wgmma=f"wgmma.mma_async.sync.aligned.m64n{ws.BLOCK_N // 2}k32.f32.e4m3.e4m3" in k.asm["ptx"])
print(json.dumps(out))
"""


def test_row_wise_scales_programs_compile_for_sm90_without_spills():
    """The fp8 program's forms that row-wise scales run (the persistent Triton program, whole tiles
    and stream-K, and the warp-specialized Gluon one): fp8 wgmma, within an H100's shared memory,
    no more stack (spills) than the per-tensor Triton program's (ptxas of Triton 3.9 gives its
    256 x 128 tiles a few words), none in the Gluon one (compiled.gluon_stack_allowed: this tier's Triton)."""
    compiled = run_program(COMPILE_ROWS)
    assert set(compiled) == {"triton-False-False", "triton-False-True", "triton-True-True", "gluon"}
    per_tensor = compiled.pop("triton-False-False")
    for name, info in compiled.items():
        allowed = gluon_stack_allowed() if name == "gluon" else per_tensor["stack"]
        assert info["wgmma"] and info["stack"] <= allowed and info["shared"] <= 232448, (name, info, per_tensor)


def probe_module():
    """benchmarks/block_scaled_probe.py, imported as the lead runs it (harness beside it)."""
    from .benchmark_scripts import load
    return load("block_scaled_probe")


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes; on the GPU the probe checks every answer itself")
def test_the_probe_s_triton_variants_match_the_dequantized_product():
    """benchmarks/block_scaled_probe.py: at most 12 variants besides its anchor, each documented;
    those Triton's interpreter runs (the fp8 program's, per-tensor and row-wise, both programs'
    choice) written whole and within the probe's own bound at a ragged size."""
    probe = probe_module()
    assert len(probe.VARIANTS) - 1 <= 12 and all(f"  {label} " in probe.__doc__ for label in probe.VARIANTS)
    m, n, k = 40, 70, 300
    a, b, scales = probe.operands(m, n, k, device="cpu")
    rows = torch.arange(m)
    for label in ("tensor", "row", "row-triton"):
        kind = probe.VARIANTS[label][0]
        c = probe.make_launch(label, a, b, scales, out_dtype=torch.float32)()
        ref, bound = probe.harness.fp8_reference(a, b, *scales[kind], kind, rows)
        assert not torch.isnan(c).any() and torch.all((c.double() - ref).abs() <= bound), label


PROBE_COMPILE = WS_COMPILE + r"""
out = {}
# the probe's variants of the warp-specialized program at 128 x 256: fused, C from registers, the
# second half's promotion fused
for block_n, tma_store, fusion, fma_right in ((256, True, True, False), (256, False, False, False),
                                              (256, True, False, True)):
    k = compile_ws(128, block_n, tma_store, fusion, fma_right)
    out[f"{block_n}-{tma_store}-{fusion}-{fma_right}"] = dict(
        shared=k.metadata.shared, wgmma="wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in k.asm["ptx"],
        fma="fma.rn.f32" in k.asm["ptx"], stack=resource_usage(k.asm["cubin"])["stack"])
print(json.dumps(out))
"""


def test_the_probe_s_warp_specialized_variants_compile_for_sm90():
    """The probe's forms of the block scales' Gluon program that the rung never runs compile for
    sm_90: fused at 128 x 256 (fused multiply-adds, and spills), C from registers, and the second
    half's promotion alone fused (FMA_RIGHT: fused multiply-adds without spills)."""
    compiled = run_program(PROBE_COMPILE)
    assert set(compiled) == {"256-True-True-False", "256-False-False-False", "256-True-False-True"}
    for name, info in compiled.items():
        assert info["wgmma"] and info["shared"] <= 232448, (name, info)
    assert compiled["256-True-True-False"]["fma"] and compiled["256-True-False-True"]["fma"]
    assert compiled["256-True-False-True"]["stack"] == 0 and compiled["256-False-False-False"]["stack"] == 0
