"""Where a Llama model's time goes with torch's Linears and with tilemm's, on the GPU, in parts:

  products  each product of the model's Linears (forward, d(input), d(weight)) timed alone with CUDA
            events: torch.matmul with torch's flags, torch.matmul with reduced-precision reductions
            off (tilemm's library rung sums in float32 throughout), and tilemm.matmul.
  calls     the CPU's cost of one Linear call on a small problem (GPU time negligible): inference,
            and a training call (forward and backward), torch's Linear against tilemm's.
  stages    the CPU's cost of each stage of one Linear product (tilemm's route, the plan's repeated
            call, the replay's Python with the launch stubbed, the launch alone, the gradients'
            products, the autograd Function) beside torch's, at 4 rows (a decode's) and 2048 (a
            training step's): where a product's CPU time goes.
  tune      (--tune) the forward products at 2048 rows with other tiles of rung 10 (TUNE_TILES)
            against its default's and torch's, kernel alone.
  epilogue  (--parts epilogue) the products of a compiled training step (--rows, 2052 by default)
            by the fused-epilogue TMA program as a compiled graph launches it, its default tiles
            and each candidate's, against cuBLAS, GPU time alone, the operands cycled through
            --copies sets (more than L2 holds, as a model's come): the step's products in total
            by each, and what the rows past the last multiple of 128 cost each.
  narrow    (--parts narrow --sets ...) the epilogue part over narrow layers (a GQA layer's k/v)
            with other candidate tiles (NARROW_SETS): what the TMA program's deeper K steps in
            64 x 128 tiles were chosen on and checked on.
  sliver    (--parts sliver) the forward and d(input) products of a compiled step at --rows (2052)
            by the TMA program with the rows past the last multiple of 128 in its launch, in thin
            tiles and in short ones (epilogue_tma_launch.short_tiles_fit), against the rows before
            them alone and cuBLAS, cycled through --copies sets; whether the two give the same bits.
  descriptors (--parts descriptors) the products of a compiled step at --rows (2048) by the TMA
            program with its descriptors made in the program (as a compiled graph launches it)
            and made on the host (as an eager call does), the same tiles, cuBLAS beside, cycled
            through --copies sets in interleaved rounds: what making them in the program costs.
  model     a training step, a prefill and a short decode of the Llama model (benchmarks/llama_train.py's)
            per mode: wall time, the time until the call returns to Python (before the device
            synchronizes: near the wall time, the step is bound by the CPU), and the GPU's kernel
            time from torch.profiler, with its top kernels.

    PYTHONPATH=src python3 benchmarks/linear_profile.py --parts products calls model
    PYTHONPATH=src:benchmarks python3 benchmarks/linear_profile.py --parts stages calls model --kernel tensorcore

Modes: torch; torch-noreduce (torch's Linears with allow_bf16_reduced_precision_reduction off, as
tilemm's library rung runs them); tilemm (tilemm.nn.Linear); tilemm-general (each Linear through
tilemm.matmul's general autograd rule, tilemm.torch.ops). Results: JSON lines in
$OUT/linear_profile.jsonl (else --out, else ./out).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import statistics
import sys
import time

import torch

import tilemm
from tilemm import api

import harness
from harness import llama

SHAPES = {"q/o": (2048, 2048), "k/v": (2048, 512), "gate/up": (2048, 5632), "down": (5632, 2048),
          "lm_head": (2048, 32000)}          # (in, out)


class GeneralLinear(tilemm.nn.Linear):
    """A Linear whose product goes through tilemm.matmul's general path (autograd by
    tilemm.torch.ops.MatmulFunction): the reference for tilemm.nn.Linear's own."""

    def forward(self, input):
        rows = input.reshape(-1, self.in_features)
        y = api.matmul(rows, self.weight.T, kernel=self.kernel, out_dtype=self.out_dtype, **self.params)
        y = y.reshape(input.shape[:-1] + (self.out_features,))
        return y if self.bias is None else y + self.bias


@contextlib.contextmanager
def bf16_reduction(allowed: bool):
    settings = torch.backends.cuda.matmul
    before = settings.allow_bf16_reduced_precision_reduction
    settings.allow_bf16_reduced_precision_reduction = allowed
    try:
        yield
    finally:
        settings.allow_bf16_reduced_precision_reduction = before


