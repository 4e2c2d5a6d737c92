"""The tables and plots the README and the docs show, generated from the canonical records in
benchmarks/results/<device>/ (benchmarks/results/INDEX.md lists them).

    python3 benchmarks/make_tables.py            # write docs/tables/*.md, docs/images/*.png, README's block
    python3 benchmarks/make_tables.py --check    # exit 1 if a table or README's block differs from its records

Writes docs/tables/*.md (markdown tables the docs include), the README's headline block between
`<!-- results:begin -->` and `<!-- results:end -->` (one table per device: rung, speed, ratio to the
library) and two plots in docs/images/ (matplotlib). --check compares the text it would write with
the committed files; the plots' pixels depend on matplotlib's version, so --check asks only that
they exist (their figures are the tables').
"""
import argparse
import sys
from pathlib import Path

from harness import geomean
from harness.records import RESULTS, read_records, rung_label

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "docs/tables"
IMAGES = ROOT / "docs/images"
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
# the CPU rungs and the SIMT rungs in teaching order, then the library
LADDER_ORDER = ["cpu-naive", "cpu-tiled", "numpy", "naive", "naive-global", "uncoalesced", "tiled", "rect", "regblock",
                "tensorcore-tutorial", "tensorcore", "tensorcore-int", "tensorcore-f64", "tensorcore-f32",
                "tensorcore-complex", "cublas"]
SIXTEEN_BIT_LABEL = {"bfloat16": "bf16", "float16": "fp16", "int8": "int8 -> int32", "float64": "float64"}


def speed(x: float) -> str:
    """A GFLOP/s or TFLOP/s figure to three digits or so."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def source(name: str, records: list[dict]) -> str:
    """The line under a table: its record, GPU and date."""
    devices = ", ".join(sorted({r["device"] for r in records}))
    dates = sorted({r["date"][:10] for r in records})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return f"\n*{devices}, {when}; record: `benchmarks/results/{name}` (`benchmarks/make_tables.py` writes this table).*\n"


def ladder_table(name: str, library: str) -> tuple[str, list[dict]]:
    """GFLOP/s of each rung at each size, float32 and int32, and its ratio to the library at the
    largest size measured."""
    records = [r for r in read_records(name) if r["status"] == "ok"]
    sizes = sorted({r["m"] for r in records})
    text = []
    for dtype in ("float32", "int32"):
        rows = {}
        for r in records:
            if r["dtype"] == dtype:
                rows.setdefault(rung_label(r), {})[r["m"]] = r
        if not rows:
            continue
        top = max(sizes)
        base = next((v[top] for label, v in rows.items() if label == f"`{library}`" and top in v), None)
        body = []
        for label, by_size in sorted(rows.items(), key=lambda kv: (LADDER_ORDER.index(kv[0].split("`")[1]), kv[0])):
            vs = ratio(by_size[top]["gflops"] / base["gflops"]) if base and top in by_size else ""
            body.append([label] + [speed(by_size[s]["gflops"]) if s in by_size else "" for s in sizes] + [vs])
        text.append(f"**{dtype}**, GFLOP/s (n x n x n):\n\n"
                    + table(["rung"] + [f"{s}" for s in sizes] + [f"vs `{library}` at {top}"], body))
    return "\n".join(text) + source(name, records), records


def seeds_table(name: str) -> str:
    """The seeds' own cases: each rung's figure beside the seed's (the seeds ran older GPUs)."""
    records = [r for r in read_records(name) if r["status"] == "ok" and r.get("seed_figure") and not r.get("host_inputs")]
    rows = []
    for r in sorted(records, key=lambda r: (r["seed"], r["dtype"], r["m"], LADDER_ORDER.index(r["kernel"]))):
        fig = r["seed_figure"]
        ours = f"{r['median_ms']:.3f} ms" if fig["unit"] == "ms" else f"{speed(r['gflops'])} GFLOP/s"
        rows.append([r["seed"], rung_label(r), r["dtype"], f"{r['m']}", ours, f"{fig['value']:g} {fig['unit']}", fig["where"]])
    return table(["seed", "rung", "dtype", "n", "measured", "the seed's figure", "where the seed measured"], rows) \
        + source(name, records)


