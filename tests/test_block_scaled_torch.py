"""tilemm.scaled_matmul with block scales on torch's own block-scaled _scaled_mm
(tilemm.products.block_scaled_torch): which calls take it, the scales' layout torch gets (checked
against ScaledBlas.cpp's rules, both versions of the 128 x 128 one), bad input refused before any
work, ``library`` forcing either way. On the CPU torch's product is a stand-in (this torch takes no
block scales there) and rung 16's launch a recorder; with the gpu marker, the real route against
the dequantized float64 product, beside rung 16's own answer, on aligned and awkward shapes."""
import contextlib

import pytest
import torch

import tilemm
from tilemm.ladder.tensorcore import r16_block_scaled, r16_block_scaled_kernel, scaled_fp8
from tilemm.products import block_scaled, block_scaled_torch as route

from .conftest import ON_GPU
from .test_block_scaled import check, dequantized, operand, scales

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def blocks(x: int) -> int:
    return -(-x // 128)


def sized(scale, dim: int, size: int, stride: int) -> bool:
    """ScaledBlas.cpp's check_size_stride: the size, and the stride where the size is past one."""
    return scale.shape[dim] == size and (size <= 1 or scale.stride(dim) == stride)


def torch_takes(a, b, scale_a, scale_b) -> bool:
    """Whether ScaledBlas.cpp's checks take these as DeepGEMM's scales: is_blockwise_1x128_scaling
    of (a, scale_a), is_blockwise_128x128_scaling of (b.t(), scale_b.t()) in both its versions
    (rows ceil(K/128) apart, and that rounded up to a multiple of 4), a row-major, b as (N, K).T,
    K and N multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    kb, nb, padded = blocks(k), blocks(n), -(-blocks(k) // 4) * 4
    t = scale_b.t()
    return (scale_a.dtype == scale_b.dtype == torch.float32 and scale_a.dim() == scale_b.dim() == 2
            and sized(scale_a, 0, m, 1) and sized(scale_a, 1, kb, m)
            and sized(t, 0, nb, kb) and sized(t, 0, nb, padded) and sized(t, 1, kb, 1)
            and a.stride() == (k, 1) and b.stride() == (1, k) and k % 16 == 0 and n % 16 == 0)


class StandIn:
    """torch._scaled_mm as the route calls it: its checks of DeepGEMM's scales, the float64
    product of the dequantized operands rounded to bfloat16, every call's layout recorded."""
    def __init__(self):
        self.calls = []
        self.inside = False            # set by a test's stand-in for the call's stream

    def __call__(self, a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False,
                 out=None):
        assert torch_takes(a, b, scale_a, scale_b), (scale_a.stride(), scale_b.stride())
        assert out_dtype == torch.bfloat16 and not use_fast_accum and bias is None
        self.calls.append(dict(scale_a=(tuple(scale_a.shape), scale_a.stride()),
                               scale_b_t=(tuple(scale_b.t().shape), scale_b.t().stride()),
                               out=out, on_stream=self.inside))
        c = (dequantized(a, scale_a, 1, 128) @ dequantized(b, scale_b, 128, 128)).to(torch.bfloat16).to(a.device)
        if out is None:
            return c
        out.copy_(c)
        return out


@pytest.fixture
def offered(monkeypatch):
    """torch's route offered on this device (the stand-in in torch._scaled_mm); rung 16's launches
    recorded and not run."""
    stand_in = StandIn()
    monkeypatch.setattr(route, "device_refusal", lambda device: None)
    monkeypatch.setattr(torch, "_scaled_mm", stand_in)
    own = []

    def launched(a, b, c, *_, **__):
        own.append(tuple(c.shape))
    monkeypatch.setattr(r16_block_scaled, "launch", launched)
    stand_in.own = own
    return stand_in


def problem(m, n, k, dtypes=(E4M3, E4M3), seed=1):
    a, b = operand(m, k, dtypes[0], False, seed), operand(k, n, dtypes[1], True, seed + 1)
    return a, b, scales((m, blocks(k)), seed + 2), scales((blocks(k), blocks(n)), seed + 3)


@pytest.mark.skipif(ON_GPU, reason="the stand-in of torch's product; the gpu tests below run torch's own")
@pytest.mark.parametrize("m,n,k,change,path", [
    (8, 144, 512, {}, "torch"),                           # N past a 128-block, not a multiple of 128
    (12, 48, 1024, dict(out_dtype="bfloat16"), "torch"),
    (8, 144, 512, dict(library=False), "own"),
    (8, 144, 512, dict(fast_accum=True), "own"),          # cuBLASLt's block scaling has no fast accumulation
    (8, 144, 512, dict(out_dtype="float32"), "own"),
    (8, 144, 512, dict(out_dtype=torch.float16), "own"),
    (8, 144, 512, dict(block_m=64), "own"),               # a tile parameter: rung 16's
    (8, 144, 512, dict(warp_specialized=False), "own"),
    (8, 144, 640, {}, "own"),                             # ceil(K/128) = 5: torch versions differ there
    (8, 144, 400, {}, "own"),                             # a partial 128-block of K
    (6, 144, 512, {}, "own"),                             # M not a multiple of 4
    (8, 136, 512, {}, "own"),                             # N not a multiple of 16
    (8, 144, 512, dict(dtypes=(E4M3, E5M2)), "own"),
    (8, 144, 512, dict(a_transposed=True), "own"),        # a column-major: torch reads row-major
    (8, 144, 512, dict(b_row_major=True), "own"),
    (0, 144, 512, {}, "none"),                            # an empty product: neither
])
def test_which_path_each_call_takes(offered, m, n, k, change, path):
    change = dict(change)
    a, b, scale_a, scale_b = problem(m, n, k, change.pop("dtypes", (E4M3, E4M3)))
    if change.pop("a_transposed", False):
        a = a.T.contiguous().T
    if change.pop("b_row_major", False):
        b = b.contiguous()
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, **change)
    assert c.shape == (m, n)
    ran = "torch" if offered.calls else "own" if offered.own else "none"
    assert ran == path, (offered.calls, offered.own)
    if path == "torch":
        assert len(offered.calls) == 1 and c.dtype == torch.bfloat16
        check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.skipif(ON_GPU, reason="the stand-in of torch's product")
