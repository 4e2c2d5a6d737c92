"""The numba-cuda rungs under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set by conftest),
at small odd shapes with small tiles, output poisoned before every launch; and the launch
limits, which are checked before any launch on any machine."""
import numpy as np
import pytest

import tilemm
from tilemm.numerics.accuracy import compare
from tilemm.ladder.registry import Problem

from .cases import operands

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

# Small tiles keep the simulated thread count (and the run time) down.
SMALL = {"naive": dict(block=8), "naive-global": dict(block=8), "uncoalesced": dict(block=8),
         "tiled": dict(tile=8), "rect": dict(tile=8, f=2),
         "regblock": dict(block_m=16, block_n=16, block_k=4, thread_m=4, thread_n=4)}
SIMT = [k.name for k in tilemm.kernels("cuda") if k.backend == "numba-cuda"]


def run(kernel, a, b, **params):
    c = tilemm.plan(a, b, kernel=kernel, **params).execute(poison=True)
    return c, compare(c, a, b, c.dtype.name)


def test_every_simt_rung_has_a_small_configuration():
    assert set(SIMT) == set(SMALL)


@pytest.mark.parametrize("kernel", SIMT)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_native_dtypes_odd_shape(kernel, dtype):
    a, b = operands(5, 17, 33, 9, dtype, "tn")
    c, verdict = run(kernel, a, b, **SMALL[kernel])
    assert c.dtype == dtype and verdict.ok, verdict.message


@pytest.mark.parametrize("kernel", SIMT)
@pytest.mark.parametrize("m,n,k,dtype", [(1, 1, 1, "int32"), (40, 7, 65, "float32"), (3, 5, 0, "float32"),
                                         (0, 4, 3, "int32"), (9, 20, 19, "int8"), (9, 20, 19, "uint64"),
                                         (9, 20, 19, "float16")])
def test_edges_and_promoted_dtypes(kernel, m, n, k, dtype):
    a, b = operands(m + n + k, m, n, k, dtype, "nt")
    c, verdict = run(kernel, a, b, **SMALL[kernel])
    assert c.dtype == np.matmul(a, b).dtype and verdict.ok, verdict.message


@pytest.mark.parametrize("kernel,params,shape", [
    ("tiled", dict(tile=16), (37, 29, 41)), ("rect", dict(tile=8, f=4), (37, 29, 41)),
    ("regblock", dict(block_m=32, block_n=16, block_k=8, thread_m=8, thread_n=2), (37, 29, 41)),
    # whole tiles only: regblock's unchecked interior path, then its ragged K tail
    ("regblock", dict(block_m=16, block_n=16, block_k=8, thread_m=4, thread_n=4), (32, 48, 16)),
    ("regblock", dict(block_m=16, block_n=16, block_k=8, thread_m=4, thread_n=4), (32, 16, 21))])
def test_other_tiles(kernel, params, shape):
    a, b = operands(9, *shape, "int32")
    c, verdict = run(kernel, a, b, **params)
    assert verdict.ok, verdict.message


def test_default_kernel_for_host_arrays_stays_numpy():
    a, b = operands(1, 3, 3, 3, "float32")
    assert tilemm.plan(a, b).kernel.name == "numpy"


@pytest.mark.parametrize("kernel", SIMT)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_default_parameters_fit_every_native_dtype(kernel, dtype):
    """The defaults must launch on an H100 for every dtype a rung claims (checked, not run)."""
    a, b = operands(1, 300, 300, 300, dtype)
    assert tilemm.plan(a, b, kernel=kernel).kernel.name == kernel


# --- launch limits: refused before the launch, with the limit and the reason ----------------

def refused(match, kernel, **params):
    a, b = operands(1, 64, 64, 64, "float32")
    with pytest.raises(tilemm.KernelUnavailable, match=match):
        tilemm.plan(a, b, kernel=kernel, **params)


def test_tile_64_is_seed_000s_invalid_configuration():
    refused(r"64x64 = 4096 threads exceeds the 1024 threads per block.*invalid configuration argument",
            "tiled", tile=64)


def test_naive_block_64_refused():
    refused("4096 threads", "naive", block=64)


def test_regblock_shared_memory_limit():
    refused(r"bytes of static shared memory per block exceed", "regblock",
            block_m=256, block_n=256, block_k=32, thread_m=16, thread_n=16)


def test_regblock_uneven_split():
    refused("must be multiples", "regblock", block_m=8, block_n=8, thread_m=16, thread_n=8)
    refused("split evenly", "regblock", block_m=16, block_n=16, block_k=4, thread_m=1, thread_n=1)


