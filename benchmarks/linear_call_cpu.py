"""What an eager tilemm.linear call costs the CPU, beside torch's F.linear: whole calls in a loop
(bfloat16, a 2048 x 2048 weight, a bias; 16 and 2048 rows), inference (bias; bias and silu) and
training (bias, and bias and silu: forward and backward with x, weight and bias requiring
grad). Each call's answer (Y; and dX, dW, dBias) is checked against a float32 reference, at its
first call and again at its third (a repeated call's replays: tilemm.torch.linear_calls). Per
call: host_us (the CPU's microseconds, the GPU idle before the block: what a CPU-bound loop pays)
and block_us (between two CUDA events: the GPU's pace of back-to-back calls, which is the CPU's
where the calls are CPU-bound); medians over rounds in rotated order; the ratio to F.linear's
host_us.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/linear_call_cpu.py --out DIR
    PYTHONPATH=src python3 benchmarks/linear_call_cpu.py --stub --out DIR        # on any host

With --stub (any host, Triton's interpreter; 16 and 64 rows of 64 features unless given): the
Python of tilemm's call alone, each fused product's repeated call stubbed by an allocation of its
result (what a replay's C launcher returns), after every answer was checked on real launches: the
cost of the checks, the keys, autograd's nodes and the backward's rule, not the launches'. Per
call, this thread's CPU microseconds (a shared host's other load left out): the least and the
median of interleaved rounds. (torch's F.linear there multiplies for real: a reference, not a bar.)
"""
import json
import os
import statistics
import sys

import harness

ROWS = (16, 2048)


def cases(m: int, features: int, torch, tilemm, device: str = "cuda") -> dict:
    """{label: (call, check)} at m rows: check(answer) -> (ok, worst error over max |reference|)."""
    F = torch.nn.functional
    g = torch.Generator(device=device).manual_seed(m)
    x = torch.randn(m, features, device=device, generator=g).bfloat16()
    w = (torch.randn(features, features, device=device, generator=g) / features ** 0.5).bfloat16()
    b = torch.randn(features, device=device, generator=g).bfloat16()
    grad = torch.randn(m, features, device=device, generator=g).bfloat16()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    torch_leaves = [t.clone().requires_grad_() for t in (x, w, b)]

    def reference(activation, train: bool):
        x32, w32, b32 = (t.float().requires_grad_() for t in (x, w, b))
        y = F.linear(x32, w32, b32)
        y = F.silu(y) if activation == "silu" else y
        if not train:
            return [y.detach()]
        y.backward(grad.float())
        return [y.detach(), x32.grad, w32.grad, b32.grad]

    def check_against(want):
        def check(got):
            worst = 0.0
            for g_, r in zip(got, want):
                ok, rel = harness.within(g_, r.double(), 2e-2 * float(r.abs().max()))
                if not ok:
                    return False, rel
                worst = max(worst, rel)
            return True, worst
        return check

    def trained(forward, params):
        def call():
            for p in params:
                p.grad = None
            y = forward(*params)
            y.backward(grad)
            return [y.detach(), *(p.grad for p in params)]
        return call

    def no_grad(call):
        def run():
            with torch.no_grad():
                return [call()]
        return run

    def tilemm_silu(x, w, b):
        return tilemm.linear(x, w, b, "silu", kernel="tensorcore")

    def torch_silu(x, w, b):
        return F.silu(F.linear(x, w, b))

    def tilemm_bias(x, w, b):
        return tilemm.linear(x, w, b, kernel="tensorcore")
    return {
        f"m={m} tilemm.linear bias": (no_grad(lambda: tilemm.linear(x, w, b, kernel="tensorcore")),
                                      check_against(reference(None, False))),
        f"m={m} F.linear bias": (no_grad(lambda: F.linear(x, w, b)), check_against(reference(None, False))),
        f"m={m} tilemm.linear bias silu": (no_grad(lambda: tilemm_silu(x, w, b)),
                                           check_against(reference("silu", False))),
        f"m={m} F.linear bias, F.silu": (no_grad(lambda: torch_silu(x, w, b)), check_against(reference("silu", False))),
        f"m={m} tilemm.linear silu fwd+bwd": (trained(tilemm_silu, leaves), check_against(reference("silu", True))),
        f"m={m} F.linear, F.silu fwd+bwd": (trained(torch_silu, torch_leaves), check_against(reference("silu", True))),
        f"m={m} tilemm.linear bias fwd+bwd": (trained(tilemm_bias, leaves), check_against(reference(None, True))),
        f"m={m} F.linear bias fwd+bwd": (trained(F.linear, torch_leaves), check_against(reference(None, True))),
    }


