// mma.cuh: the tensor-core tile helpers the kernel files share (attention, RAttention's linear
// branch, the chunkwise recurrences), prepended to each by its Rust wrapper (NVRTC gets
// common.cuh as its only header).
//
// - cp.async copies of row tiles from global into shared memory (rows out of range arrive as
//   zeros, so partial tiles need no other care).
// - Shared tiles of bf16 whose 16-byte chunks are XOR-swizzled by row: ldmatrix's eight row
//   addresses then fall in distinct banks with no padding. A column offset that is a multiple of
//   64 is a plain pointer offset (the swizzle only mixes the low three chunk bits).
// - tf32 conversion and mma.sync m16n8k8 on tf32 (f32 operands at 10 bits of significand).
// - Named barriers, for some warps of a block.
// - mma.sync m16n8k16 (bf16 in, f32 accumulate) fed by ldmatrix: A fragments from a row-major
//   tile, from a k-major (transposed) tile, or from an accumulator in registers; B fragments from
//   an n-major ([n][k]) or a k-major ([k][n]) tile, starting at any multiple of 8 columns.
#include "common.cuh"

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// 16 bytes from global to shared memory, bypassing L1; zeros where !valid (src is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A barrier of `threads` threads (whole warps) named `id` (1 to 15; 0 is __syncthreads'), for
// some warps of a block while the others run on.
__device__ __forceinline__ void bar_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting for it (a signal to the warps that sync on it).
__device__ __forceinline__ void bar_arrive(u32 id, u32 threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Four 8x8 b16 matrices; lane l addresses row l % 8 of matrix l / 8 and receives, from matrix i,
// elements (l / 4, 2 (l % 4) .. +1) into r[i] (with TRANS, the transposed matrix's).
template <bool TRANS> __device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const bf16* p) {
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_addr(p)));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_addr(p)));
    }
}

