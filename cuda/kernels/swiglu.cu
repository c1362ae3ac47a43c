// swiglu.cu: the SwiGLU activation of an MLP's pre-activation gu = [gate | up], rows of 2F (gate
// the first F columns), in one pass over memory each way:
//   forward   h = silu(g) u                                      rows of F
//   backward  dgate = dh u silu'(g),  dup = dh silu(g),  and h    dgu rows of 2F, h rows of F
// with s = sigmoid(g), silu(g) = g s, silu'(g) = s (1 + g (1 - s)), in f32 whatever the storage.
// The CPU reference (tensor/src/cpu/swiglu.rs) computes the same terms in the same order. The
// backward writes h too: the caller recomputes the activation there anyway (the MLP keeps only
// gu), and the down projection's weight gradient needs it.
//
// A block walks rows (grid-stride over rows), its threads a row's F columns in units of V
// elements: one 16-byte vector of T (V = 4 f32 or 8 bf16) where F is a whole number of vectors,
// so that both halves of every row start 16-byte aligned (`vector_rows` in src/kernels/mod.rs),
// else single elements (the `_scalar` instantiations). Row offsets are u64: N * 2F may pass 2^32;
// columns are u32 (the wrapper checks 2F < 2^31, so c + blockDim.x * V cannot wrap).
#include "common.cuh"

// V consecutive elements at p as f32, and back.
template <int V, typename T>
__device__ __forceinline__ void load_n(const T* p, float (&v)[V]) {
    if constexpr (V == 1)
        v[0] = to_float(*p);
    else
        load_vec(p, v);
}
template <int V, typename T>
__device__ __forceinline__ void store_n(T* p, const float (&v)[V]) {
    if constexpr (V == 1)
        *p = from_float<T>(v[0]);
    else
        store_vec(p, v);
}

template <typename T, int V>
__device__ void swiglu(const T* __restrict__ gu, T* __restrict__ h, u64 rows, u32 f) {
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* gate = gu + r * 2 * f;
        for (u32 c = threadIdx.x * V; c < f; c += blockDim.x * V) {
            float g[V], u[V];
            load_n(gate + c, g);
            load_n(gate + f + c, u);
#pragma unroll
            for (int e = 0; e < V; ++e) g[e] = g[e] * sigmoid(g[e]) * u[e];
            store_n(h + r * f + c, g);
        }
    }
}

template <typename T, int V>
__device__ void swiglu_bwd(const T* __restrict__ gu, const T* __restrict__ dh, T* __restrict__ dgu,
                           T* __restrict__ h, u64 rows, u32 f) {
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const u64 in = r * 2 * f, out = r * f;
        for (u32 c = threadIdx.x * V; c < f; c += blockDim.x * V) {
            float g[V], u[V], d[V];
            load_n(gu + in + c, g);
            load_n(gu + in + f + c, u);
            load_n(dh + out + c, d);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float s = sigmoid(g[e]), silu = g[e] * s;
                const float dgate = d[e] * (u[e] * s * (1.0f + g[e] * (1.0f - s)));
                g[e] = silu * u[e];  // h
                u[e] = d[e] * silu;  // dup
                d[e] = dgate;
            }
            store_n(dgu + in + c, d);
            store_n(dgu + in + f + c, u);
            store_n(h + out + c, g);
        }
    }
}

#define INSTANTIATE(NAME, T, V)                                                                   \
    extern "C" __global__ void swiglu_##NAME(const T* gu, T* h, u64 rows, u32 f) {                \
        swiglu<T, V>(gu, h, rows, f);                                                             \
    }                                                                                             \
    extern "C" __global__ void swiglu_bwd_##NAME(const T* gu, const T* dh, T* dgu, T* h, u64 rows, \
                                                 u32 f) {                                         \
        swiglu_bwd<T, V>(gu, dh, dgu, h, rows, f);                                                \
    }

INSTANTIATE(f32, float, 4)
INSTANTIATE(f32_scalar, float, 1)
INSTANTIATE(bf16, bf16, 8)
INSTANTIATE(bf16_scalar, bf16, 1)
