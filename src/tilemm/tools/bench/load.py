"""How busy the machine was while a case ran: a measurement on a machine others are using is
slower than the code is, and the report says so.

Each record carries the 1-minute load average before and after the case (os.getloadavg), the
CPU count, and, on Linux, the cores the *other* processes kept busy over the case: the busy
time /proc/stat counts for the whole machine, less this process's own CPU time. The load
average counts this run's own threads too, so the flag reads the other processes' share.
"""
from __future__ import annotations

import os
import time

BUSY_SHARE = 0.5        # others using more than half the cores: the machine was busy


def _busy_seconds() -> float | None:
    """Seconds of CPU time every core has spent busy since boot (Linux), or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


class LoadWatch:
    """Start before a case, read after it: {"load_before", "load_after", "cores", "others_busy"}."""

    def __init__(self):
        self.wall, self.own, self.busy, self.before = time.perf_counter(), time.process_time(), _busy_seconds(), _loadavg()

    def read(self) -> dict:
        wall = time.perf_counter() - self.wall
        out = {"load_before": self.before, "load_after": _loadavg(), "cores": os.cpu_count()}
        busy = _busy_seconds()
        if busy is not None and self.busy is not None and wall > 0:
            others = (busy - self.busy) - (time.process_time() - self.own)
            # the counters tick every 10 ms: over a short case the share is rough; never past every core
            out["others_busy"] = round(min(max(0.0, others / wall), float(out["cores"] or 1)), 2)
        return out


def busy(record: dict) -> bool:
    """Whether other processes kept more than BUSY_SHARE of the cores busy while the record was
    timed (where the share was not measured: the load average before it)."""
    cores = record.get("cores")
    if not cores or record.get("status") != "ok":      # an estimate or a skip measured nothing
        return False
    others = record.get("others_busy")
    if others is None:
        others = record.get("load_before")
    return others is not None and others > BUSY_SHARE * cores


def busy_note(record: dict) -> str:
    """The table's note for a record measured on a busy machine ("" for a quiet one)."""
    if not busy(record):
        return ""
    others = record.get("others_busy")
    what = (f"other processes used {others:.1f} of {record['cores']} cores" if others is not None
            else f"load {record['load_before']:.1f} on {record['cores']} cores")
    return f"busy machine: {what}"
