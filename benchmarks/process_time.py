"""What importing tilemm adds to a small NumPy program: the CPU time (user + system) of a fresh
Python process that runs `import tilemm; tilemm.matmul(np.ones((4, 4)), np.ones((4, 4)))`, against
the same program with `numpy.matmul` and no tilemm; pairs of processes interleaved, so that a busy
machine slows both sides alike. Each child checks its answer (4.0 everywhere).

Python runs as it does by default, reading the bytecode caches (.pyc) that an installed package
has: one untimed pair writes them first (PYTHONDONTWRITEBYTECODE is left out of the children's
environment; where it is set and no caches exist, each process compiles tilemm's sources again,
about 0.09 s of CPU).

    PYTHONPATH=src python3 benchmarks/process_time.py --out DIR --pairs 25

One JSON line in DIR/process_time.jsonl, stamped: both sides' median and min seconds, and the
ratio of medians and of mins.
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys

import harness

PROGRAMS = {
    "numpy.matmul": "import numpy as np\nc = np.matmul(np.ones((4, 4)), np.ones((4, 4)))\nassert (c == 4).all()\n",
    "tilemm.matmul": "import numpy as np\nimport tilemm\nc = tilemm.matmul(np.ones((4, 4)), np.ones((4, 4)))\n"
                     "assert (c == 4).all()\n",
}


def cpu_seconds(program: str, env: dict) -> float:
    """User + system seconds of one fresh process running `program` (it must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", program], check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> None:
    args = harness.arguments(__doc__.split("\n\n")[0], argv=argv, pairs=25)
    stamp = harness.stamp("process_time.py", args)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for program in PROGRAMS.values():     # the bytecode caches written, as an installed package has them
        cpu_seconds(program, env)
    seconds = {name: [] for name in PROGRAMS}
    for pair in range(args.pairs):
        for name in (list(PROGRAMS) if pair % 2 == 0 else list(PROGRAMS)[::-1]):
            seconds[name].append(cpu_seconds(PROGRAMS[name], env))
    record = {**stamp, "pairs": args.pairs}
    for name, values in seconds.items():
        record[name] = {"median_s": statistics.median(values), "min_s": min(values)}
    record["ratio_of_medians"] = record["tilemm.matmul"]["median_s"] / record["numpy.matmul"]["median_s"]
    record["ratio_of_mins"] = record["tilemm.matmul"]["min_s"] / record["numpy.matmul"]["min_s"]
    harness.append(args.out / "process_time.jsonl", [record])
    print(f"numpy.matmul {record['numpy.matmul']['median_s']:.3f} s, "
          f"tilemm.matmul {record['tilemm.matmul']['median_s']:.3f} s (medians of {args.pairs}); ratio of "
          f"medians {record['ratio_of_medians']:.2f}x, of mins {record['ratio_of_mins']:.2f}x")


if __name__ == "__main__":
    main()
