"""Fused Linear + bias + GELU, forward and forward + backward, at MLP shapes: tilemm's
fused-epilogue program (tilemm.linear, eager and inside torch.compile) against torch eager's
unfused sequence (nn.Linear then nn.GELU: cuBLAS's addmm, then the activation's own pass) and
against torch.compile's (Inductor's) output for the same module. Every variant's output and
gradients are checked against a float64 reference before it is timed; the variants are timed in
interleaved rounds.

    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --set fit
    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --set held-out
    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --quick   # tile tuning

--quick times the program's candidate configurations (epilogue_launch.CANDIDATE_CONFIGS) on the
fit shapes' three products (forward with bias + GELU and its AUX, dX, dW) and prints the winner
as EPILOGUE_CONFIGS' entry. Records: OUT/fused_linear.jsonl, each with the machine's stamp.
"""
from __future__ import annotations

import json
import math
import statistics

import torch

import tilemm
import tilemm.nn
from tilemm.engine import epilogue_launch
from tilemm.system.timing import interleaved_rounds

import harness

# (rows M = batch x tokens, out_features N, in_features K), bfloat16
SETS = {"fit": [(8192, 14336, 4096)],
        "held-out": [(4096, 11008, 4096), (16384, 5632, 2048), (2048, 14336, 4096), (8192, 3072, 768)]}
TOLERANCE = 2e-2       # relative to the reference's largest |value|; bfloat16 holds 8 bits


def operands(m: int, n: int, k: int):
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    x = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)).to(torch.bfloat16)
    b = (torch.randn(n, device="cuda", generator=gen) * 0.1).to(torch.bfloat16)
    g = torch.randn(m, n, device="cuda", generator=gen, dtype=torch.bfloat16)
    return x, w, b, g


def reference(x, w, b, g):
    """(y, dx, dw, db) in float64."""
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    y = torch.nn.functional.gelu(torch.nn.functional.linear(x64, w64, b64))
    y.backward(g.double())
    return y.detach(), x64.grad, w64.grad, b64.grad


def modules(w, b, kernel):
    """{label: module} of Linear + GELU: torch's, torch's compiled, tilemm's fused, compiled."""
    def build():
        seq = torch.nn.Sequential(torch.nn.Linear(w.shape[1], w.shape[0]), torch.nn.GELU()).cuda().bfloat16()
        with torch.no_grad():
            seq[0].weight.copy_(w)
            seq[0].bias.copy_(b)
        return seq
    torch_eager, torch_compiled = build(), build()
    fused, fused_compiled = build(), build()
    for seq in (fused, fused_compiled):
        tilemm.nn.swap_linears(seq, kernel=kernel, fuse_activations=True)
    return {"torch eager": torch_eager, "torch compiled": torch.compile(torch_compiled),
            f"tilemm {kernel}": fused, f"tilemm {kernel} compiled": torch.compile(fused_compiled)}


def relative(a, ref) -> float:
    return float((a.detach().double() - ref).abs().max() / ref.abs().max())


