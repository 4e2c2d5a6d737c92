"""Rung 8's kernel (`regblock`, the record in r08_regblock.py), built at the first launch: in a file of
its own so that importing tilemm or reading the ladder never imports numba-cuda."""
from numba import cuda, uint32, uint64

from tilemm.ladder.simt import launch, vector_load
from tilemm.ladder.simt.r08_regblock import PAD, default_block_k, default_thread_m


def divmod_hops(threads, width, count):
    """(l * threads) // width and % width for l < count, as tuples of constants. Element
    tid + l * threads of a row-major tile `width` wide is (tid // width + hop_row[l],
    tid % width + hop_col[l]): exact because threads and width are powers of two."""
    return (tuple(l * threads // width for l in range(count)), tuple(l * threads % width for l in range(count)))


def make_regblock(acc, block_m, block_n, block_k, thread_m, thread_n, vector_a=1, vector_b=1):
    block_k = default_block_k(block_k, acc.bitwidth)
    thread_m = default_thread_m(thread_m, acc.bitwidth)
    threads_x = block_n // thread_n
    threads_y = block_m // thread_m
    threads = threads_x * threads_y
    a_loads = block_m * block_k // threads
    b_loads = block_k * block_n // threads
    a_rows = block_m + PAD  # Python ints: shared array shapes must be compile-time constants
    # A thread's rows (and columns) come in runs of VEC neighbours, runs threads_y*VEC apart:
    # each run is one 16-byte shared load, and a warp's runs tile a contiguous span.
    vec_m = 4 if thread_m % 4 == 0 else 1
    vec_n = 4 if thread_n % 4 == 0 else 1
    a_step, b_step = threads_y * vec_m, threads_x * vec_n
    # Loading a tile, the block's threads take consecutive vectors of vector_a (vector_b)
    # elements, row by row (consecutive threads: consecutive k in A, consecutive columns in B, so
    # the loads coalesce); with aligned rows each vector is one 16-byte load, else vectors of
    # one element. Vector tid + l * threads lies at the thread's first plus these constant hops
    # (in rows, and in vectors along the row):
    a_hop_m, a_hop_k = divmod_hops(threads, block_k // vector_a, a_loads // vector_a)
    b_hop_k, b_hop_n = divmod_hops(threads, block_n // vector_b, b_loads // vector_b)
    align = launch.SHARED_ALIGN
    # 8x8 float32 accumulators and their operands fit in 128 registers: two blocks an SM.
    # 64-bit accumulators, or larger thread tiles (16 x 8, the 32-bit default), need more; they
    # get what the compiler asks for.
    regs = launch.register_cap(threads) if acc.bitwidth == 32 and thread_m * thread_n <= 64 else None

    # Device functions inlined into the kernel by NVVM (launch.INLINE: LLVM's alwaysinline):
    # the register arrays they fill stay registers, and the kernel compiles in a third of the
    # time Numba's own inlining (inline="always": the function's IR copied at each call) takes.
    # Element w of a thread's vector l sits at a_next[l * vector_a + w] (b_next alike).
    @cuda.jit(device=True, **launch.INLINE)
    def fetch_run(x, out, first, r, q, width):
        """x[r, q:q + width] into out[first:first + width]: one 16-byte load when width > 1."""
        if width > 1:
            values = vector_load.load_vector(x, r, q, width)
            for w in range(width):
                out[first + w] = values[w]
        else:
            out[first] = x[r, q]

    @cuda.jit(device=True, **launch.INLINE)
    def fetch_inside(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0):
        """This thread's share of a K tile wholly inside A and B, into registers: no bounds tests."""
        # 64-bit sums of a per-thread base and a constant hop: the compiler computes each
        # base address once and reaches the others by adding hop * stride.
        for l in range(a_loads // vector_a):
            fetch_run(a, a_next, l * vector_a, uint64(row0 + a_m) + uint64(a_hop_m[l]),
                      uint64(k0 + a_k) + uint64(a_hop_k[l] * vector_a), vector_a)
        for l in range(b_loads // vector_b):
            fetch_run(b, b_next, l * vector_b, uint64(k0 + b_k) + uint64(b_hop_k[l]),
                      uint64(col0 + b_n) + uint64(b_hop_n[l] * vector_b), vector_b)

    @cuda.jit(device=True, **launch.INLINE)
    def fetch_edge(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0, m, n, k):
        """The same for a tile that crosses an edge, element by element: zeros past M, N or K."""
        for l in range(a_loads // vector_a):
            for w in range(vector_a):
                r, q = uint32(row0 + a_m + a_hop_m[l]), uint32(k0 + a_k + a_hop_k[l] * vector_a + w)
                a_next[l * vector_a + w] = a[r, q] if r < m and q < k else acc(0)
        for l in range(b_loads // vector_b):
            for w in range(vector_b):
                q, col = uint32(k0 + b_k + b_hop_k[l]), uint32(col0 + b_n + b_hop_n[l] * vector_b + w)
                b_next[l * vector_b + w] = b[q, col] if q < k and col < n else acc(0)

    # --8<-- [start:turn]
    @cuda.jit(device=True, **launch.INLINE)
    def read_step(a_v, b_v, a_s, b_s, buf, p, a_base, b_base):
        """This thread's THREAD_M values of A and THREAD_N of B at K step p of the tile."""
        # --- exercise: begin
        for i in range(thread_m):
            a_v[i] = a_s[buf, p, (i // vec_m) * a_step + a_base + i % vec_m]
        for j in range(thread_n):
            b_v[j] = b_s[buf, p, (j // vec_n) * b_step + b_base + j % vec_n]
        # --- exercise: end

    @cuda.jit(device=True, **launch.INLINE)
    def outer_product(c_r, a_v, b_v):
        """One K step: THREAD_M x THREAD_N multiply-adds into the register tile."""
        # --- exercise: begin
        for i in range(thread_m):
            for j in range(thread_n):
                c_r[i, j] = acc(c_r[i, j] + a_v[i] * b_v[j])
        # --- exercise: end

    @cuda.jit(device=True, **launch.INLINE)
    def turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, p, a_base, b_base):
        """Four K steps from step p, whose operands a_r, b_r hold: the operands of step p + 1
        are read from shared memory while step p's products are computed."""
        read_step(a_q, b_q, a_s, b_s, buf, uint32(p + 1), a_base, b_base)
        outer_product(c_r, a_r, b_r)
        read_step(a_r, b_r, a_s, b_s, buf, uint32(p + 2), a_base, b_base)
        outer_product(c_r, a_q, b_q)
        read_step(a_q, b_q, a_s, b_s, buf, uint32(p + 3), a_base, b_base)
        outer_product(c_r, a_r, b_r)
        if p + 4 < block_k:
            read_step(a_r, b_r, a_s, b_s, buf, uint32(p + 4), a_base, b_base)
        outer_product(c_r, a_q, b_q)
    # --8<-- [end:turn]

    # --8<-- [start:kernel]
    @cuda.jit(**launch.jit_options(regs))
    def regblock(a, b, c):
        a_s = cuda.shared.array((2, block_k, a_rows), acc, alignment=align)  # (2, BK, BM+pad): A, K-major
        b_s = cuda.shared.array((2, block_k, block_n), acc, alignment=align)  # (2, BK, BN)
        c_r = cuda.local.array((thread_m, thread_n), acc)                    # (TM, TN) in registers
        a_r = cuda.local.array(thread_m, acc)                               # one K step's operands
        b_r = cuda.local.array(thread_n, acc)
        a_q = cuda.local.array(thread_m, acc)                               # the next step's
        b_q = cuda.local.array(thread_n, acc)
        a_next = cuda.local.array(a_loads, acc)                              # the next tiles, in flight
        b_next = cuda.local.array(b_loads, acc)
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        tx, ty = uint32(cuda.threadIdx.x), uint32(cuda.threadIdx.y)
        tid = uint32(ty * threads_x + tx)
        a_base, b_base = uint32(ty * vec_m), uint32(tx * vec_n)  # this thread's first row and column
        a_m, a_k = uint32(tid // (block_k // vector_a)), uint32(tid % (block_k // vector_a) * vector_a)
        b_k, b_n = uint32(tid // (block_n // vector_b)), uint32(tid % (block_n // vector_b) * vector_b)
        row0 = uint32(cuda.blockIdx.y * block_m)
        col0 = uint32(cuda.blockIdx.x * block_n)
        for i in range(thread_m):
            for j in range(thread_n):
                c_r[i, j] = acc(0)

        # A block wholly inside C, on a K tile wholly inside K, needs no bounds tests: the
        # branch is the same for every thread of the block, and most tiles take the short one.
        inside_mn = row0 + block_m <= m and col0 + block_n <= n
        k0 = uint32(0)
        if inside_mn and k0 + block_k <= k:
            fetch_inside(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0)
        else:
            fetch_edge(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0, m, n, k)
        buf = uint32(0)
        while True:
            for l in range(a_loads // vector_a):     # registers -> shared, A transposed
                for w in range(vector_a):
                    a_s[buf, uint32(a_k + a_hop_k[l] * vector_a + w), uint32(a_m + a_hop_m[l])] = \
                        a_next[l * vector_a + w]
            for l in range(b_loads // vector_b):
                for w in range(vector_b):
                    b_s[buf, uint32(b_k + b_hop_k[l]), uint32(b_n + b_hop_n[l] * vector_b + w)] = \
                        b_next[l * vector_b + w]
            cuda.syncthreads()
            k0 = uint32(k0 + block_k)
            if inside_mn and k0 + block_k <= k:     # issue the next tile's loads now...
                fetch_inside(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0)
            elif k0 < k:
                fetch_edge(a, b, a_next, b_next, a_m, a_k, b_k, b_n, row0, col0, k0, m, n, k)
            # ...and compute while they arrive, four K steps a turn.
            # The turns are written out (block_k is a constant: the untaken ones vanish), so the
            # tile's steps are straight-line code with constant shared-memory offsets. The step is
            # passed as a uint32, never a literal: numba compiles a device function once per
            # argument types, and each literal (0, 4, 8, 12) is a type of its own (turn compiled
            # four times, and four copies handed to NVVM, for the same machine code).
            read_step(a_r, b_r, a_s, b_s, buf, uint32(0), a_base, b_base)
            turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, uint32(0), a_base, b_base)
            if block_k > 4:
                turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, uint32(4), a_base, b_base)
            if block_k > 8:
                turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, uint32(8), a_base, b_base)
                turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, uint32(12), a_base, b_base)
            if block_k > 16:
                for p in range(16, block_k, 4):
                    turn(c_r, a_r, b_r, a_q, b_q, a_s, b_s, buf, uint32(p), a_base, b_base)
            if k0 >= k:
                break
            buf = uint32(1 - buf)                   # the other buffer: nobody reads it now

        for i in range(thread_m):
            r = uint32(row0 + (i // vec_m) * a_step + a_base + i % vec_m)
            for j in range(thread_n):
                col = uint32(col0 + (j // vec_n) * b_step + b_base + j % vec_n)
                if r < m and col < n:
                    c[r, col] = c_r[i, j]
    return regblock
    # --8<-- [end:kernel]
