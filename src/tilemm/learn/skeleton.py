"""Writing an exercise file: the rung's kernel with its lesson left as a TODO (or, for the
solution, filled from the rung itself), a launcher, and a small test.

Everything but the exercise regions is the rung's own source, read when the file is written.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from tilemm.ladder.rungs import RUNGS
from tilemm.learn import source
from tilemm.learn.exercises import Exercise

HEADER = '''"""Exercise {rung} · `{name}`: {idea}.

Write the lines between `# --- exercise: begin` and `# --- exercise: end` in `{function}`
below; the rest is given: the kernel's set-up, its launcher `run` and a small test. Then

    tilemm grade {file}

runs it on awkward shapes against NumPy, counts its loads against the rung's, and names the
lesson a fault points to. `{runner}python {file}` runs the small test at the bottom{where}.

The answer is the rung itself: src/{path}
(`tilemm learn {name} --solution` writes it as an exercise file).
"""
EXERCISE = "{name}"        # `tilemm grade` reads this: the rung whose lesson this file is
'''

TODO = "TODO: write this part. What it must do:"


def todo_lines(exercise: Exercise, index: int, indent: str) -> list[str]:
    lines = [indent + "# " + TODO]
    for para in exercise.todo[index].split("\n"):
        lines.append(indent + "#   " + para)
    return lines


def file_text(exercise: Exercise, file_name: str, solution: bool = False) -> str:
    """The exercise file's text: skeleton, or with solution=True the rung's own lines filled in."""
    extract = source.extract(exercise.module, exercise.function)
    found = source.regions(extract.function)
    if len(found) != len(exercise.todo):
        raise ValueError(f"{exercise.module}.{exercise.function} has {len(found)} exercise regions; "
                         f"the exercise describes {len(exercise.todo)}")
    function = extract.function
    if not solution:
        function = source.replace_regions(function, [todo_lines(exercise, i, r.indent) for i, r in enumerate(found)])
    path = exercise.module.replace(".", "/") + ".py"
    runner = {"numba-cuda": "NUMBA_ENABLE_CUDASIM=1 ", "triton": "TRITON_INTERPRET=1 "}.get(exercise.backend, "")
    where = {"numba-cuda": "\nin the CUDA simulator (on a GPU, leave the variable out)",
             "triton": "\nin Triton's interpreter (on a GPU, leave the variable out)"}.get(exercise.backend, "")
    parts = [HEADER.format(rung=exercise.rung, name=exercise.name, idea=exercise.idea, function=exercise.function,
                           file=file_name, path=path, runner=runner, where=where),
             "\n".join(dict.fromkeys(FIRST_IMPORTS[exercise.backend] + extract.imports
                                     + LAUNCH_IMPORTS[exercise.backend](exercise))),     # each once, in order
             "",
             "",
             function.rstrip(),
             "",
             "",
             LAUNCHERS[exercise.backend](exercise, extract),
             "",
             TEST[exercise.backend].strip(),
             ""]
    return "\n".join(parts)


def write(exercise: Exercise, folder: Path, solution: bool = False, overwrite: bool = False) -> Path:
    """Write the exercise into folder (made if missing); an existing file is kept unless overwrite."""
    folder = Path(folder)
    stem = exercise.name.replace("-", "_")
    path = folder / (f"r{exercise.rung:02d}_{stem}" + ("_solution" if solution else "") + ".py")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} exists: grade it with `tilemm grade {path}`, or pass --force to write a new one")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(file_text(exercise, path.name, solution))
    return path


def simt_imports(exercise: Exercise) -> list[str]:
    return ["import numba", "from tilemm.ladder.record import Problem", f"from {RUNGS[exercise.name]} import shape"]


def simt_launcher(exercise: Exercise, extract: source.Extract) -> str:
    compile_params = tuple(a for a in extract.arguments[1:] if a in exercise.sim_params)
    return textwrap.dedent(f'''\
        PARAMS = {exercise.sim_params!r}   # launch parameters: small tiles, quick in the CUDA simulator
        COMPILE_PARAMS = {compile_params!r}   # those {exercise.function} builds the kernel with


        def run(a, b, c, **params):
            """c = a @ b with the kernel above, launched on the rung's grid; params override PARAMS."""
            params = {{**PARAMS, **params}}
            problem = Problem(a.shape[0], b.shape[1], a.shape[1], np.dtype(c.dtype).name)
            grid = shape(problem, **params)
            kernel = {exercise.function}(numba.from_dtype(np.dtype(c.dtype)), **{{k: params[k] for k in COMPILE_PARAMS}})
            kernel[grid.grid, grid.block](a, b, c)
        ''')


def cpu_launcher(exercise: Exercise, extract: source.Extract) -> str:
    return textwrap.dedent(f'''\
        PARAMS = {{}}


        def run(a, b, c, **params):
            """c = a @ b with the function above (the sum starts at a zero of C's dtype)."""
            {exercise.function}(a, b, c, np.zeros(1, c.dtype)[0])
        ''')


def triton_launcher(exercise: Exercise, extract: source.Extract) -> str:
    return textwrap.dedent(f'''\
        PARAMS = {exercise.sim_params!r}   # small tiles: quick in Triton's interpreter


        def run(a, b, c, **params):
            """c = a @ b (torch tensors, float16) with the kernel above, one program a tile of C."""
            p = {{**PARAMS, **params}}
            m, k = a.shape
            n = b.shape[1]
            grid = (triton.cdiv(m, p["block_m"]) * triton.cdiv(n, p["block_n"]),)
            launch = {{key: p[key] for key in ("num_warps", "num_stages") if key in p}}
            {exercise.function}[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BLOCK_SIZE_M=p["block_m"], BLOCK_SIZE_N=p["block_n"],
                                 BLOCK_SIZE_K=p["block_k"], GROUP_SIZE_M=p["group_m"], **launch)
        ''')


FIRST_IMPORTS = {"numba-cuda": ["import numpy as np", "from tilemm import compat  # noqa: F401  (first: shims numba.cuda needs)"],
                 "numba": ["import numpy as np"], "triton": ["import numpy as np"]}
LAUNCH_IMPORTS = {"numba-cuda": simt_imports, "numba": lambda e: [],
                  "triton": lambda e: ["import torch", "import triton"]}
LAUNCHERS = {"numba-cuda": simt_launcher, "numba": cpu_launcher, "triton": triton_launcher}

TEST_NUMPY = '''
if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 10, (7, 11)).astype(np.int32)       # 7 x 11 @ 11 x 13: no tile divides them
    b = rng.integers(-9, 10, (11, 13)).astype(np.int32)
    c = np.full((7, 13), -1, np.int32)
    run(a, b, c)
    wrong = [tuple(int(i) for i in w) for w in np.argwhere(c != a @ b)]
    print("matches NumPy" if not len(wrong) else f"{len(wrong)} of {c.size} entries differ from NumPy, "
          f"the first at {wrong[0]}: {c[wrong[0]]} != {(a @ b)[wrong[0]]}")
'''

TEST_TRITON = '''
if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"     # cpu: run with TRITON_INTERPRET=1
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(7, 11, generator=gen).half().to(device)      # 7 x 11 @ 11 x 13: no tile divides them
    b = torch.randn(11, 13, generator=gen).half().to(device)
    c = torch.full((7, 13), float("nan"), dtype=torch.float16, device=device)
    run(a, b, c)
    err = (c.float() - a.float() @ b.float()).abs().max().item()
    print("matches torch" if err < 1e-2 else f"differs from torch by up to {err:.3g}")
'''

TEST = {"numba-cuda": TEST_NUMPY, "numba": TEST_NUMPY, "triton": TEST_TRITON}
