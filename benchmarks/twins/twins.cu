// CUDA C twins of tilemm's `naive` and `tiled` rungs: the seeds' kernels (seed 000's
// matrixMulTileKernel, seed 001's mat_mat_mul), generalised to M x K times K x N, row-major.
// Built as a shared library and driven from benchmarks/gpu_ladder.py, so each Python rung and
// its twin are timed with CUDA events in the same process, on the same buffers.
//   nvcc -O3 -arch=sm_90 -Xcompiler -fPIC -shared twins.cu -o libtwins.so
#include <cuda_runtime.h>

template <typename T>
__global__ void naive(const T *a, const T *b, T *c, int m, int n, int k) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    T sum = 0;
    for (int p = 0; p < k; ++p)
        sum += a[row * k + p] * b[p * n + col];
    c[row * n + col] = sum;
}

template <typename T, int TILE>
__global__ void tiled(const T *a, const T *b, T *c, int m, int n, int k) {
    __shared__ T tile_a[TILE][TILE];
    __shared__ T tile_b[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    T value = 0;
    for (int i = 0; i < (k + TILE - 1) / TILE; i++) {
        int ka = i * TILE + threadIdx.x, kb = i * TILE + threadIdx.y;
        tile_a[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? a[row * k + ka] : 0;
        tile_b[threadIdx.y][threadIdx.x] = (kb < k && col < n) ? b[kb * n + col] : 0;
        __syncthreads();
        for (int j = 0; j < TILE; j++)
            value += tile_a[threadIdx.y][j] * tile_b[j][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = value;
}

template <typename T>
static int launch_naive(const void *a, const void *b, void *c, int m, int n, int k, int block) {
    dim3 threads(block, block), grid((n + block - 1) / block, (m + block - 1) / block);
    naive<T><<<grid, threads>>>((const T *)a, (const T *)b, (T *)c, m, n, k);
    return (int)cudaGetLastError();
}

template <typename T>
static int launch_tiled(const void *a, const void *b, void *c, int m, int n, int k, int tile) {
    dim3 threads(tile, tile), grid((n + tile - 1) / tile, (m + tile - 1) / tile);
    if (tile == 8) tiled<T, 8><<<grid, threads>>>((const T *)a, (const T *)b, (T *)c, m, n, k);
    else if (tile == 16) tiled<T, 16><<<grid, threads>>>((const T *)a, (const T *)b, (T *)c, m, n, k);
    else if (tile == 32) tiled<T, 32><<<grid, threads>>>((const T *)a, (const T *)b, (T *)c, m, n, k);
    else return -1;
    return (int)cudaGetLastError();
}

extern "C" {
int twin_naive_float32(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_naive<float>(a, b, c, m, n, k, p); }
int twin_naive_int32(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_naive<int>(a, b, c, m, n, k, p); }
int twin_naive_float64(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_naive<double>(a, b, c, m, n, k, p); }
int twin_tiled_float32(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_tiled<float>(a, b, c, m, n, k, p); }
int twin_tiled_int32(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_tiled<int>(a, b, c, m, n, k, p); }
int twin_tiled_float64(const void *a, const void *b, void *c, int m, int n, int k, int p) { return launch_tiled<double>(a, b, c, m, n, k, p); }
}
