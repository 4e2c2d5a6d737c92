"""The report of one benchmark run: results.jsonl, results.md, index.html and PNG plots in one folder.

The page opens with a summary (the ladder at one size: each rung's speed, its speed-up over the
rung before and over the naive rung), then the figures, each with a caption that says what it
shows, then every measurement. Estimated points (predicted, not run) are drawn hollow in every
plot. A column empty in every row is left out. Plots need matplotlib (the `report` extra);
without it the tables are still written and the page says why there are no plots.
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from tilemm.tools.bench.plots import plots
from tilemm.tools.bench.load import busy, busy_note
from tilemm.tools.bench.summaries import ladder_summary, sig, times, wide_records

COLUMNS = ["kernel", "params", "dtype", "m x n x k", "status", "median ms", "GFLOP/s", "vs baseline",
           "% peak", "GB/s (model)", "seed's figure", "note"]
REPORT_FILES = ("results.jsonl", "results.md", "index.html")
PLOT_FILES = ("summary.png", "gflops_vs_n.png", "time_vs_n.png", "speedup_vs_naive.png", "roofline.png",
              "ratio_vs_size.png")


def row(r: dict) -> list[str]:
    """A record as the cells of COLUMNS."""
    params = ",".join(f"{k}={v}" for k, v in r["params"].items())
    if r.get("host_inputs"):
        params = (params + ",with copies").strip(",")
    shape = f"{r['m']}x{r['n']}x{r['k']}"
    notes = [n for n in (r.get("reason", "") if r["status"] != "ok" else "", simulated_note(r), busy_note(r)) if n]
    note = "; ".join(notes)
    if r["status"] not in ("ok", "estimated"):
        return [r["kernel"], params, r["dtype"], shape, r["status"], "", "", "", "", "", "", note]
    fig = r.get("seed_figure")
    seed = f"{fig['value']:g} {fig['unit']} ({r['seed']})" if fig else ""
    ratio = f"{times(r['ratio'])} {r['baseline']}" if r.get("ratio") else ""
    if r["status"] == "estimated":       # not run: the time predicted from a smaller size
        return [r["kernel"], params, r["dtype"], shape, "estimated", f"~{r['median_ms']:.0f}", f"~{sig(r['gflops'])}",
                ratio and "~" + ratio, "", "", seed, note]
    return [r["kernel"], params, r["dtype"], shape, "ok", f"{r['median_ms']:.3f}", f"{sig(r['gflops'])}",
            ratio, f"{100 * r['peak_fraction']:.0f}%" if r.get("peak_fraction") else "",
            sig(r["gbps"]) if r.get("gbps") else "", seed, note]


def simulated_note(r: dict) -> str:
    """The note of a GPU rung's record measured in the CUDA simulator or Triton's interpreter."""
    return f"simulated: run in {r['emulated']} on the CPU, not on a GPU" if r.get("emulated") else ""


def table(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the records, each rung's sizes together (in the order the rungs first
    ran, smallest size first), without the columns that are empty in every row."""
    first: dict = {}
    for i, r in enumerate(records):
        first.setdefault((r["kernel"], json.dumps(r["params"], sort_keys=True), r["dtype"]), i)
    order = sorted(records, key=lambda r: (first[(r["kernel"], json.dumps(r["params"], sort_keys=True), r["dtype"])],
                                           r["m"] * r["n"] * r["k"]))
    rows = [row(r) for r in order]
    keep = [i for i, _ in enumerate(COLUMNS) if any(cells[i] for cells in rows)]
    return [COLUMNS[i] for i in keep], [[cells[i] for i in keep] for cells in rows]


def _markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def markdown(records: list[dict]) -> str:
    """Every record, one row each, in a Markdown table."""
    return _markdown_table(*table(records))


