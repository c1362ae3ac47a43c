// attention.cu: causal sliding-window attention (query t sees keys t - window < s <= t; a
// window >= T is full causal attention), flash-attention style, on bf16 [B, T, H, D] q and
// [B, T, Hkv, D] k, v (grouped queries: q head h reads kv head h / (H / Hkv)).
//
// Tensor cores, bf16 in and f32 accumulate, in one of two ways chosen at compile time:
// - on Hopper (NVRTC targets sm_90a), wgmma: a warpgroup multiplies 64-row tiles with its
//   operands read straight from shared memory (wgmma.cuh), so a K, V, Q or dO tile is read once
//   per product, not once per warp;
// - elsewhere, mma.sync m16n8k16 with fragments fed by ldmatrix (mma.cuh).
// The two share everything else, including the register layout of scores and accumulators (the
// mma.sync C layout), so the softmax and the gradient code are one. Shared tiles have their
// 16-byte chunks XOR-swizzled by row (no bank conflicts, no padding; for wgmma in its 128-byte
// swizzle layout), fetched by cp.async (rows past T arrive as zeros).
// Key and query tiles are 64 rows, aligned to multiples of 64 in time, so only the tiles that
// cross the diagonal or the window's lower edge pay for the mask, and only tiles that meet the
// band are visited at all: the work grows with T·window, not T².
//
// Forward (flash-attention 2; on Hopper at head dim 128, hopper_fwd.cu's warp-specialised
// kernel replaces it): a block per (128-query block, q head, batch) of four warps, K/V
// tiles double-buffered. With wgmma the block's two m64 halves take turns (each skipped where it
// meets none of a tile's band), the next K/V tile loading under the current one's products;
// with mma.sync each warp owns 32 rows (two m16 tiles, so each K or V fragment read feeds two
// products) and skips the tiles its rows do not meet. The online softmax runs on the score
// fragments in registers (exp2 with the scale folded into log2 units) and the probabilities go
// back into the P·V product as A fragments without touching shared memory. Saves each row's
// natural log-sum-exp, f32 [B, H, T].
//
// Backward (flash-attention 2; on Hopper at head dim 128, hopper_bwd.cu's warp-specialised
// kernel replaces it): `swa_bwd_prep` forms delta_t = do_t · o_t and lse in log2 units, padded
// to whole query tiles; then a block per (64-key tile, kv head, batch) of four warps holds its K
// and V tiles, walks every q head of its group and every query tile that sees it, and keeps dK
// and dV of its keys in registers (warp w
// owns keys 16w..16w+15, so the grouped heads' sum is free). Per query tile it recomputes
// S^T = K Q^T and dP^T = V dO^T, forms P^T and dS^T in registers, adds P^T dO to dV and dS^T Q
// to dK, stages dS^T in shared memory and adds its share of dQ = dS K to an f32 accumulator with
// vector atomic reductions (dQ of a query tile comes from every key tile in its band; the
// atomics spare a second pass that would recompute S and dP).
//
// swax-cuda's mma.cuh and wgmma.cuh (cuda/kernels/) are prepended by cuda.rs beside this file.
// Equations and layouts: mod.rs beside this file; the CPU kernel cpu.rs beside it is the
// reference these kernels are tested against.
#define TILE 64
#define FWD_ROWS 128
#define FWD_THREADS 128
#define BWD_THREADS 128

// Whether the products run on wgmma (NVRTC targets sm_90a on Hopper) or on mma.sync.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define USE_WGMMA true
#else
#define USE_WGMMA false
#endif

// Whether key s is in query t's band.
__device__ __forceinline__ bool visible(int t, int s, u32 window) { return s <= t && (u32)(t - s) < window; }

