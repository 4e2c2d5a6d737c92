"""tilemm.grouped_matmul (rung `tensorcore-grouped`): every layout of torch._grouped_mm and the
masked one against float64 products of the same groups, in Triton's interpreter (set by
conftest) at toy sizes with skewed groups (empty, one row, one past a tile); NumPy's host loop;
gradients against float64 autograd; bad input refused before any work; the program compiled for
sm_90; and, with the gpu marker, MoE-sized problems against torch on the device."""
import numpy as np
import pytest
import torch

import tilemm
from tilemm.products.grouped_host import slices
from tilemm.products.grouped_checks import layout
from tilemm.ladder.tensorcore import r15_grouped_kernel

from .compiled import run_program
from .conftest import ON_GPU

WHERE = "cuda" if ON_GPU else "cpu"
SMALL = {} if ON_GPU else dict(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2)
OFFS = [0, 1, 1, 18, 19]           # groups of 0, 1, 0, 17 (one past a 16-row tile) and 1 rows
ROUNDING = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}


def operand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8).to(WHERE)
    return torch.randn(shape, generator=g).to(dtype).to(WHERE)


def reference(a, b, cut, counted=False):
    """The groups' products in float64 (int64), by plain slicing (tilemm.products.grouped_host.slices)."""
    lay = layout(a, b, None if counted else cut, cut if counted else None, None)
    wide = torch.int64 if a.dtype == torch.int8 else torch.float64
    ref = torch.zeros(lay.shape, dtype=wide)
    values = cut.tolist() if cut is not None else None
    for rows, a_g, b_g, at in slices(a.cpu().to(wide), b.cpu().to(wide), values, lay):
        ref[at] = a_g[rows] @ b_g
    return ref


def check(c, a, b, cut=None, counted=False):
    """c against the float64 products: int8 exact; floats within one rounding to c's dtype plus
    float32 sums' error, 2K u times the sum of |a_i b_i| (the products of |a| and |b|)."""
    ref = reference(a, b, cut, counted)
    if a.dtype == torch.int8:
        assert c.dtype == torch.int32 and torch.equal(c.cpu().long(), ref), "int8 sums must be exact"
        return
    size = reference(a.abs(), b.abs(), cut, counted)
    err = (c.cpu().double() - ref).abs()
    bound = ROUNDING[c.dtype] * ref.abs() + 2 * max(a.shape[-1], b.shape[-2]) * 2.0**-24 * size + 1e-30
    assert not torch.isnan(c).any() and torch.all(err <= bound), f"worst error / bound {(err / bound).max():.3g}"


LAYOUTS = {    # name: (a's shape, b's shape, cut) with the skewed offsets over the dimension they cut
    "2d-3d": ((19, 24), (5, 24, 20), OFFS),
    "3d-3d": ((5, 3, 24), (5, 24, 20), None),
    "2d-2d": ((7, 19), (19, 20), OFFS),
    "3d-2d": ((5, 7, 24), (24, 19), OFFS),
}


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
def test_layouts_match_float64(name, dtype):
    a_shape, b_shape, cut = LAYOUTS[name]
    a, b = operand(a_shape, dtype, 1), operand(b_shape, dtype, 2)
    offs = torch.tensor(cut, dtype=torch.int32) if cut is not None else None
    c = tilemm.grouped_matmul(a, b, offs, **SMALL)
    check(c, a, b, offs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_other_dtypes_and_transposed_weights(dtype):
    a = operand((20, 24), dtype, 3)
    b = operand((5, 20, 24), dtype, 4).mT           # (G, K, N) given as (G, N, K) transposed
    offs = torch.tensor([4, 4, 9, 9, 20], dtype=torch.int32)
    c = tilemm.grouped_matmul(a, b, offs, **SMALL)
    check(c, a, b, offs)
    wide = tilemm.grouped_matmul(a, b, offs, out_dtype=torch.float32, **SMALL) if dtype != torch.float32 else c
    assert wide.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8])
