"""What a repeated plain tilemm.matmul call costs the CPU (no out=, no parameters, torch tensors, no
gradient recorded: the plan cache's key, the plan's repeated call, the replay's launch), beside
torch._int_mm and torch.matmul, whole calls in a loop.

On a GPU: int8 A (M, K) @ B (K, N) -> int32 through tensorcore-int's replay (out_dtype="int32";
M 16, 32, 100, 256; K 8192, N 3072; B column-major, a weight (N, K).T, and row-major) against
torch._int_mm (A padded to 32 rows where M <= 16, as a user must), and bfloat16 at 16 rows
(tensorcore's replay, and the default) against torch.matmul. Every answer is checked (int32
exactly against a float64 product, bfloat16 within tilemm.numerics.accuracy's bound) at its
first call and again at its third (the replay's). Per call: host_us (the CPU's microseconds, the
GPU idle before the block: what a CPU-bound loop pays), block_us (between CUDA events: the GPU's
pace of back-to-back calls), and the ratio of host_us to the baseline's; medians over rounds in
rotated order.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/matmul_call_cpu.py --out DIR
    TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/matmul_call_cpu.py --out DIR --trees OLD/src src

(--trees: tilemm's calls of two source trees, both loaded in this process, each timed with its own
modules in sys.modules, in the same rotated rounds as the baselines.)

With --stub (any host, Triton's interpreter): the Python of the repeated call alone. Each case's
plan is made by a first call; its launch is then recorded as a replay made as on GPU 0 (the
compiled program's C launcher stood in for by one that runs the program under the interpreter,
as tests/interpreted_replays.py's), every answer checked on those launches, and then the C
launcher is a no-op: the key, the plan's repeated call, the guard, C's allocation (a host
tensor's) and the launch's arguments are what is timed. Per call, this thread's CPU microseconds
(a shared host's other load left out): the least and the median of interleaved rounds.

    PYTHONPATH=src python3 benchmarks/matmul_call_cpu.py --stub

--trees A B (with --stub): the same stub cases of two source trees (a checkout of an earlier
version against this one), both loaded in this process (each its own tilemm modules, swapped
into sys.modules in turn) and timed in alternating rounds, so that a shared host's changing load
moves both alike: each tree's median and least over its rounds, and B's median minus A's.

    python3 benchmarks/matmul_call_cpu.py --stub --trees OLD/src src
"""
import ctypes
import json
import os
import statistics
import sys
import types

import harness

ROWS = (16, 32, 100, 256)
# --stub's cases: (label, dtype, M, K, N, B's layout, kernel): tensorcore-int's pointer program with
# split K (its workspace) and without, B row-major, and tensorcore's (float16: the interpreter's bfloat16
# product is not one launch) through pointers and, at 128 rows, TMA descriptors
STUB_CASES = (("int8 col split-K", "int8", 16, 4096, 128, "col", "tensorcore-int"),
              ("int8 col", "int8", 16, 1024, 128, "col", "tensorcore-int"),
              ("int8 row split-K", "int8", 16, 1024, 128, "row", "tensorcore-int"),
              ("float16 col", "float16", 16, 256, 128, "col", "tensorcore"),
              ("float16 tma", "float16", 128, 128, 128, "col", "tensorcore"))


def operands(torch, dtype: str, m: int, k: int, n: int, layout: str, device: str, seed: int):
    """(A (M, K), B (K, N)): B a weight (N, K).T ("col") or row-major ("row")."""
    g = torch.Generator(device=device).manual_seed(seed)
    if dtype == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device, generator=g)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device, generator=g)
    else:
        a = torch.randn(m, k, device=device, generator=g).to(getattr(torch, dtype))
        w = torch.randn(n, k, device=device, generator=g).to(getattr(torch, dtype))
    return a, (w.T if layout == "col" else w.T.contiguous())


def tilemm_call(tilemm, a, b, dtype: str, kernel):
    if dtype == "int8":
        return lambda: tilemm.matmul(a, b, kernel=kernel, out_dtype="int32")
    return lambda: tilemm.matmul(a, b, kernel=kernel)


# ---------------------------------------------------------------- on the host: launches stubbed

def at(address: int, like):
    """A host tensor over the memory at address, of like's shape, strides and dtype."""
    import torch
    elements = 1 + sum((s - 1) * st for s, st in zip(like.shape, like.stride())) if like.numel() else 0
    memory = (ctypes.c_char * max(1, elements * like.element_size())).from_address(address)
    return torch.frombuffer(memory, dtype=torch.uint8).view(like.dtype).as_strided(like.shape, like.stride())


