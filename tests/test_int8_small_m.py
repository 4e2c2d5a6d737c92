"""tensorcore-int's small-M program (tilemm.ladder.tensorcore.r11_int8_small_m): int8 x int8 ->
int32 in small tiles with K split into runs whose partials the last run adds, B read as (N, K).T or
row-major. Under Triton's interpreter at odd sizes against exact products (M not a multiple of the
tile, N and K neither, splits of several runs, B's tile loaded ahead or not, the workspace's counts
left at zero); the rule that picks it and the count of runs as functions of the sizes, SMs and B's
layout; the default's choice for a row-major B; the program compiled for sm_90 as each tile class
of each layout runs it; and exact answers on the GPU."""
import dataclasses

import numpy as np
import pytest

from tilemm.choose import by_shape as choice, default as dispatch
from tilemm.engine import availability, workspaces
from tilemm.ladder import record as kernel_record, registry
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m
from tilemm.system import machine

from .compiled import run_program
from .conftest import ON_GPU

torch = pytest.importorskip("torch")

H200_SMS = 132
TINY = (16, 32, 32, 1, 2, 1)     # interpreter-sized tiles: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, programs an SM


def operands(m, n, k, seed, device="cpu", layout="col"):
    """A (m, k) and B as torch.nn.Linear keeps a weight: (n, k) given as its .T ("col"), or the
    same values row-major ("row")."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    weight = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    b = weight.T if layout == "col" else weight.T.contiguous()
    return a.to(device), b.to(device)


def int64_product(a, b):
    """A @ B in NumPy's int64: the exact sums."""
    return a.numpy().astype(np.int64) @ b.numpy().astype(np.int64)


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
@pytest.mark.parametrize("layout", ["col", "row"])
@pytest.mark.parametrize("m", [1, 3, 16, 17, 100])
def test_interpreter_both_layouts_into_a_poisoned_out(layout, m):
    """The rung's own tiles for M and B's layout (100 rows, B row-major: the tile loaded a step
    ahead), N and K not tile multiples, one run and several, into an out= filled with a poison."""
    import tilemm
    a, b = operands(m, 70, 520, m, layout=layout)
    assert small_m.layout(a, b) == layout and small_m.b_rows(b) is (layout == "row")
    expected = int64_product(a, b)
    for runs in (1, 3):
        c = torch.full((m, 70), -123456789, dtype=torch.int32)
        got = tilemm.matmul(a, b, out=c, out_dtype="int32", kernel="tensorcore-int", small_m=True, split_k=runs)
        assert got.data_ptr() == c.data_ptr() and np.array_equal(c.numpy().astype(np.int64), expected), runs
    assert counts_at_zero()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k,runs", [(1, 33, 70, 3), (17, 130, 129, 4), (66, 40, 96, None), (70, 20, 64, 1)])
@pytest.mark.parametrize("tiles", [TINY, (64, 32, 32, 1, 2, 1)])
def test_interpreter_row_major_b_at_odd_sizes(m, n, k, runs, tiles):
    """B row-major at interpreter-sized tiles of 16 rows (Triton's pipeline) and 64 (the tile
    loaded a step ahead), a slice of a wider B's columns too: its rows contiguous, longer than N."""
    a, b = operands(m, n, k, m + n + k, layout="row")
    wide = torch.zeros(k, n + 9, dtype=torch.int8)
    wide[:, 3:n + 3] = b
    for given in (b, wide[:, 3:n + 3]):
        assert small_m.b_rows(given)
        c = torch.full((m, n), 7, dtype=torch.int32)
        small_m.launcher(a, given, c, runs, tiles=tiles)()
        assert np.array_equal(c.numpy().astype(np.int64), int64_product(a, b))
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


