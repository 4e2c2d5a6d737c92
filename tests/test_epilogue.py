"""The fused epilogues: tilemm's Triton program (under Triton's interpreter here) and
tilemm.matmul_epilogue against float64 references, forward and backward; the NumPy path; the
operators under torch.library.opcheck; errors before any work."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tilemm
from tilemm.products import fused
from tilemm.torch import fused_ops  # noqa: F401  (fused_ops registers the operators)
from tilemm.numerics.epilogue_math import ACTIVATIONS, activate_numpy, activate_torch
from tilemm.engine.epilogue_launch import config_for

from .conftest import ON_GPU

DEVICE = "cuda" if ON_GPU else "cpu"     # the program under Triton's interpreter on the host

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-12}


def reference(a, b, bias, bias_over_m, c, residual, activation, alpha, beta):
    """The epilogue in float64 with torch's functions (autograd records it)."""
    z = alpha * (a.double() @ b.double())
    if c is not None:
        z = z + beta * c.double()
    if bias is not None:
        z = z + (bias.double()[:, None] if bias_over_m else bias.double())
    y = activate_torch(z, activation)
    return (y + residual.double() if residual is not None else y), z


def relative(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def operands(m, n, k, dtype, seed=0):
    """A as a slice of a wider matrix and B as a transposed view: strides other than rows'."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k + 3, generator=g, dtype=torch.float64)[:, 1:k + 1].to(dtype)
    b = torch.randn(n, k, generator=g, dtype=torch.float64).to(dtype).T
    bias_n, bias_m = (torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in (n, m))
    c, residual = (torch.randn(m, n, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    return tuple(t.to(DEVICE) for t in (a, b, bias_n, bias_m, c, residual))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_program_s_every_epilogue_against_float64(activation, dtype):
    """Y and AUX of the program at ragged sizes (tiles of 16 over 37 x 29, K = 45), every
    operand of the epilogue given, bias over N; each within a rounding of its dtype."""
    a, b, bias, _, c, residual = operands(37, 29, 45, dtype)
    y, aux = fused.forward(a, b, bias, False, c, residual, activation, 0.5, 2.0, fused.TRITON,
                           config_for(dtype, dict(block_m=16, block_n=16, block_k=16)), True)
    ref_y, ref_z = reference(a, b, bias, False, c, residual, activation, 0.5, 2.0)
    assert y.dtype == dtype and not torch.isnan(y).any()
    assert relative(y, ref_y) <= TOLERANCE[dtype] and relative(aux, ref_z) <= TOLERANCE[dtype]


def test_a_column_bias_and_no_aux():
    """K a multiple of BLOCK_K (16): the tiles load with no mask."""
    a, b, _, bias_m, _, _ = operands(20, 33, 32, torch.float64, seed=1)
    y, aux = fused.forward(a, b, bias_m, True, None, None, "relu", 1.0, 0.0, fused.TRITON,
                           config_for(torch.float64), False)
    assert aux is None
    assert relative(y, reference(a, b, bias_m, True, None, None, "relu", 1.0, 0.0)[0]) <= 1e-12


@pytest.mark.parametrize("m,n,k", [(5, 7, 0), (0, 7, 4), (6, 0, 3)])
def test_empty_dimensions(m, n, k):
    """K = 0 gives the epilogue of zeros (activation(bias + beta * C)); M or N = 0 an empty result."""
    a, b, bias, _, c, _ = operands(m, n, k, torch.float64)
    y = tilemm.matmul_epilogue(a, b, bias=bias, c=c, beta=0.5, activation="silu", kernel="tensorcore")
    assert y.shape == (m, n)
    assert torch.allclose(y, F.silu(0.5 * c + bias))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matmul_epilogue_gradients_against_float64_autograd(activation):
    """Every operand's gradient, the backward reading what the forward saved (Z, or Y for relu)."""
    tensors = operands(9, 13, 11, torch.float64, seed=2)
    a, b, _, bias, c, residual = (t.detach().requires_grad_() for t in tensors)
    y = tilemm.matmul_epilogue(a, b, bias=bias.reshape(-1, 1), c=c, residual=residual, activation=activation,
                               alpha=1.5, beta=-0.5, kernel="tensorcore")
    ref = reference(a, b, bias, True, c, residual, activation, 1.5, -0.5)[0]
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, (a, b, bias, c, residual), grad)
    want = torch.autograd.grad(ref, (a, b, bias, c, residual), grad)
    assert relative(y, ref) <= 1e-12
    for g, w in zip(got, want):
        assert g.shape == w.shape and relative(g, w) <= 1e-12


