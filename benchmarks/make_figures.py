"""The figure on each rung page, generated: the rung's own measured plot (it, the rung before and
the library, over n, from the canonical records) and, for the SIMT rungs, which threads read which
elements of A and B (counted in the CUDA simulator); for the tensor-core rungs a schematic.

    python3 benchmarks/make_figures.py            # write docs/images/rungs/*.png and its inputs' digest
    python3 benchmarks/make_figures.py --check    # exit 1 if a figure is missing or its inputs changed

The pixels depend on matplotlib's version, so --check compares the SHA-256 of every input (this
script, the diagrams' module, the records and the kernels' source files) with the digest written
beside the figures (docs/images/rungs/inputs.sha256), and asks that every figure exists.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")      # the diagrams count loads in the simulator

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]

from harness.records import RESULTS, read_records, rung_label  # noqa: E402

IMAGES = ROOT / "docs/images/rungs"
DIGEST = IMAGES / "inputs.sha256"
COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]

# page -> (record, the rungs drawn: this one first, then the one before, then the library)
MEASURED = {
    "r00-numpy": ("cpu/ladder.jsonl", ["numpy", "cpu-tiled"]),
    "r01-cpu-naive": ("cpu/ladder.jsonl", ["cpu-naive", "numpy"]),
    "r02-cpu-tiled": ("cpu/ladder.jsonl", ["cpu-tiled", "cpu-naive", "numpy"]),
    "r03-naive": ("h200/ladder.jsonl", ["naive", "cublas"]),
    "r04-naive-global": ("h200/ladder.jsonl", ["naive-global", "naive", "cublas"]),
    "r05-uncoalesced": ("h200/ladder.jsonl", ["uncoalesced", "naive-global", "naive", "cublas"]),   # naive: the lesson's 5x
    "r06-tiled": ("h200/ladder.jsonl", ["tiled", "uncoalesced", "cublas"]),
    "r07-rect": ("h200/ladder.jsonl", ["rect", "tiled", "cublas"]),
    "r08-regblock": ("h200/ladder.jsonl", ["regblock", "rect", "cublas"]),
    # the ladder's record times the tensor-core rungs on the float32 and int32 they compute
    # (rungs 10 and 12 compute neither: their pages show their own sweeps' tables)
    "r11-tensorcore-int": ("h200/ladder.jsonl", ["tensorcore-int", "regblock", "cublas"]),
    "r13-tensorcore-f32": ("h200/ladder.jsonl", ["tensorcore-f32", "regblock", "cublas"]),
    "cublas": ("h200/ladder.jsonl", ["cublas", "tensorcore-f32", "regblock"]),
}
FP8_RECORD = "h200/fp8_vs_scaled_mm.jsonl"
# page -> (a sweep over many shapes, its dtypes, the variants drawn: this rung first)
SWEEPS = {
    "r10-tensorcore": ("h200/tensorcore_vs_library.jsonl.gz", ["bfloat16", "float16"], ["tensorcore", "cublas"]),
    "r12-tensorcore-f64": ("h200/float64_vs_dgemm.jsonl.gz", ["float64"], ["tensorcore-f64", "f64-triton", "cublas"]),
    "r14-tensorcore-complex": ("h200/complex_vs_library.jsonl.gz", ["complex64", "complex128"],
                               ["tensorcore-complex", "cublas"]),
}
SWEEP_NAMES = {"cublas": "the library (cuBLAS)", "f64-triton": "rung 10's Triton programs, float64"}


def figure_names() -> list[str]:
    """Every PNG this script writes (the docs' pages link them by these names)."""
    import rung_diagrams
    names = [f"{page}-measured.png" for page in [*MEASURED, *SWEEPS]] + ["scaled-fp8-measured.png"]
    names += [f"{page}-threads.png" for page in rung_diagrams.SIMT_PAGES]
    names += [f"{page}-schematic.png" for page in rung_diagrams.SCHEMATICS]
    return sorted(names)


def inputs() -> list[Path]:
    """What the figures are drawn from: a change to any of these makes them stale."""
    import rung_diagrams
    files = [Path(__file__).resolve(), Path(rung_diagrams.__file__).resolve(), ROOT / "benchmarks/harness/records.py"]
    files += sorted({RESULTS / record for record, _ in MEASURED.values()} | {RESULTS / FP8_RECORD}
                    | {RESULTS / record for record, _, _ in SWEEPS.values()})
    files += sorted((ROOT / "src/tilemm/ladder/simt").glob("r0*.py"))
    return files


def digest() -> str:
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {os.path.relpath(p, ROOT)}" for p in inputs()]
    return "\n".join(lines) + "\n"


def measured(page: str, plt) -> None:
    """GFLOP/s over n of this rung (each of its measured parameter sets), the rung before and the
    library, float32 and int32 side by side, on the device the record names."""
    record, rungs = MEASURED[page]
    records = [r for r in read_records(record) if r["status"] == "ok" and r["kernel"] in rungs]
    dtypes = [d for d in ("float32", "int32") if any(r["dtype"] == d and r["kernel"] == rungs[0] for r in records)]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.4 * len(dtypes), 3.6), dpi=80, squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        lines = {}
        for r in records:
            if r["dtype"] == dtype:
                lines.setdefault(rung_label(r).replace("`", ""), []).append(r)
        order = sorted(lines, key=lambda label: (rungs.index(label.split(" ")[0]), label))
        for i, label in enumerate(order):
            rs = sorted(lines[label], key=lambda r: r["m"])
            this = label.split(" ")[0] == rungs[0]
            ax.plot([r["m"] for r in rs], [r["gflops"] for r in rs], marker="o", lw=2.2 if this else 1.2,
                    ls="-" if this else "--", color=COLOURS[i % len(COLOURS)], label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["m"] for r in records}), [str(m) for m in sorted({r["m"] for r in records})])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("n (n x n x n)")
        ax.set_ylabel("GFLOP/s (log scale)")
        ax.set_title(dtype, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    device = records[0]["device"].removeprefix("CPU: ")
    fig.suptitle(f"{rungs[0]} on {device}, measured", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMAGES / f"{page}-measured.png", metadata={"Software": None})
    plt.close(fig)


def sweep(page: str, plt) -> None:
    """Each problem of a sweep over shapes: this rung's speed over the library's on the same problem
    (and the rung it grew from, where the sweep timed it), against the problem's size (2MNK)."""
    record, dtypes, variants = SWEEPS[page]
    records = [r for r in read_records(record) if r.get("status", "ok") == "ok"]

    def problem(r):
        return r["dtype"], r["m"], r["n"], r["k"], r.get("layout"), r.get("split"), r.get("tag")
    library = {problem(r): r["tflops"] for r in records if r["variant"] == "cublas"}
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(4.4 * len(dtypes), 6.5), 3.6), dpi=80, squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        for i, variant in enumerate(variants[:-1]):
            rs = [r for r in records if r["dtype"] == dtype and r["variant"] == variant and problem(r) in library]
            ax.scatter([2 * r["m"] * r["n"] * r["k"] for r in rs], [r["tflops"] / library[problem(r)] for r in rs],
                       s=14, marker="o" if i == 0 else "x", color=COLOURS[i], label=SWEEP_NAMES.get(variant, variant))
        ax.axhline(1.0, color="#c44e52", lw=1, ls="--", label=SWEEP_NAMES["cublas"])
        ax.set_xscale("log")
        ax.set_xlabel("2MNK of the problem (log scale)")
        ax.set_ylabel("speed / the library's")
        ax.set_title(dtype, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.suptitle(f"{variants[0]} on {records[0]['device']}: each problem of the sweep, whole calls", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMAGES / f"{page}-measured.png", metadata={"Software": None})
    plt.close(fig)


def fp8_measured(plt) -> None:
    """scaled_matmul's TFLOP/s beside torch._scaled_mm's, each accumulation, at each size."""
    records = [r for r in read_records(FP8_RECORD) if r["status"] == "ok"
               and r["variant"] in ("tilemm", "tilemm-fast", "scaled_mm", "scaled_mm-fast")]
    sizes = sorted({r["m"] for r in records})
    variants = ["tilemm", "scaled_mm", "tilemm-fast", "scaled_mm-fast"]
    names = {"tilemm": "scaled_matmul", "tilemm-fast": "scaled_matmul, fast accumulation",
             "scaled_mm": "torch._scaled_mm", "scaled_mm-fast": "torch._scaled_mm, fast accumulation"}
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=80)
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        by_size = {r["m"]: r["tflops"] for r in records if r["variant"] == variant}
        ax.bar([j + i * width for j in range(len(sizes))], [by_size.get(s, 0) for s in sizes], width,
               color=COLOURS[i], label=names[variant])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))], [f"{s}³" for s in sizes])
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"float8 e4m3 products on {records[0]['device']}, measured", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMAGES / "scaled-fp8-measured.png", metadata={"Software": None})
    plt.close(fig)


