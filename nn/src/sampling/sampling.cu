// sampling.cu: the next token of each row of logits, drawn at a temperature with top-k and top-p
// cuts (the spec, and the CPU form the kernel is held to: nn/src/sampling/mod.rs). A block of
// SAMPLE_THREADS per row. The tokens are ranked by a 64-bit key (the logit's bits made ordered,
// then the index reversed: ties go to the lower index); the top-k cut, the nucleus and the draw
// are each a radix select over the keys, eight passes of eight bits, finding the largest key at
// which the run of keys from the top reaches a weight. Weights are integers (32 fractional bits),
// so the block's sums, in whatever order its threads add them, are the CPU's sums exactly.
#include "common.cuh"

#define SAMPLE_THREADS 1024

__device__ __forceinline__ u64 sample_key(float logit, u32 index) {
    const u32 bits = __float_as_uint(logit);
    const u32 ordered = (bits >> 31) ? ~bits : (bits | 0x80000000u);
    return ((u64)ordered << 32) | (u64)(0xffffffffu - index);
}

// A kept token's weight: exp((logit - top) / temperature) with 32 fractional bits.
__device__ __forceinline__ u64 sample_weight(float logit, float top, float temperature) {
    return (u64)(expf((logit - top) / temperature) * 4294967296.0f);
}

// The sum of weigh(i) over the row's keys >= floor, in every thread.
template <typename T, typename Weigh>
__device__ u64 sample_sum(const T* row, u32 v, u64 floor, Weigh weigh, u64* slot) {
    if (threadIdx.x == 0) *slot = 0;
    __syncthreads();
    u64 sum = 0;
    for (u32 i = threadIdx.x; i < v; i += blockDim.x)
        if (sample_key(to_float(row[i]), i) >= floor) sum += weigh(i);
    atomicAdd(slot, sum);
    __syncthreads();
    const u64 total = *slot;
    __syncthreads();
    return total;
}

// The largest key K >= floor such that the keys from K up to the top (those >= floor) weigh at
// least t (t >= 1, at most their whole weight), in every thread. Each pass fixes eight more bits
// of K: it weighs the keys that share the bits fixed so far by their next eight, and walks those
// from the top until the weight reaches what is left of t.
template <typename T, typename Weigh>
__device__ u64 sample_select(const T* row, u32 v, u64 floor, u64 t, Weigh weigh, u64* hist, u64* chosen) {
    u64 prefix = 0, fixed = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (u32 d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
        __syncthreads();
        for (u32 i = threadIdx.x; i < v; i += blockDim.x) {
            const u64 key = sample_key(to_float(row[i]), i);
            if (key < floor || (key & fixed) != prefix) continue;
            const u64 w = weigh(i);
            if (w != 0) atomicAdd(hist + ((key >> shift) & 255), w);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 above = 0;
            u32 d = 255;
            while (d > 0 && above + hist[d] < t) above += hist[d--];
            t -= above;
            *chosen = prefix | ((u64)d << shift);
        }
        __syncthreads();
        prefix = *chosen;
        fixed |= (u64)255 << shift;
    }
    return prefix;
}

template <typename T>
__device__ void sample(const T* __restrict__ logits, const u32* __restrict__ r, u32* __restrict__ out, u32 v,
                       u32 top_k, float top_p, float temperature) {
    __shared__ u64 hist[256];
    __shared__ u64 slots[2];
    const T* row = logits + (u64)blockIdx.x * v;

    // The top token: the largest key.
    if (threadIdx.x == 0) slots[0] = 0;
    __syncthreads();
    u64 best = 0;
    for (u32 i = threadIdx.x; i < v; i += blockDim.x) {
        const u64 key = sample_key(to_float(row[i]), i);
        best = key > best ? key : best;
    }
    atomicMax(slots, best);
    __syncthreads();
    const u32 first = 0xffffffffu - (u32)slots[0];
    const float top = to_float(row[first]);
    __syncthreads();

    const auto one = [](u32) -> u64 { return 1; };
    const auto weigh = [&](u32 i) -> u64 { return sample_weight(to_float(row[i]), top, temperature); };
    // Keys >= floor are kept: the first top_k, then the nucleus among them.
    u64 floor = 0;
    if (top_k != 0 && top_k < v) floor = sample_select(row, v, 0, top_k, one, hist, slots + 1);
    if (top_p < 1.0f) {
        const u64 total = sample_sum(row, v, floor, weigh, slots);
        u64 reach = (u64)ceil((double)top_p * (double)total);
        reach = reach < 1 ? 1 : (reach > total ? total : reach);
        if (total != 0) floor = sample_select(row, v, floor, reach, weigh, hist, slots + 1);
    }
    const u64 kept = sample_sum(row, v, floor, weigh, slots);
    u32 token = first;
    if (kept != 0) {
        // floor(r kept / 2^32): where in the kept weight the row's r falls.
        const u64 target = __umul64hi(kept, (u64)r[blockIdx.x] << 32);
        token = 0xffffffffu - (u32)sample_select(row, v, floor, target + 1, weigh, hist, slots + 1);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = token;
}

#define SAMPLE(NAME, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)                                   \
        sample_##NAME(const T* logits, const u32* r, u32* out, u32 v, u32 top_k, float top_p,      \
                      float temperature) {                                                         \
        sample<T>(logits, r, out, v, top_k, top_p, temperature);                                   \
    }
SAMPLE(f32, float)
SAMPLE(bf16, bf16)
