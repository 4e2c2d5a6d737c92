"""The Triton rung under TRITON_INTERPRET=1 (set by conftest) with CPU torch tensors at small odd
shapes against a float64 reference, plus a compile-only tier: every default configuration is
compiled for sm_90 (PTX and cubin) on this CPU machine and its shared memory checked."""
import json

import numpy as np
import pytest
import torch

import tilemm
from tilemm.numerics.accuracy import compare
from tilemm.ladder import record as kernel_record
from tilemm.engine import launches, workspaces
from tilemm.engine import availability, operand_copies

from .compiled import run_program
from .conftest import ON_GPU

SMALL = dict(block_m=16, block_n=16, block_k=16, num_warps=1, num_stages=1)
DTYPES = [torch.float16, torch.bfloat16]


def run(a, b, **params):
    c = tilemm.plan(a, b, kernel="tensorcore", **(params or SMALL)).execute(poison=True)
    host = lambda x: x.float().cpu().numpy()  # noqa: E731
    return c, compare(host(c), host(a), host(b), str(a.dtype).removeprefix("torch."))


def laid_out(m, n, k, layout, dtype):
    """Random A (m, k) and B (k, n) on the CPU, each a transposed view where layout says "t"."""
    a = torch.randn(k, m, dtype=dtype).T if layout[0] == "t" else torch.randn(m, k, dtype=dtype)
    b = torch.randn(n, k, dtype=dtype).T if layout[1] == "t" else torch.randn(k, n, dtype=dtype)
    return a, b


@pytest.mark.skipif(ON_GPU, reason="interpreter tests: on the GPU the conformance table covers this rung")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 9), (40, 7, 65), (3, 5, 0), (0, 4, 3), (33, 70, 48)])
def test_interpreter_odd_shapes(dtype, m, n, k):
    torch.manual_seed(m * 100 + n * 10 + k)
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    c, verdict = run(a, b)
    assert c.dtype == dtype and c.shape == (m, n) and verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("kernel,dtype", [("tensorcore", np.float16), ("tensorcore-int", np.int8),
                                          ("tensorcore-f64", np.float64), ("tensorcore-f32", np.float32)])
@pytest.mark.parametrize("m,n,k", [(3989, 2231, 0), (8, 8192, 0), (0, 0, 120), (0, 0, 0), (0, 7, 5000)])
def test_interpreter_empty_products_past_the_tile_table(kernel, dtype, m, n, k):
    """Empty products where planning could divide by zero (K = 0 at 3989 x 2231 fp16,
    the tile model's K steps; M = N = 0, K = 120 bf16, the skinny tiles' cover): NumPy's answer."""
    rng = np.random.default_rng(m + n + k)
    a = np.ascontiguousarray(rng.integers(-3, 4, (k, m)).astype(dtype)).T
    b = rng.integers(-3, 4, (k, n)).astype(dtype)
    c = tilemm.plan(a, b, kernel=kernel).execute(poison=True)
    expected = np.matmul(a, b)
    assert c.dtype == expected.dtype and c.shape == (m, n) and not c.any()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("m,n,k,layout", [(65, 97, 40, "nn"), (130, 70, 33, "tt"), (80, 66, 17, "nt"),
                                          (67, 129, 64, "tn"), (66, 68, 24, "tn"), (70, 72, 20, "nt")])
def test_interpreter_tma_programs_any_layout(dtype, persistent, m, n, k, layout):
    """M, N > 64 take the TMA programs (persistent: 4 programs walk the tiles here); C's rows of
    97, 70, 68 and 72 elements are stored 1, 2, 4 and 8 at a time (C_ALIGN)."""
    torch.manual_seed(m + n + k)
    a, b = laid_out(m, n, k, layout, dtype)
    c, verdict = run(a, b, **SMALL, persistent=persistent, tma=True)
    assert c.shape == (m, n) and verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("width", [70, 72, 73])
def test_interpreter_tma_programs_into_rows_of_another_width(width, persistent):
    """C a view of wider rows (row stride 70, 72 or 73, width 68): the TMA programs are told what
    both divide by (c_alignment: 2, 4, 1), write C's 68 columns and nothing past them."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    torch.manual_seed(width)
    m, n, k = 66, 68, 24
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    rows = torch.full((m, width), 7.0, dtype=torch.float16)
    c = rows[:, :n]
    steps = r10_tensorcore.bind(a, b, c, 16, 16, 16, 8, 1, 1, persistent=persistent, tma=True)
    assert steps.launches[-1].options["C_ALIGN"] == {70: 2, 72: 4, 73: 1}[width]
    steps()
    verdict = compare(c.float().numpy(), a.float().numpy(), b.float().numpy(), "float16")
    assert verdict.ok, verdict.message
    assert bool((rows[:, n:] == 7.0).all())


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("rung", ["fp8", "int8"])
@pytest.mark.parametrize("width", [70, 72, 73])
def test_interpreter_fp8_and_int8_programs_into_rows_of_another_width(rung, width):
    """The fp8 program with float32 C and the int8 one are told C's alignment too (c_alignment:
    2, 4, 1 for rows of 70, 72, 73), write C's 68 columns and nothing past them."""
    from tilemm.ladder.tensorcore import r11_int_digits, scaled_fp8
    torch.manual_seed(width)
    m, n, k = 66, 68, 32
    if rung == "int8":
        a, b = torch.randint(-128, 128, (m, k), dtype=torch.int8), torch.randint(-128, 128, (k, n), dtype=torch.int8)
        rows = torch.full((m, width), 7, dtype=torch.int32)
        steps = launches.Steps([r11_int_digits.persistent_int8(a, b.T.contiguous(), rows[:, :n], m, n, k, 32, 32, 32, 8,
                                                             4, 2)])
    else:
        a, b = torch.randn(m, k).to(torch.float8_e4m3fn), torch.randn(k, n).to(torch.float8_e4m3fn)
        rows = torch.full((m, width), 7.0)
        one = torch.ones(1)
        steps = scaled_fp8.bind(a, b, rows[:, :n], one, one, False, 32, 32, 32, 8, 4, 2)
    assert steps.launches[-1].options["C_ALIGN"] == {70: 2, 72: 4, 73: 1}[width]
    steps()
    expected, got = a.double() @ b.double(), rows[:, :n].double()
    if rung == "int8":
        assert torch.equal(got, expected)
    else:                                  # float32 sums of 32 products
        assert torch.allclose(got, expected, rtol=0, atol=32 * 2.0**-24 * float((a.double().abs() @ b.double().abs()).max()))
    assert bool((rows[:, n:] == 7).all())


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_interpreter_rows_copied_to_128_byte_alignment(layout):
    """align_rows=True: operands whose rows are not a multiple of 128 bytes (here 66 and 97
    elements) are read through copies whose rows are; the copy is made again at each launch."""
    torch.manual_seed(5)
    m, n, k = 70, 97, 66
    a = torch.randn(k, m, dtype=torch.float16).T if layout[0] == "t" else torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(n, k, dtype=torch.float16).T if layout[1] == "t" else torch.randn(k, n, dtype=torch.float16)
    launch, result = tilemm.plan(a, b, kernel="tensorcore", align_rows=True, tma=True, **SMALL).prepare(poison=True)
    for _ in range(2):                                 # the second launch sees new values in a
        launch()
        verdict = compare(np.asarray(result()), a.numpy(), b.numpy(), "float16")   # CPU tensors in, NumPy out
        assert verdict.ok, verdict.message
        a.mul_(-1)


def test_rows_copied_to_alignment_only_where_it_pays():
    from tilemm.engine.tensorcore_launch import rows_aligned_pays
    assert rows_aligned_pays(5000, 5000, 5000) and rows_aligned_pays(8191, 8191, 8191)
    assert not rows_aligned_pays(3000, 3000, 3000) and not rows_aligned_pays(16, 8192, 8192)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k", [(65, 130, 40),     # 6 tiles, 3 K steps: a run that helps one tile, owns the next
                                   (320, 65, 100),    # 2 whole rounds, then an owner with two helpers
                                   (130, 130, 48),    # 2 whole rounds, one tile shared by three runs
                                   (130, 130, 16)])   # a run that holds a whole tile writes it to C itself
def test_interpreter_stream_k_shares_the_last_round(m, n, k):
    """4 programs here (tilemm.engine.availability.multiprocessors under the interpreter)."""
    torch.manual_seed(m + n + k)
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    tiles = dict(block_m=64, block_n=64, block_k=16, num_warps=4, num_stages=2)
    for stream_k in (True, False):
        c, verdict = run(a, b, **tiles, stream_k=stream_k)
        assert verdict.ok, (stream_k, verdict.message)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_stream_k_with_fewer_tiles_than_programs_leaves_the_whole_rounds_out():
    """A stream-K launch whose tiles are fewer than its programs (4 under the interpreter) runs no
    whole round: its program is compiled without that loop (STREAM_K_ONLY); with a whole round
    before the shared one it keeps it, and the fallback (under CUDA-graph capture) is the plain one."""
    from tilemm.engine.persistent import persistent_launch
    from tilemm.ladder.tensorcore.r10_tensorcore_kernel import tile_steps
    config = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=2)
    for (m, n), only in (((65, 64), True), ((320, 65), False)):        # 2 tiles; 10 tiles: 2 rounds and 2
        c = torch.empty(m, n, dtype=torch.float16)
        launch = persistent_launch(None, None, c, m, n, 32, tile_steps, stream_k=True, **config)
        assert launch.options["STREAM_K"] and launch.options["STREAM_K_ONLY"] is only, (m, n)
        assert "STREAM_K_ONLY" not in launch.fallback.options


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_16_bit_tiles_take_no_stream_k_unless_asked():
    """The persistent program's stream-K hand-over measured slower for 16-bit tiles (stream_k_pays):
    a product of several rounds (4 programs under the interpreter) shares no tile unless asked."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    a, b = torch.randn(300, 96, dtype=torch.float16), torch.randn(96, 300, dtype=torch.float16)
    c = torch.empty(300, 300, dtype=torch.float16)

    def stream_k(**params):
        steps = r10_tensorcore.bind(a, b, c, 64, 64, 32, 8, 4, 2, tma=True, **params)
        (program,) = [s for s in steps.launches if "STREAM_K" in getattr(s, "options", {})]
        return program.options["STREAM_K"]
    assert stream_k() is False and stream_k(stream_k=True) is True


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k,layout,tma,split_k", [
    (40, 30, 300, "nn", False, 3),     # pointer program, 19 K steps in runs of 7, 7, 5
    (33, 17, 257, "tn", False, 16),    # 17 K steps: 16 asked, 9 runs of 2 (no empty run)
    (70, 66, 200, "nt", True, 4),      # TMA program, A and B transposed views
    (65, 97, 49, "tt", True, 2),
    (20, 20, 16, "nn", False, 5),      # one K step: no split
])
def test_interpreter_split_k(dtype, m, n, k, layout, tma, split_k):
    torch.manual_seed(m + n + k)
    a, b = laid_out(m, n, k, layout, dtype)
    c, verdict = run(a, b, **SMALL, tma=tma, split_k=split_k)
    assert c.shape == (m, n) and verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_split_k_by_default_where_tiles_leave_sms_idle():
    """Under the interpreter 4 SMs: one 16 x 16 tile of 32 K steps is split into 4 runs, whose
    partials the last adds into C; a prepared plan does it at each launch, and the tile's count is
    back at 0 after each."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    torch.manual_seed(3)
    a, b = torch.randn(16, 512, dtype=torch.float16), torch.randn(512, 16, dtype=torch.float16)
    steps = r10_tensorcore.bind(a, b, torch.empty(16, 16, dtype=torch.float16), group_m=8, **SMALL)
    assert isinstance(steps.launches[-1], workspaces.SplitKLaunch) and steps.launches[-1].grid == (1, 4)
    launch, result = tilemm.plan(a, b, kernel="tensorcore", **SMALL).prepare(poison=True)
    for _ in range(2):                                 # the second launch sees new values in a
        launch()
        verdict = compare(np.asarray(result()), a.numpy(), b.numpy(), "float16")
        assert verdict.ok, verdict.message
        assert not workspaces.split_k_workspace(-1, None, 1, 4, 16, 16)[1].any()
        a.mul_(-1)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_interpreter_split_k_workspace_grows_and_its_counts_stay_zero():
    """Products one after another on one stream share a workspace: a larger one grows it, a smaller
    one after reuses it, and every launch leaves the tiles' counts at 0 for the next."""
    sizes = []
    for m, n, k, split_k in ((16, 16, 64, 2), (40, 50, 200, 6), (20, 20, 100, 3)):
        torch.manual_seed(m + n + k)
        a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
        c, verdict = run(a, b, **SMALL, tma=False, split_k=split_k)
        assert verdict.ok, (m, n, k, verdict.message)
        partials, counts = workspaces.split_k_workspace(-1, None, 1, 1, 16, 16)
        assert not counts.any()
        sizes.append(partials.numel())
    # 1 tile x 2 runs, then 12 tiles x 5 runs (13 K steps in runs of 3), then kept
    assert sizes[0] >= 2 * 16 * 16 and sizes[1] >= 12 * 5 * 16 * 16 and sizes[2] == sizes[1]


