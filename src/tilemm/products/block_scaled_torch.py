"""torch's own block-scaled product: ``torch._scaled_mm`` with DeepGEMM's block scales, which
PyTorch built with CUDA 12.9 or newer hands to cuBLASLt's 1x128 / 128x128 block scaling on Hopper.
tilemm.products.block_scaled takes it by default where this torch offers it (on an H200 it ran
faster than rung 16's program on nine of ten DeepSeek-V3-like shapes: docs/ladder/r16-block-scaled.md),
with ``library=False`` keeping rung 16's program and ``library=True`` asking for this route or an
error that says why not.

What torch asks (ATen's ScaledBlas.cpp: ``is_blockwise_1x128_scaling`` of (a, scale_a) and
``is_blockwise_128x128_scaling`` of (b.t(), scale_b.t()); ``_check_deepseek_support``):

- a (M, K) row-major, b (K, N) given as (N, K).T; K and N multiples of 16; float8 operands;
- scale_a (M, ceil(K/128)) float32 with strides (1, M): M-major (DeepGEMM's own layout for A's scales);
- scale_b.t() (ceil(N/128), ceil(K/128)) float32, row-major, its rows ceil(K/128) apart in some
  versions of that file and ceil(K/128) rounded up to a multiple of 4 (16 bytes) in others;
- compute capability 9.x, cuBLASLt 12.9 or newer; no fast accumulation (cuBLASLt's block scaling
  has none: torch refuses ``use_fast_accum=True`` with these scales).

The route takes only calls where every version agrees and the layout is the one measured: K a
multiple of 512 (whole 128-blocks, ceil(K/128) a multiple of 4: the padded and the unpadded B
scales are then one layout), M a multiple of 4 (A's scales' K-block stride, M floats, 16-byte
aligned as cuBLASLt's block scales are), N a multiple of 16 (torch's check; N need not be one of
128: 2112 was measured), e4m3 operands (torch's checks would take e4m3 with e5m2 too, never two
e5m2: not tried), bfloat16 results (the one measured), no tile parameter. Everything else runs
rung 16's program.

The scales are laid out as torch wants at each call (two small copies on the call's stream, none
where they already are), so the caller keeps DeepGEMM's shapes, as for rung 16's program.
"""
from __future__ import annotations

import functools
import re

from tilemm.engine import streams
from tilemm.products import scaled_common as scaled_out
from tilemm.system import compat
from tilemm.numerics.dtypes import torch_dtype_name

MIN_TORCH = (2, 9)         # ScaledBlas.cpp's 1x128 / 128x128 kinds in _scaled_mm
MIN_CUDA = (12, 9)         # cuBLASLt's VEC128_32F / BLK128x128_32F scale modes
SCALE_BLOCK = 128
K_BLOCKS_MULTIPLE = 4      # ceil(K/128): where the padded and unpadded layouts of B's scales agree
K_MULTIPLE = SCALE_BLOCK * K_BLOCKS_MULTIPLE       # 512: whole blocks, four at a time
M_MULTIPLE = 4             # A's scales: their K-block stride (M floats) 16-byte aligned
N_MULTIPLE = 16            # torch's own check of N (and of K)
OPERANDS = "float8_e4m3fn"
OUT_DTYPE = "bfloat16"


def device_refusal(device) -> str | None:
    """Why this torch can't run DeepGEMM's block scales through ``_scaled_mm`` on `device` (a
    torch device), or None. Decided from versions and the device's capability, once a device
    (no trial call)."""
    if compat.triton_interpreter():
        return "under TRITON_INTERPRET=1 the operands are CPU tensors, and torch's block-scaled _scaled_mm runs on GPUs"
    return refusal_of_device(device.type, device.index)


@functools.lru_cache(maxsize=None)
def refusal_of_device(kind: str, index) -> str | None:
    """device_refusal's answer for a device of this kind and index, outside the interpreter."""
    if kind != "cuda":
        return f"the operands are on {kind}, and torch's block-scaled _scaled_mm runs on CUDA GPUs"
    import torch
    capability = torch.cuda.get_device_capability(torch.device(kind, index))
    return platform_refusal(str(torch.__version__), torch.version.cuda, capability)


def platform_refusal(torch_version: str, cuda_version: str | None, capability: tuple) -> str | None:
    """Why a torch of this version, built with this CUDA (None: without CUDA, as ROCm's), on a
    GPU of this compute capability does not take DeepGEMM's block scales, or None."""
    if cuda_version is None:
        return "this torch is built without CUDA (DeepGEMM's block scales go to cuBLASLt)"
    if version(torch_version) < MIN_TORCH:
        return (f"torch {torch_version} is older than {'.'.join(map(str, MIN_TORCH))}, whose _scaled_mm takes "
                "DeepGEMM's block scales")
    if version(cuda_version) < MIN_CUDA:
        return (f"this torch is built with CUDA {cuda_version}; cuBLASLt's block scaling needs "
                f"{'.'.join(map(str, MIN_CUDA))} or newer")
    if capability[0] != 9:
        return (f"the GPU has compute capability {capability[0]}.{capability[1]}: torch runs DeepGEMM's block "
                "scales on Hopper (9.x) only")
    return None