def sweep_rows(records: list[dict]) -> list[list]:
    """Over the wide sweep's held-out half, whole calls: each dtype's rung and the default against
    the library rung and cuBLAS (torch.matmul), and on products with M, N, K >= 2048."""
    rows = []
    for dtype in ("bfloat16", "float16", "int8", "float64"):
        mine = [r for r in records if r["dtype"] == dtype and r["status"] == "ok"]
        if not mine:
            continue
        rung = next(r["kernel"] for r in mine if r["variant"] not in ("default", "library", "cublas"))
        for variant in (rung, "default"):
            rs = [r for r in mine if r["variant"] == variant and r.get("vs_library")]
            big = [r for r in rs if min(r["m"], r["n"], r["k"]) >= 2048]
            vs_cublas = [r["vs_cublas"] for r in rs if r.get("vs_cublas")]
            rows.append([SIXTEEN_BIT_LABEL[dtype], f"`{variant}`" if variant != "default" else "the default", len(rs),
                         f"{geomean(r['vs_library'] for r in rs):.3f}x", f"{min(r['vs_library'] for r in rs):.2f}x",
                         f"{geomean(vs_cublas):.3f}x" if vs_cublas else "",
                         f"{geomean(r['tflops'] for r in big):.0f}" if big else "",
                         f"{geomean(r['vs_library'] for r in big):.3f}x" if big else ""])
    return rows


def tensorcore_table(name: str) -> str:
    records = read_records(name)
    return table(["dtype", "rung", "held-out problems", "vs the library rung, geomean over all of them", "lowest",
                  "vs torch.matmul / _int_mm, over all", "TFLOP/s, geomean over those with M, N, K >= 2048",
                  "vs the library rung over those"], sweep_rows(records)) + source(name, records)


def float64_table(name: str) -> str:
    records = [r for r in read_records(name) if r["status"] == "ok"]
    rows = []
    for variant in sorted({r["variant"] for r in records} - {"cublas"}):
        rs = [r for r in records if r["variant"] == variant]
        rows.append([f"`{variant}`" + (" (" + ", ".join(f"{k}={v}" for k, v in rs[0]["params"].items()) + ")" if rs[0]["params"] else ""),
                     len(rs), f"{geomean(r['tflops'] for r in rs):.1f}", f"{geomean(r['vs_cublas'] for r in rs):.3f}x",
                     f"{min(r['vs_cublas'] for r in rs):.3f}x"])
    cublas = [r for r in records if r["variant"] == "cublas"]
    rows.append(["cuBLAS DGEMM", len(cublas), f"{geomean(r['tflops'] for r in cublas):.1f}", "1.000x", ""])
    return table(["rung", "problems", "TFLOP/s (geomean)", "vs DGEMM (geomean)", "lowest"], rows) + source(name, records)


def fp8_table(name: str) -> str:
    records = [r for r in read_records(name) if r["status"] == "ok"]
    rows = [[f"{r['m']} x {r['n']} x {r['k']}", f"`{r['variant']}`",
             "fast" if r["fast_accum"] else "float32 sums", f"{r['tflops']:.0f}", f"{r['vs_scaled_mm_same_accum']:.3f}x",
             f"{r['relative_error']:.1e}"]
            for r in sorted(records, key=lambda r: (-r["m"] * r["n"] * r["k"], r["fast_accum"], r["variant"]))]
    return table(["M x N x K", "variant", "accumulation", "TFLOP/s", "vs `_scaled_mm` (same accumulation)", "relative error"],
                 rows) + source(name, records)