@pytest.mark.parametrize("m_major_a", [False, True])
def test_the_scales_torch_gets(offered, m_major_a):
    """scale_a (M, ceil(K/128)) with strides (1, M); scale_b (ceil(K/128), ceil(N/128)) whose
    transpose is row-major, rows round_up(ceil(K/128), 4) apart; the values the caller's, and
    DeepGEMM's M-major A scales passed as they are."""
    m, n, k = 8, 272, 1536                     # 12 blocks of K, 3 of N (the last one 16 wide)
    a, b, scale_a, scale_b = problem(m, n, k)
    if m_major_a:
        scale_a = scale_a.T.contiguous().T
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b)
    call, = offered.calls
    assert call["scale_a"] == ((m, 12), (1, m))
    assert call["scale_b_t"] == ((3, 12), (12, 1))
    check(c, a, b, scale_a, scale_b, block=True)
    laid_a, laid_b = route.torch_scales(scale_a, scale_b, torch)
    assert torch.equal(laid_a, scale_a) and torch.equal(laid_b, scale_b)
    assert (laid_a is scale_a) is m_major_a                                 # no copy where it is laid out
    assert route.torch_scales(laid_a, laid_b, torch)[1] is laid_b


def test_the_padded_layout_of_b_s_scales():
    """Where ceil(K/128) is no multiple of 4 (a call the route leaves to rung 16) the layout is
    still the padded one: rows round_up(kb, 4) apart, the padding zero."""
    scale_b = scales((5, 3), 9)
    laid = route.torch_scales(scales((4, 5), 8), scale_b, torch)[1]
    assert laid.shape == (5, 3) and laid.t().stride() == (8, 1) and torch.equal(laid, scale_b)
    assert torch.all(laid.t().as_strided((3, 8), (8, 1))[:, 5:] == 0)