def _html_table(columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>" for cells in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


# -- the summary: the ladder at one size ---------------------------------------------------------

SUMMARY_COLUMNS = ["rung", "GFLOP/s", "median ms", "x the rung before", "x naive", "vs the library"]


def summary_table(summary: dict) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the ladder summary, without columns empty in every row; estimates marked ~."""
    def ratio(x, row):
        return "" if x is None else ("~" if row["estimated"] else "") + times(x)
    rows = []
    for s in summary["rows"]:
        r, mark = s["record"], "~" if s["estimated"] else ""
        rows.append([s["label"] + (" (the library)" if s["anchor"] else ""), f"{mark}{sig(s['gflops'])}",
                     f"{mark}{r['median_ms']:.3f}", ratio(s["over_before"], s), ratio(s["over_naive"], s),
                     ratio(s["vs_library"], s) + (f" {r['baseline']}" if s["vs_library"] else "")])
    keep = [i for i, _ in enumerate(SUMMARY_COLUMNS) if any(cells[i] for cells in rows)]
    return [SUMMARY_COLUMNS[i] for i in keep], [[cells[i] for i in keep] for cells in rows]


# -- the wide sweep -------------------------------------------------------------------------------

def wide_summary(records: list[dict]) -> list[dict]:
    """Per rung and dtype over the wide sweep: the geometric mean of the speed relative to its
    baseline on the fit and the held-out problems apart, and the worst problem."""
    groups = defaultdict(list)
    for r in wide_records(records):
        groups[(r["kernel"], r["dtype"])].append(r)
    rows = []
    for (kernel, dtype), rs in sorted(groups.items()):
        row = {"kernel": kernel, "dtype": dtype, "problems": len(rs)}
        for split in ("fit", "held-out"):
            ratios = [r["ratio"] for r in rs if (r.get("tag") or "").endswith("/" + split)]
            row[split] = float(np.exp(np.mean(np.log(ratios)))) if ratios else None
        worst = min(rs, key=lambda r: r["ratio"])
        row["worst"] = worst["ratio"]
        row["worst_problem"] = f"{worst['m']}x{worst['n']}x{worst['k']} {worst.get('layout', 'nn')} ({worst.get('tag')})"
        rows.append(row)
    return rows


WIDE_COLUMNS = ["rung", "dtype", "problems", "geomean vs baseline (fit)", "geomean (held-out)", "worst",
                "worst problem"]


def _wide_cells(row: dict) -> list[str]:
    """A wide_summary row as the cells of WIDE_COLUMNS."""
    return [row["kernel"], row["dtype"], str(row["problems"])] + [
        f"{row[s]:.3f}x" if row[s] else "" for s in ("fit", "held-out")] + [f"{row['worst']:.3f}x", row["worst_problem"]]


def wide_markdown(rows: list[dict]) -> str:
    return _markdown_table(WIDE_COLUMNS, [_wide_cells(r) for r in rows])


# The page checks its own images once loaded: a missing plot is a console error, and the
# count of good images lands in <body data-images-loaded> for a headless browser to read.
SELF_CHECK = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const broken = images.filter((img) => !img.complete || img.naturalWidth === 0);
  broken.forEach((img) => console.error("image did not load: " + img.getAttribute("src")));
  document.body.dataset.imagesLoaded = String(images.length - broken.length);
});
</script>"""

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1300px} table{border-collapse:collapse;font-size:13px;"
         "margin-bottom:1.5em} td,th{border:1px solid #ccc;padding:3px 6px;text-align:right} "
         "td:first-child,th:first-child{text-align:left} td:last-child,th:last-child{text-align:left} "
         "td:not(:last-child){white-space:nowrap} "
         "figure{margin:1.5em 0} figcaption{max-width:900px;color:#333;font-size:14px;margin-top:.4em} "
         ".warn{background:#fff4e0;border-left:4px solid #e08a00;padding:.5em .8em;max-width:900px}")


def staging(folder: Path) -> Path:
    """The sibling folder a new report is written into before it replaces the one in folder."""
    return folder.parent / f".{folder.name}.tilemm-new"


def prepare(folder: Path) -> Path:
    """Check, before any case runs, that folder can take a report (created where needed,
    writable), and return an empty staging folder beside it for the new report: the report in
    folder stays whole until publish() replaces it, so Ctrl-C or a failure leaves it as it was."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--report {folder}: that is a file; name a folder")
    new = staging(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".tilemm-can-write"
        probe.write_text("")
        probe.unlink()
        shutil.rmtree(new, ignore_errors=True)      # what an interrupted run left
        new.mkdir()
    except OSError as e:
        raise ValueError(f"--report {folder}: can't write there ({e.strerror or e})") from None
    return new


@contextlib.contextmanager
def kept_on_failure(folder: Path | None, new: Path | None):
    """Around a run writing into new (None: no report): if it stops (Ctrl-C, an error), say that
    the report in folder is the last one, unchanged, and where this run's records are."""
    try:
        yield
    except BaseException:
        if new is None:
            raise
        print(f"tilemm bench: the report in {folder} is left as it was; this run's records so far: "
              f"{new / 'results.jsonl'}", file=sys.stderr)
        raise


def publish(new: Path, folder: Path) -> None:
    """Replace the report in folder by the finished one in new, file by file with os.replace
    (each atomic), an earlier report's files the new one lacks removed; other files in folder
    are left alone. new is removed."""
    names = set(REPORT_FILES + PLOT_FILES)
    made = [p.name for p in new.iterdir() if p.name in names]
    for name in made:
        os.replace(new / name, folder / name)
    for name in names - set(made):
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(new, ignore_errors=True)


