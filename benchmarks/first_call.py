"""The first call's cost, as a user pays it: tilemm.matmul in a fresh Python process, `import tilemm`
and the first call timed apart, then a second call, on operands made before tilemm is imported;
every answer checked against a float64 (or exact) product.

    PYTHONPATH=src python3 benchmarks/first_call.py --out DIR                    # every case, ~5 min on an H200
    PYTHONPATH=src python3 benchmarks/first_call.py --out DIR --cases default tensorcore --states empty
    PYTHONPATH=src python3 benchmarks/first_call.py --out DIR --device cpu       # NumPy operands, the CPU rungs

Cases, KERNEL:DTYPE (--cases takes these labels, or a kernel's name for all of its cases): the
default kernel (`default`) on torch CUDA tensors of bfloat16, float16, float32, float64, int32 and
int8 (out_dtype="int32"); `torch.matmul` on bfloat16, the anchor; each rung that runs on CUDA, with
its default parameters, on a dtype it takes. With --device cpu: NumPy arrays, the default on
float32, float64, float16, int32 and int8, `numpy.matmul` as the anchor, and the CPU rungs.

A process a run (sys.executable): it imports torch (NumPy on the CPU), makes two random --size
square operands on the device and synchronizes; then times `import tilemm`, the first call to its
synchronized result, and a second call; then checks the answer (tilemm.numerics.accuracy). The anchor's
process imports tilemm after its calls. Two cache states, each run given its caches in a
temporary folder (TRITON_CACHE_DIR, NUMBA_CACHE_DIR, CUDA_CACHE_PATH, CUPY_CACHE_DIR and tilemm's
tuning cache, TILEMM_CACHE_DIR): `empty`, a new folder (all compiled and tuned in the call);
`warm`, the folder after a first run of the same case (what a user's next program pays). --repeat
runs a state (default: 3 warm, 1 empty); a record gives their median and min. A run that fails or
outlives --timeout leaves its error (its stderr's tail) in the record; the others go on.

One JSON line a (case, state) in DIR/first_call.jsonl, stamped; a table at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import harness

DEFAULT_DTYPES = {"cuda": ["bfloat16", "float16", "float32", "float64", "int32", "int8"],
                  "cpu": ["float32", "float64", "float16", "int32", "int8"]}
ANCHOR = {"cuda": ("torch.matmul", "bfloat16"), "cpu": ("numpy.matmul", "float32")}
PREFERRED = ("float32", "bfloat16", "float64", "int8", "complex64", "int32", "float16")   # a rung's dtype
CACHES = {"TRITON_CACHE_DIR": "triton", "NUMBA_CACHE_DIR": "numba", "CUDA_CACHE_PATH": "nv",
          "CUPY_CACHE_DIR": "cupy", "TILEMM_CACHE_DIR": "tilemm"}
STATES = ("warm", "empty")
TIMES = ("first_call_s", "import_s", "second_call_s", "setup_s", "process_s")   # setup: torch, the context, operands


def out_dtype(dtype: str) -> str | None:
    return "int32" if dtype == "int8" else None        # int8 products summed exactly in int32


def all_cases(device: str) -> list[dict]:
    """The cases in the order they run: the default's, the anchor, then the rungs."""
    import tilemm
    found = [dict(kernel="default", dtype=d) for d in DEFAULT_DTYPES[device]]
    found.append(dict(kernel=ANCHOR[device][0], dtype=ANCHOR[device][1]))
    for k in tilemm.kernels(device):
        if not set(k.dtypes) - {"float8_e4m3fn", "float8_e5m2"}:
            continue                    # a product program of tilemm.scaled_matmul's, never tilemm.matmul's
        found.append(dict(kernel=k.name, dtype=next(d for d in PREFERRED + k.dtypes if d in k.dtypes)))
    for case in found:
        case.update(label=f"{case['kernel']}:{case['dtype']}", device=device)
    return found