@pytest.mark.parametrize("k_major", [False, True])
def test_no_tokens_at_all(dtype, k_major):
    """An expert-parallel rank's empty batch: no rows, every group empty, the weight K-major (as MoE
    layers hold it; the TMA program's descriptors take no empty dimension) or not: an empty result,
    and gradients of zeros for the weight."""
    a = operand((0, 24), dtype, 5)
    b = operand((3, 16, 24), dtype, 6).mT if k_major else operand((3, 24, 16), dtype, 6)
    offs = torch.zeros(3, dtype=torch.int32, device=WHERE)
    c = tilemm.grouped_matmul(a, b, offs, **SMALL)
    assert c.shape == (0, 16) and c.dtype == (torch.int32 if dtype == torch.int8 else dtype)
    if dtype != torch.int8:
        b = b.detach().requires_grad_()
        tilemm.grouped_matmul(a.requires_grad_(), b, offs, **SMALL).sum().backward()
        assert a.grad.shape == (0, 24) and torch.equal(b.grad, torch.zeros_like(b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
@pytest.mark.parametrize("name", ["2d-3d", "masked", "3d-3d"])
def test_tma_program_reads_the_moe_forward_layouts(name, dtype):
    counted = name == "masked"
    a_shape = {"2d-3d": (19, 48), "masked": (5, 18, 48), "3d-3d": (5, 3, 48)}[name]
    a, b = operand(a_shape, dtype, 18), operand((5, 20, 48), dtype, 19).mT         # b K-major, as MoE layers
    cut = None if name == "3d-3d" else torch.tensor(OFFS if not counted else [0, 1, 18, 17, 3], dtype=torch.int32)
    c = tilemm.grouped_matmul(a, b, None if counted else cut, counts=cut if counted else None, tma=True, **SMALL)
    check(c, a, b, cut, counted)


# rows a group: none, one, a short tile's (16) and one past it, a tall tile's (32) and one past, a tall and a short
SHORT_TILE_GROUPS = [0, 1, 16, 17, 32, 33, 0, 48, 5, 0]


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8])
@pytest.mark.parametrize("programs,small_m", [(None, 16), (1, 16), (3, 16), (None, 32)])
def test_tma_short_tiles_with_empty_and_one_row_groups(dtype, programs, small_m):
    """The TMA program: tall tiles of 32 rows, a group's last rows in short tiles of 16 where 16 or
    fewer are left (small_m=32: none); one program walking every tile, three, or one a tile."""
    cut = torch.tensor(SHORT_TILE_GROUPS, dtype=torch.int32).cumsum(0).to(torch.int32)
    rows = int(cut[-1])
    a, b = operand((rows + 3, 48), dtype, 30), operand((len(cut), 40, 48), dtype, 31).mT   # 3 rows past offs[-1]
    params = dict(block_m=32, block_n=16, block_k=16, num_warps=4, num_stages=2)
    c = tilemm.grouped_matmul(a, b, cut, tma=True, small_m=small_m, programs=programs, **params)
    check(c, a, b, cut)
    assert not c[rows:].any(), "rows past offs[-1] stay zero"


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("name", ["masked", "3d-3d"])
def test_tma_short_tiles_in_the_masked_and_batched_layouts(name):
    counted = name == "masked"
    a, b = operand((4, 40, 48), torch.bfloat16, 32), operand((4, 24, 48), torch.bfloat16, 33).mT   # 40 = 32 + 8
    counts = torch.tensor([0, 1, 17, 40], dtype=torch.int32) if counted else None
    c = tilemm.grouped_matmul(a, b, counts=counts, tma=True, small_m=16, block_m=32, block_n=16, block_k=16,
                              num_warps=4, num_stages=2)
    check(c, a, b, counts, counted)


def test_tma_is_refused_where_an_operand_is_not_k_major():
    a, b = operand((6, 48), torch.float16, 20), operand((2, 48, 8), torch.float16, 21)
    with pytest.raises(ValueError, match="tma=True takes"):
        tilemm.grouped_matmul(a, b, [2, 6], tma=True, **SMALL)
    assert tilemm.grouped_matmul(a, b, [2, 6], tma=None, **SMALL).shape == (6, 8)     # None: the pointer program


