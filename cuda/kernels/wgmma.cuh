// wgmma.cuh: Hopper's warpgroup matrix products (wgmma.mma_async, sm_90a) for swax-nn's attention
// and RAttention kernels, prepended after mma.cuh by their Rust wrappers; and the staging of a
// warpgroup's accumulator rows through shared memory for whole-row stores. A warpgroup (four
// warps) computes a 64 x N tile together, its operands read straight from shared memory through
// 64-bit descriptors (A may come from registers instead), so a tile that mma.sync would make
// each warp read for itself is read once. Compiled only where NVRTC targets sm_90a
// (`__CUDA_ARCH_FEAT_SM90_ALL`).
//
// Layouts: the accumulator of an m64nN product gives thread (warp w, lane g * 4 + tq) the
// elements d[4 j + e] at row 16 w + g + 8 (e / 2), column 8 j + 2 tq + e % 2, which is the
// mma.sync C layout n8-block by n8-block, so c_to_a and the softmax code serve both; an A
// operand in registers is the mma.sync A fragment of the warp's 16 rows. Shared tiles are in
// the 128-byte-swizzle layout (swz_blocks in mma.cuh: 64-column blocks, 128-byte rows whose
// 16-byte chunks are XORed with the row's low three bits, from a 1024-byte boundary). The same
// tile serves as a K-major operand (its rows are M or N, k runs along its columns) and as an
// MN-major one (k runs along its rows: the "transposed" flag).
//
// The functions exist for every target, so that code choosing between them and mma.sync with
// `if constexpr` compiles anywhere; their instructions only where NVRTC targets sm_90a.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90A_ONLY(...) __VA_ARGS__
#else
#define SM90A_ONLY(...)
#endif

// The block's dynamic shared memory from a 1024-byte boundary, where wgmma's swizzle pattern
// starts (the launch leaves 1024 bytes to round up).
__device__ __forceinline__ bf16* aligned_smem() {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    return reinterpret_cast<bf16*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
}

