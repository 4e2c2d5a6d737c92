"""Reading a rung's source: the function an exercise completes, the imports it needs, and its
exercise regions (the lines between ``# --- exercise: begin`` and ``# --- exercise: end``).

The rung's module is read as text, never imported: writing a skeleton of rung 9 must not load
Triton, nor one of rung 3 numba-cuda.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

BEGIN = "# --- exercise: begin"
END = "# --- exercise: end"
SNIPPET = "--8<--"          # the docs' snippet markers: not part of an exercise


def module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module.rpartition(".")[0])     # the package: nothing of the rung runs
    return Path(next(iter(spec.submodule_search_locations))) / (module.rpartition(".")[2] + ".py")


@dataclass(frozen=True)
class Extract:
    function: str        # the function's text, decorators included, snippet markers dropped
    imports: list        # import lines the function needs, absolute
    arguments: list      # the function's parameter names


def extract(module: str, function: str) -> Extract:
    """The function `function` of the rung module `module`, and the imports that make it stand alone:
    the module's own imports of the names it uses, and its module-level names from the module."""
    text = module_path(module).read_text()
    tree = ast.parse(text)
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if node is None:
        raise ValueError(f"{module} has no function {function!r}")
    lines = text.splitlines()
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    last = node.end_lineno          # the body's trailing comments (an end marker) belong to it
    indent = len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())
    while last < len(lines) and lines[last].lstrip().startswith("#") and \
            len(lines[last]) - len(lines[last].lstrip()) > indent:
        last += 1
    body = [line for line in lines[first:last] if SNIPPET not in line]
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    imports, local = [], []
    package = module.rpartition(".")[0]
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            names = [a for a in stmt.names if (a.asname or a.name) in used]
            if names:
                source = absolute(package, stmt.module, stmt.level)
                imports.append(f"from {source} import " + ", ".join(
                    a.name + (f" as {a.asname}" if a.asname else "") for a in names))
        elif isinstance(stmt, ast.Import):
            imports += [f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                        for a in stmt.names if (a.asname or a.name).split(".")[0] in used]
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name in used and stmt is not node:
            local.append(stmt.name)
        elif isinstance(stmt, ast.Assign):
            local += [t.id for t in stmt.targets if isinstance(t, ast.Name) and t.id in used]
    if local:
        imports.append(f"from {module} import " + ", ".join(sorted(set(local))))
    return Extract("\n".join(body), imports, [a.arg for a in node.args.args])


def absolute(package: str, module: str | None, level: int) -> str:
    """The absolute name of `from {'.' * level}{module} import ...` written in `package`."""
    if not level:
        return module
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - level + 1])
    return f"{base}.{module}" if module else base


@dataclass(frozen=True)
class Region:
    begin: int           # line index of the begin marker
    end: int             # line index of the end marker
    indent: str


def regions(text: str) -> list[Region]:
    """The exercise regions of a text, in order; a marker without its pair is an error."""
    found, start = [], None
    for i, line in enumerate(text.splitlines()):
        if line.strip() == BEGIN:
            if start is not None:
                raise ValueError(f"line {i + 1}: '{BEGIN}' inside another exercise region")
            start = i
        elif line.strip() == END:
            if start is None:
                raise ValueError(f"line {i + 1}: '{END}' without its begin")
            found.append(Region(start, i, re.match(r"\s*", text.splitlines()[start]).group(0)))
            start = None
    if start is not None:
        raise ValueError(f"line {start + 1}: '{BEGIN}' without its end")
    return found


def replace_regions(text: str, fillings: list[list[str]]) -> str:
    """text with the lines inside its exercise regions replaced, region by region (markers kept)."""
    found = regions(text)
    if len(found) != len(fillings):
        raise ValueError(f"{len(found)} exercise regions, {len(fillings)} fillings")
    lines = text.splitlines()
    for region, filling in reversed(list(zip(found, fillings))):
        lines[region.begin + 1:region.end] = filling
    return "\n".join(lines)


def region_bodies(text: str) -> list[list[str]]:
    """The lines inside each exercise region of text."""
    lines = text.splitlines()
    return [lines[r.begin + 1:r.end] for r in regions(text)]
