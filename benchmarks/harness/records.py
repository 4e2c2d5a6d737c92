"""The canonical records under benchmarks/results/<device>/, as the table and figure scripts read
them (make_tables.py, make_figures.py, default_table.py). A file of its own, with neither tilemm nor
torch: the figures' digest (make_figures.py) names it among what the figures are drawn from."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"


def read_records(path) -> list[dict]:
    """The records of a .jsonl or .jsonl.gz file: a relative path is a canonical file's, under
    benchmarks/results (e.g. "h200/ladder.jsonl")."""
    path = Path(path) if Path(path).is_absolute() else RESULTS / path
    opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
    with opened as f:
        return [json.loads(line) for line in f if line.strip()]


def rung_label(record: dict) -> str:
    """A record's rung as the tables name it: `kernel` (its parameters)."""
    params = ", ".join(f"{k}={v}" for k, v in sorted((record.get("params") or {}).items()))
    return f"`{record['kernel']}`" + (f" ({params})" if params else "")
