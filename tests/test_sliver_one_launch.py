"""The sliver (the rows past the last multiple of 128, tile_model.sliver_rows) in the TMA
program's own launch, as a traced call (inside a compiled graph) takes it: the eager call's two
launches' bits, either layout of A and B, 2052 rows; row_parts' rule by the kind of call; a
sliver not past a multiple of 128 refused; the program with a sliver compiled for sm_90 (shared
memory and no spill); on the GPU, a compiled tilemm.linear's one launch."""
import pytest
import torch

from tilemm.engine import epilogue_launch
from tilemm.engine.epilogue_launch import config_for
from tilemm.products import fused

from .test_epilogue import TOLERANCE, reference, relative, tma_operands
from .test_rows_apart import cut, h200, launches_taken, three_rows_apart, traced_if  # noqa: F401 (fixtures)


def both_forms(call) -> list:
    """[call(None): an eager call, the sliver a launch of its own; call(wrap): a traced call, the
    sliver in the TMA program's launch (its descriptors made in the program)]."""
    return [call(traced_if(False)), call(traced_if(True))]


@pytest.mark.parametrize("activation, bias_over_m", [
    ("identity", False), ("relu", True), ("gelu", False), ("gelu_tanh", True), ("silu", True)])
def test_one_launch_gives_the_two_launches_bits(activation, bias_over_m, three_rows_apart):
    """Every epilogue (alpha and beta with C, bias over N or M, each activation, residual, AUX) at
    131 x 70 x 304 (the sliver's K steps: one whole of 256 and a part; 70 columns: five thin tiles
    of 16, the last ragged): the traced call's one launch gives the eager call's two launches'
    bits in Y and AUX, within a rounding of bfloat16 of float64's."""
    a, b, bias_n, bias_m, c, residual = tma_operands(131, 70, 304, torch.bfloat16, seed=11)
    bias = bias_m if bias_over_m else bias_n
    (y2, aux2), (y1, aux1) = both_forms(lambda wrap: fused.forward(
        a, b, bias, bias_over_m, c, residual, activation, 0.5, 2.0, fused.TRITON, config_for(torch.bfloat16), True,
        wrap=wrap))
    assert three_rows_apart == cut(False, 131, 3) + cut(True, 131, 3)
    assert torch.equal(y1, y2) and torch.equal(aux1, aux2)
    ref_y, ref_z = reference(a, b, bias, bias_over_m, c, residual, activation, 0.5, 2.0)
    assert relative(y1, ref_y) <= TOLERANCE[torch.bfloat16] and relative(aux1, ref_z) <= TOLERANCE[torch.bfloat16]
    assert relative(y1[128:], ref_y[128:]) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("form", ["thin", "short"])
@pytest.mark.parametrize("layout", ["nt", "tn", "nn"])
@pytest.mark.parametrize("k", [40, 512])
def test_one_launch_reads_either_layout_of_each_operand(form, layout, k, monkeypatch):
    """A column-major A (the sliver read from A^T's rows: 136 rows, 16-byte aligned, the last 8
    apart), a row-major B (B's rows, not a Linear's weight), K in no whole sliver step or in two,
    the sliver's rows in thin tiles or in short ones: the traced call's one launch gives the eager
    call's two launches' bits (short tiles where K is one K step of both: Triton's interpreter
    sums each K step apart, a GPU's tensor cores each 16 of K in one chain whatever the step)."""
    from tilemm.engine import epilogue_tma_launch
    monkeypatch.setattr(epilogue_tma_launch, "short_tiles_fit", lambda *counts: form == "short")
    monkeypatch.setattr(epilogue_launch, "sliver_rows", lambda m, n, k, saving_us=0.0: 8 if m == 136 else 0)
    monkeypatch.setattr(epilogue_launch, "large_enough", lambda m, n, k: True)
    taken = launches_taken(monkeypatch)
    a, b, bias, _, _, _ = tma_operands(136, 80, k, torch.float16, seed=12)
    a = a.T.contiguous().T if layout[0] == "t" else a
    b = b.contiguous() if layout[1] == "n" else b
    y2, y1 = both_forms(lambda wrap: fused.forward(a, b, bias, False, None, None, "gelu", 1.0, 0.0, fused.TRITON,
                                                   config_for(torch.float16), False, wrap=wrap)[0])
    assert taken == cut(False, 136, 8) + cut(True, 136, 8)
    assert torch.equal(y1, y2) or form == "short" and k > 64 and torch.equal(y1[:128], y2[:128])
    assert relative(y1, reference(a, b, bias, False, None, None, "gelu", 1.0, 0.0)[0]) <= TOLERANCE[torch.float16]
    assert relative(y1[128:], reference(a, b, bias, False, None, None, "gelu", 1.0, 0.0)[0][128:]) <= TOLERANCE[torch.float16]


