"""Where a rung's first call with empty disk caches spends its time: the compilers' phases, timed in
a fresh process a case (numba-cuda's frontend, NVVM, the driver's link of PTX into a cubin and the
module's load; each Triton program's compile by stage, ptxas within "cubin").

    PYTHONPATH=src python3 benchmarks/compile_phases.py --out DIR --cases regblock:float32 tensorcore-complex:complex64

A case is KERNEL:DTYPE on two --size square torch CUDA operands. Each process gets new, empty
caches (NUMBA_CACHE_DIR, TRITON_CACHE_DIR, CUDA_CACHE_PATH, TILEMM_CACHE_DIR in a temporary
folder), imports torch, numba-cuda and Triton first (timed apart, as `imports_s`), wraps the
compilers' entry points in timers, then times the first tilemm.matmul to its synchronized result.
Times are exclusive (a phase's own, without the phases it calls); `other_s` is the call's time
outside every phase (planning, operand copies, launches); Triton's C modules built at a first
launch (its CUDA utilities, and where the version generates one a signature each program's
launcher) are a phase of their own. The timers reach into numba-cuda's and
Triton's internals: a phase whose entry point a version lacks is left out, not guessed.
One JSON line a case in DIR/compile_phases.jsonl, stamped.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import tempfile
import time

import harness

CACHES = ("NUMBA_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TILEMM_CACHE_DIR")
SPENT: dict = collections.defaultdict(float)
PROGRAMS: list = []     # Triton programs compiled in the call, in order
STACK: list = []


def exclusive(label, original):
    """original, timed into SPENT[label] less the timed phases it calls."""
    @functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        STACK.append(0.0)
        try:
            return original(*args, **kwargs)
        finally:
            took = time.perf_counter() - start
            SPENT[label] += took - STACK.pop()
            if STACK:
                STACK[-1] += took
    return timed


def wrap(owner, name: str, label: str) -> None:
    if hasattr(owner, name):
        setattr(owner, name, exclusive(label, getattr(owner, name)))


def install_timers() -> None:
    """Timers on numba-cuda's kernel compile, NVVM, the link and the load; on Triton's compile, its
    backend's stages and its C modules' builds."""
    from numba.cuda import codegen, dispatcher
    from numba.cuda.cudadrv import nvvm
    wrap(dispatcher.CUDADispatcher, "compile", "numba: typing, lowering, cache")
    wrap(nvvm, "compile_ir", "numba: NVVM")
    wrap(codegen.CUDACodeLibrary, "get_cubin", "numba: link (PTX to cubin)")
    wrap(codegen.CUDACodeLibrary, "get_cufunc", "numba: module load")
    import triton.compiler
    import triton.runtime.jit as jit
    from triton.backends.nvidia.compiler import CUDABackend

    def compile_program(original):
        def compile(src, *args, **kwargs):
            PROGRAMS.append(getattr(getattr(src, "fn", None), "__name__", str(src)))
            return original(src, *args, **kwargs)
        return exclusive("triton: front (AST, key, cache)", compile)
    timed_compile = compile_program(triton.compiler.compile)
    triton.compiler.compile = timed_compile          # what a JIT function binds at its first launch
    if hasattr(jit, "compile"):                      # (a Triton that imports it into jit.py)
        jit.compile = timed_compile
    # the C modules Triton builds with the host's C compiler on an empty cache: its CUDA utilities
    # once, and (Triton versions that generate one a signature) each program's launcher
    from triton.backends.nvidia import driver as nvidia_driver
    for name in ("compile_module_from_src", "compile_module_from_file"):
        wrap(nvidia_driver, name, "triton: C modules (launchers, utilities)")
    add_stages = CUDABackend.add_stages

    def timed_stages(self, stages, options, *args, **kwargs):
        add_stages(self, stages, options, *args, **kwargs)
        for name, stage in list(stages.items()):
            stages[name] = exclusive(f"triton: {name}", stage)
    CUDABackend.add_stages = timed_stages


def child(case: dict, size: int) -> None:
    start = time.perf_counter()
    import torch
    import numba.cuda  # noqa: F401  (imported before the timers)
    import triton  # noqa: F401
    imports_s = time.perf_counter() - start
    g = torch.Generator(device="cuda").manual_seed(size)
    a, b = (harness.operand(size, size, "n", case["dtype"], g) for _ in range(2))
    torch.cuda.synchronize()
    import tilemm
    install_timers()
    kernel = None if case["kernel"] == "default" else case["kernel"]      # (the default: no kernel named)
    first_s, c = harness.timed(lambda: tilemm.matmul(a, b, kernel=kernel), torch.cuda.synchronize)
    from tilemm.numerics.accuracy import compare_on_device
    verdict = compare_on_device(c, a, b, case["dtype"])
    phases = {label: round(s, 4) for label, s in sorted(SPENT.items(), key=lambda kv: -kv[1])}
    print(json.dumps({"case": f"{case['kernel']}:{case['dtype']}", "m": size, "n": size, "k": size,
                      "imports_s": imports_s, "first_call_s": first_s, "phases_s": phases,
                      "other_s": first_s - sum(SPENT.values()), "triton_programs": PROGRAMS,
                      "answer_ok": bool(verdict.ok), "check": verdict.message}), flush=True)


def main() -> int:
    ap = harness.parser(description=__doc__.split("\n\n")[0], cases=["regblock:float32", "tensorcore-complex:complex64"],
                        size=512, timeout=300.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child), args.size)
        return 0
    out = harness.out_folder(args.out)
    stamp = harness.stamp("compile_phases.py", args, env="PYTHONPATH=src")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET")}
    failed = False
    for label in args.cases:
        kernel, dtype = label.split(":")
        case = {"kernel": kernel, "dtype": dtype}
        with tempfile.TemporaryDirectory(prefix="tilemm-compile-phases-") as tmp:
            caches = {name: os.path.join(tmp, name.lower()) for name in CACHES}
            argv = [sys.executable, os.path.abspath(__file__), "--out", str(out), "--size", str(args.size),
                    "--child", json.dumps(case)]
            lines, error = harness.child_lines(argv, dict(env, **caches), args.timeout)
        record = {**(lines[-1] if lines else {"case": label}), **stamp}
        if error or not record.get("answer_ok"):
            record["error"], failed = error or record.get("check"), True
        harness.append(out / "compile_phases.jsonl", [record])
        print(f"{label}: first call {record.get('first_call_s', float('nan')):.2f} s", record.get("phases_s"),
              f"other {record.get('other_s', float('nan')):.2f} s", record.get("triton_programs", ""),
              record.get("error", ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