def test_gradcheck_at_float64():
    a, b = (torch.randn(s, dtype=torch.float64, device=DEVICE, requires_grad=True) for s in ((3, 4), (4, 5)))
    bias = torch.randn(5, dtype=torch.float64, device=DEVICE, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b, bias: tilemm.matmul_epilogue(a, b, bias=bias, activation="gelu", kernel="tensorcore"),
        (a, b, bias), fast_mode=True)


def batched_against_one_by_one(f, inputs, copies: int = 3):
    """The largest difference between autograd's batched gradients of f (is_grads_batched=True,
    as jacobian(vectorize=True) and gradcheck's check_batched_grad ask) and a backward each."""
    grads = torch.randn((copies, *f(*inputs).shape), dtype=inputs[0].dtype, device=inputs[0].device)
    together = torch.autograd.grad(f(*inputs), inputs, grads, is_grads_batched=True)
    alone = [torch.autograd.grad(f(*inputs), inputs, g) for g in grads]
    return max(float((together[j][i] - alone[i][j]).abs().max()) for i in range(copies) for j in range(len(inputs)))


@pytest.mark.parametrize("activation", ["identity", "relu", "silu"])
def test_batched_gradients_as_torch_gives_them(activation):
    """autograd's batched dY has no memory a launch could read: the program's gradients failed
    (NotImplementedError, "Cannot access storage of BatchedTensorImpl"); they are torch's
    products there, the same values as one backward a copy, and gradcheck's batched check holds."""
    a, b, bias, _, c, residual = (t.requires_grad_() for t in operands(5, 3, 4, torch.float64))

    def f(a, b, bias, c, residual):
        return tilemm.matmul_epilogue(a, b, bias=bias, activation=activation, alpha=2.0, beta=0.5, c=c,
                                      residual=residual, kernel="tensorcore")
    assert batched_against_one_by_one(f, (a, b, bias, c, residual)) <= 1e-12
    assert torch.autograd.gradcheck(f, (a, b, bias, c, residual), check_batched_grad=True, fast_mode=True)


def test_bfloat16_gradients_against_float32_autograd():
    tensors = operands(24, 40, 32, torch.bfloat16, seed=3)
    a, b, bias = (t.detach().requires_grad_() for t in tensors[:3])
    y = tilemm.matmul_epilogue(a, b, bias=bias, activation="gelu_tanh", kernel="tensorcore")
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, (a, b, bias), grad)
    a32, b32, bias32 = (t.detach().float().requires_grad_() for t in (a, b, bias))
    ref = F.gelu(a32 @ b32 + bias32, approximate="tanh")
    want = torch.autograd.grad(ref, (a32, b32, bias32), grad.float())
    assert relative(y, ref) <= 1e-2
    assert all(g.dtype == torch.bfloat16 and relative(g, w) <= 2e-2 for g, w in zip(got, want))


