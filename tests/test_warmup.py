"""tilemm.warmup and `tilemm warmup` on the host rungs and under the CUDA simulator; that a new
process finds the numba-cuda kernels an earlier one compiled (on the disk cache, GPU or not); and,
on a GPU, that a rung's first call after a warmup loads its kernel instead of compiling it."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tilemm
from tilemm.choose import by_shape as choice
from tilemm.tools import cli
from tilemm.ladder import r02_cpu_tiled
from tilemm.warmup import Report, plan_jobs, representative

from .conftest import ON_GPU

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_warmup_is_the_function_and_refuses_bad_arguments_before_any_work():
    assert callable(tilemm.warmup) and "warmup" in tilemm.__all__
    with pytest.raises(ValueError, match="not supported"):
        plan_jobs(["float17"])
    with pytest.raises(ValueError, match="unknown kernel"):
        plan_jobs(["float32"], kernels=["fastest"])
    with pytest.raises(ValueError, match="device"):
        plan_jobs(["float32"], device="tpu")
    with pytest.raises(ValueError, match="whole numbers"):
        plan_jobs(["float32"], shapes=[(4, 0, 4)])
    with pytest.raises(ValueError, match=r"\(m, n, k\)"):
        plan_jobs(["float32"], shapes=[(4, 4)])
    with pytest.raises(TypeError, match="names"):
        plan_jobs([32])


def test_a_representative_falls_in_its_shape_class():
    classes = {c for table in choice.MEASURED_WINNERS.values() for c in table}
    found = {c: representative(c) for c in classes}
    for c, shape in found.items():
        if shape is not None:
            assert choice.shape_class(*shape) == c, (c, shape)
    # every class the 16-bit and float64 tables list has one; a few of int8's need more memory than allowed
    for dtype in ("float16", "bfloat16", "float64"):
        assert all(found[c] for c in choice.MEASURED_WINNERS[((9, 0), dtype)]), dtype
    assert sum(shape is not None for shape in found.values()) >= len(found) - 4


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_host_warmup_compiles_cpu_tiled_for_integers_and_says_the_gpu_needs_one():
    report = tilemm.warmup(["int32", "float32"], progress=False)
    assert isinstance(report, Report) and not report.failed
    ran = [s for s in report.steps if s.ok]
    assert [(s.device, s.kernel, s.dtype, s.default) for s in ran] == [("cpu", "cpu-tiled", "int32", True)]
    assert r02_cpu_tiled.tiled_compiled_for("int32")
    assert report.compiled()[("cpu", "cpu-tiled", "int32")] > 0
    reasons = {(s.device, s.dtype): s.status for s in report.skipped}
    assert "NumPy" in reasons[("cpu", "float32")]
    assert "needs a CUDA GPU" in reasons[("cuda", "int32")] and "needs a CUDA GPU" in reasons[("cuda", "float32")]
    assert "cpu-tiled" in str(report) and "1 calls ran, 0 failed, 3 skipped" in str(report)


@pytest.mark.skipif(ON_GPU, reason="the simulator's path")
def test_named_rungs_run_under_the_simulator_at_a_toy_size():
    report = tilemm.warmup("float32", kernels=["regblock", "tiled", "cpu-naive"], device="cuda", progress=False)
    assert not report.failed
    ran = {(s.kernel, s.shape) for s in report.steps if s.ok}
    assert ran == {("regblock", (8, 8, 8)), ("tiled", (8, 8, 8))}
    skipped = {s.kernel: s.status for s in report.skipped}
    assert "a cpu rung" in skipped["cpu-naive"] and "needs a CUDA GPU" in skipped["default"]


def test_given_shapes_and_a_rung_that_does_not_compute_the_dtype():
    report = tilemm.warmup(["float16"], kernels=["cpu-tiled", "tensorcore-int"], shapes=[(3, 5, 7)], device="cpu",
                           progress=False)
    assert [(s.kernel, s.shape, s.status) for s in report.steps if s.ok] == [("cpu-tiled", (3, 5, 7), "ok")]
    assert all(s.kernel != "tensorcore-int" for s in report.steps)     # it computes no float16: nothing to warm


def test_cli_warmup_json_and_one_line_errors(capsys):
    assert cli.main(["warmup", "--dtypes", "int64", "--device", "cpu", "--shape", "9", "8", "7", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["kernel"], r["shape"], r["status"]) for r in lines] == [("numpy", [9, 8, 7], "ok")]   # below cpu-tiled's size
    with pytest.raises(SystemExit) as e:
        cli.main(["warmup", "--dtypes", "float17"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "invalid choice" in err[-1]


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_cli_warmup_on_a_cpu_says_there_is_nothing_to_warm_for_floats(capsys):
    """No progress bar and no empty table: what was not warmed, why, and what would be."""
    assert cli.main(["warmup"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tilemm warmup: nothing to warm here for float32:")
    assert "NumPy, which compiles nothing" in out and "needs a CUDA GPU" in out
    assert "tilemm warmup --dtypes int32 int64" in out and "━" not in out and "┏" not in out


# A child without the simulator, where numba-cuda compiles for sm_90 with NVVM from PyPI and no
# GPU: its device queries answer for an H100-class GPU, and binding to a context keeps the PTX.
# Everything else is numba-cuda's own path: the key, the index and data files, the load.
CHILD = textwrap.dedent("""
    import json, sys, types
    import numba
    from numba.cuda import codegen, dispatcher
    device = types.SimpleNamespace(compute_capability=(9, 0))
    codegen.devices.get_context = lambda: types.SimpleNamespace(device=device)
    dispatcher.get_current_device = lambda: device
    dispatcher._Kernel.bind = lambda self: self._codelibrary.get_asm_str()
    import tilemm
    from tilemm.ladder.simt import launch
    for name in sys.argv[1:]:
        kernel = tilemm.kernel(name)
        factory, compile_params = launch.FACTORIES[name]
        params = kernel.resolve({})
        launch.compiled(factory, "float32", **{p: params[p] for p in compile_params}).compile(
            (numba.float32[:, ::1],) * 3)
    print(json.dumps(launch.disk_cache_counts()))
