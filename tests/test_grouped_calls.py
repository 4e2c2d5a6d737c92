"""tilemm.grouped_matmul's repeated calls (tilemm.products.grouped_calls): a key's later calls on
new operands give the bits a first call gives them (and the float64 products', within rounding),
through the launch's replay (under the interpreter: launches interpreted behind a C launcher's
stand-in, tests/interpreted_replays.py) and through Triton's JIT where the replay declines; a
changed key takes every check again; host offsets and counts are checked at every call; the
cache is bounded."""
import numpy as np
import pytest
import torch

import tilemm
from tilemm.engine import replay as replays
from tilemm.products import grouped, grouped_calls
from tilemm.ladder.tensorcore import r15_grouped_kernel

from .conftest import ON_GPU
from .interpreted_replays import replayed_on_the_host
from .test_grouped import SMALL, WHERE, check, operand


@pytest.fixture(autouse=True)
def fresh_keys():
    grouped_calls.release()
    yield
    grouped_calls.release()


def first_call(*args, **kwargs):
    """The call with every check, its key forgotten before and after (a first call's bits)."""
    grouped_calls.release()
    c = tilemm.grouped_matmul(*args, **kwargs)
    grouped_calls.release()
    return c


def the_entry():
    (entry,) = grouped_calls.CALLS.values()
    return entry


# name: (a's shape, b's shape, whether b is a transposed (G, N, K), offs or counts, counted)
CASES = {
    "2d-3d tma": ((19, 32), (5, 32, 24), True, [0, 1, 1, 18, 19], False),
    "2d-3d rows past offs[-1]": ((19, 32), (5, 32, 24), True, [2, 2, 9, 9, 15], False),
    "2d-3d pointers": ((19, 24), (5, 24, 20), False, [0, 1, 1, 18, 19], False),
    "masked": ((4, 18, 32), (4, 32, 16), True, [0, 1, 18, 17], True),
    "3d-3d": ((3, 5, 24), (3, 24, 20), False, None, False),
    "2d-2d": ((7, 19), (19, 20), False, [0, 1, 1, 18, 19], False),
    "3d-2d": ((5, 7, 24), (24, 19), False, [0, 1, 1, 18, 19], False),
}


def operands(name, dtype, seed):
    a_shape, b_shape, transposed, cut, counted = CASES[name]
    a = operand(a_shape, dtype, seed)
    b = operand(b_shape[:-2] + b_shape[:-3:-1], dtype, seed + 1).mT if transposed else operand(b_shape, dtype, seed + 1)
    cut = None if cut is None else torch.tensor(cut, dtype=torch.int32, device=WHERE)
    return a, b, cut, counted


def defined(c, a, b, cut):
    """c with the rows past offs[-1] of a 2-D A's groups zeroed where the offsets lie on a GPU: a new
    result leaves them unspecified there, as torch._grouped_mm's (zeros with host offsets)."""
    if cut is None or cut.device.type == "cpu" or not (a.dim() == 2 and b.dim() == 3):
        return c
    c = c.clone()
    c[int(cut[-1]):] = 0
    return c


def call(a, b, cut, counted, **kwargs):
    return tilemm.grouped_matmul(a, b, None if counted else cut, counts=cut if counted else None, **kwargs, **SMALL)


@pytest.mark.parametrize("name,dtype", [(name, torch.float32) for name in CASES]
                         + [("2d-3d tma", torch.int8), ("masked", torch.int8), ("2d-3d pointers", torch.int8)])
def test_repeated_calls_replay_the_first_calls_bits(monkeypatch, name, dtype):
    c_launches = None if ON_GPU else replayed_on_the_host(monkeypatch)
    sets = [operands(name, dtype, 10 * i) for i in range(3)]
    a, b, cut, counted = sets[2]
    want = defined(first_call(a, b, None if counted else cut, counts=cut if counted else None, **SMALL), a, b, cut)
    for a, b, cut, counted in sets:          # the key's first, recorded and replayed calls
        c = defined(call(a, b, cut, counted), a, b, cut)
        check(c, a, b, cut, counted)
    assert torch.equal(c, want), "a replayed call: other bits than a first call's"
    assert isinstance(the_entry().replay, replays.Replay)
    if c_launches is not None:
        assert len(c_launches) == 1          # the key's third call: a replay


