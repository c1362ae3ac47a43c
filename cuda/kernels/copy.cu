// copy.cu: general strided copy, rank <= 6, by element size (it never looks at values).
//
// dst[dst_offset + sum c_d * dst_strides[d]] = src[src_offset + sum c_d * src_strides[d]] for
// every coordinate c of the iteration shape. The tensor crate builds transpose / permute,
// narrow, concat, pad / shift and broadcast_to from it.
#include "common.cuh"

// p's operand 0 is the source, operand 1 the destination.
template <typename E>
__device__ void strided_copy(const E* __restrict__ src, E* __restrict__ dst, TwoStrided p) {
    for_each_strided(p, [&](u64, i64 os, i64 od) { dst[od] = src[os]; });
}

// Wider elements for copies whose rows are aligned (layout.rs `widened`): the same loop moves
// 16- or 8-byte vectors, which is what reaches the memory bandwidth on narrow's and concat's rows.
extern "C" __global__ void copy_b128(const uint4* src, uint4* dst, TwoStrided p) { strided_copy(src, dst, p); }
extern "C" __global__ void copy_b64(const u64* src, u64* dst, TwoStrided p) { strided_copy(src, dst, p); }
extern "C" __global__ void copy_b32(const u32* src, u32* dst, TwoStrided p) { strided_copy(src, dst, p); }
extern "C" __global__ void copy_b16(const u16* src, u16* dst, TwoStrided p) { strided_copy(src, dst, p); }
extern "C" __global__ void copy_b8(const u8* src, u8* dst, TwoStrided p) { strided_copy(src, dst, p); }