def test_one_launch_at_2052_rows(monkeypatch):
    """4 sequences of 513 tokens (2052 rows: 16 block rows and 4 past), bias and SiLU, 256 columns
    (the 128 x 256 tiles of an MLP's products) and K = 40: traced, one launch, the eager call's two
    launches' bits, within a rounding of bfloat16 of float64's."""
    monkeypatch.setattr(epilogue_launch, "sliver_rows", lambda m, n, k, saving_us=0.0: 4 if m == 2052 else 0)
    monkeypatch.setattr(epilogue_launch, "large_enough", lambda m, n, k: True)
    taken = launches_taken(monkeypatch)
    a, b, bias, _, _, _ = tma_operands(2052, 256, 40, torch.bfloat16, seed=13)
    y2, y1 = both_forms(lambda wrap: fused.forward(
        a, b, bias, False, None, None, "silu", 1.0, 0.0, fused.TRITON, config_for(torch.bfloat16), False,
        wrap=wrap)[0])
    assert taken == cut(False, 2052, 4) + cut(True, 2052, 4)
    assert torch.equal(y1, y2)
    assert relative(y1, reference(a, b, bias, False, None, None, "silu", 1.0, 0.0)[0]) <= TOLERANCE[torch.bfloat16]


def test_a_traced_call_cuts_the_rows_as_a_replayed_one_in_one_launch(h200):
    """At 2052 x 2048 x 2048 (on 132 SMs) a replayed call cuts 4 rows in two launches, an eager
    one keeps the whole (the GPU time saved is under a second launch's CPU time), and a traced one
    takes the replayed call's 4 rows in the TMA program's launch on the whole tensors: its thin
    tiles the pointer program's (16 x 16, 256 of K a step), its whole tiles those of 2048 rows."""
    a, w = torch.empty(2052, 2048, dtype=torch.bfloat16), torch.empty(2048, 2048, dtype=torch.bfloat16)
    y = torch.empty(2052, 2048, dtype=torch.bfloat16)
    config = config_for(torch.bfloat16)

    def parts(**kw):
        return epilogue_launch.row_parts(a, w.T, y, None, None, False, None, None, config, **kw)
    replayed, eager, (traced,) = parts(), parts(eager=True), parts(traced=True)
    assert [part[0].shape[0] for part in replayed] == [2048, 4] and replayed[1][-1]["tma"] is False
    assert len(eager) == 1 and "sliver" not in eager[0][-1]
    assert traced[0] is a and traced[1] is y and traced[-1]["sliver"] == dict(rows=4, block_m=16, block_n=16,
                                                                              block_k=256)


