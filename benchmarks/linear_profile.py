"""Where a Llama model's time goes with torch's Linears and with tilemm's, on the GPU, three parts:

  products  each product of the model's Linears (forward, d(input), d(weight)) timed alone with CUDA
            events: torch.matmul with torch's flags, torch.matmul with reduced-precision reductions
            off (tilemm's library rung sums in float32 throughout), and tilemm.matmul.
  calls     the CPU's cost of one Linear call on a small problem (GPU time negligible): inference,
            and a training call (forward and backward), torch's Linear against tilemm's.
  model     a training step, a prefill and a short decode of the Llama model (benchmarks/llama_train.py's)
            per mode: wall time, the time until the call returns to Python (before the device
            synchronizes: near the wall time, the step is bound by the CPU), and the GPU's kernel
            time from torch.profiler, with its top kernels.

    PYTHONPATH=src python3 benchmarks/linear_profile.py --parts products calls model

Modes: torch; torch-noreduce (torch's Linears with allow_bf16_reduced_precision_reduction off, as
tilemm's library rung runs them); tilemm (tilemm.nn.Linear); tilemm-general (each Linear through
tilemm.matmul's general autograd rule, tilemm.torch.ops). Results: JSON lines in
$OUT/linear_profile.jsonl (else --out, else ./out).
"""
from __future__ import annotations

import argparse
import contextlib
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


def calls(emit):
    x = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    dy = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    layers = {"torch": torch.nn.Linear(256, 256, bias=False, device="cuda", dtype=torch.bfloat16)}
    for mode, cls in (("tilemm", tilemm.nn.Linear), ("tilemm-general", GeneralLinear)):
        layers[mode] = cls(256, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    for mode, layer in layers.items():
        with torch.inference_mode():
            inference = per_call_us(lambda: layer(x))
        train = per_call_us(lambda: layer(xg).backward(dy))
        emit({"part": "calls", "mode": mode, "inference_us": inference, "train_us": train})
    w = layers["torch"].weight.detach()
    x3, rows, wt = x.reshape(2, 8, 256), x, w.T
    fast = tilemm.plan(rows, wt).fast
    layout = tilemm.nn.Products(None, {}).layout(x3, w)
    with torch.inference_mode():
        steps = {"F.linear": lambda: torch.nn.functional.linear(x3, w), "torch.matmul": lambda: torch.matmul(rows, wt),
                 "tilemm.matmul": lambda: tilemm.matmul(rows, wt), "plan.fast": lambda: fast(rows, wt),
                 "Layout.linear": lambda: layout.linear(x3, w), "reshape": lambda: x3.reshape(-1, 256),
                 "weight.T": lambda: w.T}
        emit({"part": "calls", "steps_us": {name: per_call_us(step, 2000) for name, step in steps.items()}})


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
    set_mode(model, "torch")


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
                    choices=["products", "calls", "model"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--modes", nargs="+", default=["torch", "torch-noreduce", "tilemm", "tilemm-general"],
                    choices=["torch", "torch-noreduce", "tilemm", "tilemm-general"], help="model: the modes")
    ap.add_argument("--kernel", default=None, help="tilemm's kernel for its products and Linears (default: its choice)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.tiny, args.layers, args.intermediate, args.batch, args.seq, args.seed, args.lr, args.attention = \
        False, 16, 5632, 4, 512, 0, 3e-4, None
    out = harness.out_folder(args.out)

    stamp = {**tilemm.system.machine.stamp("PYTHONPATH=src python3 " + " ".join(sys.argv)),
             "bf16_reduction_default": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}

    emit = harness.emitter(out / "linear_profile.jsonl", stamp)   # every record stamped, as the canonical ones are
    for part in args.parts:
        print(f"[linear_profile] {part}", file=sys.stderr, flush=True)
        {"products": lambda e: products(e, args.kernel), "calls": calls, "model": lambda e: model_phases(args, e)}[part](emit)


if __name__ == "__main__":
    main()
