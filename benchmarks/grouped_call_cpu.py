"""What an eager tilemm.grouped_matmul call costs the CPU and the GPU, beside torch._grouped_mm:
the MoE forward layout (a (rows, 2048) bfloat16, tokens sorted by expert; b (G, 2048, 1408) the
transpose of a contiguous (G, 1408, 2048), as torch's MoE layers hold their weights; offs int32
on the GPU), no gradient, experts 8, 60 and 128, 512 and 8192 rows, balanced and Zipf routings.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/grouped_call_cpu.py --out DIR   # a GPU
    PYTHONPATH=src python3 benchmarks/grouped_call_cpu.py --stub --out DIR                      # any host
    PYTHONPATH=src python3 benchmarks/grouped_call_cpu.py --stub --trees ../main/src src --rounds 4 --out DIR

On a GPU, per call and case: host_us (the CPU's microseconds a call of a block of calls, the GPU
idle before the block: what a CPU-bound loop pays), block_us (a block of calls between two CUDA
events: the GPU's pace of back-to-back calls, the CPU's where it is the slower) and gpu_us (one
call between CUDA events queued behind torch.cuda._sleep, so that the CPU is ahead: the GPU's time
alone); medians over interleaved rounds (order rotated); the ratio to torch._grouped_mm's. Every
answer is checked against a float32 product of each group (within bfloat16's rounding plus
float32 sums'), tilemm's at a key's first, second (recorded) and third (replayed) calls on other
operands, and torch's.

With --stub (any host, Triton's interpreter; float16, 64 rows of 32 features, 8 and 60 experts,
offsets on the host): the Python of a call alone, every compiled program's C launcher a no-op
(Triton's JIT and the launchers' Python run as on a GPU: tilemm.engine.jit_repeats' key and
direct runner, a replay's values), after every answer was checked on real launches. "every
check" is the path each call took before repeated calls kept their key's plan
(tilemm.products.grouped.grouped_matmul: the checks, the rung's arguments and Triton's launch at
every call), "tilemm.grouped_matmul" the public call (its key's plan and replay). Per call, this
thread's CPU microseconds (a shared host's other load left out): the least and the median of
interleaved rounds. Host offsets are checked at every call on both paths (on a GPU they are not
read). --trees runs that in one process a source tree and round (say main's and this one's),
interleaved: the same two paths, each as that tree has it.
"""
import json
import os
import statistics
import sys
from types import SimpleNamespace

import harness

EXPERTS = (8, 60, 128)
ROWS = (512, 8192)
ROUTINGS = ("balanced", "zipf")
HIDDEN, WIDTH = 2048, 1408


def counts_of(experts: int, rows: int, routing: str, seed: int, torch):
    """Rows per expert (int64, host), summing to rows: a multinomial of equal weights (balanced)
    or of 1 / rank^1.2 with the ranks shuffled (zipf)."""
    g = torch.Generator().manual_seed(seed)
    if routing == "balanced":
        weights = torch.ones(experts, dtype=torch.float64)
    else:
        weights = 1.0 / (torch.randperm(experts, generator=g).double() + 1) ** 1.2
    return torch.bincount(torch.multinomial(weights, rows, replacement=True, generator=g), minlength=experts)