// c += a b for a 16x16 A (row-major fragment) and a 16x8 B (column-major fragment).
__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f32 to tf32 (the tensor cores' 19-bit float: 10 bits of significand), rounded to nearest.
__device__ __forceinline__ u32 tf32_bits(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c += a b for a 16x8 A and an 8x8 B of tf32, f32 accumulation: A's element (r, k) in lane
// 4 (r % 8) + k % 4, register (r / 8) + 2 (k / 4); B's (k, n) in lane 4 n + k % 4, register k / 4.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// p[0] += a, p[1] += b: one vector atomic reduction from sm_90 on (p 8-byte aligned), two scalar
// ones before it.
__device__ __forceinline__ void red_add2(float* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

__device__ __forceinline__ float fast_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// Element offset of (r, c) in a shared tile of COLS bf16 columns: chunk c / 8 of row r is
// stored at chunk (c / 8) ^ (r % 8).
template <int COLS> __device__ __forceinline__ int swz(int r, int c) {
    return r * COLS + ((((c >> 3) ^ r) & 7) | ((c >> 3) & ~7)) * 8 + (c & 7);
}

// Element offset of (r, c) in a ROWS-row tile laid out as wgmma reads it with 128-byte
// swizzling: 64-column blocks one after another, each a swz<64> tile. With 64 columns it is
// swz<64>.
template <int ROWS> __device__ __forceinline__ int swz_blocks(int r, int c) {
    return (c >> 6) * ROWS * 64 + swz<64>(r, c & 63);
}

// Where lane l points ldmatrix for a 16x16 block at (r0, c0) of a row-major tile with row length
// COLS columns. A_ORDER: matrices in A-fragment order (rows 0-7 / 8-15 first, then columns 8-15) — the
// A operand from a row-major tile, or, with .trans, the B operand of two 8-column n-tiles from a
// k-major tile. Otherwise columns 0-7 / 8-15 first, then rows 8-15: the B operand of two 8-row
// n-tiles from an n-major tile, or, with .trans, the A operand from a k-major (transposed) tile.
template <int COLS, bool A_ORDER> __device__ __forceinline__ const bf16* lane_ptr(const bf16* tile, int r0, int c0) {
    const int l = threadIdx.x & 31;
    const int r = A_ORDER ? (l & 7) + ((l >> 3) & 1) * 8 : (l & 7) + (l >> 4) * 8;
    const int c = A_ORDER ? (l >> 4) * 8 : ((l >> 3) & 1) * 8;
    return tile + swz<COLS>(r0 + r, c0 + c);
}

// The A fragment of k-slice kk from an m16 x n8 accumulator row (C layout to A layout).
template <int N> __device__ __forceinline__ void c_to_a(const float (&c)[N][4], int kk, u32 (&a)[4]) {
    a[0] = bf16x2_bits(c[2 * kk][0], c[2 * kk][1]);
    a[1] = bf16x2_bits(c[2 * kk][2], c[2 * kk][3]);
    a[2] = bf16x2_bits(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = bf16x2_bits(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// The B fragments of k-slice kk and n-tiles 2 nn, 2 nn + 1 (f[0..1], f[2..3]) from a shared tile of
// BCOLS columns whose n index starts at n0: NMAJOR when stored n-major ([n][k], as K for Q K^T),
// else k-major ([k][n], as V for P V). (A k-major tile read with .trans, an n-major one without,
// both give B fragments.)
template <int BCOLS, bool NMAJOR>
__device__ __forceinline__ void b_frag(u32 (&f)[4], const bf16* b, int kk, int nn, int n0 = 0) {
    if constexpr (NMAJOR) {
        ldsm_x4<false>(f, lane_ptr<BCOLS, false>(b, n0 + nn * 16, kk * 16));
    } else {
        ldsm_x4<true>(f, lane_ptr<BCOLS, true>(b, kk * 16, n0 + nn * 16));
    }
}

// c[m][16 x 8 NT] += A[m] (16 x 16 KT, from a[m]) times B (16 KT x 8 NT) read by b_frag, for MT
// m-tiles: each B fragment read from shared memory serves all MT of them, so MT = 2 halves the
// B reads per product.
template <int MT, int KT, int NT, int BCOLS, bool NMAJOR>
__device__ __forceinline__ void mma_tiles(float (&c)[MT][NT][4], const u32 (&a)[MT][KT][4], const bf16* b,
                                          int n0 = 0) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
#pragma unroll
        for (int nn = 0; nn < NT / 2; ++nn) {
            u32 f[4];
            b_frag<BCOLS, NMAJOR>(f, b, kk, nn, n0);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                mma(c[m][2 * nn], a[m][kk], f[0], f[1]);
                mma(c[m][2 * nn + 1], a[m][kk], f[2], f[3]);
            }
        }
}

// mma_tiles for one m-tile.
template <int KT, int NT, int BCOLS, bool NMAJOR>
__device__ __forceinline__ void mma_tile(float (&c)[NT][4], const u32 (&a)[KT][4], const bf16* b, int n0 = 0) {
    mma_tiles<1, KT, NT, BCOLS, NMAJOR>(reinterpret_cast<float(&)[1][NT][4]>(c),
                                        reinterpret_cast<const u32(&)[1][KT][4]>(a), b, n0);
}

// Like mma_tiles with the A operand of m-tile m read per k-slice from rows r0 + 16 m .. +15 of a
// row-major shared tile of ACOLS columns.
template <int MT, int KT, int NT, int ACOLS, int BCOLS, bool NMAJOR = true>
__device__ __forceinline__ void mma_smem_a_tiles(float (&c)[MT][NT][4], const bf16* a, int r0, const bf16* b,
                                                 int n0 = 0) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        u32 f[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) ldsm_x4<false>(f[m], lane_ptr<ACOLS, true>(a, r0 + 16 * m, kk * 16));
#pragma unroll
        for (int nn = 0; nn < NT / 2; ++nn) {
            u32 g[4];
            b_frag<BCOLS, NMAJOR>(g, b, kk, nn, n0);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                mma(c[m][2 * nn], f[m], g[0], g[1]);
                mma(c[m][2 * nn + 1], f[m], g[2], g[3]);
            }
        }
    }
}

// mma_smem_a_tiles for one m-tile.
template <int KT, int NT, int ACOLS, int BCOLS, bool NMAJOR = true>
__device__ __forceinline__ void mma_smem_a(float (&c)[NT][4], const bf16* a, int r0, const bf16* b, int n0 = 0) {
    mma_smem_a_tiles<1, KT, NT, ACOLS, BCOLS, NMAJOR>(reinterpret_cast<float(&)[1][NT][4]>(c), a, r0, b, n0);
}

// ROWS rows of COLS columns into a shared tile, by NTHREADS threads: tile row r is global row
// r0 + r - shift (row i at g + i * rs), and zeros unless shift <= r0 + r < limit. SHIFTED false
// takes shift as 0 and spares the lower bound's test. BLOCKS: in the swz_blocks layout, else
// swz<COLS>.
template <int COLS, int ROWS, int NTHREADS, bool SHIFTED, bool BLOCKS = false>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, u64 rs, int r0, int limit, int shift) {
    constexpr int CH = COLS / 8;
    if constexpr (!SHIFTED) shift = 0;
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CH; i += NTHREADS) {
        const int r = i / CH, c = i % CH;
        const bool ok = (!SHIFTED || r0 + r >= shift) && r0 + r < limit;
        const int at = BLOCKS ? swz_blocks<ROWS>(r, c * 8) : swz<COLS>(r, c * 8);
        cp_async16(s + at, g + (u64)(ok ? r0 + r - shift : 0) * rs + c * 8, ok);
    }
}
