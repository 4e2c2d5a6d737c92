"""The `tilemm` command as a newcomer meets it: every refusal is one line that names the problem
and a non-zero exit, never a traceback; every option has help; the report of a re-run replaces
the last one. Cases that need a machine without a GPU run `tilemm` in a subprocess with the
simulator and the interpreter off (conftest turns them on for this process)."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilemm.tools import cli
from tilemm.tools.bench import selection

from .conftest import ON_GPU

SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_cli(capsys, *argv):
    """(exit code, stdout, stderr) of tilemm.tools.cli.main(argv) in this process."""
    try:
        code = cli.main(list(argv))
    except SystemExit as refused:           # argparse's refusals
        code = refused.code
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def run_on_a_cpu_machine(*argv, code=None):
    """(exit code, stdout, stderr) of `python -m tilemm.tools.cli argv` (or of `python -c code`) with
    no simulator and no interpreter: what a machine without a GPU sees."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "tilemm.tools.cli", *argv]
    res = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_explain_names_the_rungs_dtypes_for_one_it_does_not_compute(capsys, dtype):
    code, out, err = run_cli(capsys, "explain", "naive", "--dtype", dtype)
    assert code == 2 and err.startswith("tilemm explain: error: ") and err.count("\n") == 1
    assert "int32, int64, float32, float64" in err and "--dtype float32" in err


def test_explain_refuses_a_parameter_without_a_value(capsys):
    code, _, err = run_cli(capsys, "explain", "naive", "--param", "nonsense")
    assert code == 2 and "--param nonsense: write NAME=VALUE" in err


def test_explain_of_a_cpu_rung_names_no_gpu(capsys):
    code, out, _ = run_cli(capsys, "explain", "cpu-tiled", "--simulate", "0")
    assert code == 0 and "traffic model" in out
    assert "H100" not in out and "limits of" not in out and "assumed" not in out


@pytest.mark.skipif(ON_GPU, reason="on the GPU its own limits are named")
def test_explain_of_a_gpu_rung_without_a_gpu_says_whose_limits_it_assumes(capsys):
    code, out, _ = run_cli(capsys, "explain", "tiled", "--simulate", "0")
    assert code == 0 and "no GPU here: the launch limits and peaks are those of an NVIDIA H100" in out


def test_bench_measures_the_kernels_and_dtypes_it_is_given(capsys, tmp_path):
    """Not a suite's: numpy and cpu-tiled in float16 and int8 at 64 and 128, a report written."""
    code, out, err = run_cli(capsys, "bench", "--kernels", "numpy", "cpu-tiled", "--dtypes", "float16", "int8",
                             "--sizes", "64", "128", "--budget", "0.01", "--report", str(tmp_path / "rep"))
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "rep" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["kernel"], r["dtype"], r["m"]) for r in records) == sorted(
        (k, d, n) for k in ("numpy", "cpu-tiled") for d in ("float16", "int8") for n in (64, 128))
    assert all(r["status"] == "ok" for r in records)
    assert (tmp_path / "rep" / "results.md").exists() and (tmp_path / "rep" / "index.html").exists()
    assert " on ?" not in out and "report:" in out