@pytest.mark.skipif(ON_GPU, reason="the stand-in of torch's product")
@pytest.mark.parametrize("dense", [True, False])
def test_out_is_written(offered, dense):
    m, n, k = 8, 144, 512
    a, b, scale_a, scale_b = problem(m, n, k)
    wide = torch.full((m, n + 16 * (not dense)), float("nan"), dtype=torch.bfloat16)
    out = wide[:, :n]
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out=out)
    assert c is out and (offered.calls[0]["out"] is out) is dense          # torch's out=, or a copy into it
    check(out, a, b, scale_a, scale_b, block=True)


@pytest.mark.skipif(ON_GPU, reason="the stand-in of torch's product")
def test_the_caller_s_stream_is_current_for_torch_s_product(offered, monkeypatch):
    streams_seen = []

    @contextlib.contextmanager
    def on_stream(queue, device):
        streams_seen.append((queue, device))
        offered.inside = True
        try:
            yield
        finally:
            offered.inside = False
    monkeypatch.setattr(route.scaled_out, "on_stream", on_stream)
    a, b, scale_a, scale_b = problem(8, 144, 512)
    tilemm.scaled_matmul(a, b, scale_a, scale_b, stream=12345)
    assert streams_seen == [(12345, "cpu")] and offered.calls[0]["on_stream"]
    tilemm.scaled_matmul(a, b, scale_a, scale_b)                           # torch's current stream, as it is
    assert len(streams_seen) == 1 and not offered.calls[1]["on_stream"]


ALIGNED = problem(8, 144, 512, seed=40)
BAD = [
    (ALIGNED[:3] + (scales((4, 1), 1),), {}, ValueError, "shapes"),
    (ALIGNED[:3] + (ALIGNED[3].double(),), {}, ValueError, "float32"),
    (ALIGNED, dict(out=torch.empty(8, 140, dtype=torch.bfloat16)), ValueError, "out must"),
    (ALIGNED, dict(out=torch.empty(8, 144)), ValueError, "out must"),
    (ALIGNED, dict(stream="the side one"), TypeError, "stream="),
    (ALIGNED, dict(library="yes"), ValueError, "library='yes'"),
    (ALIGNED, dict(library=1), ValueError, "library=1"),
    (ALIGNED, dict(out_dtype="int8"), TypeError, "out_dtype"),
    (ALIGNED, dict(block_q=3), TypeError, "unknown parameter"),
    (ALIGNED, dict(block_q=3, library=True), TypeError, "unknown parameter"),
    (ALIGNED, dict(block_m=64, library=True), ValueError, "library=True .* tile parameters"),
    (ALIGNED, dict(fast_accum=True, library=True), ValueError, "library=True .* fast accumulation"),
    (ALIGNED, dict(out_dtype="float32", library=True), ValueError, "library=True .* bfloat16"),
    (problem(8, 144, 640), dict(library=True), ValueError, "library=True .* K = 640"),
    (problem(8, 144, 512, (E5M2, E4M3)), dict(library=True), ValueError, "library=True .* float8_e4m3fn"),
    ((*ALIGNED[:2], scales((8, 1), 1), scales((1, 144), 2)), dict(library=True), ValueError, "row-wise scales run"),
    ((*ALIGNED[:2], 2.0, 0.5), dict(library=True), ValueError, "block scales"),
    ((*ALIGNED[:2], 2.0, 0.5), dict(library="no"), ValueError, "library='no'"),
]


@pytest.mark.skipif(ON_GPU, reason="the stand-in of torch's product")
@pytest.mark.parametrize("args,kwargs,error,match", BAD)
def test_bad_input_is_refused_before_any_work(offered, monkeypatch, args, kwargs, error, match):
    def launched(*_, **__):
        raise AssertionError("launched")
    monkeypatch.setattr(r16_block_scaled_kernel, "launch", launched)
    monkeypatch.setattr(r16_block_scaled, "launch", launched)
    monkeypatch.setattr(scaled_fp8, "launch", launched)
    with pytest.raises(error, match=match):
        tilemm.scaled_matmul(*args, **kwargs)
    assert not offered.calls