@pytest.mark.parametrize("name", ["2d-3d rows past offs[-1]", "masked"])
def test_repeated_calls_into_out(monkeypatch, name):
    """out given: a key of its own, replayed into out (rows no group covers keep what out held)."""
    c_launches = None if ON_GPU else replayed_on_the_host(monkeypatch)
    sets = [operands(name, torch.float32, 10 * i) for i in range(3)]
    a, b, cut, counted = sets[2]
    shape = (19, 24) if not counted else (4, 18, 16)
    want = first_call(a, b, None if counted else cut, counts=cut if counted else None,
                      out=torch.full(shape, 7.0, device=WHERE), **SMALL)
    out = torch.full_like(want, 7)
    for a, b, cut, counted in sets:
        assert call(a, b, cut, counted, out=out) is out
    assert torch.equal(out, want)
    if c_launches is not None:
        assert len(c_launches) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_repeated_calls_without_a_replay_launch_through_triton(dtype):
    """Where the launch is not replayed (Triton's interpreter as it is; on a GPU, a repeated key
    whose operands start elsewhere within 16 bytes than the recording's), the key's plan
    launches through Triton's JIT: the same bits."""
    a, b, cut, _ = operands("2d-3d tma", dtype, 1)
    shifted = torch.empty(a.numel() + 1, dtype=dtype, device=WHERE)[1:].view(a.shape)   # 2 or 4 bytes on
    shifted.copy_(a)
    wants = {id(x): first_call(x, b, cut, **SMALL) for x in (a, shifted)}
    for x in (a, a, shifted, a):
        c = tilemm.grouped_matmul(x, b, cut, **SMALL)
        check(c, x, b, cut)
        assert torch.equal(c, wants[id(x)])
    assert len(grouped_calls.CALLS) == 1


def test_gradient_calls_take_the_autograd_path():
    a, b, cut, _ = operands("2d-3d tma", torch.float32, 2)
    a.requires_grad_()
    for _ in range(2):
        c = tilemm.grouped_matmul(a, b, cut, **SMALL)
        assert c.requires_grad and not grouped_calls.CALLS
    with torch.no_grad():
        tilemm.grouped_matmul(a, b, cut, **SMALL)
    assert len(grouped_calls.CALLS) == 1


HOST_CUTS = [
    ("offs", [4, 2], ValueError, "not sorted"),
    ("offs", [4, 7], ValueError, "past the end"),
    ("offs", np.array([5, 3], dtype=np.int32), ValueError, "not sorted"),
    ("offs", [2.0, 6], ValueError, "whole numbers"),
    ("counts", [1, 7], ValueError, "capacity"),
]


@pytest.mark.parametrize("kind,bad,error,match", HOST_CUTS)
def test_host_offsets_and_counts_are_checked_at_every_call(monkeypatch, kind, bad, error, match):
    counted = kind == "counts"
    a = torch.ones((2, 6, 4) if counted else (6, 4), dtype=torch.float16, device=WHERE)
    b = torch.ones(2, 4, 3, dtype=torch.float16, device=WHERE)
    good = [2, 6] if not counted else [1, 6]
    good = np.array(good, dtype=np.int32) if isinstance(bad, np.ndarray) else good
    for _ in range(3):              # the key's first, recorded and replayed calls
        tilemm.grouped_matmul(a, b, None if counted else good, counts=good if counted else None, **SMALL)
    assert len(grouped_calls.CALLS) == 1

    def launched(*_, **__):
        raise AssertionError("launched")
    monkeypatch.setattr(r15_grouped_kernel, "launch", launched)
    monkeypatch.setattr(grouped_calls, "launch_again", launched)
    monkeypatch.setattr(the_entry(), "quick", launched)
    with pytest.raises(error, match=match):
        tilemm.grouped_matmul(a, b, None if counted else bad, counts=bad if counted else None, **SMALL)


