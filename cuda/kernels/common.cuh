// common.cuh: what every kernel file shares. Handed to NVRTC as an in-memory header.
//
// - Integer typedefs (NVRTC has no <cstdint> without an include path).
// - Our own bf16 storage type with f32 conversion: round-to-nearest-even, NaN kept quiet, bit
//   for bit what Rust's `half::bf16::from_f32` does. Owning it keeps the kernels free of
//   <cuda_bf16.h>, so compiling needs no CUDA headers where the program runs.
// - Vector loads/stores of 4 elements (16 B of f32, 8 B of bf16) for the elementwise kernels.
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

__device__ __forceinline__ u16 bf16_bits(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
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

// 4 consecutive elements starting at p (p must be 4-element aligned: pool blocks are 512-byte
// aligned and callers step by 4).
__device__ __forceinline__ void load4(const float* p, float v[4]) {
    float4 r = *reinterpret_cast<const float4*>(p);
    v[0] = r.x; v[1] = r.y; v[2] = r.z; v[3] = r.w;
}
__device__ __forceinline__ void load4(const bf16* p, float v[4]) {
    uint2 r = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(r.x << 16);
    v[1] = __uint_as_float(r.x & 0xffff0000u);
    v[2] = __uint_as_float(r.y << 16);
    v[3] = __uint_as_float(r.y & 0xffff0000u);
}
__device__ __forceinline__ void store4(float* p, const float v[4]) {
    float4 r;
    r.x = v[0]; r.y = v[1]; r.z = v[2]; r.w = v[3];
    *reinterpret_cast<float4*>(p) = r;
}
__device__ __forceinline__ void store4(bf16* p, const float v[4]) {
    uint2 r;
    r.x = (u32)bf16_bits(v[0]) | ((u32)bf16_bits(v[1]) << 16);
    r.y = (u32)bf16_bits(v[2]) | ((u32)bf16_bits(v[3]) << 16);
    *reinterpret_cast<uint2*>(p) = r;
}

// Grid-stride index helpers.
__device__ __forceinline__ u64 global_thread() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }

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
__device__ __forceinline__ Lse lse_leaf(float x) {
    Lse r;
    r.m = x;
    r.s = 1.0f;
    return r;
}
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

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(FULL_MASK, v, o); }
__device__ __forceinline__ u32 shfl_xor(u32 v, int o) { return __shfl_xor_sync(FULL_MASK, v, o); }
__device__ __forceinline__ Lse shfl_xor(Lse v, int o) {
    v.m = shfl_xor(v.m, o);
    v.s = shfl_xor(v.s, o);
    return v;
}

// Butterfly reduction: every lane ends with the warp's total.
template <typename S, typename Op>
__device__ __forceinline__ S warp_reduce(S v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    return v;
}

// Reduction over the blockDim.x threads that share threadIdx.y (one row), returned to all of
// them. Needs blockDim.x a multiple of 32 and blockDim.x * blockDim.y <= 1024, and must be
// reached by every thread of the block (it synchronizes when a row spans several warps), so
// kernels keep out-of-range rows alive as inactive threads instead of returning early.
template <typename S, typename Op>
__device__ S row_reduce(S v, Op op) {
    v = warp_reduce(v, op);
    if (blockDim.x == 32) return v;
    __shared__ S partial[32];
    const u32 warps = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // a previous call's readers are done with `partial`
    if (lane == 0) partial[threadIdx.y * warps + warp] = v;
    __syncthreads();
    S r = lane < warps ? partial[threadIdx.y * warps + lane] : op.identity();
    return warp_reduce(r, op);
}

// The row this thread works on in a `Launch::rows` grid.
__device__ __forceinline__ u32 row_index() { return blockIdx.x * blockDim.y + threadIdx.y; }

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

// Offsets of both operands for linear index i (i < n).
__device__ __forceinline__ void two_offsets(const TwoStrided& p, u64 i, i64& o0, i64& o1) {
    o0 = p.off0;
    o1 = p.off1;
    for (int d = (int)p.rank - 1; d >= 0; --d) {
        const u64 c = i % p.dims[d];
        i /= p.dims[d];
        o0 += (i64)c * p.s0[d];
        o1 += (i64)c * p.s1[d];
    }
}