def chosen(cases: list[dict], wanted: list | None) -> list[dict]:
    """The cases named by label or by kernel, in their order; an unknown name is refused."""
    if not wanted:
        return cases
    known = {c["label"] for c in cases} | {c["kernel"] for c in cases}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(c['label'] for c in cases)}")
    return [c for c in cases if c["label"] in wanted or c["kernel"] in wanted]


# ---------------------------------------------------------------- the child: one fresh process

def host_operand(rng, size: int, dtype: str):
    """A random NumPy operand: floats normal, integers over their range."""
    import numpy as np
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=(size, size), dtype=dtype, endpoint=True)
    return rng.standard_normal((size, size), dtype=np.float32).astype(dtype)


def child(case: dict, size: int) -> None:
    """Time this fresh process's `import tilemm`, first call and second call; print a JSON line."""
    started = time.perf_counter()
    kernel, dtype, device = case["kernel"], case["dtype"], case["device"]
    if device == "cuda":
        import torch
        g = torch.Generator(device="cuda").manual_seed(size)
        a, b = harness.operand(size, size, "n", dtype, g), harness.operand(size, size, "n", dtype, g)
        synchronize = torch.cuda.synchronize
        synchronize()
    else:
        import numpy as np
        rng = np.random.default_rng(size)
        a, b = host_operand(rng, size, dtype), host_operand(rng, size, dtype)

        def synchronize():
            pass
    setup_s = time.perf_counter() - started
    anchor = kernel == ANCHOR[device][0]
    import_s = None
    if anchor:
        call = (lambda: torch.matmul(a, b)) if device == "cuda" else (lambda: np.matmul(a, b))
    else:
        start = time.perf_counter()
        import tilemm
        import_s = time.perf_counter() - start
        options = {"out_dtype": out_dtype(dtype)} if out_dtype(dtype) else {}
        if kernel != "default":
            options["kernel"] = kernel

        def call():
            return tilemm.matmul(a, b, **options)
    first_s, c = harness.timed(call, synchronize)
    second_s, c = harness.timed(call, synchronize)
    try:                        # (the anchor's first import of tilemm: after its calls)
        from tilemm.numerics.accuracy import compare_on_device
    except ImportError:         # a --tree from before tilemm's folders (tilemm.accuracy)
        from tilemm.accuracy import compare_on_device
    verdict = compare_on_device(c, a, b, out_dtype(dtype) or dtype)
    used = kernel if anchor else tilemm.plan(a, b, **options).kernel.name
    print(json.dumps({"setup_s": setup_s, "import_s": import_s, "first_call_s": first_s, "second_call_s": second_s,
                      "kernel_used": used, "answer_ok": bool(verdict.ok), "check": verdict.message}), flush=True)


# ---------------------------------------------------------------- the parent

def run(case: dict, env: dict, args) -> dict:
    """One fresh process of the case: its record, or {"error": why}."""
    argv = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(case), "--size", str(args.size)]
    start = time.perf_counter()
    lines, error = harness.child_lines(argv, env, args.timeout)
    found = dict(lines[-1]) if lines else {}
    found["process_s"] = time.perf_counter() - start
    if error:
        found["error"] = error
    return found


def measure(case: dict, args, base_env: dict) -> dict:
    """{state: [each run's record]}: for each empty run, a new caches' folder; the first one's
    folder then serves the warm runs (which the first run, recorded as empty or not, filled)."""
    runs = {state: [] for state in STATES}
    empties = (args.repeat or 1) if "empty" in args.states else 1
    warms = (args.repeat or 3) if "warm" in args.states else 0
    for i in range(empties):
        with tempfile.TemporaryDirectory(prefix="tilemm-first-call-") as tmp:
            env = dict(base_env, **{name: os.path.join(tmp, sub) for name, sub in CACHES.items()})
            first = run(case, env, args)
            runs["empty"].append(first)
            for _ in range(warms if i == 0 else 0):
                if "error" in first:            # what failed empty fails warm: not run again
                    runs["warm"].append({"error": f"the run that fills the caches failed: {first['error']}"})
                    continue
                runs["warm"].append(run(case, env, args))
    return runs


