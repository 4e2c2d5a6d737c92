"""Whether a repeated call may replay the launches its first call recorded: the operands'
alignment, the device, CUDA-graph capture, views whose memory is not their values; and the device
guard that runs a replay recorded on a GPU that is not the current one."""
from __future__ import annotations


def alignment(*inputs) -> tuple:
    """Where each input's data starts within 16 bytes: compiled programs are specialized on it
    (Triton on each pointer's 16-byte alignment, regblock's vector loads on the rows')."""
    return tuple([x.data_ptr() % 16 for x in inputs])


def fits(inputs: tuple, device, aligned: tuple) -> bool:
    """Whether a call on inputs (a, b, ...) may replay launches recorded on `device` with inputs
    aligned as `aligned`: the same alignment, the current device that device, no CUDA graph being
    captured, no input a conjugate or negative view. (The operands' device is the recorded one: a
    replay is found by a key holding it.)"""
    return alignment(*inputs) == aligned and current(device) and not any(lazy(x) for x in inputs)


def lazy(x) -> bool:
    """Whether torch tensor x is a conjugate or negative view (x.conj(), x.conj().imag): its memory
    holds the values before that operation, which a launch would read as they are. A plan's key
    does not tell such a view from a plain tensor of its layout: the replay refuses it, and the
    plan's usual path multiplies its values."""
    return x.is_neg() or x.is_conj()


def current(device) -> bool:
    """Whether device is the current one and no CUDA graph is being captured on its stream."""
    return on_device(device) and not capturing()


def on_device(device) -> bool:
    """Whether torch's current GPU is device's."""
    import torch
    return torch._C._cuda_getDevice() == device.index


def elsewhere(index: int, call, *inputs):
    """call(*inputs) with GPU ``index`` current: a replay recorded there, called while the caller has
    another GPU current (tensors on cuda:1, cuda:0 current), runs under a device guard (cheap, and
    only on this path)."""
    import torch
    with torch.cuda.device(index):
        return call(*inputs)


def capturing() -> bool:
    """Whether a CUDA graph is being captured on torch's current stream."""
    import torch
    return torch._C._cuda_isCurrentStreamCapturing()
