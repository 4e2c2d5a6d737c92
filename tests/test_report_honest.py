"""The report says nothing it cannot back: roofs in the axis's units, an integer roof for integer
points, roofs clipped at the ridge, ratios with the digits they need, captions that promise only
what is drawn, and simulated or busy-machine measurements marked as such. Built from records
written by hand (no run): each field as the runner writes it."""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tilemm.tools.bench import load, plots, report, roofline, runner, summaries  # noqa: E402

HOST_ROOFS = {"bandwidth_gbs": 10.0, "float32": 0.2202, "float64": 0.1, "measured": "memory: a copy; compute: "
              "NumPy (BLAS) at 1024x1024x1024"}


def record(kernel, dtype, n, ms, **fields):
    flops = 2.0 * n**3
    r = {"kernel": kernel, "params": {}, "dtype": dtype, "m": n, "n": n, "k": n, "status": "ok", "median_ms": ms,
         "gflops": flops / ms / 1e6, "traffic_bytes": 4.0 * n**3 / 8, "device": "CPU: AMD EPYC", "versions": {},
         "date": "2026-11-28T00:00:00+00:00", "suite": "cpu", "host_roofs": HOST_ROOFS, "cores": 2,
         "others_busy": 0.1, "load_before": 0.2}
    r.update(fields)
    return r


@pytest.fixture
def records():
    rs = [record(k, d, n, ms) for k, d, n, ms in [
        ("numpy", "float32", 256, 0.3), ("cpu-tiled", "float32", 256, 0.5), ("cpu-naive", "float32", 256, 40.0),
        ("numpy", "int32", 256, 25.0), ("cpu-tiled", "int32", 256, 1.1), ("cpu-naive", "int32", 256, 46.0)]]
    return runner.with_ratios(rs)


def test_rates_show_three_digits_and_never_an_exponent():
    assert [summaries.sig(x) for x in (0.0219, 5.594, 126.4, 51409.2)] == ["0.0219", "5.59", "126", "51,409"]


def test_ratios_show_the_digits_they_need():
    assert [summaries.times(x) for x in (0.0031, 0.0312, 2.27, 22.4, 1234.0, 1e-6)] == \
        ["0.0031x", "0.0312x", "2.27x", "22.4x", "1234x", "<0.0001x"]


def test_no_zero_ratio_and_no_zero_bandwidth_in_the_table(records):
    slow = dict(records[2], gbps=0.3)
    cells = dict(zip(report.COLUMNS, report.row(slow)))
    assert slow["ratio"] == pytest.approx(0.3 / 40) and cells["vs baseline"] == "0.0075x numpy"   # not "0.01x"
    assert cells["GB/s (model)"] == "0.3"


def roofline_axes(records):
    series = summaries.series_of(records)
    labels = sorted({label for label, _ in series})
    fig, name, caption = roofline.roofline_figure(plt, series, {lb: "C0" for lb in labels})
    axes = [ax for ax in fig.axes if ax.get_visible()]
    return fig, axes, caption


def test_the_roofline_has_an_int_roof_gflops_labels_and_roofs_clipped_at_the_ridge(records):
    fig, axes, caption = roofline_axes(records)
    assert [ax.get_title().split(":")[0] for ax in axes] == ["Roofline, float32", "Roofline, int32"]
    for ax in axes:
        labels = ax.get_legend_handles_labels()[1]
        assert not any("TFLOP/s" in label or "TOP/s" in label for label in labels)
        roof = next(line for line in ax.get_lines() if line.get_label().startswith("compute roof"))
        memory = next(line for line in ax.get_lines() if line.get_label().startswith("memory roof"))
        top = roof.get_ydata()[0]
        assert max(memory.get_ydata()) == pytest.approx(top)          # the memory roof ends at the ridge
        assert min(roof.get_xdata()) == pytest.approx(max(memory.get_xdata()))
    float_roof = [lb for lb in axes[0].get_legend_handles_labels()[1] if lb.startswith("compute roof")][0]
    assert "220.2 GFLOP/s" in float_roof                           # 0.2202 TFLOP/s, in the axis's units
    int_roof = [lb for lb in axes[1].get_legend_handles_labels()[1] if lb.startswith("compute roof")][0]
    fastest_int = max(r["gflops"] for r in records if r["dtype"] == "int32")
    assert f"{roofline.number(fastest_int)} GOP/s" in int_roof     # attained by the fastest int32 rung
    assert "int32 the fastest rate a rung of this run reached" in caption and "attained" in caption
    plt.close(fig)


