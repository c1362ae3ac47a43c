// chunk.cuh: what the chunkwise recurrent kernels (mlstm.cu, gated_delta.cu in nn/src/mixers/)
// share, prepended to each of them (after mma.cuh) by its Rust wrapper (NVRTC gets common.cuh as
// its only header).
//
// - Matrix views: strided f32 ones over shared or global memory (Mat), and row-major tiles in
//   shared memory of f32 or bf16 (STile), each with a transposed view, so one product routine
//   serves every transposition the chunk algebra needs without copying tiles.
// - block_mm: a product of two views computed by the whole block, handing each output element to
//   a functor exactly once (store, scale, accumulate or write out, chosen by the caller), and
//   block_mm_sums, whose functor also returns the element's shares of row and column sums. With
//   TC, bf16 tensor cores (mma.sync m16n8k16, f32 accumulation): bf16 tiles feed them through
//   ldmatrix, f32 views are rounded to bf16 as fragments are loaded; without, f32 FMAs, so f32
//   data keeps f32 products.
// - Row dots, scans, block sums, the stable log-sigmoid and the per-(batch, head) row addressing.
#include "common.cuh"

// Threads of a chunkwise block (CHUNK_THREADS in src/kernels/chunk.rs): 16 warps, as many as
// the registers allow at this kernel size; a block holds a whole SM (registers and shared
// memory), so its warps are all there is to hide latencies with. REC_KU: the k-steps of a
// product whose fragments a thread loads at once (block_mm), as many as fit in the registers
// left at 128 a thread.
#define REC_THREADS 512
#define REC_KU 2

// A read-only f32 matrix: element (r, c) at p[r * rs + c * cs].
struct Mat {
    const float* p;
    int rs;
    int cs;
    __device__ __forceinline__ float at(int r, int c) const { return p[r * rs + c * cs]; }
    __device__ __forceinline__ Mat t() const { return Mat{p, cs, rs}; }
};

