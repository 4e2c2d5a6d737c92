"""The `tilemm` command: kernels, info, check, bench, explain, warmup, learn, grade."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tilemm.system import machine
from tilemm.ladder import registry
from tilemm.tools.bench.selection import SUITES, NothingRunsHere
from tilemm.numerics.dtypes import NUMERIC
from tilemm.tools import warmup_command
from tilemm.learn import command as learn_command

console = Console(width=None if sys.stdout.isatty() else 200)  # logs get whole rows


def main(argv=None) -> int:
    """Run a `tilemm` command line; the exit code: 0 done, 1 a check or a measurement failed,
    2 the command line or the machine refused it (a one-line message), 130 interrupted."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:                     # `tilemm` alone: what it can do
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    commands = {"kernels": cmd_kernels, "info": cmd_info, "check": cmd_check, "bench": cmd_bench,
                "explain": cmd_explain, "warmup": warmup_command.run, **learn_command.COMMANDS}
    try:
        return commands[args.command](args)
    except NothingRunsHere as e:     # a line per reason, and what can run here
        print(f"tilemm {args.command}: error: " + "\n  ".join(e.lines), file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError) as e:    # refused, before any work where it can be: one line
        print(f"tilemm {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tilemm {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, (ValueError, TypeError)) else f"{type(e).__name__}: {text}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilemm", description="Tiled matrix multiplication, rung by rung.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="first steps: tilemm info; tilemm kernels; tilemm explain tiled;\n"
               "  tilemm bench --suite cpu --budget 0.3 --skip-over 2 --report out (the CPU rungs, a report in out/)\n"
               "tilemm COMMAND -h says more about each command.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = [k.name for k in registry.kernels()]
    kernel_help = "one or more of: " + ", ".join(names)
    dtype_help = "one or more of: " + ", ".join(NUMERIC)

    p = sub.add_parser("kernels", help="the ladder: names, devices, dtypes, parameters",
                       description="The ladder: each kernel's name, device, dtypes, parameters and whether it runs here.")
    p.add_argument("--json", action="store_true", help="print the ladder as JSON")
    p.add_argument("--markdown", action="store_true", help="print the table README.md carries")

    p = sub.add_parser("info", help="device, versions, which kernels can run here",
                       description="This machine: its CPU and GPU, library versions, which kernels can run here.")
    p.add_argument("--json", action="store_true", help="print it as JSON")

    p = sub.add_parser("check", help="correctness sweep against the reference",
                       description="Every kernel that can run here against the reference, over shapes and dtypes.")
    p.add_argument("--kernels", nargs="+", choices=names, metavar="KERNEL", help=f"check only these ({kernel_help})")
    p.add_argument("--dtypes", nargs="+", choices=NUMERIC, metavar="DTYPE", help=f"check only these ({dtype_help})")

    p = sub.add_parser("bench", help="time the kernels; --report DIR writes tables and plots",
                       description="Check, then time kernels. With --suite: a suite's cases (only those of the "
                                   "--kernels and --dtypes named). Without --suite but with --kernels or --dtypes: "
                                   "those kernels in those dtypes at --sizes. With neither: the default suite.")
    p.add_argument("--suite", nargs="+", choices=SUITES, metavar="SUITE",
                   help=f"one or more of: {', '.join(SUITES)} (default: seeds where a GPU is present, else cpu; "
                        "leave it out to measure the --kernels you name)")
    p.add_argument("--kernels", nargs="+", choices=names, metavar="KERNEL",
                   help=f"measure these ({kernel_help}); name numpy or cublas too for the 'vs baseline' column")
    p.add_argument("--dtypes", nargs="+", choices=NUMERIC, metavar="DTYPE",
                   help=f"measure in these ({dtype_help}); default: the suite's, or float32 where a kernel "
                        "computes it")
    p.add_argument("--sizes", nargs="+", type=_positive_size, metavar="N",
                   help="square sizes n, replacing the suite's (default without --suite: 256 512 1024 for CPU "
                        "kernels, 1024 2048 4096 with a GPU kernel)")
    p.add_argument("--param", nargs="+", default=[], metavar="NAME=VALUE",
                   help="kernel parameters, set on the kernels that have them, e.g. block_m=128 or autotune=True "
                        "(the record then carries the tuning time); one no kernel has is refused")
    p.add_argument("--budget", type=_positive_seconds, default=2.0, metavar="S",
                   help="seconds of timing per measurement (default 2)")
    p.add_argument("--skip-over", type=_positive_seconds, default=60.0, metavar="S",
                   help="estimate, not run, a case predicted to take longer than this many seconds a call "
                        "(default 60)")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="write the report into DIR: results.jsonl, results.md, index.html and plots; "
                        "a report already there is replaced when the run ends (Ctrl-C or a failure leaves it whole)")
    p.add_argument("--json", action="store_true", help="print the records as JSON lines, no table or progress")

    p = sub.add_parser("explain", help="launch shape, traffic model, roofline bound; loads counted in the simulator",
                       description="What a rung does to memory and what bounds its speed, for one problem.")
    p.add_argument("kernel", choices=names, metavar="KERNEL", help=kernel_help)
    p.add_argument("--size", type=_size, default=4096, help="square size n (default 4096)")
    p.add_argument("--shape", type=_size, nargs=3, metavar=("M", "N", "K"), help="a product (M, K) @ (K, N)")
    p.add_argument("--dtype", choices=NUMERIC, metavar="DTYPE",
                   help="one of the kernel's dtypes (`tilemm kernels` lists them); default: float32 where the "
                        "kernel computes it, else its first")
    p.add_argument("--param", nargs="+", default=[], metavar="NAME=VALUE", help="kernel parameters, e.g. tile=32")
    p.add_argument("--tile", type=int, help="shorthand for --param tile=N")
    p.add_argument("--simulate", type=_simulated_size, default=32,
                   help=f"size at which to count loads in the simulator, up to {SIMULATE_UP_TO} (0: off)")
    p.add_argument("--gpu", choices=sorted(machine.ASSUMED), default="H100",
                   help="where no GPU is here, whose limits and peaks to assume (default H100)")
    p.add_argument("--ncu", action="store_true", help="read the real DRAM bytes with Nsight Compute")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    warmup_command.add_parser(sub, names, kernel_help, dtype_help, _positive_size)
    learn_command.add_parsers(sub)
    return parser


