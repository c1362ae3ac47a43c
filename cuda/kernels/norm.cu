// norm.cu: RMSNorm and LayerNorm over the last axis (rows of n), forward and backward; and
// xLSTM's gated head norm (LayerNorm, a weight per head, a sigmoid gate) on the same row tiles.
//
// One kernel pair serves both: LayerNorm is RMSNorm of the centred row plus a bias, so
// `center` switches the mean (and the bias) on. Weights and biases are f32 (the forwards also
// take bf16 ones with bf16 data, below), the saved statistics f32; x, y, dy, dx f32 or bf16.
//   forward:  xh = (x - mean) * rstd,  rstd = 1 / sqrt(mean((x - mean)^2) + eps),
//             y = xh * w (+ b) (+ res); mean = 0 for RMSNorm
//   backward: g = dy * w,  dx = rstd * (g - mean(g) - xh * mean(g * xh))   (no mean(g) for RMS)
//             dw = sum over rows of dy * xh,  db = sum over rows of dy
// Rows are laid out by `Launch::rows` in register tiles (common.cuh's Tile): a row that is one
// tile (up to 16384 bf16 or 8192 f32 elements) is read once and written once; a longer one is
// read once for the statistics and once more for the output (the backward: x and dy twice).
#include "common.cuh"

// A row's statistics: for LayerNorm (center) its mean and rstd = 1 / sqrt(var + eps), for
// RMSNorm rstd = 1 / sqrt(mean(x^2) + eps) and mean 0. This thread's elements give their count,
// mean and sum of squared deviations, merged tile by tile and then across threads by Chan et
// al.'s pairwise update (exact, and stable where E[x^2] - mean^2 would cancel); for RMSNorm
// their sum of squares. The row's last tile is left in t. Every thread of the row calls it
// (row_reduce synchronizes), an inactive row with len 0.
template <typename T, bool VEC>
__device__ __forceinline__ void row_stats(Tile<T, VEC>& t, const T* __restrict__ xr, u32 len, u32 n, float eps,
                                          int center, float& mean, float& rstd) {
    using Row = Tile<T, VEC>;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    float cnt = 0.0f, mu = 0.0f, m2 = 0.0f;
    for (u32 i = 0; i < tiles; ++i) {
        const u32 tl = tile_len(len, i * tile, tile);
        t.load(xr + i * tile, tl, 0.0f);
        if (center) {
            float c = 0.0f, s = 0.0f, q = 0.0f;
#pragma unroll
            for (int k = 0; k < Row::K; ++k)
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    c += Row::valid(k, e, tl) ? 1.0f : 0.0f;
                    s += t.v[k][e];
                }
            const float tm = c > 0.0f ? s / c : 0.0f;
#pragma unroll
            for (int k = 0; k < Row::K; ++k)
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    const float d = Row::valid(k, e, tl) ? t.v[k][e] - tm : 0.0f;
                    q += d * d;
                }
            const float total = cnt + c, delta = tm - mu, frac = total > 0.0f ? c / total : 0.0f;
            mu += delta * frac;
            m2 += q + delta * delta * cnt * frac;
            cnt = total;
        } else {
#pragma unroll
            for (int k = 0; k < Row::K; ++k)
#pragma unroll
                for (int e = 0; e < Row::V; ++e) m2 += t.v[k][e] * t.v[k][e];
        }
    }
    mean = center ? row_reduce(cnt * mu, SumOp()) / (float)n : 0.0f;
    const float dev = center ? m2 + cnt * (mu - mean) * (mu - mean) : m2;
    rstd = rsqrtf(row_reduce(dev, SumOp()) / (float)n + eps);
}