def dequantized(x, scale, rows_per_scale):
    """x (float64) times its block scales: (.., rows, K) with scales of 1 x 128 (rows_per_scale 1)
    or 128 x 128 blocks."""
    s = scale.double().repeat_interleave(rows_per_scale, -2).repeat_interleave(128, -1)
    return x.double() * s[..., :x.shape[-2], :x.shape[-1]]


@pytest.mark.skipif(ON_GPU, reason="interpreter sizes")
@pytest.mark.parametrize("tma,out_dtype,counted,short", [
    (None, torch.float32, False, False), (False, torch.float32, True, False), (None, torch.bfloat16, True, False),
    (False, torch.bfloat16, False, False), (True, torch.float32, False, True), (True, torch.bfloat16, True, True)])
def test_float8_groups_with_block_scales_match_the_dequantized_product(tma, out_dtype, counted, short):
    """short: the TMA program's tiles of 32 rows, a group's last rows in short tiles of 16."""
    e4m3, k, n = torch.float8_e4m3fn, 144, 130          # K and N past one 128-block, ragged
    b = (torch.randn(3, n, k) * 3).to(e4m3).mT
    scale_b = scales_like((3, 2, 2), 22)
    a = (torch.randn((3, 9, k) if counted else (20, k)) * 3).to(e4m3)
    scale_a = scales_like(a.shape[:-1] + (2,), 23)
    cut = torch.tensor([9, 0, 4] if counted else [0, 7, 20], dtype=torch.int32)
    params = dict(SMALL, block_k=32, **(dict(block_m=32, small_m=16) if short else {}))
    c = tilemm.grouped_matmul(a, b, None if counted else cut, counts=cut if counted else None, scale_a=scale_a,
                              scale_b=scale_b, out_dtype=out_dtype, tma=tma, **params)
    a64, b64 = dequantized(a, scale_a, 1), dequantized(b.mT, scale_b.mT, 128).mT     # B's blocks: (K, N) tiles
    ref = torch.zeros(c.shape, dtype=torch.float64)
    size = torch.zeros(c.shape, dtype=torch.float64)
    lay = layout(a.float(), b.float(), None if counted else cut, cut if counted else None, None)
    for (rows, a_g, b_g, at), (_, x, y, _) in zip(slices(a64, b64, cut.tolist(), lay),
                                                  slices(a64.abs(), b64.abs(), cut.tolist(), lay)):
        ref[at], size[at] = a_g[rows] @ b_g, x[rows] @ y
    err = (c.double() - ref).abs()
    assert c.dtype == out_dtype
    assert torch.all(err <= ROUNDING[out_dtype] * ref.abs() + (2 * k + 3 * k / 16 + 2) * 2.0**-24 * size + 1e-30)