def test_k_is_split_where_the_model_finds_it_pays_and_no_run_is_short_or_empty():
    # M = 1, N = 3584, K = 18944: 56 tiles of 16 x 64, 74 K steps of 256; a hand-over costs
    # 40 x (16 x 64 x 4 bytes) / (80 x 256 bytes a step) = 8 steps: 4 runs of 19 steps (224
    # programs, one wave, two an SM) against 5 runs of 15 in two waves
    assert small_m.runs_of_k(1, 3584, 18944, H200_SMS) == 4
    # 17 rows: 56 tiles of 32 x 64, 148 steps of 128, a hand-over 26.7 steps: 4 runs of 37 (224
    # programs, one wave, two an SM) against 5 runs of 30 in two waves
    assert small_m.runs_of_k(17, 3584, 18944, H200_SMS) == 4
    # 224 tiles and 16 steps: two runs would take two waves of 8 steps and a hand-over
    assert small_m.runs_of_k(1, 28672, 4096, H200_SMS) == 1
    # 100 rows of a 4096 x 4096 weight: 64 tiles of 64 x 128, 32 steps; a hand-over of 32 KiB of
    # sums costs 53 steps: no split (the split before, 3 runs, took 16.6 us against 12.8)
    assert small_m.runs_of_k(100, 4096, 4096, H200_SMS) == 1
    # 768 rows of 3072 x 8192: 288 tiles, 64 steps, a second wave of 24 tiles; 8 runs would take 9
    # waves, each program with its hand-over (the model before, which counted one hand-over a
    # launch, took 8 runs: 158 us against 64)
    assert small_m.runs_of_k(768, 3072, 8192, H200_SMS) == 1
    # the words products fill the SMs: 100 rows of 128 x 64 words tiles, 4096 x 4096: 64 tiles, 3 runs
    assert small_m.tiles_for(100, True)[6] == "int8-words"
    assert small_m.runs_of_k(100, 4096, 4096, H200_SMS, small_m.tiles_for(100, True)) == 3
    for m, n, k in [(1, 2048, 2048), (33, 3584, 18944), (100, 8192, 6144), (7, 300, 1000), (1, 8, 8), (1, 64, 2**20)]:
        runs = small_m.runs_of_k(m, n, k, H200_SMS)
        steps = -(-k // small_m.tiles_for(m)[2])
        per_run = -(-steps // runs)
        assert 1 <= runs <= small_m.MOST_RUNS and (runs - 1) * per_run < steps
        assert runs == 1 or per_run >= small_m.LEAST_RUN


def test_the_rung_takes_it_where_its_tiles_leave_sms_idle():
    assert small_m.preferred(16, 3584, 18944, H200_SMS)          # 14 tiles of 128 x 256
    assert small_m.preferred(512, 8192, 6144, H200_SMS)          # 128 tiles
    assert not small_m.preferred(768, 8192, 6144, H200_SMS)      # 192 tiles: the rung's own
    assert not small_m.preferred(16, 3584, 0, H200_SMS)          # an empty sum


def test_a_row_major_b_takes_it_up_to_its_rows():
    """With B row-major the rung's own programs would copy B: the small-M program takes it up to
    ROW_MAJOR_ROWS rows even where the rung's tiles fill the SMs."""
    assert not small_m.preferred(200, 28672, 4096, H200_SMS)     # 224 tiles of 128 x 256
    assert small_m.preferred(200, 28672, 4096, H200_SMS, b_rows=True)
    assert small_m.preferred(small_m.ROW_MAJOR_ROWS, 28672, 8192, H200_SMS, b_rows=True)
    assert not small_m.preferred(small_m.ROW_MAJOR_ROWS + 1, 28672, 8192, H200_SMS, b_rows=True)
    assert small_m.preferred(512, 8192, 6144, H200_SMS, b_rows=True)          # 128 tiles: as for (N, K).T
    assert not small_m.preferred(16, 3584, 0, H200_SMS, b_rows=True)
    rung = registry.get("tensorcore-int")
    assert rung.prefers("int8", 200, 28672, 4096, H200_SMS, (9, 0), b_rows=True)
    assert not rung.prefers("int8", 200, 28672, 4096, H200_SMS, (9, 0))


def test_the_default_gives_a_row_major_b_to_the_rung(monkeypatch):
    """B row-major: tensorcore-int (its small-M program) even where the int8 table names no rung
    (a deep K, the library otherwise) and where the library would take B as (N, K).T; never the
    library, whose _int_mm reads a row-major B slowly (in a process that has loaded Triton)."""
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    monkeypatch.setattr(availability, "triton_loaded", lambda: True)
    monkeypatch.setattr(machine, "gpu", lambda: dataclasses.replace(machine.H100, sms=H200_SMS))
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(
        registry.get("cublas"), available=lambda: None, limits=lambda problem: None))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def default(m, n, k, result="int32", **layout):
        return dispatch.default_kernel("cuda:0", result, m, n, k, "int8", **layout).name
    assert default(8, 1024, 8192) == "cublas"                      # a class the table leaves to the library
    assert default(8, 1024, 8192, b_rows=True) == "tensorcore-int"
    assert default(64, 2048, 2048) == "tensorcore-int"             # (N, K).T: the rung's small-M program
    assert default(64, 2048, 2048, b_rows=True) == "tensorcore-int"
    assert default(256, 28672, 8192, b_rows=True) == "tensorcore-int"
    assert default(8, 1024, 8192, result="int64", b_rows=True) == default(8, 1024, 8192, result="int64")
    a, b = operands(16, 64, 128, 0)
    assert dispatch.b_rows(a, b.contiguous()) and not dispatch.b_rows(a, b)


def test_past_64_rows_few_tiles_take_64_by_64():
    # B as (N, K).T: 100 x 4096 in the table's 64 x 128 tiles is 64 tiles, under 132 SMs
    assert small_m.tiles_for(100, False, 4096, H200_SMS) == small_m.FEW_TILES
    assert small_m.tiles_for(100, False, 4096, H200_SMS) != small_m.tiles_for(100)
    # 128 x 14336: 224 such tiles fill the SMs; 512 x 2048: 128 tiles, still short
    assert small_m.tiles_for(128, False, 14336, H200_SMS) == small_m.TILES[-1][1]
    assert small_m.tiles_for(512, False, 2048, H200_SMS) == small_m.FEW_TILES
    # B row-major: 100 x 2048 in 128 x 64 words tiles is 32 tiles, half the SMs or fewer
    assert small_m.tiles_for(100, True, 2048, H200_SMS) == small_m.FEW_ROW_TILES
    assert small_m.tiles_for(200, True, 3072, H200_SMS) == small_m.ROW_TILES[-1][1]       # 96 tiles
    assert small_m.product_of(small_m.FEW_ROW_TILES) in small_m.WORDS_PRODUCTS
    # up to 64 rows the table's rows, whatever N
    for m in (1, 16, 17, 64):
        for b_rows in (False, True):
            assert small_m.tiles_for(m, b_rows, 512, H200_SMS) == small_m.tiles_for(m, b_rows)
    # the count of runs follows the tiles the shape gets: 128 tiles of 64 x 64, 32 steps, no split
    assert small_m.runs_of_k(100, 4096, 4096, H200_SMS) == 1


@pytest.mark.parametrize("layout", ["col", "row"])
def test_interpreter_few_tiles_exact(layout):
    """Past 64 rows with few tiles (FEW_TILES, FEW_ROW_TILES), K split and not, under the interpreter."""
    a, b = operands(70, 40, 300, 5, layout=layout)
    assert small_m.tiles_for(70, layout == "row", 40) in (small_m.FEW_TILES, small_m.FEW_ROW_TILES)
    for runs in (None, 2):
        c = torch.full((70, 40), -5, dtype=torch.int32)
        small_m.launcher(a, b, c, runs)()
        assert np.array_equal(c.numpy(), int64_product(a, b))
    assert counts_at_zero()


def test_tiles_of_each_layout():
    for b_rows in (False, True):
        table = small_m.ROW_TILES if b_rows else small_m.TILES
        assert table[-1][0] is None and all(small_m.product_of(tiles) in small_m.PRODUCTS for _, tiles in table)
        assert small_m.tiles_for(1, b_rows) == table[0][1] and small_m.tiles_for(10**6, b_rows) == table[-1][1]
        for m in (1, 16, 17, 64, 65, 256):
            block_m, block_n, block_k, *_ = small_m.tiles_for(m, b_rows)
            assert block_k % 32 == 0 and small_m.CHUNK_K % block_k == 0 and block_n % 16 == 0 and block_m in (16, 32, 64, 128)


def test_takes_int8_into_int32_in_the_layouts_it_reads(monkeypatch):
    monkeypatch.setattr(small_m.availability, "multiprocessors", lambda: H200_SMS)
    a, b = operands(16, 64, 128, 0)
    c = torch.empty(16, 64, dtype=torch.int32)
    assert small_m.takes(a, b, c)
    assert small_m.takes(a, b.contiguous(), c)                      # B row-major: read as it lies
    assert small_m.layout(a, b) == "col" and small_m.layout(a, b.contiguous()) == "row"
    strided = torch.empty(128, 64, 2, dtype=torch.int8)[:, :, 0]    # neither B's rows nor its columns contiguous
    assert small_m.layout(a, strided) is None and not small_m.takes(a, strided, c)
    assert small_m.takes(a, strided, c, small_m=True)               # ... unless asked for
    assert not small_m.takes(a.T.contiguous().T, b, c)              # A column-major: the rung's copies
    assert not small_m.takes(a, b, c, small_m=False)
    assert not small_m.takes(a, b, c.to(torch.int8))                # int8 C: the rung's wrap
    assert not small_m.takes(a.short(), b.short(), c)               # int16 operands: digits
    big = torch.empty(1024, 64, dtype=torch.int8)
    assert not small_m.takes(big, torch.empty(28672, 64, dtype=torch.int8).T, torch.empty(1024, 28672, dtype=torch.int32))


COMPILE = r"""
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.ladder.tensorcore.r11_int8_small_m_kernel import small_m_matmul
from tilemm.ladder.tensorcore.r11_int8_f16_kernel import small_m_f16_matmul
from tilemm.ladder.tensorcore.r11_int8_small_m import (CHUNK_K, FEW_ROW_TILES, FEW_TILES, INT8_PRODUCTS, ROW_TILES,
                                                       TILES, WGMMA_ROWS, product_of)
from tilemm.engine.availability import H100_SHARED_OPTIN
from tests.compiled import resource_usage
TABLES = ((False, TILES + (("few", FEW_TILES),)), (True, ROW_TILES + (("few", FEW_ROW_TILES),)))
F16_TILES = [(16, 64, 128, 4, 4, 1, "fp16-swap"), (64, 128, 128, 8, 4, 1, "fp16-swap"), (128, 128, 64, 8, 4, 1, "fp16-swap"),
             (128, 128, 64, 8, 4, 1, "fp16")]


def build(b_rows, tiles):
    # as a launch specializes it: split K (the hand-over compiled too), pointers, N, K and the row
    # strides divisible by 16, B's contiguous dimension's stride 1
    bm, bn, bk, warps, stages, _ = tiles[:6]
    product = product_of(tiles)
    sig = dict(a_ptr="*i8", b_ptr="*i8", c_ptr="*i32", M="i32", N="i32", K="i32", stride_am="i32",
               stride_ak="constexpr", stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="constexpr",
               BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", EVEN_K="constexpr")
    const = {"stride_ak": 1, "stride_cn": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "EVEN_K": True}
    if product in INT8_PRODUCTS:
        program = small_m_matmul
        words = b_rows and product != "int8"
        sig.update(B_ROWS="constexpr", B_AHEAD="constexpr", B_WORDS="constexpr", TURN_PRMT="constexpr")
        const.update(B_ROWS=b_rows, B_AHEAD=b_rows and (product == "int8-words-ahead" if words else bm >= WGMMA_ROWS),
                     B_WORDS=words, TURN_PRMT=words)
    else:
        program = small_m_f16_matmul
        sig.update(CHUNK_STEPS="constexpr", SWAP="constexpr", BIAS_CVT="constexpr")
        const.update(CHUNK_STEPS=CHUNK_K // bk, SWAP=product == "fp16-swap", BIAS_CVT=True)
    sig.update(split_steps="i32", ws_ptr="*fp32", counts_ptr="*i32")
    unit = "stride_bn" if b_rows else "stride_bk"          # B's contiguous dimension, as a launch sees it
    sig[unit] = "constexpr"
    const[unit] = 1
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(sig) if sig[name] != "constexpr"
             and name in ("a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bk", "stride_bn", "stride_cm",
                          "ws_ptr")}
    k = triton.compile(ASTSource(fn=program, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    ptx = k.asm["ptx"]
    wgmma = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    return dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, pipelined="cp.async" in ptx, wgmma=bool(wgmma),
                f16=all(".f32.f16.f16" in line for line in wgmma),
                registers_a=bool(wgmma) and all(line.split("}")[1].strip().startswith(", {") for line in wgmma),
                mma="mma.sync" in ptx, byte_loads="ld.global.b8" in ptx or "ld.global.u8" in ptx, block_m=bm,
                cubin=len(k.asm["cubin"]), product=product, **resource_usage(k.asm["cubin"]))


out = {}
which = "tables"
for b_rows, table in TABLES:
    for rows, tiles in (table if which == "tables" else [(t, t) for t in F16_TILES]):
        out[f"{'row' if b_rows else 'col'} {rows}"] = build(b_rows, tiles)
print(json.dumps(out))
"""


@pytest.mark.skipif(ON_GPU, reason="compile-only tier: the GPU runs the programs")
def test_compiles_for_sm90_at_every_tile_class():
    """Each row of TILES and ROW_TILES, and each layout's FEW_TILES, compiled for sm_90 as a
    launch specializes it (split K: the hand-over compiled too), outside the interpreter: its shared memory fits, the loads are
    pipelined (cp.async: A's at least), none loads a byte at a time (B row-major's columns keep
    their contiguity), and 64 rows and more take wgmma."""
    out = run_program(COMPILE)
    assert len(out) == len(small_m.TILES) + len(small_m.ROW_TILES) + 2
    for name, k in out.items():
        assert 0 < k["shared"] <= k["limit"] and k["pipelined"] and k["cubin"] > 0, (name, k)
        assert not k["byte_loads"], (name, k)
        if k["product"] in small_m.INT8_PRODUCTS:
            assert k["wgmma"] if k["block_m"] >= small_m.WGMMA_ROWS else k["mma"], (name, k)


FROM_TABLES = 'which = "tables"'


@pytest.mark.skipif(ON_GPU, reason="compile-only tier: the GPU runs the programs")
def test_the_16_bit_products_compile_for_sm90():
    """fp16 and fp16-swap compiled for sm_90 in both layouts: 16-bit wgmma with float32 sums (for
    fp16-swap from 16 rows: the weight's 64-row side), its register operand converted in
    registers (the weight's tile for fp16-swap), loads pipelined and never a byte at a time, no
    registers spilled."""
    out = run_program(COMPILE.replace(FROM_TABLES, 'which = "f16"'))
    assert len(out) == 8
    for name, k in out.items():
        assert 0 < k["shared"] <= k["limit"] and k["pipelined"] and not k["byte_loads"], (name, k)
        assert k["wgmma"] and k["f16"] and k["registers_a"] and k["stack"] == 0, (name, k)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 17, 100, 256, 512])