def test_split_k_fills_the_sms_a_round_of_tiles_leaves_idle(monkeypatch):
    from tilemm.engine.tile_model import k_splits
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    assert k_splits(16, 27, 59150, 16, 64, 128) == 48          # one tile, 463 K steps: the partials' reads cap it
    assert k_splits(404, 108, 32491, 64, 128, 64) == 18        # 7 tiles
    assert k_splits(111, 110, 49346, 64, 128, 64) == 24        # 2 tiles: 66 would fill the SMs; the reads cap it
    assert k_splits(20, 20, 4096, 16, 64, 128) == 4            # 32 K steps: runs of 8 or more
    assert k_splits(16, 4096, 4096, 16, 64, 128) == 2          # 64 tiles: half the SMs
    assert k_splits(1024, 1024, 65536, 64, 128, 64) == 1       # 128 tiles: a round fills the SMs
    assert k_splits(100, 100, 64, 64, 64, 64) == 1             # one K step
    assert k_splits(0, 100, 4096, 64, 64, 64) == 1             # an empty block (tilemm.spread.panels' ragged ones)


def test_thin_operands_not_read_k_major_split_k_to_fill_two_rounds(monkeypatch):
    from tilemm.engine.tile_model import read_k_major, thin_splits
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    assert thin_splits(1, 8192, 28672, 16, 64, 128) == 3      # 128 tiles: 3 runs each fill two rounds
    assert thin_splits(1, 5120, 5120, 16, 64, 128) == 3       # 80 tiles would take 4; 40 K steps, runs of 12
    assert thin_splits(1, 8192, 2048, 16, 64, 128) == 1       # 16 K steps: no run of 12 to spare
    assert thin_splits(1, 28672, 8192, 16, 64, 128) == 1      # 448 tiles: over two rounds already
    assert read_k_major(torch.empty(1, 8), 1) and read_k_major(torch.empty(8, 4).T, 0)
    assert not read_k_major(torch.empty(8, 1).T, 1)           # strides (1, 1): read M-major
    assert not read_k_major(torch.empty(8, 4).T, 1) and not read_k_major(torch.empty(8, 4), 0)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("thin", ["row", "transposed column"])
def test_interpreter_thin_operand_read_m_major_splits_k(thin):
    """1 x 256 x 4096 on the interpreter's 4 SMs, in 4 tiles of 16 x 64: A as a row is read K-major
    and takes k_splits (a round of tiles fills the SMs: no split); A as the transpose of a column
    (strides (1, 1)) is split in 2 runs (thin_splits), and its answer is right."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    torch.manual_seed(5)
    row = torch.randn(1, 4096, dtype=torch.float16)                  # strides (4096, 1)
    a = row.reshape(4096, 1).T if thin == "transposed column" else row
    b = torch.randn(4096, 256, dtype=torch.float16)
    steps = r10_tensorcore.bind(a, b, torch.empty(1, 256, dtype=torch.float16), None, None, None, 8, None, None)
    split = isinstance(steps.launches[-1], workspaces.SplitKLaunch)
    assert split == (thin == "transposed column")
    if split:
        assert steps.launches[-1].grid == (4, 2)
        c = tilemm.matmul(a, b, kernel="tensorcore")
        verdict = compare(c.numpy(), a.numpy(), b.numpy(), "float16")
        assert verdict.ok, verdict.message


def test_stream_k_with_split_k_is_refused_before_any_work():
    a = torch.randn(32, 32, dtype=torch.float16)
    with pytest.raises(tilemm.KernelUnavailable, match="takes no split_k"):
        tilemm.plan(a, a, kernel="tensorcore", stream_k=True, split_k=4)
    assert tilemm.plan(a, a, kernel="tensorcore", stream_k=True, split_k=1) is not None


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_interpreter_float64_persistent(layout):
    """More tiles than programs (4 here): the persistent TMA program with float64 sums."""
    from tilemm.numerics.data import operands
    a, b = operands(5, 70, 90, 45, "float64", layout)
    c = tilemm.matmul(a, b, kernel="tensorcore-f64", persistent=True, **SMALL)
    verdict = compare(c, a, b, "float64")
    assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("source, by_triton, word", [
    ("rows of 66", False, "int32"), ("rows of 67", False, None), ("rows of 72", True, None), ("transposed", True, None),
    ("fp8 transposed", True, None), ("fp8 rows of 70", False, None), ("fp8 rows of 68", False, "int32")])
def test_rows_copy_takes_triton_where_it_is_faster(source, by_triton, word, monkeypatch):
    """Into 16-byte aligned rows: Triton's copy_rows for a transposed source or rows already 16-byte
    aligned, torch's copy for rows that are not (no vector loads) from TORCH_COPY_FROM bytes on, of
    int32 views where the rows' bytes allow, and Triton's under it (one launch's CPU); fp8 as the
    others; each copies exactly."""
    from tilemm.engine.launches import BoundLaunch
    from tilemm.engine.operand_copies import rows_copy
    half = torch.float16
    x = {"rows of 66": torch.randn(9, 66, dtype=half), "rows of 67": torch.randn(9, 67, dtype=half),
         "rows of 72": torch.randn(9, 72, dtype=half)[:, :70], "transposed": torch.randn(70, 9, dtype=half).T,
         "fp8 transposed": torch.randn(70, 9).to(torch.float8_e4m3fn).T,
         "fp8 rows of 70": torch.randn(9, 70).to(torch.float8_e4m3fn),
         "fp8 rows of 68": torch.randn(9, 68).to(torch.float8_e4m3fn)}[source]
    rows = torch.zeros(9, 72, dtype=x.dtype)[:, :x.shape[1]]
    assert isinstance(rows_copy(x, rows), BoundLaunch)                  # 9 rows: under TORCH_COPY_FROM
    monkeypatch.setattr(operand_copies, "TORCH_COPY_FROM", x.numel() * x.element_size())
    copy = rows_copy(x, rows)
    assert isinstance(copy, BoundLaunch) == by_triton
    assert by_triton or copy.word == word
    copy()
    assert torch.equal(rows.float(), x.float())


def test_small_products_take_the_pointer_program():
    """tma=None: up to POINTERS_UP_TO multiply-adds the pointer program (cheaper to launch), past
    it the TMA programs but for a C of few tiles (a deep K); tma=True or False says which whatever
    the size."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    from tilemm.engine import tensorcore_launch
    from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_kernel
    tiles = dict(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=2)

    def program(m, n, k, **params):
        a, b = torch.empty(m, k, dtype=torch.float16), torch.empty(k, n, dtype=torch.float16)
        return r10_tensorcore.bind(a, b, torch.empty(m, n, dtype=torch.float16), **tiles, **params).launches[-1].program
    assert 512 * 512 * 512 <= tensorcore_launch.POINTERS_UP_TO < 1024 * 512 * 1024
    assert program(512, 512, 512) is matmul_kernel
    assert program(1024, 1024, 512) is not matmul_kernel
    assert program(404, 108, 32491) is matmul_kernel                     # 4 tiles of 128 x 128
    assert program(395, 292, 12981) is not matmul_kernel                 # 12
    assert program(512, 512, 512, tma=True) is not matmul_kernel
    assert program(1024, 1024, 512, tma=False) is matmul_kernel


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_prepared_plan_reads_operands_at_each_launch():
    """A bound launcher keeps its descriptors; a copy into aligned rows (rows of 130 fp16 are
    260 bytes) must still be made at each launch, from the operand's current values."""
    a, b = torch.randn(70, 33, dtype=torch.float16), torch.randn(33, 130, dtype=torch.float16)
    launch, result = tilemm.plan(a, b, kernel="tensorcore", tma=True, **SMALL).prepare(poison=True)
    launch()
    first = np.array(result())
    a.mul_(2)
    b[0].zero_()
    launch()
    assert compare(result().astype(np.float32), a.float().numpy(), b.float().numpy(), "float16").ok
    assert not np.array_equal(first, result())


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreter_transposed_views_and_nan(dtype):
    a = torch.randn(37, 19, dtype=dtype).T           # (19, 37), column-major
    b = torch.randn(29, 37, dtype=dtype).T           # (37, 29)
    a[3, 5] = float("nan")
    c, verdict = run(a, b)
    assert verdict.ok, verdict.message
    assert torch.isnan(c[3]).all() and not torch.isnan(c[4]).any()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 9), (40, 7, 65)])
def test_interpreter_float64(m, n, k):
    from tilemm.numerics.data import operands
    a, b = operands(m * n + k, m, n, k, "float64", "tn")
    c = tilemm.plan(a, b, kernel="tensorcore-f64", **SMALL).execute(poison=True)
    assert c.dtype == np.float64
    verdict = compare(c, a, b, "float64")
    assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (17, 33, 9, "tn"), (40, 7, 65, "nt"), (3, 5, 0, "nn"),
                                          (24, 20, 48, "tt"), (9, 9, 16, "nn")])
def test_interpreter_3xtf32_is_float32_accurate(m, n, k, layout, direct):
    """3xTF32 in one launch (the parts split in registers) and by split passes (the parts written K-major)."""
    from tilemm.numerics.data import operands
    a, b = operands(m + n + k, m, n, k, "float32", layout)
    c = tilemm.plan(a, b, kernel="tensorcore-f32", direct=direct, **SMALL).execute(poison=True)
    assert c.dtype == np.float32
    verdict = compare(c, a, b, "float32")
    assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_3xtf32_split_is_exact_and_rounds_to_nearest():
    """hi has TF32's 10 mantissa bits, rounded to nearest; hi + lo == x exactly; Inf and NaN are
    kept whole, with no low part."""
    from tilemm.ladder.tensorcore.r13_f32_kernel import split_tf32
    x = torch.tensor([[1 + 2**-11 + 2**-13, -(1 + 2**-10 - 2**-14), 3.0e38, 1e-40, 0.1, -7.3e-5, 5.0, 2**-30]],
                     dtype=torch.float32)
    out = torch.empty((2, 1, 8), dtype=torch.float32)
    split_tf32[(1, 1)](x, out, 1, 8, 8, 8, 1, 0, PARTS=2, BLOCK_R=16, BLOCK_C=16)
    hi, lo = out[0, 0], out[1, 0]
    assert torch.equal(hi + lo, x[0])
    assert hi[0].item() == 1 + 2**-10 and hi[1].item() == -(1 + 2**-10)        # nearest, not truncated
    assert (hi.view(torch.int32) & 0x1FFF == 0).all()                          # 10 mantissa bits left
    x[0, 3] = float("inf")
    split_tf32[(1, 1)](x, out, 1, 8, 8, 8, 1, 0, PARTS=2, BLOCK_R=16, BLOCK_C=16)
    assert out[0, 0, 3].item() == float("inf") and out[1, 0, 3].item() == 0


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("parts", [1, 2])
def test_split_down_columns_writes_what_the_split_across_rows_does(parts):
    """down=1 reads x's tiles down its columns (B^T of a row-major B, strides given outer then
    inner): the same parts, K padded with zeros, as x's rows copied and split across."""
    from tilemm.ladder.tensorcore.r13_f32_kernel import split_tf32
    rows, cols, pad = 19, 37, 40
    x = torch.randn((cols, rows), dtype=torch.float32, generator=torch.Generator().manual_seed(3)).T   # strides (1, 19)
    across, down = (torch.full((parts, rows, pad), 7.0) for _ in range(2))
    split_tf32[(2, 3)](x.contiguous(), across, rows, cols, pad, cols, 1, 0, PARTS=parts, BLOCK_R=16, BLOCK_C=16)
    split_tf32[(2, 3)](x, down, rows, cols, pad, x.stride(1), x.stride(0), 1, PARTS=parts, BLOCK_R=16, BLOCK_C=16)
    assert torch.equal(across, down) and not down[:, :, cols:].any()
    assert torch.equal(down.sum(0)[:, :cols], x)


def assert_ieee_nan_and_inf(c, a, b):
    """NaN and Inf in c where a float64 product of a and b has them."""
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(ref))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("direct,k", [(True, 17), (False, 17), (None, 11)])   # K < 16: IEEE float32
def test_3xtf32_inf_and_nan_propagate_as_ieee(direct, k):
    from tilemm.numerics.data import operands
    a, b = operands(4, 9, 10, k, "float32")
    a[2, 4], a[5, 0], b[3, 7] = np.nan, np.inf, -np.inf
    b[0, 3] = 0.0                      # inf * 0 is NaN in IEEE as well; elsewhere b's low parts have both signs
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", direct=direct, **SMALL)
    assert_ieee_nan_and_inf(c, a, b)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("direct", [True, False])
