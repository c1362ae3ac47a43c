// decode.cu: one decoding step of each mixer, for B rows at once (equations and layouts: mod.rs
// beside this file; the CPU forms in cpu.rs compute the same).
//
// - mlstm_step_T and gated_delta_step_T: one block per (row, head). The block first runs the
//   short convolution and SiLU on its head's q, k, v channels of the step's pre-convolution row
//   (rounded to T, as the chunkwise path stores them) and writes those channels of the next
//   convolution tail; then one thread per value column updates the column of the state [Dk, Dv]
//   and reads the output from it. The state is f32 and read once and written once: a step is
//   bound by those bytes, so nothing is staged in shared memory beyond q, k and v.
// - attend_part_T, attend_join_T: one query per (row, head) against the n cached keys and values
//   of its kv head (the window's keys, RoPE already applied), in two launches. One block for
//   every (row, head) would leave most of the GPU idle at a small batch and read its n keys one
//   after another, so the keys are split into ranges of `per` (flash-decoding): attend_part has
//   a block per (row, head, range), keys in tiles of DECODE_TILE scores in shared memory, a warp
//   per key (its lanes read the key's contiguous elements), softmax online across tiles, the
//   values summed by groups of threads (each thread one element of the head dim); it writes its
//   range's largest score, sum of exponentials and unnormalised output. attend_join, a block per
//   (row, head), rescales the ranges to their common largest score and divides.
// - rla_step_T: RAttention's linear branch, one block per (row, kv head): phi of the key leaving
//   the window and of the kv head's q heads into shared memory, then one thread per column of
//   the state [2D, D] adds phi(k) v to it and sums that column against each q head's phi(q).
//   The state is read once and written once, as in the recurrent steps.
// - split_rope_T: attention's step input, its qkv row split into q, k and v with RoPE applied to
//   q and k at the step's position, in one pass.
#include "common.cuh"

// Threads of every decoding kernel's block; matches DECODE_THREADS in cuda.rs.
#define DECODE_THREADS 256
// Scores held in shared memory per tile of keys; matches DECODE_TILE in cuda.rs.
#define DECODE_TILE 1024

// Channel `ch` of silu(short_conv) at the step: the K - 1 tail inputs [B, K - 1, C], then the
// step's x [B, C]; weights [C, K], tap K - 1 on the step. Writes the channel's next tail (the
// last K - 1 inputs) and returns the output rounded to T.
template <typename T>
__device__ __forceinline__ float conv_channel(const T* x, const T* w, const T* tail, T* tail_out, u32 b, u32 c,
                                              u32 taps, u32 ch) {
    const u64 row = (u64)b * (taps - 1);
    const float now = to_float(x[(u64)b * c + ch]);
    float sum = to_float(w[(u64)ch * taps + taps - 1]) * now;
    for (u32 j = 0; j + 1 < taps; ++j) {
        const float in = to_float(tail[(row + j) * c + ch]);
        sum += to_float(w[(u64)ch * taps + j]) * in;
        tail_out[(row + j) * c + ch] = j + 2 < taps ? tail[(row + j + 1) * c + ch] : x[(u64)b * c + ch];
    }
    return to_float(Convert<T>::from(sum * sigmoid(sum)));
}

// q, k (Dk each) and v (Dv) of head h into s (f32), from the pre-convolution row laid out as
// [q of every head, k of every head, v of every head].
template <typename T>
__device__ __forceinline__ void conv_heads(const T* x, const T* w, const T* tail, T* tail_out, u32 b, u32 h,
                                           u32 heads, u32 dk, u32 dv, u32 taps, float* s) {
    const u32 c = heads * (2 * dk + dv);
    for (u32 i = threadIdx.x; i < 2 * dk + dv; i += blockDim.x) {
        const u32 ch = i < dk ? h * dk + i : i < 2 * dk ? heads * dk + h * dk + (i - dk) : 2 * heads * dk + h * dv + (i - 2 * dk);
        s[i] = conv_channel(x, w, tail, tail_out, b, c, taps, ch);
    }
    __syncthreads();
}

// Sum over the block of each thread's value, returned to all.
__device__ __forceinline__ float block_sum(float v) { return row_reduce(v, SumOp()); }

