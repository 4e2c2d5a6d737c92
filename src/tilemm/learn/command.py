"""The `tilemm learn` and `tilemm grade` command lines: their parsers and what each runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tilemm.learn.exercises import EXERCISES


def add_parsers(sub) -> None:
    names = ", ".join(f"{e.rung} {e.name}" for e in EXERCISES)
    p = sub.add_parser("learn", help="exercises: write a rung's kernel yourself (lists them; RUNG writes one)",
                       description="Without RUNG: the exercises. With RUNG: write that rung's kernel, its lesson "
                                   "left as a TODO, with its launcher and a small test, into DIR; then run "
                                   "`tilemm grade FILE`.")
    p.add_argument("rung", nargs="?", metavar="RUNG", help=f"a rung's name or number: {names}")
    p.add_argument("--dir", type=Path, default=Path("."), metavar="DIR", help="the folder to write into (default: .)")
    p.add_argument("--solution", action="store_true", help="write the rung's own code, the answer, instead")
    p.add_argument("--force", action="store_true", help="replace a file already there")

    p = sub.add_parser("grade", help="grade an exercise file: shapes, loads counted, the lesson named, timing on a GPU",
                       description="Run an exercise file on awkward shapes against the reference (in the CUDA "
                                   "simulator or Triton's interpreter), count its loads and stores against the "
                                   "rung's, name the lesson a fault or a count points to, and on a GPU time it "
                                   "beside the rung, the rung before and cuBLAS. Exit status 0: passed.")
    p.add_argument("file", type=Path, metavar="FILE", help="the exercise file `tilemm learn` wrote and you completed")
    p.add_argument("--exercise", metavar="RUNG",
                   help="the exercise, where the file has no EXERCISE line (one naming another is refused)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="stop the run after S seconds: an infinite loop is a finding (default 120)")
    p.add_argument("--html", type=Path, metavar="FILE", help="also save the grade as an HTML page")
    p.add_argument("--no-timing", action="store_true", help="skip the timing (on a GPU, or of the CPU rung)")
    p.add_argument("--json", action="store_true", help="print the findings and counts as JSON")


def cmd_learn(args) -> int:
    from tilemm.learn import display, skeleton
    from tilemm.learn.exercises import find
    if args.rung is None:
        display.show(display.exercise_table())
        print("Write one: tilemm learn RUNG [--dir DIR]; grade it: tilemm grade FILE")
        return 0
    path = skeleton.write(find(args.rung), args.dir, solution=args.solution, overwrite=args.force)
    if args.solution:
        print(f"wrote the rung's own code: {path}\ngrade it: tilemm grade {path}")
    else:
        print(f"wrote the exercise: {path}\nwrite the lines marked TODO, then: tilemm grade {path}")
    return 0


def cmd_grade(args) -> int:
    from tilemm.learn import display, grading
    result = grading.grade(args.file, args.exercise, args.timeout, time_it=False if args.no_timing else None)
    if args.json:
        print(json.dumps({"exercise": result.exercise.name, "passed": result.passed,
                          "findings": [f.__dict__ for f in result.findings],
                          "examination": result.examination, "speed": result.speed}, indent=1, default=str))
    if args.html or not args.json:
        display.show(display.grade_view(result), args.html, width=None if sys.stdout.isatty() else 110,
                     echo=not args.json, title=f"tilemm grade {args.file.name}")
    return 0 if result.passed else 1


COMMANDS = {"learn": cmd_learn, "grade": cmd_grade}

