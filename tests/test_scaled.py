"""tilemm.scaled_matmul (rung `tensorcore-fp8`): float8 products with per-tensor scales, against
a float64 reference of the same float8 values, in Triton's interpreter (set by conftest) and,
with the gpu marker, on the device; its argument checks; and its program compiled for sm_90."""

import pytest
import torch

import tilemm
from tilemm.engine import availability

from .compiled import gluon_stack_allowed, run_program
from .conftest import ON_GPU

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
SMALL = dict(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
WHERE = "cuda" if ON_GPU else "cpu"
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


def operand(rows, cols, dtype, transposed, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((cols, rows) if transposed else (rows, cols), generator=g) * 3).to(dtype).to(WHERE)
    return x.T if transposed else x


def check(c, a, b, scale_a, scale_b, sum_error):
    """|c - ref| within one rounding to c's dtype plus sum_error times sum |a_i b_i| (scaled)."""
    ref = (a.double().cpu() * scale_a) @ (b.double().cpu() * scale_b)
    size = (a.double().cpu().abs() * abs(scale_a)) @ (b.double().cpu().abs() * abs(scale_b))
    tiny = torch.finfo(c.dtype).tiny
    bound = UNIT_ROUNDOFF[c.dtype] * ref.abs() + sum_error * size + tiny
    err = (c.double().cpu() - ref).abs()
    assert torch.all(err <= bound), f"worst error / bound {(err / bound).max().item():.3g}"


def float32_sums(k):
    return 2 * k * 2.0**-24


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes; the gpu test below covers the device")
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 9), (40, 7, 65), (70, 40, 100)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtypes", [(0, 0), (1, 1), (0, 1)])
def test_interpreter_matches_float64(m, n, k, layout, dtypes):
    a = operand(m, k, FP8[dtypes[0]], layout[0] == "t", 1)
    b = operand(k, n, FP8[dtypes[1]], layout[1] == "t", 2)
    out = torch.full((m, n), float("nan"), dtype=torch.float32)      # poisoned: every entry must be written
    c = tilemm.scaled_matmul(a, b, 0.25, torch.tensor(3.0), out_dtype="float32", out=out, **SMALL)
    assert c is out
    check(c, a, b, 0.25, 3.0, float32_sums(k))


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("out_dtype", ["bfloat16", torch.float16])
def test_interpreter_out_dtypes_round_once(out_dtype):
    a, b = operand(33, 64, FP8[0], False, 3), operand(64, 20, FP8[0], True, 4)
    c = tilemm.scaled_matmul(a, b, 2.0, 0.5, out_dtype=out_dtype, **SMALL)
    assert c.dtype == getattr(torch, str(out_dtype).removeprefix("torch.")) and c.shape == (33, 20)
    check(c, a, b, 2.0, 0.5, float32_sums(64))


def test_empty_shapes():
    a, b = operand(5, 40, FP8[0], False, 5), operand(40, 6, FP8[0], False, 6)
    zero_k = tilemm.scaled_matmul(a[:, :0], b[:0], out_dtype="float32", **SMALL)
    assert zero_k.shape == (5, 6) and torch.equal(zero_k.cpu(), torch.zeros(5, 6))
    assert tilemm.scaled_matmul(a[:0], b, **SMALL).shape == (0, 6)


