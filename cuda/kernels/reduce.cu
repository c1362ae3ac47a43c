// reduce.cu: reductions over the middle axis of an [outer, n, inner] view, and cumsum.
//
// Reductions: sum, mean, max (with argmax), logsumexp. Op numbers match `ReduceOp::code` in
// src/kernels/reduce.rs. One state type serves all four so that a single set of kernels is
// instantiated per dtype; the op is uniform across the grid.
// - inner == 1 (rows contiguous): `reduce_rows`, rows in register tiles like softmax's, read
//   in 16-byte vectors when the row length allows (a `_scalar` instantiation otherwise).
// - inner > 1: `reduce_cols`. Threads of a block lie along inner (coalesced) and along n;
//   blockIdx.y splits n into chunks so that short-inner, long-n shapes (a bias gradient:
//   outer 1, n = B*T, inner = C) still fill the GPU. With one chunk the block writes the result;
//   otherwise it writes partial states and `reduce_finish` combines the chunks in order, so
//   results are deterministic (no atomics).
#include "common.cuh"

enum { OP_SUM = 0, OP_MEAN, OP_MAX, OP_LSE };

// Sum/mean use s; max uses m and i (argmax); logsumexp uses m and s (online).
struct RState {
    float m;
    float s;
    u32 i;
};

__device__ __forceinline__ RState shfl_xor(RState v, int o) {
    v.m = shfl_xor(v.m, o);
    v.s = shfl_xor(v.s, o);
    v.i = shfl_xor(v.i, o);
    return v;
}

// Max with NaN winning (like torch.max) and ties to the lowest index (like argmax).
__device__ __forceinline__ bool beats(float a, u32 ia, float b, u32 ib) {
    const bool na = a != a, nb = b != b;
    if (na != nb) return na;
    if (na || a == b) return ia < ib;
    return a > b;
}

struct ROp {
    int op;
    __device__ __forceinline__ RState identity() const {
        RState r;
        r.m = neg_inf();
        r.s = 0.0f;
        r.i = 0xffffffffu;
        return r;
    }
    __device__ __forceinline__ RState leaf(float x, u32 idx) const {
        RState r;
        r.m = x;
        r.s = op == OP_LSE ? 1.0f : x;
        r.i = idx;
        return r;
    }
    __device__ __forceinline__ RState operator()(RState a, RState b) const {
        if (op == OP_MAX) return beats(b.m, b.i, a.m, a.i) ? b : a;
        if (op == OP_LSE) {
            Lse la, lb;
            la.m = a.m; la.s = a.s;
            lb.m = b.m; lb.s = b.s;
            const Lse l = lse_combine(la, lb);
            a.m = l.m;
            a.s = l.s;
            return a;
        }
        a.s += b.s;
        return a;
    }
    __device__ __forceinline__ float finish(RState r, u32 n) const {
        switch (op) {
            case OP_SUM: return r.s;
            case OP_MEAN: return r.s / (float)n;
            case OP_MAX: return r.m;
            default: return lse_value(Lse{r.m, r.s});
        }
    }
};

// This thread's state over a tile of a row (filled past tl with 0 for sums, -inf otherwise),
// by a loop per op rather than a combine per element: logsumexp takes one exp per element
// instead of two. start is the tile's first column, for argmax.
template <typename Row>
__device__ __forceinline__ RState fold_tile(const ROp& r, Row& t, u32 start, u32 tl) {
    RState f = r.identity();
    if (r.op == OP_MAX) {
#pragma unroll
        for (int k = 0; k < Row::K; ++k)
#pragma unroll
            for (int e = 0; e < Row::V; ++e) {
                const u32 j = start + Row::col(k, e);
                if (Row::valid(k, e, tl) && beats(t.v[k][e], j, f.m, f.i)) {
                    f.m = t.v[k][e];
                    f.i = j;
                }
            }
    } else if (r.op == OP_LSE) {
        const Lse l = t.fold_lse(LseOp().identity(), false);
        f.m = l.m;
        f.s = l.s;
    } else {
        f.s = t.sum();
    }
    return f;
}

// x: [rows, n] -> y[rows] (and arg[rows] when arg != null), rows laid out by `Launch::rows` in
// register tiles (common.cuh's Tile).
template <typename T, bool VEC>
__device__ void reduce_rows(const T* __restrict__ x, T* __restrict__ y, u32* __restrict__ arg, u32 rows, u32 n, int op) {
    const ROp r{op};
    const u32 row = row_index();
    const u32 len = row < rows ? n : 0;  // an inactive row reads nothing, but reduces
    const u64 base = (u64)row * n;
    const u32 tile = row_tile<T>(), tiles = (n + tile - 1) / tile;
    const float fill = op == OP_SUM || op == OP_MEAN ? 0.0f : neg_inf();
    Tile<T, VEC> t;
    RState st = r.identity();
    for (u32 i = 0; i < tiles; ++i) {
        const u32 tl = tile_len(len, i * tile, tile);
        t.load(x + base + i * tile, tl, fill);
        st = r(st, fold_tile(r, t, i * tile, tl));
    }
    st = row_reduce(st, r);
    if (len && threadIdx.x == 0) {
        y[row] = from_float<T>(r.finish(st, n));
        if (arg) arg[row] = st.i;
    }
}

#define COLS_X 32
#define COLS_Y 8