def test_the_default_s_route_reads_the_operands_leading_dimensions(monkeypatch):
    """A backward's dW = dY.T @ X over 2052 rows: K = 2052 is no multiple of 8, but dY.T's columns
    are dY's rows, 2048 apart, and X's rows 512 apart: the aligned class of the default's table,
    whose choice there is the library. The route hands the table the operands' leading dimensions
    (it had read row-major operands K = 2052 apart: the unaligned class, tilemm's program)."""
    from tilemm.choose.default import leading_dims
    def preferred(dtype, m, n, k, operands=None, lds=None):
        return "tensorcore" if lds is None or any(ld % 8 for ld in lds) else None
    monkeypatch.setattr(fused.choice, "preferred", preferred)
    fused.route_of.cache_clear()
    try:
        dy, x = torch.empty(2052, 2048), torch.empty(2052, 512)
        lds = leading_dims(dy.T, x, 2052, 512)
        assert lds == (2048, 512)
        assert fused.route_of(None, "cuda", torch.bfloat16, 2048, 512, 2052, False, lds) == fused.LIBRARY
        assert fused.route_of(None, "cuda", torch.bfloat16, 2048, 512, 2052, False, None) == fused.TRITON
        rows, weight = torch.empty(3, 10, 2052), torch.empty(512, 2052)
        for w in (weight, weight.T.contiguous().T):
            assert fused.linear_leading_dims(rows, w) == leading_dims(rows, w.mT, 2052, 512)
    finally:
        fused.route_of.cache_clear()


@pytest.mark.skipif(ON_GPU, reason="the host's route")
def test_the_library_route_is_torch_s_own_operators():
    """kernel None on the host: torch's addmm and activation, recording torch's own graph."""
    a, b, bias, _, c, residual = operands(6, 5, 4, torch.float32, seed=4)
    y = tilemm.matmul_epilogue(a, b, bias=bias, c=c, residual=residual, activation="relu", beta=2.0)
    assert torch.equal(y, F.relu(torch.addmm(c * 2.0 + bias, a, b)) + residual)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_numpy_operands_against_float64(activation):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((7, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    bias, c, r = rng.standard_normal((7, 1)), rng.standard_normal((7, 4)), rng.standard_normal((7, 4))
    y = tilemm.matmul_epilogue(a, b, bias=bias.astype(np.float32), c=c.astype(np.float32),
                               residual=r.astype(np.float32), activation=activation, alpha=2.0, beta=0.25)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    z = 2.0 * a.astype(np.float64) @ b.astype(np.float64) + 0.25 * c.astype(np.float32) + bias.astype(np.float32)
    ref = activate_torch(torch.from_numpy(z), activation).numpy() + r.astype(np.float32)
    assert np.allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert np.allclose(activate_numpy(z, activation), activate_torch(torch.from_numpy(z), activation).numpy(),
                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call,error,words", [
    (lambda a, b: tilemm.matmul_epilogue(a, b, activation="tanh"), ValueError, "activation='tanh'"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, bias=torch.ones(4)), ValueError, "bias has shape (4,)"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, beta=1.0), ValueError, "no c is given"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, c=torch.ones(3, 2)), ValueError, "c has shape (3, 2)"),
    (lambda a, b: tilemm.matmul_epilogue(a, b.double()), TypeError, "one dtype"),
    (lambda a, b: tilemm.matmul_epilogue(a, b.T), ValueError, "core dimension"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, kernel="cpu-tiled"), ValueError, "has no fused epilogue"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, kernel="tensorcore", block_m=24), ValueError, "block_m=24"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, kernel="tensorcore", split_k=2), TypeError, "'split_k'"),
    (lambda a, b: tilemm.matmul_epilogue(a, b, kernel="tensorcore", tma=1), ValueError, "tma=1"),
    (lambda a, b: tilemm.matmul_epilogue(a.numpy(), b.numpy(), kernel="tensorcore"), ValueError, "NumPy operands"),
    (lambda a, b: tilemm.matmul_epilogue(a.numpy(), b), TypeError, "every operand is a NumPy array"),
    (lambda a, b: tilemm.matmul_epilogue(a.int(), b.int()), TypeError, "float tensors"),
])
def test_bad_input_is_refused_before_any_work(call, error, words):
    with pytest.raises(error) as info:
        call(torch.ones(3, 5), torch.ones(5, 6))
    assert words in str(info.value)


