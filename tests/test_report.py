"""The report a person opens: built from a real (tiny, CPU) benchmark run, then loaded in
headless Chromium, which must show every image and log nothing to the console."""
import re
import shutil
import subprocess

import pytest

from tilemm.tools.bench import load, report, roofline, runner, suites, timeleft

from .conftest import ON_GPU

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    cases = suites.cpu_suite((16, 32))
    runner.run_suite(cases, suite="cpu", budget_s=0.01, results=out / "results.jsonl", progress=False)
    report.write(out)
    return out


PLOTS = ("summary.png", "gflops_vs_n.png", "time_vs_n.png", "speedup_vs_naive.png", "roofline.png")


def test_report_files_and_ratios(folder):
    records = report.load(folder)
    assert len(records) == 12 and all(r["status"] == "ok" for r in records)
    assert all(r["device"] and r["versions"] and r["date"] for r in records)
    assert all(r["ratio"] is not None for r in records)
    every = (folder / "results.md").read_text().split("## Every measurement")[1]
    assert every.count("\n| ") == 1 + 12                  # the header, then each case once
    for png in PLOTS:
        assert (folder / png).read_bytes()[:4] == b"\x89PNG"


def test_columns_empty_in_every_row_are_left_out(folder):
    """A CPU run has no parameters, no peak and no seed's figure: no such columns (and no notes,
    unless the machine was busy)."""
    header = (folder / "results.md").read_text().split("## Every measurement")[1].strip().splitlines()[0]
    assert "kernel" in header and "GFLOP/s" in header
    quiet = not any(load.busy(r) for r in report.load(folder))
    for empty in ("params", "% peak", "seed's figure") + ("note",) * quiet:
        assert f"| {empty} |" not in header
    page = (folder / "index.html").read_text()
    assert "<th>% peak</th>" not in page and "<th>params</th>" not in page


def test_the_summary_is_the_ladder_at_one_size(folder):
    """Rungs in ladder order, the library last; speed-ups over the rung before and over naive."""
    summary = report.ladder_summary(report.load(folder))
    assert (summary["dtype"], summary["n"], summary["naive"]) == ("float32", 32, "cpu-naive")
    rows = summary["rows"]
    assert [r["label"] for r in rows] == ["cpu-naive", "cpu-tiled", "numpy"]
    naive, tiled, library = (r["gflops"] for r in rows)
    assert rows[0]["over_naive"] == 1 and rows[0]["over_before"] is None
    assert rows[1]["over_before"] == pytest.approx(tiled / naive) and rows[1]["over_naive"] == pytest.approx(tiled / naive)
    assert rows[2]["anchor"] and rows[2]["over_before"] is None and rows[2]["over_naive"] == pytest.approx(library / naive)
    page = (folder / "index.html").read_text()
    assert page.index("Summary: the ladder at n = 32") < page.index("Every measurement")
    assert "summary.png" not in re.findall(r"<figcaption>([^<]*)</figcaption>", page)[0]   # captions, not file names


def test_a_cpu_roofline_has_measured_memory_and_compute_roofs(folder):
    roofs, source = roofline.roofs(report.load(folder), "cpu")
    assert roofs["bandwidth_gbs"] > 0 and roofs["float32"] > 0 and roofs["float64"] > 0
    assert "measured" in source


def open_in_chromium(page):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs Debian's package where it can)")
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                          "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    console = [line for line in res.stderr.splitlines() if ":CONSOLE" in line]
    loaded = re.search(r'data-images-loaded="(\d+)"', res.stdout)
    return console, int(loaded.group(1)) if loaded else None


def test_page_loads_in_chromium_with_every_image(folder):
    console, loaded = open_in_chromium(folder / "index.html")
    assert console == []
    assert loaded == len(PLOTS)


def test_a_missing_image_is_caught(folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "roofline.png").unlink()
    console, loaded = open_in_chromium(broken / "index.html")
    assert loaded == len(PLOTS) - 1 and any("image did not load: roofline.png" in line for line in console)


@pytest.mark.skipif(ON_GPU, reason="needs a rung that can't run here: the simulator has no cuBLAS, the GPU has")
def test_a_rung_that_cannot_run_here_is_skipped_with_its_reason(tmp_path):
    """On a machine without a GPU (here: the simulator, which has no cuBLAS) the suite goes on."""
    cases = [suites.Case("cublas", "float32", 8, 8, 8), suites.Case("numpy", "float32", 8, 8, 8)]
    records = runner.run_suite(cases, suite="test", budget_s=0.01, results=tmp_path / "r.jsonl", progress=False)
    assert records[0]["status"] == "skipped" and "no cuBLAS" in records[0]["reason"]
    assert records[1]["status"] == "ok"