// x: [outer, n, inner]; grid (tiles * outer, chunks), tiles = ceil(inner / 32); block (32, 8).
// With one chunk writes y[outer, inner] (and arg); else partial[chunk][outer * inner].
template <typename T>
__device__ void reduce_cols(const T* __restrict__ x, T* __restrict__ y, u32* __restrict__ arg,
                            RState* __restrict__ partial, u32 outer, u32 n, u32 inner, u32 chunk, int op) {
    const ROp r{op};
    const u32 tiles = (inner + COLS_X - 1) / COLS_X;
    const u32 o = blockIdx.x / tiles;
    const u32 c = (blockIdx.x % tiles) * COLS_X + threadIdx.x;
    const u32 j0 = blockIdx.y * chunk;
    const u32 j1 = min(n, j0 + chunk);
    RState st = r.identity();
    if (c < inner)
        for (u32 j = j0 + threadIdx.y; j < j1; j += COLS_Y)
            st = r(st, r.leaf(to_float(x[((u64)o * n + j) * inner + c]), j));
    __shared__ RState sh[COLS_Y][COLS_X];
    sh[threadIdx.y][threadIdx.x] = st;
    __syncthreads();
    if (threadIdx.y != 0 || c >= inner) return;
    for (int k = 1; k < COLS_Y; ++k) st = r(st, sh[k][threadIdx.x]);
    const u64 out = (u64)o * inner + c;
    if (gridDim.y == 1) {
        y[out] = from_float<T>(r.finish(st, n));
        if (arg) arg[out] = st.i;
    } else {
        partial[(u64)blockIdx.y * outer * inner + out] = st;
    }
}

// Combines `chunks` partial states per output, in chunk order.
template <typename T>
__device__ void reduce_finish(const RState* __restrict__ partial, T* __restrict__ y, u32* __restrict__ arg,
                              u64 outputs, u32 chunks, u32 n, int op) {
    const ROp r{op};
    for (u64 i = global_thread(); i < outputs; i += grid_threads()) {
        RState st = partial[i];
        for (u32 k = 1; k < chunks; ++k) st = r(st, partial[(u64)k * outputs + i]);
        y[i] = from_float<T>(r.finish(st, n));
        if (arg) arg[i] = st.i;
    }
}

// Inclusive cumsum of rows of n (inner == 1): one block per row walks it in tiles of
// blockDim.x, a warp scan plus a scan of warp totals per tile, carrying the running total.
template <typename T>
__device__ void cumsum_rows(const T* __restrict__ x, T* __restrict__ y, u32 n) {
    __shared__ float warp_total[32];
    const u64 base = (u64)blockIdx.x * n;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float carry = 0.0f;
    for (u32 j0 = 0; j0 < n; j0 += blockDim.x) {
        const u32 j = j0 + threadIdx.x;
        float v = j < n ? to_float(x[base + j]) : 0.0f;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float t = __shfl_up_sync(FULL_MASK, v, o);
            if ((int)lane >= o) v += t;
        }
        if (lane == 31) warp_total[warp] = v;
        __syncthreads();
        if (warp == 0) {
            float t = lane < warps ? warp_total[lane] : 0.0f;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float u = __shfl_up_sync(FULL_MASK, t, o);
                if ((int)lane >= o) t += u;
            }
            warp_total[lane] = t;
        }
        __syncthreads();
        const float before = warp > 0 ? warp_total[warp - 1] : 0.0f;
        if (j < n) y[base + j] = from_float<T>(carry + before + v);
        carry += warp_total[warps - 1];
        __syncthreads();  // warp_total is rewritten by the next tile
    }
}

// Inclusive cumsum along the middle axis with inner > 1: a thread per (outer, inner) column,
// walking n; neighbouring threads read neighbouring elements.
template <typename T>
__device__ void cumsum_cols(const T* __restrict__ x, T* __restrict__ y, u32 outer, u32 n, u32 inner) {
    for (u64 i = global_thread(); i < (u64)outer * inner; i += grid_threads()) {
        const u64 o = i / inner, c = i % inner;
        float acc = 0.0f;
        for (u32 j = 0; j < n; ++j) {
            const u64 at = (o * n + j) * inner + c;
            acc += to_float(x[at]);
            y[at] = from_float<T>(acc);
        }
    }
}

#define INSTANTIATE_ROWS(NAME, T, VEC)                                                                  \
    extern "C" __global__ void __launch_bounds__(ROW_BLOCK)                                            \
        reduce_rows_##NAME(const T* x, T* y, u32* arg, u32 rows, u32 n, int op) {                      \
        reduce_rows<T, VEC>(x, y, arg, rows, n, op);                                                   \
    }
#define INSTANTIATE(NAME, T)                                                                            \
    INSTANTIATE_ROWS(NAME, T, true)                                                                     \
    INSTANTIATE_ROWS(NAME##_scalar, T, false)                                                           \
    extern "C" __global__ void reduce_cols_##NAME(const T* x, T* y, u32* arg, RState* partial,          \
                                                  u32 outer, u32 n, u32 inner, u32 chunk, int op) {     \
        reduce_cols<T>(x, y, arg, partial, outer, n, inner, chunk, op);                                 \
    }                                                                                                   \
    extern "C" __global__ void reduce_finish_##NAME(const RState* partial, T* y, u32* arg, u64 outputs, \
                                                    u32 chunks, u32 n, int op) {                        \
        reduce_finish<T>(partial, y, arg, outputs, chunks, n, op);                                      \
    }                                                                                                   \
    extern "C" __global__ void cumsum_rows_##NAME(const T* x, T* y, u32 n) { cumsum_rows<T>(x, y, n); } \
    extern "C" __global__ void cumsum_cols_##NAME(const T* x, T* y, u32 outer, u32 n, u32 inner) {      \
        cumsum_cols<T>(x, y, outer, n, inner);                                                          \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