def set_mode(model, mode: str, kernel: str | None = None) -> None:
    tilemm.nn.restore_linears(model)
    for m in model.modules():
        if type(m) is GeneralLinear:
            m.__class__ = torch.nn.Linear
    if mode.startswith("tilemm"):
        tilemm.nn.swap_linears(model, kernel=kernel)
        if mode == "tilemm-general":
            for m in model.modules():
                if type(m) is tilemm.nn.Linear:
                    m.__class__ = GeneralLinear


def event_ms(call, reps: int = 30) -> float:
    """Median milliseconds of a call between CUDA events, after 3 untimed calls."""
    for _ in range(3):
        call()
    time_us = harness.event_timer()
    return statistics.median(time_us(call) for _ in range(reps)) / 1e3


def products(emit, kernel: str | None = None):
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
    for rows in (2048, 4):
        for name, (k, n) in SHAPES.items():
            x, w, dy = randn(rows, k), randn(n, k), randn(rows, n)
            ops = {"forward": (x, w.T)}
            if rows > 4:
                ops.update({"d_input": (dy, w), "d_weight": (dy.T, x)})
            for op, (a, b) in ops.items():
                row = {"part": "products", "shape": name, "rows": rows, "op": op,
                       "mnk": [a.shape[0], b.shape[1], a.shape[1]]}
                row["torch_ms"] = event_ms(lambda: torch.matmul(a, b))
                with bf16_reduction(False):
                    row["torch_noreduce_ms"] = event_ms(lambda: torch.matmul(a, b))
                row["tilemm_ms"] = event_ms(lambda: tilemm.matmul(a, b, kernel=kernel))
                flops = 2 * a.shape[0] * b.shape[1] * a.shape[1]
                row["tflops"] = {v: flops / row[v + "_ms"] / 1e9 for v in ("torch", "torch_noreduce", "tilemm")}
                emit(row)


def per_call_us(call, iters: int = 400) -> float:
    for _ in range(20):
        call()
    return harness.wall_us(call, iters)


def calls(emit, kernel: str | None = None):
    x = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    dy = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    layers = {"torch": torch.nn.Linear(256, 256, bias=False, device="cuda", dtype=torch.bfloat16)}
    for mode, cls in (("tilemm", tilemm.nn.Linear), ("tilemm-general", GeneralLinear)):
        layers[mode] = cls(256, 256, bias=False, device="cuda", dtype=torch.bfloat16, kernel=kernel)
    for mode, layer in layers.items():
        with torch.inference_mode():
            inference = per_call_us(lambda: layer(x))
        train = per_call_us(lambda: layer(xg).backward(dy))
        emit({"part": "calls", "mode": mode, "kernel": kernel, "inference_us": inference, "train_us": train})
    w = layers["torch"].weight.detach()
    x3, rows, wt = x.reshape(2, 8, 256), x, w.T
    fast = tilemm.plan(rows, wt, kernel=kernel).fast
    layout = tilemm.nn.Products(kernel, {}).layout(x3, w)
    with torch.inference_mode():
        steps = {"F.linear": lambda: torch.nn.functional.linear(x3, w), "torch.matmul": lambda: torch.matmul(rows, wt),
                 "tilemm.matmul": lambda: tilemm.matmul(rows, wt, kernel=kernel),
                 "reshape": lambda: x3.reshape(-1, 256), "weight.T": lambda: w.T}
        if fast is not None:           # the library's product (kernel None); a replay is not a plan's until its first call
            steps["plan.fast"] = lambda: fast(rows, wt)
        if layout.linear is not None:
            steps["Layout.linear"] = lambda: layout.linear(x3, w)
        emit({"part": "calls", "kernel": kernel, "steps_us": {name: per_call_us(step, 2000) for name, step in steps.items()}})


