// mask.cu: the causal / sliding-window (band) mask on [.., Tq, Tk] scores, and where(cond, a, b).
#include "common.cuh"

// Query row t sits at absolute position p = t + q_offset; it keeps keys s with
// p - window < s <= p (window keys, itself included) and gets `fill` elsewhere. A window >= Tk
// (plus q_offset) is plain causal. One block row at a time, threads along the keys.
template <typename T>
__device__ void band_mask(const T* __restrict__ x, T* __restrict__ y, u64 rows, u32 tq, u32 tk,
                          i64 q_offset, i64 window, float fill) {
    const T f = from_float<T>(fill);
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 p = (i64)(r % tq) + q_offset;
        const u64 base = r * tk;
        for (u32 s = threadIdx.x; s < tk; s += blockDim.x) {
            const bool keep = (i64)s <= p && (i64)s > p - window;
            y[base + s] = keep ? x[base + s] : f;
        }
    }
}

// y = cond != 0 ? a : b, elementwise; moves elements by size, never looks at their values.
template <typename C, typename E>
__device__ void where_impl(const C* __restrict__ cond, const E* __restrict__ a, const E* __restrict__ b,
                       E* __restrict__ y, u64 n) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) y[i] = cond[i] != 0 ? a[i] : b[i];
}

#define BAND(NAME, T)                                                                             \
    extern "C" __global__ void band_mask_##NAME(const T* x, T* y, u64 rows, u32 tq, u32 tk,       \
                                                i64 q_offset, i64 window, float fill) {          \
        band_mask<T>(x, y, rows, tq, tk, q_offset, window, fill);                                 \
    }
BAND(f32, float)
BAND(bf16, bf16)

#define SELECT(NAME, C, E)                                                                        \
    extern "C" __global__ void NAME(const C* cond, const E* a, const E* b, E* y, u64 n) {         \
        where_impl<C, E>(cond, a, b, y, n);                                                           \
    }
SELECT(where_u8_b32, u8, u32)
SELECT(where_u8_b16, u8, u16)
SELECT(where_u8_b8, u8, u8)
SELECT(where_u32_b32, u32, u32)
SELECT(where_u32_b16, u32, u16)
SELECT(where_u32_b8, u32, u8)
