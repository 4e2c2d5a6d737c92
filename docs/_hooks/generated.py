"""MkDocs hook: text the docs show from tilemm itself, produced at build time so it cannot drift.

A page asks for it with an HTML comment on a line of its own:

    <!-- tilemm: kernels -->               the ladder table (`tilemm kernels --markdown`)
    <!-- tilemm: ladder -->                the ladder in short: rung, kernel (a link to its page), device, seed, idea
    <!-- tilemm: explain tiled -->         `tilemm explain tiled --size 1024 --simulate 0`
    <!-- tilemm: help bench -->            `tilemm bench --help` (`help` alone: `tilemm --help`)
    <!-- tilemm: table ladder_h200 ladder_h100 -->   the first of docs/tables/ladder_h200.md,
                                           ladder_h100.md that exists (benchmarks/make_tables.py writes
                                           them from the canonical records); a note where none does
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
DIRECTIVE = re.compile(r"^<!-- tilemm: (kernels|ladder|explain [\w-]+|help(?: [\w-]+)?|table [\w-]+(?: [\w-]+)*) -->$", re.MULTILINE)
TABLES = Path(__file__).resolve().parents[1] / "tables"


def _cli():
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from tilemm import cli
    return cli


def _run(argv: list[str]) -> str:
    """What `tilemm ARGV` prints (argparse's --help ends in SystemExit)."""
    out, err = io.StringIO(), io.StringIO()
    os.environ.setdefault("COLUMNS", "100")          # argparse wraps help at the terminal's width
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = _cli().main(argv)
        except SystemExit as done:
            status = done.code
    if status:                                       # a page asks for what the CLI refuses: fail the build
        raise ValueError(f"tilemm {' '.join(argv)} exited {status}: {err.getvalue().strip()}")
    return out.getvalue().rstrip()


def _render(directive: str) -> str:
    if directive == "kernels":
        return _cli().markdown_table().strip()
    if directive == "ladder":
        return _ladder()
    words = directive.split()
    if words[0] == "table":
        for name in words[1:]:
            if (TABLES / f"{name}.md").exists():
                return (TABLES / f"{name}.md").read_text().strip()
        return f"*No canonical record yet (`benchmarks/make_tables.py` writes `docs/tables/{words[1]}.md`).*"
    if words[0] == "explain":
        argv = ["explain", words[1], "--size", "1024", "--simulate", "0"]
    else:
        argv = words[1:] + ["--help"]
    return f"```text\n$ tilemm {' '.join(argv)}\n{_run(argv)}\n```"


def _ladder() -> str:
    """The registry's ladder, one row a rung, each kernel linked to its page (ladder/rNN-name.md;
    the anchors rung 0 and the library by name)."""
    from tilemm import registry
    rows = ["| rung | kernel | device | from | idea |", "|---|---|---|---|---|"]
    for k in registry.kernels():
        page = "cublas.md" if k.name == "cublas" else f"r{k.rung:02d}-{k.name}.md"
        rung = "anchor" if k.name == "cublas" else k.rung
        rows.append(f"| {rung} | [`{k.name}`]({page}) | {k.device} | {k.seed} | {k.summary} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return DIRECTIVE.sub(lambda m: _render(m.group(1)), markdown)