// A non-null res (like x) is added to y before its one rounding: a sum of the norm and another
// path (RAttention's two normed branches) in the norm's pass.
template <typename T, typename W, bool VEC>
__device__ void norm_fwd(const T* __restrict__ x, const W* __restrict__ w, const W* __restrict__ b,
                         const T* __restrict__ res, T* __restrict__ y, float* __restrict__ mean_out,
                         float* __restrict__ rstd_out, u32 rows, u32 n, float eps, int center) {
    using Row = Tile<T, VEC>;
    const u32 row = row_index();
    const u32 len = row < rows ? n : 0;  // an inactive row reads and writes nothing, but reduces
    const u64 base = (u64)row * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Row t, r;
    float mean, rstd;
    // A one-tile row's res is loaded with x, before the statistics' reduction waits for x:
    // loaded after it, its latency made the norm with res (RAttention's, rows of 128 bf16) take
    // 317 us where the norm alone took 137, as long as the norm and a separate add.
    if (res && tiles == 1) r.load(res + base, len, 0.0f);
    row_stats(t, x + base, len, n, eps, center, mean, rstd);
    if (len == 0) return;
    for (u32 i = 0; i < tiles; ++i) {
        const u32 start = i * tile, tl = tile_len(len, start, tile);
        if (tiles > 1) t.load(x + base + start, tl, 0.0f);
        // Unit by unit, each stored at once: its registers then take the next unit's weights.
#pragma unroll
        for (int k = 0; k < Row::K; ++k) {
            float wu[Row::V], bu[Row::V], ru[Row::V];
            Row::load_unit(w + start, tl, k, wu, 0.0f);
            if (b) Row::load_unit(b + start, tl, k, bu, 0.0f);
            if (res && tiles > 1) Row::load_unit(res + base + start, tl, k, ru, 0.0f);
            if (res && tiles == 1)
#pragma unroll
                for (int e = 0; e < Row::V; ++e) ru[e] = r.v[k][e];
#pragma unroll
            for (int e = 0; e < Row::V; ++e)
                t.v[k][e] = (t.v[k][e] - mean) * rstd * wu[e] + (b ? bu[e] : 0.0f) + (res ? ru[e] : 0.0f);
            Row::store_unit(y + base + start, tl, k, t.v[k]);
        }
    }
    if (threadIdx.x == 0) {
        rstd_out[row] = rstd;
        if (mean_out) mean_out[row] = mean;
    }
}

// Blocks of `Launch::rows`' shape walk row groups blockIdx.x, blockIdx.x + gridDim.x, ... of
// blockDim.y rows. Each block-row (threadIdx.y) sums its dw (then db) per column in its own
// slice of dynamic shared memory, blockDim.y * width floats with width = n (2n with center);
// at the end the block adds its slices in order into partial[blockIdx.x][.] and the host sums
// the partial rows (reduce.cu): deterministic, no atomics. A non-null dres (the gradient that
// reaches x by another path: the residual stream's) is added into dx before its one rounding,
// which saves the backward a separate pass adding the two.
template <typename T, bool VEC>
__device__ void norm_bwd(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const T* __restrict__ dy, const T* __restrict__ dres,
                         T* __restrict__ dx, float* __restrict__ partial, u32 rows, u32 n, int center) {
    using Row = Tile<T, VEC>;
    extern __shared__ float acc[];
    const u32 width = center ? 2 * n : n, threads = blockDim.x * blockDim.y;
    const u32 me = threadIdx.y * blockDim.x + threadIdx.x;
    for (u32 j = me; j < blockDim.y * width; j += threads) acc[j] = 0.0f;
    __syncthreads();  // zeroed by one thread, summed into by another
    float* const dw_acc = acc + threadIdx.y * width;
    float* const db_acc = dw_acc + n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Row tx, tg, tr;
    // Every thread of the block makes the same trips: row_reduce synchronizes.
    for (u32 group = blockIdx.x * blockDim.y; group < rows; group += gridDim.x * blockDim.y) {
        const u32 row = group + threadIdx.y;
        const u32 len = row < rows ? n : 0;
        const u64 base = (u64)row * n;
        const float mu = center && len ? mean[row] : 0.0f, r = len ? rstd[row] : 0.0f;
        float sg = 0.0f, sgx = 0.0f;
        for (u32 i = 0; i < tiles; ++i) {
            const u32 start = i * tile, tl = tile_len(len, start, tile);
            tx.load(x + base + start, tl, 0.0f);
            tg.load(dy + base + start, tl, 0.0f);
#pragma unroll
            for (int k = 0; k < Row::K; ++k) {
                float wu[Row::V];
                Row::load_unit(w + start, tl, k, wu, 0.0f);
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    const float g = tg.v[k][e] * wu[e];
                    sg += g;
                    sgx += g * (tx.v[k][e] - mu) * r;
                }
            }
        }
        const float mg = center ? row_reduce(sg, SumOp()) / (float)n : 0.0f;
        const float mgx = row_reduce(sgx, SumOp()) / (float)n;
        for (u32 i = 0; i < tiles; ++i) {
            const u32 start = i * tile, tl = tile_len(len, start, tile);
            if (tiles > 1) {
                tx.load(x + base + start, tl, 0.0f);
                tg.load(dy + base + start, tl, 0.0f);
            }
            if (dres) tr.load(dres + base + start, tl, 0.0f);
#pragma unroll
            for (int k = 0; k < Row::K; ++k) {
                float wu[Row::V], dwu[Row::V];
                Row::load_unit(w + start, tl, k, wu, 0.0f);
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    const float xh = (tx.v[k][e] - mu) * r, d = tg.v[k][e];
                    dwu[e] = d * xh;
                    tx.v[k][e] = r * (d * wu[e] - mg - xh * mgx) + (dres ? tr.v[k][e] : 0.0f);
                }
                Row::add_unit(dw_acc + start, tl, k, dwu);
                if (center) Row::add_unit(db_acc + start, tl, k, tg.v[k]);
            }
            tx.store(dx + base + start, tl);
        }
    }
    __syncthreads();
    float* out = partial + (u64)blockIdx.x * width;
    for (u32 j = me; j < width; j += threads) {
        float s = 0.0f;
        for (u32 q = 0; q < blockDim.y; ++q) s += acc[q * width + j];
        out[j] = s;
    }
}

