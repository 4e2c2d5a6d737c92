"""Products whose last rows run apart (a sliver: tile_model.sliver_rows) through tilemm's
fused-epilogue program, bf16 with bias and SiLU, in three forms, against torch: "whole" (the rows
never cut: one launch in the tiles of all the rows), "two" (the sliver a launch of the pointer
program of its own) and "one" (the sliver in the TMA program's launch:
epilogue_launch.SLIVER_IN_ONE_LAUNCH), each eager and compiled.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/sliver_launch_probe.py --out OUT

Shapes M x N x K (x (M, K) through a Linear's weight (N, K)): --shapes 2052x2048x5632 (an MLP's
down projection, 4 x 513 tokens), 2060x2048x32000 (an LM head's dX) and 2052x2048x2048.
Timings, in interleaved rounds (the medians, µs a call):
  graph       the launches alone: a CUDA graph of --calls calls of the form's launches
              (epilogue_launch.parts_arguments, as replayed and compiled calls cut the rows);
              torch: F.silu(F.linear(x, W, b)).
  eager       whole calls of a tilemm.nn.Linear(activation="silu") recorded in the form (its
              launches replayed), back to back between CUDA events, and the CPU's part (host);
              torch: the same of torch.nn.Linear and F.silu.
  compiled    whole calls of torch.compile of a function calling tilemm.linear(x, W, b, "silu",
              kernel="tensorcore"), compiled in the form (Inductor's caches off: each form traces
              its own graph), likewise with the CPU's part; torch: torch.compile of F.silu(F.linear).
Kernels a call (torch.profiler, CUDA kernels named matmul_epilogue*) are recorded for each eager and
compiled form: "two" should make 2, "one" and "whole" 1. Every answer is checked against float32's
product first (within 2% of its largest value); a form that fails is recorded and not timed.
Records: sliver_launch_probe.jsonl, one per shape.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

import tilemm
import tilemm.nn
import harness
from tilemm.engine import epilogue_launch, tile_model
from tilemm.engine.epilogue_launch import config_for

FORMS = ("whole", "two", "one")


@contextlib.contextmanager
def form_set(form: str):
    """The rows cut as a replayed or compiled call cuts them (no eager launch's CPU time counted),
    never ("whole"), with the sliver in a launch of its own ("two") or in the TMA program's ("one")."""
    kept = epilogue_launch.sliver_rows, epilogue_launch.SLIVER_IN_ONE_LAUNCH, epilogue_launch.EAGER_LAUNCH_US
    if form == "whole":
        epilogue_launch.sliver_rows = lambda *shape, **kw: 0
    epilogue_launch.SLIVER_IN_ONE_LAUNCH = form == "one"
    epilogue_launch.EAGER_LAUNCH_US = 0.0
    try:
        yield
    finally:
        epilogue_launch.sliver_rows, epilogue_launch.SLIVER_IN_ONE_LAUNCH, epilogue_launch.EAGER_LAUNCH_US = kept


def launches(form: str, x, w, b):
    """(a call of the form's launches alone, their count, Y they write)."""
    y = torch.empty(x.shape[0], w.shape[0], device=x.device, dtype=x.dtype)
    with form_set(form):
        parts = epilogue_launch.parts_arguments(x, w.T, y, None, b, False, None, None, "silu", 1.0, 0.0,
                                                config_for(x.dtype))

    def call():
        for program, grid, args, options in parts:
            program[grid](*args, **options)
        return y
    return call, len(parts)


def eager_module(form: str, x, w, b):
    """A tilemm.nn.Linear of W and b with SiLU whose first calls on x, made in the form, record its
    launches (its route replays them)."""
    layer = tilemm.nn.Linear(w.shape[1], w.shape[0], kernel="tensorcore", activation="silu", device="cuda",
                             dtype=w.dtype)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
        with form_set(form):
            for _ in range(3):
                layer(x)
    return layer


def compiled_linear(form: str, x, w, b):
    """torch.compile of a function of its own (its own code object: Dynamo's cache is by code)
    calling tilemm.linear, compiled (its first calls) in the form."""
    space = {}
    exec(f"def linear_{form}(x, w, b):\n    return tilemm.linear(x, w, b, 'silu', kernel='tensorcore')\n",
         {"tilemm": tilemm}, space)
    compiled = torch.compile(space[f"linear_{form}"])
    with form_set(form), torch.no_grad():
        for _ in range(2):
            compiled(x, w, b)
    return compiled


def epilogue_kernels(call) -> int:
    """CUDA kernels named matmul_epilogue* that one call launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "matmul_epilogue" in e.name)


def shape_record(m: int, n: int, k: int, args, g) -> dict:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = F.silu(x.float() @ w.float().T + b.float()).double()
    bound = 2e-2 * ref.abs().max()
    record = dict(m=m, n=n, k=k, rows_apart=tile_model.sliver_rows(m, n, k), wrong=[], launches={}, kernels={})
    graph, eager, compiled = {}, {}, {}
    for form in FORMS:
        graph[form], record["launches"][form] = launches(form, x, w, b)
        layer = eager_module(form, x, w, b)
        eager[form] = torch.no_grad()(lambda layer=layer: layer(x))
        compiled[form] = torch.no_grad()(lambda fn=compiled_linear(form, x, w, b): fn(x, w, b))
    theirs = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        theirs.weight.copy_(w)
        theirs.bias.copy_(b)
    graph["torch"] = lambda: F.silu(F.linear(x, w, b))
    eager["torch"] = torch.no_grad()(lambda: F.silu(theirs(x)))
    torch_compiled = torch.compile(lambda x, w, b: F.silu(F.linear(x, w, b)))
    compiled["torch"] = torch.no_grad()(lambda: torch_compiled(x, w, b))
    for kind, calls in (("graph", graph), ("eager", eager), ("compiled", compiled)):
        for label in list(calls):
            ok, err = harness.within(calls[label]().float(), ref, bound)
            if not ok:
                record["wrong"].append((kind, label, err))
                del calls[label]
            elif kind != "graph" and label != "torch":
                record["kernels"][f"{kind} {label}"] = epilogue_kernels(calls[label])
    times = {f"graph {label}": t for label, t in harness.medians(harness.rounds(
        graph, args.rounds, lambda c: harness.graph_us(c, args.calls))).items()}
    for kind, calls in (("eager", eager), ("compiled", compiled)):
        times.update({f"{kind} {label}": t for label, t in harness.medians(harness.rounds(
            calls, args.rounds, lambda c: harness.block_us(c, args.calls))).items()})
        times.update({f"{kind} host {label}": t for label, t in harness.medians(harness.rounds(
            calls, args.rounds, lambda c: harness.host_us(c, args.calls))).items()})
    record["us"] = {label: round(t, 2) for label, t in times.items()}
    for kind in ("graph", "eager", "compiled", "eager host", "compiled host"):
        if f"{kind} one" in times and f"{kind} two" in times:
            record[f"{kind.replace(' ', '_')}_two_over_one"] = round(times[f"{kind} two"] / times[f"{kind} one"], 4)
    return record


def main():
    args = harness.arguments(__doc__.split("\n\n")[0], shapes=["2052x2048x5632", "2060x2048x32000", "2052x2048x2048"],
                             rounds=5, calls=20, prewarm=5.0)
    emit = harness.emitter(args.out / "sliver_launch_probe.jsonl", harness.stamp("sliver_launch_probe.py", args))
    import torch._inductor.config
    torch._inductor.config.force_disable_caches = True     # each form's compiled graph its own, none from a cache
    harness.prewarm(args.prewarm)
    g = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes:
        m, n, k = (int(s) for s in shape.split("x"))
        record = shape_record(m, n, k, args, g)
        emit(record)
        us = record["us"]
        print(f"{shape}: rows apart {record['rows_apart']}, kernels {record['kernels']}, wrong {record['wrong']}")
        for kind in ("graph", "eager", "eager host", "compiled", "compiled host"):
            print(f"  {kind:14s}" + "".join(f"  {label} {us[f'{kind} {label}']:8.1f}" for label in (*FORMS, "torch")
                                            if f"{kind} {label}" in us))


if __name__ == "__main__":
    main()