// Whether rows [r0, r0 + nr) and keys [s0, s0 + ns) have a pair in the band (at least one key s
// with t - window < s <= t), and whether they have one outside it.
__device__ __forceinline__ bool meets_band(int r0, int nr, int s0, int ns, u32 window) {
    return s0 <= r0 + nr - 1 && r0 - (s0 + ns - 1) < (int)window;
}
__device__ __forceinline__ bool leaves_band(int r0, int nr, int s0, int ns, u32 window) {
    return s0 + ns - 1 > r0 || r0 + nr - 1 - s0 >= (int)window;
}

// One m16 tile's online-softmax step over a 64-key tile at s0: the scores s become
// probabilities exp2(scale_log2 s - shift) (zero outside the band when masked), the running max
// m (log2 units) and sum l of rows row0, row0 + 8 advance, and alpha is the factor by which the
// rows' output accumulator must be rescaled (`rescale`) before this tile's P V is added. The
// max is taken over the raw scores (the scale is positive) and the scale folded into the
// exponent's fused multiply-add: one instruction a score fewer, in the loop that bounds the
// Hopper forward.
__device__ __forceinline__ void softmax_scores(float (&s)[TILE / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], int row0, int s0, bool masked, u32 window,
                                               float scale_log2) {
    const int tq = threadIdx.x & 3;
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < TILE / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (masked && !visible(row0 + (e >> 1) * 8, s0 + nt * 8 + 2 * tq + (e & 1), window))
                s[nt][e] = neg_inf();
            mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
        }
    float shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], shfl_xor(mx[r], 1));
        mx[r] = fmaxf(mx[r], shfl_xor(mx[r], 2));
        const float mnew = fmaxf(m[r], mx[r] * scale_log2);
        shift[r] = exp_shift(mnew);
        alpha[r] = fast_exp2(m[r] - shift[r]);
        m[r] = mnew;
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < TILE / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float p = fast_exp2(fmaf(s[nt][e], scale_log2, -shift[e >> 1]));
            s[nt][e] = p;
            l[e >> 1] += p;
        }
}

template <int DT> __device__ __forceinline__ void rescale(float (&acc)[DT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < DT; ++i) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
    }
}

// The end of a forward for one m16 tile's rows row0, row0 + 8 of q head h, sequence b: each
// row's sum (its four lanes' shares added), its natural log-sum-exp stored, 1 / sum into inv.
__device__ __forceinline__ void finish_rows(const float (&m)[2], const float (&l)[2], int row0, int T, int b, int h,
                                            u32 heads, float* __restrict__ lse, float (&inv)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float sum = l[r];
        sum += shfl_xor(sum, 1);
        sum += shfl_xor(sum, 2);
        inv[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int row = row0 + 8 * r;
        if (row < T && (threadIdx.x & 3) == 0) lse[((u64)b * heads + h) * T + row] = (m[r] + __log2f(sum)) / LOG2E;
    }
}

// ... and o = acc over the row's sum, from the fragments.
template <int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], const float (&m)[2], const float (&l)[2],
                                           int row0, int T, int b, int h, u32 heads, bf16* __restrict__ o,
                                           float* __restrict__ lse) {
    const int tq = threadIdx.x & 3;
    float inv[2];
    finish_rows(m, l, row0, T, b, h, heads, lse, inv);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        if (row >= T) continue;
        u32* out = reinterpret_cast<u32*>(o + (((u64)b * T + row) * heads + h) * D);
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            out[n * 4 + tq] = bf16x2_bits(acc[n][2 * r] * inv[r], acc[n][2 * r + 1] * inv[r]);
    }
}

