"""The canonical benchmark records: each stamped (device, versions, date, command), each listed in
results/INDEX.md, and the tables, plots and README block made from them in step with them."""
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "benchmarks/results"
CANONICAL = sorted(p for p in RESULTS.glob("*/*") if p.name.endswith((".jsonl", ".jsonl.gz")))


def records(path: Path) -> list[dict]:
    opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
    with opened as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_canonical_files_are_one_folder_a_device():
    assert CANONICAL
    assert {p.parent.name for p in CANONICAL} <= {"cpu", "h100", "h200"}
    assert not [p for p in RESULTS.iterdir() if p.is_dir() and p.name not in ("cpu", "h100", "h200")]


@pytest.mark.parametrize("path", CANONICAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_record_is_stamped(path):
    found = records(path)
    assert found
    for r in found:
        assert isinstance(r.get("device"), str) and r["device"], r
        assert isinstance(r.get("versions"), dict) and r["versions"], r
        assert re.match(r"\d{4}-\d\d-\d\d", r.get("date", "")), r
        assert isinstance(r.get("command"), str) and ("benchmarks/" in r["command"] or "tilemm" in r["command"]), r
    device = path.parent.name
    if device != "cpu":
        assert all(device in r["device"].lower().replace(" ", "") for r in found)


def test_every_canonical_file_is_in_the_index():
    index = (RESULTS / "INDEX.md").read_text()
    for path in CANONICAL:
        assert f"`{path.parent.name}/{path.name}`" in index, path


def test_tables_plots_and_readme_are_in_step_with_the_records():
    done = subprocess.run([sys.executable, "benchmarks/make_tables.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rung_pages_figures_are_in_step_with_their_inputs():
    """benchmarks/make_figures.py drew every rung page's figure from the records and kernels as they
    are now (a digest of its inputs is written beside the figures)."""
    done = subprocess.run([sys.executable, "benchmarks/make_figures.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_figures_check_sees_a_changed_input(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), *sys.path])   # make_figures adds its folders too
    monkeypatch.setitem(os.environ, "NUMBA_ENABLE_CUDASIM", os.environ.get("NUMBA_ENABLE_CUDASIM", "1"))
    import make_figures
    record = tmp_path / "ladder.jsonl"
    record.write_text("{}\n")
    monkeypatch.setattr(make_figures, "inputs", lambda: [record])
    monkeypatch.setattr(make_figures, "DIGEST", tmp_path / "inputs.sha256")
    make_figures.DIGEST.write_text(make_figures.digest())
    assert not [s for s in make_figures.stale() if "inputs.sha256" in s]
    record.write_text('{"changed": 1}\n')
    assert [s for s in make_figures.stale() if "an input changed" in s]


def test_the_default_s_tables_are_in_step_with_their_records():
    done = subprocess.run([sys.executable, "benchmarks/default_table.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_tracked_tree_is_small():
    """The repository travels to the GPU machine with every run: at most 5 MiB tracked."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    assert sum(p.stat().st_size for p in files if p.is_file()) <= 5 * 2**20