def host_replay(torch, tilemm, a, b, dtype: str, kernel, stub: dict) -> str:
    """Make the plan of tilemm's call on a and b (a first call), then give it a replay of its launch
    made as on GPU 0, whose C launcher runs the program under the interpreter on the addresses it
    is given (stub["off"]: does nothing). Returns the launch's kind."""
    from tilemm.engine import replay as replays
    from tilemm.engine.direct_launch import make_runner
    from tilemm.engine.launches import BoundLaunch, Steps, all_arguments, signature
    from tilemm.engine.workspaces import WORKSPACES
    from tilemm.plans import cache
    before = set(cache.PLANS)
    c = tilemm_call(tilemm, a, b, dtype, kernel)()
    (key,) = set(cache.PLANS) - before
    plan = cache.PLANS[key]
    c = torch.empty_like(c)             # (the launch's C, recorded as the replay's)
    bound = plan.kernel.bind(a, b, c, **plan.params)
    if isinstance(bound, Steps) and len(bound.launches) == 1:      # (steps of one launch: that launch)
        bound = bound.launches[0]
    if not isinstance(bound, BoundLaunch):
        raise ValueError(f"{kernel} {dtype}: not one launch ({type(bound).__name__}): no quick call to time")
    first = all_arguments(bound.program, bound.args, bound.options)
    tensors = {i: v for i, v in enumerate(first) if isinstance(v, torch.Tensor)}
    descriptors = {i: v for i, v in enumerate(first) if type(v).__name__ == "TensorDescriptor"}
    options = {name: v for name, v in bound.options.items() if name not in signature(bound.program).parameters}

    def c_launch(*given):
        if stub["off"]:
            return
        values = list(given[13:])       # (after the grid, stream, function and Triton's other leading arguments)
        kept = {t.data_ptr(): t for pair in WORKSPACES.values() for t in pair}      # (a workspace, as addresses)
        for i, v in enumerate(values):
            if i in tensors:
                values[i] = at(v, tensors[i])
            elif i in descriptors:
                d = object.__new__(type(v))
                d.__dict__.update(vars(v), base=at(v.base.data_ptr(), descriptors[i].base))
                values[i] = d
            elif type(v) is int and v in kept:
                values[i] = kept[v]
        bound.program[bound.grid](*values, **options)
    runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    grid3 = tuple(bound.grid) + (1,) * (3 - len(bound.grid))
    bound()                             # (its first launch, under the interpreter)
    bound.runner = make_runner(c_launch, grid3, "fn", "packed", False, False, [(i, "meta") for i in descriptors],
                               lambda d, meta: [d], None, runtime, lambda: 0)

    def record():
        replay = replays.recorded(bound, (a, b, c))
        replay.device_index, replay.current_device, replay.current_stream = 0, (lambda: 0), (lambda index: 0)
        replay.allocate = torch.empty
        replay.quick = replay.quick_call()
        return replay
    cache.PLANS[key] = plan.for_repeats(record)
    return type(bound).__name__


def stubbed_calls(args) -> tuple:
    """({label: the repeated call of tilemm.matmul, its launch stubbed}, {label: its launch's kind})
    of the tilemm importable now, each case's replayed answers checked first."""
    import torch
    import tilemm
    from tilemm.engine.workspaces import WORKSPACES
    WORKSPACES[("split-k", 0, 0)] = (torch.empty(1 << 22), torch.zeros(1 << 16, dtype=torch.int32))   # GPU 0's
    stub_state, timed, kinds = {"off": False}, {}, {}
    for label, dtype, m, k, n, layout, kernel in STUB_CASES:
        if args.cases and label not in args.cases:
            continue
        a, b = operands(torch, dtype, m, k, n, layout, "cpu", seed=m + k + n)
        kinds[label] = host_replay(torch, tilemm, a, b, dtype, kernel, stub_state)
        for seed in (1, 2):             # replayed, on new operands: every answer checked
            a, b = operands(torch, dtype, m, k, n, layout, "cpu", seed=seed)
            ok, error = check(torch, tilemm_call(tilemm, a, b, dtype, kernel)(), a, b, dtype)
            assert ok, f"{label}: a replayed call's answer is wrong (error {error:.3g})"
        timed[label] = tilemm_call(tilemm, a, b, dtype, kernel)
    stub_state["off"] = True
    for call in timed.values():
        for _ in range(200):
            call()
    return timed, kinds


