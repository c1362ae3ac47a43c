// rope.cu: rotary position embedding on [B, T, H, D], "rotate_half" convention.
//
// Pair (i, i + D/2) of position p = t + pos_offset is rotated by angle p * theta^(-2i/D):
//   y[i] = x[i] cos - x[i + D/2] sin,   y[i + D/2] = x[i + D/2] cos + x[i] sin.
// The backward is the inverse rotation (sin negated); it can add another gradient of x (dres,
// like x: RAttention's linear branch) before its one rounding, which spares a pass adding the
// two. The angles are computed once per call
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

// V elements at p as f32: one element, or whole 16-byte vectors (p aligned to 16 bytes).
template <typename S, int V>
__device__ __forceinline__ void load_n(const S* p, float (&v)[V]) {
    if constexpr (V == 1) {
        v[0] = to_float(*p);
    } else {
        load_vec(p, v);
    }
}
template <typename S, int V>
__device__ __forceinline__ void store_n(S* p, const float (&v)[V]) {
    if constexpr (V == 1) {
        *p = from_float<S>(v[0]);
    } else {
        store_vec(p, v);
    }
}

// A thread per group of V consecutive pairs of a row: V = 16 / sizeof(T) where D/2 is a whole
// number of them (each half row and table row is then read in 16-byte vectors), else 1. Groups
// are numbered [B, T, H, D/2/V] row-major, in 32-bit arithmetic where they number under 2^31.
// sign = -1 for the backward; add (like x) null or added to y.
template <typename T, int V, typename I>
__device__ void rope(const T* __restrict__ x, const T* __restrict__ add, T* __restrict__ y,
                     const float* __restrict__ cos_t, const float* __restrict__ sin_t, I groups, u32 t_len,
                     u32 heads, u32 half, float sign) {
    const I per_row = half / V;
    for (I g = (I)global_thread(); g < groups; g += (I)grid_threads()) {
        const I k = g % per_row * V, row = g / per_row;  // row indexes [B, T, H]
        const I t = row / heads % t_len;
        const u64 base = (u64)row * 2 * half + k, at = (u64)t * half + k;
        float x1[V], x2[V], c[V], s[V];
        load_n(x + base, x1);
        load_n(x + base + half, x2);
        load_n(cos_t + at, c);
        load_n(sin_t + at, s);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float a = x1[j], b = x2[j], sn = sign * s[j];
            x1[j] = a * c[j] - b * sn;
            x2[j] = b * c[j] + a * sn;
        }
        if (add) {
            float a1[V], a2[V];
            load_n(add + base, a1);
            load_n(add + base + half, a2);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                x1[j] += a1[j];
                x2[j] += a2[j];
            }
        }
        store_n(y + base, x1);
        store_n(y + base + half, x2);
    }
}

template <typename T, int V>
__device__ void rope_any(const T* x, const T* add, T* y, const float* cos_t, const float* sin_t, u64 groups,
                         u32 t_len, u32 heads, u32 half, float sign) {
    if (groups < (1ull << 31)) {
        rope<T, V, u32>(x, add, y, cos_t, sin_t, (u32)groups, t_len, heads, half, sign);
    } else {
        rope<T, V, u64>(x, add, y, cos_t, sin_t, groups, t_len, heads, half, sign);
    }
}

// The vector kernel rope_T and the scalar one rope_T_scalar (named as the row kernels are).
#define INSTANTIATE(NAME, T)                                                                                  \
    extern "C" __global__ void rope_##NAME(const T* x, const T* add, T* y, const float* cos_t,               \
                                           const float* sin_t, u64 groups, u32 t_len, u32 heads, u32 half,    \
                                           float sign) {                                                      \
        rope_any<T, 16 / sizeof(T)>(x, add, y, cos_t, sin_t, groups, t_len, heads, half, sign);               \
    }                                                                                                         \
    extern "C" __global__ void rope_##NAME##_scalar(const T* x, const T* add, T* y, const float* cos_t,      \
                                                    const float* sin_t, u64 groups, u32 t_len, u32 heads,     \
                                                    u32 half, float sign) {                                   \
        rope_any<T, 1>(x, add, y, cos_t, sin_t, groups, t_len, heads, half, sign);                            \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
