"""One program's replay launched through the C launcher itself (tilemm.engine.direct_replay), its
descriptors' expansions kept by address: the C launcher is given what the direct runner would
give it, each expansion is made once an address, and Triton's runner takes over under launch
hooks. Stand-ins for the compiled program's launcher here (Triton 3.6's layout, as
tests/test_direct_launch.py); the GPU tier checks replayed products against the reference."""
import types

import pytest

torch = pytest.importorskip("torch")

from tilemm.engine import direct_replay  # noqa: E402
from tilemm.engine.direct_launch import make_runner  # noqa: E402
from tilemm.engine.launches import BoundLaunch  # noqa: E402
from tilemm.engine.replay import recorded  # noqa: E402

from .test_replay import split_launch  # noqa: E402  (a stand-in split-K launch)


class Descriptor:
    """Stands for Triton's TensorDescriptor: its base, shape, strides and block."""
    def __init__(self, base, block):
        self.base, self.shape, self.strides, self.block_shape = base, list(base.shape), list(base.stride()), block


Descriptor.__name__ = "TensorDescriptor"


def replay_and_log(monkeypatch=None, hooks=None, direct=True, shape=None, runtime=None):
    """(quick call, C launches, expansions, Triton runner's launches) of a replay of a program
    taking A and B^T by descriptors, C by address, M, N, K and two constexprs; runtime: Triton's
    knobs' stand-in, whose launch hooks are read (default: the enter hook `hooks`, no exit hook)."""
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    c = torch.empty(8, 5)
    launches, expanded, fallback = [], [], []
    runtime = runtime or types.SimpleNamespace(launch_enter_hook=hooks, launch_exit_hook=None)

    def expand(d, meta):
        expanded.append((d.base.data_ptr(), meta))
        return [f"map@{d.base.data_ptr()}", *d.shape, *d.strides]
    program = BoundLaunch(None, (1,), (), {})
    program.runner = make_runner(lambda *args: launches.append(args), (4, 2, 1), "fn", "packed", False, True,
                                 [(0, "meta0"), (1, "meta1")], expand,
                                 lambda *args, stream=None: fallback.append((args, stream)), runtime, lambda: 77)
    program.values = (Descriptor(a, [4, 2]), Descriptor(b.T, [2, 4]), c, 8, 5, 6, 64, True)
    replay = recorded(program, (a, b, c))
    replay.device_index, replay.current_device, replay.current_stream = 0, lambda: 0, lambda index: 5   # as on GPU 0
    replay.allocate = torch.empty
    if not direct:
        monkeypatch.setattr(direct_replay, "quick", lambda *args: None)
    return replay.quick_call(shape), launches, expanded, fallback


def test_the_c_launcher_gets_what_the_direct_runner_gives_it(monkeypatch):
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    calls = {}
    for direct in (True, False):
        quick, launches, expanded, _ = replay_and_log(monkeypatch, direct=direct)
        assert (quick.__module__ == direct_replay.__name__) is direct
        c = quick(a, b)
        calls[direct] = [x if x != c.data_ptr() else "C" for x in launches[-1]]
        assert [m for _, m in expanded] == ["meta1", "meta0"]
    assert calls[True] == calls[False] == [4, 2, 1, 5, "fn", False, True, None, None, "packed", None, None, None,
                                           f"map@{a.data_ptr()}", 8, 6, 6, 1, f"map@{b.data_ptr()}", 5, 6, 1, 5,
                                           "C", 8, 5, 6, 64, True]


def test_an_expansion_is_made_once_an_address():
    quick, launches, expanded, _ = replay_and_log()
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    quick(a, b)
    quick(a, b)
    assert len(launches) == 2 and len(expanded) == 2                # the second call: both kept
    a2 = torch.randn(8, 6)
    quick(a2, b)
    assert len(expanded) == 3 and expanded[-1] == (a2.data_ptr(), "meta0")
    assert launches[-1][13] == f"map@{a2.data_ptr()}" and launches[-1][18] == f"map@{b.data_ptr()}"


def test_launch_hooks_take_tritons_runner_and_the_guard_holds():
    quick, launches, _, fallback = replay_and_log(hooks=print)
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    c = quick(a, b)
    assert launches == [] and len(fallback) == 1 and c.shape == (8, 5)
    quick, launches, _, _ = replay_and_log()
    assert quick(torch.randn(8, 7)[:, 1:], b) is None and launches == []   # misaligned A: the plan's path


class HookChain:
    """Stands for Triton's HookChain (3.6 on): the hooks it calls, a list."""
    def __init__(self):
        self.calls = []


