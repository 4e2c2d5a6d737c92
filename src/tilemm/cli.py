"""The `tilemm` command: kernels, info, check, bench, explain."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import machine, registry

console = Console()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tilemm", description="Tiled matrix multiplication, rung by rung.")
    sub = parser.add_subparsers(dest="command", required=True)
    names = [k.name for k in registry.kernels()]

    p = sub.add_parser("kernels", help="the ladder: names, devices, dtypes, parameters")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the table README.md carries")

    p = sub.add_parser("info", help="device, versions, which kernels can run here")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("check", help="correctness sweep against the reference")
    p.add_argument("--kernels", nargs="+", choices=names, metavar="KERNEL")
    p.add_argument("--dtypes", nargs="+")

    p = sub.add_parser("bench", help="time the kernels; --report DIR writes tables and plots")
    p.add_argument("--suite", choices=["cpu", "seeds", "ladder", "shapes"],
                   help="default: seeds where a GPU is present, else cpu")
    p.add_argument("--kernels", nargs="+", choices=names, metavar="KERNEL")
    p.add_argument("--dtypes", nargs="+")
    p.add_argument("--sizes", nargs="+", type=int, help="square sizes n (replaces the suite's)")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timing per measurement")
    p.add_argument("--skip-over", type=float, default=60.0,
                   help="skip a case predicted to take longer than this many seconds per call")
    p.add_argument("--report", type=Path, metavar="DIR")
    p.add_argument("--json", action="store_true", help="print the records as JSON lines")

    args = parser.parse_args(argv)
    return {"kernels": cmd_kernels, "info": cmd_info, "check": cmd_check, "bench": cmd_bench}[args.command](args)


def _kernel_rows():
    for k in registry.kernels():
        params = ", ".join(f"{p.name}={p.default}" + (f" in {{{','.join(map(str, p.choices))}}}" if p.choices else "")
                           for p in k.params)
        yield k, params, k.available()


def markdown_table() -> str:
    lines = ["| rung | kernel | device | dtypes (native) | parameters | from | idea |", "|---|---|---|---|---|---|---|"]
    for k, params, _ in _kernel_rows():
        lines.append(f"| {k.rung} | `{k.name}` | {k.device} | {' '.join(k.dtypes)} | {params} | {k.seed} | {k.summary} |")
    return "\n".join(lines) + "\n"


def cmd_kernels(args) -> int:
    if args.markdown:
        print(markdown_table(), end="")
        return 0
    if args.json:
        print(json.dumps([{"rung": k.rung, "name": k.name, "device": k.device, "backend": k.backend,
                           "dtypes": k.dtypes, "params": params, "seed": k.seed, "summary": k.summary,
                           "runs_here": why is None, "why_not": why} for k, params, why in _kernel_rows()], indent=1))
        return 0
    t = Table(title="The tilemm ladder")
    for col in ("rung", "kernel", "device", "dtypes", "parameters", "from", "idea", "here"):
        t.add_column(col)
    for k, params, why in _kernel_rows():
        t.add_row(str(k.rung), k.name, k.device, " ".join(k.dtypes), params, k.seed, k.summary,
                  "yes" if why is None else f"no: {why}")
    console.print(t)
    return 0


def cmd_info(args) -> int:
    info = machine.describe()
    info["kernels"] = {k.name: (why or "runs here") for k, _, why in _kernel_rows()}
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    console.print(f"[b]device[/b]: {info['device']}")
    console.print(f"[b]cpu[/b]: {info['cpu']['model']}, {info['cpu']['cores']} cores")
    g = machine.gpu()
    if g:
        console.print(f"[b]gpu[/b]: {g.name}, sm_{g.compute_capability[0]}{g.compute_capability[1]}, {g.sms} SMs, "
                      f"{g.clock_mhz:.0f} MHz, {g.memory_gb:.0f} GB, L2 {g.l2_bytes >> 20} MiB, "
                      f"{g.max_threads_per_block} threads/block, {g.max_shared_per_block >> 10} KiB static shared")
        peaks = {d: g.peak(d) for d in ("float64", "float32", "int32", "tf32", "bfloat16", "int8")}
        console.print("[b]datasheet peaks (TFLOP/s)[/b]: " + ", ".join(f"{d} {v:g}" for d, v in peaks.items() if v)
                      + f"; bandwidth {g.bandwidth_gbs()} GB/s")
    else:
        console.print("[b]gpu[/b]: none (launch limits are checked against a typical H100)")
    console.print("[b]versions[/b]: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    for name, why in info["kernels"].items():
        console.print(f"  {name:14} {why}")
    return 0


def cmd_check(args) -> int:
    from . import check
    t = Table(title="tilemm check")
    for col in ("kernel", "dtype", "cases", "result", "worst"):
        t.add_column(col)
    failed = 0
    groups: dict = {}
    for o in check.run(args.kernels, args.dtypes):
        g = groups.setdefault((o.kernel, o.dtype), [0, [], 0.0])
        g[0] += 1
        g[2] = max(g[2], o.worst)
        if not o.ok:
            g[1].append(f"{o.shape} {o.layout}: {o.message}")
    for (kernel, dtype), (count, bad, worst) in groups.items():
        failed += len(bad)
        t.add_row(kernel, dtype, str(count), "[green]ok[/green]" if not bad else f"[red]FAILED[/red] {bad[0]}",
                  f"{worst:.2g}x bound" if worst else "exact" if dtype.startswith(("int", "uint")) else "0")
    console.print(t)
    if not groups:
        console.print("[red]no kernel could run here[/red]")
        return 1
    console.print(f"{sum(g[0] for g in groups.values())} cases, {failed} failed")
    return 1 if failed else 0


def cmd_bench(args) -> int:
    from .bench import report, runner, suites
    suite = args.suite or ("seeds" if machine.gpu() else "cpu")
    ladder = registry.kernels()
    if suite == "cpu":
        cases = suites.cpu_suite(tuple(args.sizes) if args.sizes else (256, 512, 1024, 2048))
    elif suite == "seeds":
        cases = suites.seeds_suite(tuple(args.sizes) if args.sizes else None)
    elif suite == "ladder":
        cases = suites.ladder_suite(ladder, tuple(args.sizes) if args.sizes else (1024, 2048, 4096))
    else:
        cases = suites.shapes_suite([k.name for k in ladder if k.device == "cuda"])
    if args.kernels:
        cases = [c for c in cases if c.kernel in args.kernels]
    if args.dtypes:
        cases = [c for c in cases if c.dtype in args.dtypes]
    results = args.report / "results.jsonl" if args.report else None
    records = runner.run_suite(cases, suite=suite, budget_s=args.budget, skip_over_s=args.skip_over,
                               results=results, progress=not args.json)
    if args.json:
        for r in records:
            print(json.dumps(r))
    else:
        t = Table(title=f"tilemm bench --suite {suite} on {records[0]['device'] if records else '?'}")
        for col in report.COLUMNS:
            t.add_column(col)
        for r in records:
            t.add_row(*report.row(r))
        console.print(t)
    if args.report:
        page = report.write(args.report, title="tilemm bench")
        console.print(f"report: {page}")
    return 1 if any(r["status"] == "FAILED" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