// The block's threads and warps (every kernel here runs 1-D blocks of whole warps).
__device__ __forceinline__ int nthreads() { return blockDim.x; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int nwarps() { return blockDim.x >> 5; }

// A tile in shared memory: element (r, c) at p[r * ld + c], or at p[c * ld + r] in its
// transposed view (TR). E is float, or bf16 for bf16 data, whose products run on tensor cores:
// a bf16 tile's 16-byte row pieces reach them through ldmatrix, so p is 16-byte aligned and ld a
// multiple of 8 (tile_ld pads each row by 16 bytes, which puts eight consecutive rows' pieces in
// distinct banks at the widths used here).
template <typename E, bool TR = false>
struct STile {
    E* p;
    int ld;
    __device__ __forceinline__ E& ref(int r, int c) const { return TR ? p[c * ld + r] : p[r * ld + c]; }
    __device__ __forceinline__ float at(int r, int c) const { return to_float(ref(r, c)); }
    __device__ __forceinline__ void set(int r, int c, float x) const { ref(r, c) = from_float<E>(x); }
    __device__ __forceinline__ STile<E, !TR> t() const { return STile<E, !TR>{p, ld}; }
};

// Shared memory handed out front to back: take(p, n) returns p and moves it past n elements,
// take_tile(p, rows, ld) a [rows, ld] tile there.
template <typename E> __device__ __forceinline__ E* take(E*& p, int n) {
    E* at = p;
    p += n;
    return at;
}
template <typename E> __device__ __forceinline__ STile<E> take_tile(E*& p, int rows, int ld) {
    return STile<E>{take(p, rows * ld), ld};
}

// The row length of a tile of n columns of E: n and 16 bytes more.
template <typename E> __host__ __device__ __forceinline__ int tile_ld(int n) { return n + 16 / (int)sizeof(E); }

// Elements (r, c) and (r, c + 1) of a view as a bf16 pair, the first in the low half.
template <typename V> __device__ __forceinline__ u32 pair_of(const V& m, int r, int c) {
    return bf16x2_bits(m.at(r, c), m.at(r, c + 1));
}
// From a Mat, one 8-byte load where the two are adjacent (c is even in the fragments, and the
// tensor-core tiles' strides and offsets are even, so the pair is aligned), else two.
__device__ __forceinline__ u32 pair_of(const Mat& m, int r, int c) {
    const float* p = m.p + r * m.rs + c * m.cs;
    if (m.cs == 1) {
        const float2 x = *reinterpret_cast<const float2*>(p);
        return bf16x2_bits(x.x, x.y);
    }
    return bf16x2_bits(p[0], p[m.cs]);
}

// mma.m16n8k16's A fragment: rows r0..r0+16 and columns k0..k0+16 of a view; from a bf16 tile one
// ldmatrix (matrix i: rows + (i & 1) * 8, columns + (i >> 1) * 8).
template <typename V> __device__ __forceinline__ void frag_a(const V& a, int r0, int k0, u32 (&f)[4]) {
    const int g = lane_id() >> 2, q = (lane_id() & 3) * 2;
    f[0] = pair_of(a, r0 + g, k0 + q);
    f[1] = pair_of(a, r0 + g + 8, k0 + q);
    f[2] = pair_of(a, r0 + g, k0 + q + 8);
    f[3] = pair_of(a, r0 + g + 8, k0 + q + 8);
}
template <bool TR> __device__ __forceinline__ void frag_a(const STile<bf16, TR>& a, int r0, int k0, u32 (&f)[4]) {
    const int i = lane_id() >> 3, rr = lane_id() & 7;
    if constexpr (TR)
        ldsm_x4<true>(f, a.p + (k0 + (i >> 1) * 8 + rr) * a.ld + r0 + (i & 1) * 8);
    else
        ldsm_x4<false>(f, a.p + (r0 + (i & 1) * 8 + rr) * a.ld + k0 + (i >> 1) * 8);
}

// The B fragments of rows k0..k0+16 of a view, for columns c0..c0+8 (f[0]) and c0+8..c0+16
// (f[1]); from a bf16 tile one ldmatrix (matrix i: columns + (i >> 1) * 8, rows + (i & 1) * 8).
template <typename V> __device__ __forceinline__ void frag_b(const V& b, int k0, int c0, u32 (&f)[2][2]) {
    const int g = lane_id() >> 2, q = (lane_id() & 3) * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        f[h][0] = pair_of(b.t(), c0 + h * 8 + g, k0 + q);
        f[h][1] = pair_of(b.t(), c0 + h * 8 + g, k0 + q + 8);
    }
}
template <bool TR> __device__ __forceinline__ void frag_b(const STile<bf16, TR>& b, int k0, int c0, u32 (&f)[2][2]) {
    const int i = lane_id() >> 3, rr = lane_id() & 7;
    u32 x[4];
    if constexpr (TR)
        ldsm_x4<false>(x, b.p + (c0 + (i >> 1) * 8 + rr) * b.ld + k0 + (i & 1) * 8);
    else
        ldsm_x4<true>(x, b.p + (k0 + (i & 1) * 8 + rr) * b.ld + c0 + (i >> 1) * 8);
    f[0][0] = x[0];
    f[0][1] = x[1];
    f[1][0] = x[2];
    f[1][1] = x[3];
}

// Two views side by side along a product's inner dimension, split at k1 (a multiple of 16): as
// an A operand [x | y] (columns, ROWS false), as a B operand [x ; y] (rows, ROWS true), so that
// x1 y1 + x2 y2 is one product, one pass over its output. Each tensor-core k-step lies within
// one of the two, which hands out its fragments.
template <typename X, typename Y, bool ROWS>
struct Cat {
    X x;
    Y y;
    int k1;
    __device__ __forceinline__ float at(int r, int c) const {
        if constexpr (ROWS)
            return r < k1 ? x.at(r, c) : y.at(r - k1, c);
        else
            return c < k1 ? x.at(r, c) : y.at(r, c - k1);
    }
};
template <typename X, typename Y> __device__ __forceinline__ Cat<X, Y, false> cat_cols(X x, Y y, int k1) {
    return Cat<X, Y, false>{x, y, k1};
}
template <typename X, typename Y> __device__ __forceinline__ Cat<X, Y, true> cat_rows(X x, Y y, int k1) {
    return Cat<X, Y, true>{x, y, k1};
}
template <typename X, typename Y>
__device__ __forceinline__ void frag_a(const Cat<X, Y, false>& a, int r0, int k0, u32 (&f)[4]) {
    if (k0 < a.k1)
        frag_a(a.x, r0, k0, f);
    else
        frag_a(a.y, r0, k0 - a.k1, f);
}
template <typename X, typename Y>
__device__ __forceinline__ void frag_b(const Cat<X, Y, true>& b, int k0, int c0, u32 (&f)[2][2]) {
    if (k0 < b.k1)
        frag_b(b.x, k0, c0, f);
    else
        frag_b(b.y, k0 - b.k1, c0, f);
}

