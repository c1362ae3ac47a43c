// common.cuh: what every kernel file shares. Handed to NVRTC as an in-memory header.
//
// - Integer typedefs (NVRTC has no <cstdint> without an include path).
// - Our own bf16 storage type. Widening is a shift; narrowing is the sm_80+ conversion
//   instruction through inline PTX. Owning the type keeps the kernels free of <cuda_bf16.h>, so
//   compiling needs no CUDA headers where the program runs.
// - 16-byte vector loads/stores, the grid-stride maps of the elementwise kernels, the
//   compile-time dispatch of a run-time op number, and the sigmoid (unary ops, SwiGLU).
// - Row tiles for the kernels over the last axis (softmax, norms, cross-entropy, row
//   reductions): each thread holds ROW_VECS 16-byte vectors of a row in registers (elements
//   one by one where the row length is not a whole number of vectors).
// - Warp and row reductions, and the online log-sum-exp state shared by softmax, logsumexp and
//   cross-entropy.
#pragma once

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define FULL_MASK 0xffffffffu

struct __align__(2) bf16 {
    u16 bits;
};

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }
__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __uint_as_float(((u32)x.bits) << 16); }

// Round to nearest even: bit for bit what Rust's `half::bf16::from_f32` gives for every non-NaN
// input, subnormals and overflow to infinity included. A NaN becomes the canonical NaN 0x7fff
// (half keeps the payload; both are quiet NaNs).
__device__ __forceinline__ u16 bf16_bits(float x) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
// Two conversions in one instruction, lo in bits 0..15. The instruction puts its first source
// in the upper half, hence the operand order.
__device__ __forceinline__ u32 bf16x2_bits(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <typename T> struct Convert;
template <> struct Convert<float> {
    static __device__ __forceinline__ float from(float x) { return x; }
};
template <> struct Convert<bf16> {
    static __device__ __forceinline__ bf16 from(float x) {
        bf16 r;
        r.bits = bf16_bits(x);
        return r;
    }
};
template <typename T> __device__ __forceinline__ T from_float(float x) { return Convert<T>::from(x); }

// The elements of a 16-byte vector of T (4 f32 or 8 bf16) as f32, from v[at] on.
template <int V>
__device__ __forceinline__ void unpack_vec(const float*, uint4 r, float (&v)[V], int at) {
    v[at] = __uint_as_float(r.x);
    v[at + 1] = __uint_as_float(r.y);
    v[at + 2] = __uint_as_float(r.z);
    v[at + 3] = __uint_as_float(r.w);
}
template <int V>
__device__ __forceinline__ void unpack_vec(const bf16*, uint4 r, float (&v)[V], int at) {
    const u32 w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        v[at + 2 * j] = __uint_as_float(w[j] << 16);
        v[at + 2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
}

// V consecutive elements at p, in 16-byte accesses: p must be 16-byte aligned and V a whole
// number of 16-byte vectors.
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[V]) {
    constexpr int per = 16 / sizeof(T);
    static_assert(V % per == 0, "whole 16-byte vectors");
#pragma unroll
    for (int i = 0; i < V / per; ++i) unpack_vec(p, reinterpret_cast<const uint4*>(p)[i], v, per * i);
}
template <int V>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[V]) {
    static_assert(V % 4 == 0, "whole float4s");
#pragma unroll
    for (int i = 0; i < V / 4; ++i)
        reinterpret_cast<float4*>(p)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}
template <int V>
__device__ __forceinline__ void store_vec(bf16* p, const float (&v)[V]) {
    static_assert(V % 8 == 0, "whole 16-byte vectors");
#pragma unroll
    for (int i = 0; i < V / 8; ++i)
        reinterpret_cast<uint4*>(p)[i] =
            make_uint4(bf16x2_bits(v[8 * i], v[8 * i + 1]), bf16x2_bits(v[8 * i + 2], v[8 * i + 3]),
                       bf16x2_bits(v[8 * i + 4], v[8 * i + 5]), bf16x2_bits(v[8 * i + 6], v[8 * i + 7]));
}

// The approximate division (2 ulp) instead of IEEE division's multi-instruction sequence: the
// denominator is >= 1, and an infinite one (x < -88) still gives 0.
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + expf(-x)); }

// Grid-stride index helpers.
__device__ __forceinline__ u64 global_thread() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }

// Elements per grid-stride step of the elementwise kernels: one 16-byte access of bf16 (two of
// f32), so that each thread keeps 16 bytes or more of every operand in flight. Matches
// ELEMENTWISE_VEC in src/kernels/mod.rs.
#define EW_VEC 8

