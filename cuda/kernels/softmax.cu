// softmax.cu: softmax and log_softmax over rows of n (the last axis), and their backwards.
//
// `Launch::rows` gives a row enough threads to hold it in one register tile (common.cuh's Tile)
// up to 16384 bf16 or 8192 f32 elements: the forward then reads x once and writes y once,
// with one exp per element; the backward reads y and dy once and writes dx once. Longer rows are
// walked tile by tile, twice: the forward's first walk keeps an online max and sum of exp, so
// it reads x twice in all.
#include "common.cuh"

// log != 0: y = x - logsumexp(x); else y = exp(x - logsumexp(x)). A fully masked row (all -inf)
// gives zeros for softmax and NaN for log_softmax, as the CPU backend does.
template <typename T, bool VEC>
__device__ void softmax_fwd(const T* __restrict__ x, T* __restrict__ y, u32 rows, u32 n, int log) {
    const u32 row = row_index();
    const u32 len = row < rows ? n : 0;  // an inactive row reads and writes nothing, but reduces
    const u64 base = (u64)row * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Tile<T, VEC> t;
    Lse own = LseOp().identity();
    for (u32 i = 0; i < tiles; ++i) {
        t.load(x + base + i * tile, tile_len(len, i * tile, tile), neg_inf());
        own = t.fold_lse(own, !log);
    }
    const Lse st = row_lse(own);
    const float shift = exp_shift(st.m);
    const float lse = log ? shift + logf(st.s) : 0.0f, inv = !log && st.s > 0.0f ? 1.0f / st.s : 0.0f;
    // A one-tile row still holds exp(x - own.m): rescale it to the row's max instead of
    // exponentiating again.
    const float rescale = own.m == neg_inf() ? 0.0f : expf(own.m - shift) * inv;
    for (u32 i = 0; i < tiles; ++i) {
        const u32 tl = tile_len(len, i * tile, tile);
        if (tiles > 1) t.load(x + base + i * tile, tl, neg_inf());
#pragma unroll
        for (int k = 0; k < t.K; ++k)
#pragma unroll
            for (int e = 0; e < t.V; ++e) {
                float& v = t.v[k][e];
                v = log ? v - lse : tiles > 1 ? row_exp<T>(v, shift) * inv : v * rescale;
            }
        t.store(y + base + i * tile, tl);
    }
}

// From the forward's output y:
// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T, bool VEC>
__device__ void softmax_bwd(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, u32 rows, u32 n,
                            int log) {
    const u32 row = row_index();
    const u32 len = row < rows ? n : 0;
    const u64 base = (u64)row * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    Tile<T, VEC> ty, tg;
    float acc = 0.0f;
    for (u32 i = 0; i < tiles; ++i) {
        const u32 tl = tile_len(len, i * tile, tile);
        tg.load(dy + base + i * tile, tl, 0.0f);
        // log_softmax's sum needs only dy: a long row reads y in the second walk alone.
        if (!log || tiles == 1) ty.load(y + base + i * tile, tl, 0.0f);
#pragma unroll
        for (int k = 0; k < tg.K; ++k)
#pragma unroll
            for (int e = 0; e < tg.V; ++e) acc += log ? tg.v[k][e] : tg.v[k][e] * ty.v[k][e];
    }
    acc = row_reduce(acc, SumOp());
    for (u32 i = 0; i < tiles; ++i) {
        const u32 tl = tile_len(len, i * tile, tile);
        if (tiles > 1) {
            tg.load(dy + base + i * tile, tl, 0.0f);
            ty.load(y + base + i * tile, tl, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < tg.K; ++k)
#pragma unroll
            for (int e = 0; e < tg.V; ++e) {
                const float g = tg.v[k][e], v = ty.v[k][e];
                tg.v[k][e] = log ? g - row_exp<T>(v, 0.0f) * acc : v * (g - acc);
            }
        tg.store(dx + base + i * tile, tl);
    }
}

#define INSTANTIATE(NAME, T, VEC)                                                                      \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                            \
        softmax_##NAME(const T* x, T* y, u32 rows, u32 n, int log) {                                   \
        softmax_fwd<T, VEC>(x, y, rows, n, log);                                                       \
    }                                                                                                  \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                            \
        softmax_bwd_##NAME(const T* y, const T* dy, T* dx, u32 rows, u32 n, int log) {                 \
        softmax_bwd<T, VEC>(y, dy, dx, rows, n, log);                                                  \
    }

INSTANTIATE(f32, float, true)
INSTANTIATE(f32_scalar, float, false)
INSTANTIATE(bf16, bf16, true)
INSTANTIATE(bf16_scalar, bf16, false)
