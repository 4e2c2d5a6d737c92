"""tilemm.grouped_matmul's GPU path in three steps: the checks that depend on a call's key alone,
resolved into a GroupedPlan (resolve); the offsets or counts made ready on the operands' device
(those on the host checked: cut_ready) and the result allocated (new_result); the
`tensorcore-grouped` rung's one launch (launch). run takes the last two, device_grouped all three;
a repeated call (tilemm.products.grouped_calls) starts from its first call's plan."""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import numpy as np

from tilemm.numerics import arrays
from tilemm.system import compat
from tilemm.products import grouped_host
from tilemm.products.grouped_checks import COUNTED_M, SPLIT_M, SPLIT_N, Layout, check_values
from tilemm.ladder import registry
from tilemm.plans.plan import JIT_LOCK, KernelUnavailable


def host_values(cut) -> list | None:
    """The offsets or counts as Python ints where they are on the host (no wait on a GPU), else None."""
    return cut.tolist() if on_host(cut) else None


def on_host(cut) -> bool:
    """Whether offsets or counts (as_array's) are on the host: a NumPy array or a CPU tensor."""
    if arrays.torch_of(cut) is not None:
        return cut.device.type == "cpu"
    return isinstance(cut, np.ndarray)


def as_array(cut):
    """offs or counts given as a list or tuple of ints: an int32 NumPy array (a list has no dtype)."""
    if isinstance(cut, (list, tuple)):
        check_listed(cut)
        return np.asarray(cut, dtype=np.int32).reshape(len(cut))
    if cut is not None and not (hasattr(cut, "ndim") and hasattr(cut, "dtype")):   # (a str: an AttributeError later)
        raise TypeError(f"grouped_matmul: offs and counts are int32 arrays or tensors, or lists of ints; "
                        f"got {type(cut).__name__} {cut!r:.60}")
    return cut


def check_listed(cut) -> None:
    """offs or counts given as a list or tuple: whole numbers within int32's range."""
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in cut):
        raise ValueError("grouped_matmul: offs and counts given as a list must hold whole numbers")
    if not all(INT32_MIN <= v <= INT32_MAX for v in cut):     # (NumPy's OverflowError in the cast to int32)
        raise ValueError(f"grouped_matmul: offs and counts given as a list must hold int32 values; got {list(cut)}")


INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


class GroupedPlan(NamedTuple):
    """What a call's checks resolve from what its key holds (kinds, dtypes, shapes, strides,
    devices, parameters), none of it from the operands' memory or values: a repeated call of the
    key (tilemm.products.grouped_calls) starts from it."""
    rung: object              # the `tensorcore-grouped` rung's module (launch, bound_launch); None: the host's loop
    lay: Layout
    config: dict              # the rung's parameters, `programs` apart (read only)
    programs: int             # the persistent grid (0: nothing to launch)
    dtype: object             # the result's torch dtype
    zero_uncovered: bool      # a new result zeroed even where the offsets are on the GPU (gradients)


def device_grouped(a, b, cut, lay, out, params, zero_uncovered: bool = False, scales=None):
    """torch operands: the rung's one launch (checks first). cut: offs or counts (None: a batch).
    zero_uncovered: a new result is zeroed even where the offsets are on the GPU (gradients).
    scales: float8 operands' block scales (scale_a, scale_b), checked (grouped_checks.check_scales)."""
    return run(resolve(a, b, cut, lay, out, params, zero_uncovered, scales), a, b, cut, out, scales)