def test_exact_on_the_gpu(m):
    """The default and the program asked for, the plan's path and a repeated call's replay, split
    and not, B as a weight's .T and row-major (which the default gives the small-M program up to
    ROW_MAJOR_ROWS rows), into a poisoned out= too."""
    import tilemm
    for n, k in [(28672, 4096), (1000, 1000), (130, 72)]:
        for layout in ("col", "row"):
            a, b = operands(m, n, k, m + n, "cuda", layout)
            expected = a.double() @ b.double()
            if layout == "row" and m <= small_m.ROW_MAJOR_ROWS:
                c = torch.empty(m, n, dtype=torch.int32, device="cuda")
                assert tilemm.plan(a, b, out_dtype="int32").kernel.name == "tensorcore-int" and small_m.takes(a, b, c)
            for params in ({}, {"kernel": "tensorcore-int", "small_m": True}, {"kernel": "tensorcore-int", "small_m": True,
                                                                                 "split_k": 3}):
                for _ in range(3):
                    c = tilemm.matmul(a, b, out_dtype="int32", **params)
                    assert c.dtype == torch.int32 and torch.equal(c.double(), expected), (m, n, k, layout, params)
                out = torch.full((m, n), -123456789, dtype=torch.int32, device="cuda")
                tilemm.matmul(a, b, out=out, out_dtype="int32", **params)
                assert torch.equal(out.double(), expected), (m, n, k, layout, params, "out=")
    torch.cuda.synchronize()
    assert counts_at_zero()


