"""The launcher of matmul_persistent (r10_tensorcore_kernel), which several rungs share: one program
an SM, stream-K where the tiles do not fill whole rounds."""
from __future__ import annotations

from tilemm.engine.launches import bound_launch
from tilemm.engine.workspaces import StreamKLaunch
from tilemm.engine import availability

# matmul_persistent's flags when a caller names none: A row-major, B given K-major (as B^T),
# float32 sums of unscaled 16-bit products, C's rows stored as if of any width (C_ALIGN=1)
PERSISTENT_FLAGS = dict(A_T=False, B_T=True, SCALED=False, FAST_ACCUM=False, INT=False, F64=False, UPCAST=False,
                        PARTS=1, CHUNK=1, ACCUMULATE=False, C_ALIGN=1)



def persistent_launch(a_desc, b_desc, c, m: int, n: int, k: int, scales=(None, None), stream_k: bool = False,
                      **config):
    """A launcher without arguments of matmul_persistent: one program an SM (as many as there are
    tiles, or all SMs when stream_k shares the tiles' K steps out); stream-K only when the tiles
    do not fill whole rounds. config: the program's tiles and flags (PERSISTENT_FLAGS where not
    given) and num_warps / num_stages."""
    from tilemm.engine.programs import matmul_persistent   # Triton loads on first use
    config = {**PERSISTENT_FLAGS, **config}
    tiles = -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"])
    sms = availability.multiprocessors()
    stream_k = stream_k and not config["ACCUMULATE"]
    programs = sms if stream_k else min(tiles, sms)
    stream_k = stream_k and tiles % programs != 0 and not config["ACCUMULATE"]
    if not stream_k:     # the same arguments at every launch
        return bound_launch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                             c.stride(0), c.stride(1)),
                            dict(STREAM_K=False, PROGRAMS=programs, **config))

    whole_tiles = persistent_launch(a_desc, b_desc, c, m, n, k, scales, stream_k=False, **config)
    return StreamKLaunch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                          c.stride(0), c.stride(1)),
                         dict(STREAM_K=True, PROGRAMS=programs, **config), whole_tiles, config["BLOCK_M"],
                         config["BLOCK_N"])
