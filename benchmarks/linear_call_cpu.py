"""What an eager tilemm.linear call costs the CPU, beside torch's F.linear: whole calls in a loop
(bfloat16, a 2048 x 2048 weight, a bias; 16 and 2048 rows), inference (bias; bias and silu) and
training (silu, forward and backward with x, weight and bias requiring grad). Each call's answer
(Y; and dX, dW, dBias) is checked against a float32 reference, at its first call and again at
its third (a repeated call's replay: tilemm.engine.epilogue_repeats). Per call: host_us (the CPU's
microseconds, the GPU idle before the block: what a CPU-bound loop pays) and block_us (between two
CUDA events: the GPU's pace of back-to-back calls, which is the CPU's where the calls are
CPU-bound); medians over rounds in rotated order; the ratio to F.linear's host_us.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/linear_call_cpu.py --out DIR
"""
import harness

ROWS = (16, 2048)


def cases(m: int, features: int, torch, tilemm) -> dict:
    """{label: (call, check)} at m rows: check(answer) -> (ok, worst error over max |reference|)."""
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn(m, features, device="cuda", generator=g).bfloat16()
    w = (torch.randn(features, features, device="cuda", generator=g) / features ** 0.5).bfloat16()
    b = torch.randn(features, device="cuda", generator=g).bfloat16()
    grad = torch.randn(m, features, device="cuda", generator=g).bfloat16()
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
    return {
        f"m={m} tilemm.linear bias": (no_grad(lambda: tilemm.linear(x, w, b, kernel="tensorcore")),
                                      check_against(reference(None, False))),
        f"m={m} F.linear bias": (no_grad(lambda: F.linear(x, w, b)), check_against(reference(None, False))),
        f"m={m} tilemm.linear bias silu": (no_grad(lambda: tilemm_silu(x, w, b)),
                                           check_against(reference("silu", False))),
        f"m={m} F.linear bias, F.silu": (no_grad(lambda: torch_silu(x, w, b)), check_against(reference("silu", False))),
        f"m={m} tilemm.linear silu fwd+bwd": (trained(tilemm_silu, leaves), check_against(reference("silu", True))),
        f"m={m} F.linear, F.silu fwd+bwd": (trained(torch_silu, torch_leaves), check_against(reference("silu", True))),
    }


def main():
    args = harness.arguments(rounds=7, calls=100, features=2048, prewarm=5.0)
    import torch
    import tilemm
    stamp = harness.stamp("linear_call_cpu.py", args)
    emit = harness.emitter(args.out / "linear_call_cpu.jsonl", stamp)
    harness.prewarm(args.prewarm)
    for m in ROWS:
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
