"""tensorcore-int's small-M program with a row-major B turned over in registers 32 bits at a time
(products "int8-words" and "int8-words-ahead": B_WORDS, r11_int8_words_kernel.py). Under
Triton's interpreter against exact int64 products: N a multiple of 4 but not of the tile, K not of
the step, M of 1 to 100 rows, split K, -128 and 127 throughout, B a column slice of a wider one
(its row stride past N); the layouts and starts the words don't fit, which run the byte program;
the turn's prmt.b32 selectors (the GPU's form, which the interpreter can't run) checked in an
emulation; the program compiled for sm_90, where the turned tile goes to shared memory a word a
store; and exact answers on the GPU."""
import inspect
import re

import numpy as np
import pytest

from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

from .compiled import run_program
from .conftest import ON_GPU

torch = pytest.importorskip("torch")

WORDS = ("int8-words", "int8-words-ahead")
# interpreter-sized tiles: 16 rows (mma.sync on the GPU) and 64 (wgmma)
SMALL_TILES = [(16, 32, 32, 1, 2, 1), (64, 32, 32, 1, 2, 1)]


def int64_product(a, b):
    return a.numpy().astype(np.int64) @ b.numpy().astype(np.int64)


def row_major(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
    return a, b


def run(a, b, runs, tiles):
    """C of the launcher at these tiles (into a poisoned C), and whether it read B as words."""
    c = torch.full((a.shape[0], b.shape[1]), -123456789, dtype=torch.int32)
    launch = small_m.launcher(a, b, c, runs, tiles=tiles)
    launch()
    return c, launch.options["B_WORDS"]


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("product", WORDS)
@pytest.mark.parametrize("tiles", SMALL_TILES)
@pytest.mark.parametrize("m,n,k,runs", [(1, 36, 70, 3), (17, 132, 129, 4), (100, 68, 96, 1), (3, 4, 33, None)])
def test_interpreter_words_exact_at_odd_sizes(product, tiles, m, n, k, runs):
    """N a multiple of 4 only, K past the last step, split K or not; B as it lies and as a column
    slice of a wider B (a 4-byte aligned start, its row stride past N)."""
    a, b = row_major(m, n, k, m + n + k)
    wide = torch.zeros(k, n + 12, dtype=torch.int8)
    wide[:, 4:n + 4] = b
    for given in (b, wide[:, 4:n + 4]):
        assert small_m.b_rows(given) and small_m.words_fit(given, tiles[1])
        c, words = run(a, given, runs, tiles + (product,))
        assert words and np.array_equal(c.numpy().astype(np.int64), int64_product(a, b)), given.stride()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("product", WORDS)
def test_interpreter_words_at_the_extremes(product):
    """-128 and 127 in every byte of a word (their sign bits), alone and mixed, in both operands:
    every product of the two extremes, K past a step."""
    k, n = 72, 40
    for a_value, b_value in ((-128, -128), (127, 127), (127, -128), (-128, 127)):
        a = torch.full((17, k), a_value, dtype=torch.int8)
        b = torch.full((k, n), b_value, dtype=torch.int8)
        b[::3, ::5] = 127 if b_value < 0 else -128     # the other extreme at some bytes of each word
        a[::2, 1::4] = 127 if a_value < 0 else -128
        for runs in (1, 2):
            c, words = run(a, b, runs, SMALL_TILES[1] + (product,))
            assert words and np.array_equal(c.numpy().astype(np.int64), int64_product(a, b)), (a_value, b_value)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_words_not_fitting_run_the_byte_program():
    """N not a multiple of 4, a start off 4 bytes, a row stride off 4 bytes, B as (N, K).T and
    BLOCK_N under 16: the words products run the byte programs (B_WORDS off), exact."""
    a, b = row_major(5, 44, 40, 1)
    wide = torch.zeros(40, 44 + 9, dtype=torch.int8)
    wide[:, 3:47] = b
    odd_stride = torch.zeros(40, 45, dtype=torch.int8)
    odd_stride[:, :44] = b
    cases = {"N % 4": b[:, :42], "start": wide[:, 3:47], "row stride": odd_stride[:, :44],
             "(N, K).T": b.T.contiguous().T}
    for name, given in cases.items():
        c, words = run(a, given, 2, SMALL_TILES[0] + ("int8-words",))
        assert not words and np.array_equal(c.numpy().astype(np.int64), int64_product(a, given)), name
    c, words = run(a, b, 1, (16, 8, 32, 1, 2, 1, "int8-words-ahead"))
    assert not words and np.array_equal(c.numpy().astype(np.int64), int64_product(a, b))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_words_through_the_rung(monkeypatch):
    """A row-major table whose rows name the words products is what tilemm.matmul runs."""
    import tilemm
    for product in WORDS:
        monkeypatch.setattr(small_m, "ROW_TILES", ((None, SMALL_TILES[0] + (product,)),))
        a, b = row_major(3, 40, 100, 7)
        got = tilemm.matmul(a, b, out_dtype="int32", kernel="tensorcore-int", small_m=True, split_k=2)
        assert np.array_equal(got.numpy().astype(np.int64), int64_product(a, b)), product


def test_words_products_are_int8_products():
    for product in WORDS:
        assert small_m.product_of((16, 32, 96, 1, 2, 1, product)) == product      # no 16-bit chunk to divide
    assert set(WORDS) < set(small_m.INT8_PRODUCTS) < set(small_m.PRODUCTS)


def test_the_probe_tries_only_tiles_the_words_program_takes():
    """benchmarks/int8_words_probe.py's candidates: words tiles launcher() takes (BLOCK_N of 16,
    BLOCK_K of 32), a class for each of its M, both products and split K both ways."""
    from .benchmark_scripts import load
    probe = load("int8_words_probe")
    assert set(probe.WORDS) == set(WORDS) and {probe.class_of(m) for m in probe.MS} == set(probe.WORDS_TILES)
    for rows, candidates in probe.WORDS_TILES.items():
        for tiles in candidates:
            assert len(tiles) == 6 and tiles[1] % 16 == 0 and tiles[2] % 32 == 0, (rows, tiles)
            assert all(small_m.product_of(tiles + (product,)) == product for product in WORDS)
            assert rows is None or tiles[0] <= rows, (rows, tiles)


def prmt(a: int, b: int, selector: int) -> int:
    """PTX's prmt.b32 (default mode): byte i of the result is byte (selector's nibble i) & 7 of b:a."""
    pool = [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]
    return sum(pool[(selector >> 4 * i) & 7] << 8 * i for i in range(4))


def test_the_prmt_turn_is_the_integer_turn():
    """turn_over_prmt's eight prmt.b32 (the GPU's turn, which Triton's interpreter can't run),
    emulated on random words: byte i of word j out is byte j of word i in, as turn_over_4x4
    computes in integers."""
    from tilemm.ladder.tensorcore import r11_int8_words_kernel as kernel
    source = inspect.getsource(kernel.turn_over_prmt.fn)          # (the jitted or interpreted function's)
    steps = re.findall(r"prmt\.b32 (\S+), (\S+), (\S+), (0x[0-9a-f]+);", source)
    assert len(steps) == 8
    rng = np.random.default_rng(3)
    for words in rng.integers(0, 2**32, (200, 4), dtype=np.uint64).tolist() + [[0x80FF7F01] * 4]:
        registers = {f"${4 + i}": w for i, w in enumerate(words)}
        for out, x, y, selector in steps:
            registers[out] = prmt(registers[x], registers[y], int(selector, 16))
        for j in range(4):
            assert registers[f"${j}"] == sum(((words[i] >> 8 * j) & 0xFF) << 8 * i for i in range(4))


COMPILE = r"""
import json
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.ladder.tensorcore.r11_int8_small_m_kernel import small_m_matmul
from tilemm.engine.availability import H100_SHARED_OPTIN
from tests.compiled import resource_usage


def build(tiles, words, ahead, prmt):
    # B row-major as a launch specializes it: split K, pointers, N, K and the row strides divisible
    # by 16, stride_bn 1
    bm, bn, bk, warps, stages = tiles
    sig = dict(a_ptr="*i8", b_ptr="*i8", c_ptr="*i32", M="i32", N="i32", K="i32", stride_am="i32",
               stride_ak="constexpr", stride_bk="i32", stride_bn="constexpr", stride_cm="i32", stride_cn="constexpr",
               BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", EVEN_K="constexpr",
               B_ROWS="constexpr", B_AHEAD="constexpr", B_WORDS="constexpr", TURN_PRMT="constexpr",
               split_steps="i32", ws_ptr="*fp32", counts_ptr="*i32")
    const = dict(stride_ak=1, stride_bn=1, stride_cn=1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=True, B_ROWS=True,
                 B_AHEAD=ahead, B_WORDS=words, TURN_PRMT=prmt)
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(sig) if name in (
        "a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bk", "stride_cm", "ws_ptr")}
    k = triton.compile(ASTSource(fn=small_m_matmul, signature=sig, constexprs=const, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    ptx = k.asm["ptx"]
    count = lambda pattern: len(re.findall(pattern, ptx))
    return dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=count(r"wgmma\.mma_async"),
                mma=count(r"mma\.sync"), st_b8=count(r"st\.shared\.[bu]8"), st_b32=count(r"st\.shared\.[bu]32"),
                ld_b8=count(r"ld\.shared\.[bu]8"), prmt=count(r"\bprmt\.b32"),
                byte_loads=count(r"ld\.global(?:\.\w+)*\.[bsu]8\b"), **resource_usage(k.asm["cubin"]))


out = {}
for tiles in ((64, 128, 128, 4, 4), (128, 64, 128, 4, 4), (32, 128, 64, 4, 5)):
    out[f"{tiles} bytes"] = build(tiles, False, tiles[0] >= 64, False)
    for ahead in (False, True):
        out[f"{tiles} words{' ahead' if ahead else ''}"] = build(tiles, True, ahead, True)
    out[f"{tiles} words integers"] = build(tiles, True, True, False)
print(json.dumps(out))
"""


@pytest.mark.skipif(ON_GPU, reason="compile-only tier: the GPU runs the programs")
def test_words_compile_for_sm90_into_word_stores():
    """Compiled for sm_90 (split K's hand-over too): where the byte program turns B over a byte a
    shared-memory access (st.shared.b8 on its way to wgmma; ld.shared.b8 out of mma.sync's
    stages), the words program does neither: its turned tile goes to shared memory as 32-bit
    words, the turn eight prmt.b32 for 16 bytes (the integer form too, as ptxas makes it), B read
    from global memory in words, in the shared memory the GPU has, no registers spilled."""
    out = run_program(COMPILE)
    assert len(out) == 12
    for name, k in out.items():
        assert 0 < k["shared"] <= k["limit"] and not k["byte_loads"] and k["stack"] == 0, (name, k)
        wgmma = name.startswith("(64") or name.startswith("(128")
        assert k["wgmma"] if wgmma else k["mma"], (name, k)
        if name.endswith("bytes"):
            assert (k["st_b8"] if wgmma else k["ld_b8"]) >= 64, (name, k)
        else:
            assert k["st_b8"] == 0 and k["ld_b8"] == 0 and k["st_b32"] >= 16 and k["prmt"] >= 32, (name, k)


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [(64, 128, 128, 4, 4, 1), (128, 64, 128, 4, 4, 1), (128, 128, 128, 8, 4, 1),
                                   (32, 128, 64, 4, 5, 1), (16, 128, 64, 4, 6, 1)])
