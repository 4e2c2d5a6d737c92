"""`tilemm grade FILE`: the learner's file examined in a child process with a timeout (a hang or a
crash of their code is a finding, never the grader's), judged, and on a GPU (or for the CPU rung)
timed against the rung, the rung before and the library.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tilemm.learn import lessons
from tilemm.learn.exercises import Exercise, find

SIMULATED = {"NUMBA_ENABLE_CUDASIM": "1", "TRITON_INTERPRET": "1"}


@dataclass
class Grade:
    exercise: Exercise
    file: Path
    findings: list
    examination: dict
    speed: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(f.ok for f in self.findings)


def exercise_of(path: Path) -> str:
    """The EXERCISE = "name" line of an exercise file, read without running it."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        tree = None
    for stmt in tree.body if tree else []:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXERCISE" for t in stmt.targets) \
                and isinstance(stmt.value, ast.Constant):
            return str(stmt.value.value)
    match = re.search(r'^EXERCISE\s*=\s*["\']([\w-]+)["\']', path.read_text(), re.M)   # a file that doesn't parse
    if match:
        return match.group(1)
    raise ValueError(f"{path} names no exercise (no line EXERCISE = \"...\"); pass --exercise RUNG")


def child(module: str, path: Path, exercise: Exercise, env: dict, timeout: float) -> dict:
    """Run `python -m module FILE EXERCISE OUT` and read OUT; a timeout or a crash becomes a fault."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        src = str(Path(__file__).resolve().parents[2])          # this tilemm, wherever it is installed
        env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
               # numba's disk cache of an earlier run of the file (as __main__, say) can't be loaded
               # into the grader's module: a cache of the grade's own
               "NUMBA_CACHE_DIR": str(Path(folder) / "numba-cache")}
        start = time.perf_counter()
        try:
            res = subprocess.run([sys.executable, "-m", module, str(path), exercise.name, str(out)], env=env,
                                 capture_output=True, text=True, timeout=timeout, cwd=path.parent)
        except subprocess.TimeoutExpired:
            running = out.with_suffix(".running")        # the examination's last word: the case it was on
            return {"fault": {"kind": "timeout", "seconds": time.perf_counter() - start,
                              "where": running.read_text() if running.exists() else ""}}
        if out.exists():
            return json.loads(out.read_text())
        return {"fault": crash(res, path)}


def crash(res: subprocess.CompletedProcess, path: Path) -> dict:
    """The fault of a child that died without its result: a signal, or an error of the grader itself."""
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    at = [int(m.group(1)) for m in re.finditer(rf'File "{re.escape(str(path))}", line (\d+)', res.stderr)]
    if res.returncode < 0:
        message = f"killed by signal {-res.returncode}"
    else:
        message = lines[-1] if lines else f"exit status {res.returncode}"
    return {"kind": "crash", "message": message + (f" (last at line {at[-1]} of your file)" if at else ""),
            "line": at[-1] if at else None}


def gpu_present() -> bool:
    """A quick look for an NVIDIA driver; the timing child confirms with numba-cuda."""
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


def grade(path: Path, exercise: str | None = None, timeout: float = 120.0, time_it: bool | None = None) -> Grade:
    """Examine, judge and (where it can) time the learner's file. Raises ValueError for a file that is
    not an exercise; everything wrong inside the file is a finding."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ValueError(f"{path}: no such file (write one with `tilemm learn RUNG`)")
    if not timeout > 0:
        raise ValueError(f"timeout {timeout}: give a number of seconds above 0")
    chosen = find(exercise or exercise_of(path))
    if exercise:
        try:
            named = find(exercise_of(path))
        except ValueError:        # no EXERCISE line, or one naming no exercise: --exercise decides
            named = chosen
        if named.name != chosen.name:   # its launcher and counts are another rung's: every finding would mislead
            raise ValueError(f"{path.name} is exercise {named.rung} ({named.name}), by its EXERCISE line, not "
                             f"{chosen.name}: leave out --exercise, or write exercise {chosen.name} with "
                             f"`tilemm learn {chosen.name}`")
    start = time.perf_counter()
    exam = child("tilemm.learn.examine", path, chosen, SIMULATED, timeout)
    result = Grade(chosen, path, lessons.judge(exam, chosen), exam)
    if time_it is None:
        time_it = chosen.backend == "numba" or gpu_present()
    if time_it and result.passed:
        plain = {name: "0" for name in SIMULATED}
        result.speed = child("tilemm.learn.speed", path, chosen, plain, max(timeout, 300.0))
    result.seconds = time.perf_counter() - start
    return result
