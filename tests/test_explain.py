"""`tilemm explain`: the traffic model must match the loads a launch really makes (counted in
the CUDA simulator), and a launch a GPU would refuse is explained, not attempted."""
import pytest

from tilemm.tools import cli, explain

from .test_simt import SMALL


@pytest.mark.parametrize("kernel", sorted(SMALL))
def test_model_agrees_with_counted_loads(kernel):
    info = explain.explain(kernel, 256, 256, 256, "float32", SMALL[kernel], simulate=16)
    sim = info["simulated"]
    assert sim["agree"], sim
    assert info["launch"]["limit"] == "within every limit"
    assert info["traffic"]["times_minimum"] >= 1


def test_tiling_cuts_traffic_by_the_tile():
    naive = explain.explain("naive", 1024, 1024, 1024, simulate=None)["traffic"]["elements_read"]
    tiled = explain.explain("tiled", 1024, 1024, 1024, params={"tile": 32}, simulate=None)["traffic"]["elements_read"]
    assert naive / tiled == 32


def test_refused_launch_is_explained():
    info = explain.explain("tiled", 4096, 4096, 4096, params={"tile": 64}, simulate=None)
    assert "4096 threads exceeds the 1024" in info["launch"]["limit"]


def test_cli_explain_runs(capsys):
    assert cli.main(["explain", "rect", "--size", "512", "--param", "tile=8", "f=2", "--simulate", "16"]) == 0
    out = capsys.readouterr().out
    assert "they agree" in out and "traffic model" in out


@pytest.mark.parametrize("kernel,dtype,params,unit,work", [
    ("tensorcore-f32", "float32", {}, "tf32", 3), ("tensorcore-f32", "float32", {"precision": "int8"}, "int8", 6),
    ("tensorcore-int", "int32", {}, "int8", 10), ("tensorcore-int", "int64", {}, "int8", 36),
    ("regblock", "float32", {}, "float32", 1)])
def test_roofline_counts_the_products_on_the_unit_that_runs_them(kernel, dtype, params, unit, work):
    """An emulating rung's compute bound is its unit's peak over the products it does for each
    product of the problem (3xTF32 runs on TF32 tensor cores, three products each: the float32
    SIMT peak is not its bound)."""
    from tilemm.system import machine
    r = explain.explain(kernel, 4096, 4096, 4096, dtype, params, simulate=None)["roofline"]
    assert (r["unit"], r["products_per_product"]) == (unit, work)
    assert r["peak_tflops"] == pytest.approx(machine.limits().peak(unit) / work)


def test_cli_refuses_a_bad_parameter_in_one_line(capsys):
    assert cli.main(["explain", "tensorcore", "--shape", "16", "27", "59150", "--dtype", "bfloat16",
                     "--param", "split_k=0", "--simulate", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tilemm explain: error: ") and "split_k=0 is not allowed" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,says", [
    (["tiled", "--size", "0", "--simulate", "0"], "an empty product"),
    (["tensorcore-int", "--shape", "0", "0", "120"], "an empty product"),
    (["tensorcore", "--simulate", "0"], "float16"),                    # its own dtype when none is named
])
def test_cli_explains_empty_products_and_defaults_to_a_dtype_the_kernel_computes(capsys, argv, says):
    assert cli.main(["explain", *argv]) == 0
    out = capsys.readouterr()
    assert says in out.out and "Traceback" not in out.err


@pytest.mark.parametrize("argv,says", [
    (["tiled", "--size", "-5"], "a size is 0 or more"),
    (["tiled", "--simulate", "-3"], "a size is 0 or more"),
    (["tiled", "--simulate", "100000"], "sizes up to 128"),
    (["tensorcore", "--dtype", "int8", "--simulate", "0"], "does not compute int8"),
    (["tensorcore", "--dtype", "bool"], "does not compute bool"),
    (["tensorcore", "--dtype", "object"], "invalid choice: 'object'"),
])
def test_cli_refuses_bad_sizes_and_dtypes_in_one_line(capsys, argv, says):
    """A negative size, a simulated size the simulator can't count at, and a dtype the kernel does
    not compute are refused in one line, before any work."""
    try:
        code = cli.main(["explain", *argv])
    except SystemExit as refused:       # argparse's refusals
        code = refused.code
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err


def test_without_a_gpu_explain_assumes_the_gpu_named_and_says_so(capsys):
    """The docs set explain's roofline beside an H200's measurements: --gpu H200 takes its peaks
    (its own bandwidth) where no GPU is here, and the output names the device."""
    from tilemm.system import machine
    if machine.gpu() is not None:
        pytest.skip("a real GPU is here: its own limits and peaks are used")
    h100 = explain.explain("naive", 1024, 1024, 1024, simulate=None)
    h200 = explain.explain("naive", 1024, 1024, 1024, simulate=None, assume_gpu="H200")
    assert h200["roofline"]["bandwidth_gbs"] > h100["roofline"]["bandwidth_gbs"]
    assert "H200" in h200["device"] and h200["gpu_assumed"]
    assert cli.main(["explain", "naive", "--size", "1024", "--simulate", "0", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "roofline of the NVIDIA H200" in out and "those of an NVIDIA H200" in out
    with pytest.raises(ValueError, match="no figures for a GPU named"):
        explain.explain("naive", 64, 64, 64, simulate=None, assume_gpu="V100")