// No prior values (see block_mm_core's `prior`), for products that start from nothing.
struct NoPrior {
    __device__ __forceinline__ float at(int, int) const { return 0.0f; }
};

// out(r, c, value, prior(r, c)) for every element of the M x N product a · b (inner size K);
// out returns a pair (x, y) of that element's shares of a sum by rows and a sum by columns, added
// to rows[r] and cols[c] (shared memory; either may be null where a caller has no such sum).
// `prior` (a view, or NoPrior) is read before any product and used after the last, so that a
// global-memory read of it (what a product accumulates into) waits under the products instead of
// after them. A warp loads the fragments of REC_KU k-steps before multiplying any, so that their
// loads overlap instead of each waiting out the previous product. With TC, M, N and K must be
// multiples of 16 (callers zero-pad their tiles). Every thread of the block must call it; it does
// not synchronize, so the caller does before the operands are read and after the results are
// written.
template <bool TC, typename A, typename B, typename Prior, typename Out>
__device__ __forceinline__ void block_mm_core(A a, B b, int M, int K, int N, Prior prior, Out out, float* rows,
                                              float* cols) {
    if constexpr (TC) {
        // Warp tiles of 16 x 16 (two mma n-halves sharing the A fragment).
        const int g = lane_id() >> 2, q = (lane_id() & 3) * 2;
        const int tn = N / 16, tiles = (M / 16) * tn;
        for (int tile = warp_id(); tile < tiles; tile += nwarps()) {
            const int r0 = (tile / tn) * 16, c0 = (tile % tn) * 16;
            float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}, old[2][4];
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < 4; ++i) old[h][i] = prior.at(r0 + g + (i >> 1) * 8, c0 + h * 8 + q + (i & 1));
            constexpr int KU = REC_KU;
            for (int kb = 0; kb < K; kb += 16 * KU) {
                u32 af[KU][4], bf[KU][2][2];
#pragma unroll
                for (int u = 0; u < KU; ++u) {
                    const int k0 = kb + 16 * u;
                    if (k0 < K) {
                        frag_a(a, r0, k0, af[u]);
                        frag_b(b, k0, c0, bf[u]);
                    }
                }
#pragma unroll
                for (int u = 0; u < KU; ++u)
                    if (kb + 16 * u < K) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) mma(acc[h], af[u], bf[u][h][0], bf[u][h][1]);
                    }
            }
            // The sums are reduced across the lanes holding the same rows (a quad) or columns
            // (lanes q apart) before one atomic each, so lanes do not contend for an address.
            float rs[2] = {0.f, 0.f}, cs[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = c0 + h * 8 + q;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 v = out(r0 + g + (i >> 1) * 8, c + (i & 1), acc[h][i], old[h][i]);
                    rs[i >> 1] += v.x;
                    cs[h][i & 1] += v.y;
                }
            }
            if (rows) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float x = rs[i] + shfl_xor(rs[i], 1);
                    const float y = x + shfl_xor(x, 2);
                    if (q == 0) atomicAdd(&rows[r0 + g + i * 8], y);
                }
            }
            if (cols) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        float x = cs[h][i];
                        x += shfl_xor(x, 4);
                        x += shfl_xor(x, 8);
                        x += shfl_xor(x, 16);
                        if (g == 0) atomicAdd(&cols[c0 + h * 8 + q + i], x);
                    }
            }
        }
    } else {
        for (int idx = threadIdx.x; idx < M * N; idx += nthreads()) {
            const int r = idx / N, c = idx % N;
            const float old = prior.at(r, c);
            float s = 0.0f;
            for (int k = 0; k < K; ++k) s = fmaf(a.at(r, k), b.at(k, c), s);
            const float2 v = out(r, c, s, old);
            if (rows && v.x != 0.0f) atomicAdd(&rows[r], v.x);
            if (cols && v.y != 0.0f) atomicAdd(&cols[c], v.y);
        }
    }
}

