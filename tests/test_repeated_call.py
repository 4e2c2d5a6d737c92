"""A repeated plain tilemm.matmul (no out=, no parameters, torch tensors) in its fewest steps: the
plan cache's key built in lookup, and the plan's repeat (Plan.repeated_call), which for one
program's replay is the quick call of a @ b with its guard inline (tilemm.engine.direct_replay's
pair_call) and the plan's own path where that guard declines. Every guard still turns a call away
from the replay: the operands' alignment, a negative or conjugate view, a CUDA graph captured (a
launch taking a workspace), another device current (launch hooks: tests/test_direct_replay.py);
a call that would record a gradient, under forward-mode AD, autocast or torch.func takes its own
route. The launch is on the caller's stream, with that stream's workspace. The replays here are
made as on GPU 0, their C launcher run under Triton's interpreter on the addresses it is given
(tests/interpreted_replays.py): a stale or wrong address gives a wrong answer; every answer is
checked exactly (integers) or against float64. On the host, a kept plan's repeats on CPU tensors
take the host backend's one step (tilemm.engine.backends.host.repeated_product) where it gives
the plan's own result bit for bit, and the plan's path elsewhere."""
import types

import pytest

torch = pytest.importorskip("torch")

import tilemm  # noqa: E402
from tilemm.engine import direct_replay, replay as replays, workspaces  # noqa: E402
from tilemm.engine.launches import BoundLaunch, Steps  # noqa: E402
from tilemm.engine.workspaces import SplitKLaunch  # noqa: E402
from tilemm.plans import cache  # noqa: E402

from .conftest import ON_GPU  # noqa: E402
from .interpreted_replays import interpreted_runner  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")   # (torch 2.13's, on the op's load)
on_the_host = pytest.mark.skipif(ON_GPU, reason="the host's replays under Triton's interpreter")

I8 = torch.int8


@pytest.fixture(autouse=True)
def own_plans(monkeypatch):
    """Each test's plans its own (a plan given a host replay here serves no other test)."""
    monkeypatch.setattr(cache, "PLANS", {})


class Host:
    """What the replay reads of the GPU, as a test sets it (the current device and stream, whether
    a CUDA graph is being captured), and the streams its C launches were given."""
    def __init__(self):
        self.device, self.stream, self.capturing, self.streams = 0, 7, False, []


def int8_pair(m, k, n, seed, b_rows=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=I8, generator=g)
    w = torch.randint(-128, 128, (n, k), dtype=I8, generator=g)
    return a, (w.T.contiguous() if b_rows else w.T)


def exact(c, a, b) -> bool:
    return c.dtype == torch.int32 and torch.equal(c.long(), a.long() @ b.long())


def close(c, a, b) -> bool:
    ref = a.double() @ b.double()
    bound = (2.0 ** -10 + a.shape[1] * 2.0 ** -23) * (a.double().abs() @ b.double().abs()) + 1e-30
    return c.dtype == a.dtype and bool(((c.double() - ref).abs() <= bound).all())


def workspace(monkeypatch, stream: int, floats: int = 1 << 16):
    """GPU 0's split-K workspace for stream, kept as tilemm.engine.workspaces keeps it (host tensors)."""
    kept = (torch.empty(floats), torch.zeros(256, dtype=torch.int32))
    monkeypatch.setitem(workspaces.WORKSPACES, ("split-k", 0, stream), kept)
    workspaces.changed()            # (as workspaces.workspace does when it makes or grows one)
    return kept


def replayed_plan(monkeypatch, a, b, kernel, out_dtype=None):
    """(the C launches' log, Host): tilemm.matmul's plan for a and b (its first call), given the
    replay of its one launch as on GPU 0 (its C launcher runs the program under the interpreter)."""
    host = Host()
    workspace(monkeypatch, host.stream)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: host.capturing)   # (a CPU torch's)
    before = set(cache.PLANS)
    c = tilemm.matmul(a, b, kernel=kernel, out_dtype=out_dtype)
    (key,) = set(cache.PLANS) - before
    plan = cache.PLANS[key]
    c = torch.empty_like(c)
    bound = plan.kernel.bind(a, b, c, **plan.params)
    bound = bound.launches[0] if isinstance(bound, Steps) and len(bound.launches) == 1 else bound
    assert isinstance(bound, BoundLaunch)
    bound()
    log = []
    bound.runner = interpreted_runner(bound, log, host.streams)

    def record():
        replay = replays.recorded(bound, (a, b, c))
        replay.device_index, replay.current_device = 0, lambda: host.device
        replay.current_stream, replay.allocate = (lambda index: host.stream), torch.empty
        replay.quick = replay.quick_call()
        return replay
    cache.PLANS[key] = kept = plan.for_repeats(record)
    assert kept.repeat.__module__ == direct_replay.__name__ and kept.fast is kept.replay.quick
    return log, host


