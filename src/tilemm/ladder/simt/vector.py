"""16-byte loads from global memory, which numba-cuda does not emit by itself: it cannot know
that a row of a strided array starts 16-byte aligned, so a[i, j], ..., a[i, j + 3] stay four
loads. `load_vector(a, i, j, width)` is one load of a[i, j:j + width] (width * itemsize = 16
bytes), returned as a tuple; the caller promises the alignment (`aligned_rows` checks it on the
host). The load itself is in vector_load.py (it imports numba); under the CUDA simulator it is
four plain reads."""
from __future__ import annotations

VECTOR_BYTES = 16


def width_of(itemsize: int) -> int:
    """Elements in one 16-byte vector."""
    return VECTOR_BYTES // itemsize


def aligned_rows(x) -> bool:
    """Whether every row of the 2-D device array x starts 16-byte aligned and is contiguous, so
    that x[i, j:j + width] is one aligned vector for any j that is a multiple of the width."""
    itemsize = x.dtype.itemsize
    interface = getattr(x, "__cuda_array_interface__", None) or x.__array_interface__  # the simulator's arrays
    pointer = interface["data"][0]
    row_stride, column_stride = x.strides
    return (column_stride == itemsize and pointer % VECTOR_BYTES == 0 and row_stride % VECTOR_BYTES == 0) \
        or x.shape[0] * x.shape[1] == 0