def record(case: dict, state: str, runs: list, args, stamp: dict) -> dict:
    """A (case, state)'s line: the median and min of each time over its runs that gave one."""
    done = [r for r in runs if "first_call_s" in r]
    rec = {"case": case["label"], "kernel": case["kernel"], "dtype": case["dtype"], "out_dtype": out_dtype(case["dtype"]),
           "tensors": case["device"], "m": args.size, "n": args.size, "k": args.size, "state": state,
           "runs": len(runs), "timed": len(done)}
    for key in TIMES:
        values = [r[key] for r in runs if r.get(key) is not None and (key == "process_s" or r in done)]
        if values:
            rec[key] = statistics.median(values)
            rec[key[:-2] + "_min_s"] = min(values)
    if done:
        rec.update(kernel_used=done[0]["kernel_used"], check=done[0]["check"])
    errors = [r["error"] for r in runs if "error" in r]
    wrong = [r["check"] for r in done if not r["answer_ok"]]
    if errors or wrong:
        rec["error"] = (errors + wrong)[0]
    rec["status"] = "ok" if done and not errors and not wrong else "FAILED"
    return {**rec, **stamp}


def table(records: list[dict]) -> str:
    """The records as a table: medians, a line a (case, state)."""
    def cell(r, key, scale=1.0, unit="s"):
        return f"{r[key] * scale:.3f} {unit}" if key in r else "-"
    lines = [f"{'case':28} {'state':5} {'first call':>11} {'import':>9} {'second call':>12} {'runs':>4}  status"]
    for r in records:
        lines.append(f"{r['case']:28} {r['state']:5} {cell(r, 'first_call_s'):>11} {cell(r, 'import_s'):>9} "
                     f"{cell(r, 'second_call_s', 1e3, 'ms'):>12} {r['runs']:4}  {r['status']}"
                     + (f"  {r['error'][:120]}" if r["status"] != "ok" else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the folder for first_call.jsonl (made)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cuda: torch CUDA tensors (default); cpu: NumPy arrays, the CPU rungs")
    ap.add_argument("--cases", nargs="+", help="labels (KERNEL:DTYPE) or kernels' names (default: every case)")
    ap.add_argument("--states", nargs="+", choices=STATES, default=list(STATES))
    ap.add_argument("--repeat", type=int, help="fresh processes a state (default: 3 warm, 1 empty)")
    ap.add_argument("--size", type=int, default=512, help="the operands' M = N = K (default 512)")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds one process may take (default 150)")
    ap.add_argument("--max-seconds", type=float, default=270.0, help="start no case after this (default 270)")
    ap.add_argument("--tree", help="the source tree (the folder holding tilemm/) the runs import (default: as imported here)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child), args.size)
        return 0
    if args.out is None:
        ap.error("--out DIR is required")
    if args.repeat is not None and args.repeat < 1 or args.size < 1:
        ap.error("--repeat and --size: 1 or more")
    cases = chosen(all_cases(args.device), args.cases)
    stamp = harness.stamp("first_call.py", args, env="PYTHONPATH=src")
    out = harness.out_folder(args.out)
    base_env = dict(os.environ)
    if args.tree:               # e.g. an earlier version's checkout, for a before/after
        base_env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(args.tree), base_env.get("PYTHONPATH")]))
        stamp = {**stamp, "tree": args.tree}
    if args.device == "cuda":       # the GPU itself, not the simulator or the interpreter
        for name in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET"):
            base_env.pop(name, None)
    started, records = time.perf_counter(), []
    for i, case in enumerate(cases):
        if time.perf_counter() - started > args.max_seconds:
            print(f"stopped at --max-seconds: {i} of {len(cases)} cases done", flush=True)
            break
        runs = measure(case, args, base_env)
        found = [record(case, state, runs[state], args, stamp) for state in args.states]
        harness.append(out / "first_call.jsonl", found)
        records += found
        for r in found:
            print(f"{r['case']:28} {r['state']:5} first call {r.get('first_call_s', float('nan')):8.3f} s  "
                  f"import {r.get('import_s') or float('nan'):6.3f} s  {r['status']}", flush=True)
    print(table(records))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