template <int D>
__device__ void swa_fwd(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                        bf16* __restrict__ o, float* __restrict__ lse, u32 t_len, u32 heads, u32 kv_heads,
                        u32 window, float scale_log2) {
    constexpr int MT = FWD_ROWS / (16 * (FWD_THREADS / 32)), WR = 16 * MT, KT = D / 16, NT = TILE / 8,
                  DT = D / 8;
    constexpr bool WG = USE_WGMMA;
    bf16* sq = aligned_smem();     // [FWD_ROWS][D]
    bf16* sk = sq + FWD_ROWS * D;  // [2][TILE][D]
    bf16* sv = sk + 2 * TILE * D;  // [2][TILE][D]

    const int T = (int)t_len;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FWD_ROWS;  // the longest rows first (full causal)
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (heads / kv_heads);
    const u64 qrs = (u64)heads * D, krs = (u64)kv_heads * D;
    const bf16* qg = q + ((u64)b * T * heads + h) * D;
    const bf16* kg = k + ((u64)b * T * kv_heads + hk) * D;
    const bf16* vg = v + ((u64)b * T * kv_heads + hk) * D;
    const int q_last = min(q0 + FWD_ROWS, T) - 1;
    const int kt0 = max(0, q0 - (int)window + 1) / TILE, kt1 = q_last / TILE;
    auto fetch_kv = [&](int j, int buf) {
        load_tile<D, TILE, FWD_THREADS, false, WG>(sk + buf * TILE * D, kg, krs, j * TILE, T, 0);
        load_tile<D, TILE, FWD_THREADS, false, WG>(sv + buf * TILE * D, vg, krs, j * TILE, T, 0);
    };

    load_tile<D, FWD_ROWS, FWD_THREADS, false, WG>(sq, qg, qrs, q0, T, 0);
    fetch_kv(kt0, 0);
    cp_async_commit();

    // This thread's rows are rows(i) + g and rows(i) + g + 8 of m16 tile i: with mma.sync, warp w
    // owns rows 32 w .. 32 w + 31; with wgmma, each m64 half i gives warp w rows 16 w .. + 15.
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    auto rows = [&](int i) { return WG ? q0 + 64 * i + 16 * warp : q0 + warp * WR + 16 * i; };
    float acc[MT][DT][4];
    float m[MT][2], l[MT][2];
    u32 pf[MT][NT / 2][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int j = 0; j < DT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
        m[i][0] = m[i][1] = neg_inf();
        l[i][0] = l[i][1] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) pf[i][kk][0] = pf[i][kk][1] = pf[i][kk][2] = pf[i][kk][3] = 0;
    }
    // Named: GCC 12, building these kernels for the CPU emulator, fails on the casts in the lambda.
    using Frags = u32[MT * NT / 2][4];
    using Acc = float[D / 2];
    auto hold_all = [&] {  // after a wgmma wait: the P·V products that read pf and wrote acc are done
        wg_keep(reinterpret_cast<Frags&>(pf));
#pragma unroll
        for (int i = 0; i < MT; ++i) wg_hold(reinterpret_cast<Acc&>(acc[i]));
    };

    for (int j = kt0; j <= kt1; ++j) {
        const int buf = (j - kt0) & 1;
        const int s0 = j * TILE;
        if constexpr (WG) {
            // One barrier a tile: once every warp has waited out the last tile's products, the
            // other buffer is free for the next tile, which then loads under this one's work.
            wg_wait<0>();
            hold_all();
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
            if (j < kt1) {
                fetch_kv(j + 1, buf ^ 1);
                cp_async_commit();
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r0 = q0 + 64 * i;
                if (r0 >= T || !meets_band(r0, 64, s0, TILE, window)) continue;  // uniform over the block
                float s[NT][4];
#pragma unroll
                for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
                auto& s_f = reinterpret_cast<float(&)[TILE / 2]>(s);
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < KT; ++kk)
                    wgmma_ss<0, 0>(s_f, desc_k<FWD_ROWS>(sq + 64 * i * 64, kk), desc_k<TILE>(sk + buf * TILE * D, kk));
                wg_commit();
                wg_wait<0>();
                wg_hold(s_f);
                hold_all();
                float alpha[2];
                softmax_scores(s, m[i], l[i], alpha, rows(i) + g, s0, leaves_band(r0, 64, s0, TILE, window), window,
                               scale_log2);
                rescale(acc[i], alpha);
#pragma unroll
                for (int kk = 0; kk < NT / 2; ++kk) c_to_a(s, kk, pf[i][kk]);
                auto& acc_f = reinterpret_cast<float(&)[D / 2]>(acc[i]);
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < NT / 2; ++kk) wgmma_rs<1>(acc_f, pf[i][kk], desc_mn<TILE>(sv + buf * TILE * D, kk));
                wg_commit();
            }
        } else {
            if (j < kt1) {
                fetch_kv(j + 1, buf ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            const int w0 = rows(0);
            if (w0 < T && meets_band(w0, WR, s0, TILE, window)) {
                float s[MT][NT][4];
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int n = 0; n < NT; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
                mma_smem_a_tiles<MT, KT, NT, D, D>(s, sq, warp * WR, sk + buf * TILE * D);
                const bool masked = leaves_band(w0, WR, s0, TILE, window);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    float alpha[2];
                    softmax_scores(s[i], m[i], l[i], alpha, rows(i) + g, s0, masked, window, scale_log2);
                    rescale(acc[i], alpha);
#pragma unroll
                    for (int kk = 0; kk < NT / 2; ++kk) c_to_a(s[i], kk, pf[i][kk]);
                }
                mma_tiles<MT, NT / 2, DT, D, false>(acc, pf, sv + buf * TILE * D);
            }
            __syncthreads();  // the next iteration's prefetch overwrites this buffer
        }
    }
    if constexpr (WG) {
        wg_wait<0>();
        hold_all();
    }

