"""Inside a real program: several threads and processes at once, the tuning cache in any state,
and the stream a call is queued on. On the CPU the numba-cuda rungs run in the simulator and the
Triton rungs in the interpreter; tests/test_gpu_programs.py runs the same on the device."""
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import tilemm
from tilemm.engine import streams
from tilemm.system import tuning
from tilemm.numerics.accuracy import compare

from .cases import operands
from .conftest import ON_GPU

SIMT = ["naive", "naive-global", "uncoalesced", "tiled", "rect", "regblock"]
TRITON = [("tensorcore", "float16"), ("tensorcore-int", "int32"), ("tensorcore-f32", "float32"),
          ("tensorcore-f64", "float64")]


def run_in_threads(work, threads: int = 8):
    """work(i) in `threads` threads started together; the first exception any raised, re-raised."""
    errors, start = [], threading.Barrier(threads)

    def body(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


def checked(kernel, dtype, seed, **params):
    a, b = operands(seed, 9, 7, 11, dtype)
    c = tilemm.matmul(a, b, kernel=kernel, **params)
    verdict = compare(c, a, b, dtype)
    assert verdict.ok, f"{kernel} {dtype} thread {seed}: {verdict.message}"


def test_threads_first_and_later_calls_of_every_simt_rung():
    """Eight threads call every SIMT rung at once, twice: compiles and first launches race."""
    def work(i):
        for _ in range(2):
            for kernel in SIMT:
                checked(kernel, ("float32", "int64")[i % 2], seed=i)
    run_in_threads(work)


# cpu-tiled (the default for large host integer products) from a program's threads, and in
# processes forked after it ran: in a child process of its own, so that an abort or a hang fails
# the test instead of ending the run
PARALLEL_HOST_PROGRAM = r"""
import multiprocessing, sys, threading
import numpy as np
import tilemm

a = np.random.default_rng(0).integers(-9, 9, (300, 200)).astype(np.int64)
b = np.random.default_rng(1).integers(-9, 9, (200, 250)).astype(np.int64)
want = a @ b


def work(_):
    return bool(np.array_equal(tilemm.matmul(a, b, kernel="cpu-tiled"), want))


if __name__ == "__main__":
    answers = []
    if sys.argv[1] == "threads":
        threads = [threading.Thread(target=lambda: answers.extend(work(i) for i in range(10))) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    else:
        answers.append(work(0))                          # the parent runs parallel code first
        with multiprocessing.get_context("fork").Pool(2) as pool:
            answers += pool.map(work, range(4))
    print(len(answers), all(answers))
"""


@pytest.mark.parametrize("program,layer", [("threads", "workqueue"), ("threads", "default"), ("fork", "default")])
def test_cpu_tiled_from_threads_and_forked_processes(program, layer, tmp_path):
    """Numba's workqueue layer aborts a process whose threads launch parallel code at once; its
    OpenMP layer terminates a child forked after its parent did (a Pool then waits forever).
    Every call here must answer."""
    script = tmp_path / "program.py"
    script.write_text(PARALLEL_HOST_PROGRAM)
    env = dict(os.environ)
    if layer != "default":
        env["NUMBA_THREADING_LAYER"] = layer
    run = subprocess.run([sys.executable, str(script), program], capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0 and run.stdout.split() == ["40" if program == "threads" else "5", "True"], (
        run.stdout + run.stderr[-2000:])


def test_threads_on_the_triton_rungs():
    def work(i):
        kernel, dtype = TRITON[i % len(TRITON)]
        for _ in range(2):
            checked(kernel, dtype, seed=i)
    run_in_threads(work)


def test_threads_on_auto_share_one_winner(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    run_in_threads(lambda i: checked("auto", "int32", seed=i), threads=4)
    entries = json.loads((tmp_path / "tuning.json").read_text())
    assert len(entries) == 1 and next(iter(entries.values()))["params"]["kernel"] in ("numpy", "cpu-tiled")


# ---- the tuning cache: any state of the file, any number of writers ----

def tune(key):
    return tuning.best(key, [{"x": 1}, {"x": 2}], lambda c: float(c["x"]))[0]


@pytest.mark.parametrize("content", ["{not json", '{"auto|x": {"params": {"x"', "[1, 2, 3]", "17", "",
                                     '{"k": "a string, not an entry"}', '{"k": {"params": {"x": 99}}}'])
def test_a_broken_cache_file_is_ignored_with_a_warning(tmp_path, monkeypatch, content):
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "KNOWN", {})
    (tmp_path / "tuning.json").write_text(content)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert tune("k") == {"x": 1}
    assert json.loads((tmp_path / "tuning.json").read_text())["k"]["params"] == {"x": 1}   # rewritten whole


def test_corrupt_cache_warns(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "KNOWN", {})
    (tmp_path / "tuning.json").write_text("{truncated")
    with pytest.warns(RuntimeWarning, match="ignoring the tuning cache"):
        tune("k")


def test_an_unwritable_cache_keeps_the_winner_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(blocker / "cache"))   # no folder can be made there
    monkeypatch.setattr(tuning, "KNOWN", {})
    with pytest.warns(RuntimeWarning, match="could not write the tuning cache"):
        assert tune("k") == {"x": 1}
    assert tuning.cached("k")["params"] == {"x": 1}          # later calls read it from memory


def test_auto_with_an_unwritable_cache_still_answers(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TILEMM_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning):
        checked("auto", "float32", seed=3)


def _tune_in_a_process(cache_dir, i):
    import os
    os.environ["TILEMM_CACHE_DIR"] = cache_dir
    from tilemm.system import tuning as t
    for key in (f"own-{i}", "shared"):
        t.best(key, [{"x": 1}, {"x": 2}], lambda c: float(c["x"]))


def run_processes(target, args: list, timeout: float) -> list:
    """target(*a) in a fresh (spawned) process for each a in args, all at once; their exit codes."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    return [p.exitcode for p in procs]


def test_four_processes_on_one_cache_lose_no_winner(tmp_path):
    assert run_processes(_tune_in_a_process, [(str(tmp_path), i) for i in range(4)], 120) == [0] * 4
    entries = json.loads((tmp_path / "tuning.json").read_text())
    assert set(entries) == {"shared", "own-0", "own-1", "own-2", "own-3"}
    assert not list(tmp_path.glob("*.tmp"))


# ---- streams ----

def test_host_arrays_run_on_the_legacy_default_stream():
    a, b = operands(1, 5, 6, 7, "float32")
    assert tilemm.plan(a, b, kernel="tiled").stream == streams.LEGACY_DEFAULT
    assert streams.caller_stream("numpy", "cpu") == streams.LEGACY_DEFAULT


@pytest.mark.parametrize("stream, exc", [("s", TypeError), (1.5, TypeError), (True, TypeError), (-1, ValueError),
                                         (object(), TypeError)])
def test_a_bad_stream_is_refused_before_any_work(stream, exc):
    a, b = operands(1, 5, 6, 7, "float32")
    with pytest.raises(exc, match="stream"):
        tilemm.matmul(a, b, kernel="tiled", stream=stream)


def test_a_raw_stream_handle_is_taken_and_runs_the_call():
    a, b = operands(2, 5, 6, 7, "float32")
    p = tilemm.plan(a, b, kernel="tiled", stream=0)
    assert p.stream == 0
    c = p.execute()
    assert compare(c, a, b, "float32").ok


def test_threads_keep_their_own_call_stream():
    """The stream of a call is this thread's alone: another thread's call can't change it."""
    seen = {}

    def work(i):
        with streams.queued_on(1000 + i, "cpu"):
            for _ in range(50):
                assert streams.current() == 1000 + i
        seen[i] = streams.current()
    run_in_threads(work)
    assert seen == {i: streams.LEGACY_DEFAULT for i in range(8)}


@pytest.mark.parametrize("call", ["first", "recorded"])
def test_a_fused_epilogue_launch_waits_for_another_thread_s_jit_launch(call):
    """The fused epilogue's launches through Triton (a key's first call, and the launch its second
    call binds and records) wait while another thread holds the JIT lock, as a plan's do:
    Triton's interpreter patches module-wide state while it runs a program (threads calling
    tilemm.linear and tilemm.grouped_matmul at once raised "x >= grid_dim[0]"), and a GPU's
    first launch loads the program into the context. Forced here: the lock held by this thread
    while another calls tilemm.linear; the call may end only once it is released."""
    torch = pytest.importorskip("torch")
    from tilemm.engine.jit_lock import JIT_LOCK
    from tilemm.engine import epilogue_repeats
    from tilemm.torch import linear_calls
    linear_calls.release()
    epilogue_repeats.release()
    g = torch.Generator().manual_seed(3)
    device = "cuda" if ON_GPU else "cpu"         # (a host tensor on a GPU's machine takes torch's route)
    x, w, b = (torch.randn(*shape, generator=g, dtype=torch.float64).to(device) for shape in ((5, 8), (6, 8), (6,)))
    tilemm.linear(x[:4], w, b, kernel="tensorcore-f64")      # (the program's first run: another key)
    if call == "recorded":
        tilemm.linear(x, w, b, kernel="tensorcore-f64")
    done = []
    worker = threading.Thread(target=lambda: done.append(tilemm.linear(x, w, b, kernel="tensorcore-f64")))
    with JIT_LOCK:
        worker.start()
        worker.join(timeout=2.0)
        assert not done, "a fused epilogue launched while another thread held the JIT lock"
    worker.join()
    assert torch.allclose(done[0], x @ w.T + b, rtol=1e-12, atol=1e-12)