def stub_host() -> None:
    """Triton's interpreter, one thread, and no CUDA graph being captured (a CPU torch's check)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    torch.set_num_threads(1)
    torch._C._cuda_isCurrentStreamCapturing = lambda: False


def stub(args, emit) -> None:
    """The Python of tilemm's repeated calls, their launches stubbed (the module's docstring)."""
    stub_host()
    timed, kinds = stubbed_calls(args)
    times = harness.rounds(timed, args.rounds, lambda call: harness.thread_us(call, args.calls))
    for label, found in times.items():
        emit({"stub": True, "case": label, "launch": kinds[label], "least_us": round(min(found), 3),
              "median_us": round(statistics.median(found), 3)})


def tilemm_modules() -> dict:
    return {name: module for name, module in sys.modules.items() if name == "tilemm" or name.startswith("tilemm.")}


def entered(modules: dict) -> None:
    """sys.modules' tilemm modules made `modules` (one tree's: its lazy imports find its own)."""
    for name in tilemm_modules():
        del sys.modules[name]
    sys.modules.update(modules)


def trees(args, emit) -> None:
    """Both trees' stubbed calls in this process, a round of each in turn (the module's docstring)."""
    stub_host()
    loaded, calls = {}, {}
    for tree in args.trees:
        entered({})
        sys.path.insert(0, os.path.abspath(tree))
        try:
            calls[tree] = stubbed_calls(args)[0]
        finally:
            sys.path.remove(os.path.abspath(tree))
        loaded[tree] = tilemm_modules()
    found = {tree: {label: [] for label in calls[tree]} for tree in args.trees}
    for r in range(args.rounds):
        for tree in (args.trees if r % 2 == 0 else args.trees[::-1]):
            entered(loaded[tree])
            for label, call in calls[tree].items():
                found[tree][label].append(harness.thread_us(call, args.calls))
            loaded[tree] = tilemm_modules()
    first, second = args.trees
    for label in found[first]:
        a, b = (statistics.median(found[tree][label]) for tree in args.trees)
        emit({"stub": True, "case": label, "median_us": {first: round(a, 3), second: round(b, 3)},
              "least_us": {tree: round(min(found[tree][label]), 3) for tree in args.trees},
              "difference_us": round(b - a, 3), "ratio": round(b / a, 3), "rounds": args.rounds})


def check(torch, c, a, b, dtype: str) -> tuple:
    """(ok, error): int32 equal to the float64 product; floats within float32 sums' bound."""
    ref = a.double() @ b.double()
    if dtype == "int8":
        return bool(c.dtype == torch.int32 and torch.equal(c.double(), ref)), 0.0
    rel_bound = 2.0 ** -10 + a.shape[1] * 2.0 ** -23          # a float16 rounding, float32 sums of K products
    bound = rel_bound * (a.double().abs() @ b.double().abs()) + 1e-30
    error = float(((c.double() - ref).abs() / bound).max())
    return error <= 1 and c.dtype == a.dtype, error


# ---------------------------------------------------------------- on the GPU

def gpu_cases(torch, tilemm, args, tree=None) -> dict:
    """{label: (call, check, baseline's label, tree)} for the module's docstring's cases: the
    baselines' where tilemm is None (tree None), else tilemm's (the tilemm given, of source tree
    `tree`: its label's suffix; "": the one on the path)."""
    cases, mark = {}, f" [{tree}]" if tree else ""
    for m in args.rows:
        for layout in ("col", "row"):
            a, b = operands(torch, "int8", m, args.k, args.n, layout, "cuda", seed=m)
            check_, base = checker(torch, a, b, "int8"), f"int8 M={m} {layout} torch._int_mm"
            if tilemm is None:
                cases[base] = (harness.int_mm_call(a, b), check_, None, None)
            else:
                cases[f"int8 M={m} {layout} tilemm{mark}"] = (tilemm_call(tilemm, a, b, "int8", "tensorcore-int"),
                                                              check_, base, tree)
    a, b = operands(torch, "bfloat16", 16, args.k, args.n, "col", "cuda", seed=16)
    check_, base = checker(torch, a, b, "bfloat16"), "bfloat16 M=16 col torch.matmul"
    if tilemm is None:
        cases[base] = ((lambda: torch.matmul(a, b)), check_, None, None)
    else:
        for kernel in ("tensorcore", None):
            cases[f"bfloat16 M=16 col tilemm kernel={kernel}{mark}"] = (
                tilemm_call(tilemm, a, b, "bfloat16", kernel), check_, base, tree)
    return cases


