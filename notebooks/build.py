"""Write the notebooks of this folder, one a rung of the seed era, without outputs.

    python notebooks/build.py           # rewrite them
    python notebooks/build.py --check   # exit 1 if a notebook differs from what this script writes

Each notebook walks its rung: the idea (the rung module's docstring, read here), the code (read from
the rung's source when the notebook runs), a run in the CUDA simulator at a toy size with its loads
counted, and a figure drawn from those counts and the rung's traffic model. tests/test_notebooks.py
runs them all.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


@dataclass(frozen=True)
class Walk:
    rung: int
    name: str
    module: str                 # file under src/ whose docstring is the idea (its kernel: the *_kernel.py beside it)
    params: dict
    compare: dict = field(default_factory=dict)   # rung -> its parameters, counted beside this one
    look_for: str = ""


WALKS = (
    Walk(1, "cpu-naive", "tilemm/ladder/r01_cpu_naive.py", {},
         look_for="Every element of A is loaded N times and every element of B M times: once per product. "
                  "On a CPU the caches catch most of them; B's column walk is what they catch worst, and "
                  "rung 2 (`cpu-tiled`) reorders the loops for it."),
    Walk(3, "naive", "tilemm/ladder/simt/r03_naive.py", {"block": 8}, {"uncoalesced": {"block": 8}},
         look_for="Block (0, 0) loads each element of its 8 rows of A eight times, once for each thread of a "
                  "row of the block, and each element of its 8 columns of B eight times: every product "
                  "loads both operands from global memory. A warp's access to B touches one 32-byte sector "
                  "(neighbouring threads, neighbouring columns): coalesced. `uncoalesced` swaps the thread "
                  "axes: its warps' accesses to A and C touch twice the sectors here (blocks of 8), eight "
                  "times as many at the rung's default block of 16."),
    Walk(4, "naive-global", "tilemm/ladder/simt/r04_naive_global.py", {"block": 8}, {"naive": {"block": 8}},
         look_for="The loads of A and B are naive's; on top, every step reads C and writes it back: the model's "
                  "traffic is 1.5 times naive's, and the stores are K + 1 per output instead of 1."),
    Walk(5, "uncoalesced", "tilemm/ladder/simt/r05_uncoalesced.py", {"block": 8}, {"naive": {"block": 8}},
         look_for="The same loads as naive, element for element (the model is the same), but a warp's "
                  "accesses to A and C touch twice the sectors here with blocks of 8 (eight times with the "
                  "rung's default block of 16): the lesson is in the addresses, not the counts."),
    Walk(6, "tiled", "tilemm/ladder/simt/r06_tiled.py", {"tile": 8}, {"naive": {"block": 8}},
         look_for="Block (0, 0) now loads each element of its strips of A and B once: the threads copy a "
                  "tile into shared memory together and read it from there TILE times. The model falls by "
                  "TILE against naive's, at every n."),
    Walk(7, "rect", "tilemm/ladder/simt/r07_rect.py", {"tile": 4, "f": 2}, {"tiled": {"tile": 4}},
         look_for="A block covers F tiles of C side by side, so it loads its strip of A once for F tiles "
                  "where `tiled` loads it F times: the model falls again, by A's share. Each value of A "
                  "read from shared memory feeds F products."),
    Walk(8, "regblock", "tilemm/ladder/simt/r08_regblock.py",
         {"block_m": 16, "block_n": 16, "block_k": 4, "thread_m": 4, "thread_n": 4},
         {"rect": {"tile": 4, "f": 2}},
         look_for="Block (0, 0) loads each element of its strips of A and B once, as `tiled` and `rect` do "
                  "for theirs; with 16 x 16 blocks of C there are fewer strips to load. What changes is "
                  "inside: per K step a thread reads THREAD_M + THREAD_N values from shared memory and does "
                  "THREAD_M x THREAD_N products from registers (at the rung's defaults, 16 x 8 a thread: "
                  "24 values feed 128 products)."),
)

SIZE = 16


def docstring(module: str) -> str:
    return ast.get_docstring(ast.parse((SRC / module).read_text())) or ""


def notebook(walk: Walk) -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(f"# Rung {walk.rung} · `{walk.name}`\n\n{docstring(walk.module)}\n\n"
                          f"This notebook runs the rung at a toy size in the CUDA simulator (no GPU needed), "
                          "counts what it loads and stores, and draws it. Run all cells; each takes seconds."),
        new_code_cell("import os\n"
                      "os.environ[\"NUMBA_ENABLE_CUDASIM\"] = \"1\"   # the CUDA simulator: set before numba.cuda "
                      "is imported\n\n"
                      "import matplotlib.pyplot as plt\n"
                      "from IPython.display import Code\n\n"
                      "from tilemm.learn import walkthrough"),
        new_markdown_cell(f"## The code\n\nThe kernel as `src/{walk.module.replace('.py', '_kernel.py')}` has it, read from the file. The "
                          "lines between `# --- exercise: begin` and `# --- exercise: end` are the lesson: "
                          f"`tilemm learn {walk.name}` writes this kernel with them left for you."),
        new_code_cell(f"Code(walkthrough.kernel_source({walk.name!r}), language=\"python\")"),
        new_markdown_cell(f"## A run in the simulator, counted\n\nA {SIZE} x {SIZE} x {SIZE} product with "
                          f"parameters {walk.params or 'none'}. Every load and store of A, B and C is counted "
                          "where it is made (and, for shared memory, every access of the tiles), then set "
                          "beside the rung's traffic model."),
        new_code_cell(f"counted = walkthrough.count({walk.name!r}, {SIZE}, {SIZE}, {SIZE}, {walk.params!r})\n"
                      "print(\"correct:\", counted[\"correct\"])\n"
                      "print(\"global loads:\", counted[\"loads\"], \" stores:\", counted[\"stores\"])\n"
                      "print(\"shared-memory loads and stores:\", counted[\"shared_loads\"], "
                      "counted[\"shared_stores\"])\n"
                      "print(\"the traffic model:\", counted[\"model\"])"),
    ]
    compare = ", ".join(f"`{name}`" for name in walk.compare)
    cells.append(new_markdown_cell("## The figure\n\nTop: how often " + (
        "the loop" if walk.rung == 1 else "block (0, 0)") + " loaded each element of A and of B. Bottom left: "
        "the 32-byte sectors a warp's access touches (one or two: coalesced). Bottom right: the traffic model "
        "over n, in elements read per element of A and B" + (f", beside {compare}" if compare else "") + "."))
    compared = "{" + ", ".join(f"{name!r}: walkthrough.count({name!r}, {SIZE}, {SIZE}, {SIZE}, {params!r})"
                               for name, params in walk.compare.items()) + "}"
    cells.append(new_code_cell(f"compared = {compared}\n"
                               f"walkthrough.figure({walk.name!r}, counted, compared)\n"
                               "plt.show()"))
    cells.append(new_markdown_cell(f"## What to look for\n\n{walk.look_for}"))
    stem = f"r{walk.rung:02d}_{walk.name.replace('-', '_')}.py"
    cells.append(new_markdown_cell("## Your turn\n\nWrite the lesson yourself and have it graded: awkward "
                                   "shapes, your loads counted against the rung's, the lesson a fault points "
                                   f"to.\n\n```\ntilemm learn {walk.name}\ntilemm grade {stem}\n```"))
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def path_of(walk: Walk) -> Path:
    return HERE / f"r{walk.rung:02d}-{walk.name}.ipynb"


def text_of(walk: Walk) -> str:
    nb = notebook(walk)
    for i, cell in enumerate(nb.cells):      # ids fixed: rebuilding writes the same bytes
        cell["id"] = f"{walk.name}-{i}"
    return nbformat.writes(nb) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for walk in WALKS:
        path, text = path_of(walk), text_of(walk)
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python notebooks/build.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