# The 16-bit tensor cores' products (fp16, fp16-swap): float32 chunk sums flushed into int32
F16_PRODUCTS = ("fp16", "fp16-swap")


def wrapped(exact):
    """NumPy's int32 of exact int64 sums: modulo 2^32, signed."""
    return (exact + 2**31) % 2**32 - 2**31


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("product", F16_PRODUCTS)
@pytest.mark.parametrize("layout", ["col", "row"])
@pytest.mark.parametrize("m,n,k,runs", [(1, 33, 70, 3), (17, 45, 300, 2), (3, 7, 9, None), (20, 16, 129, 1)])
def test_interpreter_f16_exact_at_odd_sizes(product, layout, m, n, k, runs):
    """Both layouts as they lie, N and K not tile multiples, split K or not, flushes every 2 K steps
    (a chunk of 64) into a poisoned C."""
    a, b = operands(m, n, k, m + n + k, layout=layout)
    c = torch.full((m, n), 7, dtype=torch.int32)
    small_m.launcher(a, b, c, runs, tiles=TINY + (product,), chunk_k=64)()
    assert np.array_equal(c.numpy().astype(np.int64), int64_product(a, b))
    assert counts_at_zero()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("product", F16_PRODUCTS)
def test_interpreter_f16_chunks_keep_float32_sums_exact(product):
    """All 127 (odd products of 16129) over K = 1100: one float32 sum of them all would pass 2^24
    and lose its last bit (the interpreter sums in float32 as the tensor cores do); chunks of 512
    flushed into int32 keep it exact. K at a chunk's edges, and -128 x -128 (2^14 a product)."""
    for value, k in ((127, 1100), (-128, 1024), (127, 513), (-128, 511)):
        for layout in ("col", "row"):
            a = torch.full((2, k), value, dtype=torch.int8)
            weight = torch.full((20, k), value, dtype=torch.int8)
            weight[3, 5] = -128 if value > 0 else 127             # one product of the other sign
            b = weight.T if layout == "col" else weight.T.contiguous()
            c = torch.zeros(2, 20, dtype=torch.int32)
            small_m.launcher(a, b, c, 1, tiles=TINY + (product,))()
            assert np.array_equal(c.numpy().astype(np.int64), int64_product(a, b)), (value, k, layout)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k", [(1, 40, 300), (0, 40, 300), (5, 0, 300), (5, 40, 0), (0, 0, 0)])
