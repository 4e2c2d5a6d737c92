"""`tilemm check`: every runnable kernel against the reference. Under the CUDA simulator and
Triton's interpreter (set by conftest) the GPU rungs run on the CPU, from host arrays."""
import pytest

from tilemm.tools import check
from tilemm.ladder import record as kernel_record

from .conftest import ON_GPU


@pytest.mark.skipif(ON_GPU, reason="the emulated rungs; on the GPU `tilemm check` runs them for real")
def test_check_runs_emulated_gpu_rungs_from_host_arrays():
    shapes = [(5, 6, 7), (17, 3, 33)]
    outcomes = list(check.run(["tiled", "tensorcore-f64", "tensorcore-int", "tensorcore-f32"], ["float64", "int32"],
                              shapes))
    assert {o.kernel for o in outcomes} == {"tiled", "tensorcore-f64", "tensorcore-int"}   # f32: no float64
    assert len(outcomes) == 2 * 2 + 2 + 2 and all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]


def test_check_catches_a_wrong_kernel(monkeypatch):
    import dataclasses
    from tilemm.ladder import registry
    wrong = dataclasses.replace(registry.get("cpu-naive"), run=lambda a, b, c, **p: c.fill(1))
    monkeypatch.setitem(kernel_record.LADDER, "cpu-naive", wrong)
    outcomes = list(check.run(["cpu-naive"], ["int32"], [(3, 4, 5)]))
    assert outcomes and not any(o.ok for o in outcomes)