def test_a_size_too_large_for_memory_or_hours_is_refused_before_its_operands_are_made(tmp_path, monkeypatch):
    """A first size with nothing to predict it from: too big for memory, or at least longer than the
    budget at the host's BLAS rate, is skipped up front with its reason, never a MemoryError or hours."""
    from tilemm.tools.bench import upfront
    monkeypatch.setattr(upfront, "host_roofs", lambda: {"float32": 0.001, "float64": 0.0005})   # TFLOP/s
    monkeypatch.setattr(upfront, "memory_bytes", lambda: 8 * 2**30)
    cases = [suites.Case("cpu-naive", "float32", 100000, 100000, 100000),
             suites.Case("cpu-tiled", "float32", 8000, 8000, 8000), suites.Case("numpy", "float32", 8, 8, 8)]
    records = runner.run_suite(cases, suite="test", budget_s=0.01, skip_over_s=60, results=tmp_path / "r.jsonl",
                               progress=False)
    by_kernel = {r["kernel"]: r for r in records}
    assert by_kernel["cpu-naive"]["status"] == "skipped" and "GiB" in by_kernel["cpu-naive"]["reason"]
    assert by_kernel["cpu-tiled"]["status"] == "skipped" and "at least ~17.1 min a call" in by_kernel["cpu-tiled"]["reason"]
    assert by_kernel["numpy"]["status"] == "ok"


def test_bench_params_go_to_the_kernels_that_have_them():
    from tilemm.tools.bench import selection
    from tilemm.tools.cli import parse_params
    cases = selection.with_params(suites.tensorcore_suite(), parse_params(["autotune=True"]))
    assert {c.kernel for c in cases if c.params.get("autotune") is True} == {"tensorcore"}
    assert all(c.params == {} for c in cases if c.kernel != "tensorcore")
    assert {c.dtype for c in cases} == {"bfloat16", "int32", "float32", "float64", "complex64"}
    with pytest.raises(ValueError, match="no kernel of the selection has a parameter 'tile'"):
        selection.with_params(suites.tensorcore_suite(), {"tile": 8})


def test_the_time_left_comes_from_the_predicted_times_of_the_cases_left():
    """A rung measured at n = 16 (1 ms a call) predicts n = 32 at 8 ms a call; a case past
    --skip-over is estimated, not run, and costs nothing; the check and the set-up measured count."""
    costs = timeleft.CaseCosts(budget_s=0.5, skip_over_s=0.05)
    cases = [suites.Case("cpu-tiled", "float32", n, n, n) for n in (16, 32, 64)]
    assert costs.left(cases) == (0.0, 1)                       # nothing measured: no number for the rung
    costs.learn(cases[0], {"status": "ok", "median_ms": 1.0, "took_s": 1.0, "first_call_s": 0.1,
                           "check_s": 0.2, "timing_s": 0.5})    # 0.2 s of set-up besides
    check_32 = 0.2 * 8
    assert costs.case_s(cases[1]) == pytest.approx(costs.timed_s(8e-3) + check_32 + 0.2)
    assert costs.case_s(cases[2]) == 0.0                       # 64: 64 ms > 50 ms, estimated
    assert costs.left(cases[1:]) == (pytest.approx(costs.case_s(cases[1])), 0)
    # the calls: the first, then the budget's timed ones (at least 3, at most 30); a slow rung: 3 calls
    assert [costs.timed_s(s) for s in (8e-3, 0.1, 1.0)] == pytest.approx([8e-3 + 30 * 8e-3, 0.1 + 0.6, 3.0])
    # a second size: the exponent between them (a cache cliff: time grows faster than the flops)
    costs.learn(cases[1], {"status": "ok", "median_ms": 32.0, "took_s": 2.0, "check_s": 1.6})
    assert costs.call_s(cases[2]) == pytest.approx(32e-3 * 8 ** 1.5)        # 32x for 8x the flops: clipped at 1.5


def test_bfloat16_cases_run_on_torch_tensors(tmp_path):
    """NumPy has no bfloat16: the runner hands the rung torch bfloat16 tensors (here on the CPU,
    in Triton's interpreter) and checks the result against the exact float32 values."""
    cases = [suites.Case("tensorcore", "bfloat16", 70, 80, 33, params={"block_m": 32, "block_n": 32, "block_k": 16,
                                                                      "num_warps": 4, "num_stages": 1})]
    records = runner.run_suite(cases, suite="test", budget_s=0.01, results=tmp_path / "r.jsonl", progress=False)
    assert records[0]["status"] == "ok", records[0]


