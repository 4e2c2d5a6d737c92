"""tilemm.grouped_matmul's arguments checked before any work: which layout of torch._grouped_mm a
call is (Layout), its result's shape and dtype, and the offsets or counts where they can be read
cheaply. Every problem is a ValueError or TypeError that names it."""
from __future__ import annotations

from dataclasses import dataclass

from tilemm.products.scaled_common import FP8        # (with block scales only)
from tilemm.numerics.dtypes import torch_dtype_name

DTYPES = ("float16", "bfloat16", "float32", "int8")
SCALE_BLOCK = 128

# SPLIT of the program (tilemm.ladder.tensorcore.r15_grouped_kernel's numbering)
BATCHED, SPLIT_M, SPLIT_K, SPLIT_N, COUNTED_M = range(5)
NAMES = {BATCHED: "3-D x 3-D (batched)", SPLIT_M: "2-D x 3-D (offs over a's rows)",
         SPLIT_K: "2-D x 2-D (offs over K)", SPLIT_N: "3-D x 2-D (offs over b's columns)",
         COUNTED_M: "3-D x 3-D with counts (masked)"}


@dataclass(frozen=True)
class Layout:
    split: int            # BATCHED, SPLIT_M, SPLIT_K, SPLIT_N or COUNTED_M
    groups: int
    shape: tuple          # the result's
    extent: int           # the length of the dimension offs cuts (COUNTED_M: the capacity)
    dtype: str            # the result's dtype name

    def cuts(self) -> str:
        return NAMES[self.split]


def dtype_name(x) -> str:
    return torch_dtype_name(x.dtype)


def layout(a, b, offs, counts, out_dtype, scaled: bool = False) -> Layout:
    """The call's Layout (a, b: arrays with .shape, .ndim and .dtype; offs, counts: None or 1-D;
    scaled: block scales given, for float8 operands)."""
    for name, x in (("a", a), ("b", b)):
        if x.ndim not in (2, 3):
            raise ValueError(f"grouped_matmul: operand {name} has shape {tuple(x.shape)}; it takes 2-D or 3-D operands")
        if dtype_name(x) not in (FP8 if scaled else DTYPES):
            if dtype_name(x) in FP8:
                raise TypeError(f"grouped_matmul: operand {name} is {dtype_name(x)}; float8 groups take block "
                                "scales, scale_a and scale_b")
            if scaled and dtype_name(x) in DTYPES:
                raise TypeError(f"grouped_matmul: block scales (scale_a, scale_b) are for float8 operands "
                                f"({', '.join(FP8)}); operand {name} is {dtype_name(x)}: pass no scales")
            raise TypeError(f"grouped_matmul: operand {name} has dtype {dtype_name(x)}; it multiplies "
                            f"{', '.join(DTYPES)}" + (" (float8 with block scales: " + ", ".join(FP8) + ")") * scaled)
    if dtype_name(a) != dtype_name(b):
        raise TypeError(f"grouped_matmul: a is {dtype_name(a)} and b {dtype_name(b)}; both must be one dtype")
    if offs is not None and counts is not None:
        raise ValueError("grouped_matmul: pass offs (the contiguous layouts) or counts (the masked one), not both")
    if a.ndim == 2 and b.ndim == 2:
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"grouped_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not line up (a's "
                             f"{a.shape[1]} columns vs b's {b.shape[0]} rows), which offs cuts into groups")
        split, groups, shape, extent = SPLIT_K, None, None, a.shape[1]
    else:
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"grouped_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not line up "
                             f"(a's {a.shape[-1]} columns vs b's {b.shape[-2]} rows)")
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0]:
            raise ValueError(f"grouped_matmul: a holds {a.shape[0]} groups and b {b.shape[0]} "
                             f"(shapes {tuple(a.shape)} and {tuple(b.shape)})")
        if a.ndim == 3 and b.ndim == 3:
            split = BATCHED if counts is None else COUNTED_M
            groups, shape, extent = a.shape[0], (a.shape[0], a.shape[1], b.shape[2]), a.shape[1]
        elif a.ndim == 2:
            split, groups, shape, extent = SPLIT_M, b.shape[0], (a.shape[0], b.shape[2]), a.shape[0]
        else:
            split, groups, shape, extent = SPLIT_N, a.shape[0], (a.shape[1], b.shape[1]), b.shape[1]
    if split == BATCHED and offs is not None:
        raise ValueError("grouped_matmul: offs given for 3-D x 3-D operands, whose groups are their first axis "
                         "(as torch._grouped_mm refuses); pass counts for the masked layout")
    if split in (SPLIT_M, SPLIT_K, SPLIT_N) and offs is None:
        raise ValueError(f"grouped_matmul: {a.ndim}-D x {b.ndim}-D operands need offs, the groups' cumulative ends")
    if counts is not None and split != COUNTED_M:
        raise ValueError("grouped_matmul: counts is the masked layout's: 3-D a (G, capacity, K) and 3-D b (G, K, N)")
    cut = offs if offs is not None else counts
    if cut is not None:
        name = "offs" if offs is not None else "counts"
        if cut.ndim != 1:
            raise ValueError(f"grouped_matmul: {name} has shape {tuple(cut.shape)}; it must be 1-D, one entry a group")
        if dtype_name(cut) != "int32":
            raise ValueError(f"grouped_matmul: {name} has dtype {dtype_name(cut)}; it must be int32 (as "
                             "torch._grouped_mm's)")
        if groups is not None and cut.shape[0] != groups:
            raise ValueError(f"grouped_matmul: {name} has {cut.shape[0]} entries for {groups} groups")
        groups = cut.shape[0]
        if split == SPLIT_K:
            shape = (groups, a.shape[0], b.shape[1])
    if scaled and split not in (SPLIT_M, BATCHED, COUNTED_M):
        raise ValueError(f"grouped_matmul: block scales take the MoE forward layouts (2-D x 3-D with offs, 3-D x 3-D, "
                         f"masked); this call is {NAMES[split]}")
    return Layout(split, groups, shape, extent, result_dtype(dtype_name(a), out_dtype))


