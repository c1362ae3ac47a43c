// cross_entropy.cu: mean cross-entropy of logits [rows, V] against u32 targets, with an
// ignore_index, forward and backward.
//
// Forward: per row lse = logsumexp(logits) and loss = lse - logits[target] (0 for ignored
// rows), then `ce_mean` writes stats = [mean loss over non-ignored rows, their count]. A target
// >= V that is not ignore_index sets bit 2 of the error word (FLAG_TARGET_OUT_OF_RANGE in
// src/device.rs) and gets a NaN loss, so it cannot pass unnoticed.
// Backward, one pass per row from the saved lse: dlogits = (softmax - onehot) * dloss / count,
// zero on ignored rows; dloss (the gradient of the mean) and count stay on the device, so
// nothing waits for the host.
#include "common.cuh"

#define FLAG_TARGET_OUT_OF_RANGE 2u

template <typename T>
__device__ void ce_fwd(const T* __restrict__ logits, const u32* __restrict__ targets, float* __restrict__ loss,
                       float* __restrict__ lse_out, u32 rows, u32 vocab, u32 ignore, u32* err) {
    const u32 row = row_index();
    const bool active = row < rows;
    const u64 base = (u64)row * vocab;
    Lse st = LseOp().identity();
    if (active)
        for (u32 j = threadIdx.x; j < vocab; j += blockDim.x)
            st = lse_combine(st, lse_leaf(to_float(logits[base + j])));
    st = row_reduce(st, LseOp());
    if (!active || threadIdx.x != 0) return;
    const float lse = lse_value(st);
    const u32 t = targets[row];
    float l = 0.0f;
    if (t != ignore) {
        if (t < vocab) {
            l = lse - to_float(logits[base + t]);
        } else {
            atomicOr(err, FLAG_TARGET_OUT_OF_RANGE);
            l = quiet_nan();
        }
    }
    loss[row] = l;
    lse_out[row] = lse;
}

// One block: stats[0] = sum of non-ignored losses / count (0 when count is 0), stats[1] = count.
extern "C" __global__ void ce_mean(const float* __restrict__ loss, const u32* __restrict__ targets, float* stats,
                                   u32 rows, u32 ignore) {
    float sum = 0.0f, count = 0.0f;
    for (u32 i = threadIdx.x; i < rows; i += blockDim.x)
        if (targets[i] != ignore) {
            sum += loss[i];
            count += 1.0f;
        }
    sum = row_reduce(sum, SumOp());
    count = row_reduce(count, SumOp());
    if (threadIdx.x == 0) {
        stats[0] = count > 0.0f ? sum / count : 0.0f;
        stats[1] = count;
    }
}

template <typename T>
__device__ void ce_bwd(const T* __restrict__ logits, const u32* __restrict__ targets, const float* __restrict__ lse,
                       const float* __restrict__ stats, const float* __restrict__ dloss, T* __restrict__ dlogits,
                       u32 vocab, u32 ignore) {
    const u32 row = blockIdx.x;
    const u64 base = (u64)row * vocab;
    const u32 t = targets[row];
    const bool counted = t != ignore && t < vocab;
    const float scale = counted ? dloss[0] / fmaxf(stats[1], 1.0f) : 0.0f;
    const float m = lse[row];
    for (u32 j = threadIdx.x; j < vocab; j += blockDim.x) {
        const float p = expf(to_float(logits[base + j]) - m);
        dlogits[base + j] = from_float<T>((p - (j == t ? 1.0f : 0.0f)) * scale);
    }
}

#define INSTANTIATE(NAME, T)                                                                         \
    extern "C" __global__ void ce_fwd_##NAME(const T* logits, const u32* targets, float* loss,       \
                                             float* lse_out, u32 rows, u32 vocab, u32 ignore,        \
                                             u32* err) {                                             \
        ce_fwd<T>(logits, targets, loss, lse_out, rows, vocab, ignore, err);                         \
    }                                                                                                \
    extern "C" __global__ void ce_bwd_##NAME(const T* logits, const u32* targets, const float* lse,  \
                                             const float* stats, const float* dloss, T* dlogits,     \
                                             u32 vocab, u32 ignore) {                                \
        ce_bwd<T>(logits, targets, lse, stats, dloss, dlogits, vocab, ignore);                       \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
