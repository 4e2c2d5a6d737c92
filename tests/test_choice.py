"""The default kernel's shape classes (tilemm.choose.by_shape): the tables shipped are the ones their rule
makes from the committed sweep (package data files that agree with their records), they apply only
on the GPU generation they were measured on, and the default takes the listed rung there and cuBLAS
elsewhere."""
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from tilemm.choose import by_shape as choice
from tilemm.choose import default as dispatch
from tilemm.ladder import record as kernel_record

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "benchmarks/results"
FIT_SWEEP = RESULTS / "h200/default_fit.jsonl.gz"      # the fit half, whole calls: bf16, fp16 and float64
CLASS_CHECKS = RESULTS / "h200/default_grid.jsonl.gz"  # grids of the classes the fit half holds one shape of
INT8_FIT_SWEEP = RESULTS / "h100/default_fit.jsonl.gz"  # int8 -> int32 over the whole wide sweep


def records(path, dtypes=None) -> list[dict]:
    with gzip.open(path, "rt") as f:
        found = [json.loads(line) for line in f]
    return [r for r in found if dtypes is None or r["dtype"] in dtypes]


def default_table_script():
    spec = importlib.util.spec_from_file_location("default_table", ROOT / "benchmarks/default_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["sm90_16bit.json", "sm90_float64.json", "sm90_int8.json"])
def test_each_table_file_is_the_one_its_record_makes(name):
    """The package data file, made again from its record in memory, is the file shipped, and it
    names where it came from."""
    script = default_table_script()
    path = choice.TABLES / name
    assert path.read_text() == script.table_text(script.make_table(name))
    table = choice.read_table(path)
    assert (ROOT / table["record"]).exists() and table["device"] and table["date"] and table["commands"]


def test_shape_classes():
    assert choice.shape_class(8192, 8192, 8192) == (2, True, 1, 0)
    assert choice.shape_class(6175, 3136, 3462) == (2, False, 1, 0)
    assert choice.shape_class(16, 27, 59150) == (0, False, 2, 1)
    assert choice.shape_class(10026, 15687, 110) == (1, False, 0, 0)
    assert choice.shape_class(64, 4096, 4096) == (0, True, 1, 1)
    assert choice.shape_class(65, 4096, 4096) == (0, True, 1, 0)
    assert choice.shape_class(4096, 1, 4096) == (0, False, 1, 2)             # a vector (N = 1: no aligned rows)
    assert choice.shape_class(1, 1, 1) == (0, False, 0, 2)


def test_alignment_is_the_leading_dimensions():
    """What cuBLAS is given decides: 3000 x 5000 x 7001 row-major has A's rows of 7001 elements
    (its slow path; tilemm 3.6x it), but with A a transposed view A's leading dimension is 3000 and
    cuBLAS is fast (tilemm 0.76x it): that problem stays with cuBLAS."""
    torch = pytest.importorskip("torch")
    assert choice.shape_class(3000, 5000, 7001) == (2, False, 1, 0)
    assert choice.shape_class(3000, 5000, 7001, (3000, 5000)) == (2, True, 1, 0)
    assert choice.shape_class(3001, 5000, 7000) == (2, True, 1, 0)            # M is no leading dimension
    assert choice.layout_lds(3000, 5000, 7001, "tn") == (3000, 5000)
    assert choice.layout_lds(3000, 5000, 7001, "nt") == (7001, 7001)
    a, b = torch.empty(7001, 3000).T, torch.empty(7001, 5000)
    assert dispatch.leading_dims(a, b, 7001, 5000) == (3000, 5000)
    assert dispatch.leading_dims(torch.empty(30, 80)[:, :70], torch.empty(70, 5), 70, 5) == (80, 5)   # padded rows
    assert dispatch.leading_dims(torch.empty(70), torch.empty(70, 9, 2)[:, :, 0], 70, 9) == (70, 9)  # neither: copied
    np = pytest.importorskip("numpy")
    assert dispatch.leading_dims(np.empty((7001, 3000)).T, np.empty((7001, 5000)), 7001, 5000) == (3000, 5000)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_shipped_table_is_the_one_the_fit_half_gives(dtype):
    """Both 16-bit dtypes' fit records judged together (the same programs), a class of one fit shape
    with its grid: 512 x 3072 x 2048 alone would take (0, aligned, 1, 0), which its grid keeps with
    the library; 25 x 1 x 7 alone would take vectors of K under 128, which its grid confirms."""
    sixteen_bit = ("bfloat16", "float16")
    sweep = records(FIT_SWEEP, sixteen_bit)
    checks = records(CLASS_CHECKS, sixteen_bit)
    fit = [r for r in sweep if r["tag"].endswith("/fit")]
    assert len([r for r in fit if r["dtype"] == dtype]) == 3 * 104   # cuBLAS, the library rung, tensorcore
    table = choice.winners(fit, min_shapes=2, checks=checks)
    assert table == choice.MEASURED_WINNERS[((9, 0), dtype)]
    assert (0, True, 1, 0) in choice.winners(fit) and (0, True, 1, 0) not in table
    assert (0, False, 0, 2) not in choice.winners(fit, min_shapes=2) and (0, False, 0, 2) in table
    assert choice.winners(fit, min_geomean=100.0) == {}             # the rule can say no
    assert choice.measured([r for r in fit if r["dtype"] == dtype]) == choice.MEASURED_CLASSES[((9, 0), dtype)]["tensorcore"]


def test_float64s_table_is_the_one_its_fit_half_gives():
    """float64 against the library, whole calls: the vectors of K under 128 (one fit shape) taken on
    their grid's word; aligned products, and unaligned ones of 1e10-1e11 flops with K from 128
    (7575 x 14122 x 156 nt ran 0.90x), stay with cuBLAS."""
    fit = records(FIT_SWEEP, ("float64",))
    checks = records(CLASS_CHECKS, ("float64",))
    assert len([r for r in fit if r["variant"] == "tensorcore-f64" and r["tag"].endswith("/fit")]) == 98
    table = choice.winners(fit, rung="tensorcore-f64", min_shapes=2, checks=checks)
    assert table == choice.MEASURED_WINNERS[((9, 0), "float64")]
    assert (0, False, 0, 2) not in choice.winners(fit, rung="tensorcore-f64", min_shapes=2)
    assert not any(aligned for _, aligned, _, _ in table) and (1, False, 1, 0) not in table
    assert choice.measured(fit, "tensorcore-f64") == choice.MEASURED_CLASSES[((9, 0), "float64")]["tensorcore-f64"]


def test_int8s_skinny_classes_are_the_ones_its_fit_half_gives():
    """int8 -> int32 against the library, whole calls: every skinny class the fit half measured won."""
    fit = [r for r in records(INT8_FIT_SWEEP) if r["tag"].endswith("/fit")]
    won = choice.winners(fit, rung="tensorcore-int", against="vs_library")
    assert {c for c in won if c[3]} == set(choice.INT8_SKINNY)
    assert all(choice.MEASURED_WINNERS[((9, 0), "int8")][c] == "tensorcore-int" for c in won)


@pytest.mark.parametrize("capability, dtype, shape, expected", [
    ((9, 0), "bfloat16", (6175, 3136, 3462), "tensorcore"),         # odd sizes: cuBLAS's slow path
    ((9, 0), "bfloat16", (8192, 8192, 8192), None),                 # aligned: cuBLAS
    ((9, 0), "bfloat16", (300, 301, 303), None),                    # small: the launch dominates
    ((9, 0), "float16", (6175, 3136, 3462), "tensorcore"),
    ((9, 0), "float32", (6175, 3136, 3462), None),                  # not measured: cuBLAS
    ((9, 0), "float64", (6175, 3136, 3462), "tensorcore-f64"),      # unaligned, 1e11 flops and more: DMMA
    ((9, 0), "float64", (8192, 8192, 8192), None),                  # aligned: cuBLAS's DGEMM
    ((9, 0), "float64", (7575, 14122, 156), None),                  # unaligned below 1e11 flops: cuBLAS
    ((9, 0), "int32", (4096, 4096, 4096), "tensorcore-int"),        # integers: the library has no fast GEMM
    ((9, 0), "int32", (300, 301, 303), "tensorcore-int"),
    ((9, 0), "int64", (300, 301, 303), None),                       # int64: from 10^10 operations on
    ((9, 0), "int32", (16, 4096, 4096), None),                      # skinny: the library
    ((9, 0), "int8", (16, 4096, 4096), "tensorcore-int"),           # ... but int8 operands, measured there
    ((8, 0), "bfloat16", (6175, 3136, 3462), None),                 # another GPU generation: cuBLAS
    (None, "bfloat16", (6175, 3136, 3462), None),                   # no GPU
])
def test_preferred_by_class_and_gpu(monkeypatch, capability, dtype, shape, expected):
    monkeypatch.setattr(choice, "capability", lambda: capability)
    assert choice.preferred(dtype, *shape) == expected


def test_int8_operands_read_int8s_table_whatever_the_result(monkeypatch):
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    assert choice.preferred("int32", 16, 4096, 4096, operands="int8") == "tensorcore-int"
    assert choice.preferred("int64", 16, 4096, 4096, operands="int8") is None         # int64's table: not skinny
    assert choice.preferred("int32", 16, 4096, 4096, operands="int32") is None
    assert choice.preferred("float32", 16, 4096, 4096, operands="int8") is None


def test_the_default_takes_the_listed_rung(monkeypatch):
    monkeypatch.setattr(choice, "capability", lambda: None)
    unlisted = dispatch.default_kernel("cuda:0", "bfloat16", 8192, 8192, 8192).name      # the ladder's choice
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    assert dispatch.default_kernel("cuda:0", "bfloat16", 6175, 3136, 3462).name == "tensorcore"
    assert dispatch.default_kernel("cuda:0", "bfloat16", 8192, 8192, 8192).name == unlisted
    assert dispatch.default_kernel("cpu", "bfloat16", 6175, 3136, 3462).name == "numpy"
    assert dispatch.default_kernel("cuda:0", "bfloat16", 3000, 5000, 7001).name == "tensorcore"
    assert dispatch.default_kernel("cuda:0", "bfloat16", 3000, 5000, 7001, lds=(3000, 5000)).name == unlisted


def test_a_stack_on_the_gpu_takes_the_library_s_batched_call(monkeypatch):
    """A stack of matrices: the library's one batched call, not a launch a matrix, but for matrices
    of 2^32 multiply-adds and more (here cuBLAS is made available: the CPU tests have none)."""
    import dataclasses
    from tilemm.ladder import registry
    library = registry.get("cublas")
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(library, available=lambda: None,
                                                                        limits=lambda problem: None))
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    for dtype in ("int8", "int32", "bfloat16", "float64"):
        assert dispatch.default_kernel("cuda:0", dtype, 256, 256, 256, dtype, stacked=True).name == "cublas"
    assert dispatch.default_kernel("cuda:0", "int8", 4096, 4096, 4096, "int8").name == "tensorcore-int"
    assert dispatch.default_kernel("cuda:0", "int8", 1024, 2048, 2047, "int8", stacked=True).name == "cublas"
    assert dispatch.default_kernel("cuda:0", "int8", 4096, 4096, 4096, "int8", stacked=True).name == "tensorcore-int"
    assert dispatch.default_kernel("cpu", "int32", 256, 256, 256, stacked=True).name != "cublas"


