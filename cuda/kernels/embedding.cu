// embedding.cu: row gather by u32 ids (embedding lookup, index_select along axis 0) and the
// embedding backward's scatter-add.
//
// An id >= the number of rows never reads or writes out of bounds: the gather writes a zero
// row and sets bit 1 of the device's error word (FLAG_INDEX_OUT_OF_RANGE in src/device.rs);
// the scatter skips it (its forward already flagged it).
#include "common.cuh"

#define FLAG_INDEX_OUT_OF_RANGE 1u

// dst[r, :] = src[ids[r], :], rows of row_len elements; grid-strided over r, threads along the row.
template <typename E>
__device__ void gather(const u32* __restrict__ ids, const E* __restrict__ src, E* __restrict__ dst,
                       u64 count, u32 src_rows, u64 row_len, u32* err) {
    for (u64 r = blockIdx.x; r < count; r += gridDim.x) {
        const u32 id = ids[r];
        const bool ok = id < src_rows;
        if (!ok && threadIdx.x == 0) atomicOr(err, FLAG_INDEX_OUT_OF_RANGE);
        const E* s = src + (u64)id * row_len;
        E* d = dst + r * row_len;
        for (u64 j = threadIdx.x; j < row_len; j += blockDim.x) d[j] = ok ? s[j] : (E)0;
    }
}

// dtable[ids[r], :] += dout[r, :] in f32 (atomics: ids repeat).
template <typename T>
__device__ void scatter_add(const u32* __restrict__ ids, const T* __restrict__ dout, float* __restrict__ dtable,
                            u64 count, u32 table_rows, u64 row_len) {
    for (u64 r = blockIdx.x; r < count; r += gridDim.x) {
        const u32 id = ids[r];
        if (id >= table_rows) continue;
        const T* g = dout + r * row_len;
        float* d = dtable + (u64)id * row_len;
        for (u64 j = threadIdx.x; j < row_len; j += blockDim.x) atomicAdd(d + j, to_float(g[j]));
    }
}

#define GATHER(NAME, E)                                                                            \
    extern "C" __global__ void gather_##NAME(const u32* ids, const E* src, E* dst, u64 count,     \
                                             u32 src_rows, u64 row_len, u32* err) {                \
        gather<E>(ids, src, dst, count, src_rows, row_len, err);                                   \
    }
GATHER(b32, u32)
GATHER(b16, u16)
GATHER(b8, u8)

#define SCATTER(NAME, T)                                                                           \
    extern "C" __global__ void scatter_add_##NAME(const u32* ids, const T* dout, float* dtable,    \
                                                  u64 count, u32 table_rows, u64 row_len) {       \
        scatter_add<T>(ids, dout, dtable, count, table_rows, row_len);                            \
    }
SCATTER(f32, float)
SCATTER(bf16, bf16)
