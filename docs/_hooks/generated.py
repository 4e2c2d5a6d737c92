"""MkDocs hook: text the docs show from tilemm itself, produced at build time so it cannot drift.

A page asks for it with an HTML comment on a line of its own:

    <!-- tilemm: kernels -->               the ladder table (`tilemm kernels --markdown`)
    <!-- tilemm: explain tiled -->         `tilemm explain tiled --size 1024 --simulate 0`
    <!-- tilemm: help bench -->            `tilemm bench --help` (`help` alone: `tilemm --help`)
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
DIRECTIVE = re.compile(r"^<!-- tilemm: (kernels|explain [\w-]+|help(?: [\w-]+)?) -->$", re.MULTILINE)


def _cli():
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from tilemm import cli
    return cli


def _run(argv: list[str]) -> str:
    """What `tilemm ARGV` prints (argparse's --help ends in SystemExit)."""
    out = io.StringIO()
    os.environ.setdefault("COLUMNS", "100")          # argparse wraps help at the terminal's width
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        _cli().main(argv)
    return out.getvalue().rstrip()


def _render(directive: str) -> str:
    if directive == "kernels":
        return _cli().markdown_table().strip()
    words = directive.split()
    if words[0] == "explain":
        argv = ["explain", words[1], "--size", "1024", "--simulate", "0"]
    else:
        argv = words[1:] + ["--help"]
    return f"```text\n$ tilemm {' '.join(argv)}\n{_run(argv)}\n```"


def on_page_markdown(markdown: str, page, config, files) -> str:
    return DIRECTIVE.sub(lambda m: _render(m.group(1)), markdown)