def launched(log, count: int, call):
    """call()'s value, after checking that it launched the replay `count` times."""
    before = len(log)
    value = call()
    assert len(log) - before == count, f"{len(log) - before} launches of the replay, not {count}"
    return value


def int8_matmul(x, y):
    return tilemm.matmul(x, y, kernel="tensorcore-int", out_dtype="int32")


@on_the_host
@pytest.mark.parametrize("k, b_rows", [(64, False), (4096, False), (256, True)])   # (4096: split K, its workspace)
def test_a_repeated_call_replays_on_new_operands(monkeypatch, k, b_rows):
    a, b = int8_pair(16, k, 32, seed=1, b_rows=b_rows)
    log, _ = replayed_plan(monkeypatch, a, b, "tensorcore-int", "int32")
    for seed in (2, 3):
        a, b = int8_pair(16, k, 32, seed=seed, b_rows=b_rows)
        assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b)
    assert log[-1][0] == a.data_ptr() and log[-1][1] == b.data_ptr()


@on_the_host
def test_the_guard_declines_misaligned_and_negative_operands(monkeypatch):
    """Each call the guard turns away takes the plan's path (the backend again) and gives its
    product; the next plain call replays again."""
    a, b = int8_pair(16, 4096, 32, seed=4)
    log, _ = replayed_plan(monkeypatch, a, b, "tensorcore-int", "int32")
    assert isinstance(cache.PLANS[next(reversed(cache.PLANS))].replay.single[0], SplitKLaunch)
    shifted = torch.empty(a.numel() + 1, dtype=I8)[1:].view(a.shape)      # the same key, another alignment
    shifted.copy_(a)
    assert exact(launched(log, 0, lambda: int8_matmul(shifted, b)), a, b)
    negative = torch._neg_view(a)                                           # a negative view: its values
    values = negative.resolve_neg()                 # (int8's: -(-128) wraps to -128)
    assert negative.is_neg() and exact(launched(log, 0, lambda: int8_matmul(negative, b)), values, b)
    assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b)


@on_the_host
def test_a_captured_workspace_launch_another_device_and_streams(monkeypatch):
    """While a CUDA graph is captured a split-K replay (the graph would keep its workspace)
    declines: the plan's path. With another device current the replay runs under a guard that
    makes its own device current (replay_guard.elsewhere, as on a GPU). Each launch is on the
    caller's current stream, with that stream's workspace, and a replaced workspace is taken."""
    a, b = int8_pair(16, 4096, 32, seed=5)
    log, host = replayed_plan(monkeypatch, a, b, "tensorcore-int", "int32")
    at = cache.PLANS[next(reversed(cache.PLANS))].replay.single[0].at       # ws_ptr's place
    assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b)
    host.capturing = True
    assert exact(launched(log, 0, lambda: int8_matmul(a, b)), a, b)
    host.capturing = False
    entered = []

    def elsewhere(index, call, *inputs):
        entered.append(index)
        host.device, current = index, host.device
        try:
            return call(*inputs)
        finally:
            host.device = current
    monkeypatch.setattr(replays, "elsewhere", elsewhere)
    host.device = 1
    assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b) and entered == [0] and host.device == 1
    host.device = 0
    kept = {7: workspaces.WORKSPACES[("split-k", 0, 7)], 9: workspace(monkeypatch, 9)}
    for stream in (9, 7, 9):
        host.stream = stream
        assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b)
        assert host.streams[-1] == stream and log[-1][at] == kept[stream][0].data_ptr()
    replaced = workspace(monkeypatch, 9, floats=1 << 17)
    assert exact(launched(log, 1, lambda: int8_matmul(a, b)), a, b) and log[-1][at] == replaced[0].data_ptr()