def write_all() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import rung_diagrams
    IMAGES.mkdir(parents=True, exist_ok=True)
    for page in MEASURED:
        measured(page, plt)
    for page in SWEEPS:
        sweep(page, plt)
    fp8_measured(plt)
    for page in rung_diagrams.SIMT_PAGES:
        rung_diagrams.threads(page, plt, IMAGES / f"{page}-threads.png")
    for page, draw in rung_diagrams.SCHEMATICS.items():
        draw(plt, IMAGES / f"{page}-schematic.png")
    for name in figure_names():                  # 256 colours: a third of the bytes (the repository stays small)
        from PIL import Image
        with Image.open(IMAGES / name) as image:
            small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        small.save(IMAGES / name, optimize=True)
    DIGEST.write_text(digest())


def stale() -> list[str]:
    """The figures missing, and the inputs' digest if it differs from the one written with them."""
    found = [f"docs/images/rungs/{name}" for name in figure_names() if not (IMAGES / name).exists()]
    if not DIGEST.exists() or DIGEST.read_text() != digest():
        found.append(f"{os.path.relpath(DIGEST, ROOT)} (an input changed)")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a figure is missing or its inputs changed")
    args = ap.parse_args()
    if args.check:
        missing = stale()
        if missing:
            sys.exit("out of step with their inputs: " + ", ".join(missing) + " (run python3 benchmarks/make_figures.py)")
        return
    write_all()
    print("wrote", len(figure_names()), "figures under docs/images/rungs/ and", DIGEST.relative_to(ROOT))


if __name__ == "__main__":
    main()
