"""Launchers without arguments: a Triton program bound to its arguments and launched past Triton's
Python layers (BoundLaunch), operand copies (CopyInto) and steps run in order (Steps), which
tilemm.engine.replay can run again on other operands."""
from __future__ import annotations

import functools

from tilemm.system import compat
from tilemm.engine.direct_launch import direct_runner


def bound_launch(program, grid: tuple, args: tuple, options: dict):
    """program[grid](*args, **options) as a launcher without arguments (a BoundLaunch)."""
    return BoundLaunch(program, grid, args, options)


class BoundLaunch:
    """program[grid](*args, **options) as a launcher without arguments that, from its second call
    on, launches the compiled program directly. Triton binds and specializes every argument,
    computes a cache key and looks the program up at each launch: about twice the CPU time of the
    compiled program's own launcher, or of cuBLAS through torch. With the
    same argument objects at every call the lookup finds the same program, so it is done once;
    and the program's own launcher is called past Triton's Python layers where it can be
    (tilemm.engine.direct_launch). Under the interpreter, or with another device current than at
    the first call, the plain launch. After a first launch, ``runner`` and
    ``values`` (every argument, constexprs too, in the signature's order) are what
    tilemm.engine.replay needs to launch the same program on other operands."""

    def __init__(self, program, grid: tuple, args: tuple, options: dict):
        self.program, self.grid, self.args, self.options = program, tuple(grid), args, options
        self.device = self.runner = self.values = None

    def __call__(self):
        if compat.triton_interpreter():
            return self.launch()
        from triton.runtime.driver import driver
        device = driver.active.get_current_device()
        if self.device == device:
            if self.values is None:            # worked out at the second call: one-shot calls skip it
                self.values = all_arguments(self.program, self.args, self.options)
            self.run(self.values)
            return
        compiled = self.launch()
        grid3 = self.grid + (1,) * (3 - len(self.grid))    # the compiled program's launcher reads three
        runner = compiled[grid3]
        self.device, self.runner = device, direct_runner(compiled, grid3, runner) or runner

    def launch(self):
        """The program launched through Triton's JIT (which compiles it the first time)."""
        return self.program[self.grid](*self.args, **self.options)

    def run(self, values: tuple, stream=None):
        """The compiled program on these values (its signature's order), on the stream given
        (a raw handle), else torch's current one."""
        self.runner(*values, stream=stream)



def raw_stream(device: int, stream):
    """stream, or where it is None torch's current one on device (an index; -1, the CPU: None)."""
    if stream is None and device >= 0:
        import torch
        return torch._C._cuda_getCurrentRawStream(device)
    return stream



class CopyInto:
    """dst.copy_(src), on torch's current stream, as a step of Steps: an operand copied into a
    scratch buffer (aligned rows for TMA), which tilemm.engine.replay makes again from a new
    call's operand into that call's scratch. word: a torch dtype's name to copy both as views of
    (rows_copy), or None."""

    def __init__(self, dst, src, word: str | None = None):
        self.dst, self.src, self.word = dst, src, word

    def __call__(self):
        copy_as(self.dst, self.src, self.word)


def copy_as(dst, src, word: str | None) -> None:
    """dst.copy_(src), through views of both as dtype `word` where it is given."""
    if word:
        import torch
        dst, src = dst.view(getattr(torch, word)), src.view(getattr(torch, word))
    dst.copy_(src)


class Steps:
    """Steps run in order, every one a BoundLaunch or a CopyInto: a launcher tilemm.engine.replay
    can run again on other operands of the same shapes and strides."""

    def __init__(self, launches):
        self.launches = [launch for launch in launches if launch]

    def __call__(self):
        for launch in self.launches:
            launch()


def all_arguments(program, args: tuple, options: dict) -> tuple:
    """Every argument of program[grid](*args, **options), constexprs and defaults too, in its
    signature's order: what the compiled program's launcher takes (launch options such as
    num_warps are not arguments)."""
    parameters = signature(program)
    bound = parameters.bind(*args, **{k: v for k, v in options.items() if k in parameters.parameters})
    bound.apply_defaults()
    return tuple(bound.arguments.values())


@functools.lru_cache(maxsize=None)
def signature(program):
    """The Python signature of a Triton program (its arguments' order)."""
    import inspect
    return inspect.signature(program.fn)


_SIDE_STREAMS: dict = {}


def side_stream(device, priority: bool = False):
    """A stream of the device besides the caller's, kept for the process: of the default (lowest)
    priority for copies that overlap a product, or of the highest for that product."""
    import torch
    key = (str(device), priority)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device, priority=-100 if priority else 0)   # clamped to the range
    return _SIDE_STREAMS[key]