template <typename T>
__device__ void gated_delta_step(const T* x, const T* w, const T* tail, const T* beta, const T* g, const float* s,
                                 T* out, T* tail_out, float* s_out, u32 heads, u32 dk, u32 dv, u32 taps) {
    extern __shared__ float sm[];
    const u32 bh = blockIdx.x, b = bh / heads, h = bh % heads;
    float *q = sm, *k = sm + dk, *v = sm + 2 * dk;
    conv_heads(x, w, tail, tail_out, b, h, heads, dk, dv, taps, sm);
    float qq = 0.0f, kk = 0.0f;
    for (u32 i = threadIdx.x; i < dk; i += blockDim.x) {
        qq += q[i] * q[i];
        kk += k[i] * k[i];
    }
    // L2-normalized q (then scaled by 1/sqrt(Dk)) and k, as the chunkwise kernels normalize.
    const float qs = rsqrtf(block_sum(qq) + 1e-6f) * rsqrtf((float)dk), ks = rsqrtf(block_sum(kk) + 1e-6f);
    const float a = expf(to_float(g[bh])), bt = to_float(beta[bh]);
    const float* S = s + (u64)bh * dk * dv;
    float* So = s_out + (u64)bh * dk * dv;
    for (u32 j = threadIdx.x; j < dv; j += blockDim.x) {
        float kS = 0.0f;
        for (u32 i = 0; i < dk; ++i) kS += k[i] * S[(u64)i * dv + j];
        // The delta u = beta (v - a S^T k); the column becomes a S + k u.
        const float u = bt * (v[j] - a * ks * kS);
        float o = 0.0f;
        for (u32 i = 0; i < dk; ++i) {
            const float next = a * S[(u64)i * dv + j] + ks * k[i] * u;
            So[(u64)i * dv + j] = next;
            o += q[i] * next;
        }
        out[(u64)bh * dv + j] = Convert<T>::from(o * qs);
    }
}

template <typename T>
__device__ void mlstm_step(const T* x, const T* w, const T* tail, const T* ig, const T* fg, const float* c,
                           const float* n, const float* m, T* out, T* tail_out, float* c_out, float* n_out,
                           float* m_out, u32 heads, u32 dk, u32 dv, u32 taps, float eps) {
    extern __shared__ float sm[];
    const u32 bh = blockIdx.x, b = bh / heads, h = bh % heads;
    float *q = sm, *k = sm + dk, *v = sm + 2 * dk;
    conv_heads(x, w, tail, tail_out, b, h, heads, dk, dv, taps, sm);
    const float i_t = to_float(ig[bh]), f_t = to_float(fg[bh]), m0 = m[bh];
    // log_sigmoid(f), stable for either sign.
    const float lf = fminf(f_t, 0.0f) - log1pf(expf(-fabsf(f_t)));
    const float m1 = fmaxf(lf + m0, i_t), decay = expf(lf + m0 - m1), input = expf(i_t - m1);
    const float qs = rsqrtf((float)dk);
    float qn = 0.0f;
    for (u32 i = threadIdx.x; i < dk; i += blockDim.x) {
        const float next = decay * n[(u64)bh * dk + i] + input * k[i];
        n_out[(u64)bh * dk + i] = next;
        qn += q[i] * next;
    }
    qn = block_sum(qn) * qs;
    if (threadIdx.x == 0) m_out[bh] = m1;
    const float den = fmaxf(fabsf(qn), expf(-m1)) + eps;
    const float* C = c + (u64)bh * dk * dv;
    float* Co = c_out + (u64)bh * dk * dv;
    for (u32 j = threadIdx.x; j < dv; j += blockDim.x) {
        const float iv = input * v[j];
        float o = 0.0f;
        for (u32 i = 0; i < dk; ++i) {
            const float next = decay * C[(u64)i * dv + j] + k[i] * iv;
            Co[(u64)i * dv + j] = next;
            o += q[i] * next;
        }
        out[(u64)bh * dv + j] = Convert<T>::from(o * qs / den);
    }
}

