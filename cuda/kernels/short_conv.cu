// short_conv.cu: causal depthwise convolution along time, x [B, T, C], weights [C, K] (tap K - 1
// on the current step), bias [C]; forward and backward (see `Backend::short_conv`). Memory-bound:
// each output reads its K inputs straight from L1/L2, and the weight gradient sums over B·T in
// per-block registers, one atomic per block and channel.
#include "common.cuh"

// Most taps; matches MAX_TAPS in src/kernels/short_conv.rs.
#define MAX_TAPS 8
// Block of the weight-gradient kernel: WG_X channels by WG_Y rows; matches WG_X, WG_Y there.
#define WG_X 32
#define WG_Y 8

template <typename T>
__device__ void conv_forward(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                             T* __restrict__ y, u32 bt, u32 t, u32 c, u32 k) {
    const u64 n = (u64)bt * c;
    for (u64 idx = global_thread(); idx < n; idx += grid_threads()) {
        const u32 ch = idx % c, ti = (idx / c) % t;
        float s = to_float(bias[ch]);
        for (u32 j = 0; j < k; ++j) {
            const int back = (int)k - 1 - (int)j;
            if ((int)ti >= back) s = fmaf(to_float(w[ch * k + j]), to_float(x[idx - (u64)back * c]), s);
        }
        y[idx] = from_float<T>(s);
    }
}

// dx[b, s, c] = sum_j w[c, j] dy[b, s + K - 1 - j, c] over the steps inside the sequence.
template <typename T>
__device__ void conv_backward_x(const T* __restrict__ w, const T* __restrict__ dy, T* __restrict__ dx, u32 bt,
                                u32 t, u32 c, u32 k) {
    const u64 n = (u64)bt * c;
    for (u64 idx = global_thread(); idx < n; idx += grid_threads()) {
        const u32 ch = idx % c, ti = (idx / c) % t;
        float s = 0.0f;
        for (u32 j = 0; j < k; ++j) {
            const u32 ahead = k - 1 - j;
            if (ti + ahead < t) s = fmaf(to_float(w[ch * k + j]), to_float(dy[idx + (u64)ahead * c]), s);
        }
        dx[idx] = from_float<T>(s);
    }
}

// acc[c * (K + 1) + j] += sum over rows of dy[b, t, c] x[b, t - K + 1 + j, c] (j < K) and
// acc[c * (K + 1) + K] += sum of dy[b, t, c]; acc is zeroed by the caller.
template <typename T>
__device__ void conv_backward_w(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ acc,
                                u32 bt, u32 t, u32 c, u32 k) {
    __shared__ float part[WG_Y][WG_X][MAX_TAPS + 1];
    const u32 ch = blockIdx.x * WG_X + threadIdx.x;
    float s[MAX_TAPS + 1];
#pragma unroll
    for (int j = 0; j <= MAX_TAPS; ++j) s[j] = 0.0f;
    if (ch < c) {
        for (u32 r = blockIdx.y * WG_Y + threadIdx.y; r < bt; r += gridDim.y * WG_Y) {
            const u32 ti = r % t;
            const float g = to_float(dy[(u64)r * c + ch]);
            s[MAX_TAPS] += g;
#pragma unroll
            for (int j = 0; j < MAX_TAPS; ++j) {
                const int back = (int)k - 1 - j;
                if (j < (int)k && (int)ti >= back) s[j] = fmaf(g, to_float(x[((u64)r - back) * c + ch]), s[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j <= MAX_TAPS; ++j) part[threadIdx.y][threadIdx.x][j] = s[j];
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        for (u32 j = 0; j <= k; ++j) {
            const int slot = j == k ? MAX_TAPS : (int)j;
            float tot = 0.0f;
            for (int y = 0; y < WG_Y; ++y) tot += part[y][threadIdx.x][slot];
            atomicAdd(&acc[ch * (k + 1) + j], tot);
        }
    }
}

// Splits the f32 sums into dw [C, K] and dbias [C] of the data's dtype.
template <typename T>
__device__ void conv_backward_finish(const float* __restrict__ acc, T* __restrict__ dw, T* __restrict__ db, u32 c,
                                     u32 k) {
    for (u64 idx = global_thread(); idx < (u64)c * (k + 1); idx += grid_threads()) {
        const u32 ch = idx / (k + 1), j = idx % (k + 1);
        if (j == k) {
            db[ch] = from_float<T>(acc[idx]);
        } else {
            dw[ch * k + j] = from_float<T>(acc[idx]);
        }
    }
}

#define CONV_KERNELS(T, SUFFIX)                                                                                  \
    extern "C" __global__ void short_conv_forward_##SUFFIX(const T* x, const T* w, const T* bias, T* y, u32 bt,  \
                                                           u32 t, u32 c, u32 k) {                                \
        conv_forward<T>(x, w, bias, y, bt, t, c, k);                                                             \
    }                                                                                                            \
    extern "C" __global__ void short_conv_backward_x_##SUFFIX(const T* w, const T* dy, T* dx, u32 bt, u32 t,     \
                                                              u32 c, u32 k) {                                    \
        conv_backward_x<T>(w, dy, dx, bt, t, c, k);                                                              \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(WG_X * WG_Y)                                                    \
        short_conv_backward_w_##SUFFIX(const T* x, const T* dy, float* acc, u32 bt, u32 t, u32 c, u32 k) {       \
        conv_backward_w<T>(x, dy, acc, bt, t, c, k);                                                             \
    }                                                                                                            \
    extern "C" __global__ void short_conv_backward_finish_##SUFFIX(const float* acc, T* dw, T* db, u32 c,        \
                                                                   u32 k) {                                      \
        conv_backward_finish<T>(acc, dw, db, c, k);                                                              \
    }

CONV_KERNELS(float, f32)
CONV_KERNELS(bf16, bf16)