@pytest.mark.parametrize("chains", [True, False])
def test_hooks_set_after_the_call_was_made_take_tritons_runner(chains):
    """A hook given to a chain, or put in a hook's place (None's before Triton 3.6), after the
    quick call was made: each call takes Triton's runner while it is there, the C launcher after."""
    idle = HookChain if chains else (lambda: None)
    runtime = types.SimpleNamespace(launch_enter_hook=idle(), launch_exit_hook=idle())
    quick, launches, _, fallback = replay_and_log(runtime=runtime)
    a, b = torch.randn(8, 6), torch.randn(6, 5)

    def took(direct: int, runner: int):
        before = len(launches), len(fallback)
        assert quick(a, b).shape == (8, 5)
        assert (len(launches) - before[0], len(fallback) - before[1]) == (direct, runner)
    took(1, 0)
    exit_hook = runtime.launch_exit_hook
    if chains:
        exit_hook.calls.append(print)                   # a profiler's hook added to the chain
        took(0, 1)
        exit_hook.calls.clear()
        took(1, 0)
    runtime.launch_exit_hook = print                    # a hook in the chain's (or None's) place
    took(0, 1)
    runtime.launch_exit_hook = exit_hook
    took(1, 0)
    runtime.launch_enter_hook, enter_hook = print, runtime.launch_enter_hook
    took(0, 1)
    runtime.launch_enter_hook = enter_hook
    took(1, 0)


@pytest.mark.parametrize("direct", [True, False])
def test_c_takes_the_shape_asked(direct, monkeypatch):
    """C of another shape of as many elements (a Linear's output for a 3-D input), written where
    the program writes it: the program is given its address."""
    quick, launches, _, _ = replay_and_log(monkeypatch, direct=direct, shape=(2, 4, 5))
    c = quick(torch.randn(8, 6), torch.randn(6, 5))
    assert c.shape == (2, 4, 5) and c.is_contiguous() and c.data_ptr() in launches[-1]


def replay_on_gpu_0_stream_5(launch, operands, launches, monkeypatch):
    """The replay of launch on operands as made on GPU 0, stream 5, its C launcher appending its
    arguments to launches (no CUDA graph captured: the guard's check, on the CPU)."""
    runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    launch.runner = make_runner(lambda *args: launches.append(args), (3, 1, 1), "fn", "packed", False, False, [],
                                None, None, runtime, lambda: 77)
    replay = recorded(launch, operands)
    replay.device_index, replay.current_device, replay.current_stream = 0, lambda: 0, lambda index: 5
    replay.allocate = torch.empty
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)
    return replay


@pytest.mark.parametrize("direct", [True, False])
def test_a_workspace_launch_is_given_its_workspace(direct, monkeypatch):
    """A launch taking a workspace (split K) gets the workspace of the replay's device and stream
    as addresses, past the runner as through it."""
    given, launches = [], []
    partials = torch.empty(16)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    launch = split_launch(a, b, c, partials, given)
    replay = replay_on_gpu_0_stream_5(launch, (a, b, c), launches, monkeypatch)
    if not direct:
        monkeypatch.setattr(direct_replay, "quick", lambda *args: None)
    quick = replay.quick_call()
    assert (quick.__module__ == direct_replay.__name__) is direct
    a2, b2 = torch.randn(4, 4), torch.randn(4, 4)
    c2 = quick(a2, b2)
    assert given[-1] == (0, 5)
    assert launches[-1][13:] == (a2.data_ptr(), b2.data_ptr(), c2.data_ptr(), 4, partials.data_ptr(), 7)
    assert launches[-1][:4] == (3, 1, 1, 5)


@pytest.mark.parametrize("shape", [(4, 4), (1, 16), (16, 1), (2, 2, 4)])
@pytest.mark.parametrize("fast", [True, False])
def test_c_is_a_fresh_tensor_laid_out_as_torch_empty_lays_it(shape, fast, monkeypatch):
    """C (by torch's allocation for the device, or, where torch's function gives another layout,
    torch.empty_like of one element expanded to C's shape) has torch.empty's strides, the
    replay's dtype and device, and memory of its own at each call, given to the program."""
    tried = []
    if not fast:
        def elsewhere_laid(*arguments):       # (a torch whose function would give another C)
            tried.append(arguments)
            return torch.empty(1)
        monkeypatch.setattr(torch._C._dynamo.guards, "_empty_strided_cpu", elsewhere_laid)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    launches = []
    launch = split_launch(a, b, c, torch.empty(16), [])
    replay = replay_on_gpu_0_stream_5(launch, (a, b, c), launches, monkeypatch)
    quick = replay.quick_call(shape)
    assert quick.__module__ == direct_replay.__name__
    first, second = quick(a, b), quick(torch.randn(4, 4), torch.randn(4, 4))
    for c in (first, second):
        assert c.shape == shape and c.stride() == torch.empty(shape).stride() and c.dtype == torch.float32
        assert c.device == a.device and not c.requires_grad and c.data_ptr() in launches[-2 if c is first else -1]
    assert first.untyped_storage().nbytes() == second.untyped_storage().nbytes() == 16 * 4
    assert len(tried) == (0 if fast else 1)   # (torch's function tried once, when the call was made)
    assert first.data_ptr() != second.data_ptr()
