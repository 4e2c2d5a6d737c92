"""vector.py's 16-byte load as numba-cuda code: `load_vector(a, i, j, width)` is one
ld.global.v{width} of a[i, j:j + width] (the caller promises the alignment); under the CUDA
simulator, plain reads. Imported by the kernels that use it, at their first build."""
from __future__ import annotations

from tilemm.system import compat
from tilemm.ladder.simt.vector import VECTOR_BYTES

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