#pragma unroll
    for (int i = 0; i < MT; ++i) store_rows<D>(acc[i], m[i], l[i], rows(i) + g, T, b, h, heads, o, lse);
}

// The backward's row statistics in [B, H, T_pad] (T_pad: T rounded up to whole tiles, so that a
// query tile's are one aligned run): delta = sum_d do · o and lse2 = lse / ln 2 (log2 units);
// rows past T get delta 0 and lse2 +inf, so that their probabilities are zero. d / 8 threads a
// row (a power of two dividing a warp), each reading 16-byte pieces of o and do: a warp a row,
// its lanes reading two bytes each, ran at under half of DRAM's bandwidth.
extern "C" __global__ void swa_bwd_prep(const bf16* __restrict__ o, const bf16* __restrict__ dout,
                                        const float* __restrict__ lse, float* __restrict__ delta,
                                        float* __restrict__ lse2, u32 rows, u32 t_len, u32 t_pad, u32 heads, u32 d) {
    const u32 lanes = d / 8, i = blockIdx.x * blockDim.x + threadIdx.x, row = i / lanes;
    const u32 t = row % t_pad, bh = row / t_pad;
    float s = 0.0f;
    if (row < rows && t < t_len) {
        const u64 at = (((u64)(bh / heads) * t_len + t) * heads + bh % heads) * d + (i % lanes) * 8;
        float x[8], y[8];
        load_vec(o + at, x);
        load_vec(dout + at, y);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += x[e] * y[e];
    }
    for (u32 off = lanes / 2; off > 0; off >>= 1) s += shfl_xor(s, off);
    if (row < rows && i % lanes == 0) {
        delta[row] = s;
        lse2[row] = t < t_len ? lse[(u64)bh * t_len + t] * LOG2E : __int_as_float(0x7f800000);
    }
}

// A 16-key by 64-query slab of the backward, in registers (the mma.sync C layout; this thread's
// keys key0 and key0 + 8, queries t0 + column): S^T and dP^T in, P^T and dS^T = P^T (dP^T -
// delta) out. l_s and d_s: the query tile's lse2 and delta.
__device__ __forceinline__ void bwd_probs(float (&st)[TILE / 8][4], float (&dpt)[TILE / 8][4],
                                          const float* l_s, const float* d_s, int t0, int key0, bool masked,
                                          u32 window, float scale_log2) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < TILE / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = n * 8 + 2 * tq + (e & 1);
            float p = fast_exp2(st[n][e] * scale_log2 - l_s[col]);
            if (masked && !visible(t0 + col, key0 + (e >> 1) * 8, window)) p = 0.0f;
            st[n][e] = p;
            dpt[n][e] = p * (dpt[n][e] - d_s[col]);
        }
}