""")


def test_a_new_process_loads_the_simt_kernels_an_earlier_one_compiled(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=SRC)
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", CHILD, "naive", "regblock"], env=env, capture_output=True,
                             text=True, timeout=600)
        if "libnvrtc" in res.stderr or "libnvvm" in res.stderr:
            pytest.skip("NVVM/NVRTC not installed (scripts/setup.sh installs nvidia-nvvm and nvidia-cuda-nvrtc)")
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        if len(runs) == 1:
            index = sorted(p.name for p in tmp_path.rglob("*.nbi"))
            data = list(tmp_path.rglob("*.nbc"))
    assert runs == [{"loaded": 0, "compiled": 2}, {"loaded": 2, "compiled": 0}]
    assert len(index) == 2 and index[0].startswith("r03_naive_kernel.make_naive") and "regblock" in index[1]
    assert len(data) == 2 and all(p.stat().st_size > 1000 for p in data)
    assert sorted(p.name for p in tmp_path.rglob("*.nbi")) == index       # the second run wrote no new entry
    assert len(list(tmp_path.rglob("*.nbc"))) == 2


GPU_CHILD = textwrap.dedent("""
    import json, sys, time
    import torch
    import tilemm
    from tilemm.ladder.simt import launch
    if sys.argv[1] == "warmup":
        report = tilemm.warmup(["float32"], kernels=["regblock"], device="cuda", progress=False)
        print(json.dumps({"failed": [s.status for s in report.failed], "ran": sum(s.ok for s in report.steps)}))
    else:
        a = torch.randn(512, 512, device="cuda")
        b = torch.randn(512, 512, device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        c = tilemm.matmul(a, b, kernel="regblock")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        right = torch.allclose(c, a @ b, rtol=1e-4, atol=1e-3)
        print(json.dumps({"seconds": seconds, "right": right, **launch.disk_cache_counts()}))
""")


@pytest.mark.gpu
def test_after_a_warmup_a_new_process_loads_regblock_within_a_second(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONPATH=SRC)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = []
    for what in ("warmup", "call"):
        res = subprocess.run([sys.executable, "-c", GPU_CHILD, what], env=env, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        out.append(json.loads(res.stdout.strip().splitlines()[-1]))
    warmed, call = out
    assert warmed["failed"] == [] and warmed["ran"] >= 4
    assert call["right"] and call["compiled"] == 0 and call["loaded"] >= 1, call
    # (the time of that first call is a benchmark's figure, benchmarks/compile_times.py, not a test's)


def test_warmup_leaves_results_alone():
    import numpy as np
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(20, dtype=np.int32).reshape(4, 5)
    before = tilemm.matmul(a, b)
    tilemm.warmup(["int32"], device="cpu", shapes=[(3, 5, 4), (64, 64, 64)], progress=False)
    assert np.array_equal(tilemm.matmul(a, b), before) and np.array_equal(before, a @ b)
