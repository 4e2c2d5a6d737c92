"""Static checks of the Triton programs' sources, for what the compile-only tier's Triton (3.9)
cannot see: Triton before 3.9 (the GPU image's 3.6) takes tl.dot's result as float32 unless
out_dtype is named, and refuses an int32 or float64 accumulator given without it."""
import ast
from pathlib import Path

SOURCES = Path(__file__).resolve().parent.parent / "src" / "tilemm"
WIDE = {"int32", "float64"}          # accumulators' dtypes that tl.dot must be told


def wide_accumulators(function: ast.FunctionDef) -> set:
    """Names the function binds to tl.zeros(..., dtype=tl.int32 or tl.float64), on any branch."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "zeros":
                for keyword in call.keywords:
                    if (keyword.arg == "dtype" and isinstance(keyword.value, ast.Attribute)
                            and keyword.value.attr in WIDE):
                        names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def untold_dots(path: Path) -> list:
    """(line, accumulator) of each tl.dot into a wide accumulator that names no out_dtype."""
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, ast.FunctionDef):
            continue
        wide = wide_accumulators(function)
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot"
                    and len(node.args) >= 3 and isinstance(node.args[2], ast.Name) and node.args[2].id in wide
                    and not any(k.arg == "out_dtype" for k in node.keywords)):
                found.append((node.lineno, node.args[2].id))
    return found


def test_every_dot_into_an_int32_or_float64_accumulator_names_out_dtype():
    untold = {str(path.relative_to(SOURCES)): lines for path in sorted(SOURCES.rglob("*.py"))
              if (lines := untold_dots(path))}
    assert not untold, untold


def test_the_check_sees_a_dot_left_untold(tmp_path):
    source = tmp_path / "kernel.py"
    source.write_text("def kernel(INTEGER):\n"
                      "    if INTEGER:\n"
                      "        acc = tl.zeros((16, 16), dtype=tl.int32)\n"
                      "    else:\n"
                      "        acc = tl.zeros((16, 16), dtype=tl.float32)\n"
                      "    acc = tl.dot(a, b, acc)\n"
                      "    acc = tl.dot(a, b, acc, out_dtype=acc.dtype)\n")
    assert untold_dots(source) == [(6, "acc")]