def test_3xtf32_chunks_of_k_steps(monkeypatch, direct):
    """3xTF32 sums a chunk of K steps on the tensor cores, then adds it in float32: with chunks
    of 2 steps of 16, K = 70 is chunks of 2, 2 and 1 steps (the last one partial). Float32's
    bound holds, and Inf and NaN, one in each of two chunks, land where IEEE puts them."""
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore import r13_f32
    monkeypatch.setattr(r13_f32, "CHUNK_STEPS", 2)
    monkeypatch.setattr(r13_f32, "MIN_CHUNKS", 1)
    a, b = operands(5, 12, 9, 70, "float32")
    c = tilemm.plan(a, b, kernel="tensorcore-f32", direct=direct, **SMALL).execute(poison=True)
    verdict = compare(c, a, b, "float32")
    assert verdict.ok, verdict.message
    a[2, 4], a[5, 40], b[65, 7] = np.nan, np.inf, -np.inf
    b[40, 3] = 0.0                     # inf * 0 is NaN in IEEE as well
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", direct=direct, **SMALL)
    assert_ieee_nan_and_inf(c, a, b)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k", [(40, 70, 100),    # 15 tiles: 3 rounds of 4, then 3 tiles of 7 steps in 4 runs
                                   (33, 33, 48),     # 2 rounds, then one tile of 3 steps shared by 3 runs
                                   (20, 20, 16),     # whole rounds only
                                   (20, 16, 100)])   # 2 tiles for 4 programs: no whole round (STREAM_K_ONLY)
def test_interpreter_3xtf32_stream_k(monkeypatch, m, n, k):
    """3xTF32 on the persistent program, a last partial round shared out by K steps: chunks of 2
    steps, which a run's share cuts; float32's bound holds, and Inf and NaN land where IEEE puts
    them. 4 programs here (multiprocessors under the interpreter)."""
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore import r13_f32
    monkeypatch.setattr(r13_f32, "CHUNK_STEPS", 2)
    monkeypatch.setattr(r13_f32, "MIN_CHUNKS", 1)
    a, b = operands(m + k, m, n, k, "float32")
    c = tilemm.plan(a, b, kernel="tensorcore-f32", stream_k=True, **SMALL).execute(poison=True)
    verdict = compare(c, a, b, "float32")
    assert verdict.ok, verdict.message
    a[2, 4], a[m - 1, k - 3], b[k // 2, n - 1] = np.nan, np.inf, -np.inf
    b[k - 3, 3] = 0.0                  # inf * 0 is NaN in IEEE as well
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", stream_k=True, **SMALL)
    assert_ieee_nan_and_inf(c, a, b)


def test_3xtf32_chunks_leave_k_eight_of_them():
    from tilemm.ladder.tensorcore.r13_f32 import chunk_steps
    assert [chunk_steps(k, 32) for k in (1, 255, 256, 512, 1024, 2048, 3000, 4096, 65536)] == [1, 1, 1, 2, 4, 8, 8, 16, 16]


def int8_precision_bound(a, b, c):
    """precision="int8"'s normwise bound (r13_f32.py), (error, bound) against float64: each input
    off by under 1/FIXED_TOP of its row's (column's) largest, r_i (c_j), from rounding to fixed
    point; the dropped shifts 0 and 1, |d0 e0 + 2^8 (d0 e1 + d1 e0)| <= 513 * 2^14 a product in
    units of 2^-(e_i + f_j) < r_i c_j / (FIXED_TOP / 2)^2; and float32's one rounding."""
    from tilemm.ladder.tensorcore.r13_f32_int8 import FIXED_TOP
    a64, b64 = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    r, col = a64.max(1, initial=0)[:, None], b64.max(0, initial=0)[None, :]
    k = a.shape[1]
    rounding = (r * b64.sum(0)[None, :] + col * a64.sum(1)[:, None] + k * r * col / FIXED_TOP) / FIXED_TOP
    dropped = k * r * col * 513 * 2.0**14 / (FIXED_TOP / 2) ** 2
    return np.abs(c.astype(np.float64) - ref), rounding + dropped + 2.0**-24 * 1.001 * np.abs(ref) + np.finfo(np.float32).tiny


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (17, 33, 9, "tn"), (40, 7, 65, "nt"), (3, 5, 0, "nn"),
                                          (24, 20, 48, "tt"), (0, 4, 3, "nn"), (70, 36, 130, "nn")])
def test_interpreter_int8_precision_within_its_bound(m, n, k, layout):
    from tilemm.numerics.data import operands
    a, b = operands(m + n + k, m, n, k, "float32", layout)
    a[::3] *= 2.0**40                        # rows and columns of their own scales, far apart
    b[:, 1::4] *= 2.0**-70
    c = tilemm.plan(a, b, kernel="tensorcore-f32", precision="int8", **SMALL).execute(poison=True)
    assert c.dtype == np.float32 and c.shape == (m, n)
    err, bound = int8_precision_bound(a, b, c)
    assert (err <= bound).all()
    assert c.size == 0 or (err > 0).any() or k <= 1      # it does round the inputs: the test can see that


@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_int8_precision_is_the_fixed_point_product_of_its_shifts(layout):
    """Bit for bit what the method says, emulated in NumPy: inputs rounded to fixed point, their
    base-256 digits, the pairs of shifts 2..4 summed exactly, scaled back, rounded once. In the
    interpreter (the Triton program, then a scaling pass) and on the GPU (on Hopper the Gluon
    program, scaling in its epilogue)."""
    from tilemm.numerics import digits
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore.r13_f32_int8 import FIXED_DIGITS, FIXED_LOWEST_SHIFT, fixed_scales
    a, b = operands(11, *((300, 260, 700) if ON_GPU else (23, 19, 70)), "float32", layout)
    a[1] *= 2.0**-30
    scale_a = fixed_scales(torch.from_numpy(a))[0].numpy()[:, None]
    scale_b = fixed_scales(torch.from_numpy(b).T)[0].numpy()[None, :]
    da = digits.split(np.floor(a.astype(np.float64) * scale_a + 0.5).astype(np.int64), FIXED_DIGITS).astype(np.int64)
    db = digits.split(np.floor(b.astype(np.float64) * scale_b + 0.5).astype(np.int64), FIXED_DIGITS).astype(np.int64)
    exact = sum((da[i] @ db[s - i]) << (8 * s) for s in range(FIXED_LOWEST_SHIFT, 2 * FIXED_DIGITS - 1)
                for i in digits.shift_pairs(s, FIXED_DIGITS, FIXED_DIGITS))
    want = (exact.astype(np.float64) / scale_a / scale_b).astype(np.float32)
    if ON_GPU:
        got = tilemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), kernel="tensorcore-f32",
                            precision="int8").cpu().numpy()
    else:
        got = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_int8_precision_uses_the_digits_whole_range():
    """Rows whose largest element lies at the edge of the fixed-point range, of either sign, and
    subnormal, huge and all-zero rows: no digit overflows (that would be an error of 2^24 units)."""
    top = np.float32(1.0) - np.float32(2.0**-24)              # mantissa just under 1: scaled one bit lower
    a = np.array([[top, -top, 0.5, 0.25], [-top, top, -0.75, 0.125], [1e-40, -3e-41, 0, 0],
                  [3e38, -1e38, 2e38, 1], [0, 0, 0, 0], [0.99607843, -0.99607843, 0.5, 0.3]], np.float32)
    b = np.array([[top, 1.0], [-top, -2.0**-20], [0.5, 0.25], [0.75, -top]], np.float32)
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    err, bound = int8_precision_bound(a, b, c)
    assert np.isfinite(c[:3]).all() and (err[[0, 1, 2, 4, 5]] <= bound[[0, 1, 2, 4, 5]]).all()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(np.isinf(c[3]), np.isinf((a[3:4].astype(np.float64) @ b).astype(np.float32))[0])


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_fixed_scales_bring_each_row_to_23_bits():
    from tilemm.ladder.tensorcore.r13_f32_int8 import FIXED_TOP, fixed_scales
    rng = np.random.default_rng(3)
    x = torch.from_numpy((rng.standard_normal((200, 7)) * 2.0 ** rng.integers(-140, 120, (200, 1))).astype(np.float32))
    x[0] = 0
    x[1, 0] = 0.99999994
    scale, top = fixed_scales(x)
    scaled = top.double() * scale
    assert scale.dtype == torch.float64 and scaled[0] == 0
    assert ((scaled[1:] > FIXED_TOP / 2) & (scaled[1:] <= FIXED_TOP)).all()
    assert torch.equal(torch.log2(scale), torch.log2(scale).round())      # powers of two: scaling is exact


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_int8_precision_inf_and_nan_follow_ieee():
    """Fixed point holds no Inf or NaN: the tiles of C they reach are computed again in IEEE float32."""
    from tilemm.numerics.data import operands
    a, b = operands(4, 9, 10, 11, "float32")
    a[2, 4], b[3, 7] = np.nan, -np.inf
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    assert_ieee_nan_and_inf(c, a, b)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_int8_precision_long_k_in_pieces(monkeypatch):
    """K past FIXED_K (int64 could overflow) runs in pieces, each its own fixed-point product
    (scales of its own), added in float32; Inf and NaN still land where IEEE puts them."""
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore import r13_f32
    monkeypatch.setattr(r13_f32, "FIXED_K", 48)
    a, b = operands(6, 9, 10, 150, "float32")
    a[:, 100:] *= 2.0**30                  # a piece of its own scale
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    err, bound = int8_precision_bound(a, b, c)
    assert (err <= bound).all()
    a[3, 120], b[5, 7] = np.inf, np.nan
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    assert_ieee_nan_and_inf(c, a, b)


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_int8_precision_k_chunks_accumulate(monkeypatch):
    """K past one exact chunk: the chunks' int64 products add up before the scaling back."""
    from tilemm.numerics import digits
    from tilemm.numerics.data import operands
    monkeypatch.setattr(digits, "exact_chunk", lambda pairs: 40)
    a, b = operands(5, 9, 10, 150, "float32")
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="int8", **SMALL)
    err, bound = int8_precision_bound(a, b, c)
    assert (err <= bound).all()


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("persistent", [False, True])
def test_interpreter_tf32_within_tf32_error(persistent):
    """persistent: 20 tiles for the interpreter's 4 programs, on the 16-bit rung's program."""
    from tilemm.numerics.data import operands
    a, b = operands(8, 70, 66, 70, "float32", "tn")
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision="tf32", persistent=persistent, **SMALL)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert (np.abs(c - ref) <= 2 * 2.0**-10 * scale + 2.0**-24 * np.abs(ref)).all()   # TF32 inputs, float32 sums


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("precision,panels,n", [("tf32", 3, 70), ("3xtf32", 3, 70), ("tf32", 8, 20), ("3xtf32", 2, 33)])
def test_interpreter_b_copied_in_panels(precision, panels, n, monkeypatch):
    """B written K-major a panel of columns at a time, each panel's product on its own (the
    last panel narrower, more panels asked for than there are tiles): the same answer."""
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore import r13_f32
    calls = []
    by_panel = r13_f32.products_by_panel
    monkeypatch.setattr(r13_f32, "products_by_panel", lambda *args: calls.append(args[4]) or by_panel(*args))
    a, b = operands(9, 37, n, 41, "float32", "nn")
    c = tilemm.plan(a, b, kernel="tensorcore-f32", precision=precision, copy_panels=panels,
                    **SMALL).execute(poison=True)
    whole = tilemm.matmul(a, b, kernel="tensorcore-f32", precision=precision, copy_panels=1, **SMALL)
    np.testing.assert_array_equal(c, whole)
    assert calls == [panels]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert (np.abs(c - ref) <= 2 * 2.0**-10 * scale + 2.0**-24 * np.abs(ref)).all()
    if precision == "3xtf32":
        verdict = compare(c, a, b, "float32")
        assert verdict.ok, verdict.message


def test_panels_pay_by_the_products_size():
    """As measured on the H100 (132 SMs, 128 x 256 tiles): 4 panels at 4096³ and 8192³, none
    where panels would add a round of the SMs (5000³) or the product is too small to hide them."""
    from tilemm.ladder.tensorcore.r13_f32 import panel_bounds, panels_pay
    def pay(n):
        return panels_pay(n, n, n, 128, 256, 132)
    assert pay(1000) == 1 and pay(3000) == 1 and pay(5000) == 1
    assert pay(4096) == 4 and pay(8192) == 4 and pay(6144) == 3
    assert panels_pay(8192, 8192, 8192, 128, 256, 100) < 4     # 4 panels of 512 tiles: 6 rounds each, 21 whole
    assert panel_bounds(70, 3, 16) == [(0, 32), (32, 64), (64, 70)] and panel_bounds(20, 8, 16) == [(0, 16), (16, 20)]


