"""A repeated call's recorded launches (tilemm.engine.replay) run with the caller's out as C.

``matmul(a, b, out=y)`` in a loop would otherwise take the plan's path at each call: C computed
into a buffer of its own and copied into y, the programs launched through Triton's binder (about
a hundred microseconds of CPU a call, where the replay takes a few)."""
from __future__ import annotations

from tilemm.engine.replay import Replay
from tilemm.engine.replay_guard import alignment, capturing, lazy


def out_writer(replay, shape: tuple):
    """into(a, b, out) -> bool: replay's launches on a and b with out's memory as C (out C's own
    layout: contiguous, of the recorded C's shape and dtype), True once launched on torch's
    current stream; False where the replay's guard declines (the operands aligned otherwise than
    the recording's, out not 16-byte aligned as Triton's programs were specialized, another GPU
    current, a CUDA graph captured while the launches reuse memory, a conjugate or negative view).
    None where the replay can't write an out: not one Replay of a @ b, or C of another shape."""
    if (not isinstance(replay, Replay) or replay.device_index < 0 or len(replay.aligned) != 2
            or tuple(replay.c_shape) != tuple(shape)):
        return None
    index, aligned, stream_of = replay.device_index, replay.aligned, replay.current_stream

    def into(a, b, out) -> bool:
        if (replay.current_device() != index or out.data_ptr() % 16 or alignment(a, b) != aligned
                or (replay.reuses_memory and capturing()) or lazy(a) or lazy(b) or lazy(out)):
            return False
        replay.launch((a, b), out, [a.data_ptr(), b.data_ptr()], stream_of(index))
        return True
    return into