def result_dtype(operands: str, out_dtype) -> str:
    """The result's dtype: out_dtype if allowed (None: the operands', int32 for int8)."""
    default = {"int8": "int32", **dict.fromkeys(FP8, "bfloat16")}.get(operands, operands)
    if out_dtype is None:
        return default
    # (a NumPy scalar type, np.float32, is a class: its name, not its dtype's descriptor)
    name = out_dtype.__name__ if isinstance(out_dtype, type) else getattr(out_dtype, "name", out_dtype)
    name = torch_dtype_name(name)
    allowed = ((default,) if operands in ("int8", "float32") else ("bfloat16", "float16", "float32")
               if operands in FP8 else (operands, "float32"))
    if name not in allowed:
        raise TypeError(f"grouped_matmul: out_dtype={out_dtype!r} for {operands} operands; choose "
                        f"{' or '.join(allowed)}")
    return name


def check_values(values, lay: Layout) -> None:
    """Offsets (non-decreasing, from 0, up to the extent) or counts (0 to the capacity) read on
    the host: a list of ints."""
    if lay.split == COUNTED_M:
        bad = [(g, c) for g, c in enumerate(values) if not 0 <= c <= lay.extent]
        if bad:
            g, c = bad[0]
            raise ValueError(f"grouped_matmul: counts[{g}] = {c} is outside 0..{lay.extent} (the capacity)")
        return
    previous = 0
    for g, end in enumerate(values):
        if end < previous:
            raise ValueError(f"grouped_matmul: offs is not sorted: offs[{g}] = {end} < {previous}, where the group "
                             "before it ends (offs holds each group's cumulative end)")
        previous = end
    if previous > lay.extent:
        raise ValueError(f"grouped_matmul: offs[-1] = {previous} is past the end: the dimension offs cuts "
                         f"({lay.cuts()}) has {lay.extent}")


def check_scales(scale_a, scale_b, a, b, lay: Layout, torch) -> None:
    """Block scales of float8 groups: float32 tensors on the operands' device, scale_a one a 1 x 128
    block of a row of A ((total_M, K/128), or (G, M, K/128) for a 3-D a), scale_b one a 128 x 128
    block of a group's B ((G, K/128, N/128)), K/128 and N/128 rounded up."""
    k, n = b.shape[-2], b.shape[-1]
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    wanted = {"scale_a": a.shape[:-1] + (kb,), "scale_b": (lay.groups, kb, nb)}
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise ValueError(f"grouped_matmul: {name} is {type(s).__name__}; block scales are float32 tensors, "
                             f"{name} of shape {tuple(wanted[name])}")
        if s.dtype != torch.float32:
            raise ValueError(f"grouped_matmul: {name} has dtype {dtype_name(s)}; block scales are float32")
        if tuple(s.shape) != tuple(wanted[name]):
            raise ValueError(f"grouped_matmul: {name} has shape {tuple(s.shape)}; for these operands it is "
                             f"{tuple(wanted[name])} (one a {'1 x 128' if name == 'scale_a' else '128 x 128'} block)")
        if s.device != a.device:
            raise ValueError(f"grouped_matmul: {name} is on {s.device} and the operands on {a.device}")
