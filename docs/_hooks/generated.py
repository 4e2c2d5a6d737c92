"""MkDocs hook: text the docs show from tilemm itself, produced at build time so it cannot drift.

A page asks for it with an HTML comment on a line of its own:

    <!-- tilemm: kernels -->               the ladder table (`tilemm kernels --markdown`)
    <!-- tilemm: ladder -->                the ladder in short: rung, kernel (a link to its page), device, seed, idea
    <!-- tilemm: explain tiled -->         `tilemm explain tiled --size 1024 --simulate 0 --gpu H200`
    <!-- tilemm: help bench -->            `tilemm bench --help` (`help` alone: `tilemm --help`)
    <!-- tilemm: table ladder_h200 ladder_h100 -->   the first of docs/tables/ladder_h200.md,
                                           ladder_h100.md that exists (benchmarks/make_tables.py writes
                                           them from the canonical records); a note where none does
    <!-- tilemm: rows seeds_h200 seeds_h100 | rung=tiled -->   the same, only the rows whose `rung`
                                           cell (its first word, backticks dropped) is one of those
                                           named (comma-separated): a page shows its own rows
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
DIRECTIVE = re.compile(r"^<!-- tilemm: (kernels|ladder|explain [\w-]+|help(?: [\w-]+)?|table [\w-]+(?: [\w-]+)*"
                       r"|rows [\w-]+(?: [\w-]+)* \| [\w ]+=[\w,-]+) -->$", re.MULTILINE)
TABLES = Path(__file__).resolve().parents[1] / "tables"


def _cli():
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from tilemm.tools import cli
    return cli


def _run(argv: list[str]) -> str:
    """What `tilemm ARGV` prints (argparse's --help ends in SystemExit)."""
    out, err = io.StringIO(), io.StringIO()
    os.environ.setdefault("COLUMNS", "100")          # argparse wraps help at the terminal's width
    console = _cli().console
    wrap, console.soft_wrap = console.soft_wrap, True  # a printed line stays one line: the page wraps it
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = _cli().main(argv)
        except SystemExit as done:
            status = done.code
        finally:
            console.soft_wrap = wrap
    if status:                                       # a page asks for what the CLI refuses: fail the build
        raise ValueError(f"tilemm {' '.join(argv)} exited {status}: {err.getvalue().strip()}")
    return out.getvalue().rstrip()


def _render(directive: str) -> str:
    if directive == "kernels":
        return _cli().markdown_table().strip()
    if directive == "ladder":
        return _ladder()
    words = directive.split()
    if words[0] == "rows":
        names, wanted = directive.split(" | ")
        column, values = wanted.split("=")
        return _rows(_table(names.split()[1:]), column, set(values.split(",")))
    if words[0] == "table":
        return _table(words[1:])
    if words[0] == "explain":
        # the pages' measurements are an H200's: its peaks, where the docs are built without a GPU
        argv = ["explain", words[1], "--size", "1024", "--simulate", "0", "--gpu", "H200"]
    else:
        argv = words[1:] + ["--help"]
    return f"```text\n$ tilemm {' '.join(argv)}\n{_run(argv)}\n```"


def _table(names: list[str]) -> str:
    for name in names:
        if (TABLES / f"{name}.md").exists():
            return (TABLES / f"{name}.md").read_text().strip()
    return f"*No canonical record yet (`benchmarks/make_tables.py` writes `docs/tables/{names[0]}.md`).*"


def _rows(text: str, column: str, values: set[str]) -> str:
    """The table's lines, keeping of its rows those whose cell in `column` names one of `values`."""
    out, index = [], None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            index = None
            out.append(line)
        elif index is None:                      # a header: find the column
            if column not in cells:
                raise ValueError(f"the table has no column {column!r}: {cells}")
            index = cells.index(column)
            out.append(line)
        elif set(line) <= set("|-: ") or cells[index].replace("`", "").split(" ")[0] in values:
            out.append(line)
    if not any(line.startswith("|") for line in out[2:]):
        raise ValueError(f"no row of the table has {column} in {sorted(values)}")
    return "\n".join(out)


def _ladder() -> str:
    """The registry's ladder, one row a rung, each kernel linked to its page (ladder/rNN-name.md;
    the anchors rung 0 and the library, and the fp8 product program, by name)."""
    from tilemm.ladder import registry
    rows = ["| rung | kernel | device | from | idea |", "|---|---|---|---|---|"]
    for k in registry.kernels():
        page = f"{k.name}.md" if k.name in ("cublas", "scaled-fp8") else f"r{k.rung:02d}-{k.name}.md"
        rung = "anchor" if k.name == "cublas" else k.rung
        rows.append(f"| {rung} | [`{k.name}`]({page}) | {k.device} | {k.seed} | {k.summary} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return DIRECTIVE.sub(lambda m: _render(m.group(1)), markdown)
