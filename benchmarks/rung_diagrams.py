"""The rung pages' diagrams (benchmarks/make_figures.py draws them).

For the numba-cuda rungs (3-8): one launch at 16³ in the CUDA simulator, every global load and store
recorded with the block and thread that made it. Drawn: how often each element of A and B was loaded
(the traffic model, element by element), which elements one thread and its block read (the shared-
memory rungs: the tiles of each phase), and which thread of the first block writes each element of C
(the layout behind coalescing). For the tensor-core rungs: schematics of their one idea.
The simulator must be on before numba-cuda is imported (make_figures.py sets NUMBA_ENABLE_CUDASIM).
"""
from __future__ import annotations

import threading

import numpy as np

SIZE = 16
# page -> (kernel, the small configuration drawn, the depth of one shared-memory phase or None)
SIMT_PAGES = {
    "r03-naive": ("naive", {"block": 8}, None),
    "r04-naive-global": ("naive-global", {"block": 8}, None),
    "r05-uncoalesced": ("uncoalesced", {"block": 8}, None),
    "r06-tiled": ("tiled", {"tile": 8}, 8),
    "r07-rect": ("rect", {"tile": 8, "f": 2}, 8),
    "r08-regblock": ("regblock", {"block_m": 16, "block_n": 16, "block_k": 4, "thread_m": 4, "thread_n": 4}, 4),
}


def recorded_launch(kernel: str, params: dict) -> dict:
    """Each global load of A and B and each store to C of one SIZE³ launch, as (block, thread, flat
    index), made in the simulator (loads of C, for the rung that reads C back, are counted too)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from tilemm.ladder import registry
    from tilemm.numerics.data import operands

    class Recording(FakeCUDAArray):
        def __init__(self, ary, log):
            super().__init__(ary)
            self.log = log

        def reshape(self, *shape):            # the flat form of a rung indexes a flat view
            return Recording(self._ary.reshape(*shape), self.log)

        def _note(self, kind, idx):
            t = threading.current_thread()    # the simulator runs each CUDA thread as a Python thread
            flat = int(np.ravel_multi_index(idx if isinstance(idx, tuple) else (idx,), self._ary.shape))
            self.log.append((kind, tuple(t.blockIdx)[:2], tuple(t.threadIdx)[:2], flat))

        def __getitem__(self, idx):
            self._note("load", idx)
            return super().__getitem__(idx)

        def __setitem__(self, idx, value):
            self._note("store", idx)
            return super().__setitem__(idx, value)

    a, b = operands(0, SIZE, SIZE, SIZE, "float32")
    logs = {"A": [], "B": [], "C": []}
    registry.get(kernel).run(Recording(a, logs["A"]), Recording(b, logs["B"]),
                             Recording(np.zeros((SIZE, SIZE), np.float32), logs["C"]), **params)
    return logs


def _grid(ax, title: str, values, cmap: str, vmax=None):
    image = ax.imshow(values, cmap=cmap, vmin=0, vmax=vmax)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([0, SIZE - 1])
    ax.set_yticks([0, SIZE - 1])
    ax.tick_params(labelsize=7)
    return image


def threads(page: str, plt, path) -> None:
    kernel, params, phase = SIMT_PAGES[page]
    logs = recorded_launch(kernel, params)
    first, one = (0, 0), (0, 0)                 # the first block, and its first thread
    fig, axes = plt.subplots(1, 3, figsize=(11, 4.4), dpi=80)
    for ax, name in zip(axes[:2], "AB"):
        loads = np.zeros(SIZE * SIZE, int)
        mine, ours = set(), set()
        for kind, block, thread, flat in logs[name]:
            loads[flat] += 1
            if block == first:
                ours.add(flat)
                if thread == one:
                    mine.add(flat)
        image = _grid(ax, f"{name}: global loads of each element\n(whole launch: {loads.sum()} loads, "
                          f"{loads.min()}-{loads.max()} each)", loads.reshape(SIZE, SIZE), "Blues",
                      vmax=max(loads.max(), 1) * 1.8)          # the darkest blue would hide the dots
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03).ax.tick_params(labelsize=7)
        rows, cols = np.unravel_index(sorted(ours), (SIZE, SIZE))
        ax.scatter(cols, rows, s=14, facecolors="none", edgecolors="#dd8452", lw=0.9, label="read by block (0, 0)")
        rows, cols = np.unravel_index(sorted(mine), (SIZE, SIZE))
        ax.scatter(cols, rows, s=18, color="#c44e52", label="read by its thread (0, 0)")
        if phase:                                   # the tiles block (0, 0) stages through shared memory
            _phases(ax, name, ours, phase)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=1, frameon=False)
    writer = np.full(SIZE * SIZE, -1)
    block_dim_x = 1 + max(thread[0] for log in logs.values() for _, _, thread, _ in log)
    for kind, block, thread, flat in logs["C"]:
        if kind == "store" and block == first:
            writer[flat] = thread[0] + block_dim_x * thread[1]
    shown = np.ma.masked_less(writer.reshape(SIZE, SIZE), 0)
    ax = axes[2]
    _grid(ax, "C: which thread of block (0, 0)\nwrites each element", shown % 32, "tab20b", vmax=31)
    for (row, col), tid in np.ndenumerate(writer.reshape(SIZE, SIZE)):
        if tid >= 0:
            ax.text(col, row, str(tid), ha="center", va="center", fontsize=5.2, color="white")
    ax.set_xlabel("number: threadIdx.x + blockDim.x * threadIdx.y\ncolour: the thread's lane in its warp", fontsize=7)
    fig.suptitle(f"{kernel} {', '.join(f'{k}={v}' for k, v in params.items())} at {SIZE}³, "
                 "recorded in the CUDA simulator", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _phases(ax, name: str, ours: set, depth: int) -> None:
    """Outline each phase's tile of block (0, 0): A's tiles step along K (columns), B's down K (rows)."""
    from matplotlib.patches import Rectangle
    rows, cols = np.unravel_index(sorted(ours), (SIZE, SIZE))
    for p in range(SIZE // depth):
        if name == "A":
            r0, r1, c0, c1 = rows.min(), rows.max() + 1, p * depth, (p + 1) * depth
        else:
            r0, r1, c0, c1 = p * depth, (p + 1) * depth, cols.min(), cols.max() + 1
        ax.add_patch(Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=False, lw=1.4, ls="--", color="#55a868"))
        ax.text(c0 + (c1 - c0) / 2 - 0.5, r0 + (r1 - r0) / 2 - 0.5, f"phase {p}", ha="center", va="center",
                fontsize=6.5, color="#2d6a3e", bbox={"fc": "white", "alpha": 0.7, "lw": 0})


