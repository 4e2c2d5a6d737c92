"""The report: results.jsonl, tables (Markdown and HTML) and PNG plots in one folder.

Plots need matplotlib (the `report` extra); without it the tables are still written and
the page says which plots are missing and why.
"""
from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from .. import machine, registry

COLUMNS = ["kernel", "params", "dtype", "m x n x k", "status", "median ms", "GFLOP/s", "vs baseline",
           "% peak", "GB/s (model)", "seed's figure"]


def row(r: dict) -> list[str]:
    params = ",".join(f"{k}={v}" for k, v in r["params"].items())
    if r.get("host_inputs"):
        params = (params + ",with copies").strip(",")
    shape = f"{r['m']}x{r['n']}x{r['k']}"
    if r["status"] not in ("ok", "estimated"):
        return [r["kernel"], params, r["dtype"], shape, r["status"], r.get("reason", ""), "", "", "", "", ""]
    fig = r.get("seed_figure")
    seed = f"{fig['value']:g} {fig['unit']} ({r['seed']})" if fig else ""
    ratio = f"{r['ratio']:.2f}x {r['baseline']}" if r.get("ratio") else ""
    if r["status"] == "estimated":       # not run: the time predicted from a smaller size
        return [r["kernel"], params, r["dtype"], shape, "estimated", f"~{r['median_ms']:.0f}", f"~{r['gflops']:.1f}",
                ratio and "~" + ratio, "", "", seed]
    return [r["kernel"], params, r["dtype"], shape, "ok", f"{r['median_ms']:.3f}", f"{r['gflops']:.1f}",
            ratio, f"{100 * r['peak_fraction']:.0f}%" if r.get("peak_fraction") else "",
            f"{r['gbps']:.0f}" if r.get("gbps") else "", seed]


def markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in records]
    return "\n".join(lines) + "\n"


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
            ratios = [r["ratio"] for r in rs if r.get("tag", "").endswith("/" + split)]
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
    lines = ["| " + " | ".join(WIDE_COLUMNS) + " |", "|" + "---|" * len(WIDE_COLUMNS)]
    lines += ["| " + " | ".join(_wide_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _series(records):
    """(kernel label, dtype) -> sorted [(n, record)] for square, device-resident cases."""
    out = defaultdict(list)
    for r in records:
        if r["status"] in ("ok", "estimated") and r["m"] == r["n"] == r["k"] and not r.get("host_inputs"):
            label = r["kernel"] + "".join(f" {k}={v}" for k, v in r["params"].items())
            out[(label, r["dtype"])].append((r["n"], r))
    return {key: sorted(v, key=lambda x: x[0]) for key, v in out.items()}


def plots(records: list[dict], folder: Path) -> tuple[list[str], str | None]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (pip install 'tilemm[report]'): no plots"
    series = _series(records)
    made = []
    labels = sorted({label for label, _ in series})
    cmap = plt.get_cmap("tab20")
    color = {label: cmap(i % 20) for i, label in enumerate(labels)}
    dtypes = sorted({d for _, d in series})

    def figure(name, title, xlabel, ylabel, draw, logx=True, logy=False, facets=False, legend_outside=False):
        panels = dtypes if facets and dtypes else [None]
        width = 5.2 * len(panels) + 1 + (4 if legend_outside else 0)
        fig, axes = plt.subplots(1, len(panels), figsize=(width, 4.6), squeeze=False)
        for ax, dtype in zip(axes[0], panels):
            draw(ax, dtype) if facets else draw(ax)
            ax.set_title(f"{title} ({dtype})" if dtype else title, fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            if logx:
                ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                if legend_outside:
                    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
                else:
                    ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        made.append(name)

    def lines(metric, with_seeds=False):
        def draw(ax, dtype):
            for (label, dt), pts in series.items():
                if dt != dtype:
                    continue
                ax.plot([n for n, _ in pts], [metric(r) for _, r in pts], marker="o", color=color[label], label=label)
                estimated = [(n, metric(r)) for n, r in pts if r["status"] == "estimated"]
                if estimated:           # predicted, not run: hollow markers
                    ax.plot(*zip(*estimated), linestyle="none", marker="o", markersize=9, markerfacecolor="white",
                            color=color[label], label=f"{label}: estimated, not run")
                seeds = [(n, r["seed_figure"]["value"]) for n, r in pts
                         if with_seeds and r.get("seed_figure", {}).get("unit") == "GFLOP/s"]
                if seeds:
                    ax.plot(*zip(*seeds), linestyle=":", marker="x", color=color[label],
                            label=f"{label}: the seed's figure")
        return draw

    figure("gflops_vs_n.png", "GFLOP/s against n", "n (square n x n x n)", "GFLOP/s",
           lines(lambda r: r["gflops"], with_seeds=True), logy=True, facets=True)
    figure("time_vs_n.png", "Time against n", "n", "median time (ms)",
           lines(lambda r: r["median_ms"]), logy=True, facets=True)

    def speedup(ax, only):
        for (label, dtype), pts in series.items():
            if dtype != only:
                continue
            base = next((v for (lb, dt), v in series.items() if dt == dtype and lb in ("naive", "cpu-naive")), None)
            if not base:
                continue
            bt = {n: r["median_ms"] for n, r in base}
            xs = [(n, bt[n] / r["median_ms"]) for n, r in pts if n in bt]
            ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", color=color[label], label=label)
    figure("speedup_vs_naive.png", "Speed-up over the naive rung", "n", "x naive", speedup, logy=True, facets=True)
    wide = _wide_records(records)
    if wide:
        def ratio_against_size(ax):
            for label in sorted({(r["kernel"], r["dtype"]) for r in wide}):
                rs = [r for r in wide if (r["kernel"], r["dtype"]) == label]
                ax.scatter([2.0 * r["m"] * r["n"] * r["k"] for r in rs], [r["ratio"] for r in rs], s=10,
                           label=f"{label[0]} ({label[1]})")
            ax.axhline(1.0, color="gray", linestyle="--")
        figure("ratio_vs_size.png", "The wide sweep: each problem's speed relative to the baseline",
               "problem size (2 M N K flops)", "x baseline", ratio_against_size, logy=True)
    figure("roofline.png", "Roofline: each kernel at its largest n (datasheet roofs)",
           "arithmetic intensity (FLOP / byte, traffic model)", "GFLOP/s", lambda ax: _roofline(ax, series), logy=True,
           legend_outside=True)
    return made, None


def _unit(record) -> tuple[str, int]:
    """(the datasheet peak a record's products ran on, products there per product): its rung's
    (registry.Kernel.unit), or its dtype's for a rung no longer registered."""
    try:
        kernel = registry.get(record["kernel"])
        compute = kernel.compute_dtype(record["dtype"]) or record["dtype"]
        problem = registry.Problem(record["m"], record["n"], record["k"], compute)
        return kernel.unit(problem, kernel.resolve(record.get("params") or {}))
    except (ValueError, TypeError, KeyError):
        return record["dtype"], 1


def _roofline(ax, series):
    import numpy as np
    names = {r["device"] for pts in series.values() for _, r in pts}
    peaks = next((machine.datasheet(name) for name in names if machine.datasheet(name)), None)
    xs = []
    for (label, dtype), pts in series.items():
        measured = [(n, r) for n, r in pts if r["status"] == "ok"]
        if not measured:
            continue
        n, r = measured[-1]
        if not r.get("traffic_bytes"):
            continue
        ai = 2.0 * r["m"] * r["n"] * r["k"] / r["traffic_bytes"]
        xs.append(ai)
        ax.scatter([ai], [r["gflops"]], label=f"{label} ({dtype}) n={n}", s=18)
    if not xs:
        return
    grid = np.logspace(np.log10(min(xs) / 4), np.log10(max(xs) * 4), 100)
    if peaks:
        bw = peaks["bandwidth_gbs"]
        for unit, work in sorted({_unit(pts[-1][1]) for pts in series.values()}):
            peak = peaks.get(unit)
            if peak:
                name = unit if work == 1 else f"{unit} / {work}"   # an emulating rung's products per product
                ax.plot(grid, np.minimum(grid * bw, peak / work * 1e3), "--",
                        label=f"roof {name}: {peak / work:.4g} TFLOP/s, {bw:g} GB/s")
    else:
        best = max(r["gflops"] for pts in series.values() for _, r in pts)
        ax.axhline(best, linestyle="--", color="gray", label=f"best measured here: {best:.0f} GFLOP/s")


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


def load(folder: Path) -> list[dict]:
    """Every record the runs wrote into folder/results.jsonl, with ratios derived."""
    from .runner import with_ratios
    path = folder / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return with_ratios(records)


def write(folder: Path, title: str = "tilemm report") -> Path:
    """Tables, plots and index.html for everything in folder/results.jsonl."""
    records = load(folder)
    summary = wide_summary(records)
    (folder / "results.md").write_text(markdown(records) + (("\n## The wide sweep\n\n" + wide_markdown(summary))
                                                            if summary else ""))
    images, why_not = plots(records, folder)
    body = [f"<h1>{html.escape(title)}</h1>"]
    for device in dict.fromkeys(r["device"] for r in records):  # where the figures were measured
        first = next(r for r in records if r["device"] == device)
        dates = sorted({r["date"][:10] for r in records if r["device"] == device})
        body.append(f"<p>Measured on <b>{html.escape(device)}</b>, {html.escape(', '.join(dates))}; versions: "
                    f"{html.escape(', '.join(f'{k} {v}' for k, v in first['versions'].items()))}</p>")
    if why_not:
        body.append(f"<p><b>No plots:</b> {html.escape(why_not)}</p>")
    body += [f'<figure><img src="{name}" alt="{name}" style="max-width:100%"><figcaption>{name}</figcaption></figure>'
             for name in images]
    if summary:
        body.append("<h2>The wide sweep</h2><table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in WIDE_COLUMNS)
                    + "</tr>")
        for r in summary:
            body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _wide_cells(r)) + "</tr>")
        body.append("</table>")
    for suite in dict.fromkeys(r["suite"] for r in records):
        rows = [r for r in records if r["suite"] == suite]
        body.append(f"<h2>Suite {html.escape(suite)}</h2><table><tr>"
                    + "".join(f"<th>{c}</th>" for c in COLUMNS) + "</tr>")
        body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row(r)) + "</tr>" for r in rows]
        body.append("</table>")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>tilemm report</title><style>"
            "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}</style></head><body>"
            + "\n".join(body) + SELF_CHECK + "</body></html>\n")
    (folder / "index.html").write_text(page)
    return folder / "index.html"