// y[i] = f(x[i]) for i < n: whole groups of EW_VEC with vector accesses (buffers are pool
// blocks, 512-byte aligned), then the tail one element a thread.
template <typename S, typename D, typename F>
__device__ __forceinline__ void map1(const S* __restrict__ x, D* __restrict__ y, u64 n, F f) {
    const u64 groups = n / EW_VEC;
    for (u64 i = global_thread(); i < groups; i += grid_threads()) {
        float v[EW_VEC];
        load_vec(x + i * EW_VEC, v);
#pragma unroll
        for (int j = 0; j < EW_VEC; ++j) v[j] = f(v[j]);
        store_vec(y + i * EW_VEC, v);
    }
    for (u64 i = groups * EW_VEC + global_thread(); i < n; i += grid_threads()) y[i] = from_float<D>(f(to_float(x[i])));
}

// y[i] = f(a[i], b[i]) for i < n, likewise.
template <typename T, typename F>
__device__ __forceinline__ void map2(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, u64 n, F f) {
    const u64 groups = n / EW_VEC;
    for (u64 i = global_thread(); i < groups; i += grid_threads()) {
        float va[EW_VEC], vb[EW_VEC];
        load_vec(a + i * EW_VEC, va);
        load_vec(b + i * EW_VEC, vb);
#pragma unroll
        for (int j = 0; j < EW_VEC; ++j) va[j] = f(va[j], vb[j]);
        store_vec(y + i * EW_VEC, va);
    }
    for (u64 i = groups * EW_VEC + global_thread(); i < n; i += grid_threads())
        y[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
}

template <int I> struct Const {
    static constexpr int value = I;
};
// Calls f(Const<op>()) for op in [0, N) and f(Const<N>()) for any other op; f is a functor with
// a templated operator() (NVRTC refuses generic lambdas). Inside it the op is a compile-time
// constant, so the loop it runs switches once per thread, not once per element.
template <int N, int I = 0, typename F>
__device__ __forceinline__ void dispatch(int op, F f) {
    if constexpr (I == N) {
        f(Const<N>());
    } else if (op == I) {
        f(Const<I>());
    } else {
        dispatch<N, I + 1>(op, f);
    }
}

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
    __device__ __forceinline__ float identity() const { return 0.0f; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    __device__ __forceinline__ float identity() const { return neg_inf(); }
};

// Online log-sum-exp: m is the running max, s the sum of exp(x - m).
struct Lse {
    float m;
    float s;
};
__device__ __forceinline__ Lse lse_combine(Lse a, Lse b) {
    Lse r;
    r.m = fmaxf(a.m, b.m);
    if (r.m == neg_inf()) {  // both empty (or all -inf): avoid exp(-inf - -inf) = NaN
        r.s = 0.0f;
        return r;
    }
    r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
    return r;
}
__device__ __forceinline__ float lse_value(Lse a) { return a.m + logf(a.s); }
struct LseOp {
    __device__ __forceinline__ Lse operator()(Lse a, Lse b) const { return lse_combine(a, b); }
    __device__ __forceinline__ Lse identity() const {
        Lse r;
        r.m = neg_inf();
        r.s = 0.0f;
        return r;
    }
};

// The max to subtract before exponentiating: 0 when it is -inf (every element so far masked),
// so that exp(-inf - shift) is 0 rather than NaN.
__device__ __forceinline__ float exp_shift(float m) { return m == neg_inf() ? 0.0f : m; }

// exp(x - shift) in the row kernels, by the storage type. f32 data gets expf (2 ulp, about 8
// instructions). bf16 data gets 2^(x * log2(e) - shift * log2(e)) by one FFMA and the
// special-function unit's ex2.approx.ftz: relative error about 1e-5 where |x - shift| < 100,
// hundreds of times finer than bf16's rounding (and results below 2^-126 flush to 0). With 8
// elements per 16 bytes, expf alone would make the bf16 kernels issue-bound, not memory-bound.
template <typename T> __device__ __forceinline__ float row_exp(float x, float shift) {
    if constexpr (sizeof(T) == 2) {
        const float log2e = 1.4426950408889634f;
        float r;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(x, log2e, -shift * log2e)));
        return r;
    } else {
        return expf(x - shift);
    }
}

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(FULL_MASK, v, o); }
__device__ __forceinline__ u32 shfl_xor(u32 v, int o) { return __shfl_xor_sync(FULL_MASK, v, o); }
__device__ __forceinline__ Lse shfl_xor(Lse v, int o) {
    v.m = shfl_xor(v.m, o);
    v.s = shfl_xor(v.s, o);
    return v;
}