def test_a_traced_launch_with_a_sliver_passes_each_operand_once(monkeypatch):
    """A compiled graph fixes the layout of each tensor argument of a wrapped program by a copy of
    its own where the tensor's producer is fused into it (Inductor, torch 2.11: a tensor passed
    twice is stored twice): a traced launch with a sliver names A and B once (the program reads
    the sliver's rows through a_in and b_in), a launch with host descriptors names them for it
    (thin tiles) or a descriptor of A's rows (short tiles)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from tilemm.engine import epilogue_tma_launch
    short = []
    monkeypatch.setattr(epilogue_tma_launch, "short_tiles_fit", lambda *counts: bool(short))
    a, w = torch.ones(2052, 256, dtype=torch.bfloat16), torch.ones(512, 256, dtype=torch.bfloat16)
    y = torch.empty(2052, 512, dtype=torch.bfloat16)
    tiles = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3)
    sliver = dict(rows=4, block_m=16, block_n=16, block_k=256)
    _, _, traced, options = epilogue_tma_launch.arguments(a, False, w, True, y, None, None, False, None, None, 0,
                                                          1.0, 0.0, tiles, wrap=lambda program: program,
                                                          sliver=sliver)
    tensors = [arg for arg in traced if isinstance(arg, torch.Tensor)]
    assert len({id(t) for t in tensors}) == len(tensors) == 3 and options["MAKE_DESCRIPTORS"] is True
    assert options["SLIVER_M"] == 16 and traced[-2:] == (None, None)
    _, _, hosted, _ = epilogue_tma_launch.arguments(a, False, w, True, y, None, None, False, None, None, 0, 1.0,
                                                    0.0, tiles, sliver=sliver)
    assert hosted[-2] is a and hosted[-1] is w
    short.append(True)
    _, _, traced, options = epilogue_tma_launch.arguments(a, False, w, True, y, None, None, False, None, None, 0,
                                                          1.0, 0.0, tiles, wrap=lambda program: program,
                                                          sliver=sliver)
    assert (options["SHORT_M"], options["SLIVER_M"]) == (64, 0) and traced[-2:] == (None, None)
    _, _, hosted, _ = epilogue_tma_launch.arguments(a, False, w, True, y, None, None, False, None, None, 0, 1.0,
                                                    0.0, tiles, sliver=sliver)
    assert isinstance(hosted[-2], TensorDescriptor) and hosted[-2].block_shape == [64, 64] and hosted[-1] is None


def test_short_tiles_take_a_sliver_where_the_programs_left_a_tile_short_take_two_each_at_most():
    """2052 x 2048 on 132 SMs: 128 whole tiles of 128 x 256 leave 4 programs a tile short, which
    take the 8 short tiles two each; 2052 x 5632: 352 tiles, 44 short programs, 22 short tiles; none
    where the whole tiles fill every program alike, or where a short program would take three."""
    from tilemm.engine.epilogue_tma_launch import short_tiles_fit
    assert short_tiles_fit(128, 8, 132) and short_tiles_fit(352, 22, 132)
    assert not short_tiles_fit(264, 8, 132) and not short_tiles_fit(129, 8, 132)
    assert short_tiles_fit(130, 4, 132) and not short_tiles_fit(130, 5, 132)


def test_a_sliver_not_past_a_multiple_of_128_is_refused():
    from tilemm.engine import epilogue_tma_launch
    a, w = torch.ones(131, 64, dtype=torch.bfloat16), torch.ones(80, 64, dtype=torch.bfloat16)
    y = torch.empty(131, 80, dtype=torch.bfloat16)
    tiles = dict(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=3)
    for rows, block_m in ((4, 16), (3, 2)):        # 127 rows of tiles; 3 rows in tiles of 2
        with pytest.raises(ValueError, match="sliver"):
            epilogue_tma_launch.arguments(a, False, w, True, y, None, None, False, None, None, 0, 1.0, 0.0, tiles,
                                          sliver=dict(rows=rows, block_m=block_m, block_n=16, block_k=256))


SLIVER_COMPILES = r"""
import inspect, json, re, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tests.compiled import cuobjdump, resource_usage
from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent as program
names = list(inspect.signature(program.fn).parameters)

def compiled(sliver, b_t, host, aligned):
    const = dict(aux_ptr=None, c_ptr=None, res_ptr=None, A_T=False, B_T=b_t, BIAS_OVER_M=False, ACTIVATION=4,
                 UPCAST=False, MAKE_DESCRIPTORS=not host, Y_ALIGN=8, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8,
                 PROGRAMS=132, FLATTEN=True, SLIVER_PAST=128, **{"SHORT_M": 0, **sliver})
    sig = {n: "i32" for n in names}
    b_block = "[256, 64]" if b_t else "[64, 256]"
    sig.update(a_in="tensordesc<bf16[128, 64]>" if host else "*bf16", b_in=f"tensordesc<bf16{b_block}>" if host else "*bf16",
               y_ptr="*bf16", bias_ptr="*bf16", sliver_a="*bf16", sliver_b="*bf16", alpha="fp64", beta="fp64")
    if not sliver.get("SLIVER_M"):
        const.update(sliver_a=None, sliver_b=None, SLIVER_M=0, SLIVER_N=16, SLIVER_K=256)
    sig.update({n: "constexpr" for n in const})
    # what a launch specializes: 16-byte aligned pointers; N, K and the row strides where 16 divides them
    divisible = ["y_ptr", "bias_ptr", "sliver_a", "sliver_b", "N", "stride_ym"] + (["K", "stride_a", "stride_b"] if aligned else [])
    attrs = {(list(sig).index(n),): [["tt.divisibility", 16]] for n in divisible if sig[n] != "constexpr"}
    k = triton.compile(ASTSource(fn=program, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 128), options=dict(num_warps=8, num_stages=4))
    return dict(shared=k.metadata.shared, mma_sync=len(re.findall(r"\bHMMA\.", cuobjdump(k.asm["cubin"], "-sass"))),
                **resource_usage(k.asm["cubin"]))