// xLSTM's gated head norm: rows of n in heads, row r in head r % heads, w [heads, n] f32;
// x, o, y, dy, dx, do f32 or bf16. With xh the row's LayerNorm (no affine map of its own),
//   forward:  y = xh * w[h] * sigmoid(o)
//   backward: s = sigmoid(o), g = dy * s * w[h],  dx = rstd * (g - mean(g) - xh * mean(g * xh)),
//             do = dy * xh * w[h] * s * (1 - s),  dw[h] = sum over the head's rows of dy * s * xh
// The backward recomputes the row statistics (nothing is saved between the passes).
template <typename T, typename W, bool VEC>
__device__ void gated_head_norm_fwd(const T* __restrict__ x, const T* __restrict__ o, const W* __restrict__ w,
                                    T* __restrict__ y, u32 rows, u32 heads, u32 n, float eps) {
    using Row = Tile<T, VEC>;
    const u32 row = row_index();
    const u32 len = row < rows ? n : 0;
    const u64 base = (u64)row * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Row t, tg;
    float mean, rstd;
    row_stats(t, x + base, len, n, eps, 1, mean, rstd);
    if (len == 0) return;
    const W* wh = w + (u64)(row % heads) * n;
    for (u32 i = 0; i < tiles; ++i) {
        const u32 start = i * tile, tl = tile_len(len, start, tile);
        if (tiles > 1) t.load(x + base + start, tl, 0.0f);
        tg.load(o + base + start, tl, 0.0f);
#pragma unroll
        for (int k = 0; k < Row::K; ++k) {
            float wu[Row::V];
            Row::load_unit(wh + start, tl, k, wu, 0.0f);
#pragma unroll
            for (int e = 0; e < Row::V; ++e) t.v[k][e] = (t.v[k][e] - mean) * rstd * wu[e] * sigmoid(tg.v[k][e]);
            Row::store_unit(y + base + start, tl, k, t.v[k]);
        }
    }
}

// Grid (blocks, heads): block (b, h) walks the rows of head h, j * heads + h for j = b *
// blockDim.y + threadIdx.y, b + gridDim.x, ... (in row groups of blockDim.y), so that each
// block-row sums dw for one head only, in its own slice of dynamic shared memory (blockDim.y * n
// floats); at the end the block adds its slices in order into partial[b][h][.] and the host sums
// the partial rows (reduce.cu): deterministic, no atomics.
template <typename T, bool VEC>
__device__ void gated_head_norm_bwd(const T* __restrict__ x, const T* __restrict__ o, const float* __restrict__ w,
                                    const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ d_o,
                                    float* __restrict__ partial, u32 rows, u32 heads, u32 n, float eps) {
    using Row = Tile<T, VEC>;
    extern __shared__ float acc[];
    const u32 threads = blockDim.x * blockDim.y, me = threadIdx.y * blockDim.x + threadIdx.x;
    for (u32 j = me; j < blockDim.y * n; j += threads) acc[j] = 0.0f;
    __syncthreads();  // zeroed by one thread, summed into by another
    float* const dw_acc = acc + threadIdx.y * n;
    const u32 head = blockIdx.y, per_head = rows / heads;
    const float* wh = w + (u64)head * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Row tx, to, tg;
    // Every thread of the block makes the same trips: row_reduce synchronizes.
    for (u32 group = blockIdx.x * blockDim.y; group < per_head; group += gridDim.x * blockDim.y) {
        const u32 j = group + threadIdx.y;
        const u32 len = j < per_head ? n : 0;
        const u64 base = ((u64)j * heads + head) * n;
        float mean, r;
        row_stats(tx, x + base, len, n, eps, 1, mean, r);
        float sg = 0.0f, sgx = 0.0f;
        for (u32 i = 0; i < tiles; ++i) {
            const u32 start = i * tile, tl = tile_len(len, start, tile);
            if (tiles > 1) tx.load(x + base + start, tl, 0.0f);
            to.load(o + base + start, tl, 0.0f);
            tg.load(dy + base + start, tl, 0.0f);
#pragma unroll
            for (int k = 0; k < Row::K; ++k) {
                float wu[Row::V];
                Row::load_unit(wh + start, tl, k, wu, 0.0f);
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    const float g = tg.v[k][e] * sigmoid(to.v[k][e]) * wu[e];
                    sg += g;
                    sgx += g * (tx.v[k][e] - mean) * r;
                }
            }
        }
        const float mg = row_reduce(sg, SumOp()) / (float)n;
        const float mgx = row_reduce(sgx, SumOp()) / (float)n;
        for (u32 i = 0; i < tiles; ++i) {
            const u32 start = i * tile, tl = tile_len(len, start, tile);
            if (tiles > 1) {
                tx.load(x + base + start, tl, 0.0f);
                to.load(o + base + start, tl, 0.0f);
                tg.load(dy + base + start, tl, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < Row::K; ++k) {
                float wu[Row::V], dwu[Row::V];
                Row::load_unit(wh + start, tl, k, wu, 0.0f);
#pragma unroll
                for (int e = 0; e < Row::V; ++e) {
                    const float xh = (tx.v[k][e] - mean) * r, d = tg.v[k][e], s = sigmoid(to.v[k][e]);
                    const float g = d * s * wu[e];
                    dwu[e] = d * s * xh;
                    to.v[k][e] = d * xh * wu[e] * s * (1.0f - s);
                    tx.v[k][e] = r * (g - mg - xh * mgx);
                }
                Row::add_unit(dw_acc + start, tl, k, dwu);
            }
            tx.store(dx + base + start, tl);
            to.store(d_o + base + start, tl);
        }
    }
    __syncthreads();
    float* out = partial + ((u64)blockIdx.x * heads + head) * n;
    for (u32 c = me; c < n; c += threads) {
        float s = 0.0f;
        for (u32 q = 0; q < blockDim.y; ++q) s += acc[q * n + c];
        out[c] = s;
    }
}