def stub_launches(torch) -> None:
    """Each fused product's launch recorded from here on a no-op, and its replay's repeated call
    an allocation of its result (tilemm.engine.epilogue_launch.bound_epilogue,
    tilemm.engine.replay.recorded); the keys kept so far forgotten, so that they are learned again
    on the stubs."""
    from types import SimpleNamespace
    from tilemm.engine import epilogue_launch, epilogue_repeats, replay
    from tilemm.torch import linear_calls

    def bound_epilogue(*arguments):
        return lambda: None

    def recorded(bound, operands):
        c = operands[-1]
        shape, dtype, device = tuple(c.shape), c.dtype, c.device

        def quick(*inputs):
            return torch.empty(shape, dtype=dtype, device=device)
        return SimpleNamespace(quick=quick, reuses_memory=False)
    epilogue_launch.bound_epilogue, replay.recorded = bound_epilogue, recorded
    linear_calls.release()
    epilogue_repeats.release()


def stub(args, emit) -> None:
    """The Python of tilemm's calls, their launches stubbed (the module's docstring)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import tilemm
    torch.set_num_threads(1)         # (the backward of host tensors runs on the calling thread: all of it timed)
    made = {m: cases(m, args.features, torch, tilemm, device="cpu") for m in args.rows}
    for m, calls in made.items():        # each answer checked on real launches: a key's first and third call
        for label, (call, check) in calls.items():
            for _ in range(3):
                ok, worst = check(call())
                assert ok, f"{label}: error {worst:.3g} of the reference's largest value"
    stub_launches(torch)
    timed = {label: call for calls in made.values() for label, (call, _) in calls.items()}
    times = harness.stub_rounds(timed, args.calls, args.rounds)
    for label, found in times.items():
        emit({"stub": True, "case": label, "features": args.features, "cpu_us": round(min(found), 2),
              "median_us": round(statistics.median(found), 2)})


def main():
    ap = harness.parser(__doc__.split("\n\n")[0], out_required=False,
                        helps={"stub": "the Python alone, each launch stubbed (any host)",
                               "rows": "rows of the input (--stub: 16 64)", "features": "in = out (--stub: 64)",
                               "calls": "calls a block (--stub: 400)", "rounds": "rounds, interleaved (--stub: 9)"},
                        rounds=7, calls=100, features=2048, prewarm=5.0, stub=False, rows=list(ROWS))
    args = harness.parse(ap)
    out = harness.out_folder(args.out)
    if args.stub:             # (a host's products are the interpreter's: small ones)
        given = {a.split("=")[0] for a in sys.argv[1:]}
        args.rows = args.rows if "--rows" in given else [16, 64]
        args.features = args.features if "--features" in given else 64
        args.calls = args.calls if "--calls" in given else 400
        args.rounds = args.rounds if "--rounds" in given else 9
        stamp = harness.stamp("linear_call_cpu.py", args, env="PYTHONPATH=src")

        def emit(record):
            harness.append(out / "linear_call_cpu.jsonl", [{**stamp, **record}])
            print(json.dumps(record), flush=True)          # (the stamp in the file alone)
        return stub(args, emit)
    import torch
    import tilemm
    stamp = harness.stamp("linear_call_cpu.py", args)
    emit = harness.emitter(out / "linear_call_cpu.jsonl", stamp)
    harness.prewarm(args.prewarm)
    for m in args.rows:
        made = cases(m, args.features, torch, tilemm)
        calls = {label: call for label, (call, _) in made.items()}
        first, first_outcomes = harness.checked(calls, lambda label, answer: made[label][1](answer))
        for call in first.values():         # the second call records the launch: the third on replay it
            call()
        good, outcomes = harness.checked(first, lambda label, answer: made[label][1](answer))   # (replayed)
        outcomes = {**first_outcomes, **outcomes}
        host = harness.medians(harness.rounds(good, args.rounds, lambda call: harness.host_us(call, args.calls)))
        block = harness.medians(harness.rounds(good, args.rounds, lambda call: harness.block_us(call, args.calls)))
        for label, outcome in outcomes.items():
            theirs = label.replace("tilemm.linear bias silu", "F.linear bias, F.silu").replace(
                "tilemm.linear silu", "F.linear, F.silu").replace("tilemm.linear", "F.linear")
            ratio = host[label] / host[theirs] if label in host and theirs in host and theirs != label else None
            emit({"case": label, "rows": m, "features": args.features, "ok": outcome.ok, "error": outcome.value,
                  "host_us": host.get(label), "block_us": block.get(label),
                  "host_vs_torch": None if ratio is None else round(ratio, 3)})


if __name__ == "__main__":
    main()
