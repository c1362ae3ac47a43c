// scatter.cu: the scatter along the middle axis of an [outer, n, inner] view that undoes an
// arg-reduction: y[o, idx[o, i], i] = x[o, i], every other element of y left as it was (the
// wrapper zeroes it). It is the backward of max along an axis.
#include "common.cuh"

template <typename T>
__device__ void scatter_axis(const T* __restrict__ x, const u32* __restrict__ idx, T* __restrict__ y, u64 outer,
                             u32 n, u64 inner) {
    for (u64 j = global_thread(); j < outer * inner; j += grid_threads()) {
        const u64 o = j / inner, i = j % inner;
        const u32 at = idx[j];
        if (at < n) y[(o * n + at) * inner + i] = x[j];
    }
}

#define INSTANTIATE(NAME, T)                                                                                   \
    extern "C" __global__ void scatter_axis_##NAME(const T* x, const u32* idx, T* y, u64 outer, u32 n, u64 inner) { \
        scatter_axis<T>(x, idx, y, outer, n, inner);                                                           \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
