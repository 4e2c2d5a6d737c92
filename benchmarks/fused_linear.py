"""Fused Linear + bias + GELU, forward and forward + backward, at MLP shapes (bfloat16): tilemm's
fused epilogue (tilemm.nn.swap_linears(fuse_activations=True): eager, and inside torch.compile)
against torch eager's unfused sequence (F.linear with its bias, then F.gelu: cuBLAS's addmm, then
the activation's own pass) and against torch.compile's (Inductor's) output for the same module.
Every variant's output (and gradients) is checked against a float32 reference (TF32 off) before
it is timed; the variants are timed in interleaved rounds.

    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --set tuning --quick
    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --set held-out --quick
    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --sweep --candidates 0 1 2 3   # TMA tiles
    PYTHONPATH=src python3 benchmarks/fused_linear.py --out OUT --overlap --rounds 3 --per-round 0.1

--quick: fewer and shorter rounds, and no compiled tilemm variant (each finishes in about 2
minutes on an H200, compiles included). --sweep times the persistent TMA program's candidate
configurations (epilogue_launch.TMA_CANDIDATES, or those numbered by --candidates: each costs
three compiles) on the tuning shapes' three products (forward with
bias + GELU and its AUX, dX, dW: the layouts a Linear's backward gives) next to the pointer
program's configuration and cuBLAS's mm, and prints the winner as EPILOGUE_CONFIGS' entry.
--overlap times the forward (bias, each activation, AUX) at 8192 x 8192 x K in the default's
big tiles and in the two programs an SM of epilogue_launch.OVERLAPPED_TILES (the tiles an
activation of several instructions takes over a short K). Records: OUT/fused_linear.jsonl
(--overlap: OUT/fused_overlap.jsonl), each with the machine's stamp.
"""
from __future__ import annotations

import math
import statistics

import torch
import torch.nn.functional as F

import tilemm
import tilemm.nn
from tilemm.engine import epilogue_launch
from tilemm.numerics import epilogue_math
from tilemm.system.timing import interleaved_rounds

import harness

# (rows M = batch x tokens, out_features N, in_features K), bfloat16; the tuning set's second shape
# has a short K, where the epilogue is a larger share of a tile's time
SETS = {"tuning": [(8192, 14336, 4096), (8192, 8192, 1024)],
        "held-out": [(8192, 3072, 768), (4096, 11008, 4096), (16384, 5632, 2048)]}
TOLERANCE = 2e-2       # relative to the reference's largest |value|; bfloat16 holds 8 bits


def operands(m: int, n: int, k: int):
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    x = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)).to(torch.bfloat16)
    b = (torch.randn(n, device="cuda", generator=gen) * 0.1).to(torch.bfloat16)
    g = torch.randn(m, n, device="cuda", generator=gen, dtype=torch.bfloat16)
    return x, w, b, g


