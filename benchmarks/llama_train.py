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
from pathlib import Path

import torch

import tilemm

# the curves' runs, each in a process of its own, and the cuBLAS workspace each sets (None: as it is)
WORKSPACES = {"torch": None, "torch-workspace": ":16:8", "torch-again": None, "tilemm": None}
DETERMINISTIC_WORKSPACE = ":4096:8"     # what torch's deterministic mode asks of cuBLAS where none is set


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["curves", "throughput", "compile"],
                    choices=["curves", "throughput", "compile"])
    ap.add_argument("--steps", type=int, default=200, help="curves: AdamW steps")
    ap.add_argument("--every", type=int, default=10, help="curves: record the loss every this many steps")
    ap.add_argument("--rounds", type=int, default=9, help="throughput: interleaved rounds")
    ap.add_argument("--reps", type=int, default=5, help="throughput: timed repeats of each phase a round")
    ap.add_argument("--compile-steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--batch", type=int, default=4, help="sequences per training step and per prefill")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence")
    ap.add_argument("--decode", type=int, default=64, help="tokens decoded with the KV cache")
    ap.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (3e-4 set this bf16 model's loss oscillating from step 40, where runs that differ in rounding part ways)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernel", default=None, help="tilemm's kernel for every Linear (default: tilemm's choice)")
    ap.add_argument("--fuse-activations", action="store_true",
                    help="swap_linears(fuse_activations=True): every Linear through tilemm.linear, the MLP's "
                         "activation in gate_proj's epilogue")
    ap.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, float32 on the CPU: a check of "
                    "the script itself")
    ap.add_argument("--float32-sums", action="store_true",
                    help="torch's 16-bit products with float32 sums throughout (allow_bf16_reduced_precision_"
                         "reduction off), as tilemm's library rung sums: both modes then compute alike")
    ap.add_argument("--deterministic", action="store_true",
                    help="curves: every run with torch.use_deterministic_algorithms(True): the runs differ only "
                         "where their products do")
    ap.add_argument("--attention", choices=["sdpa", "eager"], default=None,
                    help="transformers' attention implementation (default: its own choice, sdpa); eager's "
                         "products and softmax have deterministic forms, sdpa's fused backward may not")
    ap.add_argument("--out", default=None)
    ap.add_argument("--run", choices=list(WORKSPACES), help=argparse.SUPPRESS)     # one curves run (a child)
    args = ap.parse_args(argv)
    if args.tiny:
        args.layers, args.intermediate, args.batch, args.seq, args.decode = 2, 128, 2, 32, 8
        args.lr = 1e-3
    return args


def device_and_dtype(args):
    return ("cpu", torch.float32) if args.tiny else ("cuda", torch.bfloat16)


def build_model(args):
    """LlamaForCausalLM with random weights from args.seed, made on the device in its dtype."""
    import transformers
    chosen = {"attn_implementation": args.attention} if args.attention else {}
    if args.tiny:
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=args.intermediate,
                                          num_hidden_layers=args.layers, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256, **chosen)
    else:
        config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=args.intermediate,
                                          num_hidden_layers=args.layers, num_attention_heads=16,
                                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                                          **chosen)
    device, dtype = device_and_dtype(args)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config)
    return model.to(dtype)


def token_stream(args, vocab: int):
    """The batches of a fixed synthetic stream: sequences drawn (by a seeded generator) from 64 fixed
    random documents, so that the model has something to learn and the loss falls."""
    g = torch.Generator().manual_seed(args.seed + 1)
    documents = torch.randint(0, vocab, (64, args.seq + 1), generator=g)
    device, _ = device_and_dtype(args)
    while True:
        yield documents[torch.randint(0, 64, (args.batch,), generator=g)].to(device)


