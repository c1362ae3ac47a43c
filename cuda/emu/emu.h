// emu.h: the CUDA our kernels use, emulated on the CPU, so that a kernel's logic can be checked
// on a machine without a GPU (tests/tests/emulated_kernels.rs runs the recurrent mixers',
// attention's (mma.sync and Hopper paths), RAttention's linear branch's, the SwiGLU's, the
// norms', the short convolution's and the cross-entropy's kernels in it against the CPU's). Each
// thread of a block is a fiber (ucontext) on one OS thread; blocks run one after another.
// Barriers and warp collectives (shuffles, ldmatrix, mma.sync on bf16 and tf32) suspend a fiber
// until every participant has arrived, then compute with all lanes' operands, so fragment
// layouts, lane exchanges and missing barriers behave as on the GPU. cp.async copies land only
// at their wait (the latest a GPU may land them) and shared memory is filled with NaNs before
// each block, so a missing wait or a read of unwritten shared memory shows as a wrong or NaN
// result. The test turns kernel sources into C++ over this header. Not emulated: timing, memory
// ordering between blocks (blocks run one after another), atomics racing (a fiber runs until it
// reaches a collective). Built with __CUDA_ARCH_FEAT_SM90_ALL defined it is a Hopper target:
// wgmma, TMA and bulk copies, bulk reductions, mbarriers and named barriers are emulated below.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

