"""The launcher of the persistent tile schedule (tilemm.engine.programs.matmul_persistent), which
several rungs fill with their own sum of K steps: one program an SM, stream-K where the tiles do
not fill whole rounds."""
from __future__ import annotations

from tilemm.engine.launches import bound_launch
from tilemm.engine.workspaces import StreamKLaunch
from tilemm.engine import availability

# matmul_persistent's flags when a caller names none: A row-major, B given K-major (as B^T), no
# option for the steps, the tile loop flattened into the K loop, C written (not added to), its rows
# stored as if of any width (C_ALIGN=1)
PERSISTENT_FLAGS = dict(A_T=False, B_T=True, UPCAST=False, OPTION=None, FLATTEN=True, ACCUMULATE=False, C_ALIGN=1)


def persistent_launch(a_desc, b_desc, c, m: int, n: int, k: int, steps, scales=(None, None),
                      stream_k: bool = False, **config):
    """A launcher without arguments of matmul_persistent with `steps` (a rung's @triton.jit sum of
    a tile's K steps, see matmul_persistent) on each tile: one program an SM (as many as there are
    tiles, or all SMs when stream_k shares the tiles' K steps out); stream-K only when the tiles
    do not fill whole rounds. scales: the per-tensor scales of C (tilemm.scaled_matmul), or Nones.
    config: the program's tiles and flags (PERSISTENT_FLAGS where not given) and num_warps /
    num_stages."""
    from tilemm.engine.programs import matmul_persistent   # Triton loads on first use
    config = {**PERSISTENT_FLAGS, **config, "STEPS": steps}
    tiles = -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"])
    sms = availability.multiprocessors()
    stream_k = stream_k and not config["ACCUMULATE"]
    programs = sms if stream_k else min(tiles, sms)
    stream_k = stream_k and tiles % programs != 0 and not config["ACCUMULATE"]
    if not stream_k:     # the same arguments at every launch
        return bound_launch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                             c.stride(0), c.stride(1)),
                            dict(STREAM_K=False, PROGRAMS=programs, **config))

    whole_tiles = persistent_launch(a_desc, b_desc, c, m, n, k, steps, scales, stream_k=False,
                                    **{name: v for name, v in config.items() if name != "STEPS"})
    # fewer tiles than programs: every tile is shared out, and the program compiled without the
    # whole-round loop (STREAM_K_ONLY) is a fifth smaller to compile, as a first call waits for it
    return StreamKLaunch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                          c.stride(0), c.stride(1)),
                         dict(STREAM_K=True, PROGRAMS=programs, STREAM_K_ONLY=tiles < programs, **config), whole_tiles,
                         config["BLOCK_M"], config["BLOCK_N"])