@pytest.mark.parametrize("args,kwargs,error,match", [
    ((torch.ones(2, 2).numpy(), torch.ones(2, 2).numpy()), {}, TypeError, "NumPy has no float8"),
    ((torch.ones(2, 2), torch.ones(2, 2)), {}, TypeError, "dtype float32"),
    ((torch.ones(2, 2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), {}, ValueError, "2-D"),
    ((torch.ones(2, 3).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), {}, ValueError, "do not line up"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0]), torch.ones(2)), {}, ValueError, "per-tensor"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(out_dtype="int8"), TypeError, "out_dtype"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(block_q=3), TypeError, "unknown parameter"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(block_m=48), ValueError, "power of two"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(out=torch.ones(3, 3)), ValueError, "out must"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(block_m=256, block_n=256, num_stages=5),
     tilemm.KernelUnavailable, "shared memory"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(warp_specialized=1), ValueError,
     "warp_specialized"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(warp_specialized=True, fast_accum=True),
     tilemm.KernelUnavailable, "float32 sums"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(cluster=None), ValueError, "cluster"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(cluster=True, fast_accum=True),
     tilemm.KernelUnavailable, "cluster=True is the float32 sums'"),
    ((torch.ones(2, 2).to(FP8[0]), torch.ones(2, 2).to(FP8[0])), dict(cluster=True, warp_specialized=False),
     tilemm.KernelUnavailable, "warp_specialized=False refuses it"),
])
def test_bad_arguments_are_refused_before_any_kernel(args, kwargs, error, match):
    args = tuple(x.to(WHERE) if isinstance(x, torch.Tensor) and x.ndim >= 1 else x for x in args)
    kwargs = {k: v.to(WHERE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        tilemm.scaled_matmul(*args, **kwargs)


@pytest.mark.skipif(ON_GPU, reason="Triton's interpreter runs no Gluon")
def test_warp_specialized_needs_hopper_and_gluon():
    a, b = operand(4, 8, FP8[0], False, 1), operand(8, 4, FP8[0], False, 2)
    with pytest.raises(tilemm.KernelUnavailable, match="Hopper"):
        tilemm.scaled_matmul(a, b, warp_specialized=True)


@pytest.mark.skipif(ON_GPU, reason="Triton's interpreter runs no Gluon")
def test_cluster_needs_hopper_and_gluon():
    a, b = operand(4, 8, FP8[0], False, 1), operand(8, 4, FP8[0], False, 2)
    with pytest.raises(tilemm.KernelUnavailable, match="cluster=True needs a Hopper GPU"):
        tilemm.scaled_matmul(a, b, cluster=True)


@pytest.mark.parametrize("multicast", [False, True])
def test_the_cluster_program_is_asked_for_and_refused_where_gluon_lacks_multicast(monkeypatch, multicast):
    """On a Hopper GPU the float32 sums' Gluon program runs on one CTA a tile by default, whatever
    Gluon has; cluster=True asks for it in clusters, and is refused where availability's
    capability check says this Triton's Gluon can't run them."""
    from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, limits, resolve
    monkeypatch.setattr(availability, "hopper_gluon", lambda: True)
    monkeypatch.setattr(availability, "gluon_multicast", lambda: multicast)
    picked = resolve(DEFAULTS, False, 8192, 8192, 8192)
    assert picked["warp_specialized"] is True and picked["cluster"] is False
    asked = resolve({**DEFAULTS, "cluster": True}, False, 64, 64, 64)
    assert asked["warp_specialized"] is True and asked["cluster"] is True
    refusal = limits(256, 256, 128, 4, False, False, True, True)
    if multicast:
        assert refusal is None
    else:
        assert "cluster=True needs a Triton whose Gluon routes mbarrier arrivals" in refusal


def test_gluon_cluster_api_is_read_from_gluon(monkeypatch):
    """Gluon without arrivals routed across CTAs (Triton 3.7's mbarrier.arrive has no from_cta)
    has no cluster program, whatever else it has."""
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier

    def arrive(mbarrier, *, count=1, pred=True, _semantic=None):
        pass

    availability.gluon_cluster_api.cache_clear()
    try:
        monkeypatch.setattr(mbarrier, "arrive", arrive)
        assert availability.gluon_cluster_api() is False
    finally:
        availability.gluon_cluster_api.cache_clear()


def test_default_takes_the_warp_specialized_program_only_for_float32_sums_default_tiles_and_deep_k():
    from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, resolve
    hopper = availability.hopper_gluon()
    assert resolve(DEFAULTS, False, k=4096)["warp_specialized"] == hopper
    assert resolve(DEFAULTS, False, k=4095)["warp_specialized"] is False
    assert resolve(DEFAULTS, True, k=8192)["warp_specialized"] is False
    assert resolve({**DEFAULTS, "num_stages": 3}, False, k=8192)["warp_specialized"] is False
    assert resolve({**DEFAULTS, "warp_specialized": False}, False, k=8192)["warp_specialized"] is False
    assert resolve({**DEFAULTS, "warp_specialized": True}, False, k=1)["warp_specialized"] is True


@pytest.mark.parametrize("fast_accum", [False, True])
def test_products_of_a_few_rows_take_64_row_tiles_and_stream_k_where_deep(fast_accum):
    from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, THIN_M, THIN_TILES, resolve
    sms = availability.multiprocessors()
    n_half = 128 * (sms // 2)                          # half the SMs' tiles at M <= 64

    def tiles(m, n, k, config=DEFAULTS):
        p = resolve(config, fast_accum, m, n, k)
        return p["block_m"], p["block_n"], p["stream_k"]
    thin = (THIN_TILES["block_m"], THIN_TILES["block_n"])
    assert tiles(64, n_half, 12288) == (*thin, True)
    assert tiles(64, n_half, 12287) == (*thin, False)              # not deep: no stream-K
    assert tiles(64, 128 * (sms - 1), 12288) == (*thin, False)     # more than half the SMs: no stream-K
    assert tiles(128, 128 * ((sms - 1) // 2), 4096) == (*thin, False)
    assert tiles(THIN_M + 1, 128, 12288)[0] != THIN_TILES["block_m"]       # too many rows
    assert tiles(64, 128 * sms, 12288)[0] != THIN_TILES["block_m"]          # a round of tiles or more
    assert tiles(8, 4096, 14336, {**DEFAULTS, "num_stages": 3})[0] in (128, 256)
    assert resolve({**DEFAULTS, "warp_specialized": True}, fast_accum, 8, 4096, 14336)["warp_specialized"]


def test_products_whose_tiles_fill_half_the_sms_or_fewer_take_128_x_128_tiles():
    from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, MID_TILES, THIN_M, resolve
    sms = availability.multiprocessors()
    few = resolve(DEFAULTS, False, THIN_M + 1, 128, 1024)        # two 256 x 128 tiles
    assert {name: few[name] for name in MID_TILES} == MID_TILES and few["warp_specialized"] is False
    many = resolve(DEFAULTS, False, THIN_M + 1, 128 * sms, 1024)  # 2 * sms of them
    assert (many["block_m"], many["block_n"]) == (256, 128)
    assert resolve({**DEFAULTS, "group_m": 4}, False, THIN_M + 1, 128, 1024)["block_m"] == 256


def test_vmap_takes_one_product_an_element_and_refuses_what_it_cannot_batch():
    """torch.func.vmap over the operands or a per-tensor scale: one product an element, as vmap
    of torch._scaled_mm (its batched tensors have no memory: the launch failed inside, "Cannot
    access data pointer of Tensor that doesn't have storage"); row-wise and block scales, out=
    and stream= there are a TypeError that says so."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 5, 32, generator=g).to(torch.float8_e4m3fn).to(WHERE)
    b = torch.randn(32, 24, generator=g).to(torch.float8_e4m3fn).to(WHERE)
    scales = torch.tensor([0.5, 2.0], device=WHERE)
    c = torch.func.vmap(lambda a, s: tilemm.scaled_matmul(a, b, s, 1.0, out_dtype="float32", **SMALL))(a, scales)
    want = (a.double() @ b.double()) * scales.double()[:, None, None]
    assert c.shape == (2, 5, 24) and torch.allclose(c.double(), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="per-tensor scales and no out= or stream="):
        torch.func.vmap(lambda a: tilemm.scaled_matmul(a, b, torch.ones(5, 1, device=WHERE),
                                                       torch.ones(1, 24, device=WHERE)))(a)


def test_number_scales_are_made_once_apart_for_a_and_b():
    """A number's scale tensor is kept (no copy to the GPU each call), one for scale_a and another
    for scale_b even at one value: a replay needs each input in memory of its own."""
    from tilemm.products import scaled_common
    device = torch.device(WHERE)
    sa, sb = scaled_common.scale_tensor(1.0, "scale_a", device, torch), scaled_common.scale_tensor(1.0, "scale_b",
                                                                                                   device, torch)
    assert sa is scaled_common.scale_tensor(1.0, "scale_a", device, torch) and sa.item() == sb.item() == 1.0
    assert sa.untyped_storage().data_ptr() != sb.untyped_storage().data_ptr()
    given = torch.tensor(3.0, device=WHERE)                 # a tensor is the caller's: read where it is
    assert scaled_common.scale_tensor(given, "scale_a", device, torch).data_ptr() == given.data_ptr()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_gpu_repeated_calls_replay_on_new_operands(layout, fast_accum):
    """The first call's launches (B copied K-major where it is row-major) replayed on new operands
    and new scales, on the current stream and on a side stream: each call its own product."""
    from tilemm.products import scaled
    k = 700
    a0, b0 = operand(1030, k, FP8[0], False, 20), operand(k, 520, FP8[0], layout[1] == "t", 21)
    tilemm.scaled_matmul(a0, b0, 0.5, 2.0, out_dtype="float32", fast_accum=fast_accum)
    key = scaled.replay_key(a0, b0, "float32", fast_accum, {})
    assert scaled._REPLAYS.get(key) is not None, "this call's launches should be replayable"
    adds = -(-k // 32) if fast_accum else 4
    for seed, (sa, sb) in enumerate([(0.5, 2.0), (0.25, torch.tensor(3.0, device="cuda")), (1.0, 1.0)]):
        a, b = operand(1030, k, FP8[0], False, 30 + seed), operand(k, 520, FP8[0], layout[1] == "t", 40 + seed)
        c = tilemm.scaled_matmul(a, b, sa, sb, out_dtype="float32", fast_accum=fast_accum)
        check(c, a, b, float(sa), float(sb), float32_sums(k) + adds * 2.0**-13)
    a, b = operand(1030, k, FP8[0], False, 50), operand(k, 520, FP8[0], layout[1] == "t", 51)
    x = torch.empty_like(a)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):           # a producer that is late: the replay must queue behind it
        torch.cuda._sleep(30_000_000)
        x.copy_(a)
        c = tilemm.scaled_matmul(x, b, 0.5, 2.0, out_dtype="float32", fast_accum=fast_accum)
    torch.cuda.synchronize()
    check(c, a, b, 0.5, 2.0, float32_sums(k) + adds * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("passed", [False, True])
def test_gpu_waits_for_a_producer_on_the_caller_s_stream(passed):
    """A side stream sleeps, then writes A: scaled_matmul queued there (current, or stream=) reads the new A."""
    a = operand(1030, 520, FP8[0], False, 7)
    b = operand(520, 1100, FP8[0], True, 8)
    x = operand(1030, 520, FP8[0], False, 9)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(30_000_000)
        x.copy_(a)
        c = None if passed else tilemm.scaled_matmul(x, b, 0.5, 2.0, out_dtype="float32")
    if passed:
        c = tilemm.scaled_matmul(x, b, 0.5, 2.0, out_dtype="float32", stream=side)
    torch.cuda.synchronize()
    check(c, a, b, 0.5, 2.0, float32_sums(520) + 4 * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("m,k,params", [(256, 1024, {}), (1024, 1024, {}), (2048, 1024, {}), (2048, 4096, {}),
                                        (2048, 1024, dict(warp_specialized=True))])
def test_gpu_float32_sums_start_afresh_where_scaled_mm_s_do(m, k, params):
    """One product of 1 among products of 2^-16: those the tensor cores add into an accumulator that
    holds the 1 are lost, those of a fresh one kept. torch._scaled_mm's float32 sums take a fresh
    accumulator every 128 terms of K (its k32 instruction holding the 1 and the rest of that 128
    lose theirs: 127 terms at position 0, 63 at 64 and at 200, measured on an H200); each of the
    rung's programs (thin tiles, MID_TILES, the Triton program, the warp-specialized one) must lose
    the same ones."""
    one = torch.tensor(1.0, device="cuda")
    for p in (0, 64, 200, 512):
        x = torch.full((m, k), 2.0**-8, device="cuda")
        x[:, p] = 1.0
        x8 = x.to(FP8[0])
        want = torch._scaled_mm(x8, x8.T, one, one, out_dtype=torch.float32)
        lost = (1 + (k - 1) * 2.0**-16 - want.double()) * 2**16
        assert bool((lost == (127 if p in (0, 512) else 63)).all()), "_scaled_mm's own sums changed"
        c = tilemm.scaled_matmul(x8, x8.T, one, one, out_dtype="float32", **params)
        assert torch.equal(c, want), f"big term at {p}: {c.flatten()[:2].tolist()} against {want.flatten()[:2].tolist()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtypes", [(1, 1), (0, 1), (1, 0)])
def test_gpu_e5m2_subnormals_count(dtypes):
    """e5m2 subnormals (2^-15, 2^-16) times 1: the sums exact in float32. Triton's interpreter
    flushes them in tl.dot (docs/tensor_cores.md), so only the GPU can tell."""
    small = torch.tensor([2.0**-15, -2.0**-16, 2.0**-15, 2.0**-16]).repeat(64, 16)      # (64, 64)
    a = (small if FP8[dtypes[0]] == torch.float8_e5m2 else torch.ones(64, 64)).to(FP8[dtypes[0]]).cuda()
    b = (small.T if FP8[dtypes[1]] == torch.float8_e5m2 else torch.ones(64, 64)).to(FP8[dtypes[1]]).cuda()
    if dtypes == (1, 1):
        b = torch.ones(64, 64).to(FP8[1]).cuda()
    c = tilemm.scaled_matmul(a, b.T.contiguous().T, 1.0, 1.0, out_dtype="float32")
    want = a.double().cpu() @ b.double().cpu()
    assert bool(want.abs().min() > 0) and torch.equal(c.double().cpu(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1000, 1000, 1000), (517, 1030, 333), (2048, 2048, 4096)])
@pytest.mark.parametrize("layout", ["nt", "nn", "tt"])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_gpu_matches_float64(m, n, k, layout, fast_accum):
    a = operand(m, k, FP8[0], layout[0] == "t", 7)
    b = operand(k, n, FP8[0], layout[1] == "t", 8)
    out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32", fast_accum=fast_accum, out=out)
    # Hopper adds each 32-deep fp8 product into an accumulator of ~13 bits: allow 2^-13 of the sum's
    # size per such add, 4 adds a 128-deep K step then float32 (fast_accum: k / 32 adds in all).
    adds = -(-k // 32) if fast_accum else 4
    check(c, a, b, 0.5, 2.0, float32_sums(k) + adds * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (130, 260, 129), (517, 1030, 333), (1030, 2049, 1000)])
@pytest.mark.parametrize("dtypes", [(0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_gpu_warp_specialized_program_matches_float64(m, n, k, dtypes, out_dtype):
    """The Gluon program (the default on Hopper from K = 4096) on one CTA a tile and, where
    Triton's Gluon can, in clusters of two, and the Triton one, each asked for,
    on ragged tiles, both fp8 types and mixed, C in two dtypes poisoned first (A and B copied into
    aligned rows where K is odd); then a repeated call, replayed, on new operands."""
    if not availability.hopper_gluon():
        pytest.skip("the warp-specialized program runs on Hopper")
    programs = [dict(warp_specialized=True), dict(warp_specialized=False)]
    if availability.gluon_multicast():
        programs.append(dict(cluster=True))          # in clusters of two CTAs
    for program in programs:
        for seed in (17, 19):
            a = operand(m, k, FP8[dtypes[0]], False, seed)
            b = operand(k, n, FP8[dtypes[1]], True, seed + 1)
            out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
            c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype=out_dtype, out=out, **program)
            check(c, a, b, 0.5, 2.0, float32_sums(k) + 4 * 2.0**-13)
            check(tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype=out_dtype, **program), a, b, 0.5, 2.0,
                  float32_sums(k) + 4 * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, 1000, 12300), (8, 4095, 12288), (64, 4096, 14336), (33, 77, 40001)])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_gpu_thin_deep_products_by_stream_k_match_float64(m, n, k, fast_accum):
    """The default for thin, deep products (64-row tiles, K steps shared out among the SMs), then
    a repeated call, replayed, on new operands."""
    from tilemm.ladder.tensorcore.scaled_fp8 import thin_tiles
    assert thin_tiles(m, n, k)["stream_k"]
    adds = -(-k // 32) if fast_accum else 4
    for seed in (3, 5):
        a, b = operand(m, k, FP8[0], False, seed), operand(k, n, FP8[0], True, seed + 1)
        c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float32", fast_accum=fast_accum)
        check(c, a, b, 0.5, 2.0, float32_sums(k) + adds * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, 8191, 8192), (100, 5000, 4099), (128, 8192, 8192)])
def test_gpu_products_of_a_few_rows_in_64_row_tiles_match_float64(m, n, k):
    from tilemm.ladder.tensorcore.scaled_fp8 import thin_tiles
    assert thin_tiles(m, n, k) == {"block_m": 64, "block_n": 128, "num_warps": 4, "stream_k": False}
    a, b = operand(m, k, FP8[1], False, 9), operand(k, n, FP8[0], True, 10)
    c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="bfloat16")
    check(c, a, b, 0.5, 2.0, float32_sums(k) + 4 * 2.0**-13)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(300, 1000, 5000), (1000, 2000, 333)])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_gpu_products_of_few_tiles_in_128_x_128_tiles_match_float64(m, n, k, fast_accum):
    from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, MID_TILES, resolve
    assert resolve(DEFAULTS, fast_accum, m, n, k)["block_m"] == MID_TILES["block_m"]
    a, b = operand(m, k, FP8[0], False, 11), operand(k, n, FP8[1], True, 12)
    c = tilemm.scaled_matmul(a, b, 0.5, 2.0, out_dtype="float16", fast_accum=fast_accum)
    check(c, a, b, 0.5, 2.0, float32_sums(k) + (-(-k // 32) if fast_accum else 4) * 2.0**-13)


@pytest.mark.gpu
def test_gpu_nan_propagates():
    """(Triton's interpreter reads the e4m3 NaN, 0x7F, as a number: checked on the GPU only.)"""
    a, b = operand(300, 400, FP8[0], False, 5), operand(400, 260, FP8[0], True, 6)
    a[2, 7] = float("nan")
    c = tilemm.scaled_matmul(a, b, out_dtype="float32")
    rows = torch.isnan(c).any(dim=1).cpu()
    assert torch.isnan(c[2]).all() and rows.sum() == 1


COMPILE = r"""
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.ladder.tensorcore.scaled_fp8 import DEFAULTS, resolve
from tilemm.engine.programs import matmul_persistent
from tilemm.ladder.tensorcore.scaled_fp8_kernel import scaled_steps
from tilemm.engine.availability import H100_SHARED_OPTIN
out = {}
for ty in ("fp8e4nv", "fp8e5"):
    for fast in (False, True):
        p = resolve(DEFAULTS, fast)
        sig = dict(a_desc=f"tensordesc<{ty}[{p['block_m']}, {p['block_k']}]>",
                   b_desc=f"tensordesc<{ty}[{p['block_n']}, {p['block_k']}]>", c_ptr="*bf16", scale_a_ptr="*fp32",
                   scale_b_ptr="*fp32", ws_ptr="*fp32", flags_ptr="*i32", epoch="i32", M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32",
                   STEPS="constexpr", OPTION="constexpr", A_T="constexpr", B_T="constexpr",
                   STREAM_K="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                   PROGRAMS="constexpr", UPCAST="constexpr", FLATTEN="constexpr",
                   ACCUMULATE="constexpr", C_ALIGN="constexpr", STREAM_K_ONLY="constexpr", ROW_SCALES="constexpr")
        const = dict(STEPS=scaled_steps, OPTION=fast, A_T=False, B_T=True, STREAM_K=p["stream_k"], BLOCK_M=p["block_m"], BLOCK_N=p["block_n"],
                     BLOCK_K=p["block_k"], GROUP_M=p["group_m"], PROGRAMS=132, UPCAST=False, FLATTEN=True,
                     ACCUMULATE=False, C_ALIGN=1, STREAM_K_ONLY=False, ROW_SCALES=False)
        k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
        ptx = k.asm["ptx"]
        out[f"{ty}-{fast}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
                                   wgmma=any(f"wgmma.mma_async.sync.aligned.m64n{p['block_n']}k32.f32.{t}" in ptx
                                             for t in ("e4m3.e4m3", "e5m2.e5m2")))
# the warp-specialized Gluon program (Hopper, float32 sums): wgmma of the halves' width, the loading
# warp's registers handed to the multiplying warpgroups (setmaxnreg), and its spills (cuobjdump's stack: compiled.gluon_stack_allowed)
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.ladder.tensorcore import scaled_fp8_gluon_kernel as ws
gl_types = {"fp8e4nv": gl.float8e4nv, "fp8e5": gl.float8e5}
from tests.compiled import resource_usage
for ta, tb, cty in (("fp8e4nv", "fp8e4nv", "*bf16"), ("fp8e5", "fp8e5", "*fp32"), ("fp8e4nv", "fp8e5", "*fp16")):
    la = repr(gl.NVMMASharedLayout.get_default_for([ws.BLOCK_M, ws.BLOCK_K], gl_types[ta]))
    lb = repr(gl.NVMMASharedLayout.get_default_for([ws.BLOCK_N, ws.BLOCK_K], gl_types[tb]))
    sig = dict(a_desc=f"tensordesc<{ta}[{ws.BLOCK_M}, {ws.BLOCK_K}],{la}>", b_desc=f"tensordesc<{tb}[{ws.BLOCK_N}, {ws.BLOCK_K}],{lb}>",
               c_ptr=cty, scale_a_ptr="*fp32", scale_b_ptr="*fp32", M="i32", N="i32", K="i32", stride_cm="i32",
               stride_cn="i32", GROUP_M="constexpr", PROGRAMS="constexpr", STAGES="constexpr", WORKER_REGISTERS="constexpr",
               ROW_SCALES="constexpr")
    const = dict(GROUP_M=ws.GROUP_M, PROGRAMS=132, STAGES=ws.STAGES, WORKER_REGISTERS=ws.WORKER_REGISTERS, ROW_SCALES=False)
    k = triton.compile(GluonASTSource(fn=ws.fp8_matmul_ws, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=4))
    ptx = k.asm["ptx"]
    pair = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}
    out[f"ws-{ta}-{tb}-{cty[1:]}"] = dict(
        shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
        wgmma=f"wgmma.mma_async.sync.aligned.m64n{ws.BLOCK_N // 2}k32.f32.{pair[ta]}.{pair[tb]}" in ptx
        and "setmaxnreg.inc" in ptx, stack=resource_usage(k.asm["cubin"])["stack"])
# the same program in clusters of two CTAs, where this Triton's Gluon can: B loaded by the lead for
# both (multicast), arrivals on the pair's barriers routed to the lead, wgmma on each CTA's 64 rows
from tilemm.engine.availability import gluon_cluster_api
if gluon_cluster_api():
    from tilemm.ladder.tensorcore import scaled_fp8_cluster_kernel as ck
    la = repr(gl.NVMMASharedLayout.get_default_for([ck.LOAD_ROWS, ck.BLOCK_K], gl.float8e4nv, cga_layout=ck.SPLIT_ROWS))
    lb = repr(gl.NVMMASharedLayout.get_default_for([ck.BLOCK_N, ck.BLOCK_K], gl.float8e4nv, cga_layout=ck.WHOLE))
    sig.pop("ROW_SCALES")                               # (per-tensor scales only)
    sig = {**sig, "a_desc": f"tensordesc<fp8e4nv[{ck.LOAD_ROWS}, {ck.BLOCK_K}],{la}>",
           "b_desc": f"tensordesc<fp8e4nv[{ck.BLOCK_N}, {ck.BLOCK_K}],{lb}>", "c_ptr": "*bf16"}
    const = dict(GROUP_M=ck.GROUP_M, PROGRAMS=66, STAGES=ck.STAGES, WORKER_REGISTERS=ck.WORKER_REGISTERS)
    k = triton.compile(GluonASTSource(fn=ck.fp8_matmul_cluster, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_ctas=ck.CTAS))
    ptx = k.asm["ptx"]
    out["cluster-fp8e4nv-bf16"] = dict(
        shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
        wgmma=f"wgmma.mma_async.sync.aligned.m64n{ck.BLOCK_N // 2}k32.f32.e4m3.e4m3" in ptx
        and ".multicast::cluster" in ptx and "mbarrier.arrive.shared::cluster" in ptx and ".reqnctapercluster 2" in ptx,
        stack=resource_usage(k.asm["cubin"])["stack"])
print(json.dumps(out))
"""


def test_default_config_compiles_for_sm90():
    compiled = run_program(COMPILE)
    assert len(compiled) == 7 + availability.gluon_cluster_api()
    for name, info in compiled.items():
        assert info["cubin"] > 0 and info["wgmma"], (name, info)
        assert info["shared"] <= info["limit"], (name, info)
        assert info.get("stack", 0) <= gluon_stack_allowed(), (name, info)      # (the Gluon programs')