def scales_like(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return 2.0 ** torch.randint(-3, 4, shape, generator=g) * (1 + torch.rand(shape, generator=g))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(), TypeError, "float8 groups take block scales"),
    (dict(scale_a=torch.ones(6, 1), scale_b=torch.ones(2, 1, 2)), ValueError, r"scale_b has shape \(2, 1, 2\)"),
    (dict(scale_a=torch.ones(6, 1, dtype=torch.float16), scale_b=torch.ones(2, 1, 1)), ValueError, "float32"),
    (dict(scale_a=torch.ones(6, 2), scale_b=torch.ones(2, 1, 1)), ValueError, r"scale_a has shape \(6, 2\)"),
])
def test_bad_block_scales_are_refused_before_any_work(monkeypatch, kwargs, error, match):
    monkeypatch.setattr(r15_grouped_kernel, "launch", lambda *_, **__: pytest.fail("launched"))
    a, b = torch.ones(6, 32).to(torch.float8_e4m3fn), torch.ones(2, 32, 8).to(torch.float8_e4m3fn)
    kwargs = {k: v.to(WHERE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        tilemm.grouped_matmul(a.to(WHERE), b.to(WHERE), [2, 6], **kwargs)


def test_masked_layout_writes_the_counted_rows_only():
    a, b = operand((4, 18, 24), torch.float16, 5), operand((4, 24, 20), torch.float16, 6)
    counts = torch.tensor([0, 1, 18, 17], dtype=torch.int32)
    c = tilemm.grouped_matmul(a, b, counts=counts, **SMALL)
    check(c, a, b, counts, counted=True)        # rows past each count: 0
    out = torch.full((4, 18, 20), 7.0, dtype=torch.float16, device=WHERE)
    assert tilemm.grouped_matmul(a, b, counts=counts, out=out, **SMALL) is out
    assert torch.all(out[0] == 7) and torch.all(out[1, 1:] == 7) and torch.all(out[3, 17] == 7)


def test_rows_past_the_last_offset_are_zero_and_lists_of_problems():
    a, b = operand((12, 16), torch.float32, 7), operand((2, 16, 8), torch.float32, 8)
    c = tilemm.grouped_matmul(a, b, [3, 9], **SMALL)                  # offs as a list
    assert torch.all(c[9:] == 0)
    check(c, a, b, torch.tensor([3, 9], dtype=torch.int32))
    pairs = [(operand((3, 5), torch.float32, 9), operand((5, 2), torch.float32, 10)),
             (operand((1, 17), torch.float32, 11), operand((17, 33), torch.float32, 12))]
    results = tilemm.grouped_matmul([p[0] for p in pairs], [p[1] for p in pairs], **SMALL)
    for (x, y), c in zip(pairs, results):
        assert c.shape == (x.shape[0], y.shape[1])
        assert torch.allclose(c.cpu().double(), x.cpu().double() @ y.cpu().double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(LAYOUTS) + ["masked"])
def test_numpy_operands_run_a_host_loop_of_the_same_meaning(name):
    a_shape, b_shape, cut = LAYOUTS.get(name, ((3, 4, 5), (3, 5, 6), [0, 4, 2]))
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.int8):
        a = rng.integers(-50, 50, a_shape).astype(dtype)
        b = rng.integers(-50, 50, b_shape).astype(dtype)
        np_cut = np.asarray(cut, np.int32) if cut is not None else None
        counted = name == "masked"
        c = tilemm.grouped_matmul(a, b, None if counted else np_cut, counts=np_cut if counted else None)
        ref = reference(torch.from_numpy(a), torch.from_numpy(b),
                        torch.from_numpy(np_cut) if cut is not None else None, counted)
        assert isinstance(c, np.ndarray) and c.dtype == (np.int32 if dtype == np.int8 else np.float32)
        assert np.array_equal(c.astype(np.int64), ref.long().numpy())     # small integers: exact either way


@pytest.mark.parametrize("out_dtype", [np.float32, np.dtype(np.float32), "float32"])
def test_numpy_operands_take_a_numpy_scalar_type_as_out_dtype(out_dtype):
    """np.float32 (a class, whose .name is a descriptor) names float32 as np.dtype(np.float32) and
    "float32" do (it was refused: "choose float16 or float32")."""
    a, b = np.ones((4, 3), np.float16), np.ones((2, 3, 5), np.float16)
    c = tilemm.grouped_matmul(a, b, np.array([1, 4], np.int32), out_dtype=out_dtype)
    assert c.dtype == np.float32 and np.array_equal(c, np.full((4, 5), 3.0, np.float32))
    with pytest.raises(TypeError, match="out_dtype=<class 'numpy.int32'> for float16 operands"):
        tilemm.grouped_matmul(a, b, np.array([1, 4], np.int32), out_dtype=np.int32)


@pytest.mark.parametrize("name", list(LAYOUTS) + ["masked"])
def test_gradients_match_float64_autograd(name):
    a_shape, b_shape, cut = LAYOUTS.get(name, ((5, 6, 8), (5, 8, 7), [0, 1, 6, 3, 2]))
    counted = name == "masked"
    a = operand(a_shape, torch.float32, 13).requires_grad_()
    b = operand(b_shape, torch.float32, 14).requires_grad_()
    cut_t = torch.tensor(cut, dtype=torch.int32) if cut is not None else None
    c = tilemm.grouped_matmul(a, b, None if counted else cut_t, counts=cut_t if counted else None, **SMALL)
    weights = operand(tuple(c.shape), torch.float32, 15)
    (c * weights).sum().backward()
    a64 = a.detach().cpu().double().requires_grad_()
    b64 = b.detach().cpu().double().requires_grad_()
    lay = layout(a, b, None if counted else cut_t, cut_t if counted else None, None)
    ref = torch.zeros(lay.shape, dtype=torch.float64)
    for rows, a_g, b_g, at in slices(a64, b64, cut, lay):
        ref[at] = a_g[rows] @ b_g
    (ref * weights.cpu().double()).sum().backward()
    for got, want in ((a.grad, a64.grad), (b.grad, b64.grad)):
        assert torch.allclose(got.cpu().double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(LAYOUTS) + ["masked"])
def test_batched_gradients_match_one_backward_each(name):
    """autograd's batched dC (is_grads_batched=True, jacobian(vectorize=True)) has no memory the
    program could read ("Cannot access storage of BatchedTensorImpl" before): each layout's
    gradients are torch's products of the groups there, as one backward a copy gives them."""
    a_shape, b_shape, cut = LAYOUTS.get(name, ((5, 6, 8), (5, 8, 7), [0, 1, 6, 3, 2]))
    counted = name == "masked"
    a = operand(a_shape, torch.float32, 13).requires_grad_()
    b = operand(b_shape, torch.float32, 14).requires_grad_()
    cut_t = torch.tensor(cut, dtype=torch.int32, device=a.device) if cut is not None else None

    def grouped(a, b):
        return tilemm.grouped_matmul(a, b, None if counted else cut_t, counts=cut_t if counted else None, **SMALL)
    grads = operand((3, *grouped(a, b).shape), torch.float32, 15)
    together = torch.autograd.grad(grouped(a, b), (a, b), grads, is_grads_batched=True)
    for i, g in enumerate(grads):
        alone = torch.autograd.grad(grouped(a, b), (a, b), g)
        for j in range(2):
            assert torch.allclose(together[j][i], alone[j], rtol=1e-4, atol=1e-4)


F16 = torch.float16
BAD = [
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), torch.tensor([4, 2], dtype=torch.int32)),
     {}, ValueError, "not sorted"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), torch.tensor([4, 7], dtype=torch.int32)),
     {}, ValueError, "past the end"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), torch.tensor([4, 6])), {}, ValueError, "int32"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), torch.tensor([[4, 6]], dtype=torch.int32)),
     {}, ValueError, "1-D"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), torch.tensor([6], dtype=torch.int32)),
     {}, ValueError, "1 entries for 2 groups"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16)), {}, ValueError, "need offs"),
    ((torch.ones(6, 5, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]), {}, ValueError, "do not line up"),
    ((torch.ones(2, 6, 4, dtype=F16), torch.ones(3, 4, 3, dtype=F16)), {}, ValueError, "2 groups and b 3"),
    ((torch.ones(2, 6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [1, 2]), {}, ValueError, "offs given"),
    ((torch.ones(2, 6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16)), dict(counts=[1, 7]), ValueError, "capacity"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=torch.bfloat16), [2, 6]), {}, TypeError, "one dtype"),
    ((torch.ones(6, 4, dtype=torch.float64), torch.ones(2, 4, 3, dtype=torch.float64), [2, 6]), {}, TypeError,
     "dtype float64"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]), dict(out_dtype="int32"), TypeError,
     "out_dtype"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]),
     dict(scale_a=torch.ones(6, 1), scale_b=torch.ones(2, 1, 1)), TypeError, "block scales .* are for float8 operands"),
    ((torch.ones(1, 6, 4, 1, dtype=F16), torch.ones(2, 4, 3, dtype=F16)), {}, ValueError, "2-D or 3-D"),
    (([torch.ones(2, 3)], [torch.ones(3, 2), torch.ones(2, 2)]), {}, ValueError, "1 a's for 2 b's"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]), dict(block_q=3), TypeError,
     "no parameter"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]), dict(block_m=48), ValueError,
     "block_m=48"),
    ((torch.ones(6, 4, dtype=F16), torch.ones(2, 4, 3, dtype=F16), [2, 6]), dict(block_m=32, small_m=64), ValueError,
     "small_m=64 is more than block_m=32"),
]


