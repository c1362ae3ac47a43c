// cast.cu: dtype conversion between f32 and bf16, the same with a scale read from the device, and
// filling with a scalar.
#include "common.cuh"

template <typename S, typename D>
__device__ void cast(const S* __restrict__ x, D* __restrict__ y, u64 n) {
    map1(x, y, n, [](float v) { return v; });
}

// y = x * s[0]: s is computed on the device (a gradient's scale known only there), so it is read
// where it lies instead of passing through the host; the scale and the cast in one pass.
template <typename S, typename D>
__device__ void scale_cast(const S* __restrict__ x, const float* __restrict__ s, D* __restrict__ y, u64 n) {
    const float c = *s;
    map1(x, y, n, [=](float v) { return v * c; });
}

template <typename T>
__device__ void fill(T* __restrict__ y, u64 n, float value) {
    float v[EW_VEC];
#pragma unroll
    for (int j = 0; j < EW_VEC; ++j) v[j] = value;
    const u64 groups = n / EW_VEC;
    for (u64 i = global_thread(); i < groups; i += grid_threads()) store_vec(y + i * EW_VEC, v);
    for (u64 i = groups * EW_VEC + global_thread(); i < n; i += grid_threads()) y[i] = from_float<T>(value);
}

extern "C" __global__ void cast_f32_to_bf16(const float* x, bf16* y, u64 n) { cast(x, y, n); }
extern "C" __global__ void cast_bf16_to_f32(const bf16* x, float* y, u64 n) { cast(x, y, n); }
#define SCALE_CAST(SN, S, DN, D)                                                                   \
    extern "C" __global__ void scale_cast_##SN##_to_##DN(const S* x, const float* s, D* y, u64 n) { \
        scale_cast(x, s, y, n);                                                                     \
    }
SCALE_CAST(f32, float, f32, float)
SCALE_CAST(f32, float, bf16, bf16)
SCALE_CAST(bf16, bf16, f32, float)
SCALE_CAST(bf16, bf16, bf16, bf16)
extern "C" __global__ void fill_f32(float* y, u64 n, float value) { fill(y, n, value); }
extern "C" __global__ void fill_bf16(bf16* y, u64 n, float value) { fill(y, n, value); }
