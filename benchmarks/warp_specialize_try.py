"""Issues 8 and 9 experiments on the persistent product at 8192³: int8 -> int32 (A row-major, B
(N, K).T) against torch._int_mm, bf16 against cuBLAS, each beside the library's program.

- Triton's warp specialization (tl.range(..., warp_specialize=True) on the tile loop of the
  experimental program in this file): does a TMA-load partition apart from the tensor-core warps
  help on Hopper? (Triton 3.6 makes no partitions for 8 warps: no change, measured.)
- int8 with deeper K steps (bk 256): Triton keeps a tl.dot with an int32 accumulator synchronous
  (its pipeliner makes only float32 accumulators' wgmma asynchronous: "Rule 2.1" of
  dotCanBeProperlyAsync), so every int8 K step ends in a wait; fewer, deeper steps wait less often.
- The library's Gluon int8 program (t2_int8_gluon_kernel.py), which places its own waits, at
  several stage counts and tiles (its records' run notes say which form each run timed: without,
  then with, the loading warp of its own).
- int8-small: the same int8 operands taken to [-2, 2], to see how much of the speed is the data's
  (power: the H100 sits at its 700 W cap here).

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/warp_specialize_try.py --out DIR
"""
from __future__ import annotations

import json
import statistics

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds
from tilemm.ladder.tensorcore.t1_blocked_kernel import tile_position

import gpu_ladder  # noqa: E402  (pre-warm, the arguments)
from int_vs_baselines import operand  # noqa: E402  (random full-range operands)


@triton.jit
def ws_persistent(a_desc, b_desc, c_desc, c_ptr, M, N, K, INT: tl.constexpr, WS: tl.constexpr,
                  TMA_STORE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr):
    """One program an SM walks tiles; with WS the tile loop is warp-specialized (Triton splits
    the TMA loads into a partition of their own). A (M, K) and B^T (N, K), both K-major."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS, warp_specialize=WS):
        off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if INT:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k0])
            b = b_desc.load([off_n, k0]).T
            if INT:
                acc = tl.dot(a, b, acc, out_dtype=tl.int32)
            else:
                acc = tl.dot(a, b, acc)
        c = acc.to(c_ptr.dtype.element_ty)
        if TMA_STORE:
            c_desc.store([off_m, off_n], c)
        else:
            offs_m = off_m + tl.arange(0, BLOCK_M)
            offs_n = off_n + tl.arange(0, BLOCK_N)
            tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], c,
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def gluon_launcher(a, bt, c, block_m=128, block_n=256, block_k=128, num_warps=8, num_stages=4):
    """A launch of the library's Gluon int8 program (t2_int8_gluon_kernel.py)."""
    from tilemm.ladder.tensorcore import t2_int8_gluon_kernel as g
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    return g.launcher(g.descriptor(a, block_m, block_k), g.descriptor(bt, block_n, block_k), c, a.shape[0],
                      bt.shape[0], a.shape[1], programs, num_stages=num_stages, num_warps=num_warps)


