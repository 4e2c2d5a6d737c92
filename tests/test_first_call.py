"""benchmarks/first_call.py on the CPU (--device cpu, NumPy operands): a fresh process a run, a
record a (case, cache state), and a run that fails recorded in its record rather than raised."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def first_call(out: Path, *options) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/first_call.py"), "--out", str(out), "--device", "cpu",
                           "--size", "32", *options], env=env, capture_output=True, text=True, timeout=300)
    path = out / "first_call.jsonl"
    return done, [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_case_is_timed_in_fresh_processes_in_both_cache_states(tmp_path):
    done, records = first_call(tmp_path, "--cases", "default:float32", "--repeat", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(r["case"], r["state"]) for r in records] == [("default:float32", "warm"), ("default:float32", "empty")]
    for r in records:
        assert r["status"] == "ok" and r["runs"] == r["timed"] == 1, r
        assert r["kernel_used"] == "numpy" and "float32 bound" in r["check"]
        assert 0 < r["import_s"] < r["process_s"] and 0 < r["first_call_s"] < r["process_s"]
        assert 0 < r["second_call_s"] <= r["second_call_min_s"] * 1.0001
        assert r["command"].startswith("PYTHONPATH=src python3 benchmarks/first_call.py --device cpu")
        assert r["device"] and r["versions"] and r["date"]
    assert "default:float32" in done.stdout.splitlines()[-1]          # the table's last row


def test_a_run_that_fails_is_recorded_and_the_script_goes_on(tmp_path):
    done, records = first_call(tmp_path, "--cases", "numpy.matmul:float32", "--timeout", "0.05")
    assert done.returncode == 1
    assert [r["state"] for r in records] == ["warm", "empty"]
    assert all(r["status"] == "FAILED" and "timeout" in r["error"] and "first_call_s" not in r for r in records)


def test_an_unknown_case_is_refused_by_name(tmp_path):
    done, records = first_call(tmp_path, "--cases", "no-such-rung")
    assert done.returncode != 0 and not records
    assert "no-such-rung" in done.stderr and "default:float32" in done.stderr
