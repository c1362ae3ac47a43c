// cross_entropy.cu: cross-entropy of logits [rows, V] against u32 targets, with an
// ignore_index: the mean forward and backward, and the sum with its gradient in one pass.
//
// Forward: per row lse = logsumexp(logits) and loss = lse - logits[target] (0 for ignored
// rows), then `ce_mean` writes stats = [mean loss over non-ignored rows, their count]. A target
// >= V that is not ignore_index sets bit 2 of the error word (FLAG_TARGET_OUT_OF_RANGE in
// src/device.rs) and gets a NaN loss, so it cannot pass unnoticed.
// Backward, one pass per row from the saved lse: dlogits = (softmax - onehot) * dloss / count,
// zero on ignored rows; dloss (the gradient of the mean) and count stay on the device, so
// nothing waits for the host.
//
// The forward and backward split each row into gridDim.y chunks of at most one register tile
// (common.cuh's Tile; `Launch::row_chunks`), so a vocabulary of 50k is many blocks of one tile
// each: every logit is read once, in 16-byte vectors, with enough blocks in flight to fill the GPU however
// few rows there are. The forward's chunks leave (max, sum of exp) states that `ce_finish`
// combines per row in chunk order (deterministic).
//
// Summed, for a loss that needs its gradient at once (the fused linear cross-entropy): a block
// per row reads the row to its log-sum-exp, then reads it again, last tile first, mostly from
// L2 (a row is 100 KB at V = 50304 in bf16, a few hundred rows are in flight), and writes
// dlogits = softmax - onehot of the summed loss (zero on ignored rows; none without dlogits).
// `ce_sum_into` then adds [summed loss, counted rows] into the caller's f32 totals, one block in
// a fixed order. That is one read of the logits from memory where the forward and backward
// above read them twice, and two launches where they take four.
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

// A row's loss lse - logits[t] (the row's logits at `row`), 0 when t is ignore, and NaN with the
// error flag raised when t is out of range.
template <typename T>
__device__ __forceinline__ float row_loss(float lse, const T* __restrict__ row, u32 t, u32 vocab, u32 ignore,
                                          u32* err) {
    float l = 0.0f;
    if (t != ignore) {
        if (t < vocab) {
            l = lse - to_float(row[t]);
        } else {
            atomicOr(err, FLAG_TARGET_OUT_OF_RANGE);
            l = quiet_nan();
        }
    }
    return l;
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
        loss[row] = row_loss(lse, logits + row * vocab, targets[row], vocab, ignore, err);
        lse_out[row] = lse;
    }
}

// Over one block, in a fixed order: the sum of the losses of rows whose target is not ignore,
// and their count. Every thread of the block calls it (row_reduce synchronizes).
__device__ __forceinline__ void counted_sum(const float* __restrict__ loss, const u32* __restrict__ targets, u32 rows,
                                            u32 ignore, float& sum, float& count) {
    sum = 0.0f;
    count = 0.0f;
    for (u32 i = threadIdx.x; i < rows; i += blockDim.x)
        if (targets[i] != ignore) {
            sum += loss[i];
            count += 1.0f;
        }
    sum = row_reduce(sum, SumOp());
    count = row_reduce(count, SumOp());
}

// One block: stats[0] = sum of non-ignored losses / count (0 when count is 0), stats[1] = count.
extern "C" __global__ void ce_mean(const float* __restrict__ loss, const u32* __restrict__ targets, float* stats,
                                   u32 rows, u32 ignore) {
    float sum, count;
    counted_sum(loss, targets, rows, ignore, sum, count);
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

// A block (ROW_BLOCK threads, one row) per row; the row in tiles of row_tile<T>() columns.
// loss[row] = lse - logits[target] (0 when ignored, NaN and the error flag when out of range).
template <typename T, bool VEC>
__device__ void ce_summed(const T* __restrict__ logits, const u32* __restrict__ targets, T* __restrict__ dlogits,
                          float* __restrict__ loss, u32 vocab, u32 ignore, u32* err) {
    using Row = Tile<T, VEC>;
    const u32 row = blockIdx.x, tile = row_tile<T>(), t = targets[row];
    const u64 base = (u64)row * vocab;
    Lse own = LseOp().identity();
    for (u32 start = 0; start < vocab; start += tile) {
        Row r;
        r.load(logits + base + start, tile_len(vocab, start, tile), neg_inf());
        own = r.fold_lse(own, false);
    }
    const float lse = lse_value(row_lse(own));
    const bool counted = t != ignore && t < vocab;
    if (threadIdx.x == 0) loss[row] = row_loss(lse, logits + base, t, vocab, ignore, err);
    if (dlogits == nullptr) return;
    // Last tile first: the tiles this block read last are the likeliest to be still in L2.
    for (u32 i = (vocab + tile - 1) / tile; i-- > 0;) {
        const u32 start = i * tile, len = tile_len(vocab, start, tile), target = t - start;
        Row r;
        // An ignored row's gradient is zero: its logits need not be read again.
        r.load(logits + base + start, counted ? len : 0, 0.0f);
#pragma unroll
        for (int k = 0; k < Row::K; ++k)
#pragma unroll
            for (int e = 0; e < Row::V; ++e) {
                const float p = row_exp<T>(r.v[k][e], lse) - (Row::col(k, e) == target ? 1.0f : 0.0f);
                r.v[k][e] = counted ? p : 0.0f;
            }
        r.store(dlogits + base + start, len);
    }
}

// One block: totals[0] += the sum of the rows' losses, totals[1] += the rows counted (targets
// not ignore_index), summed in a fixed order.
extern "C" __global__ void ce_sum_into(const float* __restrict__ loss, const u32* __restrict__ targets,
                                       float* totals, u32 rows, u32 ignore) {
    float sum, count;
    counted_sum(loss, targets, rows, ignore, sum, count);
    if (threadIdx.x == 0) {
        totals[0] += sum;
        totals[1] += count;
    }
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
    }                                                                                                 \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK, 2) ce_summed_##NAME(                       \
        const T* logits, const u32* targets, T* dlogits, float* loss, u32 vocab, u32 ignore, u32* err) { \
        ce_summed<T, VEC>(logits, targets, dlogits, loss, vocab, ignore, err);                        \
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