def operands(experts: int, rows: int, hidden: int, width: int, counts, dtype, device: str, seed: int, torch):
    """(a, b, offs): a (rows, hidden), b (experts, hidden, width) the transpose of a contiguous
    (experts, width, hidden), offs int32 on the device."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, hidden, generator=g).to(dtype).to(device)
    w = (torch.randn(experts, width, hidden, generator=g) / hidden ** 0.5).to(dtype).to(device)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(device)
    return a, w.transpose(1, 2), offs


def check(c, a, b, counts, torch) -> tuple:
    """(ok, worst error over max |reference|): c against each group's float32 product, within one
    rounding to c's dtype plus float32 sums' error (2K u32 |a||b|)."""
    ends = torch.cumsum(counts, 0).tolist()
    ref = torch.zeros(c.shape, dtype=torch.float32, device=c.device)
    size = torch.zeros_like(ref)
    start = 0
    for g, end in enumerate(ends):
        a_g, b_g = a[start:end].float(), b[g].float()
        ref[start:end], size[start:end] = a_g @ b_g, a_g.abs() @ b_g.abs()
        start = end
    rounding = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[c.dtype]
    bound = rounding * ref.abs().double() + 2 * a.shape[1] * 2.0 ** -24 * size.double() + 1e-30
    return harness.within(c, ref.double(), bound)


# ---------------------------------------------------------------- a GPU

def gpu_one_us(call, torch, reps: int = 15) -> float:
    """Median microseconds of one call between CUDA events queued behind torch.cuda._sleep: the
    GPU's time for the call alone (the CPU long done queueing it)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def gpu(args, emit) -> None:
    import torch
    import tilemm
    harness.prewarm(args.prewarm)
    for experts in args.experts:
        for rows in args.rows:
            for routing in args.routings:
                counts = counts_of(experts, rows, routing, seed=experts * 7 + rows, torch=torch)
                sets = [operands(experts, rows, args.hidden, args.width, counts, torch.bfloat16, "cuda", s, torch)
                        for s in (1, 2, 3)]
                outcomes = {}
                for i, (a, b, offs) in enumerate(sets):       # a key's first, recorded and replayed calls
                    ok, err = check(tilemm.grouped_matmul(a, b, offs), a, b, counts, torch)
                    outcomes[f"tilemm call {i + 1}"] = (ok, err)
                a, b, offs = sets[0]
                outcomes["torch._grouped_mm"] = check(torch._grouped_mm(a, b, offs), a, b, counts, torch)
                label = f"G={experts} rows={rows} {routing}"
                if not all(ok for ok, _ in outcomes.values()):
                    emit({"case": label, "experts": experts, "rows": rows, "routing": routing, "ok": False,
                          "errors": {k: v[1] for k, v in outcomes.items()}})
                    continue
                calls = {"tilemm": lambda: tilemm.grouped_matmul(a, b, offs),
                         "torch": lambda: torch._grouped_mm(a, b, offs)}
                for call in calls.values():
                    for _ in range(5):
                        call()

                def measure(call):
                    return (harness.host_us(call, args.calls), harness.block_us(call, args.calls),
                            gpu_one_us(call, torch))
                found = harness.rounds(calls, args.rounds, measure)
                med = {name: [statistics.median(t[i] for t in times) for i in range(3)]
                       for name, times in found.items()}
                (host, block, one), (t_host, t_block, t_one) = med["tilemm"], med["torch"]
                emit({"case": label, "experts": experts, "rows": rows, "routing": routing, "ok": True,
                      "error": max(v[1] for v in outcomes.values()),
                      "host_us": round(host, 2), "block_us": round(block, 2), "gpu_us": round(one, 2),
                      "torch_host_us": round(t_host, 2), "torch_block_us": round(t_block, 2),
                      "torch_gpu_us": round(t_one, 2), "host_vs_torch": round(host / t_host, 3),
                      "block_vs_torch": round(block / t_block, 3), "gpu_vs_torch": round(one / t_one, 3)})


# ---------------------------------------------------------------- any host: the Python alone

def stub_launches() -> None:
    """From here on every program's launch is a no-op C launcher behind the layers a GPU's launch
    passes (tilemm.engine.jit_repeats' key and direct runner, a BoundLaunch's runner, a replay's
    values and its quick call), as if on GPU 0; the keys kept so far forgotten, so that they are learned again on the
    stubs."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction
    from tilemm.engine import jit_repeats, launches, replay as replays
    from tilemm.engine.direct_launch import make_runner
    from tilemm.engine.launches import all_arguments

    class Compiled:
        """A compiled program's stand-in: compiled[grid] is a direct runner with a no-op C launcher."""
        def __init__(self, program, args, options):
            values = all_arguments(program, args, options)
            self.descriptors = [(i, "meta") for i, v in enumerate(values) if type(v).__name__ == "TensorDescriptor"]

        def __getitem__(self, grid):
            runtime = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
            return make_runner(lambda *values: None, grid, "function", "packed", False, False, self.descriptors,
                               lambda d, meta: [d], None, runtime, lambda: 0)

    def run(self, *args, grid, warmup, **options):
        return Compiled(self, args, options)

    def bound_call(self):          # BoundLaunch.__call__ as on a GPU, device 0 current
        if self.runner is not None:
            if self.values is None:
                self.values = all_arguments(self.program, self.args, self.options)
            return self.run(self.values)
        self.device, self.runner = 0, self.launch()[self.grid + (1,) * (3 - len(self.grid))]

    plain_recorded = replays.recorded

    def recorded(bound, operands):     # a replay recorded on the host made as on GPU 0 (its quick call too)
        replay = plain_recorded(bound, operands)
        if replay is not None:
            replay.device_index, replay.current_device, replay.current_stream = 0, lambda: 0, lambda index: 0
            replay.allocate = torch.empty
            replay.quick = replay.quick_call()
        return replay

    on_gpu = SimpleNamespace(triton_interpreter=lambda: False)
    InterpretedFunction.run = run
    jit_repeats.compat, jit_repeats.current_device = on_gpu, lambda: 0
    launches.BoundLaunch.__call__ = bound_call
    replays.recorded = recorded
    jit_repeats.REPEATS.clear()
    try:
        from tilemm.products import grouped_calls
        grouped_calls.release()
    except ImportError:            # (a tree without repeated grouped calls: every call takes every check)
        pass