# ---------------------------------------------------------------- the persistent TMA program

def tma_operands(m, n, k, dtype, seed=7):
    """A row-major, B a Linear's weight transposed (B^T's rows K-major), rows 16-byte aligned."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g, dtype=torch.float64).to(dtype)
    b = torch.randn(n, k, generator=g, dtype=torch.float64).to(dtype).T
    bias_n, bias_m = (torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in (n, m))
    c, residual = (torch.randn(m, n, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    return tuple(t.to(DEVICE) for t in (a, b, bias_n, bias_m, c, residual))


def program_taken(monkeypatch):
    """A list that gets one entry per launch of the TMA program (its A_T and B_T): per launch made
    or bound (epilogue_tma_launch.arguments)."""
    from tilemm.engine import epilogue_tma_launch
    taken, arguments = [], epilogue_tma_launch.arguments

    def spy(a_rows, a_t, b_rows, b_t, *rest, **kw):
        taken.append((a_t, b_t))
        return arguments(a_rows, a_t, b_rows, b_t, *rest, **kw)
    monkeypatch.setattr(epilogue_tma_launch, "arguments", spy)
    return taken


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ["gelu", "silu", "relu"])
def test_the_tma_program_s_epilogue_against_float64(activation, dtype, monkeypatch):
    """tma=True at ragged M and N (tiles of 16 x 64 over 40 x 70, K = 48 in steps of 16), every
    operand of the epilogue given: Y and AUX within a rounding of the dtype, by the TMA program
    (its tile loop walked: 4 programs, 15 tiles), B read K-major (B_T)."""
    taken = program_taken(monkeypatch)
    a, b, bias, _, c, residual = tma_operands(40, 70, 48, dtype)
    y, aux = fused.forward(a, b, bias, False, c, residual, activation, 0.5, 2.0, fused.TRITON,
                           config_for(dtype, dict(block_m=16, block_n=64, block_k=16, tma=True)), True)
    ref_y, ref_z = reference(a, b, bias, False, c, residual, activation, 0.5, 2.0)
    assert taken == [(False, True)]
    assert relative(y, ref_y) <= TOLERANCE[dtype] and relative(aux, ref_z) <= TOLERANCE[dtype]


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_the_tma_program_reads_either_layout_of_each_operand(layout, monkeypatch):
    """A column-major A (a descriptor of A^T: A_T), a row-major B (B_T False), a bias over M."""
    taken = program_taken(monkeypatch)
    a, b, _, bias_m, _, _ = tma_operands(48, 80, 32, torch.float16, seed=8)
    a = a.T.contiguous().T if layout[0] == "t" else a.contiguous()
    b = b.contiguous() if layout[1] == "n" else b
    y, _ = fused.forward(a, b, bias_m, True, None, None, "gelu_tanh", 1.0, 0.0, fused.TRITON,
                         config_for(torch.float16, dict(block_m=16, block_n=64, block_k=16, tma=True)), False)
    assert taken == [(layout[0] == "t", layout[1] == "t")]
    assert relative(y, reference(a, b, bias_m, True, None, None, "gelu_tanh", 1.0, 0.0)[0]) <= 2e-3


def test_the_tma_program_makes_its_descriptors_inside_a_compiled_graph(monkeypatch):
    """With wrap given (a triton_op's body), the program makes A's and B's descriptors from their
    pointers (MAKE_DESCRIPTORS): the same answer (and two programs an SM: 8 walking 15 tiles)."""
    taken = program_taken(monkeypatch)
    a, b, bias, _, _, residual = tma_operands(40, 70, 48, torch.bfloat16, seed=9)
    config = config_for(torch.bfloat16, dict(block_m=16, block_n=64, block_k=16, tma=True, programs_per_sm=2))
    y, aux = fused.forward(a, b, bias, False, None, residual, "gelu", 1.0, 0.0, fused.TRITON, config, True,
                           wrap=lambda program: program)
    ref_y, ref_z = reference(a, b, bias, False, None, residual, "gelu", 1.0, 0.0)
    assert taken == [(False, True)]
    assert relative(y, ref_y) <= 1e-2 and relative(aux, ref_z) <= 1e-2


def test_narrow_products_take_deeper_k_steps(monkeypatch):
    """Where rung 10 gives a shape 64 x 128 tiles (a narrow product on a GPU of 132 SMs), the TMA
    program takes K steps of DEEP_STEP; other tiles, and a block_k the caller names, keep theirs."""
    from tilemm.engine import availability, epilogue_launch as el
    from tilemm.engine.tensorcore_launch import default_tiles
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    el.tma_tiles.cache_clear()
    try:
        for m, n, k in ((2048, 512, 2048), (800, 1024, 8192), (256, 1536, 2304)):
            assert (default_tiles(m, n, k)["block_m"], default_tiles(m, n, k)["block_n"]) == (64, 128)
            assert el.tma_tiles(m, n, k, ())["block_k"] == el.DEEP_STEP == 128
            assert el.tma_tiles(m, n, k, (("block_k", 64),))["block_k"] == 64
        assert el.tma_tiles(8192, 8192, 4096, ())["block_k"] == default_tiles(8192, 8192, 4096)["block_k"] == 64
    finally:
        el.tma_tiles.cache_clear()


DEEP_STEP_COMPILES = r"""
import inspect, json, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tilemm.engine.epilogue_launch import DEEP_STEP
from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent as program
names = list(inspect.signature(program.fn).parameters)
const = dict(A_T=False, B_T=True, BIAS_OVER_M=False, ACTIVATION=2, UPCAST=False, MAKE_DESCRIPTORS=True, Y_ALIGN=8,
             BLOCK_M=64, BLOCK_N=128, BLOCK_K=DEEP_STEP, GROUP_M=8, PROGRAMS=132, FLATTEN=True, SLIVER_PAST=128,
             SLIVER_M=16, SLIVER_N=16, SLIVER_K=256, sliver_a=None, sliver_b=None, SHORT_M=0)
sig = {n: "i32" for n in names}
sig.update(a_in="*bf16", b_in="*bf16", y_ptr="*bf16", aux_ptr="*bf16", bias_ptr="*bf16", c_ptr="*bf16",
           res_ptr="*bf16", alpha="fp64", beta="fp64")
sig.update({n: "constexpr" for n in const})
k = triton.compile(ASTSource(fn=program, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 128),
                   options=dict(num_warps=4, num_stages=4))
print(json.dumps({"shared": k.metadata.shared}))
"""


def test_deeper_k_steps_fit_hopper_s_shared_memory():
    """The TMA program in 64 x 128 tiles with K steps of DEEP_STEP, 4 stages, every extra operand,
    GELU and a sliver, as a compiled graph launches it, compiled for sm_90: within an SM's 227 KB."""
    from .compiled import run_program
    assert run_program(DEEP_STEP_COMPILES, fp_fusion=True)["shared"] <= 227 * 1024


def test_an_activation_of_many_instructions_over_a_short_k_takes_two_programs_an_sm():
    """Where the default tiles are the big ones, an activation of several instructions (gelu,
    gelu_tanh, silu) up to OVERLAPPED_UP_TO_K takes OVERLAPPED_TILES, two programs an SM (one's
    epilogue beside the other's products); relu, a longer K, small products and named tiles keep
    theirs."""
    from tilemm.engine import epilogue_launch as el
    big = el.tma_tiles(8192, 8192, 1024, ())
    assert big["block_m"] * big["block_n"] == 128 * 256
    assert el.tma_tiles(8192, 8192, 1024, (), True) == {**el.OVERLAPPED_TILES, "group_m": 8}
    assert el.tma_tiles(8192, 8192, el.OVERLAPPED_UP_TO_K + 64, (), True) == big
    assert el.tma_tiles(300, 600, 512, (), True) == el.tma_tiles(300, 600, 512, ())
    assert el.tma_tiles(8192, 8192, 1024, (("block_n", 64),), True)["block_n"] == 64
    assert el.tma_tiles(8192, 8192, 1024, (("block_n", 64),), True)["block_m"] == big["block_m"]
    a, w = torch.empty(8192, 1024, dtype=torch.bfloat16), torch.empty(4096, 1024, dtype=torch.bfloat16)
    y = torch.empty(8192, 4096, dtype=torch.bfloat16)
    for activation, taken in (("gelu", 2), ("gelu_tanh", 2), ("silu", 2), ("relu", 1), (None, 1)):
        options = el.epilogue_arguments(a, w.T, y, None, None, False, None, None, activation, 1.0, 0.0,
                                        config_for(torch.bfloat16, dict(tma=True)))[3]
        assert (options["BLOCK_N"], options["num_stages"]) == ((128, 3) if taken == 2 else (256, 4)), activation


def test_which_program_a_product_takes():
    """The TMA program for 16-bit operands whose rows TMA reads (a large product, or tma=True);
    the pointer program for float32, rows not 16-byte aligned, K = 0, tma=False, small products."""
    from tilemm.engine.epilogue_launch import takes_tma
    a, w = torch.empty(4096, 4096, dtype=torch.bfloat16), torch.empty(4096, 4096, dtype=torch.bfloat16)
    y = torch.empty(4096, 4096, dtype=torch.bfloat16)
    assert takes_tma(a, w.T, y, None, None)[1::2] == (False, True)
    assert takes_tma(a.T, w, y, y, None)[1::2] == (True, False)
    assert takes_tma(a, w.T, y, None, False) is None
    assert takes_tma(a.float(), w.T.float(), y.float(), None, True) is None
    narrow = torch.empty(4096, 4092, dtype=torch.bfloat16)                  # rows of 8184 bytes
    assert takes_tma(narrow, w.T[:4092], y, None, True) is None
    assert takes_tma(a[:, :4092], narrow.T, y[:, :4092], None, True) is None
    assert takes_tma(a[:, 1:4089], w.T[1:4089], y, None, True) is None       # starts 2 bytes in
    assert takes_tma(a[:, 1:4089], w.T[1:4089], y, None, True, traced=True) is None     # an op's body too
    assert takes_tma(a[:, :0], w.T[:0], y, None, True) is None               # K = 0
    assert takes_tma(a[:64], w.T, y[:64], None, None) is None                # skinny: pointers
    assert takes_tma(a[:256, :256], w.T[:256, :256], y[:256, :256], None, None) is None   # 2^24 multiply-adds
    assert takes_tma(a[:64], w.T, y[:64], None, True) is not None
    assert takes_tma(a, w.T, y.T, None, True) is None                        # Y's rows not contiguous


def test_opcheck_matmul_epilogue():
    a, b, bias, _, c, _ = (t.detach().requires_grad_() for t in operands(7, 9, 8, torch.float64, seed=6))
    torch.library.opcheck(torch.ops.tilemm.matmul_epilogue,
                          (a, b, bias, c, None, "silu", 2.0, 0.5, False, True, "tensorcore", "block_m=16"))


def test_opcheck_matmul_epilogue_by_the_tma_program():
    """The TMA program's operands are 16-bit: on the host, a traced call takes the library's route
    (the interpreter runs no fake tensors), whose float16 sums round otherwise than the program's,
    so AOTDispatcher's comparison of the two is left to the GPU's run of this file."""
    a, b, bias, _, c, _ = (t.detach().requires_grad_() for t in tma_operands(32, 64, 16, torch.float16, seed=10))
    checks = None if ON_GPU else ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.tilemm.matmul_epilogue,
                          (a, b, bias, c, None, "gelu", 1.0, 0.5, False, True, "tensorcore",
                           "block_m=16;block_n=64;block_k=16;tma=1"), **({"test_utils": checks} if checks else {}))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_opcheck_epilogue_at_run(dtype):
    """The operator a graph of symbolic sizes launches the program through: its schema, fake
    tensors (with and without the pre-activation) and AOTDispatcher's trace, eager to the bit."""
    a, b, bias, _, c, residual = operands(9, 24, 16, dtype, seed=3)
    for save_aux in (True, False):
        torch.library.opcheck(torch.ops.tilemm.epilogue_at_run,
                              (a, b, bias, c, residual, "gelu", 1.5, 0.5, False, save_aux, "block_m=16"))