def normalized(r: dict) -> dict:
    """A record with the fields the report reads, from a record of another script too (its
    GFLOP/s from its TFLOP/s or its time)."""
    r.setdefault("params", {})
    r.setdefault("suite", "")
    r.setdefault("date", "")
    r.setdefault("versions", {})
    if r.get("status") in ("ok", "estimated") and r.get("gflops") is None and r.get("median_ms"):
        r["gflops"] = r["tflops"] * 1e3 if r.get("tflops") else 2.0 * r["m"] * r["n"] * r["k"] / r["median_ms"] / 1e6
    return r


def load(folder: Path) -> list[dict]:
    """Every record the run wrote into folder/results.jsonl, with ratios derived."""
    from tilemm.tools.bench.runner import with_ratios
    path = folder / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return with_ratios([normalized(r) for r in records if "kernel" in r and "status" in r])


def warnings(records: list[dict]) -> list[str]:
    """What a reader must know before reading the numbers: GPU rungs that were simulated, a
    machine others were using."""
    out = []
    emulators = sorted({r["emulated"] for r in records if r.get("emulated")})
    if emulators:
        out.append(f"Simulated: the GPU rungs ran in {' and '.join(emulators)} on this CPU, not on a GPU. Their "
                   "times say how slow the emulation is, nothing about the kernels' speed on a GPU.")
    loaded = [r for r in records if busy(r)]
    if loaded:
        worst = max(loaded, key=lambda r: r.get("others_busy") or r.get("load_before") or 0)
        out.append(f"Busy machine: other processes kept more than half of the {worst['cores']} cores busy during "
                   f"{len(loaded)} of {len(records)} measurements ({busy_note(worst).split(': ', 1)[1]} at worst). "
                   "Their times may be up to several times slower than on a quiet machine, and ratios between "
                   "them may mislead; they say 'busy machine' in the note column.")
    return out


def write(folder: Path, title: str = "tilemm report") -> Path:
    """results.md, the plots and index.html for the records in folder/results.jsonl."""
    records = load(folder)
    summary = ladder_summary(records)
    wide = wide_summary(records)
    md = [f"# {title}\n"] + [f"> {line}\n" for line in warnings(records)]
    if summary:
        md += [f"## The ladder at n = {summary['n']} ({summary['dtype']})\n", _markdown_table(*summary_table(summary))]
    md += ["## Every measurement\n", markdown(records)]
    if wide:
        md += ["## The wide sweep\n", wide_markdown(wide)]
    (folder / "results.md").write_text("\n".join(md))
    images, why_not = plots(records, folder)
    for name in set(PLOT_FILES) - {name for name, _ in images}:    # an earlier report's plot this one lacks
        (folder / name).unlink(missing_ok=True)
    captions = dict(images)
    body = [f"<h1>{html.escape(title)}</h1>"]
    for device in dict.fromkeys(r["device"] for r in records):  # where the figures were measured
        first = next(r for r in records if r["device"] == device)
        dates = sorted({r["date"][:10] for r in records if r["device"] == device and r["date"]})
        body.append(f"<p>Measured on <b>{html.escape(device)}</b>{', ' if dates else ''}"
                    f"{html.escape(', '.join(dates))}; versions: "
                    f"{html.escape(', '.join(f'{k} {v}' for k, v in first['versions'].items()))}</p>")
    body += [f'<p class="warn">{html.escape(line)}</p>' for line in warnings(records)]
    if not records:
        body.append("<p>No measurements: results.jsonl is empty.</p>")
    if why_not:
        body.append(f"<p><b>No plots:</b> {html.escape(why_not)}</p>")

    def figure(name):
        return (f'<figure><img src="{name}" alt="{html.escape(captions[name])}" style="max-width:100%">'
                f"<figcaption>{html.escape(captions[name])}</figcaption></figure>")
    if summary:
        body.append(f"<h2>Summary: the ladder at n = {summary['n']} ({summary['dtype']})</h2>")
        if "summary.png" in captions:
            body.append(figure("summary.png"))
        body.append(_html_table(*summary_table(summary)))
    others = [name for name, _ in images if name != "summary.png"]
    if others:
        body.append("<h2>Figures</h2>")
        body += [figure(name) for name in others]
    if wide:
        body.append("<h2>The wide sweep</h2>" + _html_table(WIDE_COLUMNS, [_wide_cells(r) for r in wide]))
    for suite in dict.fromkeys(r["suite"] for r in records):
        rows = [r for r in records if r["suite"] == suite]
        body.append(f"<h2>Every measurement{': suite ' + html.escape(suite) if suite else ''}</h2>"
                    + _html_table(*table(rows)))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + SELF_CHECK + "</body></html>\n")
    (folder / "index.html").write_text(page)
    return folder / "index.html"