// block_mm_core from zero: out(r, c, value) for every element of a · b, with sums.
template <bool TC, typename A, typename B, typename Out>
__device__ __forceinline__ void block_mm_sums(A a, B b, int M, int K, int N, Out out, float* rows, float* cols) {
    block_mm_core<TC>(
        a, b, M, K, N, NoPrior{}, [&](int r, int c, float x, float) { return out(r, c, x); }, rows, cols);
}

// out(r, c, value, prior(r, c)) for every element of a · b, without sums.
template <bool TC, typename A, typename B, typename Prior, typename Out>
__device__ __forceinline__ void block_mm_onto(A a, B b, int M, int K, int N, Prior prior, Out out) {
    block_mm_core<TC>(
        a, b, M, K, N, prior,
        [&](int r, int c, float x, float old) {
            out(r, c, x, old);
            return make_float2(0.0f, 0.0f);
        },
        nullptr, nullptr);
}

// out(r, c, value) for every element of a · b.
template <bool TC, typename A, typename B, typename Out>
__device__ __forceinline__ void block_mm(A a, B b, int M, int K, int N, Out out) {
    block_mm_onto<TC>(a, b, M, K, N, NoPrior{}, [&](int r, int c, float x, float) { out(r, c, x); });
}

// A view whose A fragments come out negated (each bf16's sign flipped), so that acc -= a b runs
// as a product into the same accumulator.
template <typename V>
struct Neg {
    V v;
};
template <typename V> __device__ __forceinline__ Neg<V> neg(V v) { return Neg<V>{v}; }
template <typename V> __device__ __forceinline__ void frag_a(const Neg<V>& a, int r0, int k0, u32 (&f)[4]) {
    frag_a(a.v, r0, k0, f);
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] ^= 0x80008000u;
}

// One warp's share of a product on tensor cores, kept in registers: acc[m][n] += the 16 x 8 block
// of a · b at rows r0 + 16 m, columns c0 + 8 n, over k0 .. k0 + 16 KT (bf16 views: STile, Cat,
// Neg). A k-step's A fragments serve all NT blocks, each pair of B fragments all MT. The block
// (m, n) holds, in lane (g, q) = (lane / 4, lane % 4), element i at row r0 + 16 m + g + 8 (i / 2),
// column c0 + 8 n + 2 q + i % 2 (mma's C layout; each_pair walks it).
template <int MT, int NT, int KT, typename A, typename B>
__device__ __forceinline__ void warp_mm(float (&acc)[MT][NT][4], const A& a, int r0, const B& b, int c0,
                                        int k0 = 0) {
    static_assert(NT % 2 == 0, "B fragments come in pairs of 8-column blocks");
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        u32 af[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) frag_a(a, r0 + 16 * m, k0 + 16 * kk, af[m]);
#pragma unroll
        for (int nn = 0; nn < NT / 2; ++nn) {
            u32 bf[2][2];
            frag_b(b, k0 + 16 * kk, c0 + 16 * nn, bf);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                mma(acc[m][2 * nn], af[m], bf[0][0], bf[0][1]);
                mma(acc[m][2 * nn + 1], af[m], bf[1][0], bf[1][1]);
            }
        }
    }
}

// f(row, col, x0, x1) for each pair of adjacent elements (row, col), (row, col + 1) a lane holds
// of a warp_mm accumulator at (r0, c0); x0 and x1 are references into it.
template <int MT, int NT, typename F>
__device__ __forceinline__ void each_pair(float (&acc)[MT][NT][4], int r0, int c0, F f) {
    const int g = lane_id() >> 2, q = (lane_id() & 3) * 2;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                f(r0 + 16 * m + g + 8 * h, c0 + 8 * n + q, acc[m][n][2 * h], acc[m][n][2 * h + 1]);
}

// Elements (r, c) and (r, c + 1) of a bf16 tile (c even) set in one 4-byte store.
__device__ __forceinline__ void set_pair(const STile<bf16>& t, int r, int c, float x0, float x1) {
    *reinterpret_cast<u32*>(t.p + r * t.ld + c) = bf16x2_bits(x0, x1);
}