out = {"off": compiled({}, True, False, True),
       "16x16 graph": compiled(dict(SLIVER_M=16, SLIVER_N=16, SLIVER_K=256), True, False, True),
       "32x64 eager rows": compiled(dict(SLIVER_M=32, SLIVER_N=64, SLIVER_K=256), False, True, False),
       "64x256 short graph": compiled(dict(SHORT_M=64), True, False, True)}
print(json.dumps(out))
"""


def test_the_sliver_s_program_fits_hopper_without_spilling():
    """The TMA program with a sliver compiled for sm_90 (128 x 256 tiles, 8 warps, 4 stages, bias
    and SiLU): in a compiled graph's form (descriptors made in the program), and eagerly with B's
    rows and K not a multiple of 16 (unvectorized offsets past the sliver's no-op hints): within
    an SM's 227 KB and no stack (no spill); without a sliver, no instruction of its thin tiles
    (mma.sync: the tiles' sums are wgmma's); the sliver's rows in 64-row short tiles (a compiled
    graph's form): wgmma's alone, within 227 KB and no spill."""
    from .compiled import run_program
    info = run_program(SLIVER_COMPILES, fp_fusion=True)
    for form in ("off", "64x256 short graph"):
        assert info[form]["mma_sync"] == 0 and info[form]["stack"] == 0, info
    assert info["64x256 short graph"]["shared"] <= 227 * 1024, info
    for form in ("16x16 graph", "32x64 eager rows"):
        assert info[form]["mma_sync"] > 0, info
        assert info[form]["shared"] <= 227 * 1024 and info[form]["stack"] == 0, info


@pytest.mark.gpu
def test_on_the_gpu_a_compiled_call_takes_the_sliver_in_one_launch(monkeypatch):
    """2052 x 2048 x 5632 (4 x 513 tokens through an MLP's down projection), bias and SiLU: a
    replayed call's launches are two, a traced call's one (the TMA program with the sliver in short
    tiles, descriptors made in the program), the two launches' bits; a torch.compile'd
    tilemm.linear launches matmul_epilogue_persistent alone, once, with the sliver; all within a
    rounding of bfloat16 of float32's."""
    import torch._inductor.config
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    import tilemm
    torch.manual_seed(0)
    x = torch.randn(2052, 5632, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 5632, device="cuda", dtype=torch.bfloat16) / 5632 ** 0.5
    b = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    want = F.silu(x.float() @ w.float().T + b.float())

    def launched(wrap):
        y = torch.empty(2052, 2048, device="cuda", dtype=torch.bfloat16)
        parts = epilogue_launch.parts_arguments(x, w.T, y, None, b, False, None, None, "silu", 1.0, 0.0,
                                                config_for(torch.bfloat16), wrap)
        for program, grid, args, options in parts:
            program[grid](*args, **options)
        return len(parts), y, options
    (two, y2, _), (one, y1, options) = launched(traced_if(False)), launched(traced_if(True))
    assert (two, one) == (2, 1)
    # (128 whole tiles of 128 x 256 leave 4 of 132 programs a tile short: the 4 rows in short tiles,
    # whose wgmma sums give the thin tiles' bits)
    assert options["SHORT_M"] == 64 and options["SLIVER_M"] == 0
    assert torch.equal(y1, y2)
    assert relative(y1, want) <= TOLERANCE[torch.bfloat16] and relative(y1[2048:], want[2048:]) <= TOLERANCE[torch.bfloat16]
    taken = launches_taken(monkeypatch)
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)
    compiled = torch.compile(lambda x, w, b: tilemm.linear(x, w, b, "silu", kernel="tensorcore"))
    with torch.no_grad():
        compiled(x, w, b)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            y = compiled(x, w, b)
            torch.cuda.synchronize()
    assert ("tma", 2052, 4) in taken and not any(program == "pointers" for program, *_ in taken), taken
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    epilogues = [name for name in names if "matmul_epilogue" in name]
    assert len(epilogues) == 1 and "persistent" in epilogues[0], names
    assert relative(y, want) <= TOLERANCE[torch.bfloat16] and relative(y[2048:], want[2048:]) <= TOLERANCE[torch.bfloat16]
