// softmax.cu: softmax and log_softmax over rows of n (the last axis), and their backwards.
//
// A warp or a block per row (`Launch::rows`). The forward makes one pass for the online
// max / sum-of-exp and one to write; the backward one pass for the dot product and one to write.
#include "common.cuh"

// log != 0: y = x - logsumexp(x); else y = exp(x - logsumexp(x)).
template <typename T>
__device__ void softmax_fwd(const T* __restrict__ x, T* __restrict__ y, u32 rows, u32 n, int log) {
    const u32 row = row_index();
    const bool active = row < rows;
    const u64 base = (u64)row * n;
    Lse st = LseOp().identity();
    if (active)
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) st = lse_combine(st, lse_leaf(to_float(x[base + j])));
    st = row_reduce(st, LseOp());
    if (!active) return;
    const float lse = lse_value(st);
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float v = to_float(x[base + j]) - lse;
        y[base + j] = from_float<T>(log ? v : expf(v));
    }
}

// From the forward's output y:
// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
__device__ void softmax_bwd(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, u32 rows, u32 n, int log) {
    const u32 row = row_index();
    const bool active = row < rows;
    const u64 base = (u64)row * n;
    float acc = 0.0f;
    if (active)
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float g = to_float(dy[base + j]);
            acc += log ? g : g * to_float(y[base + j]);
        }
    acc = row_reduce(acc, SumOp());
    if (!active) return;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = to_float(dy[base + j]), v = to_float(y[base + j]);
        dx[base + j] = from_float<T>(log ? g - expf(v) * acc : v * (g - acc));
    }
}

#define INSTANTIATE(NAME, T)                                                                        \
    extern "C" __global__ void softmax_##NAME(const T* x, T* y, u32 rows, u32 n, int log) {         \
        softmax_fwd<T>(x, y, rows, n, log);                                                         \
    }                                                                                               \
    extern "C" __global__ void softmax_bwd_##NAME(const T* y, const T* dy, T* dx, u32 rows, u32 n,  \
                                                  int log) {                                        \
        softmax_bwd<T>(y, dy, dx, rows, n, log);                                                    \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