def train_losses(model, args, steps: int, step_model=None, every: int = 1) -> list:
    """[(step, loss)] of `steps` AdamW steps (the loss of every `every`-th step and the last)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    forward = step_model if step_model is not None else model
    stream = token_stream(args, model.config.vocab_size)
    losses = []
    for step in range(steps):
        tokens = next(stream)
        loss = forward(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps - 1:
            losses.append((step, loss.item()))
    return losses


def progress(message: str) -> None:
    print(f"[llama_train {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- (a) loss curves


def curves(args, emit):
    runs = {}
    for run in WORKSPACES:
        progress(f"curves: {run}, {args.steps} steps, in a process of its own")
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
            "--lr", str(args.lr), "--seed", str(args.seed)]
    argv += ["--kernel", args.kernel] if args.kernel else []
    argv += ["--fuse-activations"] if args.fuse_activations else []
    argv += ["--float32-sums"] if args.float32_sums else []
    argv += ["--deterministic"] if args.deterministic else []
    argv += ["--attention", args.attention] if args.attention else []
    return argv + (["--tiny"] if args.tiny else [])


def one_curve(args):
    if args.deterministic:        # (warn_only: an op with no deterministic form warns and runs as it is)
        torch.use_deterministic_algorithms(True, warn_only=True)
    model = build_model(args)
    if args.run == "tilemm":
        tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=args.fuse_activations)
    model.train()
    with warnings.catch_warnings(record=True) as caught:      # the ops torch ran without a deterministic form
        warnings.simplefilter("always")
        losses = train_losses(model, args, args.steps, every=args.every)
    nondeterministic = sorted({str(w.message).split(".")[0] for w in caught if "determinis" in str(w.message)})
    print(json.dumps({"run": args.run, "losses": losses, "nondeterministic": nondeterministic}))


# ---------------------------------------------------------------- (b) throughput


def synchronize(args):
    if not args.tiny:
        torch.cuda.synchronize()


def timed_once(args, call) -> float:
    """Seconds of one call, the device idle before and after it."""
    synchronize(args)
    start = time.perf_counter()
    call()
    synchronize(args)
    return time.perf_counter() - start


def decode(model, prompt, tokens: int):
    """Prefill `prompt`, then `tokens` greedy steps of one token a sequence with the KV cache."""
    out = model(input_ids=prompt, use_cache=True)
    cache, last = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(tokens):
        out = model(input_ids=last, past_key_values=cache, use_cache=True)
        cache, last = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return last


def model_phases(model, optimizer, tokens, args) -> dict:
    """{phase: a call}: a training step, a prefill of the tokens and a decode of args.decode tokens
    from an 8-token prompt (its time is the decode's steps)."""
    prompt, short = tokens[:, :args.seq], tokens[:, :8]

    def train_step():
        model.train()
        loss = model(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def prefill():
        model.eval()
        with torch.inference_mode():
            model(input_ids=prompt, use_cache=True)

    def decode_only():
        model.eval()
        with torch.inference_mode():
            decode(model, short, args.decode)
    return {"train_step": train_step, "prefill": prefill, "decode": decode_only}


def throughput(args, emit):
    """Two models from one seed, one with torch's Linears, one with tilemm's (swapped in place),
    each with its own AdamW, so that the modes take turns without swapping between calls (a swap
    starts a module's record of layouts anew: its first call plans again). Each rep times a phase
    in both modes back to back, the order alternating rep to rep: the host's speed drifts (the
    steps are bound by the CPU: Python and kernel launches), and a ratio of neighbours in time
    sees less of that drift than one of separate runs."""
    models = {"torch": build_model(args), "tilemm": build_model(args)}
    stream = token_stream(args, models["torch"].config.vocab_size)
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
    phases = {mode: model_phases(model, torch.optim.AdamW(model.parameters(), lr=args.lr), tokens, args)
              for mode, model in models.items()}
    names = list(phases["torch"])
    for mode in modes:                     # untimed: every path compiled, planned and allocated
        for call in phases[mode].values():
            call()
    emit({"part": "throughput", "layouts": layouts_seen(models["tilemm"])})
    times = {mode: {phase: [] for phase in names} for mode in modes}
    rep = 0
    for r in range(args.rounds):
        for phase in names:
            for _ in range(args.reps):
                for mode in (modes if rep % 2 == 0 else modes[::-1]):
                    times[mode][phase].append(timed_once(args, phases[mode][phase]))
                rep += 1
        progress(f"throughput: round {r + 1}/{args.rounds}: " + ", ".join(
            f"{p} {statistics.median(times['torch'][p][-args.reps:]) * 1e3:.1f} / "
            f"{statistics.median(times['tilemm'][p][-args.reps:]) * 1e3:.1f} ms" for p in names))
    medians = {mode: {p: statistics.median(v) for p, v in per.items()} for mode, per in times.items()}
    best = {mode: {p: min(v) for p, v in per.items()} for mode, per in times.items()}
    paired = {p: statistics.median(t / o for t, o in zip(times["torch"][p], times["tilemm"][p])) for p in names}
    tokens_of = {"train_step": args.batch * args.seq, "prefill": args.batch * args.seq,
                 "decode": args.batch * args.decode}
    emit({"part": "throughput", "summary": True, "rounds": args.rounds, "reps": args.reps, "batch": args.batch,
          "seq": args.seq, "decode_tokens": args.decode, "median_s": medians, "best_s": best, "times_s": times,
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
    stream = token_stream(args, 32000 if not args.tiny else 1000)
    tokens = next(stream)
    model = build_model(args)
    progress("compile: torch._dynamo.explain, torch's Linears then tilemm's")
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
    progress(f"compile: {args.compile_steps} steps eager, then compiled (tilemm's Linears)")
    runs = {}
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        model = build_model(args)
        tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=args.fuse_activations)
        model.train()
        start = time.perf_counter()
        step_model = torch.compile(model) if mode == "compiled" else None
        runs[mode] = train_losses(model, args, args.compile_steps, step_model=step_model)
        runs[mode + "_s"] = time.perf_counter() - start
        del model, step_model
    gaps = [abs(c - e) / abs(e) for (_, e), (_, c) in zip(runs["eager"], runs["compiled"])]
    emit({"part": "compile", "summary": True, "losses_eager": runs["eager"], "losses_compiled": runs["compiled"],
          "max_relative_gap": max(gaps), "seconds": {"eager": runs["eager_s"], "compiled": runs["compiled_s"]}})


# ----------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if args.float32_sums:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    if args.run:
        one_curve(args)
        return
    out = Path(os.environ.get("OUT") or args.out or "out")
    out.mkdir(parents=True, exist_ok=True)
    stamp = {**tilemm.system.machine.stamp("PYTHONPATH=src python3 " + " ".join(sys.argv)), "tiny": args.tiny,
             "layers": args.layers, "intermediate": args.intermediate, "kernel": args.kernel,
             "float32_sums": args.float32_sums, "fuse_activations": args.fuse_activations}
    try:
        import transformers
        stamp["versions"] = {**stamp["versions"], "transformers": transformers.__version__}
    except ImportError:
        raise SystemExit("llama_train.py needs transformers (pip install transformers)") from None

    def emit(record):
        line = json.dumps({**stamp, **record})
        with open(out / "llama_train.jsonl", "a") as f:
            f.write(line + "\n")
        print(line if len(line) < 400 else line[:400] + " ...", flush=True)
    for part in args.parts:
        progress(f"{part}: start")
        {"curves": curves, "throughput": throughput, "compile": compile_check}[part](args, emit)
        progress(f"{part}: done")


if __name__ == "__main__":
    main()