INDUCTOR_SIGNATURE = r"""
import inspect, json, re, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent as program
names = list(inspect.signature(program.fn).parameters)
const = dict(aux_ptr=None, bias_ptr=None, c_ptr=None, res_ptr=None, A_T=False, B_T=True, BIAS_OVER_M=False,
             ACTIVATION=4, UPCAST=False, MAKE_DESCRIPTORS=True, Y_ALIGN=8, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64,
             GROUP_M=8, PROGRAMS=132, FLATTEN=True, sliver_a=None, sliver_b=None, SLIVER_M=0, SLIVER_N=16, SLIVER_K=256,
             SLIVER_PAST=128, SHORT_M=0)
sig = {n: "i32" for n in names}
sig.update(a_in="*bf16", b_in="*bf16", y_ptr="*bf16", alpha="fp64", beta="fp64")   # Inductor's: floats as fp64
sig.update({n: "constexpr" for n in const})
k = triton.compile(ASTSource(fn=program, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 128),
                   options=dict(num_warps=8, num_stages=4))
ptx = k.asm["ptx"]
print(json.dumps({"f64_math": len(re.findall(r"\b(?:mul|fma|add|sub|div|ex2)\.[a-z.]*f64\b", ptx)),
                  "f32_ex2": "ex2.approx" in ptx}))
"""