# --- the tensor-core rungs: schematics ------------------------------------------------------------
def _box(ax, x, y, w, h, text="", colour="#c6d4ea", fontsize=8):
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x, y), w, h, fc=colour, ec="#333333", lw=0.8))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _canvas(plt, w, h, title):
    fig, ax = plt.subplots(figsize=(w, h), dpi=80)
    ax.set_axis_off()
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)
    return fig, ax


def _save(fig, ax, path, xlim, ylim):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})


def tutorial(plt, path) -> None:
    """Rung 9: a program computes a BLOCK_M x BLOCK_N tile of C, stepping through K a BLOCK_K strip at a time."""
    fig, ax = _canvas(plt, 8, 4, "tensorcore-tutorial: one program, one 128 x 256 tile of C, K in steps of 64")
    for s in range(4):
        _box(ax, s * 1.0, 0, 1.0, 2.0, f"A[:, k{s}]" if s < 3 else "...", "#f3d6c0" if s == 1 else "#f7e8dc")
        _box(ax, 5, 2.6 + s * 0.5, 4.0, 0.5, f"B[k{s}, :]" if s < 3 else "...", "#d8ead3" if s == 1 else "#ecf4ea")
    _box(ax, 5, 0, 4.0, 2.0, "C tile (float32 accumulator\nin registers)", "#c6d4ea")
    ax.annotate("", xy=(5, 1.0), xytext=(4.0, 1.0), arrowprops={"arrowstyle": "->"})
    ax.text(2.0, 2.35, "tl.load: a 128 x 64 strip of A\n(shared memory, 3 stages in flight)", ha="center", fontsize=8)
    ax.text(9.2, 3.6, "tl.load: a 64 x 256\nstrip of B", ha="left", fontsize=8)
    ax.text(7.0, -0.5, "acc += tl.dot(a, b): the tensor cores multiply the two strips", ha="center", fontsize=8)
    _save(fig, ax, path, (-0.3, 11.5), (-0.9, 4.9))
    plt.close(fig)


