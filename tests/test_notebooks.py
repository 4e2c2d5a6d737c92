"""The notebooks (notebooks/*.ipynb): committed as notebooks/build.py writes them, without outputs,
and each runs to the end in a Jupyter kernel (the CUDA simulator on) within its time."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
SECONDS_EACH = 60       # a notebook takes 5-15 s on 2 cores; the limit catches a hang, not a slow machine


def build_module():
    spec = importlib.util.spec_from_file_location("notebooks_build", FOLDER / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def test_notebooks_are_as_the_build_script_writes_them():
    build = build_module()
    assert {build.path_of(w) for w in build.WALKS} == set(NOTEBOOKS)
    assert {w.rung for w in build.WALKS} >= {1, 3, 4, 5, 6, 7, 8}
    for walk in build.WALKS:
        assert build.path_of(walk).read_text() == build.text_of(walk), \
            f"{build.path_of(walk).name} is out of date: run python notebooks/build.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "commit without outputs"
    # the kernel inherits this environment: the simulator on before numba.cuda is imported, this tilemm
    # importable, matplotlib drawing off-screen
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    src = str(Path(__file__).resolve().parents[1] / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('prefix:', sys.prefix)"))
    client = nbclient.NotebookClient(nb, timeout=SECONDS_EACH, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "correct: True" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "the figure was not drawn"
    # the python3 kernel is this environment's Python (ipykernel's kernelspec, installed with it)
    assert f"prefix: {sys.prefix}" in text
