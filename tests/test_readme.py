"""README.md is the front page: every Python block in it runs as written, each on its own (a reader
copies one block, not the page). A block whose first line is `# needs a CUDA GPU` is a GPU test."""
import re
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"
GPU_MARK = "# needs a CUDA GPU"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


BLOCKS = python_blocks(README.read_text())


def test_the_readme_has_a_cpu_and_a_gpu_example():
    assert any(not b.startswith(GPU_MARK) for b in BLOCKS)
    assert any(b.startswith(GPU_MARK) for b in BLOCKS)


def test_the_readme_stays_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "<!-- kernels:begin -->" in text and "<!-- results:begin -->" in text and "<!-- results:end -->" in text
    # no history of how it was built: the changelog is the one dated record
    history = r"\bsession \d+|\bround \d+\b|\bissue #?\d+|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    assert not re.search(history, text, re.I)


@pytest.mark.parametrize("block", [pytest.param(b, id=f"block{i}", marks=[pytest.mark.gpu] if b.startswith(GPU_MARK)
                                                 else []) for i, b in enumerate(BLOCKS)])
def test_readme_block_runs(block, capsys):
    exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})