@pytest.mark.parametrize("product", WORDS)
def test_words_exact_on_the_gpu(tiles, product):
    """The words programs (prmt.b32 turn) against torch's exact int32 product: M from 1 to 256, N
    a multiple of 4 not of the tile, K not of the step, split K and not, a column slice of a wider
    B, random values and the extremes."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    for m, n, k in ((1, 1004, 4096 + 36), (17, 1028, 1000), (100, 4096, 4096), (256, 516, 2048)):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=gen)
        wide = torch.randint(-128, 128, (k, n + 20), dtype=torch.int8, device="cuda", generator=gen)
        wide[:, 8:16] = -128
        wide[::7, 16:24] = 127
        for b in (wide[:, 8:n + 8].contiguous(), wide[:, 8:n + 8]):
            expected = (a.double() @ b.double()).long()
            for runs in (1, 3):
                c = torch.full((m, n), -123456789, dtype=torch.int32, device="cuda")
                launch = small_m.launcher(a, b, c, runs, tiles=tiles + (product,))
                launch()
                assert launch.options["B_WORDS"] and torch.equal(c.long(), expected), (m, n, k, runs, b.stride())
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("product", WORDS)
def test_words_through_the_default_on_the_gpu(monkeypatch, product):
    """A row-major table whose rows name a words product, as the tables may come to: tilemm.matmul
    on a row-major B, its repeated calls (the replay) on new operands too, exact; and a B whose
    start is off 4 bytes, which the same table runs as bytes."""
    import tilemm
    monkeypatch.setattr(small_m, "ROW_TILES", ((64, (32, 128, 64, 4, 5, 1, product)),
                                               (None, (128, 64, 128, 4, 4, 1, product))))
    gen = torch.Generator(device="cuda").manual_seed(5)
    for m, n, k in ((17, 4096, 4096), (100, 2048, 1000), (256, 1028, 3072)):
        wide = torch.randint(-128, 128, (k, n + 8), dtype=torch.int8, device="cuda", generator=gen)
        for b in (wide[:, :n].contiguous(), wide[:, 4:n + 4], wide[:, 3:n + 3]):
            for _ in range(3):
                a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=gen)
                c = tilemm.matmul(a, b, out_dtype="int32")
                assert torch.equal(c.long(), (a.double() @ b.double()).long()), (m, n, k, b.stride(), b.data_ptr() % 16)
    torch.cuda.synchronize()
