// chunk.cuh: what the chunkwise recurrent kernels (mlstm.cu, gated_delta.cu) share, prepended to
// each of them by its Rust wrapper (NVRTC gets common.cuh as its only header).
//
// - Strided f32 matrix views over shared or global memory, so one product routine serves every
//   transposition the chunk algebra needs without copying tiles.
// - block_mm: a product of two views computed by the whole block, handing each output element to
//   a functor exactly once (store, scale, accumulate or write out, chosen by the caller). With
//   TC, bf16 tensor cores (mma.sync m16n8k16, f32 accumulation), operands rounded to bf16 as
//   fragments are loaded; without, f32 FMAs, so f32 data keeps f32 products.
// - Row dots, block sums, the stable log-sigmoid and the per-(batch, head) row addressing.
#include "common.cuh"

// A read-only f32 matrix: element (r, c) at p[r * rs + c * cs].
struct Mat {
    const float* p;
    int rs;
    int cs;
    __device__ __forceinline__ float at(int r, int c) const { return p[r * rs + c * cs]; }
    __device__ __forceinline__ Mat t() const { return Mat{p, cs, rs}; }
};
__device__ __forceinline__ Mat rows_of(const float* p, int ld) { return Mat{p, ld, 1}; }

// The block's threads and warps (every kernel here runs 1-D blocks of whole warps).
__device__ __forceinline__ int nthreads() { return blockDim.x; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int nwarps() { return blockDim.x >> 5; }

__device__ __forceinline__ void mma_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// out(r, c, value) for every element of the M x N product a · b (inner size K). With TC, M, N
// and K must be multiples of 16 (callers zero-pad their tiles). Every thread of the block must
// call it; it does not synchronize, so the caller does before the operands are read and after
// the results are written.
template <bool TC, typename Out>
__device__ __forceinline__ void block_mm(Mat a, Mat b, int M, int K, int N, Out out) {
    if constexpr (TC) {
        // Warp tiles of 16 x 16 (two mma n-halves sharing the A fragment).
        const int g = lane_id() >> 2, q = (lane_id() & 3) * 2;
        const int tn = N / 16, tiles = (M / 16) * tn;
        for (int tile = warp_id(); tile < tiles; tile += nwarps()) {
            const int r0 = (tile / tn) * 16, c0 = (tile % tn) * 16;
            float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            for (int k0 = 0; k0 < K; k0 += 16) {
                const u32 af[4] = {
                    bf16x2_bits(a.at(r0 + g, k0 + q), a.at(r0 + g, k0 + q + 1)),
                    bf16x2_bits(a.at(r0 + g + 8, k0 + q), a.at(r0 + g + 8, k0 + q + 1)),
                    bf16x2_bits(a.at(r0 + g, k0 + q + 8), a.at(r0 + g, k0 + q + 9)),
                    bf16x2_bits(a.at(r0 + g + 8, k0 + q + 8), a.at(r0 + g + 8, k0 + q + 9)),
                };
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int n = c0 + h * 8 + g;
                    mma_bf16(acc[h], af, bf16x2_bits(b.at(k0 + q, n), b.at(k0 + q + 1, n)),
                             bf16x2_bits(b.at(k0 + q + 8, n), b.at(k0 + q + 9, n)));
                }
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = c0 + h * 8 + q;
                out(r0 + g, c, acc[h][0]);
                out(r0 + g, c + 1, acc[h][1]);
                out(r0 + g + 8, c, acc[h][2]);
                out(r0 + g + 8, c + 1, acc[h][3]);
            }
        }
    } else {
        for (int idx = threadIdx.x; idx < M * N; idx += nthreads()) {
            const int r = idx / N, c = idx % N;
            float s = 0.0f;
            for (int k = 0; k < K; ++k) s = fmaf(a.at(r, k), b.at(k, c), s);
            out(r, c, s);
        }
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
    return v;
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
__device__ __forceinline__ float warp_dot(const float* x, const float* y, int n) {
    float s = 0.0f;
    for (int i = lane_id(); i < n; i += 32) s = fmaf(x[i], y[i], s);
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

// Rows t0..t0+len of head (b, h) of a [B, T, H, d] buffer into a [rows, ld] f32 tile, times
// `scale`; rows len..rows (the zero padding the tensor-core products need) are zeroed.
template <typename T>
__device__ __forceinline__ void load_rows(float* dst, int ld, const T* src, Heads hd, int b, int hh, int t0,
                                          int len, int rows, int d, float scale) {
    for (int idx = threadIdx.x; idx < rows * d; idx += nthreads()) {
        const int r = idx / d, c = idx % d;
        dst[r * ld + c] = r < len ? to_float(src[hd.at(b, hh, t0 + r, d) + c]) * scale : 0.0f;
    }
}

__device__ __forceinline__ int round16(int x) { return (x + 15) & ~15; }

// Sizes of a chunkwise call; matches `RecArgs` in src/kernels/chunk.rs.
struct RecDims {
    int b;
    int t;
    int h;
    int dk;
    int dv;
    int chunk;
    float eps;
    float scale;
};