@pytest.mark.parametrize("args,kwargs,error,match", BAD)
def test_bad_input_is_refused_before_any_work(monkeypatch, args, kwargs, error, match):
    def launched(*_, **__):
        raise AssertionError("launched")
    monkeypatch.setattr(r15_grouped_kernel, "launch", launched)
    args = tuple(x.to(WHERE) if isinstance(x, torch.Tensor) and x.ndim >= 2 else x for x in args)
    with pytest.raises(error, match=match):
        tilemm.grouped_matmul(*args, **kwargs)


def test_the_rung_is_on_the_ladder_as_one_group():
    kernel = tilemm.kernel("tensorcore-grouped")
    assert kernel.rung == 15 and "Constraints:" in __import__(kernel.run.__module__, fromlist=["x"]).__doc__
    a, b = operand((21, 33), torch.float16, 16), operand((33, 18), torch.float16, 17)
    c = tilemm.matmul(a, b, kernel="tensorcore-grouped", **SMALL)
    check(c, a[None], b[None])


COMPILE = r"""
import inspect, json, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from tilemm.ladder.tensorcore import r15_grouped, r15_grouped_kernel as g
p = r15_grouped.DEFAULTS
names = list(inspect.signature(g.grouped_kernel.fn).parameters)
out = {}
for split, ty, acc in ((1, "bf16", "*bf16"), (4, "i8", "*i32")):
    sig = {n: "i32" for n in names}
    sig.update(a_ptr=f"*{ty}", b_ptr=f"*{ty}", c_ptr=acc, offs_ptr="*i32", sa_ptr="*fp32", sb_ptr="*fp32")
    const = dict(stride_ak=1, stride_bn=1, stride_cn=1, SPLIT=split, BLOCK_SIZE_M=p["block_m"],
                 BLOCK_SIZE_N=p["block_n"], BLOCK_SIZE_K=p["block_k"], GROUP_SIZE_M=p["group_m"],
                 INTEGER=ty == "i8", INPUT_PRECISION=None, SCALED=False)
    sig.update({n: "constexpr" for n in const})
    # what a launch on aligned operands specializes: pointers, row strides and sizes divisible by 16
    aligned = ["a_ptr", "b_ptr", "c_ptr", "offs_ptr", "stride_ag", "stride_am", "stride_bg", "stride_bk", "stride_cg",
               "stride_cm", "N", "K"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(ASTSource(fn=g.grouped_kernel, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
    ptx = k.asm["ptx"]
    out[f"{split}-{ty}"] = dict(shared=k.metadata.shared, wgmma="wgmma.mma_async" in ptx, cp_async="cp.async" in ptx)
from tilemm.ladder.tensorcore import r15_grouped_tma_kernel as t
from tests.compiled import resource_usage
names = list(inspect.signature(t.grouped_tma_kernel.fn).parameters)
for ty, scaled in (("bf16", False), ("fp8e4nv", True)):     # float8 groups with block scales
    sig = {n: "i32" for n in names}
    sig.update(a_desc=f"tensordesc<{ty}[{p['block_m']}, {p['block_k']}]>", c_ptr="*bf16", offs_ptr="*i32",
               a_short_desc=f"tensordesc<{ty}[{p['block_m'] // 2}, {p['block_k']}]>",
               b_desc=f"tensordesc<{ty}[{p['block_n']}, {p['block_k']}]>", sa_ptr="*fp32", sb_ptr="*fp32")
    const = dict(stride_cn=1, SPLIT=1, BLOCK_SIZE_M=p["block_m"], BLOCK_SIZE_N=p["block_n"],
                 BLOCK_SIZE_K=p["block_k"], GROUP_SIZE_M=p["group_m"], SMALL_M=p["block_m"] // 2,
                 INTEGER=False, INPUT_PRECISION=None, SCALED=scaled)
    sig.update({n: "constexpr" for n in const})
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ["c_ptr", "offs_ptr", "stride_cm", "N", "K"]}
    k = triton.compile(ASTSource(fn=t.grouped_tma_kernel, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
    ptx = k.asm["ptx"]
    out[f"tma-1-{ty}"] = dict(shared=k.metadata.shared, wgmma="wgmma.mma_async" in ptx,
                              cp_async="cp.async.bulk.tensor" in ptx, **resource_usage(k.asm["cubin"]))
print(json.dumps(out))
"""


