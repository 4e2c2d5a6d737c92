"""Learner-style mistakes, one small edit each to a rung's own solution: the grade fails every one,
with a finding that names what to fix. (The full mutation sweep is a probe; these are its
representatives, the ones a grader once passed among them.)"""
import pytest

from tilemm.learn import exercises, grading, skeleton

ADVANCE_A = "a_ptrs += BLOCK_SIZE_K * stride_ak"
ADVANCE_B = "b_ptrs += BLOCK_SIZE_K * stride_bk"


def mutant(tmp_path, name, old, new):
    path = skeleton.write(exercises.find(name), tmp_path, solution=True)
    text = path.read_text()
    assert old in text, f"{old!r} is not in the {name} solution: the rung changed, update the test"
    path.write_text(text.replace(old, new, 1))
    return path


def first_failure(path):
    result = grading.grade(path, timeout=120, time_it=False)
    assert not result.passed
    return next(f for f in result.findings if not f.ok)


@pytest.mark.parametrize("old, new", [
    (ADVANCE_A, "a_ptrs += BLOCK_SIZE_K"),               # right while A is row-major (stride_ak == 1)
    (ADVANCE_B, "b_ptrs += BLOCK_SIZE_K * N"),           # right while B is row-major (stride_bk == N)
])
def test_triton_pointer_stepped_by_a_row_major_count_fails_on_column_major_operands(tmp_path, old, new):
    first = first_failure(mutant(tmp_path, "tensorcore-tutorial", old, new))
    assert "column-major" in first.detail
    assert "stride_ak" in first.lesson and "stride_bk" in first.lesson and "rung 9" in first.lesson


def test_triton_solution_is_checked_on_column_major_operands_too(tmp_path):
    path = skeleton.write(exercises.find("tensorcore-tutorial"), tmp_path, solution=True)
    result = grading.grade(path, timeout=120, time_it=False)
    assert result.passed and "column-major" in result.findings[0].detail


@pytest.mark.parametrize("name, old, new, title", [
    ("tiled", "        total = acc(0)\n        phase = uint32(0)\n        while phase < k:",
     "        phase = uint32(0)\n        while phase < k:\n            total = acc(0)",
     "wrong wherever K takes more than one step"),
    ("naive", "if row < m and col < n:", "if row < n and col < m:", "an index past the edge of an array"),
    ("tensorcore-tutorial", "range(0, tl.cdiv(K, BLOCK_SIZE_K))", "range(0, K // BLOCK_SIZE_K)",
     "the K loop stops early"),
])
def test_common_mistakes_fail_with_their_lesson(tmp_path, name, old, new, title):
    assert first_failure(mutant(tmp_path, name, old, new)).title == title


def test_regblock_step_swapped_fails_with_uneven_tiles(tmp_path):
    # at the exercise's square tiles a_step == b_step and a thread's values are one run: invisible there
    first = first_failure(mutant(tmp_path, "regblock", "(j // vec_n) * b_step", "(j // vec_n) * a_step"))
    assert "block_m" in first.detail and "a_step == b_step" in first.lesson


def test_wrong_at_the_exercise_tiles_is_reported_as_such_before_a_fault_at_uneven_ones(tmp_path):
    # wrong with the square tiles already: the uneven tiles' fault must not name square tiles as the cause
    path = mutant(tmp_path, "regblock", "b_step + b_base + j", "b_step + a_base + j")
    result = grading.grade(path, timeout=120, time_it=False)
    failures = [f for f in result.findings if not f.ok]
    assert failures[0].title.startswith("wrong") and "a_step == b_step" not in failures[0].lesson