def ws_launcher(a, bt, c, ws, tma_store, block_m=128, block_n=256, block_k=None, num_warps=8, num_stages=4):
    """A launch of ws_persistent for a (M, K) and bt (N, K), K-major, into c (M, N)."""
    block_k = block_k or (128 if a.element_size() == 1 else 64)
    m, k = a.shape
    n = bt.shape[0]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc = TensorDescriptor.from_tensor(bt, [block_n, block_k])
    c_desc = TensorDescriptor.from_tensor(c, [block_m, block_n])
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    grid = (min(programs, -(-m // block_m) * -(-n // block_n)),)

    def launch():
        ws_persistent[grid](a_desc, b_desc, c_desc, c, m, n, k, INT=a.dtype == torch.int8, WS=ws,
                            TMA_STORE=tma_store, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                            PROGRAMS=programs, num_warps=num_warps, num_stages=num_stages)
    return launch


# The experiment's programs per case: this file's Triton program (warp_specialize, tma_store,
# tiles) or the library's Gluon one (gluon=True, tiles, stages). Earlier runs' variants (ws,
# bk256-*) are in the committed records.
VARIANTS = {
    "int8": {"no-ws": dict(ws=False, tma_store=False),
             "gluon": dict(gluon=True), "gluon-s3": dict(gluon=True, num_stages=3),
             "gluon-256x128": dict(gluon=True, block_m=256, block_n=128)},
    "bfloat16": {},   # run 8's Gluon variants took a 16-bit form of the program that was not kept
}


def variants(case, n):
    """(launchers, checks, flop) of one case: the anchor, the library, and the experiment's."""
    if case.startswith("int8"):
        a, bt = operand(1, n, n, "int8", "n"), operand(2, n, n, "int8", "t").T.contiguous()
        if case == "int8-small":   # digits in [-2, 2]: does the data's range change the speed (power)?
            a, bt = a % 5 - 2, bt % 5 - 2
        want = torch._int_mm(a, bt.T)
        out = torch.int32
        anchor = lambda: torch._int_mm(a, bt.T)  # noqa: E731
        library = tilemm.plan(a, bt.T, kernel="tensorcore-int", out_dtype="int32").prepare(poison=True)
        same = torch.equal
    else:
        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.randn(n, n, generator=g, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, n, generator=g, device="cuda").to(torch.bfloat16)
        want = (a.double() @ bt.T.double())
        out = torch.bfloat16
        anchor = lambda: torch.matmul(a, bt.T)  # noqa: E731
        library = tilemm.plan(a, bt.T, kernel="tensorcore").prepare(poison=True)
        same = lambda got, ref: float((got.double() - ref).abs().max() / ref.abs().max()) < 1e-2  # noqa: E731
    library[0]()
    launchers, results = {"anchor": anchor, "library": library[0]}, {"library": library[1]}
    for label, extra in VARIANTS[case.split("-")[0]].items():
        extra = dict(extra)
        c = torch.full((n, n), -7, dtype=out, device="cuda")
        try:
            launchers[label] = (gluon_launcher if extra.pop("gluon", False) else ws_launcher)(a, bt, c, **extra)
            launchers[label]()
        except Exception as e:  # noqa: BLE001 - reported as a FAILED row
            print(f"{case} {label}: {type(e).__name__}: {str(e)[:400]}", flush=True)
            launchers.pop(label, None)
            results[label] = None
            continue
        results[label] = (lambda c=c: c)
    torch.cuda.synchronize()
    checks = {label: (r is not None and same(torch.as_tensor(r()), want)) for label, r in results.items()}
    return launchers, checks, 2 * n**3


def main():
    args = gpu_ladder.out_and_n(8192, cases=["int8", "bfloat16"], rounds=4)
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/warp_specialize_try.py", args))
    for case in args.cases:
        launchers, checks, flop = variants(case, args.n)
        gpu_ladder.prewarm(8)
        good = {k: v for k, v in launchers.items() if k == "anchor" or checks.get(k)}
        times = interleaved_rounds(good, args.rounds, 0.3)
        anchor = statistics.median(times["anchor"])
        records = []
        for label in ["anchor", *checks]:
            ok = label == "anchor" or checks[label]
            rec = {"case": case, "variant": label, "status": "ok" if ok else "FAILED", "n": args.n, **stamp}
            if label in times:
                med = statistics.median(times[label])
                rec.update(median_ms=med, tera_ops=flop / med / 1e9, vs_anchor=anchor / med)
            records.append(rec)
            print(f"{case:9} {label:13} {rec.get('median_ms', float('nan')):7.3f} ms "
                  f"{rec.get('tera_ops', float('nan')):7.1f} T/s x{rec.get('vs_anchor', float('nan')):5.3f} "
                  f"{rec['status']}", flush=True)
        with open(args.out / "warp_specialize_try.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
