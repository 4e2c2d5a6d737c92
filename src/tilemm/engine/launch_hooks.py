"""What a compiled graph's launch of a fused-epilogue program needs from the thread that makes it,
checked or set just before the launch (a Triton pre-run hook on the program): its operands on the
GPU Triton launches on (the current one), and, for descriptors made in the program, an allocator.

Why at the launch: a graph's launches need not run where it was traced. The backward runs in
autograd's device thread, a server calls from its workers, and Triton keeps its allocator per
thread (a ContextVar). A backend that sets no device for a launch (aot_eager; Inductor's graphs
do) would launch on the current GPU with another's tensors: a read across devices, or a fault.
Inductor's own launcher calls no hook, and sets its allocator itself."""
from __future__ import annotations


def hook(program, before_launch) -> None:
    """before_launch(*args, **kwargs) to run before each launch of program (a Triton JITFunction;
    once, whoever asks again)."""
    hooks = getattr(program, "pre_run_hooks", None)      # (a JITFunction's, and the interpreter's)
    if hooks is not None and before_launch not in hooks:
        program.add_pre_run_hook(before_launch)


def device_hook(*args, **kwargs) -> None:
    """Before a launch of a pointer program (its arguments, A first): A on the current GPU."""
    check_launch_device(args[0] if args else kwargs.get("a_ptr"))


def descriptors_hook(*args, MAKE_DESCRIPTORS=True, **kwargs) -> None:
    """Before a launch of the TMA program (its arguments, A first): where it makes its
    descriptors (a compiled graph's launch; an eager launch passes host descriptors), A on the
    current GPU and an allocator in this thread for their scratch."""
    if MAKE_DESCRIPTORS:
        check_launch_device(args[0] if args else kwargs.get("a_in"))
        ensure_allocator()


def check_launch_device(a) -> None:
    """ValueError where tensor a is on a CUDA GPU other than the current one."""
    device = getattr(a, "device", None)
    if device is None or device.type != "cuda":
        return
    import torch
    current = torch.cuda.current_device()
    if device.index != current:
        raise ValueError(f"tilemm's fused-epilogue program: its operands are on {device} and the current GPU is "
                         f"cuda:{current}, where Triton would launch it; make the call under "
                         f"`with torch.cuda.device({device.index}):` (Inductor's compiled graphs do)")


def ensure_allocator() -> None:
    """Descriptors made in a program need global scratch, which Triton asks its allocator for at
    each launch: torch's caching allocator where none is set in this thread (one set by the
    caller, or by Inductor, is kept)."""
    import triton
    from triton.runtime import _allocation
    current = getattr(_allocation, "_allocator", None)
    current = current.get() if hasattr(current, "get") else current
    if current is None or type(current).__name__ == "NullAllocator":
        triton.set_allocator(torch_scratch)


def torch_scratch(size: int, alignment: int, stream):
    """Triton's scratch from torch's caching allocator, on the current GPU (the launch's)."""
    import torch
    return torch.empty(size, dtype=torch.int8, device="cuda")
