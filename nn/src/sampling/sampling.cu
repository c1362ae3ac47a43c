// sampling.cu: the next token of each row of logits, drawn at a temperature with top-k and top-p
// cuts (the spec, and the CPU form the kernel is held to: nn/src/sampling/mod.rs). A block of
// SAMPLE_THREADS per row. The tokens are ranked by a 64-bit key (the logit's bits made ordered,
// then the index reversed: ties go to the lower index). Weights are integers (32 fractional
// bits), so the block's sums, in whatever order its threads add them, are the CPU's sums exactly.
//
// Two ways to the token. Where the cuts leave at most SAMPLE_THREADS tokens (top-k of up to 1024,
// or a row that short), a radix select counts the row's keys to find the k-th largest, the kept
// tokens are gathered into shared memory and sorted there, one per thread, and the nucleus and the
// draw are a prefix sum over them: the whole row is read about ten times. Otherwise the top-k cut,
// the nucleus and the draw are each a radix select over the whole row, weighing its tokens.
// A radix select makes eight passes of eight bits, finding the largest key at which the run of
// keys from the top reaches a weight (a count, for top-k).
#include "common.cuh"

#define SAMPLE_THREADS 1024

__device__ __forceinline__ u64 sample_key(float logit, u32 index) {
    const u32 bits = __float_as_uint(logit);
    const u32 ordered = (bits >> 31) ? ~bits : (bits | 0x80000000u);
    return ((u64)ordered << 32) | (u64)(0xffffffffu - index);
}

// The token a key ranks: its low half holds the index reversed.
__device__ __forceinline__ u32 sample_token(u64 key) { return 0xffffffffu - (u32)key; }

// How much of `total` the nucleus must reach: ceil(top_p total), at least 1 and at most total.
__device__ __forceinline__ u64 sample_reach(float top_p, u64 total) {
    const u64 reach = (u64)ceil((double)top_p * (double)total);
    return reach < 1 ? 1 : (reach > total ? total : reach);
}

// floor(r kept / 2^32): where in the kept weight a row's r falls.
__device__ __forceinline__ u64 sample_target(u64 kept, u32 r) { return __umul64hi(kept, (u64)r << 32); }

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

