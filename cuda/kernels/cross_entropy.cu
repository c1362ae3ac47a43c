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
//
// Both passes split each row into gridDim.y chunks of at most one register tile (common.cuh's
// Tile; `Launch::row_chunks`), so a vocabulary of 50k is many blocks of one tile each: every
// logit is read once, in 16-byte vectors, with enough blocks in flight to fill the GPU however
// few rows there are. The forward's chunks leave (max, sum of exp) states that `ce_finish`
// combines per row in chunk order (deterministic).
#include "common.cuh"

#define FLAG_TARGET_OUT_OF_RANGE 2u

// part[row * gridDim.y + chunk] = the chunk's log-sum-exp state.
template <typename T, bool VEC>
__device__ void ce_fwd(const T* __restrict__ logits, Lse* __restrict__ part, u32 rows, u32 vocab, u32 chunk) {
    const u32 row = row_index(), start = blockIdx.y * chunk;
    Tile<T, VEC> t;
    t.load(logits + (u64)row * vocab + start, row < rows ? tile_len(vocab, start, chunk) : 0, neg_inf());
    const Lse st = row_lse(t.fold_lse(LseOp().identity(), false));
    if (row < rows && threadIdx.x == 0) part[(u64)row * gridDim.y + blockIdx.y] = st;
}

// A thread per row: lse from the chunk states, and the loss.
template <typename T>
__device__ void ce_finish(const T* __restrict__ logits, const u32* __restrict__ targets, const Lse* __restrict__ part,
                          u32 chunks, float* __restrict__ loss, float* __restrict__ lse_out, u32 rows, u32 vocab,
                          u32 ignore, u32* err) {
    for (u64 row = global_thread(); row < rows; row += grid_threads()) {
        Lse st = part[row * chunks];
        for (u32 c = 1; c < chunks; ++c) st = lse_combine(st, part[row * chunks + c]);
        const float lse = lse_value(st);
        const u32 t = targets[row];
        float l = 0.0f;
        if (t != ignore) {
            if (t < vocab) {
                l = lse - to_float(logits[row * vocab + t]);
            } else {
                atomicOr(err, FLAG_TARGET_OUT_OF_RANGE);
                l = quiet_nan();
            }
        }
        loss[row] = l;
        lse_out[row] = lse;
    }
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

template <typename T, bool VEC>
__device__ void ce_bwd(const T* __restrict__ logits, const u32* __restrict__ targets, const float* __restrict__ lse,
                       const float* __restrict__ stats, const float* __restrict__ dloss, T* __restrict__ dlogits,
                       u32 rows, u32 vocab, u32 ignore, u32 chunk) {
    using Row = Tile<T, VEC>;
    const u32 row = row_index(), start = blockIdx.y * chunk;
    if (row >= rows) return;  // no reductions here: inactive threads may leave
    const u32 len = tile_len(vocab, start, chunk), t = targets[row];
    const bool counted = t != ignore && t < vocab;
    const float scale = counted ? dloss[0] / fmaxf(stats[1], 1.0f) : 0.0f, m = lse[row];
    const u64 base = (u64)row * vocab + start;
    const u32 target = t - start;  // the target's column in this chunk (wraps when before it)
    Row tile;
    // An ignored row's gradient is zero: its logits need not be read.
    tile.load(logits + base, counted ? len : 0, 0.0f);
#pragma unroll
    for (int k = 0; k < Row::K; ++k)
#pragma unroll
        for (int e = 0; e < Row::V; ++e) {
            const float p = row_exp<T>(tile.v[k][e], m) - (Row::col(k, e) == target ? 1.0f : 0.0f);
            tile.v[k][e] = counted ? p * scale : 0.0f;
        }
    tile.store(dlogits + base, len);
}

#define INSTANTIATE_ROWS(NAME, T, VEC)                                                                 \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                           \
        ce_fwd_##NAME(const T* logits, Lse* part, u32 rows, u32 vocab, u32 chunk) {                   \
        ce_fwd<T, VEC>(logits, part, rows, vocab, chunk);                                             \
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                           \
        ce_bwd_##NAME(const T* logits, const u32* targets, const float* lse, const float* stats,      \
                      const float* dloss, T* dlogits, u32 rows, u32 vocab, u32 ignore, u32 chunk) {   \
        ce_bwd<T, VEC>(logits, targets, lse, stats, dloss, dlogits, rows, vocab, ignore, chunk);      \
    }
#define INSTANTIATE(NAME, T)                                                                          \
    INSTANTIATE_ROWS(NAME, T, true)                                                                   \
    INSTANTIATE_ROWS(NAME##_scalar, T, false)                                                         \
    extern "C" __global__ void ce_finish_##NAME(const T* logits, const u32* targets, const Lse* part, \
                                                u32 chunks, float* loss, float* lse_out, u32 rows,    \
                                                u32 vocab, u32 ignore, u32* err) {                    \
        ce_finish<T>(logits, targets, part, chunks, loss, lse_out, rows, vocab, ignore, err);         \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
