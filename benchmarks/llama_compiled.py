"""llama.py's Llama under torch.compile: torch's model against tilemm's (its Linears swapped,
``swap_linears(model, kernel=..., fuse_activations=True)``: every Linear a ``tilemm::linear``
triton_op that Inductor sees into, the MLP's SiLU in gate_proj's epilogue), both compiled.

  throughput  a training step and a prefill of each compiled model, timed back to back in
              paired rounds (the order alternating rep to rep), after untimed calls that compile
              them; tilemm's / torch's as the ratio of the medians and the median of the pairs'
              ratios; then torch's weights copied into the others and each compiled graph's
              prefill logits checked against torch's (logits_gap, wrong).
  gpu_time    the GPU's time a training step and a prefill of each compiled model (torch.profiler,
              --reps calls each, --rounds times), split into the products' kernels and the rest:
              a measure that the host's speed does not move (a step's wall clock is bound by the
              CPU that queues it about as much as by the GPU, and moved by 3% from run to run).
  losses      --steps AdamW steps (50 or more) from one seed of four runs: torch eager, torch
              compiled, tilemm eager, tilemm compiled; torch compiled's gap from torch eager is
              the spread to stay within (or 1% of the loss), step by step.

    PYTHONPATH=src python3 benchmarks/llama_compiled.py --parts throughput --rounds 5
    PYTHONPATH=src python3 benchmarks/llama_compiled.py --parts losses --steps 50
    PYTHONPATH=src python3 benchmarks/llama_compiled.py --tiny --parts throughput losses  # CPU check

Options as llama.py's (--layers, --batch, --seq, --kernel, ...); --kernel defaults to
"tensorcore" here (tilemm's own program, not the library's); "default" is tilemm's default. Records: llama_compiled.jsonl in
$OUT (else --out, else ./out), each with the machine's stamp.
"""
from __future__ import annotations

import statistics
import sys

import torch

import tilemm
import tilemm.nn

import harness
from harness import llama


def parse_args(argv=None):
    ap = llama.parser(["throughput", "gpu_time", "losses"], description=__doc__.split("\n\n")[0])
    ap.set_defaults(steps=50)
    ap.add_argument("--unfused-too", action="store_true",
                    help="throughput and gpu_time: a third model, tilemm's without fused activations (swap_linears(kernel=...)): "
                         "the MLP's SiLU then left to Inductor, which fuses it into the product's consumer")
    args = llama.parsed(ap, argv)
    if args.kernel == "default":                   # tilemm's default: its table's choice, shape by shape
        args.kernel = None
    elif args.kernel is None and not args.tiny:    # (--tiny on the host: tilemm's default, the library)
        args.kernel = "tensorcore"
    return args


def models(args) -> dict:
    """{mode: (model, compiled model)} from one seed, tilemm's swapped with fused activations
    ("tilemm") and, with --unfused-too, without ("tilemm-unfused")."""
    out = {}
    for mode in ("torch", "tilemm", "tilemm-unfused")[:3 if args.unfused_too else 2]:
        model = llama.build_model(args)
        if mode != "torch":
            tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=mode == "tilemm")
        out[mode] = (model, torch.compile(model))
    return out