// The largest key K such that the keys from K up to the top weigh at least t (t >= 1, at most
// their whole weight), in every thread. Each of eight passes fixes eight more bits of K:
// `weigh_bins(prefix, fixed, shift)` adds into `hist` the weight of the keys whose bits under
// `fixed` are `prefix`, binned by their eight bits at `shift`, and thread 0 walks the bins from
// the top until the weight reaches what is left of t.
template <typename W, typename WeighBins>
__device__ u64 sample_radix(u64 t, W* hist, u64* chosen, WeighBins weigh_bins) {
    u64 prefix = 0, fixed = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (u32 d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
        __syncthreads();
        weigh_bins(prefix, fixed, shift);
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

// sample_radix over the keys >= floor, each weighing weigh(i), in 64 bits.
template <typename T, typename Weigh>
__device__ u64 sample_select(const T* row, u32 v, u64 floor, u64 t, Weigh weigh, u64* hist, u64* chosen) {
    return sample_radix(t, hist, chosen, [&](u64 prefix, u64 fixed, int shift) {
        for (u32 i = threadIdx.x; i < v; i += blockDim.x) {
            const u64 key = sample_key(to_float(row[i]), i);
            if (key < floor || (key & fixed) != prefix) continue;
            const u64 w = weigh(i);
            if (w != 0) atomicAdd(hist + ((key >> shift) & 255), w);
        }
    });
}

// The t-th largest key of the row (1 <= t <= v), in every thread: sample_radix with every token
// weighing one, counted in 32 bits. The threads of a warp that fall in one bin add their count
// once (__match_any_sync): in the first passes nearly every key shares the few bins of the
// logits' exponents, and one add per token there would wait in line.
template <typename T>
__device__ u64 sample_kth(const T* row, u32 v, u64 t, u32* hist, u64* chosen) {
    return sample_radix(t, hist, chosen, [&](u64 prefix, u64 fixed, int shift) {
        // Every thread of the block takes as many turns, so that a warp meets whole.
        for (u32 base = 0; base < v; base += blockDim.x) {
            const u32 i = base + threadIdx.x;
            u32 bin = 256;
            if (i < v) {
                const u64 key = sample_key(to_float(row[i]), i);
                if ((key & fixed) == prefix) bin = (u32)(key >> shift) & 255;
            }
            const u32 peers = __match_any_sync(0xffffffffu, bin);
            if (bin != 256 && (threadIdx.x & 31) == (u32)(__ffs(peers) - 1)) atomicAdd(hist + bin, (u32)__popc(peers));
        }
    });
}

// The draw among the n (1 <= n <= SAMPLE_THREADS) tokens whose keys are at least floor: gathered
// into `keys`, sorted from the top (a bitonic sort, one key per thread), weighed, summed from the
// top (`sums`, a Hillis-Steele scan), then the nucleus and the draw are the first ranks whose sum
// reaches their mark. Returns the token in every thread.
template <typename T>
__device__ u32 sample_ranked(const T* row, u32 v, u32 n, u64 floor, float top, u32 first, float top_p,
                             float temperature, u32 r, u64* keys, u64* sums, u32* slot) {
    const u32 tid = threadIdx.x;
    keys[tid] = 0;  // below every key: an index is below 2^32 - 1, so its reversal is above 0
    if (tid == 0) *slot = 0;
    __syncthreads();
    for (u32 base = 0; base < v; base += blockDim.x) {
        const u32 i = base + tid;
        if (i < v) {
            const u64 key = sample_key(to_float(row[i]), i);
            if (key >= floor) keys[atomicAdd(slot, 1u)] = key;
        }
    }
    __syncthreads();
    for (u32 k = 2; k <= SAMPLE_THREADS; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            const u32 other = tid ^ j;
            if (other > tid) {
                const u64 a = keys[tid], b = keys[other];
                // Largest first within blocks of k whose bit k is clear, smallest first elsewhere.
                if (((tid & k) == 0) == (a < b)) {
                    keys[tid] = b;
                    keys[other] = a;
                }
            }
            __syncthreads();
        }
    }
    const u32 token = sample_token(keys[tid]);
    const u64 w = tid < n ? sample_weight(to_float(row[token]), top, temperature) : 0;
    sums[tid] = w;
    __syncthreads();
    for (u32 off = 1; off < SAMPLE_THREADS; off <<= 1) {
        const u64 add = tid >= off ? sums[tid - off] : 0;
        __syncthreads();
        sums[tid] += add;
        __syncthreads();
    }
    const u64 sum = sums[tid], total = sums[n - 1];
    // The run: up to the first rank whose sum reaches the nucleus's share of the total.
    if (tid == 0) *slot = n - 1;
    __syncthreads();
    if (top_p < 1.0f && total != 0 && tid < n && sum >= sample_reach(top_p, total)) atomicMin(slot, tid);
    __syncthreads();
    const u64 kept = sums[*slot];
    __syncthreads();
    if (kept == 0) return first;
    // The first rank past where the row's r falls.
    const u64 target = sample_target(kept, r);
    if (tid == 0) *slot = SAMPLE_THREADS;
    __syncthreads();
    if (tid < n && sum > target) atomicMin(slot, tid);
    __syncthreads();
    return sample_token(keys[*slot]);
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
    const u32 first = sample_token(slots[0]);
    const float top = to_float(row[first]);
    __syncthreads();

    // The tokens the top-k cut keeps; at most a block's threads, they are ranked in shared memory.
    const u32 n = top_k != 0 && top_k < v ? top_k : v;
    u32 token = first;
    if (n <= SAMPLE_THREADS) {
        __shared__ u64 keys[SAMPLE_THREADS], sums[SAMPLE_THREADS];
        __shared__ u32 counts[256], slot;
        const u64 floor = n < v ? sample_kth(row, v, n, counts, slots + 1) : 0;
        token = sample_ranked(row, v, n, floor, top, first, top_p, temperature, r[blockIdx.x], keys, sums, &slot);
    } else {
        const auto one = [](u32) -> u64 { return 1; };
        const auto weigh = [&](u32 i) -> u64 { return sample_weight(to_float(row[i]), top, temperature); };
        // Keys >= floor are kept: the first top_k, then the nucleus among them.
        u64 floor = 0;
        if (n < v) floor = sample_select(row, v, 0, n, one, hist, slots + 1);
        if (top_p < 1.0f) {
            const u64 total = sample_sum(row, v, floor, weigh, slots);
            if (total != 0) floor = sample_select(row, v, floor, sample_reach(top_p, total), weigh, hist, slots + 1);
        }
        const u64 kept = sample_sum(row, v, floor, weigh, slots);
        if (kept != 0) {
            const u64 target = sample_target(kept, r[blockIdx.x]);
            token = sample_token(sample_select(row, v, floor, target + 1, weigh, hist, slots + 1));
        }
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