def version(text: str) -> tuple:
    """(major, minor) of a version string ("2.11.0+cu130", "12.9"); (0, 0) where it has none."""
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def call_refusal(a, b, out_dtype: str, fast_accum: bool, params: dict) -> str | None:
    """Why this call (operands and scales already checked: float8 matrices that line up, block
    scales) is not one the route takes, or None."""
    if params:
        return f"tile parameters ({', '.join(sorted(params))}) are rung 16's program's"
    if fast_accum:
        return "fast_accum=True: cuBLASLt's block scaling has no fast accumulation (torch refuses it)"
    if out_dtype != OUT_DTYPE:
        return f"out_dtype={out_dtype}: the route runs bfloat16 results"
    dtypes = {torch_dtype_name(x.dtype) for x in (a, b)}
    if dtypes != {OPERANDS}:
        return f"operands of {' and '.join(sorted(dtypes))}: the route runs {OPERANDS} operands"
    m, k = a.shape
    n = b.shape[1]
    if not (m and n and k):
        return "an empty product"
    if n % N_MULTIPLE:
        return f"N = {n}: torch takes a multiple of {N_MULTIPLE}"
    if k % K_MULTIPLE:
        return (f"K = {k}: the route takes a multiple of {K_MULTIPLE} (whole 128-blocks, four at a time: "
                "versions of torch lay B's scales out differently otherwise)")
    if m % M_MULTIPLE:
        return f"M = {m}: the route takes a multiple of {M_MULTIPLE} rows (16-byte aligned strides of A's scales)"
    if a.stride() != (k, 1) or b.stride() != (1, k):
        return "a row-major a and a b given as (N, K).T are what torch reads (other layouts: rung 16 copies them)"
    if a.data_ptr() % 16 or b.data_ptr() % 16:
        return "an operand that does not start on 16 bytes"
    return None


def torch_scales(scale_a, scale_b, torch) -> tuple:
    """(scale_a, scale_b) as _scaled_mm takes them: scale_a (M, kb) with strides (1, M), and
    scale_b (kb, nb) whose transpose (nb, kb) is row-major with rows round_up(kb, 4) apart (the
    padded form; the route takes kb a multiple of 4, where it is also the unpadded one). Copies
    where the scales are laid out otherwise; none where they already are."""
    m, blocks = scale_a.shape
    columns = scale_b.shape[1]
    width = -(-blocks // K_BLOCKS_MULTIPLE) * K_BLOCKS_MULTIPLE
    if not laid_out(scale_a, 1, m):
        scale_a = copied(scale_a, (1, m), torch)
    if laid_out(scale_b, 1, width):
        return scale_a, scale_b
    if width == blocks:                   # (every call the route takes: one copy, no padding)
        return scale_a, copied(scale_b, (1, blocks), torch)
    rows = torch.zeros((columns, width), dtype=torch.float32, device=scale_b.device)[:, :blocks]
    rows.copy_(scale_b.T)                 # (the padding: never read, but defined)
    return scale_a, rows.T


def laid_out(scale, row_stride: int, column_stride: int) -> bool:
    """Whether a matrix of scales has these strides, a dimension of one element's stride aside
    (torch's check_size_stride ignores those)."""
    (rows, columns), (have_rows, have_columns) = scale.shape, scale.stride()
    return (rows <= 1 or have_rows == row_stride) and (columns <= 1 or have_columns == column_stride)


def copied(scale, strides: tuple, torch):
    """A copy of a matrix of scales with these strides (one allocation and one copy: a call's CPU
    time counts beside a product of a few rows)."""
    return torch.empty_strided(scale.shape, strides, dtype=scale.dtype, device=scale.device).copy_(scale)


def product(a, b, scale_a, scale_b, out=None, stream=None):
    """C = torch._scaled_mm of a call the route takes (call_refusal and device_refusal None),
    into out where given, on `stream` (None: torch's current stream, the caller's)."""
    if stream is None:
        return _scaled_mm(a, b, scale_a, scale_b, out)
    queue = streams.handle_of(stream)
    with scaled_out.on_stream(queue, scaled_out.device_name(a.device)):
        return _scaled_mm(a, b, scale_a, scale_b, out)


def _scaled_mm(a, b, scale_a, scale_b, out):
    import torch                          # (the operands are torch tensors: imported already)
    scale_a, scale_b = torch_scales(scale_a, scale_b, torch)
    if out is not None and out.is_contiguous():     # written where it is
        return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=out)
    c = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    if out is None:
        return c
    out.copy_(c)                                    # (cuBLASLt writes a dense C)
    return out


def repeated(a, b, scale_a, scale_b):
    """A repeated call's product (its key: the same shapes, strides, dtypes, device, out_dtype
    and parameters as a call the route took, no out, no stream), or None where its operands do
    not start on 16 bytes (the usual path then decides)."""
    if a.data_ptr() % 16 or b.data_ptr() % 16:
        return None
    return _scaled_mm(a, b, scale_a, scale_b, None)