F16 = torch.float16
CHANGED = [   # (the changed call's a, b, offs and keywords; its error): a key the first call did not have
    (lambda a, b: ((a.double(), b.double(), [2, 6]), {}), TypeError, "dtype float64"),
    (lambda a, b: ((a[:, :3], b, [2, 6]), {}), ValueError, "do not line up"),
    (lambda a, b: ((a, b.contiguous(), [2, 6]), dict(tma=True)), ValueError, "tma=True takes"),
    (lambda a, b: ((a, b, [2, 6]), dict(out=torch.empty(6, 4, dtype=F16, device=a.device))), ValueError,
     "out must be a"),
    (lambda a, b: ((a, b, [2, 6]), dict(block_m=48)), ValueError, "block_m=48"),
    (lambda a, b: ((a, b, [2, 6]), dict(out_dtype="int32")), TypeError, "out_dtype"),
    (lambda a, b: ((a, b, [2, 6, 6]), {}), ValueError, "3 entries for 2 groups"),
    (lambda a, b: ((a, b, torch.tensor([2, 6], device=a.device)), {}), ValueError, "int32"),
    (lambda a, b: ((a, b), dict(counts=[2, 6])), ValueError, "need offs"),
    (lambda a, b: ((a, b, [2, 6]), dict(block_m=[16])), ValueError, "block_m"),       # (no key: unhashable)
]


@pytest.mark.parametrize("changed,error,match", CHANGED)
def test_a_changed_key_takes_every_check(changed, error, match):
    a = operand((6, 16), F16, 1)
    b = operand((2, 5, 16), F16, 2).mT                 # K-major: tma=True takes it
    for kwargs in ({}, dict(out=torch.empty(6, 5, dtype=F16, device=WHERE))):
        for _ in range(2):          # the key's first and recorded calls
            c = tilemm.grouped_matmul(a, b, [2, 6], **kwargs, **SMALL)
            check(c, a, b, torch.tensor([2, 6], dtype=torch.int32))
    assert len(grouped_calls.CALLS) == 2
    args, kwargs = changed(a, b)
    kwargs = {**SMALL, **kwargs}
    with pytest.raises(error, match=match):
        tilemm.grouped_matmul(*args, **kwargs)


def test_the_kept_keys_are_bounded(monkeypatch):
    monkeypatch.setattr(grouped_calls, "CALLS_KEPT", 3)
    b = operand((2, 16, 8), torch.float32, 3)
    for rows in range(4, 9):
        a = operand((rows, 16), torch.float32, rows)
        offs = [rows // 2, rows]
        check(tilemm.grouped_matmul(a, b, offs, **SMALL), a, b, torch.tensor(offs, dtype=torch.int32))
        assert 1 <= len(grouped_calls.CALLS) <= 3


def test_the_every_check_path_is_the_key_paths_first_call():
    """tilemm.products.grouped.grouped_matmul (every check at every call) keeps no key."""
    a, b, cut, _ = operands("2d-3d tma", torch.float16, 5)
    for _ in range(2):
        check(grouped.grouped_matmul(a, b, cut, **SMALL), a, b, cut)
    assert not grouped_calls.CALLS


@pytest.mark.parametrize("name", ["2d-3d tma", "3d-3d"])
def test_a_negative_view_is_multiplied_by_its_values(monkeypatch, name):
    """torch._neg_view (what x.conj().imag gives) holds the values before the negation in its
    memory: a key's first call and its replayed calls on a negative view of the same values
    give the plain operands' bits, not the product of the memory as it is."""
    if not ON_GPU:
        replayed_on_the_host(monkeypatch)
    a, b, cut, counted = operands(name, torch.float32, 0)
    want = first_call(a, b, cut, **SMALL)
    check(want, a, b, cut)
    negative_a, negative_b = torch._neg_view(-a), torch._neg_view(-b)
    assert torch.equal(first_call(negative_a, b, cut, **SMALL), want)
    for _ in range(3):           # the key's first, recorded and replayed calls
        assert torch.equal(call(a, b, cut, counted), want)
    assert torch.equal(call(negative_a, b, cut, counted), want)
    assert torch.equal(call(a, negative_b, cut, counted), want)


@pytest.mark.gpu
def test_gpu_cupy_out_of_negative_strides_is_written():
    """A CuPy out that torch can't view (negative strides: its view is a copy) gets the product."""
    cupy = pytest.importorskip("cupy")
    a, b = cupy.arange(12, dtype=cupy.float32).reshape(4, 3), cupy.ones((2, 3, 5), cupy.float32)
    out = cupy.zeros((4, 5), cupy.float32)[::-1]
    assert tilemm.grouped_matmul(a, b, cupy.asarray([2, 4], cupy.int32), out=out) is out
    assert bool((out == (a @ b[0])).all())