def checked_launchers(mods: dict, x, g, ref, backward: bool):
    """{label: launcher} of the variants whose answers are within TOLERANCE (printed with errors)."""
    launchers, errors = {}, {}
    for label, mod in mods.items():
        xx = x.detach().requires_grad_(backward)
        for p in mod.parameters():
            p.grad = None
        try:                       # a variant that fails to compile or run is reported and left out
            with torch.set_grad_enabled(backward):
                y = mod(xx)
            if backward:
                y.backward(g)
                got = (y, xx.grad, *(p.grad for p in mod.parameters()))     # (weight, bias: the Linear's)
            else:
                got = (y,)
            torch.cuda.synchronize()
        except Exception as e:
            print(f"  {label:28} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        errors[label] = max(relative(a, r) for a, r in zip(got, ref))
        ok = errors[label] <= TOLERANCE and not any(torch.isnan(a).any() for a in got)
        print(f"  {label:28} {'fwd+bwd' if backward else 'fwd':8} checked: {ok} ({errors[label]:.2e})", flush=True)
        if not ok:
            continue

        def launch(mod=mod, xx=xx):
            if backward:
                mod.zero_grad(set_to_none=True)
                xx.grad = None
                mod(xx).backward(g)
            else:
                with torch.no_grad():
                    mod(xx)
        launchers[label] = launch
    return launchers, errors


def compare(args, stamp, set_name: str, path):
    for m, n, k in SETS[set_name]:
        torch._dynamo.reset()          # each shape's modules compiled afresh (no recompile limit met)
        x, w, b, g = operands(m, n, k)
        ref = reference(x, w, b, g)
        mods = modules(w, b, args.kernel)
        for backward in (False, True):
            launchers, errors = checked_launchers(mods, x, g, ref if backward else ref[:1], backward)
            times = interleaved_rounds(launchers, args.rounds, args.per_round)
            med = {label: statistics.median(ts) for label, ts in times.items()}
            if "torch eager" not in med or "torch compiled" not in med:
                raise SystemExit("torch's own variants failed: nothing to compare with")
            flops = 2 * m * n * k * (3 if backward else 1)
            with open(path, "a") as f:
                for label, t in med.items():
                    rec = {"set": set_name, "m": m, "n": n, "k": k, "pass": "fwd+bwd" if backward else "fwd",
                           "variant": label, "median_ms": t, "tflops": flops / t / 1e9,
                           "vs_torch_eager": med["torch eager"] / t, "vs_torch_compiled": med["torch compiled"] / t,
                           "max_relative_error": errors[label], **stamp}
                    f.write(json.dumps(rec) + "\n")
                    print(f"{m}x{n}x{k} {rec['pass']:8} {label:28} {t:8.3f} ms {rec['tflops']:6.1f} TFLOP/s  "
                          f"vs eager {rec['vs_torch_eager']:.3f}  vs compiled {rec['vs_torch_compiled']:.3f}",
                          flush=True)
        del mods
        torch.cuda.empty_cache()


def tune(args, stamp, path):
    """Time each candidate configuration on the fit shapes' three products; print the winner."""
    scores = {}
    for m, n, k in SETS["fit"]:
        x, w, b, g = operands(m, n, k)
        y, aux = torch.empty(m, n, device="cuda", dtype=x.dtype), torch.empty(m, n, device="cuda", dtype=x.dtype)
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        launchers = {}
        ref = torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), w.double(), b.double()))
        ref_dx, ref_dw = g.double() @ w.double(), g.double().T @ x.double()
        for i, config in enumerate(epilogue_launch.CANDIDATE_CONFIGS):
            def launch(config=config):
                epilogue_launch.launch_epilogue(x, w.mT, y, aux, b, False, None, None, "gelu", 1.0, 0.0, config)
                epilogue_launch.launch_epilogue(g, w, dx, None, None, False, None, None, None, 1.0, 0.0, config)
                epilogue_launch.launch_epilogue(g.mT, x, dw, None, None, False, None, None, None, 1.0, 0.0, config)
            try:
                launch()
                torch.cuda.synchronize()
            except Exception as e:          # a configuration past the GPU's shared memory
                print(f"  config {i} {config}: FAILED {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            if max(relative(y, ref), relative(dx, ref_dx), relative(dw, ref_dw)) > TOLERANCE:
                print(f"  config {i} {config}: WRONG", flush=True)
                continue
            launchers[i] = launch
        del ref, ref_dx, ref_dw
        times = interleaved_rounds(launchers, args.rounds, args.per_round)
        for i, ts in times.items():
            t = statistics.median(ts)
            scores.setdefault(i, []).append(t)
            rec = {"tuning": True, "m": m, "n": n, "k": k, "config": epilogue_launch.CANDIDATE_CONFIGS[i],
                   "median_ms": t, "tflops": 6 * m * n * k / t / 1e9, **stamp}
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"  config {i} {epilogue_launch.CANDIDATE_CONFIGS[i]}: {t:.3f} ms {rec['tflops']:.1f} TFLOP/s",
                  flush=True)
    best = min(scores, key=lambda i: statistics.geometric_mean(scores[i]))
    print(f'EPILOGUE_CONFIGS["16-bit"] = {epilogue_launch.CANDIDATE_CONFIGS[best]}', flush=True)


def main():
    args = harness.arguments(n=0, set="fit", kernel="tensorcore", rounds=5, per_round=0.3, prewarm=5.0,
                                quick=False)
    if args.set not in SETS:
        raise SystemExit(f"--set: {', '.join(SETS)}, not {args.set!r}")
    stamp = harness.stamp("fused_linear.py", args)
    harness.prewarm(args.prewarm, "float32")
    path = args.out / "fused_linear.jsonl"
    if args.quick:
        tune(args, stamp, path)
    else:
        compare(args, stamp, args.set, path)


if __name__ == "__main__":
    main()