def stages(emit, kernel: str | None = None, device: str = "cuda", shapes=((4, 2048, 2048), (2048, 2048, 2048)),
           calls_timed: int = 200):
    """The CPU's cost of each stage of one tilemm.nn.Linear product (rows x in -> out), inference and
    training, against torch's: the module call, its route (tilemm.torch.nn_routes), the route's
    product, the plan's repeated call (a replay), the replay with the launch stubbed (its Python
    alone), the launch alone, the plan cache's call and tilemm.matmul's; the Function's apply and
    the two gradient products. (rows 4: the pointer program with split K, as a decode's; 2048: the
    TMA programs, as a training step's; each block of calls_timed calls on an idle GPU, timed until
    the last returns.)"""
    from tilemm.plans import cache, calls as plan_calls
    from tilemm.torch import nn_routes
    timer = harness.host_us if device == "cuda" else cpu_us
    dtype = torch.bfloat16
    for rows, k, n in shapes:
        x, dy = torch.randn(rows, k, device=device, dtype=dtype), torch.randn(rows, n, device=device, dtype=dtype)
        xg = x.clone().requires_grad_()
        ref = torch.nn.Linear(k, n, bias=False, device=device, dtype=dtype)
        layer = tilemm.nn.Linear(k, n, bias=False, device=device, dtype=dtype, kernel=kernel)
        layer.load_state_dict(ref.state_dict())
        weight, w, wt = layer.weight, layer.weight.detach(), layer.weight.detach().T
        for _ in range(3):          # each product's first call (its plan, its launch recorded), then repeats
            layer(xg).backward(dy)
            with torch.inference_mode():
                layer(x)
        route = layer.products.routes.get((x.shape, x.stride(), x.dtype))
        plan = cache.lookup(x, wt, kernel, None, None, {})[1]
        replay = getattr(plan, "replay", None)
        row = {"part": "stages", "kernel": kernel, "mnk": [rows, n, k], "route": route is not None,
               "replay": replay is not None, "one_launch": getattr(replay, "single", None) is not None}
        timings = {}

        def time_all(steps: dict) -> None:
            for name, step in steps.items():
                for _ in range(3):         # (a shape's first call in torch: its heuristics, its workspace)
                    step()
                timings[name] = timer(step, calls_timed)
        with torch.inference_mode():
            time_all({"torch F.linear": lambda: torch.nn.functional.linear(x, w),
                      "torch.matmul": lambda: torch.matmul(x, wt),
                      "torch.empty (a C)": lambda: torch.empty(rows, n, dtype=dtype, device=device),
                      "weight.T": lambda: w.T,
                      "tilemm Linear (module call)": lambda: layer(x),
                      "tilemm.matmul": lambda: tilemm.matmul(x, wt, kernel=kernel),
                      "plan cache (calls.matmul)": lambda: plan_calls.matmul(x, wt, kernel=kernel)})
            if route is not None:
                fast = plan_calls.repeated(x, wt, kernel, {})
                time_all({"route (no module call)": lambda: route(x, w, None),
                          "route.forward (product)": lambda: route.forward(x, w),
                          "repeated call (replay)": lambda: fast(x, wt)})
            if replay is not None and replay.single is not None and device == "cuda":
                harness.replay_stages(replay, (x, wt), row, time_all)
        train = {"torch train call": lambda: ref(xg).backward(dy),
                 "tilemm train call": lambda: layer(xg).backward(dy)}
        if route is not None:
            train["KernelLinear apply + forward product"] = lambda: nn_routes.record(xg, weight, route)
            with torch.no_grad():
                time_all({"route.gradients (2 products)": lambda: route.gradients(dy, x, w, True, True),
                          "torch's 2 gradient products": lambda: (torch.matmul(dy, w), torch.matmul(dy.T, x))})
        time_all(train)
        row["stages_us"] = {name: round(us, 2) for name, us in timings.items()}
        emit(row)


def cpu_us(call, calls: int) -> float:
    """Microseconds a call on the CPU (no GPU to wait for): harness.host_us's measure there."""
    for _ in range(5):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


# Tiles tried for the forward products (rows @ W.T, B read K-major) by --tune: rung 10's autotune
# candidates and their neighbours (stages, group, one program a tile)
TUNE_TILES = [dict(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages)
              for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3),
                                                (256, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                                                (128, 128, 64, 4, 5), (64, 256, 64, 4, 4), (128, 128, 128, 8, 3))]
TUNE_TILES += [dict(TUNE_TILES[1], group_m=group) for group in (4, 16)] + [dict(TUNE_TILES[1], persistent=False)]


