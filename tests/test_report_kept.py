"""A report run cut short (Ctrl-C, a failure while measuring or while drawing) leaves the report
of the last finished run whole: its index.html, plots and records as they were. The new report
is written beside it and replaces it only once finished."""
import json

import pytest

from tilemm.tools import cli
from tilemm.tools.bench import report, runner

ARGV = ["bench", "--kernels", "numpy", "--sizes", "8", "16", "--budget", "0.01"]


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def earlier(tmp_path, capsys):
    folder = tmp_path / "rep"
    assert cli.main(ARGV + ["--report", str(folder)]) == 0
    capsys.readouterr()
    files = snapshot(folder)
    assert {"index.html", "results.jsonl", "results.md", "summary.png", "gflops_vs_n.png"} <= set(files)
    return folder, files


def failing_on_the_second_case(monkeypatch, error):
    measure, calls = runner.measure_case, []

    def measure_then_fail(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise error
        return measure(*args, **kwargs)
    monkeypatch.setattr(runner, "measure_case", measure_then_fail)
    return calls


@pytest.mark.parametrize("error,code", [(KeyboardInterrupt(), 130), (OSError(28, "No space left on device"), 2)])
def test_an_interrupted_or_failed_run_leaves_the_last_report_whole(earlier, monkeypatch, capsys, error, code):
    folder, files = earlier
    calls = failing_on_the_second_case(monkeypatch, error)
    assert cli.main(ARGV + ["--report", str(folder)]) == code
    assert len(calls) == 2                                  # it stopped mid-run, one case measured
    assert snapshot(folder) == files                        # every file as it was, byte for byte
    err = capsys.readouterr().err
    assert f"the report in {folder} is left as it was" in err
    partial = report.staging(folder) / "results.jsonl"       # what the cut run measured, kept aside
    assert len(partial.read_text().splitlines()) == 1 and str(partial) in err


def test_two_cut_runs_in_a_row_then_a_whole_one(earlier, monkeypatch, capsys):
    folder, files = earlier
    for error in (KeyboardInterrupt(), OSError(5, "Input/output error")):
        with monkeypatch.context() as m:
            failing_on_the_second_case(m, error)
            cli.main(ARGV + ["--report", str(folder)])
        assert snapshot(folder) == files
    assert cli.main(ARGV + ["--sizes", "8", "--report", str(folder)]) == 0         # a finished run replaces it
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert [r["m"] for r in records] == [8] and not report.staging(folder).exists()
    assert snapshot(folder)["index.html"] != files["index.html"]


def test_a_failure_while_drawing_leaves_the_last_report_whole(earlier, monkeypatch):
    folder, files = earlier

    def plots_fail(records, where):
        (where / "summary.png").write_bytes(b"half a plot")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(report, "plots", plots_fail)
    assert cli.main(ARGV + ["--report", str(folder)]) == 2
    assert snapshot(folder) == files


def test_other_files_in_the_folder_are_left_alone(earlier, capsys):
    folder, _ = earlier
    (folder / "notes.txt").write_text("mine")
    assert cli.main(ARGV + ["--report", str(folder)]) == 0
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "index.html").exists()
