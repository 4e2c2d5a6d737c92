"""The report of one benchmark run: results.jsonl, results.md, index.html and PNG plots in one folder.

The page opens with a summary (the ladder at one size: each rung's speed, its speed-up over the
rung before and over the naive rung), then the figures, each with a caption that says what it
shows, then every measurement. Estimated points (predicted, not run) are drawn hollow in every
plot. A column empty in every row is left out. Plots need matplotlib (the `report` extra);
without it the tables are still written and the page says why there are no plots.
"""
from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from .. import machine, registry

COLUMNS = ["kernel", "params", "dtype", "m x n x k", "status", "median ms", "GFLOP/s", "vs baseline",
           "% peak", "GB/s (model)", "seed's figure", "note"]
ANCHORS = ("numpy", "cublas")       # the libraries each device's rungs are measured against
NAIVE = ("naive", "cpu-naive")      # the rung the speed-ups count from, in order of preference
REPORT_FILES = ("results.jsonl", "results.md", "index.html")
PLOT_FILES = ("summary.png", "gflops_vs_n.png", "time_vs_n.png", "speedup_vs_naive.png", "roofline.png",
              "ratio_vs_size.png")


def row(r: dict) -> list[str]:
    """A record as the cells of COLUMNS."""
    params = ",".join(f"{k}={v}" for k, v in r["params"].items())
    if r.get("host_inputs"):
        params = (params + ",with copies").strip(",")
    shape = f"{r['m']}x{r['n']}x{r['k']}"
    if r["status"] not in ("ok", "estimated"):
        return [r["kernel"], params, r["dtype"], shape, r["status"], "", "", "", "", "", "", r.get("reason", "")]
    fig = r.get("seed_figure")
    seed = f"{fig['value']:g} {fig['unit']} ({r['seed']})" if fig else ""
    ratio = f"{r['ratio']:.2f}x {r['baseline']}" if r.get("ratio") else ""
    if r["status"] == "estimated":       # not run: the time predicted from a smaller size
        return [r["kernel"], params, r["dtype"], shape, "estimated", f"~{r['median_ms']:.0f}", f"~{r['gflops']:.1f}",
                ratio and "~" + ratio, "", "", seed, r.get("reason", "")]
    return [r["kernel"], params, r["dtype"], shape, "ok", f"{r['median_ms']:.3f}", f"{r['gflops']:.1f}",
            ratio, f"{100 * r['peak_fraction']:.0f}%" if r.get("peak_fraction") else "",
            f"{r['gbps']:.0f}" if r.get("gbps") else "", seed, ""]


