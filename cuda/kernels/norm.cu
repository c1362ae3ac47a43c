// norm.cu: RMSNorm and LayerNorm over the last axis (rows of n), forward and backward.
//
// One kernel pair serves both: LayerNorm is RMSNorm of the centred row plus a bias, so
// `center` switches the mean (and the bias) on. Weights, biases and the saved statistics are
// f32; x, y, dy, dx are f32 or bf16.
//   forward:  xh = (x - mean) * rstd,  rstd = 1 / sqrt(mean((x - mean)^2) + eps),
//             y = xh * w (+ b);         mean = 0 for RMSNorm
//   backward: g = dy * w,  dx = rstd * (g - mean(g) - xh * mean(g * xh))   (no mean(g) for RMS)
//             dw = sum over rows of dy * xh,  db = sum over rows of dy
#include "common.cuh"

template <typename T>
__device__ void norm_fwd(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                         T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                         u32 rows, u32 n, float eps, int center) {
    const u32 row = row_index();
    const bool active = row < rows;
    const u64 base = (u64)row * n;
    float mean = 0.0f;
    if (center) {
        float s = 0.0f;
        if (active)
            for (u32 j = threadIdx.x; j < n; j += blockDim.x) s += to_float(x[base + j]);
        mean = row_reduce(s, SumOp()) / (float)n;
    }
    float ss = 0.0f;
    if (active)
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float d = to_float(x[base + j]) - mean;
            ss += d * d;
        }
    const float rstd = rsqrtf(row_reduce(ss, SumOp()) / (float)n + eps);
    if (!active) return;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float xh = (to_float(x[base + j]) - mean) * rstd;
        y[base + j] = from_float<T>(xh * w[j] + (b ? b[j] : 0.0f));
    }
    if (threadIdx.x == 0) {
        rstd_out[row] = rstd;
        if (mean_out) mean_out[row] = mean;
    }
}

// Blocks of (threads, 1) walk rows blockIdx.x, blockIdx.x + gridDim.x, ...; each thread owns
// columns threadIdx.x + k * blockDim.x and sums its dw (and db) in dynamic shared memory
// (n floats, 2n with center), written at the end to partial[blockIdx.x][.]; the host then sums
// the partial rows (reduce.cu), deterministically.
template <typename T>
__device__ void norm_bwd(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                         float* __restrict__ partial, u32 rows, u32 n, int center) {
    extern __shared__ float acc[];
    const u32 width = center ? 2 * n : n;
    for (u32 j = threadIdx.x; j < width; j += blockDim.x) acc[j] = 0.0f;
    __syncthreads();  // acc[n + j] is zeroed by one thread and summed into by another
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = (u64)row * n;
        const float mu = center ? mean[row] : 0.0f, r = rstd[row];
        float sg = 0.0f, sgx = 0.0f;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float xh = (to_float(x[base + j]) - mu) * r;
            const float g = to_float(dy[base + j]) * w[j];
            sg += g;
            sgx += g * xh;
        }
        const float mg = center ? row_reduce(sg, SumOp()) / (float)n : 0.0f;
        const float mgx = row_reduce(sgx, SumOp()) / (float)n;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float xh = (to_float(x[base + j]) - mu) * r;
            const float d = to_float(dy[base + j]);
            dx[base + j] = from_float<T>(r * (d * w[j] - mg - xh * mgx));
            acc[j] += d * xh;
            if (center) acc[n + j] += d;
        }
    }
    __syncthreads();
    float* out = partial + (u64)blockIdx.x * width;
    for (u32 j = threadIdx.x; j < width; j += blockDim.x) out[j] = acc[j];
}

#define INSTANTIATE(NAME, T)                                                                       \
    extern "C" __global__ void norm_fwd_##NAME(const T* x, const float* w, const float* b, T* y,   \
                                               float* mean_out, float* rstd_out, u32 rows, u32 n,  \
                                               float eps, int center) {                            \
        norm_fwd<T>(x, w, b, y, mean_out, rstd_out, rows, n, eps, center);                         \
    }                                                                                              \
    extern "C" __global__ void norm_bwd_##NAME(const T* x, const float* w, const float* mean,      \
                                               const float* rstd, const T* dy, T* dx,              \
                                               float* partial, u32 rows, u32 n, int center) {      \
        norm_bwd<T>(x, w, mean, rstd, dy, dx, partial, rows, n, center);                           \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
