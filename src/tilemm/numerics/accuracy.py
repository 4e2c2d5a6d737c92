"""The reference answer and the test every result must pass.

Integers and bool: equal, bit for bit, to numpy.matmul (which wraps; bool is the OR of ANDs).
Floats: within the classical dot-product error bound of a float64 reference,
    |c - ref| <= 2 * K * u_acc * (|A| @ |B|)  +  u_out * |ref|  (+ a denormal floor)
where u_acc is the unit roundoff of the accumulation type and u_out that of the
output type (one final rounding). Blocked and tiled sums stay well inside it.
Complex: each part (real, imaginary) within the same bound over 2K terms, against a
complex128 reference, |A| and |B| the moduli:
    |part(c - ref)| <= 2 * 2K * u * (|A| @ |B|)  +  u * |part(ref)|
Each part of a complex dot product is a real sum of 2K products, a_r b_r - a_i b_i or
a_r b_i + a_i b_r, whose magnitudes add up to at most |a| |b| (Cauchy-Schwarz): CGEMM's
and ZGEMM's sums, and tensorcore-complex's real product, are real dot products of 2K terms.
longdouble (and its complex) against a longdouble reference, its own u.
NaN and Inf must sit where the reference, rounded to the output type, has them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

_np = np

from tilemm.numerics.dtypes import ACCUMULATE, HOST_ONLY, UNIT_ROUNDOFF, is_complex, is_exact


@dataclass
class Verdict:
    """The outcome of `compare`.

    Attributes
    ----------
    ok : bool
        Whether the result passed.
    worst : float
        Floats: the worst |error| / allowed error over the finite entries; integers: the count of
        entries that differ.
    message : str
        What was found, e.g. the first entry that differs.
    """
    ok: bool
    worst: float  # worst |error| / allowed error over finite entries (ints: count of mismatches)
    message: str


def array_module(x):
    """NumPy, or CuPy for CuPy arrays: the check runs where the data is (a 16384^2 float64
    reference takes minutes on a laptop's cores and milliseconds on the GPU)."""
    if type(x).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def reference(a, b, result: str):
    """numpy.matmul for integers and bool (exact, wrapping); float64 matmul for floats, complex128
    for complex numbers, longdouble for longdouble (not yet rounded)."""
    xp = array_module(a)
    if is_exact(result):
        return xp.matmul(a.astype(result), b.astype(result))
    return xp.matmul(a.astype(_wide(xp, result)), b.astype(_wide(xp, result)))


def _wide(xp, result: str):
    """The reference's dtype: float64 or complex128, longdouble's own for it."""
    if result in HOST_ONLY:
        return xp.dtype(result)
    return xp.complex128 if is_complex(result) else xp.float64


def _part(xp, result: str):
    """The real type of a result's parts (the result's own for a real one), and its float reference's."""
    part = {"complex64": "float32", "complex128": "float64"}.get(result)
    if part is None and result in HOST_ONLY:
        part = xp.finfo(xp.dtype(result)).dtype.name
    return part or result


def tolerance(result: str, k: int) -> tuple[float, float]:
    """(relative to |A|@|B|, relative to |ref|) for a float result of inner size k: a part of a
    complex result is a sum of 2k real products."""
    terms = 2 * k if is_complex(result) else k
    return 2.0 * max(terms, 1) * UNIT_ROUNDOFF[ACCUMULATE[result]], UNIT_ROUNDOFF[result]


def denormal_floor(result: str) -> float:
    """The absolute error a result may carry near zero, where the output type's spacing stops
    shrinking: float16's subnormals are 2^-24 apart (a sum of 1e-5 rounds to a multiple of it,
    which u_out * |ref| does not allow for); bfloat16 and float32 go down to float32's, float64
    to its own."""
    if result == "float16":
        return 2.0 ** -24
    part = _part(_np, result)
    return float(_np.finfo(_np.float32 if part in ("float32", "bfloat16") else part).tiny)


def compare(c, a, b, result: str) -> Verdict:
    """Check a product against the reference, as every rung's answer is checked.

    Integers and bool must equal ``numpy.matmul`` bit for bit; floats must lie within the
    dot-product error bound of a float64 (or complex128) reference (the module's docstring).

    Parameters
    ----------
    c : numpy.ndarray or cupy.ndarray
        The result, of dtype ``result`` (float32 for bfloat16).
    a, b : numpy.ndarray or cupy.ndarray
        The operands, of c's kind: matrices, stacks or vectors, as numpy.matmul takes them (K,
        the sum's length, is a's last dimension).
    result : str
        The result's dtype name, e.g. ``"float32"``.

    Returns
    -------
    Verdict
        ``ok``, the worst error against its bound, and a message.
    """
    np = array_module(c)  # noqa: F811  (the same code serves NumPy and CuPy)
    ref = reference(a, b, result)
    if c.shape != ref.shape:
        return Verdict(False, np.inf, f"shape {c.shape}, expected {ref.shape}")
    if c.size == 0:
        return Verdict(True, 0.0, "empty")
    if is_exact(result):
        bad = int(np.count_nonzero(c != ref))
        if bad:
            i = tuple(int(x) for x in np.unravel_index(np.argmax(c != ref), c.shape))
            return Verdict(False, bad, f"{bad} of {c.size} entries differ; first at {i}: {c[i]} != {ref[i]}")
        return Verdict(True, 0.0, "bit-exact")
    wide = _wide(np, result)
    with _quiet(np):
        scale = np.matmul(np.abs(a.astype(wide)), np.abs(b.astype(wide)))     # moduli for complex operands
    if not is_complex(result):
        return _within(np, np.asarray(c, dtype=wide), ref, scale, result, a.shape[-1], "")
    c = np.asarray(c, dtype=wide)
    parts = [_within(np, c.real, ref.real, scale, result, a.shape[-1], "real part: "),
             _within(np, c.imag, ref.imag, scale, result, a.shape[-1], "imaginary part: ")]
    failed = [v for v in parts if not v.ok]
    return failed[0] if failed else max(parts, key=lambda v: v.worst)


def _within(np, c, ref, scale, result: str, k: int, what: str) -> Verdict:
    """c (a real result, or one part of a complex one, in the reference's type) against the
    reference's same part, within the bound."""
    rounded = _round_to(np, ref, _part(np, result))
    # Non-finite entries must match the reference's exactly (NaN where NaN, same-signed Inf).
    ref_bad = ~np.isfinite(rounded)
    mismatch = (np.isnan(c) != np.isnan(rounded)) | (np.isinf(c) != np.isinf(rounded)) \
        | (np.isinf(rounded) & (c != rounded))
    if bool(mismatch.any()):
        i = tuple(int(x) for x in np.unravel_index(np.argmax(mismatch), c.shape))
        return Verdict(False, np.inf, f"{what}NaN/Inf pattern differs from the reference; e.g. at {i}: "
                                      f"{c[i]} vs {rounded[i]}")
    fin = ~ref_bad
    if not bool(fin.any()):
        return Verdict(True, 0.0, f"{what}all non-finite, as the reference")
    rel_sum, rel_out = tolerance(result, k)
    allowed = rel_sum * scale[fin] * (1 + rel_out) + rel_out * np.abs(ref[fin]) + denormal_floor(result)
    err = np.abs(c[fin] - ref[fin])
    ratio = err / allowed
    worst = float(ratio.max())
    if worst > 1.0:
        j = int(np.argmax(ratio))
        return Verdict(False, worst, f"{what}error {float(err[j]):.3g} exceeds the allowed {float(allowed[j]):.3g} "
                                     f"({worst:.3g}x the {result} bound)")
    return Verdict(True, worst, f"{what}within {worst:.2g}x the {result} bound")


def compare_on_device(c, a, b, result: str) -> Verdict:
    """compare, on the GPU when c is there (a torch or CuPy array) and CuPy is installed: the
    reference of a large product is slow on the host (float64 BLAS, or NumPy's integer loop, which
    has none) and fast on the GPU. a and b may be host arrays. Else, or when the GPU lacks the
    memory for it, on the host."""
    from tilemm.numerics import arrays
    cupy = _on_gpu_with_cupy(c)
    if cupy is not None:
        try:
            with cupy.cuda.Device(_device_index(c)):
                arrays.synchronize(c)                 # CuPy reads a torch result on its own stream
                return compare(_on_cupy(cupy, c), _on_cupy(cupy, a), _on_cupy(cupy, b), result)
        except cupy.cuda.memory.OutOfMemoryError:
            cupy.get_default_memory_pool().free_all_blocks()
    return compare(arrays.to_host(c, result), arrays.to_host(a, result), arrays.to_host(b, result), result)


def _on_cupy(cupy, x):
    """x as a CuPy array on the current device (torch's bfloat16, which CuPy lacks, as float32)."""
    from tilemm.numerics import arrays
    torch = arrays.torch_if_imported()
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.float() if x.dtype == torch.bfloat16 else x
        x = x.cuda() if not x.is_cuda else x
    return cupy.asarray(x)


def _on_gpu_with_cupy(c):
    from tilemm.numerics import arrays
    torch = arrays.torch_if_imported()
    on_gpu = type(c).__module__.startswith("cupy") or (torch is not None and isinstance(c, torch.Tensor) and c.is_cuda)
    if not on_gpu:
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def _device_index(c) -> int:
    device = c.device
    return device.index if hasattr(device, "index") else device.id


def _quiet(xp):
    """Overflow to Inf is expected here (float16 results): NumPy would warn, CuPy never does."""
    return xp.errstate(invalid="ignore", over="ignore") if xp is _np else contextlib.nullcontext()


def _round_to(np, x, result: str):
    """x rounded to the output type (a real one) and back to the reference's type (bfloat16 by bit
    truncation with rounding)."""
    with _quiet(np):
        if result == "bfloat16":
            f32 = x.astype(np.float32)
            bits = f32.view(np.uint32).astype(np.uint64)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
            out = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
            return np.where(np.isnan(f32), np.nan, out)
        return x.astype(result).astype(x.dtype)