// Elements (r, c) and (r, c + 1) of a bf16 tile (c even) as f32, in one 4-byte load.
__device__ __forceinline__ float2 get_pair(const STile<bf16>& t, int r, int c) {
    const u32 w = *reinterpret_cast<const u32*>(t.p + r * t.ld + c);
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// rs[m][h], a lane's share of the sum of row r0 + 16 m + g + 8 h (each_pair's rows), summed over
// the quad that holds the row and added to dst[row] by one lane of it: an atomic, as warps that
// hold other columns of the row add to the same entry.
template <int MT>
__device__ __forceinline__ void add_row_sums(float (&rs)[MT][2], int r0, float* dst) {
    const int g = lane_id() >> 2;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float x = rs[m][h];
            x += shfl_xor(x, 1);
            x += shfl_xor(x, 2);
            if ((lane_id() & 3) == 0) atomicAdd(&dst[r0 + 16 * m + g + 8 * h], x);
        }
}

// cs[n][i], a lane's share of the sum of column c0 + 8 n + 2 q + i, summed over the eight lanes
// that hold the column (one per g) and added to dst[column] by one of them.
template <int NT>
__device__ __forceinline__ void add_col_sums(float (&cs)[NT][2], int c0, float* dst) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float x = cs[n][i];
            x += shfl_xor(x, 4);
            x += shfl_xor(x, 8);
            x += shfl_xor(x, 16);
            if (lane_id() < 4) atomicAdd(&dst[c0 + 8 * n + 2 * lane_id() + i], x);
        }
}

// rows x COLS bf16 (row r at src + r * rs, 16-byte aligned) into a shared tile by cp.async, 16
// bytes a copy; rows from `valid` on become zeros and are not read. The caller commits and waits.
template <int COLS>
__device__ __forceinline__ void load_rows_async(const STile<bf16>& dst, const bf16* src, u64 rs, int rows,
                                                int valid) {
    constexpr int CH = COLS / 8;
    for (int i = threadIdx.x; i < rows * CH; i += nthreads()) {
        const int r = i / CH, c = (i % CH) * 8;
        const bool ok = r < valid;
        cp_async16(dst.p + r * dst.ld + c, src + (u64)(ok ? r : 0) * rs + c, ok);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
    return v;
}

// Inclusive prefix sums of x over the lanes of a warp.
__device__ __forceinline__ float warp_scan(float x) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane_id() >= o) x += y;
    }
    return x;
}

// v[j] becomes v[0] + ... + v[j] (forward) or v[j] + ... + v[n - 1] (reverse), for j < n, by one
// warp (all of its lanes call it) 32 entries at a time; synchronizes the warp.
__device__ __forceinline__ void warp_cumsum(float* v, int n, bool reverse) {
    float carry = 0.0f;
    for (int base = 0; base < n; base += 32) {
        const int i = base + lane_id(), j = reverse ? n - 1 - i : i;
        const float x = warp_scan(i < n ? v[j] : 0.0f) + carry;
        if (i < n) v[j] = x;
        carry = __shfl_sync(FULL_MASK, x, 31);
    }
    __syncwarp();
}

// The sum of every thread's v, returned to all; `scratch` holds 32 floats. Synchronizes.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    __syncthreads();
    if (lane_id() == 0) scratch[warp_id()] = v;
    __syncthreads();
    float r = lane_id() < nwarps() ? scratch[lane_id()] : 0.0f;
    return warp_sum(r);
}

// sum_i x[i] * y[i] over n elements, by the lanes of one warp, returned to all of them.
template <typename X, typename Y> __device__ __forceinline__ float warp_dot(const X* x, const Y* y, int n) {
    float s = 0.0f;
    for (int i = lane_id(); i < n; i += 32) s = fmaf(to_float(x[i]), to_float(y[i]), s);
    return warp_sum(s);
}

// log(sigmoid(x)) = -softplus(-x), without overflow at either end.
__device__ __forceinline__ float log_sigmoid(float x) { return fminf(x, 0.0f) - log1pf(expf(-fabsf(x))); }

// Where row t of head (b, h) of a [B, T, H, d] buffer starts (d = 1 for per-head gates).
struct Heads {
    int t;
    int h;
    __device__ __forceinline__ u64 at(int b, int hh, int ti, int d) const { return (((u64)b * t + ti) * h + hh) * d; }
};