@pytest.fixture
def no_plots(monkeypatch):
    """The page without its figures (drawing them takes seconds; these tests read the text)."""
    monkeypatch.setattr(report, "plots", lambda records, folder: ([], None))


def test_simulated_points_stay_off_the_roofline_and_the_page_says_simulated(records, tmp_path, no_plots):
    simulated = [dict(record("naive", "float32", 32, 600.0), emulated="the CUDA simulator")]
    assert all(p[3]["kernel"] != "naive" for p in roofline.placed_points(summaries.series_of(records + simulated)))
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records + simulated))
    report.write(tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "Simulated: the GPU rungs ran in the CUDA simulator on this CPU, not on a GPU" in page
    assert "simulated: run in the CUDA simulator on the CPU, not on a GPU" in page


def test_a_busy_machine_is_flagged_on_the_page_and_in_the_rows(records, tmp_path, no_plots):
    busy = [dict(r, others_busy=1.6) if r["kernel"] == "cpu-tiled" else r for r in records]
    assert [load.busy(r) for r in busy].count(True) == 2
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in busy))
    report.write(tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "Busy machine: other processes kept more than half of the 2 cores busy during 2 of 6 measurements" in page
    assert page.count("busy machine: other processes used 1.6 of 2 cores") == 2
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    report.write(quiet)
    assert "usy machine" not in (quiet / "index.html").read_text()


def test_captions_promise_no_seed_crosses_and_say_estimates_may_miss_a_cliff(records, tmp_path):
    estimated = dict(record("cpu-naive", "float32", 512, 320.0), status="estimated")
    made, _ = plots.plots(records + [estimated], tmp_path)
    captions = dict(made)
    assert "Crosses" not in captions["gflops_vs_n.png"]
    assert "may miss a cache cliff" in captions["gflops_vs_n.png"] and "may miss a cache cliff" in captions[
        "time_vs_n.png"]


def test_the_load_is_recorded_with_each_measurement():
    watch = load.LoadWatch()
    sum(i * i for i in range(200000))
    got = watch.read()
    assert got["cores"] >= 1 and set(got) >= {"load_before", "load_after", "cores"}
    assert got.get("others_busy", 0.0) >= 0.0


def test_a_gpu_roofline_has_a_panel_per_unit_under_the_datasheet_roofs():
    """On an H200: naive's float32 points under the SIMT float32 roof, tensorcore-f32's under the
    TF32 roof over its three products, int32 under int32's; each roof in GFLOP/s (GOP/s for int32)."""
    gpu = {"device": "NVIDIA H200", "host_roofs": None}
    records = runner.with_ratios([record(k, d, 4096, ms, **gpu) for k, d, ms in [
        ("naive", "float32", 26.0), ("tensorcore-f32", "float32", 1.4), ("naive", "int32", 30.0)]])
    fig, axes, caption = roofline_axes(records)
    titles = [ax.get_title().split(":")[0] for ax in axes]
    assert titles == ["Roofline, float32", "Roofline, int32", "Roofline, tf32 / 3 products"]
    roofs = [next(lb for lb in ax.get_legend_handles_labels()[1] if lb.startswith("compute roof")) for ax in axes]
    assert roofs == ["compute roof, float32: 67,000 GFLOP/s", "compute roof, int32: 33,500 GOP/s",
                     "compute roof, tf32 / 3 products: 164,900 GFLOP/s"]
    assert "the NVIDIA H200 datasheet" in caption
    plt.close(fig)
