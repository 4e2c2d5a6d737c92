"""The report's figures: each rung's speed against N, over the naive rung, and on the roofline of
its device (matplotlib, the `report` extra)."""
from __future__ import annotations

from pathlib import Path

from tilemm.tools.bench.roofline import roofline_figure
from tilemm.tools.bench.summaries import NAIVE, ladder_summary, rung_of, series_of, times, wide_records


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
                  "hollow: estimated, not run\n(scaled from smaller sizes: may\nmiss a cache cliff)")
    estimated = (" Hollow markers are estimated, not run: scaled from the rung's largest measured sizes, they "
                 "may miss a cache cliff (a size where the operands outgrow a cache and each flop costs more), "
                 "so the real time may be longer." if any_estimated else "")
    seeds_drawn = any((r.get("seed_figure") or {}).get("unit") == "GFLOP/s" for pts in series.values() for _, r in pts)

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
            note = f"{s['gflops']:.3g}" + (f"  ({times(s['over_naive'])} naive)" if s["over_naive"] else "")
            ax.text(s["gflops"] * 1.08, y, ("~" if s["estimated"] else "") + note, va="center", fontsize=9)
        ax.set_yticks(ys, [s["label"] + (" (library)" if s["anchor"] else "") for s in rows], fontsize=10)
        ax.set_xscale("log")
        ax.set_xlim(right=max(s["gflops"] for s in rows) * 12)
        ax.set_xlabel("GFLOP/s (log scale; higher is faster)")
        ax.set_title(f"The ladder at n = {summary['n']} ({summary['dtype']})", fontsize=11)
        ax.grid(True, axis="x", which="both", alpha=0.3)
        fig.tight_layout()
        estimates = " Hatched bars are estimates (scaled from smaller sizes, which may miss a cache cliff), not runs." \
            if any(s["estimated"] for s in rows) else ""
        save(fig, "summary.png", f"Each rung's speed at n = {summary['n']} ({summary['dtype']}), in ladder order, "
                                 f"the library (gray) last; the figure beside a bar is its speed-up over the naive "
                                 f"rung.{estimates}")

    if series:               # square products measured: curves against n
        figure("gflops_vs_n.png", "Speed (2n³ flops over the median time) of each rung against the size n, one panel "
               "per dtype: higher is faster; a rung's line flattens where it reaches its limit." + estimated
               + (" Crosses are the seed's own published figure where it gave one." if seeds_drawn else ""),
               "GFLOP/s against n", "n (an n x n x n product)", "GFLOP/s", lines(lambda r: r["gflops"], with_seeds=True))
        figure("time_vs_n.png", "Median time of one call against n, one panel per dtype: lower is faster; the time "
               "of a rung that does 2n³ flops at a steady rate grows eightfold each time n doubles." + estimated,
               "Time against n", "n (an n x n x n product)", "median time (ms)",
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
               "improves on) each rung is at each n, one panel per dtype." + (" Hollow markers: the rung's time or "
               "the naive rung's is estimated, not run (it may miss a cache cliff)." if any_estimated else ""), "Speed-up over the naive rung", "n (an n x n x n product)",
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
