"""What the benchmarks that tune a rung's tiles share: their arguments (--out, --quick, the rounds)
and the pre-warm that brings the GPU's clocks up before the first round."""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def tuning_arguments(rounds: int = 3, per_round: float = 0.15, prewarm: float = 8.0) -> argparse.Namespace:
    """--out DIR (made), --quick (the tuning set over the tile grid only), --rounds, --per-round, --prewarm."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="the tuning set over CONFIGS only (~2 min)")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--per-round", type=float, default=per_round)
    ap.add_argument("--prewarm", type=float, default=prewarm)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def prewarm(seconds: float) -> None:
    """bf16 8192³ products for `seconds`: the clocks up (and at the power cap) before the first round."""
    import torch
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        x @ x
        torch.cuda.synchronize()
