// cast.cu: dtype conversion between f32 and bf16, and filling with a scalar.
#include "common.cuh"

template <typename S, typename D>
__device__ void cast(const S* __restrict__ x, D* __restrict__ y, u64 n) {
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) {
        float v[4];
        load4(x + 4 * i, v);
        store4(y + 4 * i, v);
    }
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads()) y[i] = from_float<D>(to_float(x[i]));
}

template <typename T>
__device__ void fill(T* __restrict__ y, u64 n, float value) {
    const float v[4] = {value, value, value, value};
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) store4(y + 4 * i, v);
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads()) y[i] = from_float<T>(value);
}

extern "C" __global__ void cast_f32_to_bf16(const float* x, bf16* y, u64 n) { cast(x, y, n); }
extern "C" __global__ void cast_bf16_to_f32(const bf16* x, float* y, u64 n) { cast(x, y, n); }
extern "C" __global__ void fill_f32(float* y, u64 n, float value) { fill(y, n, value); }
extern "C" __global__ void fill_bf16(bf16* y, u64 n, float value) { fill(y, n, value); }
