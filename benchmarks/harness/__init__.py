"""What every benchmark script shares: the one module they import (no script imports another).

    import harness
    from tilemm.system.timing import interleaved_rounds                      # the library's timers, as they are
    args = harness.arguments(rounds=5, per_round=0.3, prewarm=10.0)   # --out DIR (made) and these options
    stamp = harness.stamp("fp8_vs_scaled_mm.py", args)                # tilemm.system.machine.stamp of its command
    harness.prewarm(args.prewarm)                                     # the GPU's clocks up first
    good, outcomes = harness.checked(calls, check)                     # every answer checked before timing
    times = harness.medians(interleaved_rounds(good, args.rounds, args.per_round))
    harness.append(args.out / "fp8_vs_scaled_mm.jsonl", records)

Arguments and stamps; the pre-warm; the timers tilemm.system.timing has no place for (whole calls by wall
clock, a call between CUDA events with the GPU idle before it, rounds of any measure in rotated
order, one synchronized call); answer checks against a float64 (or exact) reference; operands;
records (JSON lines, stamped); a child process's JSON lines. harness.records reads the canonical
files; harness.llama is the Llama model of the llama scripts.
tilemm and torch are imported where a helper needs them: a script's --help, the table and figure
scripts, and a child process that times `import tilemm` itself, import this module without them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

# what a canonical command has in front of it (benchmarks/README.md); a script's stamp says so
ENV = "PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1"
# NVLink multicast off: on a shared host it can take the GPUs out of service
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def multicast_off() -> None:
    """NO_MULTICAST's settings, where the environment has none of its own: call it before torch
    starts NCCL (a several-GPU script, before importing torch)."""
    for name, value in NO_MULTICAST.items():
        os.environ.setdefault(name, value)


# ---------------------------------------------------------------- arguments and stamps

def parser(description: str | None = None, out_required: bool = True, helps: dict | None = None,
           **defaults) -> argparse.ArgumentParser:
    """--out DIR and an option for each default, in the default's form: a bool is a flag, a list
    takes one or more values of its first item's type, anything else one value of its type.
    `helps`: {option: its help}. A script adds its own options to what this returns."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", type=Path, required=out_required, help="the folder for the records (made)")
    for name, default in defaults.items():
        flag = f"--{name.replace('_', '-')}"          # as machine.command_line writes it back
        helped = {"help": (helps or {}).get(name)}
        if isinstance(default, bool):
            ap.add_argument(flag, action="store_true", default=default, **helped)
        elif isinstance(default, list):
            ap.add_argument(flag, nargs="+", default=default, type=type(default[0]) if default else str, **helped)
        else:
            ap.add_argument(flag, type=type(default), default=default, **helped)
    return ap