@pytest.mark.parametrize("kernel,dtype", [("tensorcore", np.float16), ("tensorcore-f32", np.float32),
                                          ("tensorcore-int", np.int8)])
def test_numpy_operands_reversed_or_read_only(kernel, dtype):
    """NumPy views with negative strides (a[::-1]) and read-only arrays: torch takes neither as it
    is (a ValueError from torch.from_numpy, a UserWarning), so the Triton rungs copy them."""
    import warnings
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((37, 29)) * 20).astype(dtype)[::-1]
    b = (rng.standard_normal((41, 29)) * 20).astype(dtype).T[:, ::-1]
    frozen = a.copy()
    frozen.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for x, y in ((a, b), (frozen, b)):
            c = tilemm.matmul(x, y, kernel=kernel)
            if np.dtype(dtype).kind == "i":
                np.testing.assert_array_equal(c, np.matmul(x, y))
            else:
                verdict = compare(c, x, y, np.dtype(dtype).name)
                assert verdict.ok, verdict.message


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_numpy_float16_in_numpy_out():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((21, 34)).astype(np.float16)
    b = rng.standard_normal((34, 13)).astype(np.float16)
    c = tilemm.matmul(a, b, kernel="tensorcore", **SMALL)
    assert isinstance(c, np.ndarray) and c.dtype == np.float16
    assert compare(c, a, b, "float16").ok


def test_float32_is_not_claimed():
    """Refused before any work, with the rungs of its device that compute the dtype named (a
    GPU rung's refusal named the host's NumPy)."""
    a = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="does not compute float32 .*try kernel='cublas' or 'tensorcore-f32'"):
        tilemm.plan(a, a, kernel="tensorcore")
    with pytest.raises(TypeError, match="does not compute complex64 .*try kernel='cublas' or 'tensorcore-complex'"):
        tilemm.plan(a.astype(np.complex64), a.astype(np.complex64), kernel="tensorcore-f32")
    with pytest.raises(TypeError, match=r"float128 .*try kernel='numpy', or no kernel"):
        tilemm.plan(a.astype(np.longdouble), a.astype(np.longdouble), kernel="cublas")


def test_shared_memory_refused_before_compiling():
    a = torch.ones(64, 64, dtype=torch.float16)
    with pytest.raises(tilemm.KernelUnavailable, match="bytes of shared memory"):
        tilemm.plan(a, a, kernel="tensorcore", block_m=256, block_n=256, block_k=128, num_stages=5)


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import tilemm
from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_kernel, matmul_tma, tile_steps
from tilemm.ladder.tensorcore.r10_tensorcore import default_tiles
from tilemm.engine.availability import H100_SHARED_OPTIN
out = {}


def persistent_signature(a_desc, b_desc, c_ptr, scales="constexpr", workspace="constexpr"):
    # matmul_persistent's signature: its descriptors and C as given, the rest in their types
    flags = ("STEPS", "OPTION", "A_T", "B_T", "STREAM_K", "BLOCK_M", "BLOCK_N", "BLOCK_K",
             "GROUP_M", "PROGRAMS", "UPCAST", "FLATTEN", "ACCUMULATE", "C_ALIGN", "STREAM_K_ONLY", "ROW_SCALES")
    return dict(a_desc=a_desc, b_desc=b_desc, c_ptr=c_ptr, scale_a_ptr=scales, scale_b_ptr=scales,
                ws_ptr=workspace, flags_ptr="*i32" if workspace != "constexpr" else "constexpr", epoch="i32",
                M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32", **dict.fromkeys(flags, "constexpr"))
# tensorcore: the TMA program at the configuration each kind of shape gets, all four layouts
for (m, n), layout in (((8192, 8192), "nn"), ((8192, 8192), "tt"), ((16, 8192), "nt"), ((1000, 1000), "tn"),
                      ((64, 8192), "nn"), ((512, 3072), "nt")):
    for dtype, ty in (("float16", "fp16"), ("bfloat16", "bf16")):
        p = default_tiles(m, n, 2048)
        a_t, b_t = layout[0] == "t", layout[1] == "t"
        a_block = [p["block_k"], p["block_m"]] if a_t else [p["block_m"], p["block_k"]]
        b_block = [p["block_n"], p["block_k"]] if b_t else [p["block_k"], p["block_n"]]
        sig = dict(a_desc=f"tensordesc<{ty}{a_block}>", b_desc=f"tensordesc<{ty}{b_block}>", c_ptr="*" + ty,
                   M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32", A_T="constexpr", B_T="constexpr",
                   BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                   UPCAST="constexpr", ACCUMULATE="constexpr", C_ALIGN="constexpr", split_steps="constexpr", ws_ptr="constexpr",
                   counts_ptr="constexpr")
        const = dict(A_T=a_t, B_T=b_t, BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=8,
                     UPCAST=False, ACCUMULATE=False, C_ALIGN=2 if layout == "tn" else 8, split_steps=None, ws_ptr=None,
                     counts_ptr=None)
        if min(m, n) <= 64:      # skinny products take the pointer program
            sig = dict(a_ptr="*" + ty, b_ptr="*" + ty, c_ptr="*" + ty, M="i32", N="i32", K="i32", stride_am="i32",
                       stride_ak="i32", stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32",
                       BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
                       UPCAST="constexpr",
                       split_steps="constexpr", ws_ptr="constexpr", counts_ptr="constexpr", ALIGN="constexpr")
            const = dict(BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=8, UPCAST=False,
                         split_steps=None, ws_ptr=None, counts_ptr=None,
                         ALIGN=(8,) * 9)
        k = triton.compile(ASTSource(fn=matmul_kernel if min(m, n) <= 64 else matmul_tma, signature=sig,
                                     constexprs=const),
                           target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
        out[f"{dtype}-{m}x{n}-{layout}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                                                wgmma="wgmma" in k.asm["ptx"] or p["block_m"] < 64,  # wgmma: M >= 64
                                                cubin=len(k.asm["cubin"]))
        if layout in ("nn", "nt"):    # split K: float32 partials handed over through a workspace
            ws_sig = {**sig, "split_steps": "i32", "ws_ptr": "*fp32", "counts_ptr": "*i32"}
            ws_const = {name: v for name, v in const.items() if name not in ("split_steps", "ws_ptr", "counts_ptr")}
            k = triton.compile(ASTSource(fn=matmul_kernel if min(m, n) <= 64 else matmul_tma, signature=ws_sig,
                                         constexprs=ws_const), target=GPUTarget("cuda", 90, 32),
                               options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
            out[f"{dtype}-{m}x{n}-split-k"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                                                   wgmma="wgmma" in k.asm["ptx"] or p["block_m"] < 64,
                                                   cubin=len(k.asm["cubin"]))
# tensorcore persistent=True: the persistent TMA program, C written in quarters (tt: with stream-K)
from tilemm.engine.programs import matmul_persistent
for layout in ("nn", "tt"):
    p = default_tiles(8192, 8192, 8192)
    a_t, b_t = layout[0] == "t", layout[1] == "t"
    a_block = [p["block_k"], p["block_m"]] if a_t else [p["block_m"], p["block_k"]]
    b_block = [p["block_n"], p["block_k"]] if b_t else [p["block_k"], p["block_n"]]
    sig = persistent_signature(f"tensordesc<bf16{a_block}>", f"tensordesc<bf16{b_block}>", "*bf16", workspace="*fp32")
    const = dict(scale_a_ptr=None, scale_b_ptr=None, STEPS=tile_steps, OPTION=None, A_T=a_t, B_T=b_t, STREAM_K=layout == "tt",
                 BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=8, PROGRAMS=132, UPCAST=False, FLATTEN=True,
                 ACCUMULATE=False, C_ALIGN=2 if layout == "tt" else 8, STREAM_K_ONLY=False, ROW_SCALES=False)
    k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
    out[f"persistent-{layout}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma="wgmma" in k.asm["ptx"],
                                       cubin=len(k.asm["cubin"]))
# tensorcore-f64: the pointer program in float64
from tilemm.ladder.tensorcore.r12_fp64 import default_tiles as f64_tiles
from tilemm.ladder.tensorcore import r12_fp64_kernel
p = {**f64_tiles(8192, 8192), "group_m": 8}
sig = dict(a_ptr="*fp64", b_ptr="*fp64", c_ptr="*fp64", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
           stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32", BLOCK_M="constexpr",
           BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr", ALIGN="constexpr")
const = dict(BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=p["group_m"], ALIGN=(1,) * 9)
k = triton.compile(ASTSource(fn=r12_fp64_kernel.matmul_kernel, signature=sig, constexprs=const),
                   target=GPUTarget("cuda", 90, 32), options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
# tensorcore-f32 precision="int8": the tiles of C that meet Inf or NaN, in IEEE float32
from tilemm.ladder.tensorcore.r13_f32_kernel import ieee_matmul
sig_ieee = {**{name: t for name, t in sig.items() if name != "ALIGN"}, "a_ptr": "*fp32", "b_ptr": "*fp32",
            "c_ptr": "*fp32", "top_a_ptr": "*fp32", "top_b_ptr": "*fp32"}
k_ieee = triton.compile(ASTSource(fn=ieee_matmul, signature=sig_ieee, constexprs=dict(
    BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=8)),
    target=GPUTarget("cuda", 90, 32),
    options=dict(num_warps=4, num_stages=1))
out["ieee-nonfinite"] = dict(shared=k_ieee.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=True,
                             cubin=len(k_ieee.asm["cubin"]))
out["float64"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=False, cubin=len(k.asm["cubin"]))
# the copy into aligned rows (a transposed bf16 operand: 64-bit offsets); a copy, no product (wgmma: not asked)
from tilemm.engine.programs import copy_rows
k = triton.compile(ASTSource(fn=copy_rows, signature=dict(src="*bf16", dst="*bf16", R="i32", C="i32", stride_sr="i32",
                                                          stride_sc="i32", stride_dr="i32", BLOCK_R="constexpr",
                                                          BLOCK_C="constexpr"),
                             constexprs=dict(BLOCK_R=64, BLOCK_C=64)), target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=4, num_stages=1))
out["copy-rows"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=True, cubin=len(k.asm["cubin"]))
# tensorcore-f64 persistent=True: the persistent TMA program with float64 sums
sig = persistent_signature(f"tensordesc<fp64[{p['block_m']}, {p['block_k']}]>",
                           f"tensordesc<fp64[{p['block_k']}, {p['block_n']}]>", "*fp64")
const = dict(scale_a_ptr=None, scale_b_ptr=None, ws_ptr=None, flags_ptr=None, STEPS=r12_fp64_kernel.f64_steps,
             OPTION=None, A_T=False, B_T=False, STREAM_K=False, BLOCK_M=p["block_m"], BLOCK_N=p["block_n"],
             BLOCK_K=p["block_k"], GROUP_M=p["group_m"], PROGRAMS=132, UPCAST=False, FLATTEN=True,
                 ACCUMULATE=False, C_ALIGN=1, STREAM_K_ONLY=False, ROW_SCALES=False)
k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const),
                   target=GPUTarget("cuda", 90, 32), options=dict(num_warps=p["num_warps"], num_stages=p["num_stages"]))
out["float64-persistent"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=False, cubin=len(k.asm["cubin"]))
# tensorcore-f32: 3xTF32 and TF32 products by TMA, and the split
from tilemm.ladder.tensorcore.r13_f32_kernel import split_tf32, tf32_matmul, tf32x3_steps
from tilemm.ladder.tensorcore.r13_f32 import CHUNK_STEPS, tiles
p = {q.name: q.default for q in tilemm.kernel("tensorcore-f32").params}
for parts in (1, 2):
    block_n, block_k, stages = tiles("3xtf32" if parts == 2 else "tf32", p["block_n"], p["block_k"], p["num_stages"])
    sig = dict(a_desc=f"tensordesc<fp32[{p['block_m']}, {block_k}]>",
               b_desc=f"tensordesc<fp32[{block_n}, {block_k}]>", c_ptr="*fp32", M="i32", N="i32",
               K="i32", stride_cm="i32", stride_cn="i32", PARTS="constexpr", CHUNK="constexpr", BLOCK_M="constexpr",
               BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
    const = dict(PARTS=parts, CHUNK=CHUNK_STEPS, BLOCK_M=p["block_m"], BLOCK_N=block_n, BLOCK_K=block_k,
                 GROUP_M=p["group_m"])
    k = triton.compile(ASTSource(fn=tf32_matmul, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=p["num_warps"], num_stages=stages))
    out[f"tf32x{2 * parts - 1}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                                        wgmma="wgmma" in k.asm["ptx"] and "tf32" in k.asm["ptx"], cubin=len(k.asm["cubin"]))
# 3xTF32 on the persistent program with stream-K (r13_f32's stream_k)
block_n, block_k, stages = tiles("3xtf32", p["block_n"], p["block_k"], p["num_stages"])
sig = persistent_signature(f"tensordesc<fp32[{p['block_m']}, {block_k}]>", f"tensordesc<fp32[{block_n}, {block_k}]>",
                           "*fp32", workspace="*fp32")
const = dict(scale_a_ptr=None, scale_b_ptr=None, STEPS=tf32x3_steps, OPTION=CHUNK_STEPS, A_T=False, B_T=True,
             STREAM_K=True, BLOCK_M=p["block_m"], BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=p["group_m"],
             PROGRAMS=132, UPCAST=False, FLATTEN=False,
             ACCUMULATE=False, C_ALIGN=1, STREAM_K_ONLY=False, ROW_SCALES=False)
k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=p["num_warps"], num_stages=stages))
out["tf32x3-stream-k"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                              wgmma="wgmma" in k.asm["ptx"] and "tf32" in k.asm["ptx"], cubin=len(k.asm["cubin"]))
# and for fewer tiles than programs (a 512 x 1024 x 1024 real product, tensorcore-complex at 512³):
# the program without the whole-round loop, smaller than the one above
k_only = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs={**const, "STREAM_K_ONLY": True}),
                        target=GPUTarget("cuda", 90, 32), options=dict(num_warps=p["num_warps"], num_stages=stages))