def tune(emit):
    """The forward products of the Llama's Linears at 2048 rows (A rows @ W.T: "NT") with each of
    TUNE_TILES against the shape's default tiles and torch: the GPU's time, by CUDA events around
    20 calls back to back (each call's CPU time hidden behind the previous one's kernel), each
    answer checked against torch's first (a record per shape: every configuration's ms, the best)."""
    from tilemm.ladder.tensorcore import r10_tensorcore
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, (k, n) in SHAPES.items():
        x = torch.randn(2048, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
        expected = torch.matmul(x.float(), w.T.float())
        row = {"part": "tune", "shape": name, "mnk": [2048, n, k], "torch_ms": harness.queued_ms(lambda: torch.matmul(x, w.T)),
               "default_tiles": r10_tensorcore.default_tiles(2048, n, k), "ms": {}}
        for label, tiles in [("default", {})] + [(encode(t), t) for t in TUNE_TILES]:
            try:
                y = tilemm.matmul(x, w.T, kernel="tensorcore", **tiles)
            except ValueError as error:         # over the shared memory, or a parameter refused
                row["ms"][label] = str(error)[:80]
                continue
            if not near(y, expected):
                row["ms"][label] = "wrong answer"
                continue
            row["ms"][label] = harness.queued_ms(lambda: tilemm.matmul(x, w.T, kernel="tensorcore", **tiles))
        timed = {label: ms for label, ms in row["ms"].items() if isinstance(ms, float)}
        row["best"] = min(timed, key=timed.get)
        row["best_vs_torch"] = row["torch_ms"] / timed[row["best"]]
        emit(row)


# how often one training step of the 4-layer Llama runs each Linear's products (its layers' q and o,
# k and v, gate and up, down; one LM head)
STEP_COUNTS = {"q/o": 8, "k/v": 8, "gate/up": 8, "down": 4, "lm_head": 1}


def epilogue(emit, rows: int = 2052, copies: int = 6):
    """The products of a compiled training step of the Llama's Linears (`rows` tokens, 4 x 513 by
    default: forward, d(input), d(weight)) by the fused-epilogue TMA program as a compiled graph
    launches it (its descriptors made in the program, the rows past the last multiple of 128 summed
    in the same launch), with its default tiles and each of epilogue_launch.TMA_CANDIDATES, against
    cuBLAS (torch.mm): the GPU's time alone (a CUDA graph of 2 x `copies` launches, each on the next
    of `copies` sets of operands, so that they come from memory as a model's do, not from an L2 that
    holds one set: 1, the same operands each launch), each answer checked first. A record per
    product (with the default's and cuBLAS's time at the rows before the last multiple of 128:
    what the rows past it cost), and one of the step's total (STEP_COUNTS) by cuBLAS, by the default
    tiles and by the best tiles of each product (what a tile choice per shape could reach)."""
    from tilemm.engine import epilogue_launch, epilogue_tma_launch
    from tilemm.engine.tile_model import sliver_rows
    totals = {"cublas": 0.0, "default": 0.0, "best": 0.0}
    for name, op, sets, expected in step_products(rows, copies):
        a, b, y = sets[0]
        m, nn, kk = a.shape[0], b.shape[1], a.shape[1]
        rest = sliver_rows(m, nn, kk)
        whole = epilogue_launch.tma_tiles(m - rest, nn, kk, ())
        row = {"part": "epilogue", "shape": name, "op": op, "mnk": [m, nn, kk], "sliver_rows": rest,
               "copies": copies, "default_tiles": whole, "us": {}}
        for label, tiles in [("default", whole)] + [(encode(t), {**whole, **t})
                                                    for t in epilogue_launch.TMA_CANDIDATES]:
            try:
                launches = [traced_launch(a_, b_, y_, tiles, rest, epilogue_launch, epilogue_tma_launch)
                            for a_, b_, y_ in sets]
                first_launch(launches, y)
            except Exception as error:            # over the shared memory, or refused
                row["us"][label] = f"{type(error).__name__}: {str(error)[:80]}"
                continue
            if not near(y, expected):
                row["us"][label] = "wrong answer"
                continue
            row["us"][label] = cycled_us(launches)
        row["cublas_us"] = cycled_us([functools.partial(torch.mm, a_, b_, out=y_) for a_, b_, y_ in sets])
        if m % 128:          # the rows before the last multiple of 128 alone
            cut = m - m % 128
            row["rows_before_us"] = {
                "default": cycled_us([traced_launch(a_[:cut], b_, y_[:cut], whole, 0, epilogue_launch,
                                                    epilogue_tma_launch) for a_, b_, y_ in sets]),
                "cublas": cycled_us([functools.partial(torch.mm, a_[:cut], b_, out=y_[:cut])
                                     for a_, b_, y_ in sets])}
        timed = {label: us for label, us in row["us"].items() if isinstance(us, float)}
        row["best"] = min(timed, key=timed.get)
        row["default_vs_cublas"] = row["cublas_us"] / timed["default"]
        row["best_vs_cublas"] = row["cublas_us"] / timed[row["best"]]
        count = STEP_COUNTS[name]
        totals["cublas"] += count * row["cublas_us"]
        totals["default"] += count * timed["default"]
        totals["best"] += count * timed[row["best"]]
        emit(row)
        print(f"{name:8} {op:9} {m:5} x {nn:5} x {kk:5}  cuBLAS {row['cublas_us']:7.1f} µs  default "
              f"{timed['default']:7.1f} ({row['default_vs_cublas']:.3f})  best {row['best_vs_cublas']:.3f} "
              f"{row['best']}  {row.get('rows_before_us', '')}", file=sys.stderr, flush=True)
    emit({"part": "epilogue", "rows": rows, "copies": copies, "step_us": totals,
          "default_vs_cublas": totals["cublas"] / totals["default"], "best_vs_cublas": totals["cublas"] / totals["best"]})


# The narrow part's sets: (rows, {layer: (in, out)}) of each set's layers, and its candidate tiles
# (block_m, block_n, block_k, num_warps, num_stages, programs_per_sm) beside the default's
NARROW_SETS = {
    "fit": ([(2052, {"k/v": (2048, 512)})],
            [(64, 64, 64, 4, 4, 2), (64, 64, 128, 4, 3, 2), (64, 128, 64, 4, 4, 2), (64, 128, 64, 4, 3, 2),
             (128, 64, 64, 8, 4, 1), (128, 64, 64, 4, 4, 2), (64, 256, 32, 4, 4, 2), (128, 128, 64, 8, 3, 2),
             (64, 64, 64, 4, 4, 3), (64, 128, 128, 4, 3, 1)]),
    "held-out": ([(1024, {"h1": (4096, 1024)}), (4100, {"h2": (4096, 256)}), (1500, {"h3": (5120, 640)}),
                  (1000, {"h4": (2048, 512)}), (2560, {"h5": (3072, 384)})],
                 [(64, 128, 128, 4, 3, 1), (64, 128, 128, 4, 4, 1)]),
    "held-out-2": ([(800, {"c1": (8192, 1024)}), (2000, {"c2": (8192, 256)}), (700, {"c3": (4096, 1536)}),
                    (1800, {"c4": (2560, 512)}), (2304, {"c5": (1536, 256)}), (640, {"c6": (7168, 1024)})],
                   [(64, 128, 64, 4, 4, 1), (64, 128, 128, 4, 3, 1)]),
}


def narrow(emit, sets):
    """The epilogue part over narrow layers (a GQA layer's k/v projections) with other candidates:
    fit, a 2052 x 512 x 2048 layer against ten tiles (what epilogue_launch.DEEP_STEP was chosen on);
    held-out, 5 layers, K steps of 128 in 3 and 4 stages; held-out-2, 6 layers, the default as it
    ships against the 64-deep steps it replaced. A record per product, with its set."""
    global SHAPES, STEP_COUNTS
    from tilemm.engine import epilogue_launch
    kept = SHAPES, STEP_COUNTS, epilogue_launch.TMA_CANDIDATES
    harness.prewarm(8.0)
    try:
        for name in sets:
            layers, candidates = NARROW_SETS[name]
            epilogue_launch.TMA_CANDIDATES = [dict(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=w,
                                                   num_stages=st, programs_per_sm=p)
                                              for bm, bn, bk, w, st, p in candidates]
            for rows, shapes in layers:
                SHAPES, STEP_COUNTS = shapes, {layer: 1 for layer in shapes}
                epilogue(lambda row: emit({"set": name, "rows": rows, **row}) if "us" in row else None, rows, 6)
    finally:
        SHAPES, STEP_COUNTS, epilogue_launch.TMA_CANDIDATES = kept


def sliver(emit, rows: int = 2052, copies: int = 6):
    """The rows past the last multiple of 128 in the TMA program's own launch, in the pointer
    program's thin tiles (on every program, in turn) and in 64-row short tiles (on the programs the
    whole tiles leave short, where they fit): a record per product (forward and d(input) of each
    layer of SHAPES), the answers checked against float32's and against each other's bits."""
    from tilemm.engine import epilogue_launch, epilogue_tma_launch
    from tilemm.engine.tile_model import sliver_rows
    harness.prewarm(8.0)
    fit = epilogue_tma_launch.short_tiles_fit
    rest = rows % 128
    try:
        for name, op, sets, expected in step_products(rows, copies, ("forward", "d_input")):
            a, b, y = sets[0]
            whole = epilogue_launch.tma_tiles(rows - rest, b.shape[1], a.shape[1], ())
            row = {"part": "sliver", "shape": name, "op": op, "mnk": [rows, b.shape[1], a.shape[1]],
                   "rows_past": rest, "sliver_taken": sliver_rows(rows, b.shape[1], a.shape[1]) > 0,
                   "tiles": whole, "copies": copies, "us": {}, "answers": {}}
            for form in ("thin", "short"):
                epilogue_tma_launch.short_tiles_fit = fit if form == "short" else (lambda *counts: False)
                launches = [traced_launch(a_, b_, y_, whole, rest, epilogue_launch, epilogue_tma_launch)
                            for a_, b_, y_ in sets]
                first_launch(launches, y)
                row["answers"][form] = y.clone()
                if not near(y, expected):
                    row["us"][form] = "wrong answer"
                    continue
                row["us"][form] = cycled_us(launches)
            epilogue_tma_launch.short_tiles_fit = fit
            row["same_bits"] = bool(torch.equal(*row.pop("answers").values()))
            row["us"]["rows_before"] = cycled_us([traced_launch(a_[:rows - rest], b_, y_[:rows - rest], whole, 0,
                                                                epilogue_launch, epilogue_tma_launch)
                                                  for a_, b_, y_ in sets])
            row["us"]["cublas"] = cycled_us([functools.partial(torch.mm, a_, b_, out=y_) for a_, b_, y_ in sets])
            emit(row)
            print(f"{name:8} {op:8} {row['mnk']} {row['us']} same bits {row['same_bits']}", file=sys.stderr,
                  flush=True)
    finally:
        epilogue_tma_launch.short_tiles_fit = fit


def descriptors(emit, rows: int = 2048, copies: int = 6, rounds: int = 3):
    """descriptors part: a record per product (forward, d(input), d(weight) of each layer of
    SHAPES), each launch's median over `rounds` interleaved rounds, and one of the step's total
    (STEP_COUNTS)."""
    from tilemm.engine import epilogue_launch, epilogue_tma_launch
    harness.prewarm(8.0)
    totals = {"device": 0.0, "host": 0.0, "cublas": 0.0}
    for name, op, sets, expected in step_products(rows, copies):
        a, b, y = sets[0]
        tiles = epilogue_launch.tma_tiles(a.shape[0], b.shape[1], a.shape[1], ())
        forms = {"device": [traced_launch(*s, tiles, 0, epilogue_launch, epilogue_tma_launch) for s in sets],
                 "host": [traced_launch(*s, tiles, 0, epilogue_launch, epilogue_tma_launch, in_program=False)
                          for s in sets],
                 "cublas": [functools.partial(torch.mm, *s[:2], out=s[2]) for s in sets]}
        row = {"part": "descriptors", "shape": name, "op": op, "mnk": [a.shape[0], b.shape[1], a.shape[1]],
               "tiles": tiles, "copies": copies, "rounds": rounds, "wrong": []}
        for form, launches in forms.items():
            first_launch(launches, y)
            if not near(y, expected):
                row["wrong"].append(form)
        timed = harness.rounds(forms, rounds, cycled_us)
        row["us"] = {form: statistics.median(times) for form, times in timed.items()}
        row["device_minus_host_us"] = row["us"]["device"] - row["us"]["host"]
        for form, us in row["us"].items():
            totals[form] += STEP_COUNTS[name] * us
        emit(row)
        print(f"{name:8} {op:9} {row['mnk']}  {row['us']}", file=sys.stderr, flush=True)
    emit({"part": "descriptors", "rows": rows, "step_us": totals,
          "device_minus_host_us": totals["device"] - totals["host"]})


def step_products(rows: int, copies: int, ops=("forward", "d_input", "d_weight")):
    """(layer, op, its (A, B, Y) of each copy, the first copy's float32 product) for each op of each
    layer of SHAPES, a Linear's operands drawn from one seed, a layer's copies at a time."""
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, (k, n) in SHAPES.items():
        layers = layer_copies(g, rows, k, n, copies)
        for op in ops:
            sets = product_sets(layers, op)
            a, b, _ = sets[0]
            yield name, op, sets, a.float() @ b.float()


def layer_copies(g, rows: int, k: int, n: int, copies: int) -> list:
    """`copies` sets of a Linear's operands (X, W, dY): bf16 on the GPU, W scaled by 1/sqrt(K)."""
    return [(torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=g),
             (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(torch.bfloat16),
             torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=g)) for _ in range(copies)]