def test_grid_limit():
    a = np.ones((1, 1), np.float32)
    b = np.ones((1, 70000), np.float32)       # uncoalesced walks C's columns along y: 70000 blocks of 1
    with pytest.raises(tilemm.KernelUnavailable, match="grid dimension y"):
        tilemm.plan(a, b, kernel="uncoalesced", block=1)


@pytest.mark.parametrize("kernel", ["naive", "tiled", "rect", "regblock"])
@pytest.mark.parametrize("m, n, k, matrix", [(2**16, 2**15, 1, "C"), (2**31, 1, 1, "A"), (1, 2**31, 1, "B"), (2**16, 2**15, 4, "C"),
                                             (1, 1, 2**31, "A")])
def test_simt_rungs_refuse_matrices_past_32_bit_indices(kernel, m, n, k, matrix):
    """32-bit indices can't reach 2^31 elements: refused with the limit named, never wrapped."""
    problem = Problem(m, n, k, "float32")
    rung = tilemm.ladder.registry.get(kernel)
    reason = rung.limits(problem, **rung.resolve({}))
    assert reason and f"{matrix} is" in reason and "2^31" in reason


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_tiled_strided_device_operands_take_the_2d_form(dtype):
    """Host inputs reach the device contiguous (the flat form); device views with other strides
    (a transposed torch or CuPy tensor) take tiled's 2-D form: test that one directly."""
    from numba import cuda
    a, b = operands(3, 19, 21, 23, dtype)
    # views with other strides: every other row of A, every other column of B (a device array's
    # .T is a view in the simulator but a transposed copy on the GPU, so slices, not .T)
    a_d = cuda.to_device(np.ascontiguousarray(np.repeat(a, 2, axis=0)))[::2]
    b_d = cuda.to_device(np.ascontiguousarray(np.repeat(b, 2, axis=1)))[:, ::2]
    c_d = cuda.to_device(np.full((19, 21), -7, dtype))
    assert not a_d.is_c_contiguous() and not b_d.is_c_contiguous()
    tilemm.kernel("tiled").run(a_d, b_d, c_d, tile=8)     # not contiguous: the 2-D form (launch.py)
    verdict = compare(c_d.copy_to_host(), a, b, dtype)
    assert verdict.ok, verdict.message


# --- regblock's 16-byte global loads -----------------------------------------------------------