def table(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the records, without the columns that are empty in every row."""
    rows = [row(r) for r in records]
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

def _rung(kernel: str) -> int:
    try:
        return registry.get(kernel).rung
    except ValueError:          # a rung not in the registry: after the others
        return 10**6


def _label(r: dict) -> str:
    return r["kernel"] + "".join(f" {k}={v}" for k, v in r["params"].items())


def _series(records):
    """(kernel label, dtype) -> sorted [(n, record)] for square, device-resident cases; a case
    measured by two suites of the run (the seeds' and the ladder's) appears once."""
    out = defaultdict(dict)
    for r in records:
        if r["status"] in ("ok", "estimated") and r["m"] == r["n"] == r["k"] and not r.get("host_inputs"):
            points = out[(_label(r), r["dtype"])]
            if r["n"] not in points or points[r["n"]]["status"] != "ok":
                points[r["n"]] = r
    return {key: sorted(v.items(), key=lambda x: x[0]) for key, v in out.items()}


def ladder_summary(records: list[dict]) -> dict | None:
    """The ladder at one size: the dtype (float32 where measured) and the size n at which the
    most rungs have a time (the largest such n), each rung's GFLOP/s, its speed-up over the rung
    before it and over the naive rung, and its speed relative to the library. None if no rung
    has a square time."""
    series = _series(records)
    if not series:
        return None
    dtypes = [d for _, d in series]
    dtype = "float32" if "float32" in dtypes else max(set(dtypes), key=dtypes.count)
    at = defaultdict(dict)                # n -> label -> record
    for (label, dt), points in series.items():
        if dt == dtype:
            for n, r in points:
                at[n][label] = r
    n = max(at, key=lambda size: (len(at[size]), size))
    chosen = at[n]
    order = sorted(chosen, key=lambda label: (chosen[label]["kernel"] in ANCHORS, _rung(chosen[label]["kernel"]),
                                              label))
    naive = next((label for name in NAIVE for label in order if label == name), None)
    rows, before = [], None
    for label in order:
        r = chosen[label]
        anchor = r["kernel"] in ANCHORS
        rows.append({"label": label, "record": r, "estimated": r["status"] == "estimated", "gflops": r["gflops"],
                     "over_before": None if anchor or before is None else r["gflops"] / before["gflops"],
                     "over_naive": r["gflops"] / chosen[naive]["gflops"] if naive else None,
                     "vs_library": r.get("ratio") if not anchor else None, "anchor": anchor})
        if not anchor:
            before = r
    return {"dtype": dtype, "n": n, "naive": naive, "rows": rows}


SUMMARY_COLUMNS = ["rung", "GFLOP/s", "median ms", "x the rung before", "x naive", "vs the library"]


def summary_table(summary: dict) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of the ladder summary, without columns empty in every row; estimates marked ~."""
    def times(x, row):
        return "" if x is None else ("~" if row["estimated"] else "") + f"{x:.2f}x"
    rows = []
    for s in summary["rows"]:
        r, mark = s["record"], "~" if s["estimated"] else ""
        rows.append([s["label"] + (" (the library)" if s["anchor"] else ""), f"{mark}{s['gflops']:.1f}",
                     f"{mark}{r['median_ms']:.3f}", times(s["over_before"], s), times(s["over_naive"], s),
                     times(s["vs_library"], s) + (f" {r['baseline']}" if s["vs_library"] else "")])
    keep = [i for i, _ in enumerate(SUMMARY_COLUMNS) if any(cells[i] for cells in rows)]
    return [SUMMARY_COLUMNS[i] for i in keep], [[cells[i] for i in keep] for cells in rows]


# -- the wide sweep -------------------------------------------------------------------------------

def wide_summary(records: list[dict]) -> list[dict]:
    """Per rung and dtype over the wide sweep: the geometric mean of the speed relative to its
    baseline on the fit and the held-out problems apart, and the worst problem."""
    groups = defaultdict(list)
    for r in _wide_records(records):
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


def _wide_records(records: list[dict]) -> list[dict]:
    """The wide suite's timed records of rungs other than their baseline, with a ratio to it."""
    return [r for r in records if r.get("suite") == "wide" and r["status"] == "ok" and r.get("ratio")
            and r["kernel"] != r.get("baseline")]


WIDE_COLUMNS = ["rung", "dtype", "problems", "geomean vs baseline (fit)", "geomean (held-out)", "worst",
                "worst problem"]


def _wide_cells(row: dict) -> list[str]:
    """A wide_summary row as the cells of WIDE_COLUMNS."""
    return [row["kernel"], row["dtype"], str(row["problems"])] + [
        f"{row[s]:.3f}x" if row[s] else "" for s in ("fit", "held-out")] + [f"{row['worst']:.3f}x", row["worst_problem"]]


def wide_markdown(rows: list[dict]) -> str:
    return _markdown_table(WIDE_COLUMNS, [_wide_cells(r) for r in rows])


# -- plots ----------------------------------------------------------------------------------------

def plots(records: list[dict], folder: Path) -> tuple[list[tuple[str, str]], str | None]:
    """Draw the figures into folder: ([(file name, caption)], why there are none or None)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        return [], "matplotlib is not installed (pip install 'tilemm[report]'): no plots"
    series = _series(records)
    made = []
    labels = sorted({label for label, _ in series}, key=lambda lb: (_rung(lb.split()[0]), lb))
    cmap = plt.get_cmap("tab20")
    color = {label: cmap(i % 20) for i, label in enumerate(labels)}
    dtypes = sorted({d for _, d in series})
    any_estimated = any(r["status"] == "estimated" for pts in series.values() for _, r in pts)

    def save(fig, name, caption):
        fig.savefig(folder / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        made.append((name, caption))

    hollow_key = (Line2D([], [], linestyle="none", marker="o", markerfacecolor="white", color="gray"),
                  "hollow: estimated, not run")

    def figure(name, caption, title, xlabel, ylabel, draw, logx=True, logy=True, facets=True):
        """One panel per dtype (two to a row), one legend for them all, at the right."""
        panels = dtypes if facets and dtypes else [None]
        ncols = min(2, len(panels))
        nrows = -(-len(panels) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols + 3.4, 4.4 * nrows), squeeze=False)
        keys = {}
        for ax, dtype in zip(axes.ravel(), panels):
            for handle, label in draw(ax, dtype) or []:
                keys.setdefault(label, handle)
            ax.set_title(f"{title} ({dtype})" if dtype else title, fontsize=11)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            if logx:
                ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            for handle, label in zip(*ax.get_legend_handles_labels()):
                keys.setdefault(label, handle)
        for ax in axes.ravel()[len(panels):]:
            ax.set_visible(False)
        if any_estimated:
            keys.setdefault(hollow_key[1], hollow_key[0])
        fig.tight_layout()
        if keys:
            fig.legend(list(keys.values()), list(keys), fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 0.97))
        save(fig, name, caption)

    def points(ax, label, xs_ys, estimated):
        """A series: a line through every point, filled markers where measured, hollow where estimated."""
        xs, ys = zip(*xs_ys)
        ax.plot(xs, ys, color=color[label], label=label, marker="o", markersize=0.1, linewidth=1.4)
        measured = [p for p, e in zip(xs_ys, estimated) if not e]
        guessed = [p for p, e in zip(xs_ys, estimated) if e]
        if measured:
            ax.plot(*zip(*measured), linestyle="none", marker="o", markersize=5, color=color[label])
        if guessed:
            ax.plot(*zip(*guessed), linestyle="none", marker="o", markersize=7, markerfacecolor="white",
                    markeredgewidth=1.4, color=color[label])

    def lines(metric, with_seeds=False):
        def draw(ax, dtype):
            seeds_shown = False
            for (label, dt), pts in series.items():
                if dt != dtype:
                    continue
                points(ax, label, [(n, metric(r)) for n, r in pts], [r["status"] == "estimated" for _, r in pts])
                seeds = [(n, r["seed_figure"]["value"]) for n, r in pts
                         if with_seeds and (r.get("seed_figure") or {}).get("unit") == "GFLOP/s"]
                if seeds:
                    ax.plot(*zip(*seeds), linestyle=":", marker="x", markersize=7, color=color[label])
                    seeds_shown = True
            if seeds_shown:
                return [(Line2D([], [], linestyle=":", marker="x", color="gray"), "x: the seed's published figure")]
            return None
        return draw

    summary = ladder_summary(records)
    if summary:
        rows = summary["rows"]
        fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.4))
        ys = list(range(len(rows)))[::-1]
        for y, s in zip(ys, rows):
            c = "gray" if s["anchor"] else color.get(s["label"], "C0")
            ax.barh(y, s["gflops"], color="white" if s["estimated"] else c, edgecolor=c, linewidth=1.5,
                    hatch="//" if s["estimated"] else None)
            note = f"{s['gflops']:.3g}" + (f"  ({s['over_naive']:.3g}x naive)" if s["over_naive"] else "")
            ax.text(s["gflops"] * 1.08, y, ("~" if s["estimated"] else "") + note, va="center", fontsize=9)
        ax.set_yticks(ys, [s["label"] + (" (library)" if s["anchor"] else "") for s in rows], fontsize=10)
        ax.set_xscale("log")
        ax.set_xlim(right=max(s["gflops"] for s in rows) * 12)
        ax.set_xlabel("GFLOP/s (log scale; higher is faster)")
        ax.set_title(f"The ladder at n = {summary['n']} ({summary['dtype']})", fontsize=11)
        ax.grid(True, axis="x", which="both", alpha=0.3)
        fig.tight_layout()
        estimates = " Hatched bars are estimates (predicted from a smaller size), not runs." \
            if any(s["estimated"] for s in rows) else ""
        save(fig, "summary.png", f"Each rung's speed at n = {summary['n']} ({summary['dtype']}), in ladder order, "
                                 f"the library (gray) last; the figure beside a bar is its speed-up over the naive "
                                 f"rung.{estimates}")

    if series:               # square products measured: curves against n
        figure("gflops_vs_n.png", "Speed (2n³ flops over the median time) of each rung against the size n, one panel "
               "per dtype: higher is faster; a rung's line flattens where it reaches its limit. Hollow markers are "
               "estimated, not run; crosses are the seed's own published figure where it gave one.",
               "GFLOP/s against n", "n (an n x n x n product)", "GFLOP/s", lines(lambda r: r["gflops"], with_seeds=True))
        figure("time_vs_n.png", "Median time of one call against n, one panel per dtype: lower is faster; the time "
               "of a rung that does 2n³ flops at a steady rate grows eightfold each time n doubles. Hollow markers "
               "are estimated, not run.", "Time against n", "n (an n x n x n product)", "median time (ms)",
               lines(lambda r: r["median_ms"]))

    def speedup(ax, dtype):
        base = next((series[(name, dtype)] for name in NAIVE if (name, dtype) in series), None)
        if not base:
            return None
        base_at = dict(base)
        for (label, dt), pts in series.items():
            shared = [(n, r) for n, r in pts if dt == dtype and n in base_at]
            if shared:
                points(ax, label, [(n, base_at[n]["median_ms"] / r["median_ms"]) for n, r in shared],
                       [r["status"] == "estimated" or base_at[n]["status"] == "estimated" for n, r in shared])
        return None
    if any((name, d) in series for name in NAIVE for d in dtypes):
        figure("speedup_vs_naive.png", "How many times faster than the naive rung (the rung every other one "
               "improves on) each rung is at each n, one panel per dtype. Hollow markers: the rung's time or the "
               "naive rung's is estimated, not run.", "Speed-up over the naive rung", "n (an n x n x n product)",
               "x the naive rung", speedup)
    wide = _wide_records(records)
    if wide:
        def ratio_against_size(ax, _):
            for key in sorted({(r["kernel"], r["dtype"]) for r in wide}):
                rs = [r for r in wide if (r["kernel"], r["dtype"]) == key]
                ax.scatter([2.0 * r["m"] * r["n"] * r["k"] for r in rs], [r["ratio"] for r in rs], s=10,
                           label=f"{key[0]} ({key[1]})")
            ax.axhline(1.0, color="gray", linestyle="--")
        figure("ratio_vs_size.png", "The wide sweep: each problem's speed relative to the library on the same "
               "problem (above 1: faster than the library), against the problem's size in flops.",
               "The wide sweep against the library", "problem size (2 M N K flops)", "x the library",
               ratio_against_size, facets=False)
    roof = _roofline_figure(plt, series, color)
    if roof:
        save(*roof)
    return made, None


def _unit(record) -> tuple[str, int]:
    """(the datasheet peak a record's products ran on, products there per product): its rung's
    (registry.Kernel.unit), or its dtype's for a rung not in the registry."""
    try:
        kernel = registry.get(record["kernel"])
        compute = kernel.compute_dtype(record["dtype"]) or record["dtype"]
        problem = registry.Problem(record["m"], record["n"], record["k"], compute)
        return kernel.unit(problem, kernel.resolve(record.get("params") or {}))
    except (ValueError, TypeError, KeyError):
        return record["dtype"], 1


def _device_of(kernel: str) -> str:
    try:
        return registry.get(kernel).device
    except ValueError:
        return "cuda"


def roofs(records: list[dict], device: str) -> tuple[dict | None, str]:
    """(the roofs of the machine the records were measured on, where they come from): a GPU's
    datasheet, or the roofs a CPU run measured (see roofs.py)."""
    if device == "cuda":
        for name in dict.fromkeys(r["device"] for r in records):
            if machine.datasheet(name):
                return machine.datasheet(name), f"the {name} datasheet"
        return None, ""
    measured = next((r["host_roofs"] for r in records if r.get("host_roofs")), None)
    if not measured:
        return None, ""
    roofs = dict(measured)
    for dtype in ("float32", "float64"):   # a ceiling attained, not a peak: no rung measured above it
        fastest = [r["gflops"] / 1e3 for r in records if r["dtype"] == dtype and r["status"] == "ok" and r.get("gflops")]
        roofs[dtype] = max([roofs.get(dtype) or 0.0] + fastest)
    return roofs, (f"measured on this CPU: memory by a copy, compute the fastest rate reached (NumPy's BLAS at "
                   f"{measured['measured'].rsplit(' at ', 1)[-1]}, or a rung of this run): attained, not peak")


ROOF_COLORS = ("firebrick", "darkgreen", "purple", "darkgoldenrod", "navy", "teal")


def _roofline_figure(plt, series, color):
    """(figure, file name, caption) of the roofline, or None when no point has a traffic model."""
    placed = []                       # (label, dtype, n, record, intensity) at each rung's largest measured n
    for (label, dtype), pts in series.items():
        measured = [(n, r) for n, r in pts if r["status"] == "ok" and r.get("traffic_bytes")]
        if measured:
            n, r = measured[-1]
            placed.append((label, dtype, n, r, 2.0 * r["m"] * r["n"] * r["k"] / r["traffic_bytes"]))
    if not placed:
        return None
    device = "cuda" if any(_device_of(p[3]["kernel"]) == "cuda" for p in placed) else "cpu"
    placed = [p for p in placed if _device_of(p[3]["kernel"]) == device]     # one machine's roofs
    peaks, source = roofs([p[3] for p in placed], device)
    columns = 1 if len(placed) <= 16 else 2            # the legend: a point a line, and the roofs
    fig, ax = plt.subplots(figsize=(8 + 3.6 * columns, max(5.2, 0.24 * (len(placed) + 4) / columns + 1)))
    xs = [p[4] for p in placed]
    grid = np.logspace(np.log10(min(xs) / 4), np.log10(max(xs) * 4), 200)
    markers = "osD^v<>pP*Xh"
    for i, (label, dtype, n, r, ai) in enumerate(placed):
        ax.scatter([ai], [r["gflops"]], s=46, marker=markers[i % len(markers)], color=color[label], zorder=3,
                   label=f"{label} ({dtype}), n = {n}")
    if peaks and peaks.get("bandwidth_gbs"):
        bw = peaks["bandwidth_gbs"]
        units = sorted({_unit(p[3]) for p in placed} if device == "cuda" else {(p[1], 1) for p in placed})
        tops = []
        for k, (unit, work) in enumerate(units):
            peak = peaks.get(unit)
            if not peak:
                continue
            top = peak / work * 1e3                      # GFLOP/s in the problem's products
            tops.append(top)
            ridge = top / bw
            name = unit if work == 1 else f"{unit} / {work} products"
            ax.plot([ridge, grid[-1] * 4], [top, top], color=ROOF_COLORS[k % len(ROOF_COLORS)], linewidth=2,
                    linestyle=("-", (0, (6, 3)), (0, (2, 2)))[k % 3],       # roofs of equal height stay visible
                    label=f"compute roof, {name}: {top / 1e3:.4g} TFLOP/s")
        top = max(tops + [max(p[3]["gflops"] for p in placed)]) * 1.5
        x_mem = np.logspace(np.log10(grid[0]), np.log10(top / bw), 100)
        ax.plot(x_mem, x_mem * bw, color="black", linewidth=2, linestyle="--",
                label=f"memory roof: {bw:.4g} GB/s x intensity")
        caption_roofs = f"The roofs are {source}."
    else:
        best = max(p[3]["gflops"] for p in placed)
        ax.axhline(best, linestyle="--", color="gray", label=f"best measured here: {best:.0f} GFLOP/s")
        caption_roofs = "No roofs are known for this device: the dashed line is the best speed measured."
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flops per byte the rung's traffic model moves)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("Roofline: each rung at its largest measured n", fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, ncol=columns)
    fig.tight_layout()
    caption = ("Each rung at its largest measured n, placed by its arithmetic intensity (2MNK flops over the "
               "bytes its traffic model reads and writes) and its speed. Under the memory roof (bandwidth x "
               "intensity) a rung is bound by memory traffic, under a compute roof by arithmetic; caches serve "
               f"many modelled loads, so a point may sit above the memory roof. {caption_roofs}")
    return fig, "roofline.png", caption


# -- the folder -----------------------------------------------------------------------------------

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
         "td:first-child,th:first-child{text-align:left} td:last-child{text-align:left} "
         "figure{margin:1.5em 0} figcaption{max-width:900px;color:#333;font-size:14px;margin-top:.4em}")


def prepare(folder: Path) -> None:
    """Make folder ready for a new report, before any case runs: created where needed, checked
    writable, and the files of an earlier report there removed (a re-run replaces the report)."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--report {folder}: that is a file; name a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".tilemm-can-write"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--report {folder}: can't write there ({e.strerror or e})") from None
    for name in REPORT_FILES + PLOT_FILES:
        (folder / name).unlink(missing_ok=True)


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
    from .runner import with_ratios
    path = folder / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return with_ratios([normalized(r) for r in records if "kernel" in r and "status" in r])


def write(folder: Path, title: str = "tilemm report") -> Path:
    """results.md, the plots and index.html for the records in folder/results.jsonl."""
    records = load(folder)
    summary = ladder_summary(records)
    wide = wide_summary(records)
    md = [f"# {title}\n"]
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