def test_interpreter_f16_through_the_default(monkeypatch, m, n, k):
    """A table whose rows name the 16-bit products is what tilemm.matmul runs (as the lead's tuned
    tables would): exact, M = 1, and empty products, both layouts."""
    import tilemm
    monkeypatch.setattr(small_m, "TILES", ((None, (16, 32, 64, 1, 2, 1, "fp16-swap")),))
    monkeypatch.setattr(small_m, "ROW_TILES", ((None, (16, 32, 64, 1, 2, 1, "fp16")),))
    for layout in ("col", "row"):
        a, b = operands(m, n, k, 3, layout=layout)
        got = tilemm.matmul(a, b, out_dtype="int32", kernel="tensorcore-int", small_m=True)
        assert got.dtype == torch.int32 and got.shape == (m, n)
        assert np.array_equal(got.numpy().astype(np.int64), int64_product(a, b)), layout


def test_tiles_name_a_product_and_its_chunk():
    assert small_m.product_of((16, 32, 32, 1, 2, 1)) == "int8"
    assert small_m.product_of((16, 32, 32, 1, 2, 1, "fp16-swap")) == "fp16-swap"
    with pytest.raises(ValueError, match="product"):
        small_m.product_of((16, 32, 32, 1, 2, 1, "bf16"))
    with pytest.raises(ValueError, match="product"):
        small_m.product_of((16, 32, 32, 1, 2))
    with pytest.raises(ValueError, match="BLOCK_K must divide"):
        small_m.product_of((16, 32, 96, 1, 2, 1, "fp16"))                      # 512 / 96 steps
    with pytest.raises(ValueError, match="BLOCK_K must divide"):
        small_m.product_of((16, 32, 64, 1, 2, 1, "fp16"), chunk_k=1024)         # past 2^23 a sum
    assert small_m.product_of((16, 32, 64, 1, 2, 1, "fp16"), chunk_k=128) == "fp16"
    assert small_m.runs_of_k(1, 3584, 18944, H200_SMS, (16, 128, 256, 4, 3, 1, "fp16-swap")) == 8