def aligned_matrix(rows, cols, dtype, pad=0):
    """A (rows, cols + pad) array whose data starts 16-byte aligned, and its (rows, cols) view."""
    itemsize = np.dtype(dtype).itemsize
    flat = np.zeros(rows * (cols + pad) + 16 // itemsize, dtype)
    start = (-flat.ctypes.data % 16) // itemsize
    whole = flat[start:start + rows * (cols + pad)].reshape(rows, cols + pad)
    return whole, whole[:, :cols]


def test_aligned_rows():
    from tilemm.ladder.simt.vector import aligned_rows
    assert aligned_rows(aligned_matrix(5, 8, "float32")[1])
    assert aligned_rows(aligned_matrix(5, 6, "float32", pad=2)[1])       # rows 32 bytes apart
    assert not aligned_rows(aligned_matrix(5, 6, "float32")[1])          # rows 24 bytes apart
    assert not aligned_rows(aligned_matrix(5, 8, "float32")[1][:, 1:])   # starts 4 bytes in
    assert not aligned_rows(aligned_matrix(8, 8, "float32")[1].T)        # columns not contiguous
    assert aligned_rows(aligned_matrix(3, 2, "float64")[1])


def test_vector_widths_fall_back_to_elements():
    from tilemm.ladder.simt.r08_regblock import vector_widths
    assert vector_widths(32, 16, 16, 4, 4, 4, True, True) == (4, 4)
    assert vector_widths(64, 16, 16, 4, 4, 4, True, False) == (2, 1)
    assert vector_widths(32, 16, 16, 4, 1, 1, True, True) == (1, 1)     # 256 threads, 16 vectors a tile


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
@pytest.mark.parametrize("shape,pads", [((32, 48, 16), (0, 0)), ((37, 44, 20), (0, 0)), ((37, 44, 20), (0, 1)),
                                        ((33, 20, 36), (1, 4))])
def test_regblock_vector_loads(dtype, shape, pads):
    """Operands with aligned rows take 16-byte loads (whole tiles) and element loads at the
    edges; one with misaligned rows (padded by an element) takes element loads alone; the answer
    is the same. Launched on device arrays directly, which keep the padding."""
    from numba import cuda

    from tilemm.ladder.simt import r08_regblock
    m, n, k = shape
    (a_whole, a), (b_whole, b) = aligned_matrix(m, k, dtype, pads[0]), aligned_matrix(k, n, dtype, pads[1])
    a[...], b[...] = operands(7, m, n, k, dtype)
    a_d, b_d = cuda.to_device(a_whole)[:, :k], cuda.to_device(b_whole)[:, :n]
    c_d = cuda.to_device(np.full((m, n), -99, dtype))
    params = dict(block_m=16, block_n=16, block_k=8, thread_m=4, thread_n=4)
    width = 16 // a.itemsize
    assert r08_regblock.variant(a_d, b_d, **params) == dict(vector_a=width if not pads[0] % width else 1,
                                                           vector_b=width if not pads[1] % width else 1)
    tilemm.kernel("regblock").run(a_d, b_d, c_d, **params)
    verdict = compare(c_d.copy_to_host(), a, b, dtype)
    assert verdict.ok, verdict.message


def test_a_stack_is_cut_into_matrices_before_the_kernel_s_view_of_each():
    """On the GPU the SIMT rungs get numba-cuda views of torch or CuPy memory. numba-cuda's own
    index of a stack of F-ordered matrices (a stack's .mT) gives them C-ordered strides, so the
    backend cuts the stack with the operands' own library and views each matrix apart."""
    from types import SimpleNamespace
    from tilemm.engine.backends.common import run_over_stack
    runs = []
    plan = SimpleNamespace(batch=(3,), params={"tile": 8},
                           kernel=SimpleNamespace(run_stack=None, run=lambda a, b, c, **p: runs.append((a, b, c, p))))
    a = np.arange(3 * 5 * 4, dtype=np.float32).reshape(3, 5, 4).transpose(0, 2, 1)     # (3, 4, 5), F-ordered
    b = np.ones((5, 2), np.float32)
    c = np.empty((3, 4, 2), np.float32)
    run_over_stack(plan, a, b, c, view=lambda x: ("viewed", x))
    assert len(runs) == 3
    for i, (a_i, b_i, c_i, params) in enumerate(runs):
        assert a_i[0] == b_i[0] == c_i[0] == "viewed" and params == {"tile": 8}
        assert a_i[1].strides == a.strides[1:] and np.array_equal(a_i[1], a[i]) and np.array_equal(b_i[1], b)
        assert np.shares_memory(c_i[1], c[i]) and c_i[1].shape == (4, 2)


def test_numba_s_clean_up_at_exit_is_deferred_on_every_context_and_stays_so(monkeypatch):
    """The exit hook (tilemm.engine.numba_exit) leaves numba-cuda's pending module unloads to the
    driver: every context numba holds gets defer_cleanup entered, and it stays entered (a dropped
    context manager of contextlib is closed when collected, and undid itself before the
    finalizers ran)."""
    import contextlib
    import gc
    import sys
    from types import ModuleType, SimpleNamespace
    from tilemm.engine import numba_exit

    class Deallocations:
        count = 0

        @contextlib.contextmanager
        def disable(self):
            self.count += 1
            try:
                yield
            finally:
                self.count -= 1

    contexts = [SimpleNamespace(deallocations=Deallocations()) for _ in range(2)]
    devices = [SimpleNamespace(primary_context=contexts[0]), SimpleNamespace(primary_context=None),
               SimpleNamespace(primary_context=contexts[1])]
    fake = ModuleType("numba.cuda.cudadrv.driver")
    fake.driver = SimpleNamespace(list_devices=lambda: devices)
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", fake)
    monkeypatch.setattr(numba_exit, "_deferred", [])
    numba_exit.defer_cleanup_everywhere()
    gc.collect()
    assert [c.deallocations.count for c in contexts] == [1, 1]
    fake.driver = None                       # a driver gone at exit: nothing raises
    numba_exit.defer_cleanup_everywhere()


def test_the_exit_hook_runs_before_every_weakref_finalizer_in_a_fresh_process():
    """A process whose first finalizer comes after tilemm's hook (numba-cuda makes its own on its
    first kernel): the hook must still run first, or numba's unloads are not deferred."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = ("import weakref\n"
              "from tilemm.engine import numba_exit\n"
              "numba_exit.defer_cleanup_everywhere = lambda: print('hook', flush=True)\n"
              "numba_exit.keep_modules_at_exit()\n"
              "class Module: pass\n"
              "module = Module()\n"
              "weakref.finalize(module, print, 'finalizer')\n")
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(src)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hook", "finalizer"], done.stdout