// dV += P^T dO and dK += dS^T Q on wgmma, P^T and dS^T as register operands (a warpgroup's 64
// keys by a 64-query tile), issued and committed, not waited for.
template <int N>
__device__ __forceinline__ void dkv_products(float (&dk)[N], float (&dv)[N], const u32 (&ap)[TILE / 16][4],
                                             const u32 (&ad)[TILE / 16][4], const bf16* q_s, const bf16* do_s) {
    wg_arrive();
#pragma unroll
    for (int kk = 0; kk < TILE / 16; ++kk) wgmma_rs<1>(dv, ap[kk], desc_mn<TILE>(do_s, kk));
#pragma unroll
    for (int kk = 0; kk < TILE / 16; ++kk) wgmma_rs<1>(dk, ad[kk], desc_mn<TILE>(q_s, kk));
    wg_commit();
}

// This thread's rows row, row + 8 of dS^T into a [keys][64 queries] bf16 tile (swizzled).
__device__ __forceinline__ void store_ds(bf16* sds, int row, const float (&dpt)[TILE / 8][4]) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < TILE / 8; ++n) {
        const int at = swz<TILE>(row, n * 8 + 2 * tq);  // rows row and row + 8 share a swizzle
        *reinterpret_cast<u32*>(sds + at) = bf16x2_bits(dpt[n][0], dpt[n][1]);
        *reinterpret_cast<u32*>(sds + at + 8 * TILE) = bf16x2_bits(dpt[n][2], dpt[n][3]);
    }
}

// The end of a backward: dK (scaled) and dV of this thread's keys key0, key0 + 8 of kv head hk.
template <int D>
__device__ __forceinline__ void store_dkv(const float (&dk_acc)[D / 8][4], const float (&dv_acc)[D / 8][4], int key0,
                                          int T, int b, int hk, u32 kv_heads, float scale, bf16* __restrict__ dk,
                                          bf16* __restrict__ dv) {
    const int tq = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + r * 8;
        if (key >= T) continue;
        const u64 at = (((u64)b * T + key) * kv_heads + hk) * D;
        u32* dkr = reinterpret_cast<u32*>(dk + at);
        u32* dvr = reinterpret_cast<u32*>(dv + at);
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            dkr[i * 4 + tq] = bf16x2_bits(dk_acc[i][2 * r] * scale, dk_acc[i][2 * r + 1] * scale);
            dvr[i * 4 + tq] = bf16x2_bits(dv_acc[i][2 * r], dv_acc[i][2 * r + 1]);
        }
    }
}

