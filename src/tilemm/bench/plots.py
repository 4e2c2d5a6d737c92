"""The report's figures: each rung's speed against N, over the naive rung, and on the roofline of
its device (matplotlib, the `report` extra)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import machine, registry
from .summaries import NAIVE, ladder_summary, rung_of, series_of, wide_records


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
    series = series_of(records)
    made = []
    labels = sorted({label for label, _ in series}, key=lambda lb: (rung_of(lb.split()[0]), lb))
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
    wide = wide_records(records)
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
    roof = roofline_figure(plt, series, color)
    if roof:
        save(*roof)
    return made, None


def unit_of(record) -> tuple[str, int]:
    """(the datasheet peak a record's products ran on, products there per product): its rung's
    (registry.Kernel.unit), or its dtype's for a rung not in the registry."""
    try:
        kernel = registry.get(record["kernel"])
        compute = kernel.compute_dtype(record["dtype"]) or record["dtype"]
        problem = registry.Problem(record["m"], record["n"], record["k"], compute)
        return kernel.unit(problem, kernel.resolve(record.get("params") or {}))
    except (ValueError, TypeError, KeyError):
        return record["dtype"], 1


def device_of(kernel: str) -> str:
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


def roofline_figure(plt, series, color):
    """(figure, file name, caption) of the roofline, or None when no point has a traffic model."""
    placed = []                       # (label, dtype, n, record, intensity) at each rung's largest measured n
    for (label, dtype), pts in series.items():
        measured = [(n, r) for n, r in pts if r["status"] == "ok" and r.get("traffic_bytes")]
        if measured:
            n, r = measured[-1]
            placed.append((label, dtype, n, r, 2.0 * r["m"] * r["n"] * r["k"] / r["traffic_bytes"]))
    if not placed:
        return None
    device = "cuda" if any(device_of(p[3]["kernel"]) == "cuda" for p in placed) else "cpu"
    placed = [p for p in placed if device_of(p[3]["kernel"]) == device]     # one machine's roofs
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
        units = sorted({unit_of(p[3]) for p in placed} if device == "cuda" else {(p[1], 1) for p in placed})
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
