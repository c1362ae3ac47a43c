// cast.cu: dtype conversion between f32 and bf16, and filling with a scalar.
#include "common.cuh"

template <typename S, typename D>
__device__ void cast(const S* __restrict__ x, D* __restrict__ y, u64 n) {
    map1(x, y, n, [](float v) { return v; });
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
extern "C" __global__ void fill_f32(float* y, u64 n, float value) { fill(y, n, value); }
extern "C" __global__ void fill_bf16(bf16* y, u64 n, float value) { fill(y, n, value); }