def test_auto_times_native_rungs_capped_by_the_table(monkeypatch):
    """kernel="auto" on a GPU: rungs that compute the result's own dtype (no float32 or float64 rung
    for bfloat16), and where the table names a rung, that rung and the library alone."""
    from tilemm.choose import auto
    from tilemm.ladder import registry
    from tilemm.ladder.registry import Problem
    monkeypatch.setattr(registry.Kernel, "why_not", lambda self, problem, params: None)   # as on a GPU

    def names(dtype, shape, capability):
        monkeypatch.setattr(choice, "capability", lambda: capability)
        found = auto.candidates("cuda:0", dtype, lambda k: Problem(*shape, k.compute_dtype(dtype)), *shape)
        return [k.name for k in found]
    assert names("bfloat16", (6175, 3136, 3462), None) == ["cublas", "tensorcore"]
    assert names("bfloat16", (6175, 3136, 3462), (9, 0)) == ["cublas", "tensorcore"]     # the table's winner
    assert names("bfloat16", (6000, 6000, 6000), None) == ["cublas", "tensorcore"]       # nothing measured here
    assert names("bfloat16", (6000, 6000, 6000), (9, 0)) == ["cublas"]        # measured, no better: not compiled
    assert names("bfloat16", (300, 301, 303), (9, 0)) == ["cublas"]           # small: measured slower
    assert names("bfloat16", (40000, 40000, 50), (9, 0)) == ["cublas", "tensorcore"]     # a class never measured
    assert names("float32", (4096, 4096, 4096), None) == ["cublas", "tensorcore-f32", "regblock"]
    assert "tensorcore-int" in names("int8", (4096, 4096, 4096), None)
    assert "tensorcore-f64" in names("float64", (4096, 4096, 4096), None)
    assert "tensorcore-f64" not in names("float64", (4096, 4096, 4096), (9, 0))   # measured, no better
    assert "tensorcore-f64" in names("float64", (6175, 3136, 3462), (9, 0))     # the table's winner