template <int D>
__device__ void swa_bwd(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                        const bf16* __restrict__ dout, const float* __restrict__ lse2,
                        const float* __restrict__ delta, float* __restrict__ dq_acc, bf16* __restrict__ dk,
                        bf16* __restrict__ dv, u32 t_len, u32 heads, u32 kv_heads, u32 window, float scale) {
    constexpr int KT = D / 16, NT = TILE / 8, DT = D / 8;
    constexpr bool WG = USE_WGMMA;
    bf16* sk = aligned_smem();
    bf16* sv = sk + TILE * D;
    bf16* sq = sv + TILE * D;        // [2][TILE][D]
    bf16* sdo = sq + 2 * TILE * D;   // [2][TILE][D]
    bf16* sds = sdo + 2 * TILE * D;  // dS^T [key][query]
    float* slse = reinterpret_cast<float*>(sds + TILE * TILE);  // [2][TILE], log2 units
    float* sdelta = slse + 2 * TILE;                           // [2][TILE]

    const int T = (int)t_len, t_pad = (T + TILE - 1) / TILE * TILE;
    const int s0 = blockIdx.x * TILE, hk = blockIdx.y, b = blockIdx.z;
    const int group = heads / kv_heads;
    const u64 qrs = (u64)heads * D, krs = (u64)kv_heads * D;
    const bf16* kg = k + ((u64)b * T * kv_heads + hk) * D;
    const bf16* vg = v + ((u64)b * T * kv_heads + hk) * D;
    const int s_last = min(s0 + TILE, T) - 1;
    const int q_end = (int)min((i64)T - 1, (i64)s_last + window - 1);
    const int qt0 = s0 / TILE, nq = q_end / TILE - qt0 + 1, steps = group * nq;
    const float scale_log2 = scale * LOG2E;

    // Step i: q head hk * group + i / nq, query tile qt0 + i % nq.
    auto fetch = [&](int i, int buf) {
        const int hq = hk * group + i / nq, t0 = (qt0 + i % nq) * TILE;
        const u64 off = ((u64)b * T * heads + hq) * D;
        load_tile<D, TILE, BWD_THREADS, false, WG>(sq + buf * TILE * D, q + off, qrs, t0, T, 0);
        load_tile<D, TILE, BWD_THREADS, false, WG>(sdo + buf * TILE * D, dout + off, qrs, t0, T, 0);
        if (threadIdx.x < TILE) {
            const u64 at = ((u64)b * heads + hq) * t_pad + t0 + threadIdx.x;
            slse[buf * TILE + threadIdx.x] = lse2[at];
            sdelta[buf * TILE + threadIdx.x] = delta[at];
        }
    };
    load_tile<D, TILE, BWD_THREADS, false, WG>(sk, kg, krs, s0, T, 0);
    load_tile<D, TILE, BWD_THREADS, false, WG>(sv, vg, krs, s0, T, 0);
    fetch(0, 0);
    cp_async_commit();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int key0 = s0 + warp * 16 + g;  // this thread's keys: key0 and key0 + 8
    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.0f;

    for (int i = 0; i < steps; ++i) {
        const int buf = i & 1;
        if (i + 1 < steps) {
            fetch(i + 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        if constexpr (WG) fence_proxy_async();
        __syncthreads();
        const int hq = hk * group + i / nq, t0 = (qt0 + i % nq) * TILE;
        const bf16* q_s = sq + buf * TILE * D;
        const bf16* do_s = sdo + buf * TILE * D;
        const float* l_s = slse + buf * TILE;
        const float* d_s = sdelta + buf * TILE;

        // S^T = K Q^T and dP^T = V dO^T, the warp's 16 keys by the tile's 64 queries.
        float st[NT][4], dpt[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
        if constexpr (WG) {
            auto& st_f = reinterpret_cast<float(&)[TILE / 2]>(st);
            auto& dpt_f = reinterpret_cast<float(&)[TILE / 2]>(dpt);
            wg_arrive();
#pragma unroll
            for (int kk = 0; kk < KT; ++kk) wgmma_ss<0, 0>(st_f, desc_k<TILE>(sk, kk), desc_k<TILE>(q_s, kk));
#pragma unroll
            for (int kk = 0; kk < KT; ++kk) wgmma_ss<0, 0>(dpt_f, desc_k<TILE>(sv, kk), desc_k<TILE>(do_s, kk));
            wg_commit();
            wg_wait<0>();
            wg_hold(st_f);
            wg_hold(dpt_f);
        } else {
            mma_smem_a<KT, NT, D, D>(st, sk, warp * 16, q_s);
            mma_smem_a<KT, NT, D, D>(dpt, sv, warp * 16, do_s);
        }

        bwd_probs(st, dpt, l_s, d_s, t0, key0, leaves_band(t0, TILE, s0, TILE, window), window, scale_log2);
        // dV += P^T dO, dK += dS^T Q (the scale is applied at the end).
        u32 ap[NT / 2][4], ad[NT / 2][4];
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            c_to_a(st, kk, ap[kk]);
            c_to_a(dpt, kk, ad[kk]);
        }
        if constexpr (WG) {
            dkv_products(reinterpret_cast<float(&)[D / 2]>(dk_acc), reinterpret_cast<float(&)[D / 2]>(dv_acc), ap,
                         ad, q_s, do_s);
        } else {
            mma_tile<NT / 2, DT, D, false>(dv_acc, ap, do_s);
            mma_tile<NT / 2, DT, D, false>(dk_acc, ad, q_s);
        }
        store_ds(sds, warp * 16 + g, dpt);
        if constexpr (WG) fence_proxy_async();
        __syncthreads();

        // dQ rows t0 + 16 warp .. +15 = dS K, 64 columns of D at a time to bound registers.
        float* dq_row = dq_acc + ((u64)b * T * heads + hq) * D + 2 * tq;
#pragma unroll
        for (int c0 = 0; c0 < D; c0 += 64) {
            float dq[8][4];
#pragma unroll
            for (int n = 0; n < 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
            if constexpr (WG) {
                auto& dq_f = reinterpret_cast<float(&)[32]>(dq);
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < TILE / 16; ++kk)
                    wgmma_ss<1, 1>(dq_f, desc_mn<TILE>(sds, kk), desc_mn<TILE>(sk + c0 * TILE, kk));
                wg_commit();
                wg_wait<0>();
                wg_hold(dq_f);
            } else {
#pragma unroll
                for (int kk = 0; kk < TILE / 16; ++kk) {
                    u32 a[4];
                    ldsm_x4<true>(a, lane_ptr<TILE, false>(sds, kk * 16, warp * 16));
#pragma unroll
                    for (int nn = 0; nn < 4; ++nn) {
                        u32 f[4];
                        b_frag<D, false>(f, sk, kk, c0 / 16 + nn);
                        mma(dq[2 * nn], a, f[0], f[1]);
                        mma(dq[2 * nn + 1], a, f[2], f[3]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int t = t0 + warp * 16 + g + r * 8;
                if (t >= T) continue;
                float* dst = dq_row + (u64)t * qrs + c0;
#pragma unroll
                for (int n = 0; n < 8; ++n) red_add2(dst + n * 8, dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
            }
        }
        if constexpr (WG) {
            wg_keep(ap);  // the dV and dK products read them until the waits above
            wg_keep(ad);
        }
        __syncthreads();  // the next prefetch and dS^T overwrite what this step read
    }
    if constexpr (WG) {
        wg_wait<0>();
        wg_hold(reinterpret_cast<float(&)[D / 2]>(dk_acc));
        wg_hold(reinterpret_cast<float(&)[D / 2]>(dv_acc));
    }

    store_dkv<D>(dk_acc, dv_acc, key0, T, b, hk, kv_heads, scale, dk, dv);
}

#define INSTANTIATE(D)                                                                                         \
    extern "C" __global__ void __launch_bounds__(FWD_THREADS) swa_fwd_d##D(                                   \
        const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, u32 t_len, u32 heads, u32 kv_heads, \
        u32 window, float scale_log2) {                                                                        \
        swa_fwd<D>(q, k, v, o, lse, t_len, heads, kv_heads, window, scale_log2);                               \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(BWD_THREADS) swa_bwd_d##D(                                   \
        const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse2, const float* delta,  \
        float* dq_acc, bf16* dk, bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 window, float scale) {     \
        swa_bwd<D>(q, k, v, dout, lse2, delta, dq_acc, dk, dv, t_len, heads, kv_heads, window, scale);        \
    }

INSTANTIATE(64)
INSTANTIATE(128)