// Reduction over the blockDim.x threads that share threadIdx.y (one row), returned to all of
// them. blockDim.x is a power of two up to 32, when a row is an aligned group of lanes that the
// butterfly never leaves, or a multiple of 32, when warps combine through shared memory. Needs
// blockDim.x * blockDim.y <= 1024, and must be reached by every thread of the block (it
// synchronizes when a row spans several warps, and shuffles over whole warps), so kernels keep
// out-of-range rows alive as inactive threads instead of returning early.
template <typename S, typename Op>
__device__ S row_reduce(S v, Op op) {
    if (blockDim.x < 32) {
        for (u32 o = blockDim.x >> 1; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
        return v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    if (blockDim.x == 32) return v;
    __shared__ S partial[32];
    const u32 warps = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // a previous call's readers are done with `partial`
    if (lane == 0) partial[threadIdx.y * warps + warp] = v;
    __syncthreads();
    S r = lane < warps ? partial[threadIdx.y * warps + lane] : op.identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) r = op(r, shfl_xor(r, o));
    return r;
}

// The row's log-sum-exp state from each thread's own: a max reduction, then a sum of the sums
// rescaled to that max. Two float reductions are cheaper than one over Lse pairs, which costs two
// exps per butterfly step.
__device__ __forceinline__ Lse row_lse(Lse own) {
    Lse r;
    r.m = row_reduce(own.m, MaxOp());
    r.s = row_reduce(own.s * expf(own.m - exp_shift(r.m)), SumOp());
    return r;
}

// The row this thread works on in a `Launch::rows` grid.
__device__ __forceinline__ u32 row_index() { return blockIdx.x * blockDim.y + threadIdx.y; }

// 16-byte vectors of a row tile each thread holds (32 bf16 or 16 f32 elements), and the most
// threads a row gets. Match ROW_VECS and ROW_BLOCK in src/kernels/mod.rs, whose `Launch::rows`
// gives a row of n elements the fewest power-of-two threads that hold it in one tile, up to
// ROW_BLOCK: rows of up to 16384 bf16 or 8192 f32 elements are read from memory once. 64 bytes
// a thread keep plenty of loads in flight, amortise the row reductions over many elements, and
// leave a forward near 60 registers.
#define ROW_VECS 4
#define ROW_BLOCK 512

// Columns in a row's tile: blockDim.x threads of ROW_VECS vectors.
template <typename T> __device__ __forceinline__ u32 row_tile() { return blockDim.x * ROW_VECS * (16 / sizeof(T)); }
// Columns of the tile starting at `start` that lie in a row of n (n = 0 for an inactive row).
__device__ __forceinline__ u32 tile_len(u32 n, u32 start, u32 tile) { return n > start ? min(n - start, tile) : 0u; }

// A thread's share of a tile of row_tile<T>() consecutive elements of a row of T: K units of V
// elements, held as f32. VEC: unit k is the 16-byte vector at column
// (threadIdx.x + k * blockDim.x) * V; the host picks it when rows are a whole number of vectors
// and the buffers 16-byte aligned (`row_kernel!` in src/kernels/mod.rs). Scalar: element e of
// unit k is column threadIdx.x + (k * V + e) * blockDim.x, so accesses stay coalesced. Each row
// kernel is instantiated both ways as separate kernels, so that the scalar one's many addresses
// do not cost the vector one registers. The unit helpers also serve other arrays laid out like
// the row (the norms' f32 weights, their shared-memory sums).
template <typename T, bool VEC>
struct Tile {
    static constexpr int V = 16 / sizeof(T);
    static constexpr int K = ROW_VECS;
    float v[K][V];

    static __device__ __forceinline__ u32 col(int k, int e) {
        return VEC ? (threadIdx.x + k * blockDim.x) * V + e : threadIdx.x + (k * V + e) * blockDim.x;
    }
    // Whether element (k, e) is among the first len columns; in VEC mode len is a whole number
    // of vectors, so one test per unit decides.
    static __device__ __forceinline__ bool valid(int k, int e, u32 len) { return col(k, VEC ? 0 : e) < len; }

    template <typename S>
    static __device__ __forceinline__ void load_unit(const S* p, u32 len, int k, float (&u)[V], float fill) {
        if constexpr (VEC) {
            if (valid(k, 0, len)) {
                load_vec(p + col(k, 0), u);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) u[e] = fill;
            }
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) u[e] = valid(k, e, len) ? to_float(p[col(k, e)]) : fill;
        }
    }
    template <typename S>
    static __device__ __forceinline__ void store_unit(S* p, u32 len, int k, const float (&u)[V]) {
        if constexpr (VEC) {
            if (valid(k, 0, len)) store_vec(p + col(k, 0), u);
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
                if (valid(k, e, len)) p[col(k, e)] = from_float<S>(u[e]);
        }
    }
    // p[col] += u over unit k's valid columns.
    static __device__ __forceinline__ void add_unit(float* p, u32 len, int k, const float (&u)[V]) {
        if constexpr (VEC) {
            if (valid(k, 0, len)) {
                float a[V];
                load_vec(p + col(k, 0), a);
#pragma unroll
                for (int e = 0; e < V; ++e) a[e] += u[e];
                store_vec(p + col(k, 0), a);
            }
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
                if (valid(k, e, len)) p[col(k, e)] += u[e];
        }
    }

    // The first len columns from p (all units' loads issue before any is used); fill past them.
    __device__ __forceinline__ void load(const T* p, u32 len, float fill) {
#pragma unroll
        for (int k = 0; k < K; ++k) load_unit(p, len, k, v[k], fill);
    }
    __device__ __forceinline__ void store(T* p, u32 len) const {
#pragma unroll
        for (int k = 0; k < K; ++k) store_unit(p, len, k, v[k]);
    }
    __device__ __forceinline__ float max() const {
        float m = neg_inf();
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
            for (int e = 0; e < V; ++e) m = fmaxf(m, v[k][e]);
        return m;
    }
    __device__ __forceinline__ float sum() const {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
            for (int e = 0; e < V; ++e) s += v[k][e];
        return s;
    }

    // Folds the tile (filled with -inf past the row) into this thread's online log-sum-exp
    // state: one exp per element, one more per tile to rescale the running sum. With keep the
    // tile is left holding exp(x - st.m) of the returned state, so a row that is one tile can be
    // normalised without exponentiating again.
    __device__ __forceinline__ Lse fold_lse(Lse st, bool keep) {
        const float m = fmaxf(st.m, max()), shift = exp_shift(m);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float ex = row_exp<T>(v[k][e], shift);
                s += ex;
                if (keep) v[k][e] = ex;
            }
        Lse r;
        r.m = m;
        r.s = st.s * expf(st.m - shift) + s;
        return r;
    }
};

