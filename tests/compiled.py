"""Compile-only checks of the GPU programs: a program (Python source) that compiles kernels for
sm_90 and prints one JSON line last, run in a process of its own without Triton's interpreter
(which the CPU tier sets before import), and what ptxas gave a compiled kernel (cuobjdump)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent     # (the child imports tests.compiled from here)


def run_program(program: str, fp_fusion: bool = False):
    """program's last line of output, read as JSON. fp_fusion: TRITON_DEFAULT_FP_FUSION=1 unless
    set (as the rungs are launched)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if fp_fusion:
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cuobjdump(cubin: bytes, option: str) -> str:
    """cuobjdump's report (option: "-res-usage", "-sass") on a compiled kernel's cubin."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, option, f.name], capture_output=True, text=True).stdout


def resource_usage(cubin: bytes) -> dict:
    """{"registers": a thread's registers, "stack": its stack bytes (spills)} of a compiled kernel."""
    usage = cuobjdump(cubin, "-res-usage")
    return {"registers": int(re.search(r"REG:(\d+)", usage).group(1)),
            "stack": int(re.search(r"STACK:(\d+)", usage).group(1))}


def gluon_stack_allowed() -> int:
    """The stack bytes (spills) a compiled Gluon program may have: none under the Triton this tier
    installs (3.9 and later); 64 under earlier ones (the GPU image's Triton 3.6 gives the
    warp-specialized fp8 program 40: the same source, another register allocation)."""
    import triton
    return 0 if tuple(int(part) for part in triton.__version__.split(".")[:2]) >= (3, 9) else 64