#define INSTANTIATE(NAME, T, VEC)                                                                  \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        norm_fwd_##NAME(const T* x, const float* w, const float* b, const T* res, T* y,            \
                        float* mean_out, float* rstd_out, u32 rows, u32 n, float eps, int center) { \
        norm_fwd<T, float, VEC>(x, w, b, res, y, mean_out, rstd_out, rows, n, eps, center);        \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        norm_bwd_##NAME(const T* x, const float* w, const float* mean, const float* rstd,          \
                        const T* dy, const T* dres, T* dx, float* partial, u32 rows, u32 n,        \
                        int center) {                                                              \
        norm_bwd<T, VEC>(x, w, mean, rstd, dy, dres, dx, partial, rows, n, center);                \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        gated_head_norm_fwd_##NAME(const T* x, const T* o, const float* w, T* y, u32 rows,         \
                                   u32 heads, u32 n, float eps) {                                  \
        gated_head_norm_fwd<T, float, VEC>(x, o, w, y, rows, heads, n, eps);                       \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        gated_head_norm_bwd_##NAME(const T* x, const T* o, const float* w, const T* dy, T* dx,     \
                                   T* d_o, float* partial, u32 rows, u32 heads, u32 n, float eps) { \
        gated_head_norm_bwd<T, VEC>(x, o, w, dy, dx, d_o, partial, rows, heads, n, eps);           \
    }

INSTANTIATE(f32, float, true)
INSTANTIATE(f32_scalar, float, false)
INSTANTIATE(bf16, bf16, true)
INSTANTIATE(bf16_scalar, bf16, false)

// The forwards with weights (and LayerNorm's bias) of the data's dtype, read as they are: a
// model computing in bf16 holds its norm weights in bf16, which the kernels above would take
// only after a launch casting them to f32 (exactly, as every bf16 is an f32), one per norm.
#define INSTANTIATE_SAME_WEIGHTS(NAME, T, VEC)                                                     \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        norm_fwd_wt_##NAME(const T* x, const T* w, const T* b, const T* res, T* y,                 \
                           float* mean_out, float* rstd_out, u32 rows, u32 n, float eps,           \
                           int center) {                                                           \
        norm_fwd<T, T, VEC>(x, w, b, res, y, mean_out, rstd_out, rows, n, eps, center);            \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                        \
        gated_head_norm_fwd_wt_##NAME(const T* x, const T* o, const T* w, T* y, u32 rows,          \
                                      u32 heads, u32 n, float eps) {                               \
        gated_head_norm_fwd<T, T, VEC>(x, o, w, y, rows, heads, n, eps);                           \
    }

INSTANTIATE_SAME_WEIGHTS(bf16, bf16, true)
INSTANTIATE_SAME_WEIGHTS(bf16_scalar, bf16, false)
