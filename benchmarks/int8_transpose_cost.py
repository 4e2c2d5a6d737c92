"""Issue 8 question: what does each transposition pass of the int8 product cost? Times, at 8192²,
the rung's pass that writes an int8 operand K-major (digit_planes) for A given as (K, M).T and
for B row-major, one at a time and one after the other, beside the product alone (both operands
K-major); CUDA events, medians.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_transpose_cost.py --out DIR
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds
from tilemm.ladder.tensorcore.t2_int_digits import digit_planes

import gpu_ladder  # noqa: E402  (pre-warm)
from int_vs_baselines import operand  # noqa: E402  (random full-range operands)


BLOCKS = ((64, 64, 4), (128, 128, 4), (128, 128, 8), (256, 64, 4), (64, 256, 4), (256, 256, 8))


def split_pass(x, block_r, block_c, num_warps):
    """A launch of the rung's split program writing int8 x K-major in blocks block_r x block_c,
    its answer checked first."""
    from tilemm.ladder.tensorcore.t2_int_digits_kernel import split_digits
    rows, k = x.shape
    out = torch.empty((rows, k), dtype=torch.int8, device=x.device)
    grid = (-(-rows // block_r), -(-k // block_c))

    def go():
        split_digits[grid](x, out, rows, k, k, x.stride(0), x.stride(1), NDIGITS=1, BLOCK_R=block_r,
                           BLOCK_C=block_c, num_warps=num_warps)
    out.fill_(7)
    go()
    assert torch.equal(out, x), f"split {block_r}x{block_c} changed values"
    return go


def main():
    args = gpu_ladder.out_and_n()
    n = args.n
    a_t = operand(1, n, n, "int8", "t")                   # A as (K, M).T
    b_n = operand(2, n, n, "int8", "n")                   # B row-major
    a, b_t = a_t.contiguous(), b_n.T.contiguous().T       # the same values, K-major
    for x, y in ((digit_planes(a_t, 1), a), (digit_planes(b_n.T, 1), b_n.T)):
        assert torch.equal(x[:, :n], y), "a transposition pass changed values"
    product = tilemm.plan(a, b_t, kernel="tensorcore-int", out_dtype="int32").prepare(poison=True)
    product[0]()
    assert torch.equal(torch.as_tensor(product[1]()), torch._int_mm(a, b_t)), "the product is wrong"
    launchers = {f"pass A (K,M).T {r}x{c} w{w}": split_pass(a_t, r, c, w) for r, c, w in BLOCKS}
    launchers |= {"pass A (K,M).T": lambda: digit_planes(a_t, 1),
                 "pass B row-major": lambda: digit_planes(b_n.T, 1),
                 "both passes": lambda: (digit_planes(a_t, 1), digit_planes(b_n.T, 1)),
                 "product, both K-major": product[0]}
    gpu_ladder.prewarm(4)
    times = interleaved_rounds(launchers, 4, 0.3)
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/int8_transpose_cost.py", args))
    with open(args.out / "int8_transpose_cost.jsonl", "a") as f:
        for label, t in times.items():
            med = statistics.median(t)
            print(f"{label:24} {med * 1000:8.1f} us", flush=True)
            f.write(json.dumps({"variant": label, "median_ms": med, "n": n, **stamp}) + "\n")


if __name__ == "__main__":
    main()
