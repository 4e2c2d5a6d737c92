"""One product over several GPUs of one host, from one Python process: no torchrun, no process group.

    c = tilemm.multi.matmul(a, b, devices=[0, 1, 2, 3])     # a, b on one GPU, or in host memory

C is cut into a rows x cols grid of blocks, one a GPU (``split``: the grid that moves the fewest
bytes out of the operands' memory: square products 2 x 2 on four GPUs, a thin C by rows or
columns). Each GPU has a thread and streams of its own:

- **Operands on one GPU**: the GPU's block is summed over K panels; each panel of A's rows and B's
  columns is copied GPU to GPU (peer copies over NVLink, a copy engine's 2-D copy on the
  receiver's copy stream) while the previous one multiplies, two slots each way. The last panel
  multiplies in pieces of rows, each piece going home as soon as it is rounded, so that the
  copy of C back overlaps the last products. The operands' own GPU multiplies its block in place,
  K whole (no running sum).
- **Host operands**: each GPU runs tilemm.outofcore on its block (its rows of A, its columns of
  B, its block of a pinned C): the panel pipeline one level up, so operands larger than all the
  GPUs' memory together go through; each GPU has its own host link.

16-bit floats are summed in float32 across panels and rounded once (tilemm.spread.panels.accumulate),
integers wrap as NumPy's. The call returns once C is complete.

With ``devices=["cpu", "cpu"]`` the same threads run the same steps on the CPU (streams and events
do nothing there): how the tests run it on a machine with no GPU.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from tilemm.contract import torch_rules
from tilemm.spread import outofcore
from tilemm.numerics import arrays
from tilemm.numerics.dtypes import dtype_name, result_dtype
from tilemm.spread.outofcore_args import checked_limit
from tilemm.spread.panels import SIXTEEN_BIT, accumulate, block, product

PANELS = 8                  # K panels a GPU's block is summed over: the first one's copy is an eighth of the data
SMALLEST_PANEL = 1024       # K columns: below this a panel's product is too short to hide its copy
RETURN_PIECES = 4           # the last panel's product in pieces of rows, each sent home when done


def split(m: int, n: int, k: int, count: int) -> tuple[int, int]:
    """The rows x cols grid of C's blocks for `count` devices: the one that moves the fewest bytes
    from the operands (each block needs its rows of A and its columns of B: cols * M * K +
    rows * K * N, plus C once), ties to more rows (rows of a row-major C are contiguous)."""
    grids = [(r, count // r) for r in range(count, 0, -1) if count % r == 0]
    return min(grids, key=lambda g: g[1] * m * k + g[0] * k * n)


def checked_devices(devices) -> list:
    """The torch devices of `devices` (ints, "cuda:N", torch.device, or all "cpu"), or a ValueError."""
    import torch
    if isinstance(devices, (str, int)) or not hasattr(devices, "__iter__"):
        raise ValueError(f"tilemm.multi: devices={devices!r}; give a list, e.g. devices=[0, 1]")
    found = []
    for d in devices:
        if isinstance(d, bool):
            raise ValueError(f"tilemm.multi: devices holds {d!r}; GPU indices are ints")
        try:
            dev = torch.device("cuda", d) if isinstance(d, int) else torch.device(d)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"tilemm.multi: devices holds {d!r}, which is not a device ({e})") from None
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
        found.append(dev)
    if not found:
        raise ValueError("tilemm.multi: devices=[] names no device")
    kinds = {d.type for d in found}
    if kinds - {"cuda", "cpu"} or len(kinds) > 1:
        raise ValueError(f"tilemm.multi: devices={list(devices)!r}; all CUDA GPUs, or all 'cpu' (to run the "
                         "same steps on the CPU)")
    if kinds == {"cuda"}:
        count = torch.cuda.device_count()
        outside = [d.index for d in found if d.index < 0 or d.index >= count]
        if outside:
            raise ValueError(f"tilemm.multi: devices {outside} are out of range: this host has {count} CUDA GPUs")
        seen = [d.index for d in found]
        if len(set(seen)) != len(seen):
            raise ValueError(f"tilemm.multi: devices={seen} names a GPU twice")
    return found


def matmul(a, b, *, devices, panel_k: int | None = None, memory_limit: int | None = None,
           out_of_core: bool | None = None):
    """C = A @ B over `devices` from this process (see the module's docstring).

    a, b: 2-D torch tensors on one GPU (C comes back on that GPU), or host operands (torch CPU
        tensors or NumPy arrays; C comes back in host memory as tilemm.outofcore gives it: NumPy
        for NumPy operands, else a torch tensor, pinned where there is a GPU).
    devices: the GPUs to use, e.g. [0, 1, 2, 3] (indices, "cuda:N" or torch devices), or a list of
        "cpu" to run the same threads on the CPU.
    panel_k: K columns a panel (operands on a GPU); default K / PANELS, at least SMALLEST_PANEL.
    memory_limit: bytes each GPU's out-of-core plan may use (host operands; default: its free memory).
    out_of_core: run each device's block through tilemm.outofcore; default: host operands on GPUs do.
    """
    import torch
    devs = checked_devices(devices)
    a_t, b_t, home = _checked_operands(a, b)
    if home.type == "cuda" and devs[0].type == "cpu":
        raise ValueError(f"tilemm.multi: the operands are on {home}, the devices are CPUs")
    if panel_k is not None and (isinstance(panel_k, bool) or not isinstance(panel_k, int) or panel_k < 1):
        raise ValueError(f"tilemm.multi: panel_k={panel_k!r}; a positive int")
    if out_of_core is not None and not isinstance(out_of_core, bool):
        raise ValueError(f"tilemm.multi: out_of_core={out_of_core!r}; True, False or None")
    memory_limit = checked_limit(memory_limit)     # (a str was taken where no panel went out of core)
    (m, k), n = a_t.shape, b_t.shape[1]
    result = result_dtype(dtype_name(a_t.dtype), dtype_name(b_t.dtype))
    torch_result = getattr(torch, result)
    a_t, b_t = (x if x.dtype == torch_result else x.to(torch_result) for x in (a_t, b_t))
    if out_of_core is None:
        out_of_core = home.type == "cpu" and devs[0].type == "cuda"
    rows, cols = split(m, n, k, len(devs))
    shares = [(block(m, rows, d // cols), block(n, cols, d % cols), dev, d) for d, dev in enumerate(devs)]
    as_numpy = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and result != "bfloat16"
    if out_of_core:
        c = np.empty((m, n), dtype=result) if as_numpy else \
            torch.empty((m, n), dtype=torch_result, pin_memory=devs[0].type == "cuda")
        c_t = torch.from_numpy(c) if as_numpy else c

        def work(rows_d, cols_d, dev, number):
            outofcore.matmul(a_t[rows_d], b_t[:, cols_d], out=c_t[rows_d, cols_d], device=dev,
                             memory_limit=memory_limit)
    else:
        if home.type == "cpu" and devs[0].type == "cuda":
            raise ValueError("tilemm.multi: host operands on GPUs go out of core (out_of_core=False takes "
                             "operands on one GPU)")
        c = torch.empty((m, n), dtype=torch_result, device=home)
        c_t = c
        width = panel_k or max(SMALLEST_PANEL, -(-k // PANELS))
        ready = None
        if home.type == "cuda":        # the caller's work on the operands, queued before the call
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(home))

        # the operands' own device multiplies in place (with CPU devices, the first: the others go
        # through the copies, which is how the tests see them)
        in_place = next((d for d, dev in enumerate(devs) if dev == home), None)

        def work(rows_d, cols_d, dev, number):
            _share(a_t, b_t, c_t, rows_d, cols_d, dev, width, ready, number == in_place)
    _run_threads(work, [s for s in shares if s[0].stop > s[0].start and s[1].stop > s[1].start])
    if k == 0:
        c_t.zero_()
    return c.numpy() if as_numpy and not out_of_core else c


def _checked_operands(a, b):
    """(a, b, their device) as torch tensors: both on one GPU, or both in host memory."""
    import torch
    both_torch = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, (np.ndarray, torch.Tensor)) and isinstance(b, (np.ndarray, torch.Tensor))):
            raise TypeError(f"tilemm.multi: operands are a {type(a).__name__} and a {type(b).__name__}")
        a, b = (arrays.host_torch(x) if isinstance(x, np.ndarray) else x for x in (a, b))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError(f"tilemm.multi: operands are a {type(a).__name__} and a {type(b).__name__}; it takes "
                        "torch tensors or NumPy arrays")
    if a.device != b.device or a.device.type not in ("cpu", "cuda"):
        raise ValueError(f"tilemm.multi: the operands are on {a.device} and {b.device}; put both on one GPU "
                         "or both in host memory")
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        raise TypeError(f"tilemm.multi: operand {0 if a.requires_grad else 1} requires grad, and devices= records "
                        "no autograd graph; detach it, or call under torch.no_grad()")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"tilemm.multi: shapes {tuple(a.shape)} and {tuple(b.shape)}; it takes matrices (2-D)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"tilemm.multi: shapes {tuple(a.shape)} and {tuple(b.shape)} do not line up "
                         f"(core dimensions {a.shape[1]} and {b.shape[0]})")
    refused = both_torch and torch_rules.refusal(tuple(a.shape), tuple(b.shape), dtype_name(a.dtype),
                                                 dtype_name(b.dtype), device=a.device.type)
    if refused:                 # torch tensors of two dtypes: torch's error, as tilemm.matmul gives it
        raise refused
    for name, x in (("0", a), ("1", b)):
        if dtype_name(x.dtype) not in outofcore.DTYPES:
            raise TypeError(f"tilemm.multi: operand {name} has dtype {x.dtype}; it takes {', '.join(outofcore.DTYPES)}")
    # (grad mode is thread-local: the devices' threads would record, or refuse, what this one does not)
    return a.detach(), b.detach(), a.device


def _run_threads(work, shares) -> None:
    """work(*share) on a thread each; the first error raised again here once all have ended."""
    errors = []

    def run(share):
        try:
            work(*share)
        except BaseException as e:            # re-raised in the caller's thread
            errors.append(e)
    threads = [threading.Thread(target=run, args=(s,), name=f"tilemm.multi {s[2]}") for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _share(a, b, c, rows, cols, device, width: int, ready, local: bool) -> None:
    """c[rows, cols] = a[rows] @ b[:, cols] on `device`: where the operands are (local), in place;
    elsewhere K in panels of `width`, copied in (module docstring)."""
    import torch
    k = a.shape[1]
    result = dtype_name(c.dtype)
    sums = "float32" if result in SIXTEEN_BIT else result
    lanes = outofcore.Lanes(device, own_compute=True)
    r, q = rows.stop - rows.start, cols.stop - cols.start
    panels = [(k0, min(k, k0 + width)) for k0 in range(0, k, width)]
    if lanes.cuda:
        _peer_access(device, a.device)
    with torch.cuda.device(device) if lanes.cuda else contextlib.nullcontext(), lanes.on(lanes.compute):
        for stream in (lanes.compute, lanes.copy_in, lanes.copy_out):
            lanes.wait(stream, ready)
        if not panels:
            return
        if local:                                          # in place: one product, K whole, no running sum
            target = c[rows, cols]
            whole = target if target.is_contiguous() else torch.empty((r, q), dtype=c.dtype, device=device)
            product(whole, a[rows], b[:, cols])
            if whole is not target:
                target.copy_(whole)
            if lanes.cuda:
                lanes.compute.synchronize()
            return
        acc = torch.empty((r, q), dtype=getattr(torch, sums), device=device)
        slots = [[None, None], [None, None]]               # A's and B's panel buffers (not on the operands' GPU)
        loaded, freed = [None, None], [None, None]         # events: a slot's copy is in; its last product done

        def fetch(p):
            k0, k1 = panels[p]
            a_src, b_src = a[rows, k0:k1], b[k0:k1, cols]
            slot = p % 2
            with lanes.on(lanes.copy_in):
                lanes.wait(lanes.copy_in, freed[slot])
                pair = []
                for which, src in enumerate((a_src, b_src)):
                    if slots[which][slot] is None or slots[which][slot].shape != src.shape:
                        slots[which][slot] = torch.empty(src.shape, dtype=src.dtype, device=device)
                    _copy(slots[which][slot], src, lanes.copy_in)
                    pair.append(slots[which][slot])
                loaded[slot] = lanes.mark(lanes.copy_in)
            return pair

        pending = fetch(0)
        for p in range(len(panels)):
            a_panel, b_panel = pending
            if p + 1 < len(panels):
                pending = fetch(p + 1)                     # in flight while this panel multiplies
            lanes.wait(lanes.compute, loaded[p % 2])
            last = p + 1 == len(panels)
            pieces = [block(r, RETURN_PIECES, i) for i in range(RETURN_PIECES)] if last else [slice(0, r)]
            for piece in pieces:
                if piece.stop == piece.start:
                    continue
                accumulate(acc[piece], a_panel[piece], b_panel, sums, first=p == 0)
                if last:                                   # rounded once, then home while the next piece multiplies
                    _send_home(acc[piece], c[rows.start + piece.start:rows.start + piece.stop, cols], lanes)
            freed[p % 2] = lanes.mark(lanes.compute)
        for stream in (lanes.compute, lanes.copy_in, lanes.copy_out):
            if stream is not None:
                stream.synchronize()                       # C complete, and the buffers free, when the call returns


def _send_home(piece_sums, c_piece, lanes: outofcore.Lanes) -> None:
    """Round a finished piece of the block to C's dtype and write it into C (on the operands' device)."""
    rounded = piece_sums.to(c_piece.dtype)              # on the compute stream
    done = lanes.mark(lanes.compute)
    with lanes.on(lanes.copy_out):
        lanes.wait(lanes.copy_out, done)
        _copy(c_piece, rounded, lanes.copy_out)
        if lanes.cuda:
            rounded.record_stream(lanes.copy_out)        # not reused before the copy has read it


def _copy(dst, src, stream) -> None:
    """dst.copy_(src) queued on `stream` (current): between GPUs a copy engine's copy over NVLink where
    the GPUs are peers, one 2-D copy for rows a stride apart (torch's copy_ would run a kernel on
    the SMs for a strided view); on the CPU a plain copy."""
    if not dst.is_cuda or not _copy_2d(dst, src, stream):
        dst.copy_(src, non_blocking=True)


def _copy_2d(dst, src, stream) -> bool:
    """One cuMemcpy2DAsync between two GPUs' 2-D views with contiguous rows, both sides addressed as
    unified memory (the driver finds each side's GPU); False where it cannot."""
    if src.stride(-1) != 1 or dst.stride(-1) != 1 or not src.numel():
        return False
    from cuda.bindings import driver as cu
    params = cu.CUDA_MEMCPY2D()
    for side, t in (("src", src), ("dst", dst)):
        setattr(params, side + "Pitch", t.stride(0) * t.element_size() if t.shape[0] > 1 else t.shape[1] * t.element_size())
        setattr(params, side + "MemoryType", cu.CUmemorytype.CU_MEMORYTYPE_UNIFIED)
        setattr(params, side + "Device", t.data_ptr())
    params.WidthInBytes = src.shape[1] * src.element_size()
    params.Height = src.shape[0]
    err, = cu.cuMemcpy2DAsync(params, cu.CUstream(stream.cuda_stream))
    return err == cu.CUresult.CUDA_SUCCESS


def _peer_access(device, home) -> None:
    """Let `device` and `home` reach each other's memory directly (torch enables peer access between
    two GPUs on its first copy between them)."""
    import torch
    if device != home and (device, home) not in _PEERS:
        torch.empty(1, device=device).copy_(torch.empty(1, device=home))
        torch.empty(1, device=home).copy_(torch.empty(1, device=device))
        _PEERS.add((device, home))


_PEERS: set = set()