def test_the_program_compiles_for_sm90_with_wgmma_and_pipelined_loads():
    compiled = run_program(COMPILE)
    stages = tilemm.kernel("tensorcore-grouped").resolve({})["num_stages"]
    for name, info in compiled.items():
        assert info["wgmma"] and info["cp_async"], (name, info)
        assert info["shared"] >= (stages - 1) * (128 + 128) * 64 * (2 if "bf16" in name else 1), (name, info)
    assert "tma-1-fp8e4nv" in compiled


@pytest.mark.gpu
@pytest.mark.parametrize("experts,tokens,hidden,out", [(8, 4096, 2048, 1408), (64, 8192, 2048, 1024)])
@pytest.mark.parametrize("skewed", [False, True])
def test_gpu_moe_shapes_match_torch(experts, tokens, hidden, out, skewed):
    g = torch.Generator().manual_seed(experts)
    weights = torch.rand(experts, generator=g) ** (8 if skewed else 0)
    counts = torch.distributions.Multinomial(tokens, weights / weights.sum()).sample().to(torch.int32)
    offs = counts.cumsum(0).to(torch.int32).cuda()
    a = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(experts, out, hidden, device="cuda", dtype=torch.bfloat16).mT
    c = tilemm.grouped_matmul(a, b, offs)
    want = torch._grouped_mm(a, b, offs)
    assert torch.allclose(c.float(), want.float(), rtol=2e-2, atol=2e-1 * hidden**0.5 / 8)