struct EmuDim {
    unsigned x, y, z;
};
extern EmuDim threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct int2 {
    int x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline float __fdividef(float a, float b) { return a / b; }
inline float __log2f(float x) { return log2f(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

inline float atomicAdd(float* p, float v) {
    float o = *p;
    *p = o + v;
    return o;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
    unsigned o = *p;
    *p = o + v;
    return o;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o > v ? o : v;
    return o;
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
    unsigned o = *p;
    *p = o < v ? o : v;
    return o;
}
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned atomicOr(unsigned* p, unsigned v) {
    unsigned o = *p;
    *p = o | v;
    return o;
}

// ---- scheduling ----
void emu_yield();
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

// A warp collective: every lane deposits `in` (words), the last to arrive runs `op` over all
// lanes' inputs, each lane gets its `out`.
struct EmuLane {
    unsigned in[16];
    unsigned out[16];
};
void emu_collective(int kind, const unsigned* in, int nin, unsigned* out, int nout,
                    void (*op)(EmuLane*, int), int arg);

float __shfl_xor_sync(unsigned mask, float v, int o);
unsigned __shfl_xor_sync(unsigned mask, unsigned v, int o);
int __shfl_xor_sync(unsigned mask, int v, int o);
float __shfl_up_sync(unsigned mask, float v, int o);
float __shfl_sync(unsigned mask, float v, int src);
unsigned __shfl_sync(unsigned mask, unsigned v, int src);
int __shfl_sync(unsigned mask, int v, int src);

// ---- the PTX the kernels wrap ----
typedef unsigned short emu_u16;
inline emu_u16 emu_bf16_bits(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    const unsigned lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (emu_u16)(u >> 16);
}

struct bf16;
inline emu_u16 bf16_bits(float x) { return emu_bf16_bits(x); }
inline unsigned bf16x2_bits(float lo, float hi) { return (unsigned)emu_bf16_bits(lo) | ((unsigned)emu_bf16_bits(hi) << 16); }

// Shared memory: one block's worth, and the address a cp.async or ldmatrix names.
extern unsigned char* emu_smem;
inline unsigned smem_addr(const void* p) { return (unsigned)((const unsigned char*)p - emu_smem); }
inline void* emu_smem_ptr(unsigned a) { return emu_smem + a; }

void cp_async16(void* dst, const void* src, bool valid);
void cp_async_commit();
void emu_cp_async_wait(int n);
template <int N> inline void cp_async_wait() { emu_cp_async_wait(N); }

void emu_ldsm_x4(unsigned (&r)[4], const void* p, bool trans);
template <bool TRANS> inline void ldsm_x4(unsigned (&r)[4], const struct bf16* p) { emu_ldsm_x4(r, p, TRANS); }

void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
inline unsigned tf32_bits(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

inline void red_add2(float* p, float a, float b) {
    p[0] += a;
    p[1] += b;
}
inline float fast_exp2(float x) {
    float r = exp2f(x);
    return r < 1.17549435e-38f ? 0.0f : r;
}
template <typename T> inline float row_exp(float x, float shift) {
    if (sizeof(T) == 2) return fast_exp2(fmaf(x, 1.4426950408889634f, -shift * 1.4426950408889634f));
    return expf(x - shift);
}

// ---- Hopper (sm_90a): wgmma, TMA copies, mbarriers ----
// wgmma.mma_async as a warpgroup collective: each of the 128 threads deposits its accumulator
// (and, for a register A, its fragment); the last to arrive multiplies the 64 x 16 A by the
// 16 x N B read from shared memory through their descriptors (128-byte swizzle) and adds into
// every thread's accumulator (or writes it, where `add` is false). It completes at the call, the
// earliest a GPU may; fences, commits and waits are then no-ops.
void emu_wgmma(float* d, int n, const unsigned* a, unsigned long long da, int ta, unsigned long long db, int tb,
               bool add);
template <int TA, int TB, int N>
inline void wgmma_ss(float (&d)[N], unsigned long long da, unsigned long long db, bool add = true) {
    emu_wgmma(d, 2 * N, nullptr, da, TA, db, TB, add);
}
template <int TB, int N>
inline void wgmma_rs(float (&d)[N], const unsigned (&a)[4], unsigned long long db, bool add = true) {
    emu_wgmma(d, 2 * N, a, 0, 0, db, TB, add);
}
inline void fence_proxy_async() {}
inline void wg_arrive() {}
inline void wg_commit() {}
template <int N> inline void wg_wait() {}
template <int N> inline void wg_hold(float (&)[N]) {}
template <int N> inline void wg_keep(const unsigned (&)[N][4]) {}
bool __any_sync(unsigned mask, bool p);
// The lanes whose v equals this lane's.
unsigned __match_any_sync(unsigned mask, unsigned v);
#define __grid_constant__

// The copies and barriers of tma.cuh. A harness encodes a tensor map's 128 bytes as words: the
// bf16 tensor's address, its four sizes and then the box's four, innermost first (a contiguous
// row-major tensor). A copy lands when a thread first waits on its barrier (the latest a GPU
// may land it, so a read before the wait reads stale or NaN data), zeros where the box leaves
// the tensor, and counts its bytes there; a wait yields until the phase of its parity has
// completed.
struct TensorMap;
void mbar_init(unsigned long long* bar, unsigned count);
inline void mbar_init_fence() {}
void mbar_expect(unsigned long long* bar, unsigned bytes);
void mbar_arrive(unsigned long long* bar);
void mbar_wait(unsigned long long* bar, unsigned parity);
inline void tma_prefetch(const TensorMap&) {}
void tma_load_4d(struct bf16* dst, const TensorMap& map, int c0, int c1, int c2, int c3, unsigned long long* bar);
void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar);
// Bulk reductions into global memory read shared memory and add when their issuing thread waits
// for their group (the latest a GPU may read it, so a buffer rewritten before the wait adds the
// new values); a thread that exits with one not waited for is an error.
void bulk_reduce_add(float* dst, const float* src, unsigned bytes);
void bulk_commit();
void emu_bulk_wait(int n);
template <int N> inline void bulk_wait_read() { emu_bulk_wait(N); }
template <int N> inline void bulk_wait() { emu_bulk_wait(N); }
void bar_sync(unsigned id, unsigned threads);
void bar_arrive(unsigned id, unsigned threads);
template <unsigned N> inline void regs_lower() {}
template <unsigned N> inline void regs_raise() {}

// ---- launching ----
struct EmuLaunch {
    EmuDim grid, block;
    size_t shared;
};
void emu_launch(EmuLaunch l, std::function<void()> kernel);
