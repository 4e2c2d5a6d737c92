"""A Llama model from transformers (random weights, no download) trained and run with torch's
Linears and with tilemm's (tilemm.nn.swap_linears), three parts:

  curves      N AdamW steps on a fixed synthetic token stream from one seed, four runs, each in a
              process of its own: torch; torch with another cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG
              is read at CUDA's start), whose spread from the first is the noise to beat; torch
              again as it was (its spread: the run-to-run noise of torch's nondeterministic
              kernels); tilemm. The loss every 10th step, and whether tilemm's stays within that
              spread or 1%. --deterministic: every run under torch's deterministic algorithms.
  throughput  two models from one seed, torch's Linears and tilemm's (swapped in place): a
              training step, a prefill, a decode of T tokens with the KV cache, each timed in
              both modes back to back (the order alternating rep to rep), after an untimed
              call of each; tilemm's throughput / torch's as the ratio of the medians, the
              median of each pair's ratio, and the ratio of the fastest calls (the host's
              interference least).
  compile     torch.compile(model) with tilemm's Linears: torch._dynamo.explain's graph breaks (and
              torch's own model's, for reference) and the losses of a few steps against eager.

    PYTHONPATH=src python3 benchmarks/llama_train.py --parts curves --steps 200
    PYTHONPATH=src python3 benchmarks/llama_train.py --parts throughput --rounds 7
    PYTHONPATH=src python3 benchmarks/llama_train.py --parts compile --compile-steps 5
    PYTHONPATH=src python3 benchmarks/llama_train.py --tiny --parts curves throughput compile   # CPU check

Results: JSON lines in $OUT/llama_train.jsonl ($OUT, else --out, else ./out); a line of progress
per phase on stderr. transformers is needed here only (it is no dependency of tilemm).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch

import tilemm

import harness
from harness import llama

# the curves' runs, each in a process of its own, and the cuBLAS workspace each sets (None: as it is)
WORKSPACES = {"torch": None, "torch-workspace": ":16:8", "torch-again": None, "tilemm": None}
DETERMINISTIC_WORKSPACE = ":4096:8"     # what torch's deterministic mode asks of cuBLAS where none is set


# ---------------------------------------------------------------- (a) loss curves


def curves(args, emit):
    runs = {}
    for run in WORKSPACES:
        llama.progress(f"curves: {run}, {args.steps} steps, in a process of its own")
        env = dict(os.environ)
        workspace = WORKSPACES[run] or (DETERMINISTIC_WORKSPACE if args.deterministic else None)
        if workspace:
            env["CUBLAS_WORKSPACE_CONFIG"] = workspace
        command = [sys.executable, __file__, "--run", run] + child_argv(args)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"curves: the {run} run failed")
        child = json.loads(done.stdout.strip().splitlines()[-1])
        runs[run] = child["losses"]
        emit({"part": "curves", "run": run, "steps": args.steps, "losses": runs[run],
              "nondeterministic_ops": child["nondeterministic"]})
    torch_losses, other, again, ours = (dict(runs[r]) for r in WORKSPACES)
    rows = []
    for step, loss in torch_losses.items():
        spread = abs(other[step] - loss)
        gap = abs(ours[step] - loss)
        rows.append({"step": step, "torch": loss, "torch_workspace": other[step], "torch_again": again[step],
                     "tilemm": ours[step], "spread": spread, "repeat_spread": abs(again[step] - loss), "gap": gap,
                     "within": gap <= max(spread, 0.01 * abs(loss))})
    emit({"part": "curves", "summary": True, "steps": args.steps, "deterministic": args.deterministic,
          "attention": args.attention,
          "agree": all(r["within"] for r in rows), "identical": all(r["gap"] == 0 for r in rows),
          "max_gap": max(r["gap"] for r in rows), "max_spread": max(r["spread"] for r in rows),
          "max_repeat_spread": max(r["repeat_spread"] for r in rows),
          "max_relative_gap": max(r["gap"] / abs(r["torch"]) for r in rows), "table": rows})


def child_argv(args) -> list:
    argv = ["--steps", str(args.steps), "--every", str(args.every), "--layers", str(args.layers),
            "--intermediate", str(args.intermediate), "--batch", str(args.batch), "--seq", str(args.seq),
            "--train-tokens", str(args.train_tokens), "--model", args.model, "--lr", str(args.lr),
            "--seed", str(args.seed)]
    argv += ["--kernel", args.kernel] if args.kernel else []
    argv += ["--fuse-activations"] if args.fuse_activations else []
    argv += ["--float32-sums"] if args.float32_sums else []
    argv += ["--deterministic"] if args.deterministic else []
    argv += ["--attention", args.attention] if args.attention else []
    return argv + (["--tiny"] if args.tiny else [])


def one_curve(args):
    if args.deterministic:        # (warn_only: an op with no deterministic form warns and runs as it is)
        torch.use_deterministic_algorithms(True, warn_only=True)
    model = llama.build_model(args)
    if args.run == "tilemm":
        tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=args.fuse_activations)
    model.train()
    with warnings.catch_warnings(record=True) as caught:      # the ops torch ran without a deterministic form
        warnings.simplefilter("always")
        losses = llama.train_losses(model, args, args.steps, every=args.every)
    nondeterministic = sorted({str(w.message).split(".")[0] for w in caught if "determinis" in str(w.message)})
    print(json.dumps({"run": args.run, "losses": losses, "nondeterministic": nondeterministic}))


# ---------------------------------------------------------------- (b) throughput


def throughput(args, emit):
    """Two models from one seed, one with torch's Linears, one with tilemm's (swapped in place),
    each with its own AdamW, so that the modes take turns without swapping between calls (a swap
    starts a module's record of layouts anew: its first call plans again). Each rep times a phase
    in both modes back to back, the order alternating rep to rep: the host's speed drifts (the
    steps are bound by the CPU: Python and kernel launches), and a ratio of neighbours in time
    sees less of that drift than one of separate runs."""
    models = {"torch": llama.build_model(args), "tilemm": llama.build_model(args)}
    stream = llama.token_stream(args, models["torch"].config.vocab_size)
    tokens = next(stream)
    prompt = tokens[:, :args.seq]
    with torch.inference_mode():           # tilemm's logits against torch's, once
        for model in models.values():
            model.eval()
        theirs = models["torch"](input_ids=prompt).logits.float()
        tilemm.nn.swap_linears(models["tilemm"], kernel=args.kernel, fuse_activations=args.fuse_activations)
        ours = models["tilemm"](input_ids=prompt).logits.float()
    emit({"part": "throughput", "logits_max_abs_diff": float((ours - theirs).abs().max()),
          "logits_max_abs": float(theirs.abs().max())})
    del theirs, ours
    modes = ("torch", "tilemm")
    phases = {mode: llama.model_phases(model, torch.optim.AdamW(model.parameters(), lr=args.lr), tokens, args)
              for mode, model in models.items()}
    names = list(phases["torch"])
    for mode in modes:                     # untimed: every path compiled, planned and allocated
        for call in phases[mode].values():
            call()
    emit({"part": "throughput", "layouts": layouts_seen(models["tilemm"])})
    times = llama.interleaved_times(args, phases, modes, names)
    medians = {mode: {p: statistics.median(v) for p, v in per.items()} for mode, per in times.items()}
    best = {mode: {p: min(v) for p, v in per.items()} for mode, per in times.items()}
    paired = {p: statistics.median(t / o for t, o in zip(times["torch"][p], times["tilemm"][p])) for p in names}
    tokens_of = {"train_step": args.batch * args.train_tokens, "prefill": args.batch * args.seq,
                 "decode": args.batch * args.decode}
    emit({"part": "throughput", "summary": True, "rounds": args.rounds, "reps": args.reps, "batch": args.batch,
          "seq": args.seq, "train_tokens": args.train_tokens, "decode_tokens": args.decode, "median_s": medians,
          "best_s": best, "times_s": times,
          "tokens_per_s": {m: {p: tokens_of[p] / t for p, t in per.items()} for m, per in medians.items()},
          "ratio_tilemm_over_torch": {p: medians["torch"][p] / medians["tilemm"][p] for p in names},
          "paired_ratio_median": paired,
          "best_ratio": {p: best["torch"][p] / best["tilemm"][p] for p in names}})


def layouts_seen(model) -> dict:
    """What tilemm's Linears learned of their layouts in the untimed calls: how many layouts; how
    many are the library's, and of those how many call F.linear with torch's flag as it is (seen
    to sum in float32 all the same) rather than turning it off for the call; of those a backward
    has seen, how many train through torch's own nodes with no hooks (its
    backward sums in float32 under its flags as they are), through them with the flag turned off
    in backward (hooks), or through a Function (not the library's products)."""
    known = [layout for module in model.modules() if isinstance(module, tilemm.nn.Linear)
             for layout in module.products.known.values() if isinstance(layout, tilemm.torch.nn_products.Layout)]
    trained = [layout for layout in known if layout.grads is not None]
    plain = sum(1 for layout in trained if layout.grads and layout.exact_now())
    hooked = sum(1 for layout in trained if layout.grads and not layout.exact_now())
    library = [layout for layout in known if layout.linear is not None]
    flag_as_is = sum(1 for layout in library if layout.get is None or layout.get() == layout.plain_seen)
    return {"layouts": len(known), "library": len(library), "forward_flag_as_is": flag_as_is,
            "trained": len(trained), "torch_nodes": plain, "hooked": hooked, "function": len(trained) - plain - hooked}


# ---------------------------------------------------------------- (c) torch.compile


def compile_check(args, emit):
    import tilemm.torch.fused_ops, tilemm.torch.ops  # noqa: F401,E401  (register torch.ops.tilemm.*, counted below)
    stream = llama.token_stream(args, 32000 if not args.tiny else 1000)
    tokens = next(stream)
    model = llama.build_model(args)
    llama.progress("compile: torch._dynamo.explain, torch's Linears then tilemm's")
    breaks = {}
    for mode in ("torch", "tilemm"):
        if mode == "tilemm":
            tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=args.fuse_activations)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(input_ids=tokens, labels=tokens)
        nodes = sum(1 for g in explained.graphs for n in g.graph.nodes
                    if n.op == "call_function" and n.target in (torch.ops.tilemm.matmul, torch.ops.tilemm.linear,
                                                                torch.ops.tilemm.matmul.default,
                                                                torch.ops.tilemm.linear.default))
        breaks[mode] = {"graph_breaks": explained.graph_break_count, "graphs": explained.graph_count,
                        "tilemm_nodes": nodes,
                        "reasons": sorted({str(b.reason)[:200] for b in explained.break_reasons})}
    emit({"part": "compile", "explain": breaks})
    del model
    llama.progress(f"compile: {args.compile_steps} steps eager, then compiled (tilemm's Linears)")
    runs = {}
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        model = llama.build_model(args)
        tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=args.fuse_activations)
        model.train()
        start = time.perf_counter()
        step_model = torch.compile(model) if mode == "compiled" else None
        runs[mode] = llama.train_losses(model, args, args.compile_steps, step_model=step_model)
        runs[mode + "_s"] = time.perf_counter() - start
        del model, step_model
    gaps = [abs(c - e) / abs(e) for (_, e), (_, c) in zip(runs["eager"], runs["compiled"])]
    emit({"part": "compile", "summary": True, "losses_eager": runs["eager"], "losses_compiled": runs["compiled"],
          "max_relative_gap": max(gaps), "seconds": {"eager": runs["eager_s"], "compiled": runs["compiled_s"]}})


# ----------------------------------------------------------------


def main(argv=None):
    ap = llama.parser(["curves", "throughput", "compile"], description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", choices=list(WORKSPACES), help=argparse.SUPPRESS)     # one curves run (a child)
    args = llama.parsed(ap, argv)
    if args.float32_sums:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    if args.run:
        one_curve(args)
        return
    out = harness.out_folder(args.out)
    stamp = {**tilemm.system.machine.stamp("PYTHONPATH=src python3 " + " ".join(sys.argv)), "tiny": args.tiny,
             "layers": args.layers, "intermediate": args.intermediate, "kernel": args.kernel,
             "float32_sums": args.float32_sums, "fuse_activations": args.fuse_activations}
    try:
        import transformers
        stamp["versions"] = {**stamp["versions"], "transformers": transformers.__version__}
    except ImportError:
        raise SystemExit("llama_train.py needs transformers (pip install transformers)") from None

    emit = harness.emitter(out / "llama_train.jsonl", stamp)
    for part in args.parts:
        llama.progress(f"{part}: start")
        {"curves": curves, "throughput": throughput, "compile": compile_check}[part](args, emit)
        llama.progress(f"{part}: done")


if __name__ == "__main__":
    main()