out["tf32x3-stream-k-only"] = dict(shared=k_only.metadata.shared, limit=H100_SHARED_OPTIN,
                                   wgmma="wgmma" in k_only.asm["ptx"] and "tf32" in k_only.asm["ptx"],
                                   cubin=len(k_only.asm["cubin"]), smaller=len(k_only.asm["cubin"]) < len(k.asm["cubin"]))
# 3xTF32 in one launch (small products), at its tiles
from tilemm.ladder.tensorcore.r13_f32_direct import DIRECT_BLOCK
from tilemm.ladder.tensorcore.r13_f32_kernel import tf32x3_direct
sig = dict(a_ptr="*fp32", b_ptr="*fp32", c_ptr="*fp32", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
           stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32", CHUNK="constexpr", BLOCK_M="constexpr",
           BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
const = dict(CHUNK=4, BLOCK_M=DIRECT_BLOCK, BLOCK_N=DIRECT_BLOCK, BLOCK_K=block_k, GROUP_M=p["group_m"])
k = triton.compile(ASTSource(fn=tf32x3_direct, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=4, num_stages=stages))
out["tf32x3-direct"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                            wgmma="wgmma" in k.asm["ptx"] and "tf32" in k.asm["ptx"], cubin=len(k.asm["cubin"]))
sig = dict(x_ptr="*fp32", out_ptr="*fp32", R="i32", C="i32", C_PAD="i32", stride_outer="i32",
           stride_inner="i32", down="i32", PARTS="constexpr", BLOCK_R="constexpr", BLOCK_C="constexpr")
k = triton.compile(ASTSource(fn=split_tf32, signature=sig, constexprs=dict(PARTS=2, BLOCK_R=64, BLOCK_C=64)),
                   target=GPUTarget("cuda", 90, 32))
out["split-tf32"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=True, cubin=len(k.asm["cubin"]))
# tensorcore-int: the fused digit product for each result width, and the digit split
from tilemm.engine.digit_programs import digit_matmul, split_digits
from tilemm.ladder.tensorcore.r11_int_digits_kernel import int8_steps
q = {x.name: x.default for x in tilemm.kernel("tensorcore-int").params}
for nd_a, nd_b, nd_c, cty in ((4, 4, 4, "*i32"), (8, 8, 8, "*i64")):
    block_n = 128 if nd_c == 8 else 256     # the default (None) resolved as the rung does
    sig = dict(a_desc=f"tensordesc<i8[{q['block_m']}, {q['block_k']}]>", b_desc=f"tensordesc<i8[{block_n}, {q['block_k']}]>",
               c_ptr=cty, M="i32", N="i32", K_TILES="i32", stride_cm="i32", stride_cn="i32", ND_A="constexpr",
               ND_B="constexpr", ND_C="constexpr", LOWEST="constexpr", ACCUMULATE="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr",
               BLOCK_K="constexpr", GROUP_M="constexpr", PROGRAMS="constexpr")
    const = dict(ND_A=nd_a, ND_B=nd_b, ND_C=nd_c, LOWEST=0, ACCUMULATE=nd_c == 8, BLOCK_M=q["block_m"], BLOCK_N=block_n,
                 BLOCK_K=q["block_k"], GROUP_M=q["group_m"], PROGRAMS=132)
    k = triton.compile(ASTSource(fn=digit_matmul, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=q["num_warps"], num_stages=q["num_stages"]))
    out[f"int-{nd_a}{nd_b}{nd_c}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN,
                                         wgmma="wgmma" in k.asm["ptx"], cubin=len(k.asm["cubin"]))
# int8 data (one digit pair): the persistent program with int32 sums, C in int8 or int32
for cty in ("*i8", "*i32"):
    sig = persistent_signature(f"tensordesc<i8[{q['block_m']}, {q['block_k']}]>", f"tensordesc<i8[256, {q['block_k']}]>", cty)
    const = dict(scale_a_ptr=None, scale_b_ptr=None, ws_ptr=None, flags_ptr=None, STEPS=int8_steps, OPTION=None,
                 A_T=False, B_T=True, STREAM_K=False, BLOCK_M=q["block_m"], BLOCK_N=256, BLOCK_K=q["block_k"],
                 GROUP_M=q["group_m"], PROGRAMS=132, UPCAST=False, FLATTEN=True,
                 ACCUMULATE=False, C_ALIGN=1, STREAM_K_ONLY=False, ROW_SCALES=False)
    k = triton.compile(ASTSource(fn=matmul_persistent, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=q["num_warps"], num_stages=q["num_stages"]))
    out[f"int8-to-{cty[1:]}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma="wgmma" in k.asm["ptx"],
                                   cubin=len(k.asm["cubin"]))
# int8 data on Hopper: the warp-specialized Gluon program, whose wgmma must stay asynchronous
# (wait_group 1: the step before, not 0: all) where Triton's pipeliner makes an int32
# accumulator's synchronous, and whose loading warp gives its registers to the others (setmaxnreg)
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.engine.int8_gluon import int8_matmul_ws
for cty, digits, block_n, accumulate in (("*i8", (1, 1, 1), 256, False), ("*i32", (1, 1, 1), 256, False),
                                         ("*i32", (4, 4, 4), 256, False), ("*i64", (8, 8, 8), 128, True),
                                         ("*fp32", (3, 3, 8), 128, False)):   # tensorcore-f32's precision="int8"
    la = repr(gl.NVMMASharedLayout.get_default_for([q["block_m"], q["block_k"]], gl.int8))
    lb = repr(gl.NVMMASharedLayout.get_default_for([block_n, q["block_k"]], gl.int8))
    scaled = digits[0] == 3               # precision="int8": int64 sums scaled into float32 C
    sig = dict(a_desc=f"tensordesc<i8[{q['block_m']}, {q['block_k']}],{la}>",
               b_desc=f"tensordesc<i8[{block_n}, {q['block_k']}],{lb}>",
               c_ptr=cty, row_ptr="*fp64" if scaled else "constexpr", col_ptr="*fp64" if scaled else "constexpr", M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32", ND_A="constexpr",
               ND_B="constexpr", ND_C="constexpr", LOWEST="constexpr", ACCUMULATE="constexpr", GROUP_M="constexpr", PROGRAMS="constexpr",
               STAGES="constexpr", num_warps="constexpr")
    const = dict(ND_A=digits[0], ND_B=digits[1], ND_C=digits[2], LOWEST=2 if scaled else 0, ACCUMULATE=accumulate, GROUP_M=q["group_m"],
                 PROGRAMS=132, STAGES=q["num_stages"], num_warps=q["num_warps"])
    if not scaled:
        const |= dict(row_ptr=None, col_ptr=None)
    k = triton.compile(GluonASTSource(fn=int8_matmul_ws, signature=sig, constexprs=const),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=q["num_warps"]))
    ptx = k.asm["ptx"]
    out[f"int8-gluon-{''.join(map(str, digits))}-to-{cty[1:]}"] = dict(
        shared=k.metadata.shared, limit=H100_SHARED_OPTIN, cubin=len(k.asm["cubin"]),
        wgmma="wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1;" in ptx and "setmaxnreg" in ptx
        and "st.local" not in ptx)                       # and no local-memory arrays
for src in ("*i8", "*i32", "*i64", "*fp32"):     # float32: precision="int8"'s fixed-point split
    sig = dict(x_ptr=src, out_ptr="*i8", R="i32", C="i32", C_PAD="i32", stride_r="i32", stride_c="i32",
               scale_ptr="*fp64" if src == "*fp32" else "constexpr", NDIGITS="constexpr", FIXED="constexpr",
               BLOCK_R="constexpr", BLOCK_C="constexpr")
    const = dict(NDIGITS=3 if src == "*fp32" else 8, FIXED=src == "*fp32", BLOCK_R=64, BLOCK_C=64)
    if src != "*fp32":
        const["scale_ptr"] = None
    k = triton.compile(ASTSource(fn=split_digits, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32))
    out[f"split-{src}"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=True, cubin=len(k.asm["cubin"]))
from tilemm.ladder.tensorcore.r13_f32_kernel import unscale
sig = dict(exact_ptr="*i64", row_ptr="*fp64", col_ptr="*fp64", c_ptr="*fp32", M="i32", N="i32", stride_cm="i32",
           stride_cn="i32", BLOCK_M="constexpr", BLOCK_N="constexpr")
k = triton.compile(ASTSource(fn=unscale, signature=sig, constexprs=dict(BLOCK_M=64, BLOCK_N=64)),
                   target=GPUTarget("cuda", 90, 32))
out["unscale"] = dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, wgmma=True, cubin=len(k.asm["cubin"]))
print(json.dumps(out))
"""


def test_default_configs_compile_for_sm90():
    """The interpreter can't see what the compiler refuses; compiling for Hopper can."""
    compiled = run_program(COMPILE, fp_fusion=True)
    assert set(compiled) == {f"{d}-{s}" for d in ("float16", "bfloat16")
                             for s in ("8192x8192-nn", "8192x8192-tt", "16x8192-nt", "1000x1000-tn", "64x8192-nn",
                                       "512x3072-nt")} | {"float64", "tf32x1", "tf32x3", "tf32x3-stream-k", "tf32x3-stream-k-only", "tf32x3-direct",
                                                                                "split-tf32", "int8-to-i8", "int8-to-i32", "int-444", "int-888",
                             "int8-gluon-111-to-i8", "int8-gluon-111-to-i32", "int8-gluon-444-to-i32",
                             "int8-gluon-888-to-i64", "int8-gluon-338-to-fp32", "unscale", "split-*fp32", "ieee-nonfinite",
                             "split-*i8", "split-*i32", "split-*i64", "persistent-nn", "persistent-tt", "float64-persistent",
                             "copy-rows"} | {f"{d}-{s}-split-k" for d in ("float16", "bfloat16")
                                                          for s in ("8192x8192", "16x8192", "64x8192", "512x3072")}
    for dtype, info in compiled.items():
        assert info["cubin"] > 0 and (info["wgmma"] or dtype.startswith("float64")), (dtype, info)   # fp64: mma, no wgmma
        assert info["shared"] <= info["limit"], (dtype, info)
    assert compiled["tf32x3-stream-k-only"]["smaller"]


POINTER_REGISTERS = r"""
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.engine.tensorcore_launch import default_tiles, load_alignment, narrow_loads, pointer_warps
from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_kernel
from tests.compiled import resource_usage
ORDER = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
         "stride_cn"]
out = {}
for m, n, k, layout in ((4281, 2264, 20, "nt"), (720, 1455, 139, "nt"), (720, 1455, 139, "nn"), (1000, 1000, 1000, "nt")):
    p = default_tiles(m, n, k)
    sa, sb = ((1, m) if layout[0] == "t" else (k, 1)), ((1, k) if layout[1] == "t" else (n, 1))
    values = dict(M=m, N=n, K=k, stride_am=sa[0], stride_ak=sa[1], stride_bk=sb[0], stride_bn=sb[1], stride_cm=n,
                  stride_cn=1)
    align = load_alignment(m, n, k, *sa, *sb, n, 1)
    warps = pointer_warps(p["block_m"], p["num_warps"], narrow_loads(align, sa, sb))
    const = dict(BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=8, UPCAST=False,
                 split_steps=None, ws_ptr=None, counts_ptr=None, ALIGN=align)
    # as Triton specializes a launch: integers equal to 1 are constants, pointers and integers
    # divisible by 16 are marked so
    const.update({name: 1 for name, v in values.items() if v == 1})
    sig = {name: "*bf16" for name in ORDER[:3]}
    sig.update({name: "constexpr" if name in const else "i32" for name in ORDER[3:]})
    sig.update({name: "constexpr" for name in const if name not in sig})
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(ORDER)
             if i < 3 or (sig[name] == "i32" and values[name] % 16 == 0)}
    compiled = triton.compile(ASTSource(fn=matmul_kernel, signature=sig, constexprs=const, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=p["num_stages"]))
    out[f"{m}x{n}x{k}-{layout}"] = dict(**resource_usage(compiled.asm["cubin"]),
                                        asynchronous="cp.async" in compiled.asm["ptx"], warps=warps)
print(json.dumps(out))
"""