def test_roofs_are_those_of_the_unit_each_rung_runs_on():
    """3xTF32 runs on TF32 tensor cores, three products each: its roof is not float32's SIMT one."""
    rec = dict(m=64, n=64, k=64, dtype="float32", params={})
    assert roofline.unit_of({**rec, "kernel": "tensorcore-f32"}) == ("tf32", 3)
    assert roofline.unit_of({**rec, "kernel": "tensorcore-f32", "params": {"precision": "int8"}}) == ("int8", 6)
    assert roofline.unit_of({**rec, "kernel": "naive"}) == ("float32", 1)
    assert roofline.unit_of({**rec, "kernel": "a-rung-since-removed"}) == ("float32", 1)


def test_a_records_command_line_runs_as_written():
    """machine.command_line writes what argparse reads back: flags bare (not `--graphs True`,
    which argparse refuses), unset options left out, lists spaced, underscores as dashes."""
    import argparse
    from tilemm.system import machine
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--graphs", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--per-round", type=float)
    ap.add_argument("--shapes", nargs="+")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(["--out", "x", "--graphs", "--per-round", "0.3", "--shapes", "1x2x3", "4x5x6"])
    line = machine.command_line("python3 bench.py", args)
    assert line == "python3 bench.py --graphs --per-round 0.3 --shapes 1x2x3 4x5x6"
    again = ap.parse_args(line.split()[2:] + ["--out", "x"])
    assert vars(again) == vars(args)


def test_a_record_of_another_script_is_read_with_its_speed():
    r = report.normalized({"kernel": "cublas", "status": "ok", "m": 10, "n": 10, "k": 10, "median_ms": 0.5,
                            "tflops": 4e-6, "device": "d"})
    assert r["gflops"] == pytest.approx(4e-3) and r["params"] == {} and r["suite"] == ""


def test_sizes_past_the_budget_are_estimated_from_the_measured_ones_not_run(tmp_path):
    """A slow rung is measured at its small sizes; the larger ones (listed first here) are
    predicted from the largest measured one, marked as estimates in the records, table and plot."""
    cases = [suites.Case("cpu-naive", "float32", n, n, n) for n in (64, 16, 32)]
    records = runner.run_suite(cases, suite="cpu", budget_s=0.01, skip_over_s=1e-9, results=tmp_path / "results.jsonl",
                               progress=False)
    assert [(r["m"], r["status"]) for r in records] == [(16, "ok"), (32, "estimated"), (64, "estimated")]
    measured_ms = records[0]["median_ms"]
    assert records[2]["median_ms"] == pytest.approx(measured_ms * 64, rel=1e-9)   # (64/16)^3 times the flops
    assert "not run" in records[1]["reason"]
    rows = report.markdown(report.load(tmp_path))
    assert rows.count("| estimated |") == 2 and "~" in rows
    report.write(tmp_path)
    assert (tmp_path / "gflops_vs_n.png").exists()


def test_the_wide_sweep_is_generated_the_same_every_time_with_its_classes():
    problems = suites.wide_problems()
    assert problems == suites.wide_problems() and len(problems) >= 150
    assert {p.layout for p in problems} == set(suites.LAYOUTS)
    assert {p.kind for p in problems} == {"random", "transformer", "deep-k", "shallow-k"}
    random_dims = [d for p in problems if p.kind == "random" for d in (p.m, p.n, p.k)]
    assert 0.4 < sum(d % 2 for d in random_dims) / len(random_dims) < 0.6 and max(random_dims) <= 16384
    for kind in ("random", "transformer"):
        splits = [p.split for p in problems if p.kind == kind]
        assert abs(splits.count("fit") - splits.count("held-out")) <= 1
    assert all(p.k >= 8192 and max(p.m, p.n) <= 1024 for p in problems if p.kind == "deep-k")
    assert {p.m for p in problems if p.kind == "transformer"} == set(suites.TOKENS)


def test_the_wide_summary_reports_fit_and_held_out_apart(tmp_path):
    """A tiny wide run on the CPU (the library's place taken by NumPy): geomeans by split, the worst problem."""
    cases = [suites.Case(k, "float32", m, n, kk, layout=lay, tag=f"random/{split}")
             for (m, n, kk, lay, split) in [(9, 7, 5, "nt", "fit"), (6, 11, 3, "tn", "held-out")]
             for k in ("cpu-tiled", "numpy")]
    runner.run_suite(cases, suite="wide", budget_s=0.01, results=tmp_path / "results.jsonl", progress=False)
    rows = report.wide_summary(report.load(tmp_path))
    assert [(r["kernel"], r["problems"]) for r in rows] == [("cpu-tiled", 2)]
    assert rows[0]["fit"] and rows[0]["held-out"] and "x" in rows[0]["worst_problem"]
    report.write(tmp_path)
    assert "The wide sweep" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "ratio_vs_size.png").exists()
