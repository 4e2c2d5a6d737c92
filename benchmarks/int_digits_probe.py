"""What the exact integer route through float64 GEMMs on 11-bit digits (tilemm.ladder.int_dgemm,
the library rung's integers while Triton is not loaded) launches, and what its first call costs.

    python3 benchmarks/int_digits_probe.py --device cpu              # the aten ops a call runs (CPU tensors)
    PYTHONPATH=src python3 benchmarks/int_digits_probe.py --out DIR  # on the GPU, a fresh process a dtype
    PYTHONPATH=src python3 benchmarks/int_digits_probe.py --out DIR --tree OLD/src   # an earlier tree's

--device cpu (no GPU needed): each case (int32 and int64, 2-D and a stack) run once through
int_dgemm.run on CPU tensors (after a first run) under torch.profiler and a dispatch mode; printed: the distinct aten
op names the profiler lists (wrappers such as aten::to and aten::matmul among them), the ops a
call dispatches to kernels (each (op, dtypes, scalar arguments) a kind: a proxy for the distinct
CUDA kernels), and their launches; every answer checked against NumPy's.

--device cuda: for each dtype a fresh process (operands made first, as benchmarks/first_call.py
does): `import tilemm`, the first tilemm.matmul of two --size square CUDA tensors timed to its
synchronized result (the process's first use of the route: what lazy module loading and a
first dispatch cost), then the distinct CUDA kernels a call launches (torch.profiler, CUDA
activity, on the second call), then --calls repeated calls (CUDA events around each, the GPU
idle before it: the median, harness.event_timer) and calls queued back to back (harness.queued_ms);
every answer checked exactly against NumPy's; then (but with --no-phases) one more process a dtype
whose first call runs each op with the GPU idle before it, timed apart: where the first call's
time goes (each op's first launch; the rest is Python). One JSON line a process in
DIR/int_digits_probe.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import harness

CPU_CASES = {"2-D": ((64, 64), (64, 64)), "stacked": ((3, 64, 64), (3, 64, 64))}
NO_KERNEL = ("_unsafe_view", "empty", "empty_strided", "empty_like")   # neither views by schema nor launches


def full_range(shape, dtype: str, generator, device: str):
    """Random integers over dtype's whole range, its least and greatest among them."""
    import torch
    info = torch.iinfo(getattr(torch, dtype))
    x = torch.randint(info.min, info.max, shape, dtype=getattr(torch, dtype), generator=generator, device=device)
    x.view(-1)[0], x.view(-1)[-1] = info.min, info.max
    return x


def numpy_product(a, b):
    """NumPy's matmul of the operands' own dtype: wrapped as two's complement."""
    import numpy as np
    return np.matmul(a.cpu().numpy(), b.cpu().numpy())


# ---------------------------------------------------------------- the CPU: aten ops a call runs

def kernel_name(op: str) -> str:
    """An op's name as its kernel's: in place or not, one kernel (add_ as add, __irshift__ as __rshift__)."""
    if op.startswith("__i") and op.endswith("__"):
        return "__" + op[3:]
    return op[:-1] if op.endswith("_") and not op.endswith("__") and op != "copy_" else op


def kinds_of(call) -> list:
    """[(op, dtypes of its tensor arguments, its other arguments' types or dtypes), ...] each op call dispatches
    that may launch a kernel (views and allocations left out), in order."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            flat = list(args) + list((kwargs or {}).values())
            tensors = tuple(str(x.dtype).replace("torch.", "") for x in flat if isinstance(x, torch.Tensor))
            scalars = tuple(str(x).replace("torch.", "") if isinstance(x, torch.dtype) else type(x).__name__
                            for x in flat if isinstance(x, (int, float, bool, torch.dtype)))
            name = kernel_name(str(func.overloadpacket).removeprefix("aten."))
            if not func.is_view and name not in NO_KERNEL:
                self.calls.append((name, tensors, scalars))
            return func(*args, **(kwargs or {}))

    with Log() as log:
        call()
    return log.calls


def cpu_counts(dtype: str) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from tilemm.ladder import int_dgemm
    rows = []
    for case, (a_shape, b_shape) in CPU_CASES.items():
        g = torch.Generator().manual_seed(len(case))
        a, b = full_range(a_shape, dtype, g, "cpu"), full_range(b_shape, dtype, g, "cpu")
        c = torch.empty(torch.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]),
                        dtype=a.dtype)
        int_dgemm.run(a, b, c)          # (what a first call makes once: the constants on the device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            int_dgemm.run(a, b, c)
        names = sorted({e.name for e in prof.events() if e.name.startswith("aten::")})
        kinds = kinds_of(lambda: int_dgemm.run(a, b, c))
        exact = bool((c.numpy() == numpy_product(a, b)).all())
        rows.append(dict(dtype=dtype, case=case, aten_names=len(names), kinds=len(set(kinds)), launches=len(kinds),
                         exact=exact, names=names, kind_list=sorted({f"{op}{list(t)}{list(s) if s else ''}"
                                                                     for op, t, s in kinds})))
    return rows


# ---------------------------------------------------------------- the GPU: a fresh process a dtype

def timed_ops(call) -> tuple:
    """(call's result, [[op, its tensors' dtypes, ms from its start to the GPU's end], ...] in order,
    seconds before its first op): each op dispatched with the GPU idle before it, so that its
    time is its own, its kernel's first launch (module loading) included."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timing(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.first = [], None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            torch.cuda.synchronize()
            start = time.perf_counter()
            self.first = start if self.first is None else self.first
            out = func(*args, **(kwargs or {}))
            torch.cuda.synchronize()
            flat = list(args) + list((kwargs or {}).values())
            self.ops.append([str(func.overloadpacket).removeprefix("aten."),
                             [str(x.dtype).replace("torch.", "") for x in flat if isinstance(x, torch.Tensor)],
                             round((time.perf_counter() - start) * 1e3, 3)])
            return out

    with Timing():              # the mode's own first use (its imports: seconds) apart from the call's
        torch.zeros(1).add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with Timing() as timing:
        out = call()
    return out, timing.ops, (timing.first or time.perf_counter()) - start