def resolve(a, b, cut, lay, out, params, zero_uncovered: bool = False, scales=None) -> GroupedPlan:
    """The GroupedPlan of a call (device_grouped's arguments), after every check that depends on
    its key alone (a ValueError, TypeError or KernelUnavailable naming the problem)."""
    import torch
    from tilemm.engine import availability
    if a.device.type == "cpu" and not compat.triton_interpreter():
        return host_plan(a, cut, lay, out, params, zero_uncovered)
    r15_grouped = registry.program("tensorcore-grouped")
    config = r15_grouped.KERNEL.resolve(params)
    reason = availability.available()
    if reason:
        raise KernelUnavailable(f"grouped_matmul {reason.partition(', or a CPU rung')[0]}")
    if a.device.type != ("cpu" if compat.triton_interpreter() else "cuda"):
        raise ValueError(f"grouped_matmul: the operands are on {a.device}; "
                         + ("under TRITON_INTERPRET=1 they must be CPU tensors" if compat.triton_interpreter()
                            else "torch tensors are multiplied on a CUDA GPU or on the host"))
    check_cut_device(cut, a.device)
    dtype = getattr(torch, lay.dtype)
    check_out(out, lay, a.device)
    # (block scales: every block_k the rung takes, 16 to 128, divides the scales' 128-wide blocks)
    if scales is not None and a.device.type == "cuda" and torch.cuda.get_device_capability(a.device) < (8, 9):
        raise KernelUnavailable("grouped_matmul: float8 needs compute capability 8.9 or newer")
    if a.element_size() == 1 and a.device.type == "cuda" and config["block_k"] % 32:
        # (float8 and int8: Triton's compiler refused such a tile deep inside the launch)
        raise ValueError(f"grouped_matmul: block_k={config['block_k']}: the 8-bit tensor-core instruction "
                         "takes K in multiples of 32")
    if (config["small_m"] or 0) > config["block_m"]:
        raise ValueError(f"grouped_matmul: small_m={config['small_m']} is more than block_m={config['block_m']}; the "
                         "short tiles hold a group's last rows, fewer than a tall tile's")
    if config["tma"]:
        if not r15_grouped.tma_eligible(a, b, lay.split):
            raise ValueError("grouped_matmul: tma=True takes the MoE forward layouts with both operands K-major (a "
                             "row-major, b the transpose of a contiguous (G, N, K)), rows 16-byte aligned")
    reason = fitted_to_shared_memory(r15_grouped, config, params, a.element_size())
    if reason:
        raise KernelUnavailable(f"grouped_matmul: {reason}")
    tiles = tiles_bound(a, b, lay, config["block_m"], config["block_n"])
    programs = r15_grouped.programs_for(tiles, config.pop("programs"))
    return GroupedPlan(r15_grouped, lay, config, programs, dtype, zero_uncovered)


def host_plan(a, cut, lay, out, params, zero_uncovered: bool) -> GroupedPlan:
    """The GroupedPlan of a call on torch CPU tensors outside Triton's interpreter: a loop of
    products on the host (grouped_host.torch_products; rung None), its checks first (float8
    groups' block scales were checked before: grouped_checks.check_scales)."""
    import torch
    if params:
        raise TypeError(f"grouped_matmul: parameter(s) {', '.join(sorted(params))} are the GPU program's; CPU "
                        "tensors are multiplied on the host")
    check_cut_device(cut, a.device)
    check_out(out, lay, a.device)
    return GroupedPlan(None, lay, {}, 0, getattr(torch, lay.dtype), zero_uncovered)


def check_cut_device(cut, device) -> None:
    """offs or counts (None: none given) on the host or on the operands' device (ValueError otherwise)."""
    import torch
    if cut is None:
        return
    cut = as_array(cut)
    if not on_host(cut) and not (isinstance(cut, torch.Tensor) and cut.device == device):
        raise ValueError(f"grouped_matmul: offs or counts on {getattr(cut, 'device', '?')}; put them on the "
                         f"operands' device ({device}) or the host")


def check_out(out, lay: Layout, device) -> None:
    """out (None: none given): a torch tensor of the result's shape and dtype on the operands'
    device, its elements apart in memory (ValueError otherwise)."""
    import torch
    dtype = getattr(torch, lay.dtype)
    if out is not None and not (isinstance(out, torch.Tensor) and tuple(out.shape) == lay.shape and out.dtype == dtype
                                and out.device == device):
        raise ValueError(f"grouped_matmul: out must be a {lay.shape} tensor of {dtype} on {device}")
    arrays.check_torch_out_memory("grouped_matmul", out)