def compiled_phases(model, compiled, tokens, args) -> dict:
    """{phase: a call}: a training step and a prefill through the compiled model."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    def train_step():
        model.train()
        loss = compiled(input_ids=tokens[:, :args.train_tokens], labels=tokens[:, :args.train_tokens]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def prefill():
        model.eval()
        with torch.no_grad():
            compiled(input_ids=tokens[:, :args.seq])
    return {"train_step": train_step, "prefill": prefill}


def warm_phases(args, part: str, built: dict | None = None) -> dict:
    """{mode: {phase: a call}} of each compiled model (models, or those built), each call made
    twice untimed: compiled (both phases), planned, allocated."""
    built = built or models(args)
    tokens = next(llama.token_stream(args, built["torch"][0].config.vocab_size))
    phases = {mode: compiled_phases(model, compiled, tokens, args) for mode, (model, compiled) in built.items()}
    for mode, calls in phases.items():
        for _ in range(2):
            for call in calls.values():
                call()
        llama.progress(f"{part}: {mode} compiled")
    return phases


def compiled_logits_gap(args, built: dict) -> dict:
    """After the timed calls: torch's weights copied into each other model (their training steps
    have moved them apart), then a prefill of each compiled graph as timed on the same tokens:
    {mode: the largest gap of its logits from torch's, over torch's largest}."""
    model, compiled = built["torch"]
    tokens = next(llama.token_stream(args, model.config.vocab_size))[:, :args.seq]
    with torch.no_grad():
        model.eval()
        theirs = compiled(input_ids=tokens).logits.float()
        gaps = {}
        for mode, (other, other_compiled) in list(built.items())[1:]:
            other.load_state_dict(model.state_dict())
            other.eval()
            ours = other_compiled(input_ids=tokens).logits.float()
            gaps[mode] = float((ours - theirs).abs().max() / theirs.abs().max())
    return gaps


def throughput(args, emit):
    built = models(args)
    phases = warm_phases(args, "throughput", built)
    modes, names = tuple(phases), list(phases["torch"])
    times = llama.interleaved_times(args, phases, modes, names)
    medians = {mode: {p: statistics.median(v) for p, v in per.items()} for mode, per in times.items()}
    record = {"part": "throughput", "summary": True, "compiled": True, "rounds": args.rounds, "reps": args.reps,
              "median_s": medians, "times_s": times}
    for mode in modes[1:]:          # "ratio_tilemm_over_torch", "ratio_tilemm-unfused_over_torch", ...
        record[f"ratio_{mode}_over_torch"] = {p: medians["torch"][p] / medians[mode][p] for p in names}
        record["paired_ratio_median" + ("" if mode == "tilemm" else f"_{mode}")] = {
            p: statistics.median(t / o for t, o in zip(times["torch"][p], times[mode][p])) for p in names}
    # (the answers: bf16 logits of one weights' compiled graphs, torch's and each mode's)
    record["logits_gap"] = compiled_logits_gap(args, built)
    record["wrong"] = [mode for mode, gap in record["logits_gap"].items() if not gap <= LOGITS_GAP_BOUND]
    emit(record)


# The largest gap of a mode's compiled logits from torch's (over torch's largest) that passes:
# bf16 products summed in other orders through a few layers move logits by well under this
LOGITS_GAP_BOUND = 0.05

# the products' kernels by name: tilemm's fused-epilogue program, cuBLAS's (nvjet, cutlass, gemm)
PRODUCT_KERNELS = ("matmul_epilogue", "nvjet", "cutlass", "gemm")


def gpu_time(args, emit):
    if args.tiny:
        llama.progress("gpu_time: the GPU's kernels only (--tiny runs on the host): skipped")
        return
    from torch.profiler import ProfilerActivity, profile
    phases = warm_phases(args, "gpu_time")
    torch.cuda.synchronize()
    times = {mode: {phase: {"products": [], "rest": []} for phase in calls} for mode, calls in phases.items()}
    for _ in range(args.rounds):
        for phase in ("train_step", "prefill"):
            for mode, calls in phases.items():
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.reps):
                        calls[phase]()
                    torch.cuda.synchronize()
                split = {"products": 0.0, "rest": 0.0}
                for event in prof.events():
                    if event.device_type.name == "CUDA":
                        kind = "products" if any(name in event.name for name in PRODUCT_KERNELS) else "rest"
                        split[kind] += event.device_time_total / 1e6 / args.reps       # seconds a call
                for kind, seconds in split.items():
                    times[mode][phase][kind].append(seconds)
    medians = {mode: {phase: {kind: statistics.median(v) for kind, v in kinds.items()} for phase, kinds in per.items()}
               for mode, per in times.items()}
    record = {"part": "gpu_time", "summary": True, "compiled": True, "rounds": args.rounds, "reps": args.reps,
              "median_gpu_s": medians, "gpu_s": times}
    for mode in list(phases)[1:]:        # torch's GPU time over the mode's, whole and of the products
        record[f"gpu_ratio_{mode}_over_torch"] = {
            phase: {"total": sum(medians["torch"][phase].values()) / sum(medians[mode][phase].values()),
                    "products": medians["torch"][phase]["products"] / medians[mode][phase]["products"]}
            for phase in medians[mode]}
    emit(record)


def losses(args, emit):
    runs = {}
    for mode in ("torch", "tilemm"):
        for compiled in (False, True):
            torch._dynamo.reset()
            model = llama.build_model(args)
            if mode == "tilemm":
                tilemm.nn.swap_linears(model, kernel=args.kernel, fuse_activations=True)
            model.train()
            step_model = torch.compile(model) if compiled else None
            label = f"{mode} {'compiled' if compiled else 'eager'}"
            runs[label] = dict(llama.train_losses(model, args, args.steps, step_model=step_model,
                                                        every=args.every))
            llama.progress(f"losses: {label} done")
            del model, step_model
            torch.cuda.empty_cache() if not args.tiny else None
    base, other = runs["torch eager"], runs["torch compiled"]
    rows = []
    for step, loss in base.items():
        spread = abs(other[step] - loss)
        row = {"step": step, **{label: run[step] for label, run in runs.items()}, "spread": spread}
        for label in ("tilemm eager", "tilemm compiled"):
            row[f"{label} within"] = abs(runs[label][step] - loss) <= max(spread, 0.01 * abs(loss))
        rows.append(row)
    emit({"part": "losses", "summary": True, "steps": args.steps, "table": rows,
          "agree": {label: all(r[f"{label} within"] for r in rows) for label in ("tilemm eager", "tilemm compiled")},
          "max_relative_gap": {label: max(abs(runs[label][s] - base[s]) / abs(base[s]) for s in base)
                               for label in runs if label != "torch eager"}})


def main(argv=None):
    args = parse_args(argv)
    out = harness.out_folder(args.out)
    stamp = {**tilemm.system.machine.stamp("PYTHONPATH=src python3 " + " ".join(sys.argv)), "tiny": args.tiny,
             "layers": args.layers, "intermediate": args.intermediate, "kernel": args.kernel, "fuse_activations": True, "unfused_too": args.unfused_too,
             "model": args.model, "batch": args.batch, "seq": args.seq, "train_tokens": args.train_tokens}
    import transformers
    stamp["versions"] = {**stamp["versions"], "transformers": transformers.__version__}

    emit = harness.emitter(out / "llama_compiled.jsonl", stamp, show=600)
    for part in args.parts:
        {"throughput": throughput, "gpu_time": gpu_time, "losses": losses}[part](args, emit)


if __name__ == "__main__":
    main()
