// short_conv.cu: causal depthwise convolution along time, x [B, T, C], weights [C, K] (tap K - 1
// on the current step), bias [C]; forward and backward (see `Backend::short_conv`).
//
// Memory-bound, so each kernel reads its inputs from memory once. A thread owns a group of V
// channels, one 16-byte vector of them where C allows (V = 16 / sizeof(T); else V = 1), for the
// whole launch, so it loads its weights once; it walks runs of CONV_STEPS consecutive steps of
// one sequence with the K - 1 steps the run's first output needs held beside them in registers,
// so a step's input is loaded once per run, not once per tap (the halo of K - 1 steps a run
// shares with its neighbour is read twice, the second time mostly from L2). Blocks are WG_X channel groups
// (a warp reads WG_X contiguous vectors of one step) by WG_Y runs.
//
// The weight gradient sums over B·T: each thread over its runs in registers, the block's WG_Y
// threads of a channel group through shared memory, into one partial per block and weight; a
// finishing kernel adds the blocks' partials (no atomics, so the sums are deterministic).
#include "common.cuh"

// Most taps; matches MAX_TAPS in src/kernels/short_conv.rs.
#define MAX_TAPS 8
// Steps of a run; matches CONV_STEPS there.
#define CONV_STEPS 8
// Block: WG_X channel groups by WG_Y runs; matches WG_X, WG_Y there.
#define WG_X 32
#define WG_Y 8

__device__ __forceinline__ u32 raw_bits(const float* p) { return __float_as_uint(*p); }
__device__ __forceinline__ u32 raw_bits(const bf16* p) { return p->bits; }

// V consecutive channels of one step as loaded: a 16-byte vector (VEC) or one element, kept in
// their storage bits (4 registers for a vector) and widened to f32 where used, so that a run's
// window of steps stays small in registers.
template <typename T, bool VEC>
struct Pack {
    static constexpr int V = VEC ? 16 / sizeof(T) : 1;
    u32 w[VEC ? 4 : 1];

    __device__ __forceinline__ void load(const T* p) {
        if constexpr (VEC) {
            const uint4 r = *reinterpret_cast<const uint4*>(p);
            w[0] = r.x;
            w[1] = r.y;
            w[2] = r.z;
            w[3] = r.w;
        } else {
            w[0] = raw_bits(p);
        }
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < (VEC ? 4 : 1); ++i) w[i] = 0;
    }
    // Step t of the sequence at p (channel-group base at step 0), zeros outside [0, t_len).
    __device__ __forceinline__ void load_step(const T* p, int t, u32 t_len, u32 c) {
        if (t >= 0 && t < (int)t_len) {
            load(p + (u64)t * c);
        } else {
            zero();
        }
    }
    __device__ __forceinline__ float at(int e) const {
        if constexpr (sizeof(T) == 4) {
            return __uint_as_float(w[e]);
        } else {
            const u32 b = w[VEC ? e >> 1 : 0];
            return __uint_as_float((e & 1) ? b & 0xffff0000u : b << 16);
        }
    }
};

template <typename T, bool VEC>
__device__ __forceinline__ void store_pack(T* p, const float (&v)[Pack<T, VEC>::V]) {
    if constexpr (VEC) {
        store_vec(p, v);
    } else {
        *p = from_float<T>(v[0]);
    }
}

// The run loop every kernel here shares: f(seq, t0) for each run of this
// thread (sequence seq, steps t0 .. t0 + CONV_STEPS - 1, cut at t_len). Runs are numbered over
// [B, runs per sequence]; a block's WG_Y rows of threads take consecutive ones.
template <typename F>
__device__ __forceinline__ void for_each_run(u32 bt, u32 t_len, F f) {
    const u32 runs = (t_len + CONV_STEPS - 1) / CONV_STEPS, total = bt / t_len * runs;
    for (u32 r = blockIdx.y * WG_Y + threadIdx.y; r < total; r += gridDim.y * WG_Y) f(r / runs, r % runs * CONV_STEPS);
}