def test_float64_scalars_keep_the_epilogue_in_float32():
    """A compiled graph passes alpha and beta as float64 (wrap_triton's signature): the epilogue
    still runs in float32 (in float64, SiLU's exp made the program 4x slower on an H200)."""
    from .compiled import run_program
    info = run_program(INDUCTOR_SIGNATURE)
    assert info["f64_math"] == 0 and info["f32_ex2"], info


def test_a_refused_parameter_value_is_refused_after_an_equal_accepted_one():
    """tma=True is taken and tma=1 refused, in either order (True and 1 are equal as keys of the
    configurations' cache)."""
    assert config_for(torch.bfloat16, {"tma": True})["tma"] is True
    with pytest.raises(ValueError, match="tma=1"):
        config_for(torch.bfloat16, {"tma": 1})


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_float32_activations_hold_their_accuracy_element_by_element(activation):
    """The float32 activations (on the GPU through the special-function units' 2^x and 1/x, here
    the same formulas with tl.exp2 and a division) against float64 element by element over
    -12..12, where gelu's tail is tiny: each value within 2e-5 of itself (gelu by erfc: no
    cancellation in 1 + erf past z = -5), or for gelu_tanh, whose 1 + tanh cancels as torch's
    does, within its rounding (half an ulp of 1 times |z|)."""
    z = torch.cat([torch.linspace(-12, 12, 4001), torch.tensor([0.0, -1e-30, 1e-30, -5.5, -9.75])])
    a = z.to(DEVICE, torch.float32)[:, None]
    one = torch.ones(1, 1, device=DEVICE, dtype=torch.float32)
    y = tilemm.matmul_epilogue(a, one, activation=activation, kernel="tensorcore")[:, 0].double().cpu()
    zd = z.double()
    if activation == "gelu":
        want = zd * 0.5 * torch.special.erfc(-zd / 2**0.5)
    else:
        want = activate_torch(zd, activation)
    error = (y - want).abs()
    bound = 2e-5 * want.abs() + 1e-37 + (2**-24 * zd.abs() if activation == "gelu_tanh" else 0.0)
    assert bool((error <= bound).all()), float((error / bound).max())