def parse(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The parsed arguments, the --out folder made."""
    args = ap.parse_args(argv)
    if getattr(args, "out", None) is not None:
        args.out = Path(args.out)
        args.out.mkdir(parents=True, exist_ok=True)
    return args


def arguments(description: str | None = None, helps: dict | None = None, argv=None, **defaults):
    """parse(parser(...)): --out DIR (made) and the options named by their defaults."""
    return parse(parser(description, helps=helps, **defaults), argv)


def stamp(script: str, args, env: str = ENV, runner: str = "python3") -> dict:
    """tilemm.system.machine.stamp of `env runner benchmarks/<script>` with these arguments (--out left out)."""
    from tilemm.system import machine
    return machine.stamp(machine.command_line(f"{env} {runner} benchmarks/{script}".strip(), args))


def out_folder(given=None) -> Path:
    """`given` (a script's --out), else $OUT, else ./out: made."""
    out = Path(given or os.environ.get("OUT") or "out")
    out.mkdir(parents=True, exist_ok=True)
    return out


# ---------------------------------------------------------------- the GPU's clocks, and timers

def prewarm(seconds: float, dtype: str = "bfloat16") -> None:
    """8192^3 products (torch, this dtype) for `seconds`: the clocks up, and at the power cap,
    before the first round."""
    import torch
    x = torch.randn(8192, 8192, device="cuda").to(getattr(torch, dtype))
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        x @ x
        torch.cuda.synchronize()


def wall_us(call, calls: int) -> float:
    """Microseconds a call of a block of `calls` calls by wall clock, one synchronization at the
    block's end: a loop of whole calls as a user's program makes them."""
    import torch
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_us(call, calls: int) -> float:
    """Microseconds of the CPU's a call: a block of calls timed until the last returns (each
    returns once its work is queued), the GPU idle before it."""
    import torch
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def block_us(call, calls: int) -> float:
    """Microseconds a call of a block of `calls` calls back to back between two CUDA events (a
    kernel's time where the calls are bare launches)."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def graph_us(call, calls: int, replays: int = 5) -> float:
    """Median microseconds a call of a CUDA graph of `calls` calls (the launches alone, no CPU time:
    what a compiled model's graph runs), after one call on a side stream (compiles, allocations)."""
    import torch
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    times = sorted(block_us(graph.replay, 1) / calls for _ in range(replays))
    return times[len(times) // 2]


def launch_us(call, calls: int, graphs: bool) -> float:
    """Microseconds a launch: in a CUDA graph of `calls` launches (graphs: the GPU's pace alone),
    or `calls` launches back to back between CUDA events, which the host paces where a kernel
    takes under 20 µs or so."""
    return graph_us(call, calls) if graphs else block_us(call, calls)


def queued_ms(call, calls: int = 20, reps: int = 15) -> float:
    """Median milliseconds a call of `calls` calls queued back to back between two CUDA events:
    the GPU's time where each call's CPU time hides behind the previous call's kernels."""
    for _ in range(3):
        call()
    return statistics.median(block_us(call, calls) / 1e3 for _ in range(reps))


def event_timer():
    """time_us(call): microseconds between CUDA events around one call, the GPU idle before it
    (the CPU's part of the call and the GPU's, one after the other)."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_us(call) -> float:
        torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3
    return time_us


def thread_us(call, calls: int) -> float:
    """This thread's CPU microseconds a call of a block of `calls` calls (a shared host's other
    load left out): the Python of a call whose launches are stubbed."""
    start = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - start) / calls * 1e6


def stub_rounds(calls: dict, per_block: int, count: int) -> dict:
    """rounds() of thread_us over calls whose launches are stubbed, each warmed by 50 calls first."""
    for call in calls.values():
        for _ in range(50):
            call()
    return rounds(calls, count, lambda call: thread_us(call, per_block))


def rounds(calls: dict, count: int, measure) -> dict:
    """{label: [measure(call), one a round]} over `count` rounds, the order rotated each round
    (with two labels: which goes first alternates), so that a drifting machine treats all alike."""
    labels = list(calls)
    found = {label: [] for label in labels}
    for r in range(count):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            found[label].append(measure(calls[label]))
    return found


def timed(call, synchronize=None) -> tuple[float, object]:
    """(seconds of call(), its result): synchronize() before and after (default: torch's CUDA
    synchronize; pass one that also waits at a barrier for ranks, or a no-op on the CPU)."""
    if synchronize is None:
        import torch
        synchronize = torch.cuda.synchronize
    synchronize()
    start = time.perf_counter()
    out = call()
    synchronize()
    return time.perf_counter() - start, out


def medians(times: dict) -> dict:
    return {label: statistics.median(ts) for label, ts in times.items()}


def geomean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(map(math.log, values))) if values else float("nan")


# ---------------------------------------------------------------- answers

def within(c, ref, bound) -> tuple[bool, float]:
    """(every |C - ref| within its bound and no NaN, max |C - ref| / max |ref|): torch tensors,
    ref and bound in float64."""
    import torch
    err = (c.double() - ref).abs()
    ok = bool((err <= bound).all()) and not bool(torch.isnan(c).any())
    return ok, float(err.max() / ref.abs().max().clamp_min(1e-300))


def float64_check(c, a, b, dtype: str) -> tuple[bool, float, float]:
    """(ok, worst error over tilemm.numerics.accuracy's bound, max |C - C64| / max |C64|) of torch CUDA
    tensors, on the GPU against a float64 product: float32 sums of K products, one rounding to
    `dtype`; NaN fails. int8 (int32 sums, exact in float64: |sums| < 2^53): equal, or not."""
    import torch
    from tilemm.numerics.accuracy import denormal_floor, tolerance
    ref = a.double() @ b.double()
    if dtype == "int8":
        same = c.shape == ref.shape and bool(torch.equal(c.double(), ref))
        return same, 0.0 if same else float("inf"), 0.0 if same else float("inf")
    rel_sum, rel_out = tolerance(dtype, a.shape[1])
    bound = rel_sum * (a.double().abs() @ b.double().abs()) * (1 + rel_out) + rel_out * ref.abs() + denormal_floor(dtype)
    err = (c.double() - ref).abs()
    over = float((err / bound).max())
    return (over <= 1 and not bool(torch.isnan(c).any())), over, float(err.max() / ref.abs().max().clamp_min(1e-300))


class Outcome(NamedTuple):
    """A call's answer checked: ok, the check's number, and the seconds of that first call and its check."""
    ok: bool
    value: float
    seconds: float


def fp8_reference(a, b, scale_a, scale_b, kind: str, rows) -> tuple:
    """(the float64 product on `rows` of float8 operands dequantized by their scales, its bound):
    kind "block" (DeepGEMM's 1 x 128 / 128 x 128 scales, or a name starting so), "row" or
    per-tensor. The bound (tests/test_block_scaled.py's on the GPU): one bfloat16 rounding, float32
    sums (a product, a K step's partial, its scaling and its addition round), and Hopper's fp8
    accumulator of ~13 bits within a K block (its four k32 steps)."""
    k, n = b.shape
    x, y = a[rows].double(), b.double()
    if kind.startswith("block"):
        x = x * scale_a[rows].double().repeat_interleave(128, 1)[:, :k]
        y = y * scale_b.double().repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    elif kind == "row":
        x, y = x * scale_a[rows].double(), y * scale_b.double()
    else:
        x, y = x * float(scale_a), y * float(scale_b)
    ref, size = x @ y, x.abs() @ y.abs()
    bound = 2.0**-8 * ref.abs() + (2 * k + 3 * k / 16 + 2) * 2.0**-24 * size + 4 * 2.0**-13 * size + 1e-30
    return ref, bound


def checked(calls: dict, check, width: int = 28) -> tuple[dict, dict]:
    """({label: call} of the calls whose answers pass, {label: Outcome}): each call made once
    (compiling what it needs) and its answer given to check(label, answer) -> (ok, number). A
    call that raises is reported and fails (number NaN); the others still go on."""
    good, outcomes = {}, {}
    for label, call in calls.items():
        started = time.perf_counter()
        try:
            ok, value = check(label, call())
        except Exception as e:  # noqa: BLE001 - recorded as failed, the others still measured
            print(f"  {label:{width}} FAILED: {type(e).__name__}: {e}"[:300], flush=True)
            ok, value = False, float("nan")
        outcomes[label] = Outcome(ok, value, time.perf_counter() - started)
        if ok:
            good[label] = call
    return good, outcomes


# ---------------------------------------------------------------- operands

def operand(rows: int, cols: int, how: str = "n", dtype: str = "float32", generator=None, device: str = "cuda"):
    """A random (rows, cols) torch tensor: a transposed view of a (cols, rows) one where how is
    "t". Floats standard normal (drawn in float32 and rounded to a narrower dtype; float64 and
    complex drawn in their own, every bit of the mantissa used), integers uniform over their
    range (never zeros: they hide unwritten outputs)."""
    import torch
    shape = (cols, rows) if how == "t" else (rows, cols)
    kind = getattr(torch, dtype)
    if kind.is_complex or kind == torch.float64:
        x = torch.randn(shape, generator=generator, device=device, dtype=kind)
    elif kind.is_floating_point:
        x = torch.randn(shape, generator=generator, device=device).to(kind)
    else:
        info = torch.iinfo(kind)
        x = torch.randint(info.min, info.max, shape, generator=generator, device=device, dtype=kind)
    return x.T if how == "t" else x


def routed_rows(weights, rows: int, generator):
    """Rows per expert (int64): `rows` draws of an expert by `weights` (a multinomial), all from
    `generator`, so that its seed fixes the routing (torch.distributions.Multinomial draws from
    torch's global generator, which every earlier draw moves)."""
    import torch
    picks = torch.multinomial(weights / weights.sum(), rows, replacement=True, generator=generator)
    return torch.bincount(picks, minlength=len(weights)).long()


# ---------------------------------------------------------------- records

def append(path, records) -> None:
    """Append each record to path as a JSON line."""
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def emitter(path, stamp: dict, show: int = 400):
    """emit(record): the record, stamped, appended to path and printed without the stamp (the
    same at every record) to its first `show` characters."""
    def emit(record: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps({**stamp, **record}) + "\n")
        line = json.dumps(record)
        print(line if len(line) < show else line[:show] + " ...", flush=True)
    return emit


# ---------------------------------------------------------------- a replay's stages

def replay_stages(replay, inputs: tuple, row: dict, time_all) -> None:
    """The replay's Python alone (its launch stubbed) and its launch alone (the C launcher, or the
    runner where the replay calls that) on inputs (a, b, and any others it takes), timed by
    time_all({name: call}); what runs, in row."""
    launch = replay.single[0]
    row["launch"], row["program"] = type(launch).__name__, getattr(launch.program, "fn", launch.program).__name__
    real, captured = launch.runner, []
    row["runner"] = getattr(real, "__qualname__", type(real).__name__)
    row["descriptors"] = len(replay.operand_slots)
    parts = getattr(real, "parts", None)      # a direct runner's: the C launcher and its constants

    def stub(call):
        """A runner that calls `call` where Triton's C launcher (or the runner) would be called."""
        def run(*args, **options):
            call(*args, **options)
        if parts is not None:
            run.parts = (call, *parts[1:])
        return run
    try:
        launch.runner = stub(lambda *args, **options: captured.append((args, options)))
        kept_c = replay.quick_call()(*inputs)   # (alive while its launch is timed: its address is in it)
        launch.runner = stub(lambda *args, **options: None)
        stubbed = replay.quick_call()
        row["quick"] = stubbed.__module__       # tilemm.engine.direct_replay: past the runner
        time_all({"replay, launch stubbed (Python alone)": lambda: stubbed(*inputs)})
    finally:
        launch.runner = real
    args, options = captured[0]
    alone = parts[0] if parts is not None and row["quick"].endswith("direct_replay") else real
    time_all({"launch alone (C launcher)" if alone is not real else "launch alone (runner)":
              lambda: alone(*args, **options)})
    del kept_c



# ---------------------------------------------------------------- child processes

def child_lines(argv: list, env: dict | None, timeout: float | None = None) -> tuple[list[dict], str | None]:
    """([the JSON objects a child process printed, a line each], None, or why it failed: its exit
    status or timeout and the tail of its stderr). Never raises for the child's failure."""
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        out, err, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", e.stderr or "", f"timeout after {timeout} s"
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out, err))
    found = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if rc == 0 and found:
        return found, None
    return found, f"process ended with {rc or 'no record'}: {' '.join(err.split()[-60:])}"


INT_MM_PADDED_ROWS = 32   # torch._int_mm refuses M <= 16: the anchor pads A to this many rows


def int8_operands(m: int, n: int, k: int) -> tuple:
    """(A (M, K), a weight (N, K)): int8 values on the GPU from seeds of the sizes (the same
    problem in every script that times it)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=gen)
    gen = torch.Generator(device="cuda").manual_seed(n * 131 + k)
    return a, torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=gen)


def int_mm_call(a, b):
    """torch._int_mm(a, b) as a user must call it: A padded to INT_MM_PADDED_ROWS rows where
    M <= 16 (the padding's copy and the slice counted)."""
    import torch
    m, k = a.shape
    if m > 16:
        return lambda: torch._int_mm(a, b)

    def padded():
        rows = a.new_zeros(INT_MM_PADDED_ROWS, k)
        rows[:m] = a
        return torch._int_mm(rows, b)[:m]
    return padded
