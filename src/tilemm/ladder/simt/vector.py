"""16-byte loads from global memory, which numba-cuda does not emit by itself: it cannot know
that a row of a strided array starts 16-byte aligned, so a[i, j], ..., a[i, j + 3] stay four
loads. `load_vector(a, i, j, width)` is one load of a[i, j:j + width] (width * itemsize = 16
bytes), returned as a tuple; the caller promises the alignment (`aligned_rows` checks it on the
host). Under the CUDA simulator it is four plain reads."""
from __future__ import annotations

from tilemm.system import compat

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


if compat.cuda_simulator():
    def load_vector(a, i, j, width):
        return tuple(a[i, j + w] for w in range(width))
else:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.extending import intrinsic

    @intrinsic
    def load_vector(typingctx, a, i, j, width):
        """One ld.global.v{width} of a[i, j:j + width]; width a compile-time constant."""
        if not isinstance(width, types.IntegerLiteral):
            return None
        count = width.literal_value
        signature = types.UniTuple(a.dtype, count)(a, i, j, width)

        def codegen(context, builder, sig, args):
            array = context.make_array(sig.args[0])(context, builder, args[0])
            index = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:3], sig.args[1:3])]
            pointer = cgutils.get_item_pointer(context, builder, sig.args[0], array, index)
            element = context.get_data_type(sig.args[0].dtype)
            vector_type = ir.VectorType(element, count)
            vector = builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=VECTOR_BYTES)
            values = [builder.extract_element(vector, ir.Constant(ir.IntType(32), w)) for w in range(count)]
            return context.make_tuple(builder, sig.return_type, values)
        return signature, codegen