DMMA_PROGRAM = r"""
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from tilemm.engine.availability import H100_SHARED_OPTIN
from tilemm.ladder.tensorcore import r12_fp64_dmma_kernel as p
from tests.compiled import cuobjdump
x_layout, y_layout = (gl.NVMMASharedLayout(swizzle_byte_width=w, element_bitwidth=64, rank=2) for w in (128, 0))
sig = dict(x_desc=f"tensordesc<fp64[8,16],{x_layout!r}>", y_desc=f"tensordesc<fp64[{p.BLOCK_N},8],{y_layout!r}>",
           c_ptr="*fp64", M="i32", N="i32", K="i32", stride_cm="i32", stride_cn="i32")
const = dict(BLOCK_M=p.BLOCK_M, BLOCK_N=p.BLOCK_N, BLOCK_K=p.BLOCK_K, WARPS_M=p.WARPS_M, WARPS_N=p.WARPS_N,
             GROUP_M=p.GROUP_M, STAGES=p.STAGES)
sig.update({name: "constexpr" for name in const})
k = triton.compile(GluonASTSource(fn=p.f64_dmma, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=p.WARPS_M * p.WARPS_N, maxnreg=p.REGISTERS))
sass = cuobjdump(k.asm["cubin"], "-sass").splitlines()
loop = [i for i, line in enumerate(sass) if "DMMA" in line]
between = sass[loop[0]:loop[-1] + 1] if loop else []
print(json.dumps(dict(shared=k.metadata.shared, limit=H100_SHARED_OPTIN, mma="mma.sync.aligned.m16n8k8.row.col.f64" in k.asm["ptx"],
                      dmma=sum("DMMA.16x8x8" in line for line in between), loads=sum("LDS.128" in line for line in between),
                      moves=sum("MOV" in line for line in between))))
"""


def test_float64_dmma_program_compiles_to_m16n8k8_with_fragments_loaded_in_place():
    """The DMMA program compiled for sm_90: m16n8k8 products, fed by 16-byte shared-memory loads
    that land in the registers the instruction reads (no register moves between the products:
    read K-major, A's fragments took 193 moves for 32 products), within the shared memory a block may use."""
    info = run_program(DMMA_PROGRAM, fp_fusion=True)
    assert info["mma"] and info["dmma"] >= 32 and info["loads"] >= 24, info
    assert info["moves"] == 0, info
    assert info["shared"] <= info["limit"], info


@pytest.mark.parametrize("layout, transposed, copied", [("nn", True, ()), ("tt", False, ()),
                                                        ("nt", True, ("x",)), ("tn", False, ("y",))])
def test_float64_dmma_reads_operands_as_they_are_where_a_form_allows(layout, transposed, copied):
    """X (rows along C's) and Y (K-major): both row-major operands are C^T's (X = B, Y = A) as they
    are, both column-major ones C's; otherwise the form that copies the smaller operand (here the
    300-row B: N < M)."""
    from tilemm.ladder.tensorcore.r12_fp64 import dmma_operands
    a, b = laid_out(500, 300, 64, layout, torch.float64)
    x, y, t = dmma_operands(a, b)
    assert t == transposed
    assert x.shape == ((64, 300) if t else (64, 500)) and y.shape == ((500, 64) if t else (300, 64))
    assert tuple(name for name, v in (("x", x), ("y", y)) if not operand_copies.k_major(v)) == copied
    if copied:
        assert (x if copied == ("x",) else y).numel() == 300 * 64       # the smaller operand


