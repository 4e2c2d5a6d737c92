"""benchmarks/harness, the module the benchmark scripts share: the parts that need no GPU (rounds
in rotated order, checks that catch a wrong answer, a failing call or child process recorded)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import harness  # noqa: E402

torch = pytest.importorskip("torch")


def test_rounds_rotate_the_order_and_keep_a_measure_a_round():
    order = []
    found = harness.rounds({"a": "a", "b": "b", "c": "c"}, 3, lambda x: order.append(x) or len(order))
    assert order == list("abc" "bca" "cab")
    assert found == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}


def test_the_float64_check_passes_a_right_answer_and_fails_a_wrong_one():
    g = torch.Generator().manual_seed(0)
    a, b = harness.operand(33, 70, "n", "bfloat16", g, "cpu"), harness.operand(70, 9, "t", "bfloat16", g, "cpu")
    right = (a.float() @ b.float()).to(torch.bfloat16)
    ok, over, relative = harness.float64_check(right, a, b, "bfloat16")
    assert ok and over <= 1 and relative < 1e-2
    wrong = right.clone()
    wrong[5, 3] += 1.0
    assert not harness.float64_check(wrong, a, b, "bfloat16")[0]
    wrong[5, 3] = float("nan")
    assert not harness.float64_check(wrong, a, b, "bfloat16")[0]
    x, y = harness.operand(8, 16, "n", "int8", g, "cpu"), harness.operand(16, 8, "n", "int8", g, "cpu")
    exact = x.int() @ y.int()
    assert harness.float64_check(exact, x, y, "int8")[0]
    assert not harness.float64_check(exact + 1, x, y, "int8")[0]


def test_checked_leaves_out_a_wrong_answer_and_a_call_that_raises(capsys):
    def boom():
        raise RuntimeError("refused")
    calls = {"right": lambda: 1, "wrong": lambda: 2, "raises": boom}
    good, outcomes = harness.checked(calls, lambda label, c: (c == 1, float(c)))
    assert list(good) == ["right"]
    assert outcomes["right"].ok and not outcomes["wrong"].ok and outcomes["wrong"].value == 2.0
    assert not outcomes["raises"].ok and outcomes["raises"].value != outcomes["raises"].value    # NaN
    assert all(o.seconds >= 0 for o in outcomes.values())
    printed = capsys.readouterr().out
    assert "raises" in printed and "refused" in printed


def test_a_child_process_that_fails_gives_its_error_not_an_exception():
    lines, error = harness.child_lines([sys.executable, "-c", "print('{\"x\": 1}'); raise SystemExit('gone wrong')"],
                                       env=None)
    assert lines == [{"x": 1}] and "ended with 1" in error and "gone wrong" in error
    lines, error = harness.child_lines([sys.executable, "-c", "print('{\"x\": 2}')"], env=None)
    assert lines == [{"x": 2}] and error is None
    lines, error = harness.child_lines([sys.executable, "-c", "import time; time.sleep(5)"], env=None, timeout=0.2)
    assert lines == [] and "timeout" in error


def test_options_take_their_defaults_form_and_the_out_folder_is_made(tmp_path):
    args = harness.arguments(argv=["--out", str(tmp_path / "new"), "--sizes", "3", "5", "--quick"],
                             n=0, sizes=[64], quick=False, per_round=0.3)
    assert args.sizes == [3, 5] and args.quick is True and args.per_round == 0.3 and args.n == 0
    assert (tmp_path / "new").is_dir()


def test_a_routing_is_fixed_by_its_seed_whatever_was_drawn_before():
    """harness.routed_rows draws from the generator it is given alone (a seeded routing is the
    same problem in every run): the rows per expert sum to the rows, in a slot each."""
    torch = pytest.importorskip("torch")
    weights = torch.tensor([1.0, 4.0, 0.0, 2.0], dtype=torch.float64)
    first = harness.routed_rows(weights, 1000, torch.Generator().manual_seed(7))
    torch.rand(100)                                   # (the global generator moved)
    again = harness.routed_rows(weights, 1000, torch.Generator().manual_seed(7))
    assert torch.equal(first, again) and first.dtype == torch.int64
    assert first.shape == (4,) and int(first.sum()) == 1000 and int(first[2]) == 0
    assert not torch.equal(first, harness.routed_rows(weights, 1000, torch.Generator().manual_seed(8)))