// A range's partial softmax: its largest score, its sum of exp(score - largest), then the D
// sums of exp(score - largest) v, in `part` at (row, head, range).
template <typename T>
__device__ void attend_part(const T* q, const T* k, const T* v, float* part, u32 heads, u32 kv_heads, u32 d,
                            u32 slots, u32 n, u32 per, float scale) {
    extern __shared__ float sm[];
    float *qs = sm, *p = sm + d, *acc = p + DECODE_TILE;
    const u32 bh = blockIdx.x, b = bh / heads, h = bh % heads, hk = h / (heads / kv_heads);
    const u32 lo = blockIdx.y * per, hi = min(n, lo + per);
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (u32 e = threadIdx.x; e < d; e += blockDim.x) qs[e] = to_float(q[(u64)bh * d + e]);
    // Thread (g, e) sums element e of the values of keys g, g + groups, ...
    const u32 groups = blockDim.x / d, e = threadIdx.x % d, g = threadIdx.x / d;
    float mx = neg_inf(), l = 0.0f, sum = 0.0f;
    for (u32 t0 = lo; t0 < hi; t0 += DECODE_TILE) {
        const u32 len = min(hi - t0, (u32)DECODE_TILE);
        __syncthreads();  // qs written; the previous tile's p read
        for (u32 t = warp; t < len; t += warps) {
            const T* key = k + (((u64)b * slots + t0 + t) * kv_heads + hk) * d;
            float dot = 0.0f;
            for (u32 i = lane; i < d; i += 32) dot += qs[i] * to_float(key[i]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) dot += shfl_xor(dot, o);
            if (lane == 0) p[t] = dot * scale;
        }
        __syncthreads();
        float tmax = neg_inf();
        for (u32 t = threadIdx.x; t < len; t += blockDim.x) tmax = fmaxf(tmax, p[t]);
        const float next = fmaxf(mx, row_reduce(tmax, MaxOp()));
        const float rescale = expf(mx - next);
        float part_l = 0.0f;
        for (u32 t = threadIdx.x; t < len; t += blockDim.x) {
            p[t] = expf(p[t] - next);
            part_l += p[t];
        }
        l = l * rescale + block_sum(part_l);  // block_sum synchronizes: every p[t] is written
        mx = next;
        sum *= rescale;
        if (g < groups)
            for (u32 t = g; t < len; t += groups) sum += p[t] * to_float(v[(((u64)b * slots + t0 + t) * kv_heads + hk) * d + e]);
    }
    if (g < groups) acc[g * d + e] = sum;
    __syncthreads();
    float* out = part + ((u64)bh * gridDim.y + blockIdx.y) * (d + 2);
    if (threadIdx.x == 0) {
        out[0] = mx;
        out[1] = l;
    }
    for (u32 i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
        for (u32 j = 0; j < groups; ++j) o += acc[j * d + i];
        out[2 + i] = o;
    }
}

// The output of (row, head) from its `ranges` partial softmaxes: each rescaled to the largest
// score of them all, summed, and divided by the rescaled sum of exponentials.
template <typename T>
__device__ void attend_join(const float* part, T* out, u32 d, u32 ranges) {
    const u32 bh = blockIdx.x;
    const float* r = part + (u64)bh * ranges * (d + 2);
    float mx = neg_inf();
    for (u32 j = 0; j < ranges; ++j) mx = fmaxf(mx, r[j * (d + 2)]);
    float l = 0.0f;
    for (u32 j = 0; j < ranges; ++j) l += r[j * (d + 2) + 1] * expf(r[j * (d + 2)] - mx);
    for (u32 i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
        for (u32 j = 0; j < ranges; ++j) o += r[j * (d + 2) + 2 + i] * expf(r[j * (d + 2)] - mx);
        out[(u64)bh * d + i] = Convert<T>::from(o / l);
    }
}

// phi(x) = [softmax(x), softmax(-x)] of one head's D elements into f (2D), each feature rounded
// to T as the pieces path computes phi in the data's dtype. Every thread of the block calls it.
template <typename T>
__device__ void phi(const T* x, u32 d, float* f) {
    // The largest of x and of -x, each half's softmax shift.
    float hi = neg_inf(), nlo = neg_inf();
    for (u32 i = threadIdx.x; i < d; i += blockDim.x) {
        const float e = to_float(x[i]);
        hi = fmaxf(hi, e);
        nlo = fmaxf(nlo, -e);
    }
    hi = row_reduce(hi, MaxOp());
    nlo = row_reduce(nlo, MaxOp());
    float up = 0.0f, down = 0.0f;
    for (u32 i = threadIdx.x; i < d; i += blockDim.x) {
        const float e = to_float(x[i]);
        up += expf(e - hi);
        down += expf(-e - nlo);
    }
    up = block_sum(up);
    down = block_sum(down);
    for (u32 i = threadIdx.x; i < d; i += blockDim.x) {
        const float e = to_float(x[i]);
        f[i] = to_float(Convert<T>::from(expf(e - hi) / up));
        f[d + i] = to_float(Convert<T>::from(expf(-e - nlo) / down));
    }
}

template <typename T>
__device__ void rla_step(const T* q, const T* k, const T* v, const float* s, T* out, float* s_out, u32 heads,
                         u32 kv_heads, u32 d, u32 slots, u32 slot) {
    extern __shared__ float sm[];
    const u32 group = heads / kv_heads, f = 2 * d;
    const u32 bk = blockIdx.x, b = bk / kv_heads, hk = bk % kv_heads;
    // phi(k) [2D], phi(q) [group, 2D], v [D], the output sums [group, D] (column j: thread j's).
    float *fk = sm, *fq = fk + f, *vs = fq + group * f, *acc = vs + d;
    const u64 at = (((u64)b * slots + slot) * kv_heads + hk) * d;
    phi(k + at, d, fk);
    for (u32 g = 0; g < group; ++g) phi(q + ((u64)b * heads + hk * group + g) * d, d, fq + g * f);
    for (u32 e = threadIdx.x; e < d; e += blockDim.x) vs[e] = to_float(v[at + e]);
    __syncthreads();
    const float* S = s + (u64)bk * f * d;
    float* So = s_out + (u64)bk * f * d;
    for (u32 j = threadIdx.x; j < d; j += blockDim.x) {
        for (u32 g = 0; g < group; ++g) acc[g * d + j] = 0.0f;
        for (u32 i = 0; i < f; ++i) {
            const float next = S[(u64)i * d + j] + fk[i] * vs[j];
            So[(u64)i * d + j] = next;
            for (u32 g = 0; g < group; ++g) acc[g * d + j] += fq[g * f + i] * next;
        }
        for (u32 g = 0; g < group; ++g) out[((u64)b * heads + hk * group + g) * d + j] = Convert<T>::from(acc[g * d + j]);
    }
}

