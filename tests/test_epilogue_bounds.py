"""The fused-epilogue programs stay inside their operands: the persistent TMA program (its
descriptors made on the host, or in the program as a compiled graph's launch makes them) and the
pointer program in the thin tiles of a product of few rows, each launched as epilogue_launch
launches it. Every operand a view inside a larger buffer (tests/framed.py): NaN around the ones
read (A, B, bias, C, residual: a read past them reaches the answer), a sentinel around Y and AUX
(a write past them is seen); Y and AUX within a rounding of float64's. (Rows of A past M and
columns of B past N only reach sums that are never stored: a read there shows in no answer.)"""
import pytest
import torch

from tilemm.engine.epilogue_launch import config_for, parts_arguments

from .framed import MARGIN, framed, untouched_around, sentinel
from .test_epilogue import TOLERANCE, reference, relative

NAN = float("nan")
TMA_TILES = dict(block_m=32, block_n=64, block_k=16, group_m=2, num_warps=4, num_stages=2, programs_per_sm=1)


def launched(m, n, k, activation, bias_over_m, a_layout, b_layout, dtype, params, wrap=None):
    """Every epilogue operand given (C with alpha 0.5 and beta 2, bias, residual, AUX), A's
    columns contiguous where a_layout is "t" and B a Linear's weight (B^T's rows) where b_layout
    is "t", Y and AUX with an odd row stride: each launch of parts_arguments launched. Returns
    (Y, AUX, their float64 references, Y and AUX's buffers untouched around them, the launches)."""
    g = torch.Generator().manual_seed(m * 7 + n * 3 + k)
    a = framed((k, m), NAN, dtype, g)[0].T if a_layout == "t" else framed((m, k), NAN, dtype, g)[0]
    b = framed((n, k), NAN, dtype, g)[0].T if b_layout == "t" else framed((k, n), NAN, dtype, g)[0]
    bias = framed((m if bias_over_m else n,), NAN, dtype, g)[0]
    c = framed((m, n), NAN, dtype, g, pitch=n + 2 * MARGIN + 8)[0]
    residual = framed((m, n), NAN, dtype, g, pitch=n + 2 * MARGIN + 3)[0]
    y, y_buffer = framed((m, n), sentinel(dtype), dtype, pitch=(n + MARGIN) | 1)
    aux, aux_buffer = framed((m, n), sentinel(dtype), dtype, pitch=(n + 2 * MARGIN) | 1)
    launches = parts_arguments(a, b, y, aux, bias, bias_over_m, c, residual, activation, 0.5, 2.0,
                               config_for(dtype, params), wrap)
    for program, grid, args, options in launches:
        program[grid](*args, **options)
    want_y, want_z = reference(a, b, bias, bias_over_m, c, residual, activation, 0.5, 2.0)
    return y, aux, want_y, want_z, untouched_around(y, y_buffer), untouched_around(aux, aux_buffer), launches


def assert_inside_and_right(m, n, k, activation, bias_over_m, a_layout, b_layout, dtype, params, wrap=None) -> list:
    y, aux, want_y, want_z, y_kept, aux_kept, launches = launched(m, n, k, activation, bias_over_m, a_layout,
                                                                  b_layout, dtype, params, wrap)
    assert y_kept, "a store past Y"
    assert aux_kept, "a store past AUX"
    assert not y.isnan().any() and not aux.isnan().any(), "a read past an operand (NaN in the answer)"
    assert relative(y, want_y) <= TOLERANCE[dtype] and relative(aux, want_z) <= TOLERANCE[dtype]
    return launches


# (M, N, K, activation, bias over M, A's layout ("t": A's columns contiguous), B's ("t": B^T's rows), dtype)
TMA_CASES = [(1, 1, 1, "silu", False, "n", "t", torch.bfloat16),
             (37, 70, 24, "gelu", True, "t", "n", torch.float16),
             (70, 130, 40, "relu", False, "n", "n", torch.bfloat16),
             (33, 5, 17, "gelu_tanh", True, "t", "t", torch.float16)]


@pytest.mark.parametrize("case", TMA_CASES, ids=lambda case: "x".join(map(str, case[:3])))
@pytest.mark.parametrize("in_program", [False, True], ids=["host descriptors", "descriptors in the program"])
def test_the_tma_program_stays_inside(case, in_program):
    """tma=True in 32 x 64 x 16 tiles, 4 programs walking them (past the tiles of 1 x 1 x 1, fewer
    than those of 70 x 130); with wrap given (a compiled graph's launch) the program makes its
    descriptors from A's and B's pointers, shapes and row strides."""
    launches = assert_inside_and_right(*case, params=dict(TMA_TILES, tma=True),
                                       wrap=(lambda program: program) if in_program else None)
    (program, _, _, options), = launches
    assert program.__name__ == "matmul_epilogue_persistent" and options["MAKE_DESCRIPTORS"] is in_program
    assert options["Y_ALIGN"] == 1          # Y's odd row stride: stored an element at a time


