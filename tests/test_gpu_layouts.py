"""Every CUDA rung on operands in odd layouts, on the current GPU and on another (tests/odd_layouts.py):
stacks, vectors, .mT, slices, expanded and offset operands, negative strides, conjugate views,
out= of either order, and each call repeated on fresh values; gradients and fused Linears on odd
layouts (tests/odd_gradients.py). On the GPU machine only."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .odd_gradients import linear_case, matmul_case
from .odd_layouts import cases, run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(4))
def test_every_rung_on_odd_layouts_and_their_repeats(seed):
    wrong = [w for i, case in enumerate(cases(seed, 60)) for w in run(case, seed * 100_003 + i)]
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.parametrize("seed", range(100, 102))
def test_every_rung_on_odd_layouts_on_the_gpu_that_is_not_current(seed):
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    torch.cuda.set_device(0)
    wrong = [w for i, case in enumerate(cases(seed, 60)) for w in run(case, seed * 100_003 + i, gpu=1)]
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.gpu
@pytest.mark.parametrize("gpu", [0, 1])
def test_gradients_and_fused_linears_on_odd_layouts(gpu):
    """tilemm.matmul's gradients on 7 rungs and tilemm.linear's (bias, activations, residual,
    backward), on odd layouts, against torch's float64 autograd; on GPU 1 too where there is one,
    GPU 0 current."""
    import torch
    if gpu >= torch.cuda.device_count():
        pytest.skip("one GPU")
    torch.cuda.set_device(0)
    wrong = [w for seed in range(80) for w in matmul_case(seed, gpu) + linear_case(seed, gpu)]
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.gpu
@pytest.mark.multigpu
def test_a_process_of_many_simt_products_on_the_other_gpu_ends_cleanly():
    """numba-cuda's unloading of its modules at exit crashed this process (seed 31, 260 products
    on every rung, torch and CuPy: abort, "double free") after every answer was right;
    tilemm.engine.numba_exit defers it."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "tests.odd_layouts", "31", "260", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
