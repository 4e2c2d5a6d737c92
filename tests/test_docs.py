"""The README and the docs site stay in step with the code: the README's ladder table is the
registry's, the docs build with `mkdocs build --strict` (a broken link, reference or include fails),
and every Python block of the docs that needs no GPU runs as written."""
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tilemm.tools.cli import markdown_table

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
GPU_MARK = "# needs a CUDA GPU"


def test_readme_table_matches_registry():
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- kernels:begin -->\n", 1)[1].split("<!-- kernels:end -->", 1)[0]
    assert table.strip() == markdown_table().strip(), "run: tilemm kernels --markdown, paste into README.md"


needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                 reason="mkdocs is not installed (pip install '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The docs built once with `mkdocs build --strict` (a broken link, reference or include fails)."""
    where = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(where)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return where


@needs_mkdocs
def test_docs_build_strict(site):
    assert (site / "ladder" / "r06-tiled" / "index.html").exists()
    tiled = (site / "ladder" / "r06-tiled" / "index.html").read_text()
    assert "syncthreads" in tiled                # the kernel's code, included from its source file
    assert "traffic model:" in tiled             # tilemm explain's output, produced at build time


RUNG_PAGES = sorted(p.stem for p in (DOCS / "ladder").glob("*.md") if p.stem != "index")


def test_every_rung_has_a_page():
    assert sorted(int(p[1:3]) for p in RUNG_PAGES if re.match(r"r\d\d-", p)) == list(range(17))


@needs_mkdocs
@pytest.mark.parametrize("page", RUNG_PAGES)
def test_every_rung_page_shows_a_figure(site, page):
    """Each rung's page holds at least one image, and each image it links is in the built site."""
    html = site / "ladder" / page / "index.html"
    images = re.findall(r'<img[^>]* src="([^"]+)"', html.read_text())
    assert images, f"{page}: no figure"
    for src in images:
        assert (html.parent / src).resolve().is_file(), f"{page}: {src} is missing"


def _tables(html: str) -> list[str]:
    """Each table of a page as the text of its header and first two rows (enough to recognise it)."""
    found = []
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[:3]
        found.append(" / ".join(" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows))
    return found


@needs_mkdocs
def test_no_table_is_on_two_pages(site):
    """A table of figures lives on one page; the others link to it (or show their own rows)."""
    where: dict[str, list[str]] = {}
    for html in sorted(site.rglob("index.html")):
        for key in set(_tables(html.read_text())):
            where.setdefault(key, []).append(str(html.parent.relative_to(site)))
    repeated = {key[:120]: pages for key, pages in where.items() if len(pages) > 1}
    assert not repeated, repeated


@needs_mkdocs
def test_the_glossary_is_built_and_the_tensor_core_rungs_link_to_it(site):
    assert (site / "glossary" / "index.html").exists()
    for page in ("r10-tensorcore", "r11-tensorcore-int", "r12-tensorcore-f64", "r13-tensorcore-f32",
                 "r14-tensorcore-complex"):
        assert "glossary/#" in (site / "ladder" / page / "index.html").read_text(), page


@needs_mkdocs
def test_the_api_reference_lists_parameters(site):
    """NumPy-style docstrings render as sections: a parameter table per function, Kernel's fields."""
    api = (site / "reference" / "api" / "index.html").read_text()
    assert api.count("Parameters:") >= 8 and "Raises:" in api and "Returns:" in api
    kernel = api.split('id="tilemm.Kernel"', 1)[1].split('id="tilemm.nn.Linear"', 1)[0]
    assert "Attributes:" in kernel and "launch_shape" in kernel


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
    # a module of its own in sys.modules, as a script's __main__ is (torch.compile imports the
    # module of the functions it traces)
    module = types.ModuleType("__docs__")
    sys.modules["__docs__"] = module
    try:
        exec(compile(block, "<docs>", "exec"), module.__dict__)
    finally:
        sys.modules.pop("__docs__", None)
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


def _hook():
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "_hooks" / "generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_page_shows_only_its_own_rows_of_a_shared_table():
    hook = _hook()
    text = hook._render("rows seeds_h200 seeds_h100 | rung=naive-global")
    rows = [line for line in text.splitlines() if line.startswith("| 0")]
    assert rows and all("`naive-global`" in row for row in rows)
    assert "record: `benchmarks/results/" in text            # the device and record stay under the rows
    with pytest.raises(ValueError, match="no row of the table"):
        hook._render("rows seeds_h200 | rung=no-such-rung")
    with pytest.raises(ValueError, match="no column"):
        hook._render("rows seeds_h200 | colour=blue")
