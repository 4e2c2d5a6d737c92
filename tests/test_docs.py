"""The README and the docs site stay in step with the code: the README's ladder table is the
registry's, the docs build with `mkdocs build --strict` (a broken link, reference or include fails),
and every Python block of the docs that needs no GPU runs as written."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilemm.cli import markdown_table

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
GPU_MARK = "# needs a CUDA GPU"


def test_readme_table_matches_registry():
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- kernels:begin -->\n", 1)[1].split("<!-- kernels:end -->", 1)[0]
    assert table.strip() == markdown_table().strip(), "run: tilemm kernels --markdown, paste into README.md"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (pip install '.[docs]')")
def test_docs_build_strict(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "ladder" / "r06-tiled" / "index.html").exists()
    tiled = (tmp_path / "site" / "ladder" / "r06-tiled" / "index.html").read_text()
    assert "syncthreads" in tiled                # the kernel's code, included from its source file
    assert "traffic model:" in tiled             # tilemm explain's output, produced at build time


def _blocks():
    for page in sorted(DOCS.rglob("*.md")):
        if "tables" in page.parts:
            continue
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)):
            if block.startswith("--8<--"):          # code included from a source file, not an example
                continue
            marks = [pytest.mark.gpu] if block.startswith(GPU_MARK) else []
            yield pytest.param(block, id=f"{page.relative_to(DOCS)}:{i}", marks=marks)


@pytest.mark.parametrize("block", list(_blocks()))
def test_docs_block_runs(block, capsys, monkeypatch):
    torchrun = "run under torchrun" in block.splitlines()[0]
    if torchrun:                      # as torchrun would start it, as a world of one process
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
            monkeypatch.setenv(name, value)
    try:
        exec(compile(block, "<docs>", "exec"), {"__name__": "__docs__"})
    finally:
        if torchrun:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()


HISTORY = re.compile(r"\bsession \d+|\bround \d+\b|\bissue #?\d+|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
                     r"|nvidia-h\d00-x\d", re.I)


def test_docs_carry_no_history_outside_the_changelog():
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}"
             for page in [ROOT / "README.md", *DOCS.rglob("*.md")] if page.name != "changelog.md"
             for m in HISTORY.finditer(page.read_text())]
    assert not found, found