def test_float64_dmma_is_taken_by_the_rungs_own_tiles_on_hopper_past_half_the_sms():
    from tilemm.ladder.tensorcore.r12_fp64 import DMMA_FROM_K, takes_dmma
    hopper = availability.hopper_gluon() and availability.gluon_float64_descriptors() is None
    sms = availability.multiprocessors()
    side = 128 * int(sms ** 0.5 + 1)
    own = dict(block_m=None, block_n=None, block_k=None, num_warps=None, num_stages=None, persistent=True,
               copy_transposed="a", dmma=None)
    assert takes_dmma(side, side, 4096, own) == hopper
    assert not takes_dmma(side, side, DMMA_FROM_K - 1, own)
    assert not takes_dmma(side, 64, 4096, own)                                    # skinny
    assert not takes_dmma(128, 128 * (sms // 2), 4096, own)                       # tiles for half the SMs
    assert takes_dmma(128, 128 * (sms // 2 + 1), 4096, own) == hopper             # ... and for more
    assert not takes_dmma(side, side, 4096, {**own, "block_k": 16})
    assert not takes_dmma(side, side, 4096, {**own, "persistent": False})
    assert takes_dmma(3, 5, 7, {**own, "dmma": True}) and not takes_dmma(side, side, 4096, {**own, "dmma": False})
    assert not takes_dmma(0, 5, 7, {**own, "dmma": True}) and not takes_dmma(3, 5, 0, {**own, "dmma": True})


def test_float64_traffic_model_counts_the_tiles_of_the_program_that_runs():
    from tilemm.ladder.tensorcore import r10_tensorcore, r12_fp64
    from tilemm.ladder.registry import Problem
    k = tilemm.kernel("tensorcore-f64")
    params = {q.name: q.default for q in k.params}
    p = Problem(1000, 1100, 4000, "float64")
    dmma = k.traffic(p, **{**params, "dmma": True})
    assert dmma == r10_tensorcore.traffic(p, **r12_fp64.DMMA_TILES)
    small = dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=4)   # the Triton program's
    assert k.traffic(p, **{**params, **small}) == r10_tensorcore.traffic(p, **small) != dmma


@pytest.mark.skipif(ON_GPU, reason="Triton's interpreter runs no Gluon")
def test_float64_dmma_asked_for_off_hopper_is_refused_before_any_work():
    a, b = np.ones((4, 8)), np.ones((8, 4))
    with pytest.raises(tilemm.KernelUnavailable, match="Hopper"):
        tilemm.matmul(a, b, kernel="tensorcore-f64", dmma=True)


def test_float64_dmma_needs_gluon_descriptors_of_float64():
    """Gluon's host-side TMA descriptor takes float64 in Triton 3.6 and refuses it later (the
    program would fail at its first launch): there dmma=None takes the Triton programs, and
    dmma=True is refused before any work, naming the Triton version."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    import triton
    from tilemm.ladder.tensorcore import r12_fp64
    reason = availability.gluon_float64_descriptors()
    if availability.triton_version() <= (3, 6):
        assert reason is None
    else:
        assert reason is not None and triton.__version__ in reason
    with pytest.MonkeyPatch.context() as patch:      # as on a Hopper GPU
        patch.setattr(availability, "hopper_gluon", lambda: True)
        patch.setattr(availability, "hopper_gluon_refusal", lambda asked: None)
        side = 128 * int(availability.multiprocessors() ** 0.5 + 1)
        own = dict(block_m=None, block_n=None, block_k=None, num_warps=None, num_stages=None, persistent=True,
                   copy_transposed="a", dmma=None)
        assert r12_fp64.takes_dmma(side, side, 4096, own) == (reason is None)
        refusal = r12_fp64.dmma_refusal()
        assert refusal is None if reason is None else (triton.__version__ in refusal and "dmma=True" in refusal)


def test_float64_needs_a_triton_whose_dot_takes_float64(monkeypatch):
    """tl.dot multiplies float64 from Triton 3.5 on: on an older one the rung says so, naming the
    version, where the other Triton rungs run."""
    assert tilemm.kernel("tensorcore-f64").available() == availability.available()
    monkeypatch.setattr(availability, "triton_version", lambda: (3, 4))
    reason = tilemm.kernel("tensorcore-f64").available()
    assert "Triton 3.5 or newer" in reason and "3.4" in reason
    assert tilemm.kernel("tensorcore").available() is None
    with pytest.raises(tilemm.KernelUnavailable, match="Triton 3.5"):
        tilemm.matmul(np.ones((4, 8)), np.ones((8, 4)), kernel="tensorcore-f64")


def test_load_alignment_and_narrow_loads():
    """What the pointer program is told each size divides by (up to 8), and where its loads stay two
    elements wide or narrower along an operand's contiguous axis (then 64-row tiles take 8 warps)."""
    from tilemm.engine.tensorcore_launch import load_alignment, narrow_loads, pointer_warps
    assert load_alignment(1000, 20, 7, 0, 1, 16, 2264, 6) == (8, 4, 1, 8, 1, 8, 8, 2)
    # 720 x 1455 x 139 nt: A's rows and B's columns of 139 elements
    odd = load_alignment(720, 1455, 139, 139, 1, 1, 139, 1455, 1)
    assert narrow_loads(odd, (139, 1), (1, 139)) and pointer_warps(64, 4, True) == 8
    # 4281 x 2264 x 20 nt: rows of 20 load 4 elements at a time; nn: B's rows of 2264, 8
    assert not narrow_loads(load_alignment(4281, 2264, 20, 20, 1, 1, 20, 2264, 1), (20, 1), (1, 20))
    assert not narrow_loads(load_alignment(4281, 2264, 20, 20, 1, 2264, 1, 2264, 1), (20, 1), (2264, 1))
    # A transposed (M contiguous): M and A's column stride decide; M = 4795 loads one at a time
    assert narrow_loads(load_alignment(4795, 2556, 64, 1, 4795, 2556, 1, 2556, 1), (1, 4795), (2556, 1))
    assert pointer_warps(16, 4, True) == 4 and pointer_warps(64, 8, False) == 8


def test_pointer_program_on_odd_rows_does_not_spill():
    """The pointer program on rows Triton can't prove 16-byte aligned (1000, 20 or 139 elements),
    compiled for sm_90 as such a launch specializes it: told what its sizes divide by
    (load_alignment), rows of 1000 and of 20 load asynchronously; rows of 139, one element at a
    time, take 8 warps (pointer_warps). None spills registers to the stack (untold, at 4281 x 2264
    x 20 nt: 255 registers, 2.9 M spill requests, 98 µs against 25 for nn)."""
    compiled = run_program(POINTER_REGISTERS, fp_fusion=True)
    for shape, info in compiled.items():
        assert info["stack"] == 0, (shape, info)
    assert compiled["1000x1000x1000-nt"]["asynchronous"] and compiled["4281x2264x20-nt"]["asynchronous"]
    assert compiled["720x1455x139-nt"]["warps"] == 8 and compiled["1000x1000x1000-nt"]["warps"] == 4


C_STORES = r"""
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_tma
sig = dict(a_desc="tensordesc<bf16[64, 128]>", b_desc="tensordesc<bf16[64, 256]>", c_ptr="*bf16", M="i32", N="i32",
           K="i32", stride_cm="i32", stride_cn="constexpr", A_T="constexpr", B_T="constexpr", BLOCK_M="constexpr",
           BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr", UPCAST="constexpr", ACCUMULATE="constexpr",
           C_ALIGN="constexpr", split_steps="constexpr", ws_ptr="constexpr", counts_ptr="constexpr")
out = {}
for c_align in (1, 2, 4, 8):
    const = dict(A_T=True, B_T=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, UPCAST=False, ACCUMULATE=False,
                 C_ALIGN=c_align, split_steps=None, ws_ptr=None, counts_ptr=None, stride_cn=1)
    # as Triton specializes a launch: C's pointer 16-byte aligned, stride_cn == 1 a constant
    k = triton.compile(ASTSource(fn=matmul_tma, signature=sig, constexprs=const,
                                 attrs={(list(sig).index("c_ptr"),): [["tt.divisibility", 16]]}),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8, num_stages=4))
    out[c_align] = sorted(set(re.findall(r"st\.global[.\w]*", k.asm["ptx"])))
print(json.dumps(out))
"""


def test_tma_program_stores_c_as_wide_as_its_rows_allow():
    """The TMA program told C's alignment (C_ALIGN, c_alignment) stores C's rows of
    7026 or 6524 bf16 elements 2 or 4 at a time, compiled for sm_90; without it, one by one
    (8865 x 7026 x 12 tn: 110.4 -> 104.6 µs)."""
    from tilemm.engine.operand_copies import c_alignment
    assert c_alignment(torch.empty(3, 7026)) == 2 and c_alignment(torch.empty(3, 6524)) == 4
    assert c_alignment(torch.empty(3, 8192)) == 8 and c_alignment(torch.empty(3, 8191)) == 1
    assert c_alignment(torch.empty(8, 16)[:, :12]) == 4 and c_alignment(torch.empty(12, 8).T) == 1
    stores = run_program(C_STORES)
    assert stores == {"1": ["st.global.b16"], "2": ["st.global.b32"], "4": ["st.global.v2.b32"],
                      "8": ["st.global.v4.b32"]}


# --- tensorcore-int: exact integers from int8 digit products ---------------------------------

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.skipif(ON_GPU, reason="interpreter tests: on the GPU the conformance table covers this rung")
@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (17, 33, 9, "tn"), (40, 7, 65, "nt"), (3, 5, 0, "nn"),
                                          (5, 3, 48, "tt"), (18, 20, 32, "nt")])
def test_int_digits_bit_exact(dtype, m, n, k, layout):
    from tilemm.numerics.data import operands
    a, b = operands(m + n + k, m, n, k, dtype, layout)
    c = tilemm.plan(a, b, kernel="tensorcore-int", **SMALL).execute(poison=True)
    assert c.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(c, np.matmul(a, b))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint64"])
def test_int_digits_extremes(dtype):
    info = np.iinfo(dtype)
    for fill in (info.min, info.max, -1 if info.min < 0 else info.max):
        a = np.full((5, 37), fill, dtype)
        b = np.full((37, 6), fill, dtype)
        b[::3] = info.max
        c = tilemm.matmul(a, b, kernel="tensorcore-int", **SMALL)
        np.testing.assert_array_equal(c, np.matmul(a, b))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype,out_dtype", [("int8", "int32"), ("int8", "int16"), ("int16", "int64"), ("int8", "int64")])
def test_int_digits_out_dtype_gives_the_wide_sums(layout, dtype, out_dtype):
    """int8 data, int32 result: NumPy's matmul(..., dtype=int32), from one digit product."""
    from tilemm.numerics.data import operands
    a, b = operands(7, 19, 21, 64, dtype, layout)
    c = tilemm.plan(a, b, kernel="tensorcore-int", out_dtype=out_dtype, **SMALL).execute(poison=True)
    assert c.dtype == np.dtype(out_dtype)
    np.testing.assert_array_equal(c, np.matmul(a, b, dtype=out_dtype))
    assert not np.array_equal(c, np.matmul(a, b).astype(out_dtype))     # the wide sums differ from int8's


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
@pytest.mark.parametrize("dtype,out_dtype", [("int16", "int32"), ("int32", "int64"), ("int8", "int32")])
def test_int_digits_narrow_extremes_carry_a_digit(dtype, out_dtype):
    """32767 = -1 + 256 * -128 + 65536 * 1: the top values of a type wider than a byte need one
    digit more than its width, when the result is wider still."""
    info = np.iinfo(dtype)
    a = np.array([[info.max, info.min, info.max - 100, -1]] * 3, dtype)
    b = np.array([[info.max], [info.max], [info.min], [info.max]] * 1, dtype)
    c = tilemm.matmul(a, b, kernel="tensorcore-int", out_dtype=out_dtype, **SMALL)
    np.testing.assert_array_equal(c, np.matmul(a, b, dtype=out_dtype))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_int64_k_chunks_accumulate(monkeypatch):
    """For int64 the shifts below 4 need exact int32 sums, so long K runs in chunks added in int64:
    shrink the chunk so that the interpreter can afford several."""
    from tilemm.numerics import digits
    from tilemm.numerics.data import operands
    monkeypatch.setattr(digits, "exact_chunk", lambda pairs: 40)
    a, b = operands(3, 9, 10, 150, "int64")
    c = tilemm.matmul(a, b, kernel="tensorcore-int", **SMALL)
    np.testing.assert_array_equal(c, np.matmul(a, b))


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_autotune_caches_the_winner_on_disk(tmp_path, monkeypatch):
    from tilemm.system import tuning
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    torch.manual_seed(1)
    a, b = torch.randn(40, 50, dtype=torch.float16), torch.randn(50, 33, dtype=torch.float16)
    c, verdict = run(a, b, autotune=True)
    assert verdict.ok, verdict.message
    entries = json.loads((tmp_path / "tuning.json").read_text())
    ((key, entry),) = entries.items()
    assert key == "tensorcore|interpreter|float16|40x33x50|nn"
    assert entry["tried"] == len(tilemm.ladder.tensorcore.r10_tensorcore.CANDIDATES)
    assert entry["params"] in tilemm.ladder.tensorcore.r10_tensorcore.CANDIDATES
    assert entry["device"] and entry["date"] and entry["versions"]["triton"]      # where and with what it won
    assert tuning.last["cached"] is False and tuning.last["tuning_s"] > 0      # what `tilemm bench` reports
    monkeypatch.setattr(tuning, "record", lambda key, entry: pytest.fail("tuned again instead of reading the cache"))
    c2, verdict2 = run(a, b, autotune=True)
    assert verdict2.ok and torch.equal(c, c2)
    assert tuning.last["cached"] is True


def _tf32(x, rounding):
    """x with TF32's 10 mantissa bits: rounded to nearest (the split) or truncated (the MMA)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    kept = ((bits + 0x1000) if rounding else bits) & 0xFFFFE000
    return kept.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("k", [1, 16, 64])
def test_3xtf32_method_meets_the_float32_bound_from_k16(k):
    """The interpreter multiplies in float32, so it cannot show TF32's rounding: emulate the
    hardware's 3xTF32 (lo truncated by the MMA, a_lo b_lo dropped) in NumPy and hold it to
    tilemm's float32 bound. With K = 1 it can exceed it, which is why short sums take IEEE."""
    from tilemm.numerics.accuracy import compare
    rng = np.random.default_rng(k)
    worst = 0.0
    for trial in range(20):
        a = rng.uniform(1, 2, (32, k)).astype(np.float32) * (1 - 2.0**-12 * rng.integers(0, 2, (32, k)))
        b = rng.uniform(1, 2, (k, 32)).astype(np.float32)
        ah, bh = _tf32(a, True), _tf32(b, True)
        al, bl = _tf32(a - ah, False), _tf32(b - bh, False)
        d = lambda x: x.astype(np.float64)  # noqa: E731
        c = (d(ah) @ d(bh) + d(ah) @ d(bl) + d(al) @ d(bh)).astype(np.float32)
        verdict = compare(c, a, b, "float32")
        worst = max(worst, verdict.worst)
        if k >= 16:
            assert verdict.ok, verdict.message
    if k == 1:
        assert worst > 1, "K = 1 should show why short sums are not given to 3xTF32"


def test_int8_data_takes_the_program_that_stores_c_faster():
    """On Hopper int8 data goes to the Gluon program only where its stores from registers are not
    the slower: int32 C in 16-byte aligned rows and K past SHORT_K."""
    from tilemm.ladder.tensorcore.r11_int_digits import SHORT_K, stores_coalesced
    c32 = torch.empty(64, 256, dtype=torch.int32)
    assert not stores_coalesced(c32, SHORT_K + 1)
    assert stores_coalesced(c32, SHORT_K)                                          # short K
    assert stores_coalesced(torch.empty(64, 258, dtype=torch.int32), 4096)        # rows of 1032 bytes
    assert stores_coalesced(c32[:, 1:], 4096)                                      # C starts 4 bytes in
    assert stores_coalesced(torch.empty(64, 256, dtype=torch.int8), 4096)         # int8 C
    assert not stores_coalesced(torch.empty(1, 258, dtype=torch.int32), 4096)     # one row: no row stride


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (130, 257, 129), (300, 200, 1000), (64, 512, 4096)])
@pytest.mark.parametrize("out_dtype", [None, "int32"])
def test_gpu_int8_data_bit_exact(layout, m, n, k, out_dtype):
    """int8 data on the GPU (on Hopper the warp-specialized Gluon program, or the persistent one
    where it stores C faster: both among these shapes): NumPy's wrapped int8 C or the exact int32
    sums, for every layout, at shapes that are not multiples of the tiles and with the extremes
    (-128 times -128, K deep enough to pass 2^24)."""
    rng = np.random.default_rng(m * 7 + n * 5 + k)
    a = rng.integers(-128, 128, size=(k, m) if layout[0] == "t" else (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k) if layout[1] == "t" else (k, n), dtype=np.int8)
    a, b = (a.T if layout[0] == "t" else a), (b.T if layout[1] == "t" else b)
    a[0, :] = -128
    b[:, 0] = -128
    want = np.matmul(a, b, dtype=np.int32) if out_dtype else np.matmul(a, b)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()    # transposed views stay transposed
    got = tilemm.plan(ta, tb, kernel="tensorcore-int", out_dtype=out_dtype).execute(poison=True).cpu().numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)
    if torch.cuda.get_device_capability()[0] == 9:
        assert availability.hopper_gluon()          # the Gluon program is the one tested here


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int16", "uint16", "int32", "uint32", "int64"])
@pytest.mark.parametrize("layout", ["nn", "tt"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (130, 257, 129), (64, 300, 1000)])
def test_gpu_int_digits_bit_exact(dtype, layout, m, n, k):
    """Wider integers on the GPU (on Hopper, results up to 32 bits through the Gluon program's
    digit pairs): bit-exact with NumPy's wrapping sums, extremes included."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(info.min, info.max, size=(k, m) if layout[0] == "t" else (m, k), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(n, k) if layout[1] == "t" else (k, n), dtype=dtype, endpoint=True)
    a, b = (a.T if layout[0] == "t" else a), (b.T if layout[1] == "t" else b)
    a[0, :], b[:, 0] = info.min, info.max
    if m > 1:
        a[1, :] = -1 if info.min < 0 else info.max
    want = np.matmul(a, b)
    got = tilemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), kernel="tensorcore-int")
    got = got.cpu().numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_gpu_int64_long_k_chunks_accumulate(dtype):
    """int64 with K past one exact chunk (32640 for int64's four exact shifts): the later chunks
    add to what C holds."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, size=(3, 40000), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(40000, 5), dtype=dtype, endpoint=True)
    a[0, :], b[:, 0] = info.max, info.max              # every product of the corner at its largest
    got = tilemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), kernel="tensorcore-int")
    assert np.array_equal(got.cpu().numpy(), np.matmul(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,layout", [(1, 1, 1, "nn"), (300, 257, 1000, "nn"), (129, 700, 333, "tt"),
                                          (513, 130, 4097, "nt"), (64, 48, 50000, "tn"),   # 50000: two K chunks
                                          (16, 24, 70000, "nn")])                          # 70000: two pieces
def test_gpu_int8_precision_within_its_bound(m, n, k, layout):
    from tilemm.numerics.data import operands
    a, b = operands(m + n + k, m, n, k, "float32", layout)
    a[::3] *= 2.0**40
    b[:, 1::4] *= 2.0**-70
    dev = [torch.from_numpy(x).cuda() for x in (a, b)]
    c = tilemm.plan(*dev, kernel="tensorcore-f32", precision="int8").execute(poison=True).cpu().numpy()
    err, bound = int8_precision_bound(a, b, c)
    assert (err <= bound).all(), float((err / bound).max())


@pytest.mark.gpu
def test_gpu_int8_precision_inf_and_nan_follow_ieee():
    from tilemm.numerics.data import operands
    a, b = operands(6, 300, 257, 1000, "float32")
    a[2, 4], a[200, 7], b[3, 7], b[9, 250] = np.nan, np.inf, -np.inf, 0.0
    a[201, 9] = np.inf                            # inf * 0 is NaN in IEEE
    c = tilemm.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), kernel="tensorcore-f32",
                      precision="int8").cpu().numpy()
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(c) & (c > 0), np.isinf(ref) & (ref > 0))
    finite = np.isfinite(ref)
    assert (np.abs(c[finite] - ref[finite]) <= 2 * 1000 * 2.0**-24 * (np.abs(a) @ np.abs(b))[finite] + 1e-30).all()


@pytest.mark.gpu
def test_gpu_rows_copied_to_128_byte_alignment():
    """A product large enough for align_rows=None to copy its operands (2000- and 8200-byte rows)
    into 128-byte aligned rows, against the float64 reference; and the same with the copies off."""
    torch.manual_seed(9)
    a = torch.randn(4100, 1000, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(1000, 4100, dtype=torch.bfloat16, device="cuda")
    for align_rows in (None, False):
        c = tilemm.plan(a, b, kernel="tensorcore", align_rows=align_rows).execute(poison=True)
        verdict = compare(c.float().cpu().numpy(), a.float().cpu().numpy(), b.float().cpu().numpy(), "bfloat16")
        assert verdict.ok, (align_rows, verdict.message)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,m,n,k,dtype,params", [
    ("tensorcore", 1000, 1000, 1000, torch.bfloat16, {}),              # one program a tile, TMA
    ("tensorcore", 4096, 2048, 512, torch.float16, {}),                # the persistent program
    ("tensorcore", 16, 700, 300, torch.bfloat16, {}),                  # skinny: the pointer program
    ("tensorcore-f64", 300, 200, 100, torch.float64, {}),
    ("tensorcore-f32", 4096, 4096, 4096, torch.float32, dict(precision="tf32"))])   # B copied in 2 panels
