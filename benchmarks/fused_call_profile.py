"""The CPU's cost of a fused Linear's eager call (tilemm.nn.Linear(activation="gelu"), as
swap_linears(fuse_activations=True) makes it), stage by stage, beside torch's F.linear + GELU and
tilemm.linear's own path (what the module ran before its layout's route, tilemm.torch.nn_fused_routes),
on a GPU's host: the module call, the route, its forward product, the forward's replay with the
launch stubbed (its Python alone) and the launch alone (Triton's C launcher), the route's two
gradient products, and the training call (forward and backward). Each block of calls is timed
until the last returns, the GPU idle before it (harness.host_us): at 4 rows the GPU's time is
negligible and the CPU's is the call's; at a training step's rows compare with the GPU's time of
the forward (queued_ms: CUDA events around calls queued back to back, harness.queued_ms).

    PYTHONPATH=src:benchmarks python3 benchmarks/fused_call_profile.py --out $OUT
    PYTHONPATH=src:benchmarks python3 benchmarks/fused_call_profile.py --out $OUT --shapes 8192,768,3072

Records: OUT/fused_call_profile.jsonl (JSON lines, stamped).
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import tilemm
import tilemm.nn
from tilemm.engine import replay as replays

import harness

SHAPES = ((4, 768, 3072), (2048, 768, 3072), (8192, 768, 3072))     # (rows, in, out): a held-out MLP's


def stages(emit, shape: tuple, kernel: str, calls_timed: int) -> None:
    rows, k, n = shape
    dtype = torch.bfloat16
    x, dy = torch.randn(rows, k, device="cuda", dtype=dtype), torch.randn(rows, n, device="cuda", dtype=dtype)
    xg = x.clone().requires_grad_()
    ref = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.GELU()).to("cuda", dtype)
    layer = tilemm.nn.Linear(k, n, kernel=kernel, activation="gelu", device="cuda", dtype=dtype)
    layer.load_state_dict(ref[0].state_dict())
    w, b = layer.weight.detach(), layer.bias.detach()
    recorded, plain = [], replays.recorded

    def recording(bound, operands):      # (the route's replays, in the order of their first calls)
        replay = plain(bound, operands)
        recorded.append(replay)
        return replay
    replays.recorded = recording
    try:
        with torch.no_grad():
            layer(x)                     # the forward's first call: recorded[0]
        for _ in range(2):
            layer(xg).backward(dy)
    finally:
        replays.recorded = plain
    route = layer.products.routes.get((x.shape, x.stride(), x.dtype))
    row = {"part": "fused stages", "kernel": kernel, "mnk": [rows, n, k], "route": type(route).__name__,
           "products": {} if route is None else {name: getattr(getattr(route, name), "__module__", "?")
                                                 for name in route.PRODUCTS}}
    timings = {}

    def time_all(steps: dict) -> None:
        for name, step in steps.items():
            for _ in range(3):
                step()
            timings[name] = harness.host_us(step, calls_timed)
    with torch.no_grad():
        time_all({"torch F.linear + GELU (module call)": lambda: ref(x),
                  "torch F.linear": lambda: F.linear(x, w, b),
                  "tilemm fused Linear (module call)": lambda: layer(x),
                  "tilemm.linear (its path before the route)": lambda: layer.fused_forward(x),
                  "torch.empty (a Y)": lambda: torch.empty(rows, n, device="cuda", dtype=dtype)})
        if route is not None:
            time_all({"route (no module call)": lambda: route(x, layer.weight, layer.bias),
                      "route.forward (product)": lambda: route.forward(x, layer.weight, layer.bias, False)})
        replay = recorded[0] if recorded else None
        if replay is not None and replay.single is not None:
            harness.replay_stages(replay, (x, layer.weight, layer.bias), row, time_all)
        if route is not None:
            saved = torch.empty(rows, n, device="cuda", dtype=dtype)
            time_all({"route.gradients (dZ, 2 products, dBias)":
                      lambda: route.gradients(dy, x, w, saved, True, True, True)})
    time_all({"torch train call": lambda: ref(xg).backward(dy),
              "tilemm train call": lambda: layer(xg).backward(dy),
              "tilemm.linear train call (its path before the route)": lambda: layer.fused_forward(xg).backward(dy)})
    row["stages_us"] = {name: round(us, 2) for name, us in timings.items()}
    with torch.no_grad():              # the GPU's time of the forward, each call's CPU time hidden
        row["queued_ms"] = {"torch": harness.queued_ms(lambda: ref(x)), "tilemm": harness.queued_ms(lambda: layer(x))}
    emit(row)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=[",".join(map(str, s)) for s in SHAPES],
                    help="rows,in,out of each Linear")
    ap.add_argument("--kernel", default="tensorcore")
    ap.add_argument("--calls", type=int, default=200, help="calls a timed block")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = harness.out_folder(args.out)
    emit = harness.emitter(out / "fused_call_profile.jsonl",
                           tilemm.system.machine.stamp("PYTHONPATH=src:benchmarks python3 " + " ".join(sys.argv)))
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split(","))
        stages(emit, shape, args.kernel, args.calls)


if __name__ == "__main__":
    main()