// Columns c0..c0+w of rows t0..t0+len of head (b, h) of a [B, T, H, D] buffer into a [rows, ld]
// tile of E (f32 or bf16), times `scale`; rows len..rows (the zero padding the tensor-core products need) are
// zeroed. Where the columns are whole 16-byte vectors, each thread issues LOAD_BATCH vector
// loads before storing any of them: a tile then costs about one memory latency, not one per
// element a thread loads.
#define LOAD_BATCH 4
template <typename T, typename E>
__device__ __forceinline__ void load_cols(E* dst, int ld, const T* src, Heads hd, int b, int hh, int t0,
                                          int len, int rows, int D, int c0, int w, float scale) {
    constexpr int V = 16 / sizeof(T);
    if (w % V == 0 && D % V == 0 && c0 % V == 0) {
        const int per = w / V, n = rows * per;
        for (int base = threadIdx.x; base < n; base += LOAD_BATCH * nthreads()) {
            float x[LOAD_BATCH][V];
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u) {
                const int idx = base + u * nthreads(), r = idx / per, c = (idx % per) * V;
                if (idx < n && r < len) {
                    load_vec(src + hd.at(b, hh, t0 + r, D) + c0 + c, x[u]);
                } else {
#pragma unroll
                    for (int i = 0; i < V; ++i) x[u][i] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u) {
                const int idx = base + u * nthreads(), r = idx / per, c = (idx % per) * V;
                if (idx < n) {
#pragma unroll
                    for (int i = 0; i < V; ++i) dst[r * ld + c + i] = from_float<E>(x[u][i] * scale);
                }
            }
        }
    } else {
        for (int idx = threadIdx.x; idx < rows * w; idx += nthreads()) {
            const int r = idx / w, c = idx % w;
            dst[r * ld + c] = from_float<E>(r < len ? to_float(src[hd.at(b, hh, t0 + r, D) + c0 + c]) * scale : 0.0f);
        }
    }
}

// Whole rows (d columns) of a [B, T, H, d] buffer; see load_cols.
template <typename T, typename E>
__device__ __forceinline__ void load_rows(E* dst, int ld, const T* src, Heads hd, int b, int hh, int t0,
                                          int len, int rows, int d, float scale) {
    load_cols(dst, ld, src, hd, b, hh, t0, len, rows, d, 0, d, scale);
}

// load_cols without its scale, by cp.async where the tile is bf16 (16 bytes a copy; rows from
// len on zero-filled and not read; D, c0 and w multiples of 8): the caller commits and waits, so
// that several tiles' loads, and any loads issued before the wait, wait out one latency together.
// Other types load at once, as load_cols.
template <typename T, typename E>
__device__ __forceinline__ void stage_cols(E* dst, int ld, const T* src, Heads hd, int b, int hh, int t0, int len,
                                           int rows, int D, int c0, int w) {
    load_cols(dst, ld, src, hd, b, hh, t0, len, rows, D, c0, w, 1.0f);
}
__device__ __forceinline__ void stage_cols(bf16* dst, int ld, const bf16* src, Heads hd, int b, int hh, int t0,
                                           int len, int rows, int D, int c0, int w) {
    const int per = w / 8;
    for (int i = threadIdx.x; i < rows * per; i += nthreads()) {
        const int r = i / per, c = (i % per) * 8;
        const bool ok = r < len;
        cp_async16(dst + r * ld + c, src + hd.at(b, hh, t0 + (ok ? r : 0), D) + c0 + c, ok);
    }
}

__device__ __forceinline__ int round16(int x) { return (x + 15) & ~15; }

// Sizes of a chunkwise call; matches `RecArgs` in src/kernels/chunk.rs. The value dimension is
// split into nv tiles of bv columns (the last one narrower where bv does not divide Dv), one
// block each (blockIdx.y): the state's columns evolve independently in both recurrences.
struct RecDims {
    int b;
    int t;
    int h;
    int dk;
    int dv;
    int chunk;
    int bv;
    int nv;
    float eps;
    float scale;
};

// The block's value tile: columns e0..e0+w of Dv.
struct VTile {
    int e0;
    int w;
};
__device__ __forceinline__ VTile value_tile(const RecDims& d) {
    const int e0 = blockIdx.y * d.bv;
    return VTile{e0, min(d.bv, d.dv - e0)};
}

