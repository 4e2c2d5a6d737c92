"""A compile-only tier for the numba-cuda rungs: on this CPU machine every rung x native dtype,
at its default parameters, is compiled to PTX for sm_90 (NVVM from PyPI, no GPU needed). It
catches what the simulator can't: the simulator accepted a shared array whose shape was not a
compile-time constant, which the real compiler refuses. In a subprocess, because this test
process runs numba-cuda in the simulator."""
import json
import os
import subprocess
import sys

import pytest

COMPILE = r"""
import json
import types
import numba
from numba import cuda
import numba.cuda.dispatcher
# a device function (regblock's, forceinline) is compiled for the current GPU's compute
# capability: with no GPU here, sm_90's, as the kernels are
numba.cuda.dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
import tilemm
from tilemm.ladder.simt import launch, r08_regblock
OPS = ("ld.local", "st.local", "ld.shared.v4", "bar.sync", "ld.global.v4", "ld.global.v2")
out = {}


def device_compiles(fn, seen):   # {device function: specialisations compiled}, of those a kernel reaches
    for cell in fn.__closure__ or ():
        d = cell.cell_contents
        if isinstance(d, numba.cuda.dispatcher.CUDADispatcher) and d.py_func.__name__ not in seen:
            seen[d.py_func.__name__] = len(d.overloads)
            device_compiles(d.py_func, seen)
    return seen


for kernel in tilemm.kernels("cuda"):
    if kernel.backend != "numba-cuda":
        continue
    factory, compile_params = launch.FACTORIES[kernel.name]
    params = kernel.resolve({})
    for dtype in kernel.dtypes:
        scalar = getattr(numba, dtype)
        chosen = {k: params[k] for k in compile_params}
        forms = {kernel.name: {}}
        if kernel.name == "regblock":                 # and with 16-byte global loads, for aligned rows
            widths = r08_regblock.vector_widths(scalar.bitwidth, **chosen, a_aligned=True, b_aligned=True)
            forms["regblock-vector"] = dict(vector_a=widths[0], vector_b=widths[1])
        for form, extra in forms.items():
            dispatcher = factory(scalar, **chosen, **extra)
            ptx, _ = cuda.compile_ptx(dispatcher.py_func, (scalar[:, ::1],) * 3, cc=(9, 0))
            out[f"{form}/{dtype}"] = {op: ptx.count(op) for op in OPS}
            out[f"{form}/{dtype}"]["device_compiles"] = max(device_compiles(dispatcher.py_func, {}).values(), default=1)
        if kernel.name in launch.FLAT_FACTORIES:      # the flat form for C-contiguous operands
            flat = launch.FLAT_FACTORIES[kernel.name](scalar, **{k: params[k] for k in compile_params})
            ptx, _ = cuda.compile_ptx(flat.py_func, (scalar[::1],) * 3 + (numba.int64,) * 3, cc=(9, 0))
            out[f"{kernel.name}-flat/{dtype}"] = {op: ptx.count(op) for op in OPS}
print(json.dumps(out))
"""


def test_every_simt_rung_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    res = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=900)
    if "libnvrtc" in res.stderr or "libnvvm" in res.stderr:
        pytest.skip("NVVM/NVRTC not installed (scripts/setup.sh installs nvidia-nvvm and nvidia-cuda-nvrtc)")
    assert res.returncode == 0, res.stderr[-3000:]
    counts = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(counts) == 6 * 4 + 4 + 4                       # + the flat form of `tiled`, regblock's vector form
    for name, c in counts.items():
        assert c["ld.local"] == 0 and c["st.local"] == 0, f"{name}: a register array went to local memory {c}"
    assert counts["regblock/float32"]["ld.shared.v4"] > 0     # the 16-byte shared loads are there
    for name, c in counts.items():      # each device function compiled once (a literal argument is a type of its own)
        assert c.get("device_compiles", 1) == 1, f"{name}: a device function compiled {c['device_compiles']} times"
    for dtype, op in (("float32", "ld.global.v4"), ("int32", "ld.global.v4"), ("float64", "ld.global.v2"),
                      ("int64", "ld.global.v2")):             # and the 16-byte global loads, only where asked
        assert counts[f"regblock-vector/{dtype}"][op] > 0 and counts[f"regblock/{dtype}"][op] == 0, dtype
    assert counts["tiled/float32"]["bar.sync"] == 2
    assert counts["tiled-flat/float32"]["bar.sync"] == 2
