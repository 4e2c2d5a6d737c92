"""The scratch of descriptors made in the TMA program: Triton asks a per-thread allocator for it
at each launch, and a compiled graph may launch the program in another thread than the one that
traced it (autograd's device thread runs the backward). The program's pre-run hook sets one in
whichever thread launches it."""
import threading

import pytest

triton = pytest.importorskip("triton")
from triton.runtime import _allocation  # noqa: E402

from tilemm.engine import epilogue_tma_launch  # noqa: E402
from tilemm.engine.epilogue_tma_launch import allocate_in_every_thread, allocator_hook, torch_scratch  # noqa: E402


def in_a_new_thread(body):
    """body() in a fresh thread (a fresh context: Triton's NullAllocator), its answer back."""
    answers = []
    worker = threading.Thread(target=lambda: answers.append(body()))
    worker.start()
    worker.join()
    return answers[0]


def thread_allocator():
    return _allocation._allocator.get()


def test_a_new_thread_has_no_allocator():
    """(What the hook is for: were this false, the test below could not fail.)"""
    assert type(in_a_new_thread(thread_allocator)).__name__ == "NullAllocator"


def test_the_hook_sets_torchs_allocator_where_the_program_makes_descriptors():
    def hooked(make_descriptors):
        allocator_hook(1, 2, MAKE_DESCRIPTORS=make_descriptors, BLOCK_M=128)
        return thread_allocator()
    assert in_a_new_thread(lambda: hooked(True)) is torch_scratch
    assert type(in_a_new_thread(lambda: hooked(False))).__name__ == "NullAllocator"


def test_a_caller_s_allocator_is_kept():
    def own(size, alignment, stream):
        raise AssertionError("not called here")

    def hooked():
        triton.set_allocator(own)
        allocator_hook(MAKE_DESCRIPTORS=True)
        return thread_allocator()
    assert in_a_new_thread(hooked) is own


def test_the_program_carries_the_hook_once():
    from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent as program
    allocate_in_every_thread(program)
    allocate_in_every_thread(program)
    assert program.pre_run_hooks.count(epilogue_tma_launch.allocator_hook) == 1
