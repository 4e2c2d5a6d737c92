"""The Llama model the llama scripts share (llama_train.py, llama_compiled.py, linear_profile.py):
LlamaForCausalLM from transformers with random weights from a seed (no download), a fixed synthetic
token stream it can learn from, AdamW steps and their losses, and a model's phases (a training
step, a prefill, a decode with the KV cache) as calls to time. transformers is needed here only."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import harness


def parser(parts: list, description: str | None = None) -> argparse.ArgumentParser:
    """The llama scripts' options: --parts (these, all by default), the model's size, the runs'
    lengths, tilemm's kernel and --out (else $OUT, else ./out)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--parts", nargs="+", default=list(parts), choices=list(parts))
    ap.add_argument("--steps", type=int, default=200, help="curves: AdamW steps")
    ap.add_argument("--every", type=int, default=10, help="curves: record the loss every this many steps")
    ap.add_argument("--rounds", type=int, default=9, help="throughput: interleaved rounds")
    ap.add_argument("--reps", type=int, default=5, help="throughput: timed repeats of each phase a round")
    ap.add_argument("--compile-steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--batch", type=int, default=4, help="sequences per training step and per prefill")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence")
    ap.add_argument("--train-tokens", type=int, default=None,
                    help="tokens per sequence in a training step (default --seq + 1: a sequence and its next "
                         "token, so 4 x 513 = 2052 rows for the products)")
    ap.add_argument("--model", choices=["llama", "qwen2"], default="llama",
                    help="llama: LlamaForCausalLM (hidden 2048, 16 heads, 4 KV heads, vocabulary 32000); qwen2: "
                         "Qwen2ForCausalLM as Qwen2.5-3B is made (hidden 2048, q/k/v with bias, 16 heads, 2 KV "
                         "heads, vocabulary 151936), --layers and --intermediate as given")
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
    return ap


def parsed(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The arguments; --tiny sets the model's size and the runs' lengths for the CPU."""
    args = ap.parse_args(argv)
    if args.train_tokens is None:
        args.train_tokens = args.seq + 1
    if args.tiny:
        args.layers, args.intermediate, args.batch, args.seq, args.decode = 2, 128, 2, 32, 8
        args.lr, args.train_tokens = 1e-3, args.seq + 1
    return args


def device_and_dtype(args):
    return ("cpu", torch.float32) if args.tiny else ("cuda", torch.bfloat16)


def build_model(args):
    """args.model's causal LM (LlamaForCausalLM, or Qwen2ForCausalLM) with random weights from
    args.seed, made on the device in its dtype."""
    import transformers
    chosen = {"attn_implementation": args.attention} if args.attention else {}
    if args.tiny:
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=args.intermediate,
                                          num_hidden_layers=args.layers, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256, **chosen)
    elif args.model == "qwen2":
        config = transformers.Qwen2Config(hidden_size=2048, intermediate_size=args.intermediate,
                                          num_hidden_layers=args.layers, num_attention_heads=16,
                                          num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096,
                                          tie_word_embeddings=False, **chosen)
    else:
        config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=args.intermediate,
                                          num_hidden_layers=args.layers, num_attention_heads=16,
                                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                                          **chosen)
    device, dtype = device_and_dtype(args)
    torch.manual_seed(args.seed)
    made = transformers.Qwen2ForCausalLM if isinstance(config, transformers.Qwen2Config) else \
        transformers.LlamaForCausalLM
    with torch.device(device):
        model = made(config)
    return model.to(dtype)


def token_stream(args, vocab: int):
    """The batches of a fixed synthetic stream: sequences drawn (by a seeded generator) from 64 fixed
    random documents, so that the model has something to learn and the loss falls."""
    g = torch.Generator().manual_seed(args.seed + 1)
    documents = torch.randint(0, vocab, (64, max(args.seq, args.train_tokens)), generator=g)
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
        tokens = next(stream)[:, :args.train_tokens]
        loss = forward(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps - 1:
            losses.append((step, loss.item()))
    return losses


def progress(message: str) -> None:
    print(f"[llama_train {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def synchronize(args):
    if not args.tiny:
        torch.cuda.synchronize()


def timed_once(args, call) -> float:
    """Seconds of one call, the device idle before and after it."""
    return harness.timed(call, lambda: synchronize(args))[0]


def interleaved_times(args, phases: dict, modes, names) -> dict:
    """{mode: {phase: [seconds]}}: args.rounds rounds, each phase args.reps times a round, the modes
    taking turns first; a line of each round's medians (each mode's, in the order of modes)."""
    times = {mode: {phase: [] for phase in names} for mode in modes}
    rep = 0
    for r in range(args.rounds):
        for phase in names:
            for _ in range(args.reps):
                for mode in (modes if rep % 2 == 0 else modes[::-1]):
                    times[mode][phase].append(timed_once(args, phases[mode][phase]))
                rep += 1
        progress(f"throughput: round {r + 1}/{args.rounds}: " + ", ".join(
            f"{p} " + " / ".join(f"{statistics.median(times[mode][p][-args.reps:]) * 1e3:.1f}" for mode in modes)
            + " ms" for p in names))
    return times


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
    prompt, short, tokens = tokens[:, :args.seq], tokens[:, :8], tokens[:, :args.train_tokens]

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