# The simulator runs each CUDA thread as a Python thread: past this size a count takes many minutes
SIMULATE_UP_TO = 128


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _size(text: str) -> int:
    n = _integer(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n}: a size is 0 or more")
    return n


def _positive_size(text: str) -> int:
    n = _integer(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: a size is 1 or more")
    return n


def _positive_seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds above 0")
    return s


def _simulated_size(text: str) -> int:
    n = _size(text)
    if n > SIMULATE_UP_TO:
        raise argparse.ArgumentTypeError(f"{n}: the simulator counts loads at sizes up to {SIMULATE_UP_TO}")
    return n


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
    from tilemm.tools import check
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
    for k in registry.kernels():
        why = k.available()
        if why and (not args.kernels or k.name in args.kernels):
            console.print(f"skipped {k.name}: {why}")
    if not groups:
        console.print("[red]no kernel could run here[/red]")
        return 1
    console.print(f"{sum(g[0] for g in groups.values())} cases, {failed} failed")
    return 1 if failed else 0


def cmd_bench(args) -> int:
    from tilemm.tools.bench import report, runner, selection
    cases = selection.select(args.suite, args.kernels, args.dtypes, tuple(args.sizes) if args.sizes else None,
                             parse_params(args.param))
    staged = report.prepare(args.report) if args.report else None   # before any work; the last report kept
    results = staged / "results.jsonl" if staged else None
    suite = " ".join(args.suite) if args.suite else cases[0].suite
    with report.kept_on_failure(args.report, staged):
        records = runner.run_suite(cases, suite=suite, budget_s=args.budget, skip_over_s=args.skip_over,
                                   results=results, progress=not args.json)
    if args.json:
        for r in records:
            print(json.dumps(r))
    else:
        columns, rows = report.table(records)
        t = Table(title=f"tilemm bench ({suite}) on {records[0]['device']}"
                        + (" (GPU rungs simulated)" if any(r.get("emulated") for r in records) else ""))
        for col in columns:
            t.add_column(col, max_width=60 if col == "note" else None)
        for cells in rows:
            t.add_row(*cells)
        console.print(t)
    if args.report:
        report.write(staged, title=f"tilemm bench ({suite})")
        report.publish(staged, args.report)     # only now is the last report replaced
        if not args.json:
            console.print(f"report: {args.report / 'index.html'}")
    return 1 if any(r["status"] == "FAILED" for r in records) else 0


def parse_params(texts: list[str]) -> dict:
    """NAME=VALUE texts as a dict of parameters (values read as bool, None, int, or left as text)."""
    params = {}
    for text in texts:
        name, eq, value = text.partition("=")
        if not eq or not name:
            raise ValueError(f"--param {text}: write NAME=VALUE, e.g. tile=32")
        params[name] = _param_value(value)
    return params


def _param_value(text: str):
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return int(text)
    except ValueError:
        return text


def cmd_explain(args) -> int:
    from tilemm.tools import explain
    params = parse_params(args.param)
    if args.tile is not None:
        params["tile"] = args.tile
    m, n, k = args.shape or (args.size,) * 3
    dtypes = registry.get(args.kernel).dtypes
    args.dtype = args.dtype or ("float32" if "float32" in dtypes else dtypes[0])
    info = explain.explain(args.kernel, m, n, k, args.dtype, params, simulate=args.simulate or None,
                           assume_gpu=args.gpu)
    if args.ncu:
        info["ncu"] = explain.ncu_bytes(args.kernel, m, n, k, args.dtype, info["params"])
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    c = console
    c.print(f"[b]{info['kernel']}[/b] ({info['seed']}): {info['summary']}")
    where = ""
    if info["gpu_assumed"]:
        where = (f"; no GPU here: the launch limits and peaks are those of an "
                 f"{info['device'].removesuffix(' (assumed)')}")
    elif info["device"] and not info["device"].startswith("CPU"):
        where = f"; the launch limits and peaks of this {info['device']}"
    c.print(f"problem: {m} x {k} @ {k} x {n}, {args.dtype}; parameters {info['params'] or 'none'}{where}")
    if "launch" in info:
        L = info["launch"]
        c.print(f"launch: grid {L['grid'][0]} x {L['grid'][1]} = {L['blocks']} blocks of {L['block'][0]} x "
                f"{L['block'][1]} = {L['threads_per_block']} threads; {L['shared_bytes_per_block']} B shared memory "
                f"a block; {L['outputs_per_thread'][0]} x {L['outputs_per_thread'][1]} outputs a thread")
        c.print(f"limits: {L['limit']}")
    t = info["traffic"]
    if not t["minimum_bytes"]:
        c.print("traffic model: an empty product: nothing to read or write")
        return 0
    c.print(f"traffic model: {t['elements_read']:.4g} elements read, {t['elements_written']:.4g} written = "
            f"{t['bytes'] / 1e9:.4g} GB, {t['times_minimum']:.4g}x the minimum ({t['minimum_bytes'] / 1e9:.4g} GB: "
            "each input read once, C written once)")
    if info["intensity_flop_per_byte"] is not None:
        c.print(f"arithmetic intensity: {info['intensity_flop_per_byte']:.3g} FLOP per byte of modelled traffic")
    if "roofline" in info:
        r = info["roofline"]
        unit = (f" of the problem's products: {r['unit']} peak / {r['products_per_product']}"
                if r["products_per_product"] != 1 else "")
        c.print(f"roofline of the {info['device'].removesuffix(' (assumed)')} ({r['peak_tflops']:.4g} TFLOP/s{unit}, "
                f"{r['bandwidth_gbs']:g} GB/s): compute {r['compute_ms']:.3g} ms, "
                f"memory {r['memory_ms']:.3g} ms -> at best {r['bound_ms']:.3g} ms, bound by {r['bound_by']}. "
                "Caches serve many of the modelled loads, so a rung can beat its memory bound.")
    if "error" in info.get("simulated", {}):
        c.print(info["simulated"]["error"])
    elif "simulated" in info:
        s = info["simulated"]
        verdict = "[green]they agree[/green]" if s["agree"] else "[red]they differ[/red]"
        c.print(f"counted in the simulator at {' x '.join(map(str, s['size']))}: {s['counted_read']} loads "
                f"(A {s['loads_a']}, B {s['loads_b']}, C {s['loads_c']}), {s['counted_written']} stores; the model "
                f"says {s['model_read']:.0f} and {s['model_written']:.0f}: {verdict}")
    if "ncu" in info:
        c.print(f"Nsight Compute: {info['ncu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
