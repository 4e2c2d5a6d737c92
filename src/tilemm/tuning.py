"""Autotuning with the winners on disk. Candidate configurations are data (a list per kernel);
the fastest for a (kernel, device, dtype, shape, layout) is stored in a JSON file and reused by
every later call and process. TILEMM_CACHE_DIR moves the file (default ~/.cache/tilemm)."""
from __future__ import annotations

import datetime
import json
import os
import tempfile
import time
from pathlib import Path


def cache_file() -> Path:
    root = os.environ.get("TILEMM_CACHE_DIR") or Path.home() / ".cache" / "tilemm"
    return Path(root) / "tuning.json"


def _load() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _save(entries: dict) -> None:
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # replace atomically: a reader
    with os.fdopen(fd, "w") as f:                               # never sees half a file
        json.dump(entries, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


# The choice the last call of best() made or read, with "cached": whether it was read (the
# benchmark reports the tuning time of its cases from it).
last: dict = {}
_known: dict = {}   # (cache file, key) -> entry: a process reads each winner from disk once


def cached(key: str) -> dict | None:
    """The choice recorded for key (this process's memory, else the file), which tuning.last then
    describes, or None."""
    where = (cache_file(), key)
    known = _known.get(where)
    if known is None:
        known = _load().get(key)
    if known is not None:
        _known[where] = known
        last.clear()
        last.update(known, key=key, cached=True)
    return known


def best(key: str, candidates: list[dict], time_ms) -> tuple[dict, dict]:
    """(the fastest candidate, what was recorded about the choice). time_ms(candidate) runs
    one configuration and returns its time; it is called only when the key is not cached."""
    known = cached(key)
    if known is not None:
        return known["params"], known
    start = time.perf_counter()
    timed = [(time_ms(c), i) for i, c in enumerate(candidates)]
    ms, i = min(timed)
    from . import machine
    info = machine.describe()        # a winner says where, when and with which libraries it won
    entry = {"params": candidates[i], "ms": ms, "tried": len(candidates),
             "tuning_s": time.perf_counter() - start, "device": info["device"], "versions": info["versions"],
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    entries = _load()  # another process may have written meanwhile
    entries[key] = entry
    _save(entries)
    last.clear()
    last.update(entry, key=key, cached=False)
    return entry["params"], entry