def reference(x, w, b, g):
    """(y, dx, dw, db) in float32, TF32 off."""
    kept = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        x32, w32, b32 = (t.float().requires_grad_() for t in (x, w, b))
        y = F.gelu(F.linear(x32, w32, b32))
        y.backward(g.float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = kept
    return y.detach(), x32.grad, w32.grad, b32.grad


def modules(w, b, with_compiled_tilemm: bool):
    """{label: module} of Linear + GELU: torch's (F.linear with its bias, then F.gelu), torch's
    compiled (Inductor), tilemm's fused (eager, and compiled unless --quick)."""
    def build():
        seq = torch.nn.Sequential(torch.nn.Linear(w.shape[1], w.shape[0]), torch.nn.GELU()).cuda().bfloat16()
        with torch.no_grad():
            seq[0].weight.copy_(w)
            seq[0].bias.copy_(b)
        return seq
    fused, fused_compiled = build(), build()
    for seq in (fused, fused_compiled):
        tilemm.nn.swap_linears(seq, kernel="tensorcore", fuse_activations=True)
    mods = {"torch eager": build(), "torch compiled": torch.compile(build()), "tilemm fused": fused}
    if with_compiled_tilemm:
        mods["tilemm fused compiled"] = torch.compile(fused_compiled)
    return mods


def relative(a, ref) -> float:
    return float((a.detach().float() - ref).abs().max() / ref.abs().max())


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
            print(f"  {label:24} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        errors[label] = max(relative(a, r) for a, r in zip(got, ref))
        ok = errors[label] <= TOLERANCE and not any(torch.isnan(a).any() for a in got)
        print(f"  {label:24} {'fwd+bwd' if backward else 'fwd':8} checked: {ok} ({errors[label]:.2e})", flush=True)
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
        mods = modules(w, b, with_compiled_tilemm=not args.quick)
        for backward in (False, True):
            launchers, errors = checked_launchers(mods, x, g, ref if backward else ref[:1], backward)
            times = interleaved_rounds(launchers, args.rounds, args.per_round)
            med = {label: statistics.median(ts) for label, ts in times.items()}
            if "torch eager" not in med or "torch compiled" not in med:
                raise SystemExit("torch's own variants failed: nothing to compare with")
            flops = 2 * m * n * k * (3 if backward else 1)
            records = []
            for label, t in med.items():
                rec = {"set": set_name, "m": m, "n": n, "k": k, "pass": "fwd+bwd" if backward else "fwd",
                       "variant": label, "median_ms": t, "tflops": flops / t / 1e9,
                       "vs_torch_eager": med["torch eager"] / t, "vs_torch_compiled": med["torch compiled"] / t,
                       "max_relative_error": errors[label], **stamp}
                records.append(rec)
                print(f"{m}x{n}x{k} {rec['pass']:8} {label:24} {t:8.3f} ms {rec['tflops']:6.1f} TFLOP/s  "
                      f"vs eager {rec['vs_torch_eager']:.3f}  vs compiled {rec['vs_torch_compiled']:.3f}", flush=True)
            harness.append(path, records)
        del mods
        torch.cuda.empty_cache()


def sweep(args, stamp, path):
    """Time each TMA candidate on the tuning shapes' three products; print the winner."""
    scores = {}
    for m, n, k in SETS["tuning"]:
        x, w, b, g = operands(m, n, k)
        y, aux = torch.empty(m, n, device="cuda", dtype=x.dtype), torch.empty(m, n, device="cuda", dtype=x.dtype)
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        ref = reference(x, w, b, g)
        ref_y, ref_dx, ref_dw = ref[0], g.float() @ w.float(), g.float().T @ x.float()
        del ref
        configs = {f"tma {i}": {"tma": True, "tma_tiles": epilogue_launch.TMA_CANDIDATES[i]} for i in args.candidates}
        configs["pointers"] = {**epilogue_launch.EPILOGUE_CONFIGS["16-bit"], "tma": False}
        launchers = {}
        for label, config in configs.items():
            def launch(config=config):
                epilogue_launch.launch_epilogue(x, w.mT, y, aux, b, False, None, None, "gelu", 1.0, 0.0, config)
                epilogue_launch.launch_epilogue(g, w, dx, None, None, False, None, None, None, 1.0, 0.0, config)
                epilogue_launch.launch_epilogue(g.mT, x, dw, None, None, False, None, None, None, 1.0, 0.0, config)
            try:
                launch()
                torch.cuda.synchronize()
            except Exception as e:          # a configuration past the GPU's shared memory
                print(f"  {label} {config}: FAILED {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            errors = (relative(y, ref_y), relative(dx, ref_dx), relative(dw, ref_dw))
            if max(errors) > TOLERANCE:
                print(f"  {label} {config}: WRONG {errors}", flush=True)
                continue
            launchers[label] = launch

        def cublas():          # what the same three products cost by cuBLAS (no epilogue)
            torch.addmm(b, x, w.mT, out=y)
            torch.mm(g, w, out=dx)
            torch.mm(g.mT, x, out=dw)
        launchers["cuBLAS mm"] = cublas
        del ref_y, ref_dx, ref_dw
        times = interleaved_rounds(launchers, args.rounds, args.per_round)
        records = []
        for label, ts in times.items():
            t = statistics.median(ts)
            scores.setdefault(label, []).append(t)
            config = configs.get(label, {})
            records.append({"sweep": True, "m": m, "n": n, "k": k, "variant": label,
                            "config": config.get("tma_tiles", config), "median_ms": t,
                            "tflops": 6 * m * n * k / t / 1e9, **stamp})
            print(f"  {label:10} {config.get('tma_tiles', '')}: {t:.3f} ms {records[-1]['tflops']:.1f} TFLOP/s",
                  flush=True)
        harness.append(path, records)
    tma = [label for label in scores if label.startswith("tma")]
    if not tma:
        raise SystemExit("no TMA candidate ran")
    best = min(tma, key=lambda label: statistics.geometric_mean(scores[label]))
    print(f'EPILOGUE_CONFIGS["16-bit TMA"] = {configs[best]["tma_tiles"]}', flush=True)


OVERLAP_KS = (512, 1024, 1536, 2048, 3072, 4096)
OVERLAP_ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "relu")


def overlap(args, stamp, path):
    """--overlap: the forward's product with bias, each activation and AUX at 8192 x 8192 x K
    (the tuning set's first shape's family), in the default's big tiles and in
    epilogue_launch.OVERLAPPED_TILES (two programs an SM), interleaved, answers checked: where
    the overlapped tiles pay (the rule's OVERLAPPED_UP_TO_K and HEAVY_ACTIVATIONS)."""
    from tilemm.engine.tensorcore_launch import default_tiles
    m = n = 8192
    for k in OVERLAP_KS:
        x, w, b, _ = operands(m, n, k)
        z_ref = F.linear(x.float(), w.float(), b.float())
        y, aux = torch.empty(m, n, device="cuda", dtype=x.dtype), torch.empty(m, n, device="cuda", dtype=x.dtype)
        tiles = {"default": {**default_tiles(m, n, k), "group_m": 8}, "overlapped": epilogue_launch.OVERLAPPED_TILES}
        for activation in OVERLAP_ACTIVATIONS:
            want = epilogue_math.activate_torch(z_ref, activation)
            launchers = {}
            for label, chosen in tiles.items():
                def launch(chosen=chosen):
                    epilogue_launch.launch_epilogue(x, w.mT, y, aux, b, False, None, None, activation, 1.0, 0.0,
                                                    {"tma": True, "tma_tiles": chosen})
                y.fill_(float("nan"))
                launch()
                error = max(relative(y, want), relative(aux, z_ref))
                if error > TOLERANCE:
                    raise SystemExit(f"{label} tiles, {activation}, K = {k}: wrong ({error:.2e})")
                launchers[label] = launch
            med = {label: statistics.median(ts) for label, ts in
                   interleaved_rounds(launchers, args.rounds, args.per_round).items()}
            record = {"overlap": True, "m": m, "n": n, "k": k, "activation": activation,
                      "default_ms": med["default"], "overlapped_ms": med["overlapped"],
                      "overlapped_vs_default": med["default"] / med["overlapped"],
                      "tiles": {label: dict(chosen) for label, chosen in tiles.items()}, **stamp}
            harness.append(path, [record])
            print(f"K = {k:5} {activation:9}: default {med['default']:.3f} ms, overlapped {med['overlapped']:.3f} ms "
                  f"({record['overlapped_vs_default']:.3f}x)", flush=True)


def main():
    args = harness.arguments(set="tuning", rounds=5, per_round=0.3, prewarm=5.0, quick=False, sweep=False, overlap=False,
                             candidates=list(range(len(epilogue_launch.TMA_CANDIDATES))))
    if args.set not in SETS:
        raise SystemExit(f"--set: {', '.join(SETS)}, not {args.set!r}")
    if args.quick:
        args.rounds, args.per_round, args.prewarm = min(args.rounds, 3), min(args.per_round, 0.15), 2.0
    stamp = harness.stamp("fused_linear.py", args)
    harness.prewarm(args.prewarm, "float32")
    path = args.out / "fused_linear.jsonl"
    if args.sweep:
        sweep(args, stamp, path)
    elif args.overlap:
        overlap(args, stamp, args.out / "fused_overlap.jsonl")
    else:
        compare(args, stamp, args.set, path)


if __name__ == "__main__":
    main()