# products of 64 rows or fewer, no tile named: the pointer program in thin tiles (16, 32 or 64 rows,
# 16, 32 or 64 columns; K steps of 512 in 8 parts in tiles of 512 elements or fewer, else of 256 in
# one: K = 300 a part step alone, or one step and a part, K = 256 one step unmasked)
THIN_CASES = [(1, 1, 1, "silu", True, "n", "t", torch.bfloat16),
              (16, 50, 700, "gelu", False, "n", "t", torch.bfloat16),
              (5, 33, 512, "identity", True, "t", "n", torch.float16),
              (20, 70, 24, "gelu", False, "t", "n", torch.float16),
              (45, 40, 300, "relu", True, "t", "t", torch.bfloat16),
              (64, 130, 256, "gelu_tanh", False, "n", "n", torch.float16)]


@pytest.mark.parametrize("case", THIN_CASES, ids=lambda case: "x".join(map(str, case[:3])))
def test_the_pointer_program_in_thin_tiles_stays_inside(case):
    (program, _, _, options), = assert_inside_and_right(*case, params=None)
    assert program.__name__ == "matmul_epilogue_kernel"
    parts = options["BLOCK_M"] * options["BLOCK_N"] <= 512
    assert (options["BLOCK_K"], options["SPLIT"]) == ((512, 8) if parts else (256, 0))
    assert options["EVEN_K"] is (case[2] % options["BLOCK_K"] == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("in_program", [False, True], ids=["host descriptors", "descriptors in the program"])
def test_on_the_gpu_the_tma_program_stays_inside_at_its_own_tiles(in_program):
    """On the GPU, the TMA program in the tiles it takes for the shape (rung 10's default_tiles: 128 x
    128 x 64 at this size), 4 rows past a multiple of 128, N and K no multiple of a tile."""
    launches = assert_inside_and_right(1028, 1000, 520, "silu", False, "n", "t", torch.bfloat16,
                                       params=dict(tma=True), wrap=(lambda program: program) if in_program else None)
    (program, _, _, options), = launches
    assert program.__name__ == "matmul_epilogue_persistent" and options["MAKE_DESCRIPTORS"] is in_program


THIN_PARTS_COMPILE = r"""
import inspect, json, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tests.compiled import resource_usage
from tilemm.engine.epilogue_kernel import matmul_epilogue_kernel as program
from tilemm.engine.epilogue_launch import THIN_PARTS, THIN_PARTS_UP_TO
names = list(inspect.signature(program.fn).parameters)

def compiled(block_m, block_n):
    # bias and SiLU, B a Linear's weight, as a decoding model's product takes them
    const = dict(aux_ptr=None, c_ptr=None, res_ptr=None, BIAS_OVER_M=False, ACTIVATION=4, WIDE=0, UPCAST=False,
                 EVEN_K=True, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=THIN_PARTS["block_k"], GROUP_M=1,
                 SPLIT=THIN_PARTS["split"], stride_ak=1, stride_bk=1, stride_yn=1)
    sig = {n: "i32" for n in names}
    sig.update(a_ptr="*bf16", b_ptr="*bf16", y_ptr="*bf16", bias_ptr="*bf16", alpha="fp32", beta="fp32")
    sig.update({n: "constexpr" for n in const})
    divisible = ["a_ptr", "b_ptr", "y_ptr", "bias_ptr", "N", "K", "stride_am", "stride_bn", "stride_ym"]
    attrs = {(list(sig).index(n),): [["tt.divisibility", 16]] for n in divisible}
    k = triton.compile(ASTSource(fn=program, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 128),
                       options=dict(num_warps=THIN_PARTS["num_warps"], num_stages=THIN_PARTS["num_stages"]))
    return dict(shared=k.metadata.shared, **resource_usage(k.asm["cubin"]))

print(json.dumps({f"{m}x{n}": compiled(m, n) for m, n in ((16, 16), (16, 32), (32, 16)) if m * n <= THIN_PARTS_UP_TO}))
"""


def test_thin_tiles_in_parts_fit_hopper_without_spilling():
    """The pointer program's thin tiles that sum each K step in parts (THIN_PARTS: 16 x 16, 16 x 32,
    32 x 16), compiled for sm_90 with bias and SiLU: within an SM's 227 KB and no stack (a spill
    made wider tiles in parts several times slower on the GPU)."""
    from .compiled import run_program
    info = run_program(THIN_PARTS_COMPILE, fp_fusion=True)
    assert set(info) == {"16x16", "16x32", "32x16"}, info
    for form in info.values():
        assert form["shared"] <= 227 * 1024 and form["stack"] == 0, info