// Two operands walked over one rank <= 6 iteration shape (row-major order of `dims`), each with
// its own element strides and offset. Matches `TwoStrided` in src/kernels/layout.rs.
#define MAX_RANK 6
struct TwoStrided {
    u64 n;  // product of dims
    u32 rank;
    u32 pad;
    u64 dims[MAX_RANK];
    i64 s0[MAX_RANK];
    i64 s1[MAX_RANK];
    i64 off0;
    i64 off1;
};

// Calls f(i, o0, o1) for every linear index i < p.n this thread owns (a grid-stride loop), o0 and
// o1 the two operands' offsets at i. Decoding i divides by every dimension but the outermost, in
// 32 bits where n < 2^31 (every tensor so far): a 64-bit division is a long software routine,
// and several of them per 2-byte element keep a strided kernel far below the memory bandwidth.
// The dimension loop is unrolled over MAX_RANK so that every index into p is a constant: a
// functor holding a copy of p (binary.cu's Grouped) would otherwise keep it in local memory.
template <typename I, typename F>
__device__ __forceinline__ void strided_walk(const TwoStrided& p, F f) {
    for (I i = (I)global_thread(); i < (I)p.n; i += (I)grid_threads()) {
        i64 o0 = p.off0, o1 = p.off1;
        I r = i;
#pragma unroll
        for (int d = MAX_RANK - 1; d > 0; --d) {
            if (d >= (int)p.rank) continue;
            const I dim = (I)p.dims[d], c = r % dim;
            r /= dim;
            o0 += (i64)c * p.s0[d];
            o1 += (i64)c * p.s1[d];
        }
        if (p.rank > 0) {
            o0 += (i64)r * p.s0[0];
            o1 += (i64)r * p.s1[0];
        }
        f((u64)i, o0, o1);
    }
}
template <typename F>
__device__ __forceinline__ void for_each_strided(const TwoStrided& p, F f) {
    if (p.n < (1ull << 31)) {
        strided_walk<u32>(p, f);
    } else {
        strided_walk<u64>(p, f);
    }
}