// The value tiles of two [Dk, Dv] f32 states in global memory (x, y at the tile's first column)
// into [Dk, w] tiles, 16-byte loads where the columns allow, LOAD_BATCH of each issued before any
// is stored (the stores to shared memory could alias the loads for all the compiler knows, so it
// would not hoist them itself). Returns this thread's share of the sum of x ⊙ y over the tile.
// xs may be a null tile (p null): x is then read for the sum only. Does not synchronize.
template <typename E>
__device__ float stage_states(STile<E> xs, const float* x, STile<E> ys, const float* y, const RecDims& d, VTile vt) {
    float s = 0.0f;
    if (vt.w % 4 == 0 && d.dv % 4 == 0 && vt.e0 % 4 == 0) {
        const int per = vt.w / 4, n = d.dk * per;
        for (int base = threadIdx.x; base < n; base += LOAD_BATCH * nthreads()) {
            float4 a[LOAD_BATCH], c[LOAD_BATCH];
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u) {
                const int idx = base + u * nthreads(), i = idx / per, e = (idx % per) * 4;
                const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
                a[u] = idx < n ? *reinterpret_cast<const float4*>(x + i * d.dv + e) : zero;
                c[u] = idx < n ? *reinterpret_cast<const float4*>(y + i * d.dv + e) : zero;
            }
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u) {
                const int idx = base + u * nthreads(), i = idx / per, e = (idx % per) * 4;
                if (idx >= n) continue;
                s += a[u].x * c[u].x + a[u].y * c[u].y + a[u].z * c[u].z + a[u].w * c[u].w;
                const float av[4] = {a[u].x, a[u].y, a[u].z, a[u].w}, cv[4] = {c[u].x, c[u].y, c[u].z, c[u].w};
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    if (xs.p) xs.set(i, e + k, av[k]);
                    ys.set(i, e + k, cv[k]);
                }
            }
        }
    } else {
        for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
            const int i = idx / vt.w, e = idx % vt.w, at = i * d.dv + e;
            if (xs.p) xs.set(i, e, x[at]);
            ys.set(i, e, y[at]);
            s = fmaf(x[at], y[at], s);
        }
    }
    return s;
}

// f(i, x[i]) for every i < n, spread over the block, for x in global memory (f32 scratch that
// earlier phases wrote): each thread loads 2 LOAD_BATCH of its elements before calling f on any,
// so the loads wait out one latency together instead of one each behind f's stores.
template <typename F>
__device__ __forceinline__ void for_each_loaded(const float* x, int n, F f) {
    constexpr int U = 2 * LOAD_BATCH;
    for (int base = threadIdx.x; base < n; base += U * nthreads()) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * nthreads();
            v[u] = i < n ? x[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * nthreads();
            if (i < n) f(i, v[u]);
        }
    }
}

// Where a block writes a gradient that sums over the value tiles (every term of such a gradient
// is linear in one tile's columns, so each tile computes its own share): straight to the output
// with one tile, else to the tile's row of an f32 buffer [nv, stride] that rec_reduce sums.
template <typename T>
struct Sink {
    T* out;
    float* part;
    u64 stride;
    bool split;
    __device__ __forceinline__ void put(u64 i, float x) const {
        if (split)
            part[blockIdx.y * stride + i] = x;
        else
            out[i] = from_float<T>(x);
    }
};

// out[i] = sum over tiles v of part[v * stride + off + i], for i < n.
template <typename T>
__device__ __forceinline__ void reduce_tiles(const float* __restrict__ part, u64 off, u64 stride, int nv, u64 n,
                                             T* __restrict__ out) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        float s = 0.0f;
        for (int v = 0; v < nv; ++v) s += part[v * stride + off + i];
        out[i] = from_float<T>(s);
    }
}

extern "C" __global__ void rec_reduce_f32(const float* part, u64 off, u64 stride, int nv, u64 n, float* out) {
    reduce_tiles(part, off, stride, nv, n, out);
}
extern "C" __global__ void rec_reduce_bf16(const float* part, u64 off, u64 stride, int nv, u64 n, bf16* out) {
    reduce_tiles(part, off, stride, nv, n, out);
}