def product_sets(layers: list, op: str) -> list:
    """(A, B, Y) of each copy's product `op` (forward X @ W.T, d_input dY @ W, d_weight dY.T @ X)."""
    operands = [{"forward": (x, w.T), "d_input": (dy, w), "d_weight": (dy.T, x)}[op] for x, w, dy in layers]
    return [(a, b, torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)) for a, b in operands]


def first_launch(launches: list, y) -> None:
    """The first of `launches`, into its Y poisoned with NaN (an element left unwritten fails near)."""
    y.fill_(float("nan"))
    launches[0]()
    torch.cuda.synchronize()


def near(y, expected) -> bool:
    """Whether bf16 Y is the float32 product `expected` to 2% (of its largest magnitude)."""
    return torch.allclose(y.float(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


def cycled_us(launches: list) -> float:
    """Microseconds a launch of a CUDA graph that makes each of `launches` twice, in turn."""
    turn = itertools.cycle(launches)
    return harness.graph_us(lambda: next(turn)(), 2 * len(launches))


def traced_launch(a, b, y, tiles: dict, rest: int, epilogue_launch, epilogue_tma_launch, in_program: bool = True):
    """A launch of the TMA program as a compiled graph makes it (wrap: the program itself, so its
    descriptors are made in it), the sliver of `rest` rows in the same launch; in_program False:
    as an eager call makes it, its descriptors made on the host."""
    sliver = None
    if rest:
        thin = epilogue_launch.sliver_config({}, rest, int(b.shape[1]))
        sliver = {key: thin[key] for key in ("block_m", "block_n", "block_k")} | {"rows": rest}
    read = epilogue_launch.takes_tma(a, b, y, None, True, traced=in_program)
    program, grid, args, options = epilogue_tma_launch.arguments(*read, y, None, None, False, None, None, 0, 1.0, 0.0,
                                                                 tiles, (lambda kernel: kernel) if in_program else None,
                                                                 sliver=sliver)
    return lambda: program[grid](*args, **options)


def encode(tiles: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in tiles.items())


def model_phases(args, emit):
    model = llama.build_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    tokens = next(llama.token_stream(args, model.config.vocab_size))
    phases = llama.model_phases(model, optimizer, tokens, args)
    modes = args.modes
    rows = {}
    for repeat in range(2):        # twice: the second pass is the one reported (the first warms every path)
        for mode in modes:
            set_mode(model, mode, args.kernel)
            with bf16_reduction(mode != "torch-noreduce") if mode.startswith("torch") else contextlib.nullcontext():
                for phase, call in phases.items():
                    call()
                    walls, returns = [], []
                    for _ in range(args.reps):
                        torch.cuda.synchronize()
                        start = time.perf_counter()
                        call()
                        returned = time.perf_counter()
                        torch.cuda.synchronize()
                        walls.append(time.perf_counter() - start)
                        returns.append(returned - start)
                    row = {"part": "model", "mode": mode, "phase": phase, "wall_ms": statistics.median(walls) * 1e3,
                           "returned_ms": statistics.median(returns) * 1e3}
                    if repeat:
                        row.update(profiled(call))
                        emit(row)
                    rows[(mode, phase)] = row
            if repeat and mode == "tilemm":
                emit({"part": "model", "mode": mode, "repeated_calls": repeated_calls(model)})
    set_mode(model, "torch")


def repeated_calls(model) -> dict:
    """How the routes of the model's tilemm Linears repeat each product, counted: by a replay past
    Triton's runner (tilemm.engine.direct_replay), by a replay through it (tilemm.engine.replay),
    by the plan's other repeated call or path (functools), or not yet called (its first call)."""
    counts: dict = {}
    for module in model.modules():
        if type(module) is tilemm.nn.Linear:
            for route in module.products.routes.values():
                for name in route.PRODUCTS:
                    call = getattr(route, name)
                    how = ("first call" if getattr(call, "func", None) == route.first else
                           getattr(call, "__module__", None) or type(call).__name__)
                    counts[how] = counts.get(how, 0) + 1
    return counts


def profiled(call) -> dict:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        call()
        torch.cuda.synchronize()
    averages = prof.key_averages()

    def device_us(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
    kernels = sorted(averages, key=device_us, reverse=True)
    gemm = sum(device_us(e) for e in averages if "gemm" in e.key.lower() or "xmma" in e.key.lower()
               or "cutlass" in e.key.lower() or "matmul" in e.key.lower())
    return {"gpu_kernels_ms": sum(device_us(e) for e in averages) / 1e3, "gemm_kernels_ms": gemm / 1e3,
            "top_kernels": [(e.key[:90], round(device_us(e) / 1e3, 3), e.count) for e in kernels[:10]]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["products", "calls", "model"],
                    choices=["products", "calls", "stages", "model", "epilogue", "narrow", "sliver", "descriptors"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--modes", nargs="+", default=["torch", "torch-noreduce", "tilemm", "tilemm-general"],
                    choices=["torch", "torch-noreduce", "tilemm", "tilemm-general"], help="model: the modes")
    ap.add_argument("--kernel", default=None, help="tilemm's kernel for its products and Linears (default: its choice)")
    ap.add_argument("--tune", action="store_true", help="also time TUNE_TILES on the forward products at 2048 rows")
    ap.add_argument("--rows", type=int, default=2052,
                    help="epilogue, sliver, descriptors: the step's tokens (4 x 513 by default)")
    ap.add_argument("--copies", type=int, default=6,
                    help="epilogue: sets of operands each launch cycles through (6: more than L2 holds; 1: one set)")
    ap.add_argument("--sets", nargs="+", default=list(NARROW_SETS), choices=list(NARROW_SETS),
                    help="narrow: the sets of layers (NARROW_SETS)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.tiny, args.layers, args.intermediate, args.batch, args.seq, args.seed, args.lr, args.attention = \
        False, 16, 5632, 4, 512, 0, 3e-4, None
    out = harness.out_folder(args.out)

    stamp = {**tilemm.system.machine.stamp("PYTHONPATH=src python3 " + " ".join(sys.argv)),
             "bf16_reduction_default": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}

    emit = harness.emitter(out / "linear_profile.jsonl", stamp)   # every record stamped, as the canonical ones are
    for part in args.parts + ["tune"] * args.tune:
        print(f"[linear_profile] {part}", file=sys.stderr, flush=True)
        {"products": lambda e: products(e, args.kernel), "calls": lambda e: calls(e, args.kernel),
         "stages": lambda e: stages(e, args.kernel), "tune": tune, "model": lambda e: model_phases(args, e),
         "epilogue": lambda e: epilogue(e, args.rows, args.copies), "narrow": lambda e: narrow(e, args.sets),
         "sliver": lambda e: sliver(e, args.rows, args.copies),
         "descriptors": lambda e: descriptors(e, args.rows, args.copies)}[part](emit)


if __name__ == "__main__":
    main()