// out[b, t, c] = bias[c] + sum_j w[c, j] in[b, t - K + 1 + j, c] (forward: in = x, out = y), or
// without BACK's bias, out[b, s, c] = sum_j w[c, j] in[b, s + K - 1 - j, c] (dx from in = dy):
// zeros outside the sequence either way.
template <typename T, bool VEC, bool BACK>
struct Conv {
    const T* __restrict__ in;
    const T* __restrict__ w;
    const T* __restrict__ bias;
    T* __restrict__ out;
    u32 bt, t_len, c;

    template <int K>
    __device__ void run() const {
        constexpr int V = Pack<T, VEC>::V, L = CONV_STEPS;
        const u32 ch = (blockIdx.x * WG_X + threadIdx.x) * V;
        if (ch >= c) return;  // no barriers below
        float wt[K][V], b[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
            b[e] = BACK ? 0.0f : to_float(bias[ch + e]);
#pragma unroll
            for (int j = 0; j < K; ++j) wt[j][e] = to_float(w[(ch + e) * K + j]);
        }
        for_each_run(bt, t_len, [&](u32 seq, u32 t0) {
            const u64 base = (u64)seq * t_len * c + ch;
            // win[i] is step t0 - (K - 1) + i forward, t0 + i backward.
            Pack<T, VEC> win[L + K - 1];
#pragma unroll
            for (int i = 0; i < L + K - 1; ++i) win[i].load_step(in + base, (int)t0 + i - (BACK ? 0 : K - 1), t_len, c);
#pragma unroll
            for (int s = 0; s < L; ++s) {
                if (t0 + s >= t_len) break;
                float o[V];
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    o[e] = b[e];
#pragma unroll
                    for (int j = 0; j < K; ++j) o[e] = fmaf(wt[j][e], win[BACK ? s + K - 1 - j : s + j].at(e), o[e]);
                }
                store_pack<T, VEC>(out + base + (u64)(t0 + s) * c, o);
            }
        });
    }
};

// partial[blockIdx.y, c, j] = this block's sum of dy[b, t, c] x[b, t - K + 1 + j, c] (j < K) and
// of dy[b, t, c] (j = K), over its threads' runs; every block writes all its channels' slots.
template <typename T, bool VEC>
struct WeightGrad {
    const T* __restrict__ x;
    const T* __restrict__ dy;
    float* __restrict__ partial;
    u32 bt, t_len, c;

    template <int K>
    __device__ void run() const {
        constexpr int V = Pack<T, VEC>::V, L = CONV_STEPS;
        const u32 ch = (blockIdx.x * WG_X + threadIdx.x) * V;
        const bool active = ch < c;
        float acc[K + 1][V];
#pragma unroll
        for (int j = 0; j <= K; ++j)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[j][e] = 0.0f;
        if (active) {
            for_each_run(bt, t_len, [&](u32 seq, u32 t0) {
                const u64 base = (u64)seq * t_len * c + ch;
                Pack<T, VEC> win[L + K - 1], g[L];
#pragma unroll
                for (int i = 0; i < L + K - 1; ++i) win[i].load_step(x + base, (int)t0 + i - (K - 1), t_len, c);
#pragma unroll
                for (int s = 0; s < L; ++s) g[s].load_step(dy + base, (int)(t0 + s), t_len, c);
#pragma unroll
                for (int s = 0; s < L; ++s)
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const float gv = g[s].at(e);
                        acc[K][e] += gv;
#pragma unroll
                        for (int j = 0; j < K; ++j) acc[j][e] = fmaf(gv, win[s + j].at(e), acc[j][e]);
                    }
            });
        }
        __shared__ float part[WG_Y * WG_X * V];
        float* own = part + (threadIdx.y * WG_X + threadIdx.x) * V;
#pragma unroll
        for (int j = 0; j <= K; ++j) {
#pragma unroll
            for (int e = 0; e < V; ++e) own[e] = acc[j][e];
            __syncthreads();
            if (threadIdx.y == 0 && active) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    float tot = 0.0f;
                    for (int y = 0; y < WG_Y; ++y) tot += part[(y * WG_X + threadIdx.x) * V + e];
                    partial[((u64)blockIdx.y * c + ch + e) * (K + 1) + j] = tot;
                }
            }
            __syncthreads();
        }
    }
};

