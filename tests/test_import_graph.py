"""The house's inner walls, read from the source: no import circle among tilemm's modules, and no
private name (``_x``) of one module imported or used by another."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tilemm"

# The tools built on the library (command line, benchmarks, report, explain, check): the library
# never imports them.
TOOLS = ("tilemm.tools.cli", "tilemm.tools.bench", "tilemm.tools.explain", "tilemm.tools.check")  # (tilemm.warmup is the public warmup() function)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def base_of(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The module a relative import names, resolved against the importing module's package."""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def imports(module: str, is_package: bool, text: str, known: set[str]):
    """(imported module, names taken from it, local names bound to tilemm modules) of one source,
    imports inside functions included; importlib.import_module("tilemm.x") counts as an import."""
    edges: dict[str, set[str]] = {}
    bound: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    edges.setdefault(alias.name, set())
                    if alias.asname:
                        bound.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            base = base_of(module, is_package, node.level, node.module) if node.level else node.module
            if base not in known:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:           # a module of the package
                    edges.setdefault(sub, set())
                    bound.add(alias.asname or alias.name)
                else:                      # a name defined in base
                    edges.setdefault(base, set()).add(alias.name)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in known):
            edges.setdefault(node.args[0].value, set())
    return edges, bound


def graph():
    modules = sources()
    known = set(modules)
    return {name: imports(name, path.name == "__init__.py", path.read_text(), known)
            for name, path in modules.items()}, modules


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), and modules
    importing themselves."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in edges.get(v, ()):
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def ancestors(module: str) -> set[str]:
    """A module's packages: importing tilemm.a.b runs tilemm/__init__ and tilemm/a/__init__ first,
    which is not an edge of the graph's circles."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_circles():
    """None, lazy imports inside functions included: a torch operator's body runs the plans
    beneath it (tilemm.plans.calls), never the public function that chose the operator."""
    found, _ = graph()
    edges = {m: {t for t in targets if t not in ancestors(m)} for m, (targets, _) in found.items()}
    assert cycles(edges) == []


def test_no_private_module_names():
    assert [m for m in sources() if any(private(part) for part in m.split("."))] == []


def test_no_private_name_taken_from_another_module():
    found, modules = graph()
    taken = [f"{m} imports {name} from {target}" for m, (targets, _) in found.items()
             for target, names in targets.items() for name in names if private(name)]
    assert taken == []


def test_no_private_attribute_of_an_imported_module():
    found, modules = graph()
    used = []
    for m, (_, bound) in found.items():
        for node in ast.walk(ast.parse(modules[m].read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and private(node.attr)):
                used.append(f"{m}:{node.lineno} {node.value.id}.{node.attr}")
    assert used == []


def test_the_library_never_imports_the_tools():
    found, _ = graph()
    crossing = [f"{m} -> {t}" for m, (targets, _) in found.items() if not m.startswith(TOOLS)
                for t in targets if t.startswith(TOOLS)]
    assert crossing == []


def test_the_checks_can_fail():
    """A circle, a foreign private name and a module bound to a local name are found where they are."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    text = "from .api import _LOCK, plan\nfrom . import api as calls\nimport importlib\n" \
           "def f():\n    importlib.import_module('tilemm.ladder')\n"
    edges, bound = imports("tilemm.x", False, text, {"tilemm", "tilemm.api", "tilemm.x", "tilemm.ladder"})
    assert edges == {"tilemm.api": {"_LOCK", "plan"}, "tilemm.ladder": set()} and bound == {"calls"}


# Folders as layers, from the top down, in the order a call passes through them: a module imports
# modules of its own folder or of a folder below it, never above. The top holds the public fronts
# (tilemm/__init__, api, nn, warmup and the public name torch_ops).
LAYERS = ("tools", "learn", "", "spread", "torch", "products", "plans", "choose", "contract", "ladder", "engine",
          "numerics", "system")


def layer_of(module: str) -> int:
    parts = module.split(".")
    folder = parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""
    return LAYERS.index(folder)


def test_folders_are_layers():
    found, _ = graph()
    upward = [f"{m} -> {t}" for m, (targets, _) in found.items() for t in targets
              if t not in ancestors(m) and layer_of(t) < layer_of(m)]
    assert upward == []


def test_no_rung_imports_a_rung():
    found, _ = graph()
    rung = lambda m: m.rpartition(".")[2][:1] == "r" and m.rpartition(".")[2][1:3].isdigit()
    number = lambda m: m.rpartition(".")[2][:3]
    crossing = [f"{m} -> {t}" for m, (targets, _) in found.items() for t in targets
                if rung(m) and rung(t) and number(m) != number(t)]
    assert crossing == []


def test_the_engine_imports_nothing_from_the_ladder():
    found, _ = graph()
    assert [f"{m} -> {t}" for m, (targets, _) in found.items() if m.startswith("tilemm.engine")
            for t in targets if t.startswith("tilemm.ladder")] == []


def test_no_module_over_400_lines_and_no_rung_10_to_14_file_over_250():
    long = [p.name for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > 400]
    rungs = [p.name for p in (PACKAGE / "ladder" / "tensorcore").glob("r1[0-4]_*.py")
             if len(p.read_text().splitlines()) > 250]
    assert long == [] and rungs == []


def test_upper_floors_reach_the_rungs_through_the_registry():
    found, _ = graph()
    door = ("tilemm.ladder", "tilemm.ladder.registry", "tilemm.ladder.record")
    bypass = [f"{m} -> {t}" for m, (targets, _) in found.items()
              if not m.startswith(("tilemm.ladder", "tilemm.tools", "tilemm.learn"))
              for t in targets if t.startswith("tilemm.ladder") and t not in door]
    assert bypass == []