@pytest.mark.skipif(ON_GPU, reason="the interpreter's refusal")
def test_library_true_is_refused_where_the_route_cannot_run():
    """On the CPU (Triton's interpreter) torch's block-scaled product can't run: library=True says
    so (KernelUnavailable, before any work); None runs rung 16's program."""
    a, b, scale_a, scale_b = problem(8, 144, 512)
    with pytest.raises(tilemm.KernelUnavailable, match="library=True .* TRITON_INTERPRET=1"):
        tilemm.scaled_matmul(a, b, scale_a, scale_b, library=True)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, out_dtype="float32", block_m=16, block_n=32, block_k=32,
                             num_warps=4, num_stages=2)
    check(c, a, b, scale_a, scale_b, block=True)


def test_library_false_runs_rung_16_s_program_where_torch_s_is_offered(monkeypatch):
    """The route offered (stand-in), library=False: rung 16's program, its answer."""
    stand_in = StandIn()
    monkeypatch.setattr(route, "device_refusal", lambda device: None)
    monkeypatch.setattr(torch, "_scaled_mm", stand_in)
    a, b, scale_a, scale_b = problem(8, 48, 512, seed=60)
    params = {} if ON_GPU else dict(block_m=16, block_n=32, block_k=32, num_warps=4, num_stages=2)
    launches = []
    launch = r16_block_scaled.launch
    monkeypatch.setattr(r16_block_scaled, "launch", lambda *args, **kw: launches.append(1) or launch(*args, **kw))
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, library=False, **params)
    assert launches and not stand_in.calls
    check(c, a, b, scale_a, scale_b, block=True)


def test_the_platforms_torch_s_route_runs_on():
    assert route.platform_refusal("2.11.0+cu130", "13.0", (9, 0)) is None
    assert route.platform_refusal("2.9.1", "12.9", (9, 0)) is None
    assert "older than 2.9" in route.platform_refusal("2.8.0+cu129", "12.9", (9, 0))
    assert "CUDA 12.8" in route.platform_refusal("2.11.0", "12.8", (9, 0))
    assert "without CUDA" in route.platform_refusal("2.11.0+rocm7.0", None, (9, 4))
    assert "Hopper" in route.platform_refusal("2.11.0", "13.0", (10, 0))         # Blackwell: its own scaling kinds
    assert "Hopper" in route.platform_refusal("2.11.0", "13.0", (8, 9))
    assert route.version("2.10.0a0+git1234abc") == (2, 10) and route.version("") == (0, 0)


def test_the_device_s_answer_comes_from_versions_and_capability(monkeypatch):
    """No trial call: the versions and the capability decide (once a device: cached)."""
    from tilemm.system import compat
    monkeypatch.setattr(compat, "triton_interpreter", lambda: False)
    assert "on cpu" in route.device_refusal(torch.device("cpu"))
    monkeypatch.setattr(torch.version, "cuda", "12.9")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu129")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    decide = route.refusal_of_device.__wrapped__        # (uncached: the answers above leave no trace)
    assert decide("cuda", 0) is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (10, 0))
    assert "Hopper" in decide("cuda", 0)


def test_the_benchmark_s_variants():
    """benchmarks/block_scaled_vs_torch.py: torch's block-scaled _scaled_mm beside row-wise, with
    the scales laid out as torch takes them; tilemm's default and its own program (library=False)."""
    from .benchmark_scripts import load
    bench = load("block_scaled_vs_torch")
    a, b, scale_a, scale_b = problem(8, 272, 1536)
    variants = bench.anchors(a, b, dict(block=(scale_a, scale_b), row=None, tensor=None))
    assert {"scaled_mm-row", "scaled_mm-block", "tilemm-block", "tilemm-block-own"} <= set(variants)
    assert all(variants[label][0] == "block" for label in ("scaled_mm-block", "tilemm-block", "tilemm-block-own"))
    laid_a, laid_b = bench.torch_block_scales(scale_a, scale_b)
    assert torch_takes(a, b, laid_a, laid_b) and torch.equal(laid_a, scale_a) and torch.equal(laid_b, scale_b)
    assert "scaled_mm-block" in bench.RATIO_ANCHORS and "scaled_mm-row" in bench.RATIO_ANCHORS


# ---------------------------------------------------------------- on the GPU


