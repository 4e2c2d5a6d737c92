"""The time left a benchmark run announces, replayed on a recorded run: what each case took, its
check apart, and the probes of the integer reference, as the runner recorded them. Once every rung
has run once, each step's estimate of the time left must be within 2x of what the rest of the run
really took; and a case predicted to take over a minute is announced before it starts."""
import json
from pathlib import Path

import pytest

from tilemm.tools.bench import runner, suites, timeleft

RUN = Path(__file__).parent / "data" / "cpu_run_2core_busy.json"


def replay(run: dict, costs: timeleft.CaseCosts):
    """[(estimate, cases still unmeasured, seconds the rest really took)] at each step of the run."""
    cases = [suites.Case(r["kernel"], r["dtype"], r["m"], r["n"], r["k"], r["params"]) for r in run["cases"]]
    took = [r.get("took_s", 0.0) for r in run["cases"]]
    steps = []
    for i, (case, record) in enumerate(zip(cases, run["cases"])):
        left, unknown = costs.left(cases[i:])
        steps.append((left, unknown, sum(took[i:])))
        costs.learn(case, record)
    return steps


def recorded_costs(run: dict, **kwargs) -> timeleft.CaseCosts:
    """CaseCosts that read the reference's probes from the recording, not from this machine."""
    probes = {(r["dtype"], r["m"], r["n"], r["k"]): r["check_probe_cpu_s"] for r in run["cases"]
              if r.get("check_probe_cpu_s")}
    return timeleft.CaseCosts(run["budget_s"], run["skip_over_s"], probe=lambda *problem: probes.get(problem), **kwargs)


def test_the_estimates_of_a_recorded_run_are_within_2x_once_every_rung_has_run():
    run = json.loads(RUN.read_text())
    steps = replay(run, recorded_costs(run))
    total = steps[0][2]
    known = [(left, real) for left, unknown, real in steps if not unknown and real > 1.0]
    assert len(known) >= 10
    for left, real in known:
        assert real / 2 <= left <= 2 * real, (left, real)
    sizing_up = [real for _, unknown, real in steps if unknown]    # the first round: no number claimed for them
    assert total - min(sizing_up) < 0.1 * total


def test_without_the_check_the_estimate_misses():
    """The int32 reference the check computes is most of what is left: leave it out and the
    estimate falls below half the truth, as it did before the check was counted."""
    run = json.loads(RUN.read_text())
    costs = recorded_costs(run)
    costs.check_s = lambda case: 0.0
    steps = replay(run, costs)
    assert any(unknown == 0 and left < real / 2 for left, unknown, real in steps)


def test_the_probe_times_the_reference_on_a_few_rows():
    """CPU seconds of NumPy's integer loop scaled from a slice of A: within 3x of the whole product."""
    import time
    from tilemm.numerics.accuracy import reference
    from tilemm.numerics.data import operands
    timeleft.probe_reference_s.cache_clear()
    probe = timeleft.probe_reference_s("int32", 384, 384, 384)
    a, b = operands(0, 384, 384, 384, "int32", "nn")
    t0 = time.process_time()
    reference(a, b, "int32")
    whole = time.process_time() - t0
    assert whole / 3 <= probe <= 3 * whole
    assert timeleft.probe_reference_s("int32", 8, 2**14, 2**13) is None          # B past the probe's limit


def test_a_case_predicted_over_a_minute_is_announced_before_it_starts(capsys):
    costs = timeleft.CaseCosts(budget_s=2.0, skip_over_s=600.0, probe=lambda *problem: None)
    small, large = (suites.Case("cpu-naive", "int32", n, n, n) for n in (256, 2048))
    costs.learn(small, {"status": "ok", "median_ms": 50.0, "took_s": 2.5, "first_call_s": 0.05, "check_s": 0.05,
                        "timing_s": 2.1})
    runner.warn_if_long(small, costs)
    assert capsys.readouterr().err == ""
    runner.warn_if_long(large, costs)        # 512 x 50 ms = 26 s a call, 3 calls; the check 512 x 0.05 s
    err = capsys.readouterr().err
    assert "cpu-naive int32 2048x2048x2048 is predicted to take ~1.7 min (a call ~26 s, the check ~26 s)" in err
    assert "--skip-over 13 would estimate it instead" in err


def test_a_gpu_rung_in_the_simulator_is_not_started_at_a_size_of_hours(tmp_path, capsys):
    """Under the CUDA simulator a thread is a Python thread: n = 1024 would take hours a call."""
    if not timeleft.emulated_backend("naive"):
        pytest.skip("the simulator is off: a real GPU runs it")
    cases = [suites.Case("naive", "float32", 1024, 1024, 1024)]
    [record] = runner.run_suite(cases, suite="test", budget_s=0.01, skip_over_s=60, progress=True)
    assert record["status"] == "skipped" and record["took_s"] < 1
    assert "CUDA simulator" in record["reason"] and "--sizes 32 64" in record["reason"]
    assert "thousands of times slower" in capsys.readouterr().err


def test_time_left_reads_as_a_person_would_say_it():
    assert timeleft.describe_left(0.0, 6) == "time left: known after each rung's first size (6 rungs to go)"
    assert timeleft.describe_left(42.0, 1) == "~42 s left + 1 rung not yet measured"
    assert [timeleft.duration(s) for s in (0.0, 0.044, 2.5, 45, 210, 7600)] == \
        ["0 s", "44 ms", "2.5 s", "45 s", "3.5 min", "2.1 h"]
