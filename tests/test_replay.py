"""A repeated call's launches replayed on new operands (tilemm.engine.replay): the substitution
itself, checked on the CPU with a stand-in for a compiled program that records what it is given.
The GPU tier (tests/test_gpu_programs.py) checks replayed products against the reference."""
import pytest

torch = pytest.importorskip("torch")

from tilemm.engine.launches import BoundLaunch, CopyInto, Steps  # noqa: E402
from tilemm.engine.replay import recorded  # noqa: E402


class Descriptor:
    """Stands for Triton's TensorDescriptor (recognized by its name and its base)."""
    def __init__(self, base, block):
        self.base, self.block = base, block


Descriptor.__name__ = "TensorDescriptor"


def launched(args):
    """A BoundLaunch that has launched once: its runner records the values it is given."""
    seen = []
    launch = BoundLaunch(None, (1,), args, {})
    launch.runner = lambda *values, stream=None: seen.append(values)
    launch.values = tuple(args) + (64, True)          # constexprs at the end, as all_arguments gives them
    return launch, seen


def test_operands_views_and_scratch_take_the_new_calls_places():
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    c = torch.empty(8, 5)
    scratch = torch.empty(2, 6, 5)
    fill, fill_seen = launched((b.T, scratch, 6, 5))              # writes B's parts
    product, seen = launched((Descriptor(a, [4, 2]), Descriptor(scratch.view(12, 5), [4, 2]), c, 8, 5, 6, 0.5))
    replay = recorded(Steps([fill, product]), (a, b, c))
    assert replay is not None and replay.groups == [(scratch.numel(), scratch.dtype)]

    big = torch.randn(10, 6)
    a2, b2 = big[2:], torch.randn(6, 5)                            # a view that does not start its storage
    c2 = replay.run(a2, b2)
    bT, parts, k, n = fill_seen[-1][:4]
    assert bT == b2.data_ptr() and (k, n) == (6, 5) and fill_seen[-1][4:] == (64, True)   # a view: its address
    a_desc, parts_desc, c_arg, *rest = seen[-1]
    assert a_desc.base.data_ptr() == a2.data_ptr() and torch.equal(a_desc.base, a2) and a_desc.block == [4, 2]
    assert parts_desc.base.untyped_storage().data_ptr() == parts.untyped_storage().data_ptr()   # one scratch
    assert parts.untyped_storage().data_ptr() != scratch.untyped_storage().data_ptr()          # afresh
    assert parts_desc.base.shape == (12, 5) and c2.shape == (8, 5)
    assert c_arg == c2.data_ptr()          # an operand itself goes to the program as its address
    assert rest == [8, 5, 6, 0.5, 64, True]