def test_the_benchmarks_try_only_tiles_the_program_takes():
    """int8_small_m.py's tune space (each class's candidates, each product's) and the probe's
    candidates are tiles launcher() takes, and --products picks each product's with the table
    in force's row."""
    from .benchmark_scripts import load
    scripts = {name: load(name) for name in ("int8_small_m", "int8_f16_probe")}
    for space in (scripts["int8_small_m"].TILE_CANDIDATES, scripts["int8_f16_probe"].PROBE_TILES):
        assert set(space) == {16, 32, 64, None}
        for rows, candidates in space.items():
            for tiles in candidates:
                block_m, block_n, block_k = tiles[:3]
                assert small_m.product_of(tiles) in small_m.PRODUCTS and block_k % 32 == 0, (rows, tiles)
                assert block_m >= 16 and block_n >= 16, (rows, tiles)
    bench = scripts["int8_small_m"]
    for layout in ("col", "row"):
        for rows in bench.TILE_CANDIDATES:
            picked = bench.candidates_of(layout, rows, ["fp16-swap"])
            in_force = dict(small_m.ROW_TILES if layout == "row" else small_m.TILES)[rows]
            assert picked[-1] == in_force and len(picked) >= 2, (layout, rows)
            assert all(small_m.product_of(tiles) == "fp16-swap" for tiles in picked[:-1])


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [(64, 128, 128, 8, 4, 1, "fp16-swap"), (16, 64, 128, 4, 4, 1, "fp16-swap"),
                                   (128, 128, 64, 8, 4, 1, "fp16-swap"), (64, 128, 128, 8, 4, 1, "fp16")])
