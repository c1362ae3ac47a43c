// rope.cu: rotary position embedding on [B, T, H, D], "rotate_half" convention.
//
// Pair (i, i + D/2) of position p = t + pos_offset is rotated by angle p * theta^(-2i/D):
//   y[i] = x[i] cos - x[i + D/2] sin,   y[i + D/2] = x[i + D/2] cos + x[i] sin.
// The backward is the inverse rotation (sin negated). The angles are computed once per call
// into a [T, D/2] cos/sin table in f64 (positions reach 1e5 and beyond, where an f32 angle is
// already off by ~1e-2 rad), then read from L2 by the rotation.
#include "common.cuh"

extern "C" __global__ void rope_table(float* __restrict__ cos_t, float* __restrict__ sin_t, u32 t_len, u32 half,
                                      i64 pos_offset, double theta) {
    for (u64 i = global_thread(); i < (u64)t_len * half; i += grid_threads()) {
        const u64 t = i / half, k = i % half;
        const double inv_freq = pow(theta, -(double)(2 * k) / (double)(2 * half));
        double s, c;
        sincos((double)((i64)t + pos_offset) * inv_freq, &s, &c);
        cos_t[i] = (float)c;
        sin_t[i] = (float)s;
    }
}

// A thread per pair; pairs are numbered [B, T, H, D/2] row-major. sign = -1 for the backward.
template <typename T>
__device__ void rope(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ cos_t,
                     const float* __restrict__ sin_t, u64 pairs, u32 t_len, u32 heads, u32 half, float sign) {
    for (u64 p = global_thread(); p < pairs; p += grid_threads()) {
        const u64 k = p % half, bth = p / half;  // bth indexes [B, T, H]
        const u64 t = (bth / heads) % t_len;
        const u64 base = bth * 2 * half;
        const float c = cos_t[t * half + k], s = sign * sin_t[t * half + k];
        const float x1 = to_float(x[base + k]), x2 = to_float(x[base + k + half]);
        y[base + k] = from_float<T>(x1 * c - x2 * s);
        y[base + k + half] = from_float<T>(x2 * c + x1 * s);
    }
}

#define INSTANTIATE(NAME, T)                                                                         \
    extern "C" __global__ void rope_##NAME(const T* x, T* y, const float* cos_t, const float* sin_t, \
                                           u64 pairs, u32 t_len, u32 heads, u32 half, float sign) {  \
        rope<T>(x, y, cos_t, sin_t, pairs, t_len, heads, half, sign);                                \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