def int_table(name: str) -> str:
    records = [r for r in read_records(name) if r["status"] == "ok"]
    rows = [[r["case"], f"{r['m']} x {r['n']} x {r['k']}", f"`{r['variant']}`" if r["variant"] != "anchor" else r["anchor"],
             f"{r['tops']:.0f}", f"{r['vs_anchor']:.2f}x"] for r in records]
    return table(["case", "M x N x K", "variant", "TOPS", "vs the baseline"], rows) + source(name, records)


def complex_table(name: str) -> str:
    """The complex rung and the complex default against the library rung (CGEMM / ZGEMM), whole
    calls: the headline problems, then the grid the default's rule was set on and the one held out."""
    records = read_records(name)
    by_problem = {}
    for r in records:
        if r["split"] in ("headline", "fit", "held-out"):
            by_problem.setdefault((r["split"], r["dtype"], r["m"], r["n"], r["k"], r["layout"]), {})[r["variant"]] = r
    order = {"headline": 0, "fit": 1, "held-out": 2}
    rows = []
    for (split, dtype, m, n, k, layout), v in sorted(by_problem.items(), key=lambda kv: (order[kv[0][0]], kv[0][1],
                                                                                          -kv[0][2] * kv[0][3] * kv[0][4])):
        rung, default = v.get("tensorcore-complex"), v.get("default")
        rows.append([split, dtype, f"{m} x {n} x {k} {layout}", f"{rung['tflops']:.1f}" if rung else "",
                     f"{rung['vs_library']:.2f}x" if rung else "",
                     f"{default['vs_library']:.2f}x" if default else "",
                     f"{rung['error']:.1e} / {rung['cublas_error']:.1e}" if rung else ""])
    return table(["problems", "dtype", "M x N x K", "`tensorcore-complex` TFLOP/s", "rung vs the library",
                  "default vs the library", "error: rung / cuBLAS"], rows) + source(name, records)


def several_gpus_table(name: str) -> str:
    """Each variant's time and speed against one GPU, at each size: the ranked runs (torchrun), then
    tilemm.multi from one process, each against the one-GPU time of its own run."""
    records = read_records(name)
    rows = [[f"{r['n']}³", f"{r['gpus']} GPUs" + (", one process" if r["one_process"] else ", ranks"),
             r["variant"], f"{r['median_s'] * 1e3:.1f}", f"{r['tflops']:,.0f}", ratio(r["vs_one_gpu"])]
            for r in sorted(records, key=lambda r: (r["n"], r["one_process"], -r["gpus"])) if r["gpus"] > 1]
    return table(["size (bf16)", "run", "variant", "ms", "TFLOP/s", "vs one GPU"], rows) + source(name, records)


def compile_times_table(name: str) -> str:
    """Each rung's first call in a new process: cold (empty disk caches, so it compiles) and warm
    (a second process loading what the first compiled); the first dtype's call also pays importing
    numba or Triton, the others' are given as a range."""
    records = read_records(name)
    by_rung = {}
    for r in records:
        by_rung.setdefault(r["kernel"], {}).setdefault(r["label"], []).append(r)

    def seconds(x: float) -> str:
        return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms" if x >= 1e-3 else "< 1 ms"

    def first_calls(rs):
        rest = sorted(r["first_call_s"] for r in rs[1:])
        low, high = (seconds(rest[0]), seconds(rest[-1])) if rest else (None, None)
        others = "" if low is None else f" ({low})" if low == high else f" ({low} to {high})"
        return seconds(rs[0]["first_call_s"]) + others
    rows = [[f"`{rung}`", ", ".join(r["dtype"] for r in v["cold"]), first_calls(v["cold"]), first_calls(v["warm"])]
            for rung, v in sorted(by_rung.items(), key=lambda kv: LADDER_ORDER.index(kv[0]))]
    size = records[0]["m"]
    return (f"First call of {size}³ in a new process, to the synchronized, checked result; the dtypes in order "
            "(the first one's call imports numba or Triton, the others' are in brackets):\n\n"
            + table(["rung", "dtypes", "cold (empty caches)", "warm (disk caches)"], rows) + source(name, records))


