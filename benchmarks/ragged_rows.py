"""Products whose rows pass a multiple of 128 by a few (4 x 513 tokens = 2052 rows), through
tilemm's fused-epilogue program (kernel="tensorcore", as a swapped model's Linears run): those
rows run apart (tile_model.sliver_rows, the default) against the product in one launch (the rule
switched off) and against torch, interleaved rounds, every answer checked against a float32
product first.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/ragged_rows.py --out OUT [--set fit held-out]

Forms: "linear" (tilemm.linear(x, W), B = W^T read K-major; torch: F.linear) and "rows" (B
row-major, as a Linear's input gradient dY @ W; tilemm.matmul_epilogue; torch: torch.mm).
Timings: "gpu" the launches alone (a CUDA graph of --calls calls, the median of its replays: what
a compiled model's graph runs), and for "linear" "module" whole calls of a tilemm.nn.Linear
(replayed launches, as a swapped model makes them) against torch.nn.Linear, in blocks between
CUDA events. Sets: "fit" the shapes the rule's constants were chosen on (a Llama's products at
2052 rows), "held-out" others. Records: ragged_rows.jsonl, one per problem and form.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import tilemm
import harness
from tilemm.engine import epilogue_launch, tile_model

SETS = {
    "fit": [(2052, 2048, 5632), (2052, 5632, 2048), (2052, 2048, 2048), (2052, 2048, 32000), (2052, 512, 2048)],
    "held-out": [(1028, 4096, 4096), (2056, 4096, 4096), (4100, 4096, 4096), (2060, 3072, 768), (3080, 2048, 8192),
                 (1040, 14336, 4096), (2064, 4096, 14336), (8200, 8192, 8192), (1030, 2048, 2048)],
}


def problem(m, n, k, form, g):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) / k ** 0.5
    if form == "linear":
        return x, w, (lambda: tilemm.linear(x, w, kernel="tensorcore")), (lambda: F.linear(x, w)), x.float() @ w.float().T
    w = w.T.contiguous()          # (K, N) row-major
    return x, w, (lambda: tilemm.matmul_epilogue(x, w, kernel="tensorcore")), (lambda: torch.mm(x, w)), x.float() @ w.float()


def rule_off(call):
    """call with the rows never cut (the product in one launch)."""
    def whole():
        rule, epilogue_launch.sliver_rows = epilogue_launch.sliver_rows, lambda *shape, **kw: 0
        try:
            return call()
        finally:
            epilogue_launch.sliver_rows = rule
    return whole


def rule_replayed(call):
    """call with the rows cut as for replayed or compiled launches (no eager launch's CPU time
    counted: the timings of the graphs)."""
    def apart():
        eager, epilogue_launch.EAGER_LAUNCH_US = epilogue_launch.EAGER_LAUNCH_US, 0.0
        try:
            return call()
        finally:
            epilogue_launch.EAGER_LAUNCH_US = eager
    return apart


def modules(x, w):
    """{label: a call of a Linear on x}: tilemm.nn.Linear (rows apart, and not) and torch's."""
    import tilemm.nn
    theirs = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        theirs.weight.copy_(w)
    ours = {label: tilemm.nn.Linear(w.shape[1], w.shape[0], bias=False, device="cuda", dtype=torch.bfloat16,
                                    kernel="tensorcore") for label in ("module apart", "module whole")}
    calls = {}
    for label, layer in ours.items():
        with torch.no_grad():
            layer.weight.copy_(w)
        call = torch.no_grad()(lambda layer=layer: layer(x))
        (rule_off(call) if label == "module whole" else call)()     # the first call records the launches
        calls[label] = call
    calls["module torch"] = torch.no_grad()(lambda: theirs(x))
    return calls


def main():
    args = harness.arguments(__doc__.split("\n\n")[0], set=["fit", "held-out"], forms=["linear", "rows"],
                             rounds=5, calls=20, prewarm=8.0)
    emit = harness.emitter(args.out / "ragged_rows.jsonl", harness.stamp("ragged_rows.py", args))
    harness.prewarm(args.prewarm)
    g = torch.Generator(device="cuda").manual_seed(0)
    summary = {}
    for name in args.set:
        for m, n, k in SETS[name]:
            rows = tile_model.sliver_rows(m, n, k)
            for form in args.forms:
                x, w, ours, theirs, ref = problem(m, n, k, form, g)
                calls = {"apart": rule_replayed(ours), "whole": rule_off(ours), "torch": theirs}
                extra = modules(x, w) if form == "linear" else {}
                wrong = []
                for label, call in {**calls, **extra}.items():
                    ok, err = harness.within(call().float(), ref.double(), 2e-2 * ref.abs().max().double())
                    if not ok:
                        wrong.append((label, err))
                times = harness.medians(harness.rounds(calls, args.rounds, lambda c: harness.graph_us(c, args.calls)))
                if extra:
                    times.update(harness.medians(harness.rounds(extra, args.rounds,
                                                                lambda c: harness.block_us(c, args.calls))))
                record = dict(set=name, m=m, n=n, k=k, form=form, rows_apart=rows, wrong=wrong,
                              **{f"{label.replace(' ', '_')}_us": round(t, 2) for label, t in times.items()},
                              apart_vs_torch=round(times["torch"] / times["apart"], 4),
                              whole_vs_torch=round(times["torch"] / times["whole"], 4))
                if extra:
                    record.update(module_apart_vs_torch=round(times["module torch"] / times["module apart"], 4),
                                  module_whole_vs_torch=round(times["module torch"] / times["module whole"], 4))
                emit(record)
                summary.setdefault((name, form), []).append(record)
    for (name, form), records in summary.items():
        cut = [r for r in records if r["rows_apart"]]
        for key in ("", "module_") if form == "linear" else ("",):
            print(f"{name:8s} {form:6s} {key or 'gpu_':7s}: where rows are cut ({len(cut)}): apart "
                  f"{harness.geomean(r[key + 'apart_vs_torch'] for r in cut):.3f}x torch, whole "
                  f"{harness.geomean(r[key + 'whole_vs_torch'] for r in cut):.3f}x; all ({len(records)}): apart "
                  f"{harness.geomean(r[key + 'apart_vs_torch'] for r in records):.3f}x")


if __name__ == "__main__":
    main()