def stub(args, emit) -> None:
    """The Python of tilemm's calls, their launches stubbed (the module's docstring)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import tilemm
    from tilemm.products import grouped
    torch.set_num_threads(1)
    timed = {}
    for experts in args.experts:
        counts = counts_of(experts, args.rows[0], "zipf", seed=experts, torch=torch)
        sets = [operands(experts, args.rows[0], args.hidden, args.width, counts, torch.float16, "cpu", s, torch)
                for s in (1, 2, 3)]
        paths = {f"G={experts} every check": grouped.grouped_matmul, f"G={experts} tilemm.grouped_matmul":
                 tilemm.grouped_matmul}
        for label, product in paths.items():      # each answer checked on real launches: a key's three calls
            for a, b, offs in sets:
                ok, worst = check(product(a, b, offs), a, b, counts, torch)
                assert ok, f"{label}: error {worst:.3g} of the reference's largest value"
            a, b, offs = sets[0]
            timed[label] = (lambda product, a, b, offs: lambda: product(a, b, offs))(product, a, b, offs)
    stub_launches()
    times = harness.stub_rounds(timed, args.calls, args.rounds)
    for label, found in times.items():
        emit({"stub": True, "case": label, "rows": args.rows[0], "hidden": args.hidden, "width": args.width,
              "cpu_us": round(min(found), 2), "median_us": round(statistics.median(found), 2)})


def trees(args, emit) -> None:
    """--stub --trees A B: rounds of one child process a source tree (this script, --stub, on that
    tree's PYTHONPATH), the order alternating; per case and tree, the median over rounds of each
    child's median, and the public call's ratio to the first tree's."""
    import tempfile
    folder = os.path.dirname(os.path.abspath(__file__))          # (harness, beside this script)
    found: dict = {}
    for r in range(args.rounds):
        for tree in args.trees if r % 2 == 0 else args.trees[::-1]:
            with tempfile.TemporaryDirectory() as out:
                argv = [sys.executable, os.path.abspath(__file__), "--stub", "--out", out, "--rounds", "3",
                        "--experts", *map(str, args.experts), "--rows", str(args.rows[0]), "--calls", str(args.calls)]
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, folder])}
                lines, failed = harness.child_lines(argv, env, timeout=900)
            if failed:
                raise SystemExit(f"{tree}: {failed}")
            for line in lines:
                found.setdefault((line["case"], tree), []).append(line["median_us"])
    first = {case: statistics.median(times) for (case, tree), times in found.items() if tree == args.trees[0]}
    for (case, tree), times in found.items():
        median = statistics.median(times)
        emit({"stub": True, "case": case, "tree": tree, "rounds": len(times), "median_us": round(median, 2),
              "vs_first_tree": round(median / first[case], 3) if case in first else None})


def main():
    ap = harness.parser(__doc__.split("\n\n")[0], out_required=False,
                        helps={"stub": "the Python alone, each launch stubbed (any host)",
                               "experts": "experts (--stub: 8 60)", "rows": "routed rows (--stub: 64)",
                               "hidden": "K (--stub: 32)", "width": "N (--stub: 32)",
                               "calls": "calls a block (--stub: 400)", "rounds": "rounds, interleaved (--stub: 9)"},
                        rounds=7, calls=100, prewarm=5.0, stub=False, experts=list(EXPERTS), rows=list(ROWS),
                        routings=list(ROUTINGS), hidden=HIDDEN, width=WIDTH)
    ap.add_argument("--trees", nargs=2, metavar="SRC", help="--stub: two source trees (their src folders), "
                    "each timed in its own processes, interleaved (say main's and this one's)")
    args = harness.parse(ap)
    out = harness.out_folder(args.out)
    given = {a.split("=")[0] for a in sys.argv[1:]}
    if args.stub:             # (a host's products are the interpreter's: small ones)
        for name, value in (("experts", [8, 60]), ("rows", [64]), ("hidden", 32), ("width", 32), ("calls", 400),
                            ("rounds", 9)):
            if f"--{name}" not in given:
                setattr(args, name, value)
        stamp = harness.stamp("grouped_call_cpu.py", args, env="PYTHONPATH=src")

        def emit(record):
            harness.append(out / "grouped_call_cpu.jsonl", [{**stamp, **record}])
            print(json.dumps(record), flush=True)          # (the stamp in the file alone)
        return trees(args, emit) if args.trees else stub(args, emit)
    stamp = harness.stamp("grouped_call_cpu.py", args)
    emit = harness.emitter(out / "grouped_call_cpu.jsonl", stamp)
    gpu(args, emit)


if __name__ == "__main__":
    main()