// dw [C, K] and dbias [C] of the data's dtype from the `splits` blocks' partials [splits, C, K + 1].
template <typename T>
__device__ void conv_backward_finish(const float* __restrict__ partial, T* __restrict__ dw, T* __restrict__ db,
                                     u32 splits, u32 c, u32 k) {
    const u32 n = c * (k + 1);
    for (u32 idx = global_thread(); idx < n; idx += grid_threads()) {
        float s = 0.0f;
        for (u32 sp = 0; sp < splits; ++sp) s += partial[(u64)sp * n + idx];
        const u32 ch = idx / (k + 1), j = idx % (k + 1);
        if (j == k) {
            db[ch] = from_float<T>(s);
        } else {
            dw[ch * k + j] = from_float<T>(s);
        }
    }
}

// Each kernel in a vector and a scalar variant (suffix _scalar, as the row kernels' are named),
// and for each tap count K from 1 to MAX_TAPS (suffix _kK): a kernel gets the registers its
// largest path needs, and one kernel for every K ran K = 4 with K = 8's (ptxas for sm_90a: 210
// registers a thread in the bf16 forward against 128, one block of 256 an SM instead of two).
// The launch bounds hold every kernel to two blocks an SM (128 registers): K <= 4 fits without
// spilling (ptxas: 8 bytes in the bf16 weight gradient), K = 8 spills some of its window to L1.
#define CONV_KERNELS(T, SUFFIX, VEC, VARIANT, K)                                                                   \
    extern "C" __global__ void __launch_bounds__(WG_X * WG_Y, 2) short_conv_forward_##SUFFIX##VARIANT##_k##K(      \
        const T* x, const T* w, const T* bias, T* y, u32 bt, u32 t, u32 c) {                                       \
        Conv<T, VEC, false>{x, w, bias, y, bt, t, c}.run<K>();                                                     \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(WG_X * WG_Y, 2) short_conv_backward_x_##SUFFIX##VARIANT##_k##K(   \
        const T* w, const T* dy, T* dx, u32 bt, u32 t, u32 c) {                                                    \
        Conv<T, VEC, true>{dy, w, nullptr, dx, bt, t, c}.run<K>();                                                 \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(WG_X * WG_Y, 2) short_conv_backward_w_##SUFFIX##VARIANT##_k##K(   \
        const T* x, const T* dy, float* partial, u32 bt, u32 t, u32 c) {                                           \
        WeightGrad<T, VEC>{x, dy, partial, bt, t, c}.run<K>();                                                     \
    }
#define CONV_TAPS(T, SUFFIX, VEC, VARIANT)  \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 1) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 2) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 3) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 4) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 5) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 6) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 7) \
    CONV_KERNELS(T, SUFFIX, VEC, VARIANT, 8)

CONV_TAPS(float, f32, true, )
CONV_TAPS(float, f32, false, _scalar)
CONV_TAPS(bf16, bf16, true, )
CONV_TAPS(bf16, bf16, false, _scalar)

#define FINISH_KERNEL(T, SUFFIX)                                                                                   \
    extern "C" __global__ void short_conv_backward_finish_##SUFFIX(const float* partial, T* dw, T* db, u32 splits, \
                                                                   u32 c, u32 k) {                                 \
        conv_backward_finish<T>(partial, dw, db, splits, c, k);                                                    \
    }

FINISH_KERNEL(float, f32)
FINISH_KERNEL(bf16, bf16)
