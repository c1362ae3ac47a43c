// tma.cuh: Hopper's tensor memory accelerator (TMA) and the shared-memory barriers it signals,
// for warp-specialised kernels (attention's Hopper forward and backward), prepended after
// wgmma.cuh. Only where NVRTC targets sm_90a: the kernels using it exist only there.
//
// A TMA copy moves a whole box of a tensor (described on the host by a tensor map, swax-cuda's
// tma.rs) from global into shared memory, written in wgmma's 128-byte-swizzle layout and with
// zeros wherever the box leaves the tensor, by one instruction of one thread. Its completion is
// counted in bytes on an mbarrier: the issuing thread arrives announcing the bytes to expect,
// and the barrier's phase completes when they have all landed. Consumers wait on that phase by
// its parity; they hand a buffer back by arriving on a second barrier that the producer waits
// on before refilling it. Phases alternate, so a barrier used for the n-th time completes with
// parity n % 2.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// cuTensorMapEncodeTiled's 128 opaque bytes, passed by value as a __grid_constant__ parameter
// (the TMA unit reads it from the parameter space).
struct alignas(64) TensorMap {
    unsigned long long bits[16];
};

__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// After the barriers' initialisation, before any thread or the TMA unit uses them (then a block
// barrier).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// An arrival that also tells the barrier to wait for `bytes` more bytes of TMA traffic.
__device__ __forceinline__ void mbar_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

__device__ __forceinline__ void tma_prefetch(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(&map)) : "memory");
}
// The box of a 4-D tensor map at coordinates (c0 innermost .. c3) into dst (1024-byte aligned),
// its bytes counted on bar.
__device__ __forceinline__ void tma_load_4d(bf16* dst, const TensorMap& map, int c0, int c1, int c2, int c3,
                                            u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<u64>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
        : "memory");
}

// A bulk copy of `bytes` contiguous bytes (a multiple of 16, both ends 16-byte aligned) from
// global into shared memory, its bytes counted on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            smem_addr(dst)),
        "l"(reinterpret_cast<u64>(src)), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

// dst[i] += src[i] for `bytes` contiguous bytes of f32 (a multiple of 16, 16-byte aligned), src
// in shared memory (written by ordinary stores: fence_proxy_async and a barrier first), dst in
// global, by the TMA unit, atomically per element. The issuing thread groups its reductions
// with bulk_commit and waits with bulk_wait_read (until the group has read shared memory, which
// may then be rewritten) or bulk_wait (until the additions are done; before the block exits).
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                     reinterpret_cast<u64>(dst)),
                 "r"(smem_addr(src)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's groups have not read their shared memory.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// The registers a thread of this warpgroup may use, lowered (a producer that only issues copies)
// or raised (consumers that hold accumulators) from the launch's even share; every thread of
// the warpgroup executes it.
template <u32 N> __device__ __forceinline__ void regs_lower() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <u32 N> __device__ __forceinline__ void regs_raise() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif
