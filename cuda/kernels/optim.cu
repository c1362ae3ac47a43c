// optim.cu: the AdamW step over every parameter in one launch, and the global gradient norm
// behind clipping in two.
//
// Multi-tensor: the host uploads a table with one entry per tensor (its buffers, its length,
// its decay flag) and cuts each tensor into chunks of MT_CHUNK elements; the chunks of all
// tensors, in table order, form one index space, and blocks walk it grid-stride, each chunk
// finding its tensor by a binary search over the entries' first chunks. A chunk never spans two
// tensors, so a chunk's elements are contiguous and (MT_CHUNK a multiple of 4, pool blocks
// 512-byte aligned) its float4 accesses aligned.
//
// Clipping stays on the device: mt_sumsq_partial / norm_finish leave the global norm in one
// f32, and mt_adamw reads it and scales every gradient by min(1, max_norm / (norm + 1e-6)) as
// it reads it. No host sync in the optimizer step.
#include "common.cuh"

#define MT_CHUNK 4096

// One tensor of a multi-tensor call (`TensorEntry` in src/kernels/optim.rs, field for field).
// Pointers a kernel does not use are null.
struct TensorEntry {
    float* p;
    const float* g;
    float* m;
    float* v;
    u64 n;
    u64 first_chunk;
    u32 decay;
    u32 pad;
};

// The entry holding chunk c: the last whose first chunk is <= c (no entry is empty).
__device__ __forceinline__ u32 entry_of(const TensorEntry* __restrict__ t, u32 count, u64 c) {
    u32 lo = 0, hi = count - 1;
    while (lo < hi) {
        const u32 mid = (lo + hi + 1) / 2;
        if (t[mid].first_chunk <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Calls f(entry, lo, hi) for each chunk this block owns: elements [lo, hi) of the entry.
template <typename F>
__device__ __forceinline__ void for_each_chunk(const TensorEntry* __restrict__ t, u32 count, u64 chunks, F f) {
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        const TensorEntry& e = t[entry_of(t, count, c)];
        const u64 lo = (c - e.first_chunk) * MT_CHUNK;
        f(e, lo, min(lo + MT_CHUNK, e.n));
    }
}

// bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (host, f64). Decoupled weight decay:
// p <- p * (1 - lr * wd) - lr * mhat / (sqrt(vhat) + eps).
__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, float lr, float b1, float b2,
                                          float eps, float wd, float bc1, float bc2) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p = p * (1.0f - lr * wd) - lr * (m / bc1) / (sqrtf(v / bc2) + eps);
}

// In place on every entry's f32 p, m, v; g read-only. `norm` (nullable) points at the global
// gradient norm; with max_norm > 0 every gradient is multiplied by the clipping factor.
extern "C" __global__ void mt_adamw(const TensorEntry* __restrict__ t, u32 count, u64 chunks, float lr, float b1,
                                    float b2, float eps, float wd, float bc1, float bc2,
                                    const float* __restrict__ norm, float max_norm) {
    float s = 1.0f;
    if (norm && max_norm > 0.0f) s = fminf(fmaxf(max_norm / (norm[0] + 1e-6f), 0.0f), 1.0f);
    for_each_chunk(t, count, chunks, [&](const TensorEntry& e, u64 lo, u64 hi) {
        const float w = e.decay ? wd : 0.0f;
        const u64 nvec = (hi - lo) / 4;
        for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) {
            const u64 at = lo + 4 * i;
            float vp[4], vg[4], vm[4], vv[4];
            load_vec(e.p + at, vp);
            load_vec(e.g + at, vg);
            load_vec(e.m + at, vm);
            load_vec(e.v + at, vv);
#pragma unroll
            for (int j = 0; j < 4; ++j) adamw_one(vp[j], vg[j] * s, vm[j], vv[j], lr, b1, b2, eps, w, bc1, bc2);
            store_vec(e.p + at, vp);
            store_vec(e.m + at, vm);
            store_vec(e.v + at, vv);
        }
        for (u64 i = lo + 4 * nvec + threadIdx.x; i < hi; i += blockDim.x)
            adamw_one(e.p[i], e.g[i] * s, e.m[i], e.v[i], lr, b1, b2, eps, w, bc1, bc2);
    });
}

// partial[blockIdx.x] = this block's share of the sum of every entry's g^2. The chunks a block
// owns depend only on the grid, so the sum is the same on every run.
extern "C" __global__ void mt_sumsq_partial(const TensorEntry* __restrict__ t, u32 count, u64 chunks,
                                            float* __restrict__ partial) {
    float acc = 0.0f;
    for_each_chunk(t, count, chunks, [&](const TensorEntry& e, u64 lo, u64 hi) {
        const u64 nvec = (hi - lo) / 4;
        for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) {
            float x[4];
            load_vec(e.g + lo + 4 * i, x);
            acc += x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
        }
        for (u64 i = lo + 4 * nvec + threadIdx.x; i < hi; i += blockDim.x) acc += e.g[i] * e.g[i];
    });
    acc = row_reduce(acc, SumOp());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: out[0] = sqrt(sum(partial)).
extern "C" __global__ void norm_finish(const float* __restrict__ partial, u32 count, float* __restrict__ out) {
    float acc = 0.0f;
    for (u32 i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
    acc = row_reduce(acc, SumOp());
    if (threadIdx.x == 0) out[0] = sqrtf(acc);
}

// acc[i] += x[i] over every entry (p the accumulator, g the addend): gradient accumulation
// over micro-batches, in place.
extern "C" __global__ void mt_add(const TensorEntry* __restrict__ t, u32 count, u64 chunks) {
    for_each_chunk(t, count, chunks, [&](const TensorEntry& e, u64 lo, u64 hi) {
        const u64 nvec = (hi - lo) / 4;
        for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) {
            const u64 at = lo + 4 * i;
            float a[4], x[4];
            load_vec(e.p + at, a);
            load_vec(e.g + at, x);
#pragma unroll
            for (int j = 0; j < 4; ++j) a[j] += x[j];
            store_vec(e.p + at, a);
        }
        for (u64 i = lo + 4 * nvec + threadIdx.x; i < hi; i += blockDim.x) e.p[i] += e.g[i];
    });
}