def child(dtype: str, size: int, calls: int, phases: bool) -> None:
    """This process's first tilemm.matmul timed (phases: each op of it timed apart), its kernels
    listed, repeated calls timed; a JSON line."""
    started = time.perf_counter()
    import torch
    g = torch.Generator(device="cuda").manual_seed(size)
    a, b = full_range((size, size), dtype, g, "cuda"), full_range((size, size), dtype, g, "cuda")
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - started
    start = time.perf_counter()
    import tilemm
    import_s = time.perf_counter() - start
    found = {}
    if phases:
        start = time.perf_counter()
        c, found["first_call_ops"], found["before_first_op_s"] = timed_ops(lambda: tilemm.matmul(a, b))
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        found["ops_ms"] = sum(op[-1] for op in found["first_call_ops"])
    else:
        first_s, c = harness.timed(lambda: tilemm.matmul(a, b))
    expected = numpy_product(a, b)
    exact = c.dtype == a.dtype and bool((c.cpu().numpy() == expected).all())
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        tilemm.matmul(a, b)
        torch.cuda.synchronize()
    kernels: dict = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] = kernels.get(e.name, 0) + 1
    time_us = harness.event_timer()
    times = [time_us(lambda: tilemm.matmul(a, b)) / 1e3 for _ in range(calls)]
    queued = harness.queued_ms(lambda: tilemm.matmul(a, b))
    exact = exact and bool((tilemm.matmul(a, b).cpu().numpy() == expected).all())
    print(json.dumps({"dtype": dtype, "m": size, "n": size, "k": size, "setup_s": setup_s, "import_s": import_s,
                      "first_call_s": first_s, "repeated_ms": statistics.median(times), "repeated_min_ms": min(times),
                      "queued_ms": queued,
                      "kernel_used": tilemm.plan(a, b).kernel.name, "exact": exact,
                      "triton_loaded": "triton" in sys.modules, "distinct_kernels": len(kernels),
                      "launches": sum(kernels.values()), "kernels": kernels, "phases": phases, **found}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the folder for int_digits_probe.jsonl (made; --device cuda)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--dtypes", nargs="+", choices=["int32", "int64"], default=["int32", "int64"])
    ap.add_argument("--size", type=int, default=512, help="M = N = K on the GPU (default 512)")
    ap.add_argument("--calls", type=int, default=50, help="repeated calls timed (default 50)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes a dtype (default 3)")
    ap.add_argument("--tree", help="the source tree (the folder holding tilemm/) the processes import")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one process may take")
    ap.add_argument("--no-phases", action="store_true",
                    help="no extra process a dtype whose first call has each op timed apart")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.size, args.calls, args.phases)
        return 0
    if args.device == "cpu":
        for dtype in args.dtypes:
            for row in cpu_counts(dtype):
                print(f"{row['dtype']} {row['case']:8} aten names {row['aten_names']:3}  kinds {row['kinds']:3}  "
                      f"launches {row['launches']:4}  exact {row['exact']}")
                print("   " + " ".join(row["kind_list"]))
        return 0
    if args.out is None:
        ap.error("--out DIR is required on the GPU")
    env = dict(os.environ)
    for name in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET"):
        env.pop(name, None)
    if args.tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(args.tree), env.get("PYTHONPATH")]))
    stamp = harness.stamp("int_digits_probe.py", args, env="PYTHONPATH=src")
    out, ok = harness.out_folder(args.out), True
    for dtype in args.dtypes:
        kernels = {}
        for phases in [False] * args.repeat + ([] if args.no_phases else [True]):
            argv_child = [sys.executable, os.path.abspath(__file__), "--child", dtype, "--size", str(args.size),
                          "--calls", str(args.calls)] + (["--phases"] if phases else [])
            lines, error = harness.child_lines(argv_child, env, args.timeout)
            rec = dict(lines[-1]) if lines else {"dtype": dtype, "phases": phases}
            if error:
                rec["error"] = error
            ok = ok and not error and rec.get("exact", False)
            harness.append(out / "int_digits_probe.jsonl", [{**rec, "tree": args.tree, **stamp}])
            kernels = rec.get("kernels") or kernels
            print(f"{dtype}{' (each op timed apart)' if phases else ''}: first call "
                  f"{rec.get('first_call_s', float('nan')):.3f} s  repeated {rec.get('repeated_ms', float('nan')):.3f} ms "
                  f"(queued {rec.get('queued_ms', float('nan')):.3f} ms)  kernels {rec.get('distinct_kernels')} "
                  f"({rec.get('launches')} launches)  exact {rec.get('exact')}  {rec.get('error', '')[:200]}", flush=True)
            if phases and "first_call_ops" in rec:
                print(f"   before the first op {rec['before_first_op_s'] * 1e3:.1f} ms; the ops {rec['ops_ms']:.1f} ms:")
                print("\n".join(f"   {ms:8.2f} ms  {op} {dtypes}" for op, dtypes, ms in rec["first_call_ops"]))
        print("   the kernels a call launches:\n" + "\n".join(f"   {k:3} x {n}" for n, k in sorted(kernels.items())))
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