def headline() -> str:
    """README's block: one table per device."""
    parts = []
    h200 = read_records("h200/tensorcore_vs_library.jsonl.gz")
    rows = []
    for dtype in ("bfloat16", "float16", "int8"):
        big = [r for r in h200 if r["dtype"] == dtype and r["status"] == "ok" and min(r["m"], r["n"], r["k"]) >= 2048]
        rung = next(r["kernel"] for r in big if r["variant"] not in ("default", "library", "cublas"))
        rs = [r for r in big if r["variant"] == rung]
        rows.append([f"`{rung}`", SIXTEEN_BIT_LABEL[dtype], f"the {len(rs)} held-out problems with M, N, K >= 2048",
                     f"{geomean(r['tflops'] for r in rs):.0f}",
                     f"{geomean(r['vs_library'] for r in rs):.3f}x the library rung"
                     + (f", {geomean(r['vs_cublas'] for r in rs if r.get('vs_cublas')):.3f}x torch.matmul" if dtype != "int8" else "")])
    f64 = [r for r in read_records("h200/float64_vs_dgemm.jsonl.gz") if r["variant"] == "tensorcore-f64" and r["status"] == "ok"]
    rows.append(["`tensorcore-f64`", "float64", f"its {len(f64)} problems with M, N, K >= 2048",
                 f"{geomean(r['tflops'] for r in f64):.0f}", f"{geomean(r['vs_cublas'] for r in f64):.3f}x cuBLAS DGEMM"])
    fp8 = [r for r in read_records("h200/fp8_vs_scaled_mm.jsonl") if r["variant"] in ("tilemm", "tilemm-fast") and r["m"] == 8192]
    for r in fp8:
        rows.append(["`scaled_matmul`", "fp8 e4m3" + (", fast accumulation" if r["fast_accum"] else ""), "8192³",
                     f"{r['tflops']:.0f}", f"{r['vs_scaled_mm_same_accum']:.3f}x torch._scaled_mm"])
    parts.append("**NVIDIA H200**, TFLOP/s (int8: TOPS), whole calls, geometric mean over the problems named in each row "
                 "(the rung pages give each sweep whole: all its held-out problems, of every size):\n\n"
                 + table(["rung", "dtype", "problems", "TFLOP/s", "ratio"], rows))
    ladder = [r for r in read_records("h200/ladder.jsonl") if r["status"] == "ok" and r["dtype"] == "float32" and r["m"] == 4096]
    cublas = next(r for r in ladder if r["kernel"] == "cublas")
    rows = [[rung_label(r), speed(r["gflops"]), ratio(r["gflops"] / cublas["gflops"])]
            for r in sorted(ladder, key=lambda r: (LADDER_ORDER.index(r["kernel"]), rung_label(r)))]
    parts.append("**NVIDIA H200**, the ladder at float32 4096³ (`tilemm bench --suite ladder`):\n\n"
                 + table(["rung", "GFLOP/s", "vs cuBLAS"], rows))
    cpu = [r for r in read_records("cpu/ladder.jsonl") if r["status"] == "ok" and r["dtype"] == "float32" and r["m"] == 1024]
    numpy = next(r for r in cpu if r["kernel"] == "numpy")
    rows = [[rung_label(r), speed(r["gflops"]), ratio(r["gflops"] / numpy["gflops"])]
            for r in sorted(cpu, key=lambda r: LADDER_ORDER.index(r["kernel"]))]
    parts.append(f"**CPU** ({cpu[0]['device'].removeprefix('CPU: ')}, 2 cores), float32 1024³ (`tilemm bench --suite cpu`):\n\n"
                 + table(["rung", "GFLOP/s", "vs NumPy"], rows))
    return "\n".join(parts) + "\nEvery figure's record and command: `benchmarks/results/INDEX.md`.\n"