def persistent(plt, path) -> None:
    """Rung 10: a persistent program an SM walks C's tiles in grouped order; TMA fills its shared memory."""
    fig, ax = _canvas(plt, 8, 3.8, "tensorcore: persistent programs (one an SM) walk C's tiles; TMA copies the operands")
    sms, colours = 4, ["#c6d4ea", "#f3d6c0", "#d8ead3", "#e6d5ef"]
    for t in range(24):
        group, within = divmod(t, 8)
        row, col = within % 4, group * 2 + within // 4           # grouped order: 4 rows of tiles, then the next columns
        program = t % sms
        _box(ax, col * 1.0, 3 - row * 1.0, 1.0, 1.0, f"SM {program}\ntile {t}", colours[program], fontsize=7)
    ax.text(6.6, 3.4, "tile t goes to program t mod (number of SMs):\nthe next tile's loads are in flight\n"
                      "while this tile's C is written", fontsize=8, va="center")
    ax.text(6.6, 1.6, "grouped order: a program's next tiles\nshare rows of A and columns of B,\nso L2 "
                      "serves them again", fontsize=8, va="center")
    ax.text(6.6, 0.2, "split K / stream-K: when there are too few\ntiles for the SMs, K is shared out too",
            fontsize=8, va="center")
    _save(fig, ax, path, (-0.2, 11.4), (-0.3, 4.2))
    plt.close(fig)


def int_digits(plt, path) -> None:
    """Rung 11: int32 operands as four int8 digits; the digit products whose weight stays under 2^32."""
    fig, ax = _canvas(plt, 8, 4.2, "tensorcore-int: an int32 product from int8 digit products (int32 result wraps)")
    for i in range(4):
        _box(ax, 1 + i, 4.6, 1, 0.6, f"a{3 - i}", "#f3d6c0", fontsize=8)
        _box(ax, -0.2, 3 - i, 0.6, 1, f"b{i}", "#d8ead3", fontsize=8)
        for j in range(4):
            kept = (3 - i) + j < 4
            _box(ax, 1 + i, 3 - j, 1, 1, f"2^{8 * ((3 - i) + j)}" if kept else "wraps\naway",
                 "#c6d4ea" if kept else "#eeeeee", fontsize=7)
    ax.text(5.4, 3.5, "a = a0 + a1·2^8 + a2·2^16 + a3·2^24 (each digit -128..127)\n"
                      "a·b = sum of ai·bj·2^(8(i+j)); a term with i + j >= 4\nis a multiple of 2^32: it wraps to 0",
            fontsize=8, va="center")
    ax.text(5.4, 1.6, "10 int8 matrix products on the tensor cores (the blue\ncells), summed exactly in int32, give "
                      "NumPy's int32 answer", fontsize=8, va="center")
    _save(fig, ax, path, (-0.5, 13.5), (-0.3, 5.4))
    plt.close(fig)


def dmma(plt, path) -> None:
    """Rung 12: the warp's m16n8k8 float64 instruction against Triton's m8n8k4."""
    fig, ax = _canvas(plt, 8, 3.8, "tensorcore-f64: one DMMA instruction, m16n8k8 (cuBLAS's) against m8n8k4 (tl.dot's)")
    _box(ax, 0, 0, 0.8, 1.6, "A\n16x8", "#f3d6c0")
    _box(ax, 1.2, 1.9, 0.8, 0.8, "B\n8x8", "#d8ead3")
    _box(ax, 1.2, 0, 0.8, 1.6, "C\n16x8", "#c6d4ea")
    ax.text(1.0, -0.5, "m16n8k8: 1024 multiply-adds\nfrom 192 operand values", ha="center", fontsize=8)
    _box(ax, 4, 0.8, 0.4, 0.8, "A\n8x4", "#f3d6c0", fontsize=6)
    _box(ax, 4.6, 1.9, 0.8, 0.4, "B\n4x8", "#d8ead3", fontsize=6)
    _box(ax, 4.6, 0.8, 0.8, 0.8, "C\n8x8", "#c6d4ea", fontsize=7)
    ax.text(4.9, -0.5, "m8n8k4: 256 multiply-adds\nfrom 64 operand values", ha="center", fontsize=8)
    ax.text(6.6, 1.2, "the larger shape reads fewer operand\nvalues per multiply-add (0.19 against\n0.25): the "
                      "Gluon program issues\nit through inline PTX, its operands\nbrought by TMA in the layout "
                      "it reads", fontsize=8, va="center")
    _save(fig, ax, path, (-0.3, 10.5), (-1.1, 3.0))
    plt.close(fig)


