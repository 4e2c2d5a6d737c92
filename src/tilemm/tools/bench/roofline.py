"""The report's roofline: each rung at its largest measured size, placed by its arithmetic
intensity and its speed, under the roofs of the machine it ran on, one panel per unit (a dtype's
SIMT or tensor-core rate): each panel's roofline is min(bandwidth x intensity, the unit's roof),
the memory roof stopping at the ridge where the compute roof begins."""
from __future__ import annotations

import numpy as np

from tilemm.system import machine
from tilemm.ladder import registry
from tilemm.numerics.dtypes import is_exact


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
    """(the roofs of the machine the records were measured on in TFLOP/s and GB/s, where they come
    from): a GPU's datasheet, or on a CPU the memory roof a copy measured and, per dtype, the
    fastest rate reached (see roofs.py)."""
    if device == "cuda":
        for name in dict.fromkeys(r["device"] for r in records):
            if machine.datasheet(name):
                return machine.datasheet(name), f"the {name} datasheet"
        return None, ""
    measured = next((r["host_roofs"] for r in records if r.get("host_roofs")), None)
    if not measured:
        return None, ""
    roofs = dict(measured)
    for dtype in {r["dtype"] for r in records}:   # a ceiling attained, not a peak: no rung measured above it
        fastest = [r["gflops"] / 1e3 for r in records if r["dtype"] == dtype and r["status"] == "ok" and r.get("gflops")]
        roofs[dtype] = max([roofs.get(dtype) or 0.0] + fastest)
    blas = measured["measured"].rsplit(" at ", 1)[-1]
    integers = sorted({r["dtype"] for r in records if is_exact(r["dtype"])})
    how = (f"measured on this CPU, attained rather than peak: memory by a large copy; floats the faster of "
           f"NumPy's BLAS at {blas} and the rungs of this run")
    if integers:
        how += (f"; {', '.join(integers)} the fastest rate a rung of this run reached (NumPy has no integer "
                "BLAS to measure the integer units with)")
    return roofs, how


def number(x: float) -> str:
    """A rate as the legend shows it: 67,000 or 220.2, never 6.7e+04."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


ROOF_COLORS = ("firebrick", "darkgreen", "purple", "darkgoldenrod", "navy", "teal")
MARKERS = "osD^v<>pP*Xh"


def placed_points(series) -> list[tuple]:
    """(label, dtype, n, record, intensity) of each rung at its largest measured n with a traffic
    model, leaving out GPU rungs run in an emulator (their speed is the emulator's)."""
    placed = []
    for (label, dtype), pts in series.items():
        measured = [(n, r) for n, r in pts if r["status"] == "ok" and r.get("traffic_bytes") and not r.get("emulated")]
        if measured:
            n, r = measured[-1]
            placed.append((label, dtype, n, r, 2.0 * r["m"] * r["n"] * r["k"] / r["traffic_bytes"]))
    return placed


def roofline_figure(plt, series, color):
    """(figure, file name, caption) of the roofline, or None when no point has a traffic model."""
    placed = placed_points(series)
    if not placed:
        return None
    device = "cuda" if any(device_of(p[3]["kernel"]) == "cuda" for p in placed) else "cpu"
    placed = [p for p in placed if device_of(p[3]["kernel"]) == device]     # one machine's roofs
    peaks, source = roofs([p[3] for p in placed], device)
    units = sorted({unit_of(p[3]) if device == "cuda" else (p[1], 1) for p in placed})
    fig, axes = plt.subplots(len(units), 1, figsize=(11, 4.6 * len(units)), squeeze=False)
    missing = []
    for k, ((unit, work), ax) in enumerate(zip(units, axes.ravel())):
        points = [p for p in placed if (unit_of(p[3]) if device == "cuda" else (p[1], 1)) == (unit, work)]
        name = unit if work == 1 else f"{unit} / {work} products"
        rate = "GOP/s" if is_exact(unit) else "GFLOP/s"      # the axis's unit, in the legend too
        xs = [p[4] for p in points]
        for i, (label, dtype, n, r, ai) in enumerate(points):
            ax.scatter([ai], [r["gflops"]], s=46, marker=MARKERS[i % len(MARKERS)], color=color[label], zorder=3,
                       label=f"{label} ({dtype}), n = {n}: {number(r['gflops'])} {rate}")
        bw = (peaks or {}).get("bandwidth_gbs")
        top = (peaks or {}).get(unit)
        top = top / work * 1e3 if top else None          # GFLOP/s in the problem's own products
        lo, hi = min(xs) / 4, max(xs) * 4
        if bw and top:
            ridge = top / bw
            lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
            x_mem = np.logspace(np.log10(lo), np.log10(ridge), 50)
            ax.plot(x_mem, x_mem * bw, color="black", linewidth=2, linestyle="--",
                    label=f"memory roof: {number(bw)} GB/s x intensity, up to the ridge at {ridge:.3g} flop/byte")
            ax.plot([ridge, hi], [top, top], color=ROOF_COLORS[k % len(ROOF_COLORS)], linewidth=2,
                    label=f"compute roof, {name}: {number(top)} {rate}")
        elif bw:
            missing.append(name)
            x_mem = np.logspace(np.log10(lo), np.log10(hi), 50)
            ax.plot(x_mem, x_mem * bw, color="black", linewidth=2, linestyle="--",
                    label=f"memory roof: {number(bw)} GB/s x intensity (no compute roof known for {name})")
        else:
            missing.append(name)
            best = max(p[3]["gflops"] for p in points)
            ax.axhline(best, linestyle="--", color="gray", label=f"best measured here: {number(best)} {rate}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xlabel("arithmetic intensity (flops per byte the rung's traffic model moves)")
        ax.set_ylabel("GOP/s (2MNK / time)" if is_exact(unit) else rate)
        ax.set_title(f"Roofline, {name}: each rung at its largest measured n", fontsize=11)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    caption = ("Each rung at its largest measured n, placed by its arithmetic intensity (2MNK flops over the "
               "bytes its traffic model reads and writes) and its speed, one panel per unit it computes on. The "
               "roofline of a panel is the lower of the memory roof (bandwidth x intensity, dashed, up to the "
               "ridge) and the unit's compute roof (solid, from the ridge on): under the first a rung is bound "
               "by memory traffic, under the second by arithmetic; caches serve many modelled loads, so a point "
               "may sit above the memory roof.")
    caption += f" The roofs are {source}." if peaks else " No roofs are known for this device: the dashed line is " \
                                                        "the best speed measured."
    if missing and peaks:
        caption += f" No compute roof is known for {', '.join(missing)}."
    return fig, "roofline.png", caption