// The step's qkv row [B, (H + 2 Hkv) D] (q heads, then k heads, then v heads) into q [B, H, D]
// and k, v [B, Hkv, D], q and k rotated at position pos as rope.cu rotates them (the angle in
// f64, its cosine and sine rounded to f32), v copied: one thread per pair (i, i + D/2) of a
// head, where split and rope took five launches and a table of one position.
template <typename T>
__device__ void split_rope(const T* __restrict__ qkv, T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                           u32 rows, u32 heads, u32 kv_heads, u32 half, i64 pos, double theta) {
    const u32 all = heads + 2 * kv_heads;
    const u64 pairs = (u64)rows * all * half;
    for (u64 i = global_thread(); i < pairs; i += grid_threads()) {
        const u32 e = (u32)(i % half), j = (u32)(i / half % all);
        const u64 b = i / half / all, from = i / half * 2 * half;
        float x1 = to_float(qkv[from + e]), x2 = to_float(qkv[from + e + half]);
        if (j < heads + kv_heads) {
            const double inv_freq = pow(theta, -(double)(2 * e) / (double)(2 * half));
            double sd, cd;
            sincos((double)pos * inv_freq, &sd, &cd);
            const float c = (float)cd, s = (float)sd, a = x1, bb = x2;
            x1 = a * c - bb * s;
            x2 = bb * c + a * s;
        }
        T* y = j < heads              ? q + (b * heads + j) * 2 * half
               : j < heads + kv_heads ? k + (b * kv_heads + (j - heads)) * 2 * half
                                      : v + (b * kv_heads + (j - heads - kv_heads)) * 2 * half;
        y[e] = Convert<T>::from(x1);
        y[e + half] = Convert<T>::from(x2);
    }
}

#define DECODE_KERNELS(T, SUFFIX)                                                                                 \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        gated_delta_step_##SUFFIX(const T* x, const T* w, const T* tail, const T* beta, const T* g,              \
                                  const float* s, T* out, T* tail_out, float* s_out, u32 heads, u32 dk, u32 dv,  \
                                  u32 taps) {                                                                    \
        gated_delta_step<T>(x, w, tail, beta, g, s, out, tail_out, s_out, heads, dk, dv, taps);                  \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        mlstm_step_##SUFFIX(const T* x, const T* w, const T* tail, const T* ig, const T* fg, const float* c,     \
                            const float* n, const float* m, T* out, T* tail_out, float* c_out, float* n_out,     \
                            float* m_out, u32 heads, u32 dk, u32 dv, u32 taps, float eps) {                      \
        mlstm_step<T>(x, w, tail, ig, fg, c, n, m, out, tail_out, c_out, n_out, m_out, heads, dk, dv, taps,     \
                      eps);                                                                                      \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        attend_part_##SUFFIX(const T* q, const T* k, const T* v, float* part, u32 heads, u32 kv_heads, u32 d,    \
                             u32 slots, u32 n, u32 per, float scale) {                                           \
        attend_part<T>(q, k, v, part, heads, kv_heads, d, slots, n, per, scale);                                 \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        attend_join_##SUFFIX(const float* part, T* out, u32 d, u32 ranges) {                                     \
        attend_join<T>(part, out, d, ranges);                                                                    \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        rla_step_##SUFFIX(const T* q, const T* k, const T* v, const float* s, T* out, float* s_out, u32 heads,   \
                          u32 kv_heads, u32 d, u32 slots, u32 slot) {                                            \
        rla_step<T>(q, k, v, s, out, s_out, heads, kv_heads, d, slots, slot);                                    \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(DECODE_THREADS)                                                 \
        split_rope_##SUFFIX(const T* qkv, T* q, T* k, T* v, u32 rows, u32 heads, u32 kv_heads, u32 half,        \
                            i64 pos, double theta) {                                                             \
        split_rope<T>(qkv, q, k, v, rows, heads, kv_heads, half, pos, theta);                                    \
    }

DECODE_KERNELS(float, f32)
DECODE_KERNELS(bf16, bf16)