def fitted_to_shared_memory(r15_grouped, config: dict, params: dict, itemsize: int) -> str | None:
    """Where the caller named neither, config's K steps (block_k) halved down to 32, then its
    stages lowered, until their tiles fit a block's shared memory (in place); why they still do
    not fit, or None. (float32 operands: the default's 4 stages of 128 x 256 x 64 tiles need 393216
    bytes, past any GPU's. Shorter steps keep the stages: 8 experts, 5446 rows x 1408 x 2048 on an H200
    took 1.62 ms in 4 stages of 32-long steps, 3.52 ms in 2 stages of 64.)"""
    def reason():
        return r15_grouped.shared_limit(config["block_m"], config["block_n"], config["block_k"],
                                        config["num_stages"], itemsize)
    while reason() and "block_k" not in params and "num_stages" not in params and config["block_k"] > 32:
        config["block_k"] //= 2
    while reason() and "num_stages" not in params and config["num_stages"] > 1:
        config["num_stages"] -= 1
    return reason()


def run(plan: GroupedPlan, a, b, cut, out, scales=None):
    """C of a call of plan: its offsets or counts made ready (cut_ready), out or a new result
    (new_result), and the launch (a plan of the host, rung None: the host's loop)."""
    cut, values = cut_ready(plan, a, cut)
    c = out if out is not None else new_result(plan, a, values)
    if plan.rung is None:
        grouped_host.torch_products(a, b, c, values, plan.lay, scales)
    else:
        launch(plan, a, b, c, cut, scales)
    return c


def cut_ready(plan: GroupedPlan, a, cut) -> tuple:
    """(offsets or counts on the operands' device, their values where read on the host, else
    None): those on the host checked (their values, at every call)."""
    if cut is None:
        return None, None
    cut = as_array(cut)
    values = host_values(cut)
    if values is not None:
        check_values(values, plan.lay)
    import torch
    return torch.as_tensor(cut, device=a.device), values


def new_result(plan: GroupedPlan, a, values):
    """A new result on a's device, zeroed where rows (columns) are known to be left uncovered
    (zeroed_result)."""
    import torch
    return (torch.zeros if zeroed_result(plan, values) else torch.empty)(plan.lay.shape, dtype=plan.dtype,
                                                                            device=a.device)


def zeroed_result(plan: GroupedPlan, values) -> bool:
    """Whether a new result is zeroed: rows past a group's count (the masked layout), past a host
    offs[-1] short of the end, or past the GPU's offsets of a gradient's product."""
    lay = plan.lay
    return lay.split == COUNTED_M or (lay.split in (SPLIT_M, SPLIT_N) and (
        plan.zero_uncovered or (values is not None and values[-1:] != [lay.extent])))


def launch(plan: GroupedPlan, a, b, c, cut, scales=None) -> None:
    """plan's launch on these operands (cut on their device: cut_ready's), through Triton's JIT
    (tilemm.engine.jit_repeats), with a's GPU current."""
    if plan.programs:
        import torch
        guard = torch.cuda.device(a.device) if a.device.type == "cuda" else contextlib.nullcontext()
        with guard, JIT_LOCK:
            plan.rung.launch(a, b, c, cut, plan.lay.split, plan.lay.extent, plan.programs, **plan.config,
                             scales=scales)


def tiles_bound(a, b, lay, block_m: int, block_n: int) -> int:
    """The most tiles the groups can have, whatever their sizes (each cut can add one partial tile)."""
    def cdiv(x, y):
        return -(-x // y)
    g = lay.groups
    m, n = a.shape[-2], b.shape[-1]
    if lay.split == SPLIT_M:
        return (cdiv(m, block_m) + g) * cdiv(n, block_n)
    if lay.split == SPLIT_N:
        return cdiv(m, block_m) * (cdiv(n, block_n) + g)
    return g * cdiv(m, block_m) * cdiv(n, block_n)
