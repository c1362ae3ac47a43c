// optim.cu: the AdamW step, and the sum of squares behind global-norm gradient clipping.
//
// Clipping stays on the device: sumsq_partial/sumsq_finish accumulate sum(g^2) over every
// gradient into one f32, clip_scale turns it into min(1, max_norm / (norm + 1e-6)), and adamw
// multiplies the gradient by that scale as it reads it. No host sync in the optimizer step.
#include "common.cuh"

// In place on f32 p, m, v; g read-only. bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (host, f64).
// Decoupled weight decay: p <- p * (1 - lr * wd) - lr * mhat / (sqrt(vhat) + eps).
// gscale (nullable) points at one f32 multiplying every gradient.
__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, float lr, float b1, float b2,
                                          float eps, float wd, float bc1, float bc2) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p = p * (1.0f - lr * wd) - lr * (m / bc1) / (sqrtf(v / bc2) + eps);
}

extern "C" __global__ void adamw(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                 float* __restrict__ v, u64 n, float lr, float b1, float b2, float eps, float wd,
                                 float bc1, float bc2, const float* __restrict__ gscale) {
    const float s = gscale ? gscale[0] : 1.0f;
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) {
        float vp[4], vg[4], vm[4], vv[4];
        load_vec(p + 4 * i, vp);
        load_vec(g + 4 * i, vg);
        load_vec(m + 4 * i, vm);
        load_vec(v + 4 * i, vv);
#pragma unroll
        for (int j = 0; j < 4; ++j) adamw_one(vp[j], vg[j] * s, vm[j], vv[j], lr, b1, b2, eps, wd, bc1, bc2);
        store_vec(p + 4 * i, vp);
        store_vec(m + 4 * i, vm);
        store_vec(v + 4 * i, vv);
    }
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads())
        adamw_one(p[i], g[i] * s, m[i], v[i], lr, b1, b2, eps, wd, bc1, bc2);
}

// partial[blockIdx.x] = this block's share of sum(x^2).
template <typename T>
__device__ void sumsq_partial(const T* __restrict__ x, u64 n, float* __restrict__ partial) {
    float acc = 0.0f;
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const float v = to_float(x[i]);
        acc += v * v;
    }
    acc = row_reduce(acc, SumOp());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: out[0] = (accumulate ? out[0] : 0) + sum(partial).
extern "C" __global__ void sumsq_finish(const float* __restrict__ partial, u32 count, float* out, int accumulate) {
    float acc = 0.0f;
    for (u32 i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
    acc = row_reduce(acc, SumOp());
    if (threadIdx.x == 0) out[0] = (accumulate ? out[0] : 0.0f) + acc;
}

extern "C" __global__ void clip_scale(const float* sumsq, float max_norm, float* scale) {
    scale[0] = fminf(1.0f, max_norm / (sqrtf(sumsq[0]) + 1e-6f));
}

extern "C" __global__ void sumsq_partial_f32(const float* x, u64 n, float* partial) { sumsq_partial(x, n, partial); }
extern "C" __global__ void sumsq_partial_bf16(const bf16* x, u64 n, float* partial) { sumsq_partial(x, n, partial); }