def three_tf32(plt, path) -> None:
    """Rung 13: a float32 split into a TF32 'big' part and a TF32 'small' remainder; three of four products kept."""
    fig, ax = _canvas(plt, 8, 4.2, "tensorcore-f32 (3xTF32): float32 as two TF32 parts, three tensor-core products")
    _box(ax, 0, 4, 0.4, 0.5, "s", "#eeeeee", fontsize=7)
    _box(ax, 0.4, 4, 3.2, 0.5, "exponent (8 bits)", "#e6d5ef", fontsize=7)
    _box(ax, 3.6, 4, 4.0, 0.5, "mantissa: top 10 bits", "#c6d4ea", fontsize=7)
    _box(ax, 7.6, 4, 5.2, 0.5, "next 13 bits", "#f3d6c0", fontsize=7)
    ax.text(0, 4.75, "x (float32) = big + small", fontsize=8)
    ax.text(3.6, 3.55, "big = x rounded to TF32 (10-bit mantissa)", fontsize=8, color="#2b4a7a")
    ax.text(7.6, 3.15, "small = x - big, rounded to TF32", fontsize=8, color="#8a4a1a")
    labels = [["big·big", "big·small"], ["small·big", "small·small\n(dropped:\nbelow float32's\nprecision)"]]
    for i in range(2):
        for j in range(2):
            kept = not (i == 1 and j == 1)
            _box(ax, 1 + 1.6 * j, 1.4 - 1.2 * i, 1.6, 1.2, labels[i][j], "#d8ead3" if kept else "#eeeeee", fontsize=7)
    ax.text(5.0, 0.8, "a·b ≈ big_a·big_b + big_a·small_b + small_a·big_b:\nthree TF32 tensor-core products, "
                      "float32 sums,\nfloat32's accuracy at about twice SGEMM's rate", fontsize=8, va="center")
    _save(fig, ax, path, (-0.2, 13.0), (-0.2, 5.1))
    plt.close(fig)


def complex_as_real(plt, path) -> None:
    """Rung 14: an interleaved complex matrix read as a real one of twice the columns; B written once as a real block."""
    fig, ax = _canvas(plt, 8, 3.6, "tensorcore-complex: a complex product as one real product")
    for j, (text, colour) in enumerate([("a_r", "#f3d6c0"), ("a_i", "#f7e8dc")] * 2):
        _box(ax, j * 0.7, 1.0, 0.7, 0.7, text, colour, fontsize=7)
    ax.text(1.4, 0.6, "A's row, interleaved:\nread as real, 2K columns", ha="center", fontsize=8)
    ax.text(3.2, 1.35, "@", fontsize=12, ha="center", va="center")
    cells = [["b_r", "b_i"], ["-b_i", "b_r"]]
    for i in range(2):
        for j in range(2):
            _box(ax, 3.7 + j * 0.8, 1.8 - i * 0.8, 0.8, 0.8, cells[i][j], "#d8ead3" if j == 0 else "#ecf4ea", fontsize=7)
    ax.text(4.5, 0.6, "B written once as a real\nmatrix of 2K x 2N", ha="center", fontsize=8)
    ax.text(5.8, 1.35, "=", fontsize=12, ha="center", va="center")
    for j, text in enumerate(["c_r", "c_i"]):
        _box(ax, 6.2 + j * 0.8, 1.0, 0.8, 0.7, text, "#c6d4ea", fontsize=7)
    ax.text(7.0, 0.6, "lands interleaved in\nC's own memory", ha="center", fontsize=8)
    ax.text(8.3, 1.3, "complex64 -> tensorcore-f32\n(3xTF32)\ncomplex128 -> tensorcore-f64\n(DMMA)", fontsize=8,
            va="center")
    _save(fig, ax, path, (-0.2, 11.0), (0.0, 2.9))
    plt.close(fig)