def counted(monkeypatch):
    """Counts of torch._scaled_mm's calls and rung 16's launches, each still running (no replay
    of an earlier test's call left to skip them)."""
    block_scaled.release_replays()
    seen = {"torch": 0, "own": 0}
    scaled_mm, launch = torch._scaled_mm, r16_block_scaled.launch

    def torch_product(*args, **kwargs):
        seen["torch"] += 1
        return scaled_mm(*args, **kwargs)

    def own_launch(*args, **kwargs):
        seen["own"] += 1
        return launch(*args, **kwargs)
    monkeypatch.setattr(torch, "_scaled_mm", torch_product)
    monkeypatch.setattr(r16_block_scaled, "launch", own_launch)
    return seen


def needs_the_route():
    reason = route.device_refusal(torch.device("cuda"))
    if reason:
        pytest.skip(f"torch's block-scaled _scaled_mm is not offered here: {reason}")


def sampled(c, a, scale_a, rows=64):
    """The first rows of a large product (the float64 reference of those alone)."""
    return (c[:rows], a[:rows], scale_a[:rows]) if a.shape[0] * a.shape[1] > 2**24 else (c, a, scale_a)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(256, 768, 512), (4096, 2112, 7168), (128, 7168, 2048),
                                   (260, 1040, 1536), (1000, 4096, 1024)])     # M past 128s, N past 128-blocks
def test_gpu_the_route_matches_the_dequantized_product_and_rung_16(monkeypatch, m, n, k):
    needs_the_route()
    seen = counted(monkeypatch)
    a, b, scale_a, scale_b = problem(m, n, k, seed=70)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b)
    assert seen == {"torch": 1, "own": 0} and c.dtype == torch.bfloat16
    own = tilemm.scaled_matmul(a, b, scale_a, scale_b, library=False)
    assert seen == {"torch": 1, "own": 1}
    c_rows, a_rows, sa_rows = sampled(c, a, scale_a)
    check(c_rows, a_rows, b, sa_rows, scale_b, block=True)
    # both within the bound of the float64 product: within two bounds of each other (bfloat16's rounding)
    assert torch.allclose(c.float(), own.float(), rtol=2 * 2.0**-8, atol=1e-2 * own.float().abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,kwargs", [(257, 1030, 1000, {}), (256, 768, 640, {}), (256, 776, 512, {}),
                                          (256, 768, 512, dict(out_dtype="float32")),
                                          (256, 768, 512, dict(fast_accum=True)),
                                          (256, 768, 512, dict(warp_specialized=False))])
def test_gpu_calls_the_route_leaves_run_rung_16(monkeypatch, m, n, k, kwargs):
    seen = counted(monkeypatch)
    a, b, scale_a, scale_b = problem(m, n, k, seed=80)
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, **kwargs)
    assert seen == {"torch": 0, "own": 1}
    if not kwargs.get("fast_accum"):
        check(c, a, b, scale_a, scale_b, block=True)


@pytest.mark.gpu
def test_gpu_out_stream_and_repeated_calls_on_the_route(monkeypatch):
    """out= (dense: torch writes it; a view of a wider tensor: copied into), a side stream the
    caller passes, and a repeated call (its key straight to torch's product) on new operands."""
    needs_the_route()
    seen = counted(monkeypatch)
    m, n, k = 512, 1040, 2048
    a, b, scale_a, scale_b = problem(m, n, k, seed=90)
    for width in (n, n + 48):
        out = torch.full((m, width), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
        assert tilemm.scaled_matmul(a, b, scale_a, scale_b, out=out) is out
        check(out, a, b, scale_a, scale_b, block=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    c = tilemm.scaled_matmul(a, b, scale_a, scale_b, stream=side)
    side.synchronize()
    check(c, a, b, scale_a, scale_b, block=True)
    for seed in (91, 95):
        a, b, scale_a, scale_b = problem(m, n, k, seed=seed)
        c = tilemm.scaled_matmul(a, b, scale_a, scale_b, library=True)
        check(c, a, b, scale_a, scale_b, block=True)
    key = block_scaled.replay_key(a, b, scale_a, scale_b, "bfloat16", False, {}, True)
    assert block_scaled._REPLAYS[key] is route.repeated and seen == {"torch": 5, "own": 0}