def test_bench_refuses_a_report_folder_it_cannot_write_before_any_work(capsys, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for folder, says in (("/proc/nope", "can't write there"), (str(a_file), "that is a file")):
        code, out, err = run_cli(capsys, "bench", "--kernels", "numpy", "--sizes", "8", "--report", folder)
        assert code == 2 and f"--report {folder}: {says}" in err and out == ""


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_bench_of_a_gpu_rung_on_a_cpu_machine_says_why_nothing_runs():
    code, out, err = run_on_a_cpu_machine("bench", "--kernels", "naive", "--sizes", "64")
    assert code == 2 and "nothing in this selection can run here:\n  naive: needs a CUDA GPU" in err and out == ""


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_the_ladder_suite_on_a_cpu_says_each_reason_once_and_what_runs_here(tmp_path):
    """Not one sentence eleven times: a line per reason with the rungs it stops, and the suite
    that runs on a CPU; no advice to run cuBLAS in the simulator, which has none."""
    code, out, err = run_on_a_cpu_machine("bench", "--suite", "ladder", "--report", str(tmp_path / "r"))
    lines = err.splitlines()
    assert code == 2 and out == "" and not (tmp_path / "r").exists()
    assert lines[0] == "tilemm bench: error: nothing in this selection can run here:"
    assert len(lines) == len(set(lines)) <= 5 and sum("needs a CUDA GPU" in line for line in lines) == 3
    assert "naive, naive-global, uncoalesced, tiled, rect, regblock: needs a CUDA GPU" in err
    cublas = next(line for line in lines if line.strip().startswith("cublas:"))
    assert "simulator" not in cublas and "numpy" in cublas
    assert lines[-1].strip().startswith("on this machine: tilemm bench --suite cpu")


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_no_command_advises_cublas_in_the_simulator():
    for argv in (("kernels",), ("info",), ("check", "--kernels", "cublas")):
        code, out, err = run_on_a_cpu_machine(*argv)
        lines = [line for line in (out + err).splitlines() if "cublas" in line]
        assert lines and not any("NUMBA_ENABLE_CUDASIM" in line or "run it in the simulator" in line
                                 for line in lines), lines


def test_tilemm_alone_lists_its_commands(capsys):
    code, out, err = run_cli(capsys)
    assert code == 0 and "usage: tilemm" in out
    for command in ("kernels", "info", "check", "bench", "explain", "warmup"):
        assert f"\n    {command} " in out
    assert "tilemm bench --suite cpu" in out


def test_bench_sizes_replace_every_size_of_the_seeds_suite():
    cases = selection.select(["seeds"], None, None, (64,))
    assert {(c.m, c.n, c.k) for c in cases} == {(64, 64, 64)}
    assert {c.seed for c in cases} >= {"000", "002", "003"}
    measurements = [(c.kernel, tuple(c.params.items()), c.dtype, c.host_inputs) for c in cases]
    assert len(measurements) == len(set(measurements))          # experiments that meet at 64: measured once


@pytest.mark.skipif(ON_GPU, reason="on the GPU the seeds' GPU rungs run too")
def test_bench_seeds_at_one_size_runs_only_that_size():
    code, out, err = run_on_a_cpu_machine("bench", "--suite", "seeds", "--sizes", "64", "--budget", "0.01", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0, err
    assert records and {(r["m"], r["n"], r["k"]) for r in records} == {(64, 64, 64)}
    assert [r["kernel"] for r in records if r["status"] == "ok"] == ["cpu-naive"]      # seeds 000 and 003 meet


def test_bench_refuses_a_parameter_no_kernel_has_and_honours_one_that_it_has(capsys):
    code, _, err = run_cli(capsys, "bench", "--kernels", "cpu-tiled", "--sizes", "16", "--param", "tile=8")
    assert code == 2 and "no kernel of the selection has a parameter 'tile'" in err and "block_m" in err
    code, _, err = run_cli(capsys, "bench", "--kernels", "cpu-tiled", "--sizes", "16", "--param", "block_m=7")
    assert code == 2 and "block_m=7 is not allowed" in err
    code, out, err = run_cli(capsys, "bench", "--kernels", "cpu-tiled", "--sizes", "16", "--param", "block_m=8",
                             "--budget", "0.01", "--json")
    assert code == 0, err
    [record] = [json.loads(line) for line in out.splitlines()]
    assert record["params"] == {"block_m": 8} and record["status"] == "ok"


@pytest.mark.parametrize("sizes", [["-4"], ["0"], ["16", "x"]])
def test_bench_refuses_a_bad_size_before_any_case(capsys, sizes):
    code, out, err = run_cli(capsys, "bench", "--sizes", *sizes)
    assert code == 2 and "argument --sizes" in err and out == ""


@pytest.mark.parametrize("argv,says", [
    (["--suite", "cpu", "--kernels", "naive"], "the cpu suite measures none of them (its kernels: numpy, "),
    (["--suite", "cpu", "--dtypes", "float16"], "the cpu suite measures float32, int32 only"),
    (["--suite", "wide", "--sizes", "64"], "the wide suite's problems are generated"),
    (["--kernels", "tensorcore", "--dtypes", "int8", "--sizes", "16"], "tensorcore"),
])
def test_an_empty_selection_is_an_error_that_says_why(capsys, argv, says):
    code, out, err = run_cli(capsys, "bench", *argv)
    assert code == 2 and says in err and out == ""


def test_two_report_runs_in_a_row_show_each_case_once(capsys, tmp_path):
    argv = ["bench", "--kernels", "numpy", "cpu-naive", "--sizes", "8", "16", "--budget", "0.01",
            "--report", str(tmp_path)]
    for _ in range(2):
        assert run_cli(capsys, *argv)[0] == 0
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    cases = [(r["kernel"], r["m"]) for r in records]
    assert sorted(cases) == sorted({(k, n) for k in ("numpy", "cpu-naive") for n in (8, 16)})
    page = (tmp_path / "index.html").read_text()
    every = page.split("Every measurement")[1]
    assert every.count("<td>8x8x8</td>") == 2 and every.count("<td>16x16x16</td>") == 2


@pytest.mark.skipif(ON_GPU, reason="needs a machine without a GPU")
def test_scaled_matmul_on_a_cpu_multiplies_on_the_host_and_suggests_no_kernel():
    pytest.importorskip("torch")
    code, out, err = run_on_a_cpu_machine(code=(
        "import torch, tilemm\n"
        "a = torch.ones(4, 4).to(torch.float8_e4m3fn)\n"
        "print(tilemm.scaled_matmul(a, a, 0.5, 2.0).tolist()[0])\n"
        "try:\n    tilemm.scaled_matmul(a, a, block_m=64)\nexcept Exception as e:\n    print(e)\n"))
    assert code == 0 and "[4.0, 4.0, 4.0, 4.0]" in out and "GPU program's" in out and "kernel=" not in out


@pytest.mark.parametrize("error,code,says", [
    (OSError(28, "No space left on device"), 2, "tilemm bench: error: OSError: [Errno 28] No space left on device"),
    (ValueError("a bad value\nover two lines"), 2, "tilemm bench: error: a bad value over two lines"),
    (KeyboardInterrupt(), 130, "tilemm bench: interrupted"),
])
def test_main_turns_what_is_left_into_one_line(capsys, monkeypatch, error, code, says):
    def fails(args):
        raise error
    monkeypatch.setattr(cli, "cmd_bench", fails)
    got, _, err = run_cli(capsys, "bench")
    assert got == code and err == says + "\n"


def test_every_option_has_help():
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, sub in commands.choices.items()
               for a in sub._actions if not a.help]
    assert missing == []
    assert all(a.help for a in commands._choices_actions)          # each command too