def test_a_programs_view_of_an_operand_is_given_as_its_address():
    """A program reads a tensor argument's address alone: a view of an operand that starts inside
    it (here A's rows from the third, B's transpose) is given as the new operand's address plus the
    view's offset in bytes, whatever the new operand's own offset in its storage."""
    a, b = torch.randn(8, 6, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    c = torch.empty(8, 5, dtype=torch.float64)
    program, seen = launched((a[2:], b.T, c, 3))
    replay = recorded(program, (a, b, c))
    assert replay is not None
    big = torch.randn(11, 6, dtype=torch.float64)
    a2, b2 = big[3:], torch.randn(6, 5, dtype=torch.float64)
    c2 = replay.run(a2, b2)
    assert seen[-1][:4] == (a2.data_ptr() + 2 * 6 * 8, b2.data_ptr(), c2.data_ptr(), 3)


def test_copies_into_aligned_rows_are_made_again_from_the_new_operand():
    """An operand copied into a scratch buffer of wider rows (TMA's alignment) before the product:
    a replay copies the new call's operand (here B, read through its transpose) into its own scratch,
    in the order recorded, and the product reads that scratch."""
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    c = torch.empty(8, 5)
    padded = torch.empty(5, 8)                                   # B^T's 6 columns in rows of 8
    product, seen = launched((Descriptor(a, [4, 2]), Descriptor(padded[:, :6], [4, 2]), c, 8, 5, 6))
    copy = CopyInto(padded[:, :6], b.T)
    copy()
    replay = recorded(Steps([copy, product]), (a, b, c))
    assert replay is not None and replay.groups == [(padded.numel(), padded.dtype)]

    a2, b2 = torch.randn(8, 6), torch.randn(6, 5)
    c2 = replay.run(a2, b2)
    _, b_desc, c_arg, *_ = seen[-1]
    assert torch.equal(b_desc.base, b2.T) and b_desc.base.stride() == (8, 1)       # the new B, copied
    assert b_desc.base.untyped_storage().data_ptr() != padded.untyped_storage().data_ptr() and c_arg == c2.data_ptr()
    assert torch.equal(padded[:, :6], b.T)                       # the first call's scratch left alone


def test_copies_of_word_views_are_replayed_as_such():
    """A copy made through int32 views (rows of 2-byte elements whose bytes divide by 4) is replayed
    the same way, on the new operand."""
    a, b, c = torch.randn(8, 6).to(torch.bfloat16), torch.randn(6, 5), torch.empty(8, 5)
    padded = torch.empty(8, 8, dtype=torch.bfloat16)
    copy = CopyInto(padded[:, :6], a, "int32")
    copy()
    assert torch.equal(padded[:, :6], a)
    product, seen = launched((Descriptor(padded[:, :6], [4, 2]), b, c))
    replay = recorded(Steps([copy, product]), (a, b, c))
    assert replay is not None
    a2 = torch.randn(8, 6).to(torch.bfloat16)
    replay.run(a2, torch.randn(6, 5))
    assert torch.equal(seen[-1][0].base, a2)


def test_inputs_beyond_a_and_b_take_the_new_calls_places():
    """scaled_matmul's replays carry the two scales as inputs after a and b (C still last): a new
    call's scales stand where the first call's stood, and their alignment is part of the guard."""
    a, b, c = torch.randn(8, 6), torch.randn(6, 5), torch.empty(8, 5)
    sa, sb = torch.tensor([0.5]), torch.tensor([4.0])
    product, seen = launched((Descriptor(a, [4, 2]), Descriptor(b.T, [4, 2]), c, sa, sb, 8, 5, 6))
    replay = recorded(product, (a, b, sa, sb, c))
    assert replay is not None and replay.groups == [] and len(replay.aligned) == 4

    a2, b2, sa2, sb2 = torch.randn(8, 6), torch.randn(6, 5), torch.tensor([2.0]), torch.tensor([3.0])
    c2 = replay.run(a2, b2, sa2, sb2)
    _, _, c_arg, sa_arg, sb_arg, *rest = seen[-1]
    assert (c_arg, sa_arg, sb_arg) == (c2.data_ptr(), sa2.data_ptr(), sb2.data_ptr()) and rest == [8, 5, 6, 64, True]
    assert recorded(product, (a, b, sa, sa, c)) is None       # two scales in one tensor's memory


def split_launch(a, b, c, partials, given: list):
    """A stand-in launch taking a workspace (split K) of a, b, c and M = 4, whose workspace is
    (partials, epoch 7); each (device, stream) it is asked for goes to `given`."""
    from tilemm.engine.workspaces import WorkspaceLaunch

    class Program:                               # stands for a JIT function: what its signature reads
        @staticmethod
        def fn(a_ptr, b_ptr, c_ptr, m, ws_ptr=None, epoch=0):
            pass

    class Split(WorkspaceLaunch):
        WORKSPACE = ("ws_ptr", "epoch")

        def workspace(self, device, stream):
            given.append((device, stream))
            return partials, 7
    launch = Split(Program, (1,), (a, b, c, 4), {}, lambda: None, 2, 2)
    launch.values = (a, b, c, 4, None, 0)
    return launch


def test_a_workspace_launch_is_given_addresses_and_its_workspace():
    """A launch taking a workspace (split K) is given its operands as addresses, as a plain launch
    is, and the workspace of the replay's device and stream, as addresses too."""
    given, seen = [], []
    partials = torch.empty(16)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    launch = split_launch(a, b, c, partials, given)
    launch.runner = lambda *values, stream=None: seen.append(values)
    replay = recorded(launch, (a, b, c))
    a2, b2 = torch.randn(4, 4), torch.randn(4, 4)
    c2 = replay.run(a2, b2)
    assert given[-1] == (-1, None)                                     # the CPU: no stream
    assert seen[-1] == (a2.data_ptr(), b2.data_ptr(), c2.data_ptr(), 4, partials.data_ptr(), 7)


def test_what_cannot_be_replayed_is_refused():
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    launch, _ = launched((a, b, c, object()))                      # an argument of an unknown kind
    assert recorded(Steps([launch]), (a, b, c)) is None
    not_run = BoundLaunch(None, (1,), (a, b, c), {})                # never launched: no compiled program
    assert recorded(not_run, (a, b, c)) is None
    ok, _ = launched((a, b, c))
    assert recorded(Steps([ok, lambda: None]), (a, b, c)) is None   # a step that is not a launch
    assert recorded(ok, (a, a.T, c)) is None                       # operands sharing storage
    assert recorded(ok, (a, b, c)) is not None


def test_constexpr_tuples_are_kept_as_they_are():
    """A program's tuple of constants (matmul_kernel's ALIGN) is part of the recording, not a reason
    to leave repeated calls to the usual path; a tuple holding a tensor is."""
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    product, seen = launched((a, b, c, 4, (8, 4, 1)))
    replay = recorded(product, (a, b, c))
    assert replay is not None
    a2 = torch.randn(4, 4)
    replay.run(a2, torch.randn(4, 4))
    assert seen[-1][0] == a2.data_ptr() and seen[-1][4] == (8, 4, 1)
    holding, _ = launched((a, b, c, (1, a)))
    assert recorded(holding, (a, b, c)) is None


def test_a_programs_step_function_is_kept_as_it_is():
    """The persistent schedule's STEPS (a Triton function passed as a constexpr, the rung's sum of
    K steps) is part of the recording, as a constant is: repeated calls replay it."""
    from tilemm.ladder.tensorcore.r10_tensorcore_kernel import tile_steps
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    product, seen = launched((a, b, c, tile_steps))
    replay = recorded(product, (a, b, c))
    assert replay is not None
    replay.run(torch.randn(4, 4), torch.randn(4, 4))
    assert seen[-1][3] is tile_steps


def test_alignment_is_each_operands_own():
    """Triton specializes each pointer on its own 16 bytes: an aligned A with an unaligned B is not
    the same program as an unaligned A with an aligned B, so the guard tells them apart."""
    from tilemm.engine.replay_guard import alignment
    x = torch.empty(64, dtype=torch.float32)
    aligned, off = x[:16].view(4, 4), x[1:17].view(4, 4)
    assert alignment(aligned, aligned) == (0, 0)
    assert alignment(aligned, off) != alignment(off, aligned)


def copy_and_product():
    """A replay of B copied into wider rows (scratch) and a product reading them, with what its
    stand-in program saw."""
    a, b, c = torch.randn(8, 6), torch.randn(6, 5), torch.empty(8, 5)
    padded = torch.empty(5, 8)
    product, seen = launched((Descriptor(a, [4, 2]), Descriptor(padded[:, :6], [4, 2]), c, 8, 5, 6))
    copy = CopyInto(padded[:, :6], b.T)
    copy()
    return recorded(Steps([copy, product]), (a, b, c)), seen


def scratch_of(seen):
    return seen[-1][1].base.untyped_storage().data_ptr()


def test_scratch_is_kept_per_thread_and_its_places_filled_once():
    """Repeated calls on one stream from one thread reuse one scratch, with the launches' values
    into it made once; each call still reads its own operands, and another thread has its own."""
    import threading
    replay, seen = copy_and_product()
    b1, b2 = torch.randn(6, 5), torch.randn(6, 5)
    replay.run(torch.randn(8, 6), b1)
    first, filled = scratch_of(seen), replay.filled
    assert torch.equal(seen[-1][1].base, b1.T)
    replay.run(torch.randn(8, 6), b2)
    assert scratch_of(seen) == first and replay.filled is filled and torch.equal(seen[-1][1].base, b2.T)
    other = []
    thread = threading.Thread(target=lambda: (replay.run(torch.randn(8, 6), b1), other.append(scratch_of(seen))))
    thread.start()
    thread.join()
    assert other and other[0] != first


def test_scratch_grows_and_large_scratch_is_not_kept(monkeypatch):
    """A replay needing more scratch than is kept grows it, and one whose scratch passes
    SCRATCH_KEPT_UP_TO allocates its own at every call."""
    import threading
    from tilemm.engine import replay as replay_module
    small, small_seen = copy_and_product()
    result = {}

    def calls():
        small.run(torch.randn(8, 6), torch.randn(6, 5))
        result["small"] = scratch_of(small_seen)
        x, y, c = torch.randn(40, 30), torch.randn(30, 20), torch.empty(40, 20)
        wide = torch.empty(20, 64)
        product, seen = launched((Descriptor(x, [4, 2]), Descriptor(wide[:, :30], [4, 2]), c, 40, 20, 30))
        big = recorded(Steps([CopyInto(wide[:, :30], y.T), product]), (x, y, c))
        y2 = torch.randn(30, 20)
        big.run(torch.randn(40, 30), y2)
        result["grown"] = (scratch_of(seen), torch.equal(seen[-1][1].base, y2.T))
        small.run(torch.randn(8, 6), torch.randn(6, 5))
        result["small again"] = scratch_of(small_seen)
        monkeypatch.setattr(replay_module, "SCRATCH_KEPT_UP_TO", 256)
        big.run(torch.randn(40, 30), y2)
        result["large"] = scratch_of(seen), torch.equal(seen[-1][1].base, y2.T)
    thread = threading.Thread(target=calls)      # a thread of its own: nothing kept from other tests
    thread.start()
    thread.join()
    assert result["grown"][1] and result["grown"][0] != result["small"]
    assert result["small again"] == result["grown"][0]       # the grown scratch, views made again
    assert result["large"][1] and result["large"][0] != result["grown"][0]


def test_scratch_buffers_start_aligned():
    from tilemm.engine.replay import SCRATCH_ALIGN, scratch_layout
    offsets, total = scratch_layout([(5, torch.float32), (3, torch.bfloat16), (1, torch.int8)])
    assert offsets == [0, SCRATCH_ALIGN, 2 * SCRATCH_ALIGN] and total == 3 * SCRATCH_ALIGN


def test_two_scratch_buffers_in_the_kept_scratch_do_not_overlap():
    """A and B each copied into wider rows: in the kept scratch each copy has a place of its own,
    and each descriptor reads its own operand's copy."""
    a, b, c = torch.randn(8, 6), torch.randn(6, 5), torch.empty(8, 5)
    a_rows, b_rows = torch.empty(8, 8), torch.empty(5, 8)
    product, seen = launched((Descriptor(a_rows[:, :6], [4, 2]), Descriptor(b_rows[:, :6], [4, 2]), c, 8, 5, 6))
    copies = [CopyInto(a_rows[:, :6], a), CopyInto(b_rows[:, :6], b.T)]
    for copy in copies:
        copy()
    replay = recorded(Steps([*copies, product]), (a, b, c))
    assert len(replay.groups) == 2
    for _ in range(2):
        a2, b2 = torch.randn(8, 6), torch.randn(6, 5)
        replay.run(a2, b2)
        a_desc, b_desc = seen[-1][:2]
        assert torch.equal(a_desc.base, a2) and torch.equal(b_desc.base, b2.T)
        assert a_desc.base.stride() == (8, 1) and b_desc.base.stride() == (8, 1)


def test_descriptors_over_views_of_operands_take_their_addresses():
    """A descriptor whose base is a view of an operand (B^T, rows from the third on) is replayed
    with the address of that place in the new operand, not a tensor view: Triton reads no more."""
    from tilemm.engine.replay import Address
    a, b, c = torch.randn(8, 6), torch.randn(6, 5), torch.empty(8, 5)
    product, seen = launched((Descriptor(a[2:], [4, 2]), Descriptor(b.T, [4, 2]), c, 8, 5, 6))
    replay = recorded(product, (a, b, c))
    big = torch.randn(10, 6)
    a2, b2 = big[1:9], torch.randn(6, 5)
    replay.run(a2, b2)
    a_desc, b_desc = seen[-1][:2]
    assert type(a_desc.base) is Address and a_desc.base.data_ptr() == a2.data_ptr() + 2 * 6 * a2.element_size()
    assert type(b_desc.base) is Address and b_desc.base.data_ptr() == b2.data_ptr()
    assert a_desc.block == [4, 2] and b_desc.block == [4, 2]


def test_release_lets_go_of_every_threads_kept_scratch():
    """tilemm.release_memory (replay.release) drops the kept scratch of this thread and of another
    live one; the next call allocates anew and still reads its own operands."""
    import threading
    from tilemm.engine import replay as replay_module
    replay, seen = copy_and_product()
    replay.run(torch.randn(8, 6), torch.randn(6, 5))
    ready, released, done = threading.Event(), threading.Event(), {}

    def other():
        replay.run(torch.randn(8, 6), torch.randn(6, 5))
        done["before"] = dict(replay_module.kept_scratch())
        ready.set()
        released.wait(10)
        done["after"] = dict(replay_module.kept_scratch())
    thread = threading.Thread(target=other)
    thread.start()
    ready.wait(10)
    assert replay_module.kept_scratch() and done["before"]
    replay_module.release()
    released.set()
    thread.join()
    assert replay_module.kept_scratch() == {} and done["after"] == {}
    b = torch.randn(6, 5)
    replay.run(torch.randn(8, 6), b)
    assert torch.equal(seen[-1][1].base, b.T) and replay_module.kept_scratch()
