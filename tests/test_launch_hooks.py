"""What a compiled graph's launch of a fused-epilogue program needs from the thread that makes it
(tilemm.engine.launch_hooks): Triton keeps its allocator per thread, and a graph may launch the
program in another thread than the one that traced it (autograd's device thread runs the
backward); a backend that sets no device for a launch would launch on the current GPU."""
import threading
import types

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.runtime import _allocation  # noqa: E402

from tilemm.engine import launch_hooks  # noqa: E402
from tilemm.engine.launch_hooks import check_launch_device, descriptors_hook, device_hook, hook, torch_scratch  # noqa: E402


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
    """(What the hook is for: were this false, the tests below could not fail.)"""
    assert type(in_a_new_thread(thread_allocator)).__name__ == "NullAllocator"


def test_the_hook_sets_torchs_allocator_where_the_program_makes_descriptors():
    a = torch.zeros(2, 2)

    def hooked(make_descriptors):
        descriptors_hook(a, 2, MAKE_DESCRIPTORS=make_descriptors, BLOCK_M=128)
        return thread_allocator()
    assert in_a_new_thread(lambda: hooked(True)) is torch_scratch
    assert type(in_a_new_thread(lambda: hooked(False))).__name__ == "NullAllocator"


def test_a_caller_s_allocator_is_kept():
    def own(size, alignment, stream):
        raise AssertionError("not called here")

    def hooked():
        triton.set_allocator(own)
        descriptors_hook(a_in=torch.zeros(1), MAKE_DESCRIPTORS=True)
        return thread_allocator()
    assert in_a_new_thread(hooked) is own


def on_gpu(index: int):
    """A stand-in for a tensor on cuda:index (only its device is read)."""
    return types.SimpleNamespace(device=torch.device("cuda", index))


def test_operands_on_another_gpu_than_the_current_are_refused_before_the_launch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    check_launch_device(on_gpu(0))
    check_launch_device(torch.zeros(1))          # (host tensors: Triton's interpreter)
    with pytest.raises(ValueError, match=r"on cuda:1 and the current GPU is cuda:0.*torch.cuda.device\(1\)"):
        device_hook(on_gpu(1), 2, BLOCK_M=64)
    with pytest.raises(ValueError, match="on cuda:1"):
        descriptors_hook(on_gpu(1), MAKE_DESCRIPTORS=True)
    descriptors_hook(on_gpu(1), MAKE_DESCRIPTORS=False)     # (an eager launch: host descriptors, device set)


def test_each_program_carries_its_hook_once():
    from tilemm.engine.epilogue_kernel import matmul_epilogue_kernel
    from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent
    for program, before in ((matmul_epilogue_persistent, descriptors_hook), (matmul_epilogue_kernel, device_hook)):
        hook(program, before)
        hook(program, before)
        assert program.pre_run_hooks.count(before) == 1
    assert launch_hooks.descriptors_hook not in matmul_epilogue_kernel.pre_run_hooks
