"""`tilemm warmup`: its arguments and what it prints (tilemm.warmup does the work)."""
from __future__ import annotations

import dataclasses
import json
import sys

from rich.console import Console
from rich.table import Table

from tilemm.numerics.dtypes import NUMERIC

console = Console(width=None if sys.stdout.isatty() else 200)  # logs get whole rows


def add_parser(sub, names, kernel_help: str, dtype_help: str, size) -> None:
    """The `warmup` subcommand's parser; size: the CLI's parser of a positive size."""
    p = sub.add_parser("warmup", help="compile ahead of time what calls will need (numba and Triton disk caches)",
                       description="Compile, once per machine, the programs the default (and the kernels named) "
                                   "will need for products of these dtypes: each is run once on random operands "
                                   "and its answer checked; later processes load them from the disk caches. "
                                   "GPU steps are skipped, with the reason, where there is no GPU.")
    p.add_argument("--dtypes", nargs="+", choices=NUMERIC, metavar="DTYPE", default=["float32"],
                   help=f"the operands' dtypes ({dtype_help}; default float32)")
    p.add_argument("--kernels", nargs="+", choices=names, metavar="KERNEL",
                   help=f"warm these rungs too, besides the default ({kernel_help})")
    p.add_argument("--shape", nargs=3, type=size, action="append", metavar=("M", "N", "K"),
                   help="warm this product (M, K) @ (K, N) instead of the typical shapes; repeat for more")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="warm only the host's or only the GPU's programs (default: both, where present)")
    p.add_argument("--json", action="store_true", help="print each call as a JSON line, no progress bar or table")


def run(args) -> int:
    from tilemm.warmup import nothing_to_warm, plan_jobs, warmup
    jobs = plan_jobs(args.dtypes, args.kernels, args.shape, args.device)
    if not args.json and all(job.skip for job in jobs):      # no bar, no empty table: say so, and why
        console.print(nothing_to_warm(jobs, args.dtypes), highlight=False)
        return 0
    report = warmup(args.dtypes, args.kernels, args.shape, args.device, progress=not args.json)
    if args.json:
        for s in report.steps:
            print(json.dumps(dataclasses.asdict(s)))
    else:
        t = Table(title=f"tilemm warmup: {report.seconds:.1f} s")
        for col in ("device", "kernel", "dtype", "calls", "seconds"):
            t.add_column(col)
        for (device, kernel, dtype), seconds in report.compiled().items():
            calls = sum(1 for s in report.steps if s.ok and (s.device, s.kernel, s.dtype) == (device, kernel, dtype))
            t.add_row(device, kernel, dtype, str(calls), f"{seconds:.2f}")
        console.print(t)
        for s in report.skipped + report.failed:
            shape = " x ".join(map(str, s.shape))
            console.print(f"{s.device} {s.kernel} {s.dtype} {shape}: {s.status}")
    return 1 if report.failed else 0