def generated_tables() -> dict:
    files = {}
    files["ladder_cpu.md"], _ = ladder_table("cpu/ladder.jsonl", "numpy")
    files["ladder_h100.md"], _ = ladder_table("h100/ladder.jsonl", "cublas")
    files["seeds_h100.md"] = seeds_table("h100/seeds.jsonl")
    for device in ("h200",):                 # where a ladder run on this GPU is committed
        if (RESULTS / device / "ladder.jsonl").exists():
            files[f"ladder_{device}.md"], _ = ladder_table(f"{device}/ladder.jsonl", "cublas")
        if (RESULTS / device / "seeds.jsonl").exists():
            files[f"seeds_{device}.md"] = seeds_table(f"{device}/seeds.jsonl")
    files["tensorcore_h200.md"] = tensorcore_table("h200/tensorcore_vs_library.jsonl.gz")
    files["float64_h200.md"] = float64_table("h200/float64_vs_dgemm.jsonl.gz")
    files["fp8_h200.md"] = fp8_table("h200/fp8_vs_scaled_mm.jsonl")
    files["int_h100.md"] = int_table("h100/int_vs_baselines.jsonl")
    files["complex_h200.md"] = complex_table("h200/complex_vs_library.jsonl.gz")
    files["compile_times_h200.md"] = compile_times_table("h200/compile_times.jsonl.gz")
    files["several_gpus_h200.md"] = several_gpus_table("h200/several_gpus.jsonl")
    return files


def readme_with(block: str) -> str:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"README.md has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + "\n" + block + END + rest.split(END, 1)[1]


def plots() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ladder = [r for r in read_records("h200/ladder.jsonl") if r["status"] == "ok" and r["dtype"] == "float32" and r["m"] == 4096]
    ladder.sort(key=lambda r: (LADDER_ORDER.index(r["kernel"]), rung_label(r)))
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=80)
    labels = [rung_label(r).replace("`", "") for r in ladder]
    ax.barh(labels[::-1], [r["gflops"] for r in ladder][::-1], color="#4c72b0")
    ax.set_xscale("log")
    ax.set_xlabel("GFLOP/s (log scale)")
    ax.set_title("The ladder on an NVIDIA H200, float32 4096³")
    fig.tight_layout()
    fig.savefig(IMAGES / "ladder_h200.png", metadata={"Software": None})
    plt.close(fig)
    records = read_records("h200/tensorcore_vs_library.jsonl.gz")
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=80)
    for dtype, colour in (("bfloat16", "#4c72b0"), ("int8", "#dd8452"), ("float64", "#55a868")):
        rs = [r for r in records if r["dtype"] == dtype and r["variant"] == "default" and r["status"] == "ok"]
        ax.scatter([2 * r["m"] * r["n"] * r["k"] for r in rs], [r["vs_library"] for r in rs], s=10, color=colour,
                   label=SIXTEEN_BIT_LABEL[dtype])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("flops of the product")
    ax.set_ylabel("the default / the library rung")
    ax.set_title("The default against the library, held-out problems, NVIDIA H200")
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(IMAGES / "default_vs_library_h200.png", metadata={"Software": None})
    plt.close(fig)


IMAGE_NAMES = ("ladder_h200.png", "default_vs_library_h200.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file differs from the committed one")
    args = ap.parse_args()
    files = {TABLES / name: text for name, text in generated_tables().items()}
    files[README] = readme_with(headline())
    if args.check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
        stale += [TABLES / p.name for p in TABLES.glob("*.md") if p not in files]        # a table no record makes
        stale += [IMAGES / name for name in IMAGE_NAMES if not (IMAGES / name).exists()]
        if stale:
            sys.exit("out of step with the records: " + ", ".join(str(p.relative_to(ROOT)) for p in stale)
                     + " (run python3 benchmarks/make_tables.py)")
        return
    TABLES.mkdir(parents=True, exist_ok=True)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
        print("wrote", path.relative_to(ROOT))
    plots()
    print("wrote", ", ".join(f"docs/images/{name}" for name in IMAGE_NAMES))


if __name__ == "__main__":
    main()
