"""tilemm.engine.direct_launch: the compiled program's C launcher called past Triton's Python
layers. The C launcher and Triton's launcher objects are stand-ins here (the layout checked is
Triton 3.6's); the GPU tier (tests/test_gpu_programs.py) checks products launched this way."""
import types

import pytest

from tilemm.engine import direct_launch
from tilemm.engine.direct_launch import KNOWN_BASE_FORMAT, launch_parts, make_runner


class Base:
    """Stands for a descriptor's base tensor: only its address is read."""
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class Desc:
    """Stands for a TensorDescriptor: its base and the lists of its shape, strides and block."""
    def __init__(self, base, like=None):
        self.base = base
        self.shape, self.strides, self.block_shape = (like.shape, like.strides, like.block_shape) if like else (
            [64, 32], [32, 1], [32, 32])


def runner_and_log(descriptors=(), hooks=None):
    calls, expanded, fallback = [], [], []
    runtime = types.SimpleNamespace(launch_enter_hook=hooks, launch_exit_hook=None)

    def expand(d, meta):
        expanded.append((d.base.data_ptr(), meta))
        return [f"map@{d.base.data_ptr()}", 64, 32, 32, 1]

    run = make_runner(lambda *args: calls.append(args), (4, 2, 1), "fn", "packed", False, True, list(descriptors),
                      expand, lambda *args, stream=None: fallback.append((args, stream)), runtime, lambda: 77)
    return run, calls, expanded, fallback


def test_arguments_follow_tritons_leading_ones():
    run, calls, _, _ = runner_and_log()
    run("a", "b", 3, stream=5)
    assert calls == [(4, 2, 1, 5, "fn", False, True, None, None, "packed", None, None, None, "a", "b", 3)]
    run("a", "b", 3)                                           # no stream: the current one
    assert calls[-1][3] == 77


def test_descriptors_expand_in_place_and_are_filled_once_per_layout_and_address():
    run, calls, expanded, _ = runner_and_log([(0, "meta0"), (2, "meta2")])
    base = Base(4096)
    d0, d2 = Desc(base), Desc(Base(8192))
    run(d0, "c", d2, 9, stream=1)
    assert calls[-1][13:] == ("map@4096", 64, 32, 32, 1, "c", "map@8192", 64, 32, 32, 1, 9)
    assert [m for _, m in expanded] == ["meta2", "meta0"]
    run(d0, "c", d2, 9, stream=1)
    assert len(expanded) == 2                                  # the same descriptors: not filled again
    run(Desc(Base(4096), like=d0), "c", d2, 9, stream=1)
    assert len(expanded) == 2                                  # a replay's: its recording's lists, same address
    base.address = 12288
    run(d0, "c", d2, 9, stream=1)
    assert len(expanded) == 3 and calls[-1][13] == "map@12288"   # the same one over other memory: filled
    base.address = 4096
    run(d0, "c", d2, 9, stream=1)
    assert len(expanded) == 3 and calls[-1][13] == "map@4096"    # back at an address seen: kept
    run(Desc(Base(4096)), "c", d2, 9, stream=1)
    assert len(expanded) == 4                                  # equal lists but not the recording's: filled


def test_kept_addresses_are_bounded():
    run, calls, expanded, _ = runner_and_log([(0, "meta0")])
    first = Desc(Base(0))
    for i in range(direct_launch.KEPT_ADDRESSES + 1):
        run(Desc(Base(4096 * i), like=first), stream=1)
    assert len(expanded) == direct_launch.KEPT_ADDRESSES + 1
    run(Desc(Base(0), like=first), stream=1)                   # forgotten when the kept ones were cleared
    assert len(expanded) == direct_launch.KEPT_ADDRESSES + 2


class Chain:
    """Stands for Triton 3.6's HookChain: never None, empty by default."""
    def __init__(self, calls):
        self.calls = calls


@pytest.mark.parametrize("hooks", [print, Chain([print])])
def test_launch_hooks_take_tritons_own_runner(hooks):
    run, calls, _, fallback = runner_and_log(hooks=hooks)
    run("a", stream=3)
    assert calls == [] and fallback == [(("a",), 3)]


def test_an_empty_hook_chain_is_no_hook():
    run, calls, _, fallback = runner_and_log(hooks=Chain([]))
    run("a", stream=3)
    assert len(calls) == 1 and fallback == []


def compiled_with(launch, fmt=KNOWN_BASE_FORMAT, scratch=0):
    launcher = type("CudaLauncher", (), {})()
    launcher.launch, launcher.global_scratch_size, launcher.profile_scratch_size = launch, scratch, 0
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, False
    compiled = types.SimpleNamespace(run=launcher, function=11, packed_metadata=(1, 2))
    return compiled, types.SimpleNamespace(_BASE_ARGS_FORMAT=fmt)


def wrapped(c_launch, indices, metas):
    """A closure shaped as Triton 3.6's wrap_handle_tensordesc makes."""
    launcher, tensordesc_indices, tensordesc_meta = c_launch, set(indices), metas

    def inner(*args):
        return launcher, tensordesc_indices, tensordesc_meta
    return inner


def test_launch_parts_reads_the_known_layout_and_refuses_others():
    def c_launch(*args):
        return args
    compiled, nvidia = compiled_with(c_launch)
    assert launch_parts(compiled, nvidia) == (c_launch, 11, (1, 2), False, False, [])
    compiled, nvidia = compiled_with(wrapped(c_launch, [3, 0], ["m0", "m3"]))
    assert launch_parts(compiled, nvidia) == (c_launch, 11, (1, 2), False, False, [(0, "m0"), (3, "m3")])
    assert launch_parts(*compiled_with(c_launch, fmt="iiiKKOOOO")) is None       # another Triton's layout
    assert launch_parts(*compiled_with(c_launch, scratch=128)) is None           # a program needing scratch


def test_an_unknown_triton_gives_no_direct_runner(monkeypatch):
    """Without the expected layout (no nvidia driver module here, or another one), None: the
    caller keeps Triton's runner."""
    pytest.importorskip("triton")
    assert direct_launch.direct_runner(types.SimpleNamespace(), (1, 1, 1), lambda *a, **k: None) is None


def test_a_kept_descriptor_does_not_keep_its_call_alive():
    """What is kept for the next launch is the expanded arguments, not the descriptor: once the
    caller drops a call's descriptor (and its operand), nothing here holds it."""
    import gc
    import weakref
    run, calls, expanded, _ = runner_and_log([(0, "meta0")])
    d = Desc(Base(4096))
    gone, base = weakref.ref(d), weakref.ref(d.base)
    run(d, stream=1)
    del d
    gc.collect()
    assert gone() is None and base() is None


def test_without_metadata_nothing_is_kept():
    """Without Triton's descriptor metadata the expanded arguments hold the base itself: those are
    made again at each launch, not kept."""
    run, calls, expanded, _ = runner_and_log([(0, None)])
    d = Desc(Base(4096))
    run(d, stream=1)
    run(d, stream=1)
    assert len(expanded) == 2