@on_the_host
def test_a_conjugate_view_is_declined_by_a_complex_replay():
    """A complex product's quick call refuses a conjugate view (its memory holds the values before
    the conjugation) and a negative one: the declined path's value; a plain operand launches."""
    from tilemm.engine.direct_launch import make_runner
    a, b = torch.randn(4, 6, dtype=torch.complex64), torch.randn(6, 5, dtype=torch.complex64)
    c = torch.empty(4, 5, dtype=torch.complex64)
    launches = []
    runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    program = BoundLaunch(None, (1,), (), {})
    program.runner = make_runner(lambda *args: launches.append(args), (1, 1, 1), "fn", "packed", False, False, [],
                                 None, None, runtime, lambda: 0)
    program.values = (a, b, c, 4, 5, 6)
    replay = replays.recorded(program, (a, b, c))
    replay.device_index, replay.current_device, replay.current_stream = 0, lambda: 0, lambda index: 3
    replay.allocate = torch.empty
    quick = replay.quick_call(declined=lambda x, y: "declined")
    assert quick.__module__ == direct_replay.__name__
    a2 = torch.randn(4, 6, dtype=torch.complex64)
    c2 = quick(a2, b)
    assert launches[-1][13:16] == (a2.data_ptr(), b.data_ptr(), c2.data_ptr()) and launches[-1][3] == 3
    assert quick(a2.conj(), b) == "declined" and quick(a2, b.conj()) == "declined" and len(launches) == 1
    assert quick(torch._neg_view(a2), b) == "declined" and len(launches) == 1
    assert replay.quick_call()(a2.conj(), b) is None            # (no declined path: None, as the quick call gives)


def float16_pair(seed, grad=False):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(16, 32, generator=g).half(), torch.randn(32, 32, generator=g).half()
    return a.requires_grad_(grad), b.requires_grad_(grad)


