"""What one tilemm.nn.Linear call costs the CPU, whole, against torch.nn.Linear's: a layer of a
bfloat16 (features x features) weight with a bias (and the same layer with its bias in the product's
epilogue, ``activation="identity"``), called in a loop, forward under no_grad and forward + backward
(``.sum().backward()``, whose dY is a broadcast view, and ``.backward(dY)`` with a contiguous dY),
at 16 and 2048 rows. Each answer (output and gradients) is checked against float64 first.

    PYTHONPATH=src:benchmarks python3 benchmarks/module_call_cpu.py --out DIR            # on a GPU's host
    PYTHONPATH=src:benchmarks python3 benchmarks/module_call_cpu.py --out DIR --stub     # on any host

On a GPU: the CPU's microseconds a call (a block of calls, timed until the last returns; the GPU
idle before it) and the GPU's (the same block between two CUDA events), in interleaved rounds,
medians. With --stub (any host, Triton's interpreter): the Python of tilemm's call alone, each
product's repeated call stubbed by an allocation of its result (as a replay's C): the cost of the
module's steps, its route's checks, autograd's nodes and the backward's rule, not the launches'
(this thread's CPU time a call, the least of the rounds). (torch's Linear there multiplies for real:
a reference, not a bar.)
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time


def layers(features: int, device: str, kernel: str):
    """(tilemm's Linear, torch's Linear) of one weight and bias, bfloat16."""
    import torch
    import tilemm.nn
    ours = tilemm.nn.Linear(features, features, device=device, dtype=torch.bfloat16, kernel=kernel)
    theirs = torch.nn.Linear(features, features, device=device, dtype=torch.bfloat16)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def calls_of(layer, x, xg, dy) -> dict:
    """{name: call} of the three calls timed."""
    import torch

    def forward():
        with torch.no_grad():
            return layer(x)
    return {"forward (no_grad)": forward, "forward + .sum().backward()": lambda: layer(xg).sum().backward(),
            "forward + .backward(dY)": lambda: layer(xg).backward(dy)}


def check(layer, x, dy) -> float:
    """The worst error of the output and the three gradients against float64, as a fraction of
    its bound, 2^-5 of the largest value (bfloat16's rounding of each result is 2^-8 of it;
    torch's reduced-precision split-K sums may add a few times that): AssertionError past it."""
    x64, w64, b64, dy64 = (t.detach().double() for t in (x, layer.weight, layer.bias, dy))
    xg = x.detach().clone().requires_grad_()
    layer.zero_grad()
    y = layer(xg)
    y.backward(dy)
    expected = {"y": x64 @ w64.T + b64, "dx": dy64 @ w64, "dw": dy64.T @ x64, "db": dy64.sum(0)}
    got = {"y": y, "dx": xg.grad, "dw": layer.weight.grad, "db": layer.bias.grad}
    worst = 0.0
    for name, want in expected.items():
        bound = 2 ** -5 * (want.abs().max().item() + 1e-3)
        error = (got[name].double() - want).abs().max().item()
        assert got[name].shape == want.shape and error <= bound, f"{name}: |error| {error:.3g} over {bound:.3g}"
        worst = max(worst, error / bound)
    layer.zero_grad()
    return worst


def gpu(args, device: str = "cuda") -> list:
    """A record a row count and call: the CPU's and the GPU's microseconds of tilemm's Linear, of
    the same with its bias in the product's epilogue (activation="identity": tilemm.linear's
    program, a fused route) and of torch's."""
    import torch
    import tilemm.nn
    import harness
    records = []
    for rows in args.rows:
        g = torch.Generator(device=device).manual_seed(rows)
        x = torch.randn(rows, args.features, device=device, dtype=torch.bfloat16, generator=g)
        dy = torch.randn(rows, args.features, device=device, dtype=torch.bfloat16, generator=g)
        xg = x.clone().requires_grad_()
        ours, theirs = layers(args.features, device, args.kernel)
        epilogue = tilemm.nn.Linear(args.features, args.features, device=device, dtype=torch.bfloat16,
                                    kernel=args.kernel, activation="identity")
        epilogue.load_state_dict(ours.state_dict())
        who_is = {"tilemm": ours, "tilemm_epilogue": epilogue, "torch": theirs}
        checked = {who: round(check(layer, x, dy), 3) for who, layer in who_is.items()}
        timed = {(who, name): call for who, layer in who_is.items()
                 for name, call in calls_of(layer, x, xg, dy).items()}
        cpu, block = {key: [] for key in timed}, {key: [] for key in timed}
        for _ in range(args.rounds):
            for key, call in timed.items():
                for _ in range(20):
                    call()
                cpu[key].append(harness.host_us(call, args.calls))
                block[key].append(harness.block_us(call, args.calls))
        for name in calls_of(ours, x, xg, dy):
            row = {"rows": rows, "features": args.features, "call": name, "worst_error_over_bound": checked}
            for who in who_is:
                row[f"{who}_cpu_us"] = round(statistics.median(cpu[who, name]), 2)
                row[f"{who}_gpu_block_us"] = round(statistics.median(block[who, name]), 2)
            row["cpu_ratio"] = round(row["tilemm_cpu_us"] / row["torch_cpu_us"], 3)
            row["epilogue_cpu_ratio"] = round(row["tilemm_epilogue_cpu_us"] / row["torch_cpu_us"], 3)
            records.append(row)
    return records


def stubbed_products():
    """Each product's repeated call an allocation of its C (calls.replayed's replay, and every kept
    plan's fast call): the Python around the products alone."""
    import math
    import torch
    from tilemm.plans import cache, calls

    def replay_of(c_shape, dtype):
        def replay(x, y):
            return torch.empty(c_shape, dtype=dtype)
        return replay

    def replayed(a, b, kernel, params, shape=None):
        c_shape = tuple(shape) if shape is not None else (a.shape[0], b.shape[1])
        if math.prod(c_shape) != a.shape[0] * b.shape[1]:
            return None
        return replay_of(c_shape, a.dtype)
    calls.replayed = replayed
    for plan in cache.PLANS.values():
        if getattr(plan, "shape", None) is not None and not plan.direct:
            plan.fast = replay_of(tuple(plan.shape), getattr(torch, plan.result))


def stub(args) -> list:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)           # (the backward of host tensors runs on the calling thread: all of it timed)
    records = []
    for rows in args.rows:
        x = torch.randn(rows, args.features, dtype=torch.bfloat16)
        dy = torch.randn(rows, args.features, dtype=torch.bfloat16)
        xg = x.clone().requires_grad_()
        ours, theirs = layers(args.features, "cpu", args.kernel)
        worst = check(ours, x, dy)
        for call in calls_of(ours, x, xg, dy).values():     # every product's plan made, on real operands
            call()
        stubbed_products()
        ours.products.forget()           # its routes learned again, on the stubs
        for who, layer in (("tilemm", ours), ("torch", theirs)):
            for name, call in calls_of(layer, x, xg, dy).items():
                for _ in range(50):
                    call()
                times = []
                for _ in range(args.rounds):
                    start = time.thread_time()       # (this thread's CPU time: a shared host's other load left out)
                    for _ in range(args.calls):
                        call()
                    times.append((time.thread_time() - start) / args.calls * 1e6)
                records.append({"stub": True, "who": who, "rows": rows, "features": args.features, "call": name,
                                "cpu_us": round(min(times), 2), "median_us": round(statistics.median(times), 2),
                                "worst_error_over_bound": worst if who == "tilemm" else None})
    return records


def main(argv=None):
    import harness
    ap = harness.parser(__doc__.split("\n\n")[0], out_required=False,
                        helps={"stub": "the Python alone, each product stubbed (any host)",
                               "rows": "rows of the input (--stub: 16 64)", "features": "in = out (--stub: 64)",
                               "calls": "calls a block (--stub: 2000)", "rounds": "rounds, interleaved"},
                        stub=False, rows=[16, 2048], features=2048, kernel="tensorcore", calls=300, rounds=5)
    args = harness.parse(ap, argv)
    if args.stub:             # (a CPU's products are the interpreter's: small ones, many calls)
        given = set(argv if argv is not None else sys.argv[1:])
        args.rows = args.rows if "--rows" in given else [16, 64]
        args.features = args.features if "--features" in given else 64
        args.calls = args.calls if "--calls" in given else 2000
    stamp = harness.stamp("module_call_cpu.py", args, env="PYTHONPATH=src:benchmarks")
    path = harness.out_folder(args.out) / "module_call_cpu.jsonl"
    for record in stub(args) if args.stub else gpu(args):
        harness.append(path, [{**stamp, **record}])
        print(json.dumps(record), flush=True)          # (the stamp in the file alone)


if __name__ == "__main__":
    sys.exit(main())