@pytest.mark.gpu
@pytest.mark.parametrize("small_m", [None, 16, 64, 128])
def test_gpu_short_tiles_on_a_skewed_routing_match_float64(small_m):
    """The TMA program's short tiles (a group's last rows where small_m or fewer are left; 128: none)
    on a routing with empty groups, groups of one row and groups just past a tile."""
    sizes = torch.tensor([0, 1, 5, 32, 33, 64, 65, 128, 129, 160, 0, 700, 1, 0, 17, 2000], dtype=torch.int32)
    offs = sizes.cumsum(0).to(torch.int32).cuda()
    a = operand((int(sizes.sum()), 512), torch.bfloat16, 40)
    b = operand((len(sizes), 384, 512), torch.bfloat16, 41).mT
    c = tilemm.grouped_matmul(a, b, offs, small_m=small_m)
    check(c, a, b, offs.cpu())


@pytest.mark.gpu
def test_gpu_masked_layout_replays_in_a_cuda_graph():
    a = torch.randn(4, 256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, 512, 384, device="cuda", dtype=torch.bfloat16)
    counts = torch.tensor([0, 1, 200, 256], dtype=torch.int32, device="cuda")
    out = torch.zeros(4, 256, 384, device="cuda", dtype=torch.bfloat16)
    tilemm.grouped_matmul(a, b, counts=counts, out=out)                     # compiled before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tilemm.grouped_matmul(a, b, counts=counts, out=out)
    out.zero_()
    counts.copy_(torch.tensor([5, 0, 256, 3], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    check(out, a, b, counts, counted=True)