@on_the_host
def test_calls_that_never_meet_a_plain_plan(monkeypatch):
    """A call that would record a gradient, under forward-mode AD, autocast, a torch.func
    transform or torch.jit.trace has another key (or none): it takes its own route (autograd's
    node, the dual's tangent, the cast, the batch rule, the op the trace records; the replay never
    launches for the middle three) and gives torch's answer; the plain call replays again after
    them, and for tensors that require grad under torch.no_grad."""
    a, b = float16_pair(7)
    log, _ = replayed_plan(monkeypatch, a, b, "tensorcore")

    def matmul(x, y):
        return tilemm.matmul(x, y, kernel="tensorcore")
    assert close(launched(log, 1, lambda: matmul(a, b)), a, b)
    x, y = float16_pair(8, grad=True)
    c = matmul(x, y)                  # (torch's autograd: its forward's product, of plain tensors, is the plan's)
    assert c.grad_fn is not None and close(c.detach(), x.detach(), y.detach())
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(a, torch.ones_like(a))
        assert close(fwAD.unpack_dual(launched(log, 0, lambda: matmul(dual, b))).primal, a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = launched(log, 0, lambda: matmul(a, b))
    assert c.dtype == torch.bfloat16
    stacked = torch.stack([a, a])
    c = launched(log, 0, lambda: torch.func.vmap(matmul, in_dims=(0, None))(stacked, b))
    assert c.shape == (2, 16, 32) and close(c[1], a, b)
    traced, (a2, b2) = torch.jit.trace(matmul, (a, b), check_trace=False), float16_pair(9)
    assert close(traced(a2, b2), a2, b2)      # (the op recorded: a trace of the replay's launch would give a @ b)
    with torch.no_grad():             # (a tensor that requires grad records none here: the plain call's plan)
        assert close(launched(log, 1, lambda: matmul(x, y)), x.detach(), y.detach())
    assert close(launched(log, 1, lambda: matmul(a, b)), a, b)


@pytest.mark.gpu
def test_gpu_int8_repeated_calls_and_their_guards():
    """On the GPU, tensorcore-int's split-K replay of 16 x 8192 x 3072 (B a weight (N, K).T):
    repeated on new operands (the quick call of a @ b), and each call its guard turns away (A off
    16 bytes' alignment, a negative view), on a side stream whose producer is late, and captured in
    a CUDA graph (the replay declines: the plan's path, without a workspace) - every answer exact."""
    from .test_gpu_programs import SLEEP_CYCLES, captured
    m, k, n = 16, 8192, 3072

    def pair(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randint(-128, 128, (m, k), dtype=I8, device="cuda", generator=g)
        return a, torch.randint(-128, 128, (n, k), dtype=I8, device="cuda", generator=g).T

    def same(c, a, b):
        return c.dtype == torch.int32 and torch.equal(c.double(), a.double() @ b.double())
    a, b = pair(1)
    assert same(int8_matmul(a, b), a, b)
    known = cache.PLANS[cache.call_key(a, b, "tensorcore-int", None, "int32", {})]
    assert known.replay is not None and isinstance(known.replay.single[0], SplitKLaunch)
    for seed in (2, 3):
        a, b = pair(seed)
        assert same(int8_matmul(a, b), a, b)
    shifted = torch.empty(m * k + 1, dtype=I8, device="cuda")[1:].view(m, k)
    shifted.copy_(a)
    assert same(int8_matmul(shifted, b), a, b)
    negative = torch._neg_view(a)
    assert same(int8_matmul(negative, b), negative.resolve_neg(), b)
    late = torch.zeros_like(a)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        late.copy_(a)
        c = int8_matmul(late, b)
    torch.cuda.synchronize()
    assert same(c, a, b)
    x, y = a.clone(), b
    # (the program a captured call falls back to, one run a tile, compiled before the capture)
    assert same(tilemm.matmul(x, y, kernel="tensorcore-int", out_dtype="int32", split_k=1), a, b)
    graph, c = captured(lambda: int8_matmul(x, y))
    for seed in (4, 5):
        a2, _ = pair(seed)
        x.copy_(a2)
        graph.replay()
        torch.cuda.synchronize()
        assert same(c, a2, y)
    assert same(int8_matmul(a, b), a, b)


# (a's shape, b's shape, dtype, the call's keywords, whether the host's one step takes the repeats);
# the others are left to the plan's path: a cast, a reshape or an empty result's strides
HOST_CASES = [((8, 8), (8, 8), torch.float32, {}, True), ((5, 3), (3, 7), torch.float64, {}, True),
              ((5, 3), (3, 7), torch.float64, {"kernel": "cpu-tiled", "block_m": 8}, True),
              ((4, 5, 3), (3, 6), torch.float32, {}, True), ((2, 1, 5, 3), (4, 3, 6), torch.int32, {}, True),
              ((5, 3), (3, 7), torch.complex64, {}, True), ((5, 3), (3, 7), torch.bool, {}, True),
              ((5, 0), (0, 7), torch.float32, {}, True), ((5, 3), (3, 0), torch.float32, {}, False),
              ((3,), (3, 7), torch.float32, {}, False), ((5, 3), (3,), torch.float32, {}, False),
              ((5, 3), (3, 7), torch.float32, {"out_dtype": torch.float64}, False),
              ((5, 3), (3, 7), torch.float16, {}, False),
              ((5, 3), (3, 7), torch.int8, {"out_dtype": torch.int32}, False)]


def host_operands(sa, sb, dtype, seed):
    """a and b (b a transposed view), of dtype, their values drawn from seed."""
    g = torch.Generator().manual_seed(seed)
    a, b = (torch.randint(-9, 9, s, generator=g) if not dtype.is_floating_point and not dtype.is_complex
            else torch.randn(s, generator=g) for s in (sa, sb[:-2] + sb[::-1][:2] if len(sb) > 1 else sb))
    b = b.transpose(-1, -2) if len(sb) > 1 else b
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("sa, sb, dtype, keywords, one_step", HOST_CASES)
def test_a_repeated_host_call_gives_the_plans_own_result(sa, sb, dtype, keywords, one_step):
    """A repeated call on CPU tensors (the host's rungs) gives what the plan's own path gives on
    the new operands, bit for bit: dtype, shape, strides, a result of its own each call (NumPy's
    memory, as the plan's path gives it), for tensors that require grad under no_grad too."""
    a, b = host_operands(sa, sb, dtype, 0)
    tilemm.matmul(a, b, **keywords)                        # the first call: its plan kept
    params = {k: v for k, v in keywords.items() if k not in ("kernel", "out_dtype")}
    kept = cache.PLANS[cache.call_key(a, b, keywords.get("kernel"), None, keywords.get("out_dtype"), params)]
    assert (kept.fast is not None) == one_step and (kept.repeat is kept.fast) == one_step
    results = []
    for seed in (1, 2):
        a2, b2 = host_operands(sa, sb, dtype, seed)
        want = tilemm.plan(a2, b2, **keywords).execute()
        with torch.no_grad():
            grad = dtype.is_floating_point or dtype.is_complex
            c = tilemm.matmul(a2.requires_grad_(grad), b2, **keywords)
        results.append((c, want))
    for c, want in results:                                 # (the second call wrote no result of the first)
        assert c.dtype == want.dtype and c.shape == want.shape and c.stride() == want.stride()
        assert torch.equal(c, want) and not c.requires_grad
        assert c.untyped_storage().resizable() == want.untyped_storage().resizable()
    if results[0][0].numel():
        assert results[0][0].data_ptr() != results[1][0].data_ptr()