def test_gpu_prepared_plan_launched_again_computes_again(kernel, m, n, k, dtype, params):
    """A prepared plan's later launches take the compiled program straight (bound_launch): with
    C poisoned and A's values changed between launches, each launch gives the new product."""
    torch.manual_seed(3)
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    launch, result = tilemm.plan(a, b, kernel=kernel, **params).prepare()
    for scale in (1.0, -2.0, 0.5):
        a.mul_(scale)                                 # powers of two: exact in every dtype
        c = result().fill_(float("nan"))              # the plan's own C, poisoned
        launch()
        torch.cuda.synchronize()
        got = c.double().cpu().numpy()
        want = (a.double() @ b.double()).cpu().numpy()
        tol = {torch.float64: 1e-12, torch.float32: 4e-3}.get(dtype, 2e-2)
        assert np.isfinite(got).all() and np.abs(got - want).max() <= tol * np.abs(want).max(), scale


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(1024, 64), (1024, 300), (1024, 512), (1024, 1000), (2048, 4096)])
def test_gpu_3xtf32_error_below_sgemms(n, k):
    """3xTF32 sums chunks of K steps on the tensor cores (which drop low bits) before each float32
    add; with K in 8 chunks or more its error stays below cuBLAS SGEMM's on the same operands
    (the rung's accuracy bar), at K where one long chunk would not (256-1024). Not at every shape:
    at 1024 x 1024 x 4096 cuBLAS splits K and errs less (docs/tensor_cores.md)."""
    gen = torch.Generator(device="cuda").manual_seed(k)
    a = torch.randn(n, k, device="cuda", generator=gen)
    b = torch.randn(k, n, device="cuda", generator=gen)
    ref = a.double() @ b.double()
    torch.backends.cuda.matmul.allow_tf32 = False
    ours = tilemm.matmul(a, b, kernel="tensorcore-f32")
    worst = ref.abs().max()
    assert (ours.double() - ref).abs().max() / worst < (a @ b).double().sub(ref).abs().max() / worst


@pytest.mark.skipif(ON_GPU, reason="interpreter tests")
def test_a_stack_runs_unbound_so_scratch_is_not_kept_per_matrix(monkeypatch):
    """A prepared plan binds a single product once (its split buffers kept for the plan's life);
    a stack of matrices runs each product unbound, so that its scratch is not kept a matrix."""
    import dataclasses
    from tilemm.ladder import registry
    from tilemm.numerics.data import operands
    from tilemm.ladder.tensorcore import r13_f32
    binds = []
    spied = dataclasses.replace(registry.get("tensorcore-f32"),
                                bind=lambda *args, **kw: binds.append(1) or r13_f32.bind(*args, **kw))
    monkeypatch.setitem(kernel_record.LADDER, "tensorcore-f32", spied)
    a, b = operands(3, 9, 10, 20, "float32")
    tilemm.matmul(a, b, kernel="tensorcore-f32", **SMALL)
    assert binds == [1]
    stack_a, stack_b = np.stack([a, 2 * a, -a]), np.stack([b, b, 3 * b])
    c = tilemm.matmul(stack_a, stack_b, kernel="tensorcore-f32", **SMALL)
    assert binds == [1]
    for i in range(3):
        verdict = compare(c[i], stack_a[i], stack_b[i], "float32")
        assert verdict.ok, verdict.message



@pytest.mark.gpu
@pytest.mark.parametrize("kernel,dtype", [("tensorcore", torch.bfloat16), ("tensorcore-f32", torch.float32),
                                          ("tensorcore-f64", torch.float64), ("tensorcore-int", torch.int32)])
def test_gpu_stacks_broadcast_as_numpy(kernel, dtype):
    """A broadcast stack, (2, 1, 300, 200) @ (3, 200, 100), each product launched unbound: every
    matrix of the (2, 3, 300, 100) result against its own reference."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    a = (torch.randn(2, 1, 300, 200, device="cuda", generator=gen) * 50).to(dtype)
    b = (torch.randn(3, 200, 100, device="cuda", generator=gen) * 50).to(dtype)
    c = tilemm.matmul(a, b, kernel=kernel)
    assert c.shape == (2, 3, 300, 100) and c.dtype == dtype
    name = str(dtype).removeprefix("torch.")
    for i in range(2):
        for j in range(3):
            a_i, b_j = a[i, 0].cpu(), b[j].cpu()
            if name == "bfloat16":
                verdict = compare(c[i, j].float().cpu().numpy(), a_i.float().numpy(), b_j.float().numpy(), name)
            else:
                verdict = compare(c[i, j].cpu().numpy(), a_i.numpy(), b_j.numpy(), name)
            assert verdict.ok, (i, j, verdict.message)


def test_all_arguments_are_the_programs_signature_in_order():
    """What a bound launch hands the compiled program: every argument, keyword ones and defaults
    in their places, launch options (num_warps, num_stages) left out."""
    from tilemm.engine.launches import all_arguments
    from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_kernel
    values = all_arguments(matmul_kernel, ("a", "b", "c", 1, 2, 3, 4, 5, 6, 7, 8, 9),
                           dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=8, UPCAST=False, num_warps=4,
                                num_stages=2))
    assert values == ("a", "b", "c", 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 32, 16, 8, False, None, None, None, (1,) * 9)


def test_3xtf32_stream_k_where_the_last_round_idles_sms():
    from tilemm.engine.tensorcore_launch import stream_k_pays
    from tilemm.ladder.tensorcore.r13_f32 import STREAM_K_ROUNDS
    assert stream_k_pays(4096, 132, 256, STREAM_K_ROUNDS)       # 8192³, 128 x 128 tiles: 31 rounds and 4 tiles
    assert stream_k_pays(64, 132, 128, STREAM_K_ROUNDS)         # 1024 x 1024 x 4096: half the SMs
    assert not stream_k_pays(1024, 132, 128, STREAM_K_ROUNDS)   # 4096³: the last round of tiles is 76% full
    assert not stream_k_pays(128, 132, 64, STREAM_K_ROUNDS)     # 2048³: one round, nearly full


@pytest.mark.skipif(ON_GPU, reason="interpreter tests: on the GPU tilemm.spread.distributed's run checks it")
@pytest.mark.parametrize("m, n, k", [(150, 140, 40), (70, 80, 33), (20, 30, 40)])
def test_interpreter_accumulate_adds_a_16_bit_product_into_float32(m, n, k):
    """launcher(accumulate=True): C += A @ B in C's float32 (tilemm.spread.distributed's K panels), by the
    persistent and TMA programs' epilogue and, for skinny products, the pointer program's sum added."""
    import torch
    from tilemm.ladder.tensorcore import r10_tensorcore
    g = torch.Generator().manual_seed(m)
    a = torch.randn((m, k), generator=g).half()
    b = torch.randn((k, n), generator=g).half()
    c0 = torch.randn((m, n), generator=g)
    c = c0.clone()
    tiles = r10_tensorcore.resolve_tiles(m, n, k, dict(block_m=32, block_n=32, block_k=16, num_warps=4, num_stages=2))
    r10_tensorcore.launcher(a, b, c, group_m=4, accumulate=True, **tiles)()
    want = c0.double() + a.double() @ b.double()
    assert torch.allclose(c.double(), want, rtol=1e-5, atol=1e-4)


def test_skinny_tiles_cover_m_only_where_n_alone_fills_half_the_sms(monkeypatch):
    from tilemm.ladder.tensorcore.r10_tensorcore import default_tiles
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    assert default_tiles(64, 8192, 4096)["block_m"] == 64          # 128 tiles of 64 columns: B read once
    assert default_tiles(33, 8192, 4096)["block_m"] == 64 and default_tiles(20, 8192, 4096)["block_m"] == 32
    assert default_tiles(64, 4096, 2048)["block_m"] == 16          # 64 tiles split in 2: 16 rows keep 256 programs
    assert default_tiles(8, 8192, 4096)["block_m"] == 16
    assert default_tiles(674, 61, 1000)["block_n"] == 16 and default_tiles(8192, 61, 1000)["block_n"] == 64
    # 11 tiles of 64 rows, K split in 12 runs fill the SMs: N covered, A read once
    assert default_tiles(674, 61, 45680)["block_n"] == 64
    # K >= THICK_FROM_K: thick tiles where their runs, K split, fill half the SMs
    assert default_tiles(64, 3072, 12288)["block_m"] == 64            # 48 tiles x 2 runs
    assert default_tiles(64, 3072, 2048)["block_m"] == 16             # a shallower K: 16 rows
    assert default_tiles(3072, 48, 12288)["block_n"] == 64 and default_tiles(24, 1000, 20000)["block_m"] == 32
    assert default_tiles(47, 105, 21839)["block_m"] == 16             # 2 tiles x 18 runs: too few
    # 33-64 rows: from half that K (16-row tiles read B 3-4 times over)
    assert default_tiles(64, 4096, 4096)["block_m"] == 64 and default_tiles(4096, 40, 4096)["block_n"] == 64
    assert default_tiles(32, 4096, 4096)["block_m"] == 16 and default_tiles(64, 3072, 3072)["block_m"] == 16
    assert default_tiles(64, 1024, 4096)["block_m"] == 16             # 16 tiles x 4 runs: too few


def test_few_split_tiles_are_halved_where_that_fills_more_sms(monkeypatch):
    from tilemm.ladder.tensorcore.r10_tensorcore import default_tiles
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)
    assert default_tiles(100, 100, 40000)["block_n"] == 64       # 2 x 21 runs of 64 x 128, 4 x 25 of 64 x 64
    assert default_tiles(395, 292, 12981)["block_n"] == 128      # 21 x 6 runs fill 3/4 of the SMs
    assert default_tiles(488, 795, 2)["block_n"] == 128          # K unsplit: the model's tiles


def test_tile_model_constants_are_the_fit_of_the_committed_record():
    """TILE_CHOICES, MACS_PER_US and HAND_OVER_US_PER_BYTE are tile_model.fit of FIT_RECORDS
    (benchmarks/tile_grid.py's measurements), to the digits shipped; and the fit picks well there."""
    from pathlib import Path
    from tilemm.engine import tile_model
    path = Path(__file__).parent.parent / tile_model.FIT_RECORDS
    found = tile_model.fit([json.loads(line) for line in path.open()])
    assert found["rate"] == pytest.approx(tile_model.MACS_PER_US, rel=0.01)
    assert found["hand_over"] == pytest.approx(tile_model.HAND_OVER_US_PER_BYTE, rel=0.02)
    for bm, bn, warps, cost, fixed in tile_model.TILE_CHOICES:
        assert found["shapes"][(bm, bn, warps)] == pytest.approx((cost, fixed), abs=0.05)
    assert found["median_error"] < 0.15 and found["near"] >= 0.9 * found["problems"]
    assert tile_model.TILE_MARGIN < found["median_error"]


def test_default_tiles_weigh_tile_efficiency_against_waves(monkeypatch):
    from tilemm.ladder.tensorcore.r10_tensorcore import default_tiles
    from tilemm.engine.tile_model import TILE_CHOICES, tile_time
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)

    def tiles(m, n, k):
        t = default_tiles(m, n, k)
        return t["block_m"], t["block_n"]
    assert tiles(8192, 8192, 8192) == (128, 256)       # many waves: the most efficient tiles
    assert tiles(512, 5120, 4096) == (128, 256)        # 80 tiles, one wave, beats 160 in two
    assert tiles(512, 3072, 2048) == (128, 128)        # 48 tiles leave SMs idle; 96 do not
    assert tiles(512, 10240, 8192) == (128, 128)       # 160 tiles take two waves, 320 three of half the work
    assert tiles(3000, 3000, 3000) == (128, 256)       # 128 x 128 predicted faster, but by under TILE_MARGIN
    # the prediction grows with the work and never favours idle SMs at the same efficiency
    big, small = TILE_CHOICES[0], TILE_CHOICES[1]
    assert tile_time(4096, 4096, 8192, *big) > tile_time(4096, 4096, 4096, *big) > 0
    assert tile_time(128, 256 * 132, 4096, *big) < tile_time(128, 256 * 133, 4096, *big)
    assert tile_time(128, 128 * 132, 4096, *small) < tile_time(128, 128 * 133, 4096, *small)