// A shared-memory matrix descriptor with 128-byte swizzling: the start address, the leading
// byte offset (MN-major: from one 64-column block to the next) and the stride byte offset (from
// one group of eight rows to the next), each in 16-byte units.
__device__ __forceinline__ u64 wg_desc(const bf16* p, u32 lbo, u32 sbo) {
    return (u64)((smem_addr(p) & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) |
           ((u64)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// A warpgroup's 64 rows of D (its m64 accumulator) leave through shared memory as whole rows of
// 16-byte global stores: each thread's 4-byte stores of its fragments, eight rows apart, kept the
// attention backward's store queue full (lg_throttle, in its dK and dV stores). The stage holds
// 64-column pieces, piece p at stage + p * stride, each [64 rows][64] with 16-byte chunk c of row
// r at c ^ (r & 7), so that neither the fragments' writes nor the rows' reads conflict.
__device__ __forceinline__ int staged(int row, int chunk, int stride) {
    return (chunk >> 3) * stride + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}
// The fragments, row r's times mul[r], as bf16 into the stage.
template <int D>
__device__ __forceinline__ void stage_rows(const float (&acc)[D / 8][4], const float (&mul)[2], bf16* stage,
                                           int stride) {
    const int tid = threadIdx.x & 127, g = (tid & 31) >> 2, tq = tid & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = 16 * (tid >> 5) + g + 8 * r;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<u32*>(stage + staged(row, j, stride) + 2 * tq) =
                bf16x2_bits(acc[j][2 * r] * mul[r], acc[j][2 * r + 1] * mul[r]);
    }
}
// The stage's rows to out(row) (a row's D elements in global memory; null: the row is not
// stored), after a barrier of the warpgroup's writes.
template <int D, typename Out>
__device__ __forceinline__ void store_staged(const bf16* stage, int stride, Out out) {
    constexpr int CHUNKS = D / 8;
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int j = 0; j < 64 * CHUNKS / 128; ++j) {
        const int idx = j * 128 + tid, row = idx / CHUNKS, chunk = idx % CHUNKS;
        bf16* dst = out(row);
        if (dst)
            *reinterpret_cast<uint4*>(dst + chunk * 8) =
                *reinterpret_cast<const uint4*>(stage + staged(row, chunk, stride));
    }
}

// k-slice kk (16 columns) of a ROWS-row tile read K-major, and k-slice kk (16 rows) of one read
// MN-major.
template <int ROWS> __device__ __forceinline__ u64 desc_k(const bf16* tile, int kk) {
    return wg_desc(tile + (kk / 4) * ROWS * 64 + (kk % 4) * 16, 16, 1024);
}
template <int ROWS> __device__ __forceinline__ u64 desc_mn(const bf16* tile, int kk) {
    return wg_desc(tile + kk * 16 * 64, ROWS * 128, 1024);
}

// Shared-memory writes by ordinary stores and cp.async become visible to wgmma (the async proxy)
// after this fence and a barrier.
__device__ __forceinline__ void fence_proxy_async() {
    SM90A_ONLY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}
// Orders the registers' earlier writes before the wgmmas that follow.
__device__ __forceinline__ void wg_arrive() { SM90A_ONLY(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
__device__ __forceinline__ void wg_commit() {
    SM90A_ONLY(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
template <int N> __device__ __forceinline__ void wg_wait() {
    SM90A_ONLY(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}
// After wg_wait: the accumulators are redefined here, so that no read of them is scheduled
// before the wait; and A fragments stay live (their registers untouched) until here.
template <int N> __device__ __forceinline__ void wg_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) SM90A_ONLY(asm volatile("" : "+f"(d[i])::"memory"));
}
template <int N> __device__ __forceinline__ void wg_keep(const u32 (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        SM90A_ONLY(asm volatile("" ::"r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]) : "memory"));
}

// d (m64 x N, f32) += A (64 x 16) B (16 x N), bf16, or d = A B where `add` is false (the first
// k-slice of a product, so that d needs no zeroing: zeros written into d between the fence and
// the product make ptxas wait for the products before): wgmma_ss with A and B in shared memory
// (TA, TB: MN-major), wgmma_rs with A in registers; one pair for each N, 64 and 128, written out by
// WGMMA_PAIR from the accumulator's operands (OUTS, numbered REGS) and the numbers of the
// operands after them (as strings: inline assembly names operands by position).
#define WG_D8(i)                                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define WG_D32 WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
#define WG_D64 WG_D32, WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
#define WG_R32                                                                  \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R64                                                                          \
    WG_R32 ", "                                                                         \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// After the accumulator: ss takes da, db, add, TA, TB; rs takes a[0..3], db, add, TB.
#define WGMMA_PAIR(N, OUTS, REGS, SS_DA, SS_DB, SS_ADD, SS_TA, SS_TB, RS_A, RS_DB, RS_ADD, RS_TB)               \
    template <int TA, int TB>                                                                                   \
    __device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 da, u64 db, bool add = true) {              \
        SM90A_ONLY(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS_ADD ", 0;\n"                           \
                                "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, " SS_DA    \
                                ", " SS_DB ", p, 1, 1, " SS_TA ", " SS_TB ";\n}\n"                              \
                                : OUTS                                                                          \
                                : "l"(da), "l"(db), "r"((u32)add), "n"(TA), "n"(TB)));                          \
    }                                                                                                           \
    template <int TB>                                                                                           \
    __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 db, bool add = true) {   \
        SM90A_ONLY(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_ADD ", 0;\n"                           \
                                "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, "          \
                                "{" RS_A "}, " RS_DB ", p, 1, 1, " RS_TB ";\n}\n"                               \
                                : OUTS                                                                          \
                                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((u32)add), "n"(TB)));\
    }

WGMMA_PAIR(64, WG_D32, WG_R32, "%32", "%33", "%34", "%35", "%36", "%32, %33, %34, %35", "%36", "%37", "%38")
WGMMA_PAIR(128, WG_D64, WG_R64, "%64", "%65", "%66", "%67", "%68", "%64, %65, %66, %67", "%68", "%69", "%70")
