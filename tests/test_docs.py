"""The README's ladder table is generated from the registry: it must match the code."""
from pathlib import Path

from tilemm.cli import markdown_table


def test_readme_table_matches_registry():
    text = (Path(__file__).parent.parent / "README.md").read_text()
    table = text.split("<!-- kernels:begin -->\n", 1)[1].split("<!-- kernels:end -->", 1)[0]
    assert table.strip() == markdown_table().strip(), "run: tilemm kernels --markdown, paste into README.md"
