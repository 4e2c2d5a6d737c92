"""A grade and the list of exercises, printed with rich (and saved as an HTML page on request)."""
from __future__ import annotations

import io
from pathlib import Path

from html import escape

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tilemm.learn.exercises import EXERCISES
from tilemm.learn.grading import Grade


def exercise_table() -> Table:
    t = Table(title="tilemm exercises: write the rung yourself, then `tilemm grade FILE`", title_justify="left")
    for col in ("rung", "exercise", "the lesson", "runs on"):
        t.add_column(col, overflow="fold")
    where = {"numba": "the CPU", "numba-cuda": "the CUDA simulator or a GPU",
             "triton": "Triton's interpreter or a GPU"}
    for e in EXERCISES:
        t.add_row(str(e.rung), e.name, e.idea, where[e.backend])
    return t


def findings_table(grade: Grade) -> Table:
    t = Table(show_header=False, box=None, padding=(0, 1), expand=True)
    t.add_column(width=2)
    t.add_column(ratio=1, overflow="fold")
    for f in grade.findings:
        mark = Text("✓", style="bold green") if f.ok else Text("✗", style="bold red")
        body = Text.assemble((f.title, "bold"), "\n", f.detail)
        if f.lesson:
            body.append("\nlesson: ", style="bold yellow")
            body.append(f.lesson)
        t.add_row(mark, body)
    return t


def counts_table(grade: Grade) -> Table | None:
    exam = grade.examination
    mine, rung, model = exam.get("counts"), exam.get("reference"), exam.get("model")
    if not mine or not rung:
        return None
    t = Table()
    for col in ("counted", "yours", "the rung", "traffic model"):
        t.add_column(col, justify="left" if col == "counted" else "right")

    def row(label, a, b, m=""):
        style = "" if a == b else "red"
        t.add_row(label, Text(str(a), style=style), str(b), m)
    for name in ("A", "B", "C"):
        row(f"loads of {name}", mine["loads"].get(name, 0), rung["loads"].get(name, 0))
    row("stores to C", mine["stores"].get("C", 0), rung["stores"].get("C", 0), f"{model['written']:.0f}")
    t.add_row("elements read", str(sum(mine["loads"].values())), str(sum(rung["loads"].values())), f"{model['read']:.0f}")
    if rung["shared_loads"] or mine["shared_loads"]:
        row("shared-memory loads", mine["shared_loads"], rung["shared_loads"])
        row("shared-memory stores", mine["shared_stores"], rung["shared_stores"])
    for name, want in sorted(rung["sectors_per_access"].items()):
        got = mine["sectors_per_access"].get(name, 0.0)
        t.add_row(f"32-byte sectors a warp's access to {name}", Text(f"{got:.2f}", style="" if abs(got - want) < 1e-9
                  else "red"), f"{want:.2f}", "")
    return t


def speed_table(grade: Grade) -> Table | Text | None:
    speed = grade.speed
    if not speed:
        return None
    if "skipped" in speed:
        return Text(f"timing: {speed['skipped']}", style="dim")
    if "failures" in speed:
        return Text("on this device it is wrong: " + "; ".join(speed["failures"]), style="red")
    if "fault" in speed:
        return Text(f"timing failed: {speed['fault']}", style="red")
    on_cpu = grade.exercise.backend == "numba"
    unit, scale = ("GFLOP/s", 1e3) if on_cpu else ("TFLOP/s", 1.0)
    t = Table()
    for col in ("", "kernel", "dtype", "ms", unit, "its time ÷ yours"):
        t.add_column(col, justify="left" if col in ("", "kernel", "dtype") else "right")
    yours = next((r["ms"] for r in speed["rows"] if r["label"] == "yours" and "ms" in r), None)
    for r in speed["rows"]:
        if "error" in r:
            t.add_row(r["label"], r["kernel"], "", "", "", r["error"][:60])
            continue
        ratio = f"{r['ms'] / yours:.2f}x" if yours and r["label"] != "yours" else ""
        t.add_row(r["label"], r["kernel"], r["dtype"], f"{r['ms']:.3f}", f"{r['tflops'] * scale:.3g}", ratio)
    return t


def grade_view(grade: Grade) -> Group:
    e = grade.exercise
    head = Text.assemble(("tilemm grade ", "bold"), (grade.file.name, "bold cyan"),
                         (f"\nexercise {e.rung} · {e.name}: {e.idea}", "dim"))
    parts = [head, findings_table(grade)]
    counts = counts_table(grade)
    if counts is not None:
        shape = " x ".join(map(str, grade.examination["count_shape"]))
        params = ", ".join(f"{k}={v}" for k, v in grade.examination.get("params", {}).items())
        where = "as plain Python" if e.backend == "numba" else "in the simulator"
        parts += [Text(f"\nMemory traffic of one launch at M x N x K = {shape}" + (f", {params}" if params else "")
                       + f", counted {where}:", style="bold"), counts]
    speed = speed_table(grade)
    if isinstance(speed, Table):
        n = grade.speed["size"]
        where = "on the CPU" if grade.exercise.backend == "numba" else "on the GPU"
        parts += [Text(f"\nTimed {where} at {n} x {n} x {n}, {grade.speed['dtype']} (median):", style="bold"), speed]
    elif speed is not None:
        parts.append(speed)
    verdict = ("[bold green]PASSED[/]: correct, and its traffic is the rung's" if grade.passed else
               "[bold red]NOT YET[/]: fix the first ✗ above, then grade again")
    parts.append(Panel(f"{verdict}  ({grade.seconds:.1f} s)", expand=False))
    return Group(*parts)


def show(renderable, html: Path | None = None, width: int | None = None, echo: bool = True,
         title: str = "tilemm") -> None:
    """Print (unless echo is False), and with html save it as a page."""
    console = Console(record=html is not None, width=width, file=None if echo else io.StringIO())
    console.print(renderable)
    if html is not None:
        Path(html).parent.mkdir(parents=True, exist_ok=True)
        page = console.export_html().replace("<head>", f"<head>\n<title>{escape(title)}</title>", 1)
        Path(html).write_text(page, encoding="utf-8")