def grouped(plt, path) -> None:
    """Rung 15: tokens sorted by expert (offs marks where each group ends); one persistent launch walks
    every group's tiles of C, each against its own expert's weight."""
    fig, ax = _canvas(plt, 8, 4.0, "tensorcore-grouped: one launch, every expert's tiles (offs: where each group ends)")
    rows, colours = [3, 0, 1, 4], ["#f3d6c0", "#eeeeee", "#d8ead3", "#e6d5ef"]
    y, t = 5.0, 0
    for g, (count, colour) in enumerate(zip(rows, colours)):
        if count == 0:
            ax.text(-0.2, y + 0.05, f"expert {g}: 0 rows", fontsize=7, ha="right", va="top", color="#777777")
            continue
        _box(ax, 0, y - count * 0.5, 1.2, count * 0.5, f"A rows\nof expert {g}", colour, fontsize=7)
        for r in range(count):
            for c in range(3):
                _box(ax, 3.2 + c * 0.9, y - (r + 1) * 0.5, 0.9, 0.5, f"tile {t}\nSM {t % 4}", colour, fontsize=6)
                t += 1
        _box(ax, 1.5, y - 0.5, 1.2, 0.5, f"W[{g}]", colour, fontsize=7)
        y -= count * 0.5
    ax.text(6.2, 4.2, "tile t goes to program t mod (number of SMs):\nthe program reads which group a tile\n"
                      "belongs to from offs on the GPU, so the\nhost never waits and a CUDA graph replays it", fontsize=8,
            va="center")
    ax.text(6.2, 2.0, "a skewed routing (an expert with 0 or 1\nrows) costs its few tiles, not a launch", fontsize=8,
            va="center")
    _save(fig, ax, path, (-1.6, 11.5), (y - 0.3, 5.4))
    plt.close(fig)


def block_scaled(plt, path) -> None:
    """Rung 16: float8 operands with a float32 scale for each 1 x 128 block of A and each 128 x 128 block of B,
    applied to each K block's partial sums on the way into the float32 accumulator."""
    fig, ax = _canvas(plt, 8, 3.8, "block-scaled fp8: a scale a block, applied to each K block's partial sums")
    for s in range(3):
        _box(ax, s * 1.2, 1.6, 1.2, 0.5, f"A[i, k{s}] x sa{s}", "#f3d6c0" if s == 1 else "#f7e8dc", fontsize=7)
        _box(ax, 4.4, 2.8 - s * 1.0, 1.4, 1.0, f"B[k{s}, j]\n128 x 128\nx sb{s}", "#d8ead3" if s == 1 else "#ecf4ea",
             fontsize=7)
    ax.text(1.8, 1.1, "one row of A: a float32 scale\nfor each 1 x 128 block", ha="center", fontsize=8)
    _box(ax, 6.6, 1.2, 1.6, 1.0, "acc (float32)", "#c6d4ea", fontsize=8)
    ax.text(8.5, 2.3, "for each K block s:\n  p = tl.dot(a_s, b_s)   (fp8 in, float32 out)\n"
                      "  acc += p * sa_s * sb_s\nthe scales never touch the fp8 values:\n"
                      "each block keeps its own range (DeepGEMM's layout)", fontsize=8, va="center")
    _save(fig, ax, path, (-0.3, 13.5), (0.4, 3.9))
    plt.close(fig)


SCHEMATICS = {"r09-tensorcore-tutorial": tutorial, "r10-tensorcore": persistent, "r11-tensorcore-int": int_digits,
              "r12-tensorcore-f64": dmma, "r13-tensorcore-f32": three_tf32, "r14-tensorcore-complex": complex_as_real,
              "r15-tensorcore-grouped": grouped, "r16-block-scaled": block_scaled}
