"""Autotuning with the winners on disk. Candidate configurations are data (a list per kernel);
the fastest for a (kernel, device, dtype, shape, layout) is stored in a JSON file and reused by
every later call and process. TILEMM_CACHE_DIR moves the file (default ~/.cache/tilemm)."""
from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path


def cache_file() -> Path:
    root = os.environ.get("TILEMM_CACHE_DIR") or Path.home() / ".cache" / "tilemm"
    return Path(root) / "tuning.json"


def _load() -> dict:
    """The cache's entries; a missing file is empty, and one that can't be read or isn't a JSON
    object is ignored with a warning (the call goes on and tunes again), never an error."""
    path = cache_file()
    try:
        import json     # (where the cache is read: not at import)
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        warnings.warn(f"tilemm: ignoring the tuning cache {path}: {e}", RuntimeWarning, stacklevel=3)
        return {}
    if not isinstance(entries, dict):
        warnings.warn(f"tilemm: ignoring the tuning cache {path}: not a JSON object", RuntimeWarning, stacklevel=3)
        return {}
    return entries


@contextlib.contextmanager
def _across_processes(path: Path):
    """Hold an advisory lock on a file beside the cache, so that processes add their winners one
    at a time and none is lost (where the OS has flock; elsewhere the atomic replace alone)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_WRITING = threading.Lock()   # this process's threads add their winners one at a time


def record(key: str, entry: dict) -> None:
    """Add one winner to the file: re-read (another process may have written meanwhile), then
    replace it atomically, so a reader never sees half a file. A cache that can't be written
    (read-only, full disk) keeps the winner in memory only, with a warning."""
    import json
    path = cache_file()
    with _WRITING:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _across_processes(path):
                entries = _load()
                entries[key] = entry
                fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
                try:
                    with os.fdopen(fd, "w") as f:
                        json.dump(entries, f, indent=1, sort_keys=True)
                    os.replace(tmp, path)
                except BaseException:
                    os.unlink(tmp)
                    raise
        except OSError as e:
            warnings.warn(f"tilemm: could not write the tuning cache {path} ({e}); the choice is kept for this "
                          "process only", RuntimeWarning, stacklevel=3)


# The choice the last call of best() made or read, with "cached": whether it was read (the
# benchmark reports the tuning time of its cases from it).
last: dict = {}
KNOWN: dict = {}   # (cache file, key) -> entry: a process reads each winner from disk once


def cached(key: str) -> dict | None:
    """The choice recorded for key (this process's memory, else the file), which tuning.last then
    describes, or None."""
    where = (cache_file(), key)
    known = KNOWN.get(where)
    if known is None:
        known = _load().get(key)
        if not (isinstance(known, dict) and isinstance(known.get("params"), dict)):
            known = None               # an entry of another shape: tuned again
    if known is not None:
        KNOWN[where] = known
        last.clear()
        last.update(known, key=key, cached=True)
    return known


def best(key: str, candidates: list[dict], time_ms) -> tuple[dict, dict]:
    """(the fastest candidate, what was recorded about the choice). time_ms(candidate) runs
    one configuration and returns its time; it is called only when the key is not cached."""
    known = cached(key)
    if known is not None and known["params"] in candidates:   # a winner no longer offered is tuned again
        return known["params"], known
    start = time.perf_counter()
    timed = [(time_ms(c), i) for i, c in enumerate(candidates)]
    ms, i = min(timed)
    import datetime
    from tilemm.system import machine
    info = machine.describe()        # a winner says where, when and with which libraries it won
    entry = {"params": candidates[i], "ms": ms, "tried": len(candidates),
             "tuning_s": time.perf_counter() - start, "device": info["device"], "versions": info["versions"],
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    KNOWN[(cache_file(), key)] = entry
    record(key, entry)
    last.clear()
    last.update(entry, key=key, cached=False)
    return entry["params"], entry
