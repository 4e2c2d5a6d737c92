"""A benchmark script imported as it is run (benchmarks/NAME.py, with benchmarks/harness beside it
on the path while it loads), for tests of what a script declares (its candidates, variants, checks)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    """benchmarks/<name>.py as a module (the script imports harness beside it)."""
    sys.path.insert(0, str(FOLDER))
    try:
        spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FOLDER))
    return module