def checker(torch, a, b, dtype: str):
    def check(label, c):
        ok, over, _ = harness.float64_check(c, a, b, dtype)
        return ok and c.dtype == (torch.int32 if dtype == "int8" else a.dtype), over
    return check


def gpu(args, emit) -> None:
    """Whole calls on the GPU (the module's docstring); with --trees, tilemm's calls of each tree,
    both in this process, each timed with its own tilemm modules in sys.modules."""
    import importlib
    import torch
    harness.prewarm(args.prewarm)
    cases = gpu_cases(torch, None, args)
    loaded = {}
    for tree in (args.trees if len(args.trees) == 2 else [""]):      # ("": the tilemm on the path, alone)
        if tree:
            entered({})
            sys.path.insert(0, os.path.abspath(tree))
        try:
            cases.update(gpu_cases(torch, importlib.import_module("tilemm"), args, tree))
        finally:
            if tree:
                sys.path.remove(os.path.abspath(tree))

        def check(label, answer):
            return cases[label][1](label, answer)
        mine = {label: case[0] for label, case in cases.items() if case[3] == tree}
        first, first_outcomes = harness.checked(mine, check)
        for call in first.values():       # the second call records the launch: the third is a replay
            call()
        good, outcomes = harness.checked(first, check)
        for label, case in list(cases.items()):
            if case[3] == tree:
                cases[label] = (*case, {**first_outcomes, **outcomes}[label], label in good)
        loaded[tree] = tilemm_modules()

    def measured(timer):
        def measure(label):
            tree = cases[label][3]
            if tree:
                entered(loaded[tree])
            return timer(cases[label][0], args.calls)
        return measure
    baselines = {label: label for label, case in cases.items() if case[3] is None}
    first, first_outcomes = harness.checked({label: cases[label][0] for label in baselines},
                                            lambda label, answer: cases[label][1](label, answer))
    good = {label: label for label, case in cases.items() if (case[3] is None and label in first)
            or (case[3] is not None and case[5])}
    host = harness.medians(harness.rounds(good, args.rounds, measured(harness.host_us)))
    block = harness.medians(harness.rounds(good, args.rounds, measured(harness.block_us)))
    for label, case in cases.items():
        outcome = first_outcomes[label] if case[3] is None else case[4]
        base = case[2]
        ratio = host[label] / host[base] if label in host and base in host else None
        emit({"case": label, "k": args.k, "n": args.n, "ok": outcome.ok, "error": outcome.value,
              "host_us": host.get(label), "block_us": block.get(label), "baseline": base,
              "host_vs_baseline": None if ratio is None else round(ratio, 3)})


def main():
    ap = harness.parser(__doc__.split("\n\n")[0], out_required=False,
                        helps={"stub": "the Python alone, each launch stubbed (any host)",
                               "trees": "two source trees' tilemm, both in this process, timed in turn",
                               "cases": "with --stub: these cases only (their labels)",
                               "rows": "M of the GPU's int8 cases", "calls": "calls a block (--stub: 2000)",
                               "rounds": "rounds, interleaved (--stub: 9)"},
                        rounds=7, calls=200, prewarm=5.0, stub=False, rows=list(ROWS), k=8192, n=3072,
                        trees=[""], cases=[""])
    args = harness.parse(ap)
    given = {a.split("=")[0] for a in sys.argv[1:]}
    if "--trees" in given and len(args.trees) != 2:
        raise SystemExit("--trees takes two source trees (folders holding tilemm)")
    args.cases = [c for c in args.cases if c]
    if args.stub:
        args.calls = args.calls if "--calls" in given else 2000
        args.rounds = args.rounds if "--rounds" in given else (9 if "--trees" not in given else 15)
        out = harness.out_folder(args.out) if args.out else None
        stamp = harness.stamp("matmul_call_cpu.py", args, env="PYTHONPATH=src") if out else {}

        def emit(record):
            if out:
                harness.append(out / "matmul_call_cpu.jsonl", [{**stamp, **record}])
            print(json.dumps(record), flush=True)
        return (trees if "--trees" in given else stub)(args, emit)
    if "--trees" in given:       # (the stamp's tilemm: the second tree's; gpu() loads each tree afresh)
        sys.path.insert(0, os.path.abspath(args.trees[1]))
    stamp = harness.stamp("matmul_call_cpu.py", args)
    if "--trees" in given:
        sys.path.remove(os.path.abspath(args.trees[1]))
    emit = harness.emitter(harness.out_folder(args.out) / "matmul_call_cpu.jsonl", stamp)
    gpu(args, emit)


if __name__ == "__main__":
    main()
