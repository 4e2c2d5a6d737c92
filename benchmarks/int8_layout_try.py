"""Issue 8 experiment: can the int8 product read an M-major A (or an N-major B) straight from
TMA tiles, instead of a transposition pass first? Times matmul_persistent on int8 (int32 sums)
with A_T / B_T against the rung (which transposes first) and torch._int_mm, 8192³.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_layout_try.py --out DIR
"""
from __future__ import annotations

import json
import statistics

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds
from tilemm.ladder import _tensorcore_support as support

import gpu_ladder  # noqa: E402
from int_vs_baselines import operand  # noqa: E402  (random full-range operands, 't' a transposed view)


def direct(a_desc, b_desc, c, n, a_t, b_t, bm=128, bn=256, bk=128, stages=4):
    return support.persistent_launch(a_desc, b_desc, c, n, n, n, A_T=a_t, B_T=b_t, INT=True, BLOCK_M=bm, BLOCK_N=bn,
                                     BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=stages)


def main():
    args = gpu_ladder.out_and_n()
    n = args.n
    cases = {layout: (operand(1, n, n, "int8", layout[0]), operand(2, n, n, "int8", layout[1]))
             for layout in ("tt", "tn", "nn", "nt")}
    gpu_ladder.prewarm(6)
    stamp = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_layout_try.py")
    records = []
    for layout, (a, b) in cases.items():
        ref = torch._int_mm(a.contiguous(), b.T.contiguous().T)
        c = {}
        launch = {"anchor": lambda a=a.contiguous(), b=b.T.contiguous().T: torch._int_mm(a, b)}
        c["rung"] = torch.empty(n, n, dtype=torch.int32, device="cuda")
        launch["rung"], res = tilemm.plan(a, b, kernel="tensorcore-int", out_dtype="int32").prepare()
        a_t = layout[0] == "t"
        b_t = layout[1] == "t"
        for stages in (4, 3):
            label = f"direct-s{stages}"
            c[label] = torch.empty(n, n, dtype=torch.int32, device="cuda")
            a_desc = (TensorDescriptor.from_tensor(a.T, [128, 128]) if a_t else TensorDescriptor.from_tensor(a, [128, 128]))
            b_desc = (TensorDescriptor.from_tensor(b.T, [256, 128]) if b_t else TensorDescriptor.from_tensor(b, [128, 256]))
            launch[label] = direct(a_desc, b_desc, c[label], n, a_t, b_t, stages=stages)
        good = {}
        for label, fn in launch.items():
            try:
                fn()
                torch.cuda.synchronize()
                got = ref if label == "anchor" else (torch.as_tensor(res()) if label == "rung" else c[label])
                ok = bool(torch.equal(got, ref))
            except Exception as e:  # noqa: BLE001
                print(layout, label, type(e).__name__, str(e)[:300], flush=True)
                ok = False
            if ok:
                good[label] = fn
            records.append({"layout": layout, "variant": label, "status": "ok" if ok else "FAILED", "m": n, "n": n,
                            "k": n, **stamp})
        times = interleaved_rounds(good, 3, 0.3)
        anchor = statistics.median(times["anchor"])
        for rec in records:
            if rec["layout"] == layout and rec["variant"] in times:
                med = statistics.median(times[rec["variant"]])
                rec.update(median_ms=med, tops=2 * n**3 / med / 1e9, vs_int_mm=anchor / med)
                print(f"{layout} {rec['variant']:12} {med:7.3f} ms {rec['tops']:7.1f} TOPS x{rec['vs_int_mm']:5.2f}",
                      flush=True)
    with open(args.out / "int8_layout_try.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