def test_f16_exact_on_the_gpu_with_adversarial_data(tiles):
    """The tensor cores' float32 sums of a chunk (512) of int8 products are exact: all -128 x -128
    (2^14 a product, 2^23 a chunk), 127 x 127 (odd sums up to 2^23), 127 and -128 mixed, random; K
    past 8192 and not a tile multiple, M from 1 to 256, N not a tile multiple, B in both layouts,
    split K and not; and a K whose int32 sum wraps, as NumPy's int32 does."""
    gen = torch.Generator(device="cuda").manual_seed(5)

    def full(value):
        return lambda shape: torch.full(shape, value, dtype=torch.int8, device="cuda")

    def mostly(value, other, every):          # value, and `other` at about one place in `every`
        return lambda shape: torch.where(torch.randint(0, every, shape, device="cuda", generator=gen) == 0,
                                         other, value).to(torch.int8)

    def random(shape):
        return torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda", generator=gen)
    # (A's values, B's): chunks of 2^23 exactly; odd sums (127 x 127 = 16129) up to 2^23; mixes
    datas = {"-128 x -128": (full(-128), full(-128)), "127 x 127": (full(127), full(127)),
             "127 x 127, -128 a 16th": (full(127), mostly(127, -128, 16)),
             "-128 x -128, 127 an 8th": (full(-128), mostly(-128, 127, 8)), "random": (random, random)}
    k, n = 8192 + 37, 1000
    for name, (a_values, b_values) in datas.items():
        for m in (1, 16, 17, 100, 256):
            a, weight = a_values((m, k)), b_values((n, k))
            expected = wrapped((a.double() @ weight.double().T).long())
            for layout in ("col", "row"):
                b = weight.T if layout == "col" else weight.T.contiguous()
                for runs in (1, 3):
                    c = torch.full((m, n), -123456789, dtype=torch.int32, device="cuda")
                    small_m.launcher(a, b, c, runs, tiles=tiles)()
                    assert torch.equal(c.long(), expected), (name, m, layout, runs, tiles)
    m, n, k = 3, 72, 200000                  # about 200000 x 2^14 > 2^31: the int32 sums wrap
    a, weight = full(-128)((m, k)), mostly(-128, 127, 8)((n, k))
    expected = wrapped((a.double() @ weight.double().T).long())
    assert (expected != (a.double() @ weight.double().T).long()).all()
    for b in (weight.T, weight.T.contiguous()):
        for runs in (1, 4):
            c = torch.empty(m, n, dtype=torch.int32, device="cuda")
            small_m.launcher(a, b, c, runs, tiles=tiles)()
            assert torch.equal(c.long(), expected), ("wraps", runs, tiles)
    torch.cuda.synchronize()
    assert counts_at_zero()
