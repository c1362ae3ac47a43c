// gated_delta_parallel.cu: the gated delta rule at chunk 64 on bf16 tensor cores, as
// chunk-parallel kernels around two lean sequential scans (the structure of fla's
// chunk_gated_delta_rule); swax-cuda's mma.cuh and chunk.cuh (cuda/kernels/), then
// gated_delta.cuh, are prepended. Equations and layouts: mod.rs beside this file; the CPU kernel
// cpu.rs beside it is the reference.
//
// Per chunk of L = 64 rows, with q (times 1/sqrt(Dk)) and k L2-normalized, G the running sum of
// the log decays, γ = exp(G), tend_j = exp(G_L - G_j), D_js = exp(G_j - G_s) for s <= j and
// T = (I + A)^-1 with A_js = beta_j D_js k_j·k_s (s < j):
//   W = T diag(beta γ) K,  U = T diag(beta) V - W S0,
//   O = diag(γ) Q S0 + P U  (P = D ⊙ Q K^T),  S_L = γ_L S0 + K̂^T U  (K̂ = diag(tend) K).
// The sequential dependence is only through the state S (forward) and its gradient dS
// (backward), so everything else runs a block per chunk:
//
// - gdn_prep: a chunk's factors into chunk-major bf16 scratch [B·H, N, rows, cols]: W, K̂, Q̃ =
//   diag(γ) Q and P, and the forward's T diag(beta) or the backward's T; γ_L as f32 [B·H, N].
// - gdn_scan_fwd: a block per (head, value tile) walks the chunks with the state tile in
//   registers (f32, over Dk / 16 warps): U = T diag(beta) V - W S as one product, the output
//   O = Q̃ S + P U, then S = γ_L S + K̂^T U; the boundary states go to the f32 `states`. The next
//   chunk's tiles arrive by cp.async during the current. (Ũ = T diag(beta) V made by gdn_prep and
//   read here cost the forward a [64, Dv] tile written and read a chunk, where T diag(beta) is
//   [64, 64], and gdn_prep a product and a load of v.)
// - gdn_scan_bwd: the same walk in reverse for dS: dU = P^T dO + K̂ dS, then
//   dS = γ_L dS + Q̃^T dO - W^T dU; dU and each chunk's end-state gradient go to bf16 scratch.
// - gdn_grads: a block per chunk, from its S0, dS and dU: U again (as T diag(beta) Rb, Rb = V -
//   diag(γ) K S0), then dq, dk, dv, dbeta and dg in gated_delta.cu's algebra (dX = T^T dU, dA =
//   -dX U^T, dW never formed), over the value dimension in tiles of GDN_BE columns.
//
// The chunk kernels run 8 warps: warp w takes rows 16 (w % 4) and a half (w / 4) of a product's
// columns (GradSplit). A scan runs Dk / 16 warps over its state tile and
// its [64, BV] products (ScanSplit).

#define GDN_L 64
#define GDN_THREADS 256

// The decays of the chunk kernels, exp(G_j - G_s) for s <= j < len (else 0), as 2^(G2_j - G2_s)
// with G2 = G log2(e) on the special-function unit: relative error about 2^-22, far under the
// bf16 rounding of every product they enter, for one instruction instead of expf's dozen.
struct Decays {
    float* g2;
    int len;
    // Fills g2 from the chunk's G (after load_chunk; the caller synchronizes before reading).
    __device__ __forceinline__ void fill(const Rows& r) const {
        for (int j = threadIdx.x; j < GDN_L; j += nthreads()) g2[j] = r.G[j] * LOG2E;
    }
    __device__ __forceinline__ float at(int j, int s) const {
        return s <= j && j < len ? fast_exp2(g2[j] - g2[s]) : 0.0f;
    }
};

// acc += a b for a warp's 16 x 8 block of f32 views in shared memory (a at its rows' start, lda
// apart; b at its 8 columns' start, ldb apart), over K (a multiple of 8) on tf32 tensor cores.
__device__ __forceinline__ void warp_mm_tf32(float (&acc)[4], const float* a, int lda, const float* b, int ldb,
                                             int K) {
    const int g = lane_id() >> 2, q = lane_id() & 3;
    for (int k0 = 0; k0 < K; k0 += 8) {
        const u32 af[4] = {tf32_bits(a[g * lda + k0 + q]), tf32_bits(a[(g + 8) * lda + k0 + q]),
                           tf32_bits(a[g * lda + k0 + q + 4]), tf32_bits(a[(g + 8) * lda + k0 + q + 4])};
        mma_tf32(acc, af, tf32_bits(b[(k0 + q) * ldb + g]), tf32_bits(b[(k0 + q + 4) * ldb + g]));
    }
}

// (I + A)^-1 in place for a chunk's strictly lower A [64, 64] (f32, rows `ld` apart) whose
// diagonal 16 x 16 blocks are already inverted (invert_diagonal_blocks): invert_unit_lower's two
// doubling levels, T_BA = -T_BB (A_BA T_AA), as tf32 tensor-core products (f32 accumulation;
// tf32's 11-bit significand keeps T finer than the bf16 it is rounded to as an operand), one
// 16 x 8 output block per warp and step, through x [32, GDN_LX]. Synchronizes.
#define GDN_LX 36
__device__ void invert_merge_64(float* A, int ld, float* x) {
    const int g = lane_id() >> 2, q2 = 2 * (lane_id() & 3);
    for (int h = 16; h < GDN_L; h *= 2) {
        const int nt = h / 8, per_pair = (h / 16) * nt, tasks = GDN_L / (2 * h) * per_pair;
        for (int pass = 0; pass < 2; ++pass) {
            for (int task = warp_id(); task < tasks; task += nwarps()) {
                const int pair = task / per_pair, m = task % per_pair / nt, n = task % nt;
                const int a0 = 2 * h * pair, b0 = a0 + h;
                float* xp = x + pair * 16 * GDN_LX;
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float* out;
                int ldo;
                float sign;
                if (pass == 0) {  // X = A_BA T_AA
                    warp_mm_tf32(acc, A + (b0 + 16 * m) * ld + a0, ld, A + a0 * ld + a0 + 8 * n, ld, h);
                    out = xp + 16 * m * GDN_LX + 8 * n, ldo = GDN_LX, sign = 1.0f;
                } else {  // T_BA = -T_BB X
                    warp_mm_tf32(acc, A + (b0 + 16 * m) * ld + b0, ld, xp + 8 * n, GDN_LX, h);
                    out = A + (b0 + 16 * m) * ld + a0 + 8 * n, ldo = ld, sign = -1.0f;
                }
                out[g * ldo + q2] = sign * acc[0];
                out[g * ldo + q2 + 1] = sign * acc[1];
                out[(g + 8) * ldo + q2] = sign * acc[2];
                out[(g + 8) * ldo + q2 + 1] = sign * acc[3];
            }
            __syncthreads();
        }
    }
}

// A chunk's factors; see the top. T diag(beta) goes to `tb` (the forward's) or T to `tm` (the
// backward's): one of them is null. The inversion's scratch goes where T diag(beta γ) goes later.
template <int D>
__device__ void gdn_prep(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ beta,
                         const bf16* __restrict__ g, bf16* __restrict__ w, bf16* __restrict__ kh,
                         bf16* __restrict__ qt, bf16* __restrict__ pm, bf16* __restrict__ tb, bf16* __restrict__ tm,
                         float* __restrict__ gl, RecDims d) {
    constexpr int L = GDN_L;
    extern __shared__ __align__(16) unsigned char smem[];
    const int c = blockIdx.x, nc = gridDim.x, bh = blockIdx.y, b = bh / d.h, hh = bh % d.h;
    const int t0 = c * L, len = min(L, d.t - t0), wr = warp_id() & 3, wc = warp_id() >> 2, r0 = 16 * wr;
    float* f = reinterpret_cast<float*>(smem);
    const int lda = tile_ld<float>(L);
    float* A = take(f, L * lda);
    const Rows r = carve_rows(f, L);
    const Decays dec{take(f, L), len};
    bf16* e = reinterpret_cast<bf16*>(f);
    const STile<bf16> Q = take_tile(e, L, tile_ld<bf16>(D)), K = take_tile(e, L, tile_ld<bf16>(D));
    const STile<bf16> Tg = take_tile(e, L, tile_ld<bf16>(L));
    float* scratch = reinterpret_cast<float*>(Tg.p);
    const Heads hd{d.t, d.h};
    const ChunkInputs<bf16> in{q, k, nullptr, beta, g, nullptr};
    // No value tile (VTile of no columns): Q stands in for its view.
    load_chunk(Q, K, Q, Q, r, in, hd, b, hh, t0, len, L, d, VTile{0, 0});
    dec.fill(r);
    __syncthreads();

    // A (strictly lower, f32 for the inversion) from k k^T.
    const u64 cid = (u64)bh * nc + c;
    {
        float kk[1][4][4] = {};
        warp_mm<1, 4, D / 16>(kk, K, r0, K.t(), 32 * wc);
        each_pair(kk, r0, 32 * wc, [&](int j, int s, float& x0, float& x1) {
            A[j * lda + s] = s < j ? r.beta[j] * dec.at(j, s) * x0 : 0.0f;
            A[j * lda + s + 1] = s + 1 < j ? r.beta[j] * dec.at(j, s + 1) * x1 : 0.0f;
        });
    }
    __syncthreads();
    // Two warps invert A's diagonal blocks while all of them write P = D ⊙ q k^T, K̂ = diag(tend) K
    // and Q̃ = diag(γ) Q, which do not wait for the inverse.
    invert_diagonal_blocks(A, lda, L);
    {
        float qk[1][4][4] = {};
        warp_mm<1, 4, D / 16>(qk, Q, r0, K.t(), 32 * wc);
        bf16* pc = pm + cid * L * L;
        each_pair(qk, r0, 32 * wc, [&](int j, int s, float& x0, float& x1) {
            *reinterpret_cast<u32*>(pc + j * L + s) = bf16x2_bits(dec.at(j, s) * x0, dec.at(j, s + 1) * x1);
        });
    }
    for (int idx = threadIdx.x; idx < L * D / 8; idx += nthreads()) {
        const int j = idx / (D / 8), col = (idx % (D / 8)) * 8;
        float x[8], y[8];
        load_vec(K.p + j * K.ld + col, x);
        load_vec(Q.p + j * Q.ld + col, y);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            x[i] *= r.tend[j];
            y[i] *= r.gam[j];
        }
        store_vec(kh + (cid * L + j) * D + col, x);
        store_vec(qt + (cid * L + j) * D + col, y);
    }
    if (threadIdx.x == 0) gl[cid] = r.gam[len - 1];
    __syncthreads();
    invert_merge_64(A, lda, scratch);
    // T diag(beta γ) as a bf16 operand, and T diag(beta) or T out, four columns at a time.
    bf16* tx = (tb ? tb : tm) + cid * L * L;
    for (int idx = threadIdx.x; idx < L * L / 4; idx += nthreads()) {
        const int j = idx / (L / 4), s = (idx % (L / 4)) * 4;
        const float4 t = *reinterpret_cast<const float4*>(A + j * lda + s);
        const float b0 = r.beta[s] * t.x, b1 = r.beta[s + 1] * t.y, b2 = r.beta[s + 2] * t.z, b3 = r.beta[s + 3] * t.w;
        set_pair(Tg, j, s, b0 * r.gam[s], b1 * r.gam[s + 1]);
        set_pair(Tg, j, s + 2, b2 * r.gam[s + 2], b3 * r.gam[s + 3]);
        *reinterpret_cast<uint2*>(tx + j * L + s) = tb ? make_uint2(bf16x2_bits(b0, b1), bf16x2_bits(b2, b3))
                                                       : make_uint2(bf16x2_bits(t.x, t.y), bf16x2_bits(t.z, t.w));
    }
    __syncthreads();
    {
        float acc[1][D / 16][4] = {};
        warp_mm<1, D / 16, L / 16>(acc, Tg, r0, K, (D / 2) * wc);
        bf16* wc_ = w + cid * L * D;
        each_pair(acc, r0, (D / 2) * wc, [&](int j, int col, float& x0, float& x1) {
            *reinterpret_cast<u32*>(wc_ + j * D + col) = bf16x2_bits(x0, x1);
        });
    }
}

// How a scan's Dk / 16 warps split its work: warp w owns the state tile's rows 16 w (all of the
// block's BV columns), and a [64, BV] product goes in RW row groups of MT 16-row blocks and CW
// column groups of NT 8-column blocks. (Twice the warps, each with half the state's columns, ran
// slower on the H200: the walk is bound by its bandwidth, and the extra warps add instructions.)
template <int D, int BV>
struct ScanSplit {
    static constexpr int NW = D / 16, RW = NW < 4 ? NW : 4, MT = 4 / RW, CW = NW / RW, NT = BV / CW / 8;
    static constexpr int SN = BV / 8;
    static_assert(NT % 2 == 0, "products in pairs of 8-column blocks");
    static __device__ __forceinline__ int r0() { return 16 * MT * (warp_id() % RW); }
    static __device__ __forceinline__ int c0() { return (BV / CW) * (warp_id() / RW); }
    static __device__ __forceinline__ int state_r0() { return 16 * warp_id(); }
};

// A scan's tiles of one chunk: three [64, Dk] factors, P, a [64, BV] value tile (V forward, dO
// backward) and in the forward T diag(beta) [64, 64] (`tb`, of no rows in the backward); two such
// sets one after another, the next chunk's arriving in one while the current one is read
// (`in(i)`: set i % 2, by offset, so the pick needs no local-memory array).
struct ScanTiles {
    STile<bf16> w, qt, kh, p, x, tb;
    int step;
    __device__ __forceinline__ ScanTiles in(int i) const {
        const int o = (i & 1) * step;
        return ScanTiles{{w.p + o, w.ld}, {qt.p + o, qt.ld}, {kh.p + o, kh.ld}, {p.p + o, p.ld},
                         {x.p + o, x.ld}, {tb.p + o, tb.ld}, step};
    }
};
template <int D, int BV> __device__ __forceinline__ ScanTiles take_scan_tiles(bf16*& e, bool forward) {
    bf16* start = e;
    ScanTiles t;
    t.w = take_tile(e, GDN_L, tile_ld<bf16>(D));
    t.qt = take_tile(e, GDN_L, tile_ld<bf16>(D));
    t.kh = take_tile(e, GDN_L, tile_ld<bf16>(D));
    t.p = take_tile(e, GDN_L, tile_ld<bf16>(GDN_L));
    t.x = take_tile(e, GDN_L, tile_ld<bf16>(BV));
    t.tb = take_tile(e, forward ? GDN_L : 0, tile_ld<bf16>(GDN_L));
    t.step = (int)(e - start);
    e += t.step;
    return t;
}

// Chunk c's factors that both scans read (W, Q̃, K̂ and P, chunk-major) into the tile set t by
// cp.async; the value tile and the commit are the caller's.
template <int D>
__device__ __forceinline__ void fetch_factors(const ScanTiles& t, const bf16* w, const bf16* qt, const bf16* kh,
                                              const bf16* pm, u64 cid) {
    constexpr int L = GDN_L;
    load_rows_async<D>(t.w, w + cid * L * D, D, L, L);
    load_rows_async<D>(t.qt, qt + cid * L * D, D, L, L);
    load_rows_async<D>(t.kh, kh + cid * L * D, D, L, L);
    load_rows_async<L>(t.p, pm + cid * L * L, L, L, L);
}

// A scan warp's rows (from r0) of the state tile from a [Dk, Dv] state at the block's first
// column.
template <int SN, typename T>
__device__ __forceinline__ void state_in(float (&st)[1][SN][4], const T* src, int dv, int r0) {
    each_pair(st, r0, 0, [&](int i, int col, float& x0, float& x1) {
        x0 = to_float(src[(u64)i * dv + col]);
        x1 = to_float(src[(u64)i * dv + col + 1]);
    });
}

template <int D, int BV>
__device__ void gdn_scan_fwd(const bf16* __restrict__ s0, const bf16* __restrict__ w, const bf16* __restrict__ kh,
                             const bf16* __restrict__ qt, const bf16* __restrict__ tb, const bf16* __restrict__ v,
                             const bf16* __restrict__ pm, const float* __restrict__ gl, bf16* __restrict__ out,
                             float* __restrict__ states, RecDims d) {
    constexpr int L = GDN_L;
    using Split = ScanSplit<D, BV>;
    constexpr int MT = Split::MT, NT = Split::NT, SN = Split::SN;
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.y, e0 = blockIdx.x * BV, b = bh / d.h, hh = bh % d.h, nc = (d.t + L - 1) / L;
    const int r0 = Split::r0(), c0 = Split::c0(), rs = Split::state_r0();
    const Heads hd{d.t, d.h};
    bf16* e = reinterpret_cast<bf16*>(smem);
    const ScanTiles tiles = take_scan_tiles<D, BV>(e, true);
    const STile<bf16> Sb = take_tile(e, D, tile_ld<bf16>(BV)), Ub = take_tile(e, L, tile_ld<bf16>(BV));
    const auto fetch = [&](int c, const ScanTiles& t) {
        const u64 cid = (u64)bh * nc + c;
        const int t0 = c * L;
        fetch_factors<D>(t, w, qt, kh, pm, cid);
        load_rows_async<L>(t.tb, tb + cid * L * L, L, L, L);
        load_rows_async<BV>(t.x, v + hd.at(b, hh, t0, d.dv) + e0, (u64)d.h * d.dv, L, min(L, d.t - t0));
        cp_async_commit();
    };
    const u64 ssz = (u64)D * d.dv;
    float st[1][SN][4];
    state_in(st, s0 + bh * ssz + e0, d.dv, rs);
    fetch(0, tiles.in(0));
    float* sts = states + (u64)bh * (nc + 1) * ssz + e0;
    for (int c = 0; c < nc; ++c) {
        const int t0 = c * L, len = min(L, d.t - t0);
        const float g_end = gl[(u64)bh * nc + c];
        float* S = sts + c * ssz;
        each_pair(st, rs, 0, [&](int i, int col, float& x0, float& x1) {
            set_pair(Sb, i, col, x0, x1);
            *reinterpret_cast<float2*>(S + (u64)i * d.dv + col) = make_float2(x0, x1);
        });
        cp_async_wait<0>();
        __syncthreads();
        if (c + 1 < nc) fetch(c + 1, tiles.in(c + 1));
        const ScanTiles t = tiles.in(c);
        // U = [T diag(beta) | -W] [V ; S] into Ub; O's first term Q̃ S stays in registers.
        float u[MT][NT][4] = {}, o[MT][NT][4] = {};
        warp_mm<MT, NT, (L + D) / 16>(u, cat_cols(t.tb, neg(t.w), L), r0, cat_rows(t.x, Sb, L), c0);
        warp_mm<MT, NT, D / 16>(o, t.qt, r0, Sb, c0);
        each_pair(u, r0, c0, [&](int j, int col, float& x0, float& x1) { set_pair(Ub, j, col, x0, x1); });
        __syncthreads();
        each_pair(st, rs, 0, [&](int, int, float& x0, float& x1) {
            x0 *= g_end;
            x1 *= g_end;
        });
        warp_mm<1, SN, L / 16>(st, t.kh.t(), rs, Ub, 0);
        warp_mm<MT, NT, L / 16>(o, t.p, r0, Ub, c0);
        each_pair(o, r0, c0, [&](int j, int col, float& x0, float& x1) {
            if (j < len) *reinterpret_cast<u32*>(out + hd.at(b, hh, t0 + j, d.dv) + e0 + col) = bf16x2_bits(x0, x1);
        });
    }
    float* S = sts + nc * ssz;
    each_pair(st, rs, 0, [&](int i, int col, float& x0, float& x1) {
        *reinterpret_cast<float2*>(S + (u64)i * d.dv + col) = make_float2(x0, x1);
    });
}

// dsT: the final state's gradient [B·H, Dk, Dv]; dug [B·H, N, 64, Dv] and dsg [B·H, N, Dk, Dv]
// receive each chunk's dU and the gradient of its end state; ds0 the initial state's.
template <int D, int BV>
__device__ void gdn_scan_bwd(const bf16* __restrict__ dsT, const bf16* __restrict__ dout, const bf16* __restrict__ w,
                             const bf16* __restrict__ kh, const bf16* __restrict__ qt, const bf16* __restrict__ pm,
                             const float* __restrict__ gl, bf16* __restrict__ dug, bf16* __restrict__ dsg,
                             bf16* __restrict__ ds0, RecDims d) {
    constexpr int L = GDN_L;
    using Split = ScanSplit<D, BV>;
    constexpr int MT = Split::MT, NT = Split::NT, SN = Split::SN;
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.y, e0 = blockIdx.x * BV, b = bh / d.h, hh = bh % d.h, nc = (d.t + L - 1) / L;
    const int r0 = Split::r0(), c0 = Split::c0(), rs = Split::state_r0();
    const Heads hd{d.t, d.h};
    bf16* e = reinterpret_cast<bf16*>(smem);
    const ScanTiles tiles = take_scan_tiles<D, BV>(e, false);
    const STile<bf16> Sb = take_tile(e, D, tile_ld<bf16>(BV)), Ub = take_tile(e, L, tile_ld<bf16>(BV));
    const auto fetch = [&](int c, const ScanTiles& t) {
        const u64 cid = (u64)bh * nc + c;
        const int t0 = c * L;
        fetch_factors<D>(t, w, qt, kh, pm, cid);
        load_rows_async<BV>(t.x, dout + hd.at(b, hh, t0, d.dv) + e0, (u64)d.h * d.dv, L, min(L, d.t - t0));
        cp_async_commit();
    };
    const u64 ssz = (u64)D * d.dv;
    float ds[1][SN][4];
    state_in(ds, dsT + bh * ssz + e0, d.dv, rs);
    fetch(nc - 1, tiles.in(0));
    for (int i = 0; i < nc; ++i) {
        const int c = nc - 1 - i;
        const u64 cid = (u64)bh * nc + c;
        const float g_end = gl[cid];
        bf16* S = dsg + cid * ssz + e0;
        each_pair(ds, rs, 0, [&](int r, int col, float& x0, float& x1) {
            set_pair(Sb, r, col, x0, x1);
            *reinterpret_cast<u32*>(S + (u64)r * d.dv + col) = bf16x2_bits(x0, x1);
        });
        cp_async_wait<0>();
        __syncthreads();
        if (c > 0) fetch(c - 1, tiles.in(i + 1));
        const ScanTiles t = tiles.in(i);
        // dU = P^T dO + K̂ dS, one product over the concatenated inner dimension.
        float du[MT][NT][4] = {};
        warp_mm<MT, NT, (L + D) / 16>(du, cat_cols(t.p.t(), t.kh, L), r0, cat_rows(t.x, Sb, L), c0);
        bf16* duc = dug + cid * L * d.dv + e0;
        each_pair(du, r0, c0, [&](int j, int col, float& x0, float& x1) {
            set_pair(Ub, j, col, x0, x1);
            *reinterpret_cast<u32*>(duc + (u64)j * d.dv + col) = bf16x2_bits(x0, x1);
        });
        __syncthreads();
        // dS = γ_L dS + Q̃^T dO - W^T dU.
        each_pair(ds, rs, 0, [&](int, int, float& x0, float& x1) {
            x0 *= g_end;
            x1 *= g_end;
        });
        warp_mm<1, SN, 2 * L / 16>(ds, cat_cols(t.qt.t(), neg(t.w.t()), L), rs, cat_rows(t.x, Ub, L), 0);
    }
    each_pair(ds, rs, 0, [&](int r, int col, float& x0, float& x1) {
        *reinterpret_cast<u32*>(ds0 + bh * ssz + e0 + (u64)r * d.dv + col) = bf16x2_bits(x0, x1);
    });
}

// A value tile's S0 (f32 in global memory, rows `ld` apart, 16-byte aligned) into its bf16
// operand tile; returns this thread's share of sum(S0 ⊙ dS) over the tile. Read straight from
// global memory rather than staged by cp.async: an f32 staging tile would keep two blocks from
// fitting an SM, and the other block hides the load.
template <int D, int BE>
__device__ __forceinline__ float stage_state(const STile<bf16>& s0s, const float* __restrict__ s0f, u64 ld,
                                             const STile<bf16>& dss) {
    float dot = 0.0f;
    for (int idx = threadIdx.x; idx < D * BE / 4; idx += nthreads()) {
        const int i = idx / (BE / 4), col = (idx % (BE / 4)) * 4;
        const float4 x = *reinterpret_cast<const float4*>(s0f + i * ld + col);
        const float2 y0 = get_pair(dss, i, col), y1 = get_pair(dss, i, col + 2);
        set_pair(s0s, i, col, x.x, x.y);
        set_pair(s0s, i, col + 2, x.z, x.w);
        dot += x.x * y0.x + x.y * y0.y + x.z * y1.x + x.w * y1.y;
    }
    return dot;
}

// How gdn_grads splits its products: 4 row groups of 16 rows by CW = 2 column groups, 8 warps
// over value tiles of GDN_BE = 32 columns, built for two blocks an SM (their shared memory fits
// twice, cuda_parallel.rs's grads_bytes), so that one block's loads, barriers and serial tail
// overlap the other's products. (Tiles of 64 columns in blocks of 16 warps, one an SM, were
// slower at both benchmark shapes.)
#define GDN_BE 32
template <int D>
struct GradSplit {
    static constexpr int CW = 2, ND = D / CW / 8, NE = GDN_BE / CW / 8, NL = GDN_L / CW / 8;
};

// The gradients of a chunk; see the top. states: the forward's f32 boundary states; dsg, dug:
// gdn_scan_bwd's; tm, pm: gdn_prep's T and P.
template <int D>
__device__ void gdn_grads(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                          const bf16* __restrict__ beta, const bf16* __restrict__ g, const bf16* __restrict__ dout,
                          const float* __restrict__ states, const bf16* __restrict__ dsg,
                          const bf16* __restrict__ dug, const bf16* __restrict__ tm, const bf16* __restrict__ pm,
                          bf16* __restrict__ dq, bf16* __restrict__ dk, bf16* __restrict__ dv,
                          bf16* __restrict__ dbeta, bf16* __restrict__ dg, RecDims d) {
    using Split = GradSplit<D>;
    constexpr int L = GDN_L, BE = GDN_BE, CW = Split::CW, ND = Split::ND, NE = Split::NE, NL = Split::NL;
    extern __shared__ __align__(16) unsigned char smem[];
    const int c = blockIdx.x, nc = gridDim.x, bh = blockIdx.y, b = bh / d.h, hh = bh % d.h;
    const int t0 = c * L, len = min(L, d.t - t0), wc = warp_id() >> 2, r0 = 16 * (warp_id() & 3);
    const int cd = (D / CW) * wc, ce = (BE / CW) * wc, cl = (L / CW) * wc;
    const u64 cid = (u64)bh * nc + c, ssz = (u64)D * d.dv;
    float* f = reinterpret_cast<float*>(smem);
    const Rows r = carve_rows(f, L);
    const Decays dec{take(f, L), len};
    // Sums by row: the gate gradient's shares (dgc), dX·Rb (dbt), the row sums of dA ⊙ D ⊙ k k^T
    // (ke), the normalizations' row dots (cq, ck), k_j·dk_j before the L x L terms (kd) and
    // z_j = k_j·(dX S0^T)_j = dX_j·(K S0)_j (Rb's share of the gate).
    float* dgc = take(f, L);
    float* dbt = take(f, L);
    float* ke = take(f, L);
    float* cq = take(f, L);
    float* ck = take(f, L);
    float* kd = take(f, L);
    float* z = take(f, L);
    float* red = take(f, 32);
    bf16* e = reinterpret_cast<bf16*>(f);
    const STile<bf16> Q = take_tile(e, L, tile_ld<bf16>(D)), K = take_tile(e, L, tile_ld<bf16>(D));
    const STile<bf16> Ts = take_tile(e, L, tile_ld<bf16>(L)), P = take_tile(e, L, tile_ld<bf16>(L));
    const STile<bf16> S0s = take_tile(e, D, tile_ld<bf16>(BE)), dSs = take_tile(e, D, tile_ld<bf16>(BE));
    bf16* vals = e;
    const STile<bf16> Vs = take_tile(e, L, tile_ld<bf16>(BE)), dOs = take_tile(e, L, tile_ld<bf16>(BE));
    const STile<bf16> dUs = take_tile(e, L, tile_ld<bf16>(BE)), dXs = take_tile(e, L, tile_ld<bf16>(BE));
    const STile<bf16> dXb = take_tile(e, L, tile_ld<bf16>(BE)), Us = take_tile(e, L, tile_ld<bf16>(BE));
    const STile<bf16> Ut = take_tile(e, L, tile_ld<bf16>(BE));
    // X1 and X2 [64, 64], written after the last value tile, over the value tiles' memory.
    static_assert(7 * (BE + 8) >= 2 * (GDN_L + 8), "X1 and X2 fit where the value tiles were");
    const STile<bf16> X1 = take_tile(vals, L, tile_ld<bf16>(L)), X2 = take_tile(vals, L, tile_ld<bf16>(L));
    const Heads hd{d.t, d.h};
    const float* S0 = states + ((u64)bh * (nc + 1) + c) * ssz;
    const bf16* dS = dsg + cid * ssz;
    const bf16* dU = dug + cid * L * d.dv;
    const u64 rows_at = hd.at(b, hh, t0, d.dv), row_stride = (u64)d.h * d.dv;
    // This lane's two rows of every [64, *] accumulator (each_pair's rows r0 + g, r0 + g + 8).
    const int jr[2] = {r0 + (lane_id() >> 2), r0 + (lane_id() >> 2) + 8};

    for (int j = threadIdx.x; j < L; j += nthreads()) dgc[j] = dbt[j] = ke[j] = cq[j] = ck[j] = kd[j] = z[j] = 0.0f;
    load_rows_async<L>(Ts, tm + cid * L * L, L, L, L);
    load_rows_async<L>(P, pm + cid * L * L, L, L, L);
    load_rows_async<BE>(dUs, dU, d.dv, L, L);
    load_rows_async<BE>(dSs, dS, d.dv, D, D);
    cp_async_commit();
    const ChunkInputs<bf16> in{q, k, v, beta, g, dout};
    load_chunk(Q, K, Vs, dOs, r, in, hd, b, hh, t0, len, L, d, VTile{0, BE});
    dec.fill(r);

    // Accumulated over the value tiles: dO S0^T and dk = diag(tend) U dS^T - diag(beta γ) dX S0^T
    // (each [64, Dk]), dO U^T and dX U^T ([64, 64]). Each tile's operands are fetched as the
    // previous tile's products finish with their buffers.
    float dq1[1][ND][4] = {}, dkc[1][ND][4] = {}, dp[1][NL][4] = {}, da[1][NL][4] = {};
    float carry = 0.0f;
    for (int e0 = 0; e0 < d.dv; e0 += BE) {
        const bool more = e0 + BE < d.dv;
        cp_async_wait<0>();
        __syncthreads();
        carry += stage_state<D, BE>(S0s, S0 + e0, d.dv, dSs);
        __syncthreads();
        // Rb = V - diag(γ) K S0, kept as R = diag(beta) Rb in Vs (U's operand); dX = T^T dU, and
        // -diag(beta γ) dX for dk; dv = diag(beta) dX, dbeta's dX·Rb and z's dX·(K S0).
        {
            float ks[1][NE][4] = {}, dx[1][NE][4] = {}, rs[1][2] = {}, rz[1][2] = {};
            warp_mm<1, NE, D / 16>(ks, K, r0, S0s, ce);
            warp_mm<1, NE, L / 16>(dx, Ts.t(), r0, dUs, ce);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = jr[h];
                const float gam = r.gam[j], bet = r.beta[j];
                bf16* dvr = dv + hd.at(b, hh, t0 + min(j, len - 1), d.dv) + e0;
#pragma unroll
                for (int n = 0; n < NE; ++n) {
                    const int col = ce + 8 * n + 2 * (lane_id() & 3);
                    const float2 vv = get_pair(Vs, j, col);
                    const float x0 = dx[0][n][2 * h], x1 = dx[0][n][2 * h + 1];
                    const float k0 = ks[0][n][2 * h], k1 = ks[0][n][2 * h + 1];
                    const float rb0 = vv.x - gam * k0, rb1 = vv.y - gam * k1;
                    set_pair(Vs, j, col, bet * rb0, bet * rb1);
                    set_pair(dXs, j, col, x0, x1);
                    set_pair(dXb, j, col, -bet * gam * x0, -bet * gam * x1);
                    rs[0][h] += x0 * rb0 + x1 * rb1;
                    rz[0][h] += x0 * k0 + x1 * k1;
                    if (j < len) *reinterpret_cast<u32*>(dvr + col) = bf16x2_bits(bet * x0, bet * x1);
                }
            }
            add_row_sums(rs, r0, dbt);
            add_row_sums(rz, r0, z);
        }
        __syncthreads();
        if (more) {
            load_rows_async<BE>(dUs, dU + e0 + BE, d.dv, L, L);
            cp_async_commit();
        }
        // U = T R (and diag(tend) U for dk); dO S0^T.
        {
            float uu[1][NE][4] = {};
            warp_mm<1, NE, L / 16>(uu, Ts, r0, Vs, ce);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float tend = r.tend[jr[h]];
#pragma unroll
                for (int n = 0; n < NE; ++n) {
                    const int col = ce + 8 * n + 2 * (lane_id() & 3);
                    const float x0 = uu[0][n][2 * h], x1 = uu[0][n][2 * h + 1];
                    set_pair(Us, jr[h], col, x0, x1);
                    set_pair(Ut, jr[h], col, tend * x0, tend * x1);
                }
            }
        }
        warp_mm<1, ND, BE / 16>(dq1, dOs, r0, S0s.t(), cd);
        __syncthreads();
        if (more) {
            load_rows_async<BE>(Vs, v + rows_at + e0 + BE, row_stride, L, len);
            cp_async_commit();
        }
        // dk += [diag(tend) U | -diag(beta γ) dX] [dS^T ; S0^T]; dO U^T, dX U^T.
        warp_mm<1, ND, 2 * BE / 16>(dkc, cat_cols(Ut, dXb, BE), r0, cat_rows(dSs.t(), S0s.t(), BE), cd);
        warp_mm<1, NL, BE / 16>(dp, dOs, r0, Us.t(), cl);
        warp_mm<1, NL, BE / 16>(da, dXs, r0, Us.t(), cl);
        __syncthreads();
        if (more) {
            load_rows_async<BE>(dOs, dout + rows_at + e0 + BE, row_stride, L, len);
            load_rows_async<BE>(dSs, dS + e0 + BE, d.dv, D, D);
            cp_async_commit();
        }
    }

    // dP ⊙ P to the log decays (+ G_j, - G_s; on the diagonal the two cancel, and are left out:
    // the diagonal's terms dwarf the others' under strong decay, and f32 sums of them would leave
    // their rounding in dg); X1 = dP ⊙ D, the gradient of q_j·k_s. dA = -dX U^T
    // on the strictly lower part: e = dA ⊙ D ⊙ k k^T to beta_j and G_j (ke, times beta_j) and to
    // G_s (- beta_j e); X2 = beta_j D ⊙ dA (strictly lower), whose sum with its transpose is the
    // gradient of k k^T.
    // In column halves, so that k k^T's block is not live beside all four accumulators at once
    // (two blocks an SM leave 128 registers a thread).
    {
        constexpr int NH = 2, NP = NL / NH;
        float rp[1][2] = {}, re[1][2] = {};
#pragma unroll
        for (int hf = 0; hf < NH; ++hf) {
            const int ch = cl + 8 * NP * hf;
            float kk[1][NP][4] = {}, cs[NP][2] = {};
            warp_mm<1, NP, D / 16>(kk, K, r0, K.t(), ch);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = jr[h];
                const float bet = r.beta[j];
#pragma unroll
                for (int n = 0; n < NP; ++n) {
                    const int s = ch + 8 * n + 2 * (lane_id() & 3);
                    const float2 pp = get_pair(P, j, s);
                    float x1[2], x2[2];
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const float dcy = dec.at(j, s + i), dpv = dp[0][NP * hf + n][2 * h + i];
                        const float dlog = s + i == j ? 0.0f : dpv * (i ? pp.y : pp.x);
                        rp[0][h] += dlog;
                        cs[n][i] -= dlog;
                        x1[i] = dpv * dcy;
                        const float dav = s + i < j ? -da[0][NP * hf + n][2 * h + i] * dcy : 0.0f;
                        const float ev = dav * kk[0][n][2 * h + i];
                        re[0][h] += ev;
                        cs[n][i] -= bet * ev;
                        x2[i] = dav * bet;
                    }
                    set_pair(X1, j, s, x1[0], x1[1]);
                    set_pair(X2, j, s, x2[0], x2[1]);
                }
            }
            add_col_sums(cs, ch, dgc);
        }
        add_row_sums(rp, r0, dgc);
        add_row_sums(re, r0, ke);
    }
    // dq = diag(γ) dO S0^T, with γ_j dO_j·(S0^T q_j) to G_j; k_j·dk_j for the end state's share.
    {
        float ro[1][2] = {}, rk[1][2] = {};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float gam = r.gam[jr[h]];
#pragma unroll
            for (int n = 0; n < ND; ++n) {
                const int col = cd + 8 * n + 2 * (lane_id() & 3);
                const float2 kv = get_pair(K, jr[h], col), qv = get_pair(Q, jr[h], col);
                float* y = &dq1[0][n][2 * h];
                y[0] *= gam;
                y[1] *= gam;
                ro[0][h] += y[0] * qv.x + y[1] * qv.y;
                rk[0][h] += dkc[0][n][2 * h] * kv.x + dkc[0][n][2 * h + 1] * kv.y;
            }
        }
        add_row_sums(ro, r0, dgc);
        add_row_sums(rk, r0, kd);
    }
    __syncthreads();
    // dq += X1 k, dk += X1^T q + (X2 + X2^T) k; then back through the normalizations.
    warp_mm<1, ND, L / 16>(dq1, X1, r0, K, cd);
    warp_mm<1, ND, 3 * L / 16>(dkc, cat_cols(cat_cols(X1.t(), X2, L), X2.t(), 2 * L), r0,
                               cat_rows(cat_rows(Q, K, L), K, 2 * L), cd);
    {
        float rq[1][2] = {}, rk[1][2] = {};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int n = 0; n < ND; ++n) {
                const int col = cd + 8 * n + 2 * (lane_id() & 3);
                const float2 qv = get_pair(Q, jr[h], col), kv = get_pair(K, jr[h], col);
                rq[0][h] += dq1[0][n][2 * h] * qv.x + dq1[0][n][2 * h + 1] * qv.y;
                rk[0][h] += dkc[0][n][2 * h] * kv.x + dkc[0][n][2 * h + 1] * kv.y;
            }
        add_row_sums(rq, r0, cq);
        add_row_sums(rk, r0, ck);
    }
    const float carried = block_sum(carry, red);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int j = jr[h];
        if (j >= len) continue;
        const float cj = cq[j] / (d.scale * d.scale), sq = d.scale * r.rq[j], kj = ck[j], sk = r.rk[j];
        bf16* dqr = dq + hd.at(b, hh, t0 + j, D);
        bf16* dkr = dk + hd.at(b, hh, t0 + j, D);
#pragma unroll
        for (int n = 0; n < ND; ++n) {
            const int col = cd + 8 * n + 2 * (lane_id() & 3);
            const float2 qv = get_pair(Q, j, col), kv = get_pair(K, j, col);
            const float* y = &dq1[0][n][2 * h];
            const float* x = &dkc[0][n][2 * h];
            *reinterpret_cast<u32*>(dqr + col) = bf16x2_bits(sq * (y[0] - qv.x * cj), sq * (y[1] - qv.y * cj));
            *reinterpret_cast<u32*>(dkr + col) = bf16x2_bits(sk * (x[0] - kv.x * kj), sk * (x[1] - kv.y * kj));
        }
    }
    // The end state's share of the decays, dl_j = tend_j k_j·(U dS^T)_j = kd_j + beta_j γ_j z_j;
    // dg_j = γ_L (S0·dS) + sum_s dl_s + sum_{i >= j} (dgc_i - beta_i γ_i z_i + beta_i ke_i - dl_i),
    // by warp 0, where dl_{len-1} (tend 1, the largest under strong decay) enters both sums for
    // every j and cancels: left out, as the diagonal of dP ⊙ P; dbeta_j = dX_j·Rb_j + ke_j.
    if (warp_id() == 0) {
        float end = 0.0f;
        for (int j = lane_id(); j < len; j += 32) {
            const float bgz = r.beta[j] * r.gam[j] * z[j], dl = j < len - 1 ? kd[j] + bgz : 0.0f;
            end += dl;
            kd[j] = dgc[j] - bgz + r.beta[j] * ke[j] - dl;
        }
        end = r.gam[len - 1] * carried + warp_sum(end);
        __syncwarp();
        warp_cumsum(kd, len, true);
        for (int j = lane_id(); j < len; j += 32) {
            const u64 at = hd.at(b, hh, t0 + j, 1);
            dg[at] = from_float<bf16>(end + kd[j]);
            dbeta[at] = from_float<bf16>(dbt[j] + ke[j]);
        }
    }
}

// The kernels, for Dk in {32, 64, 128}, and value tiles BV of 32, 64 or (Dk 64 and 128) 128 for
// the scans (wider tiles at Dk 32 would spill).
#define GDN_PREP_KERNEL(D)                                                                                          \
    extern "C" __global__ void __launch_bounds__(GDN_THREADS, 3) gdn_prep_##D(                                      \
        const bf16* q, const bf16* k, const bf16* beta, const bf16* g, bf16* w, bf16* kh, bf16* qt, bf16* pm,       \
        bf16* tb, bf16* tm, float* gl, RecDims d) {                                                                 \
        gdn_prep<D>(q, k, beta, g, w, kh, qt, pm, tb, tm, gl, d);                                                   \
    }
#define GDN_GRADS_KERNEL(D)                                                                                         \
    extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_grads_##D(                                     \
        const bf16* q, const bf16* k, const bf16* v, const bf16* beta, const bf16* g, const bf16* dout,             \
        const float* states, const bf16* dsg, const bf16* dug, const bf16* tm, const bf16* pm, bf16* dq, bf16* dk,  \
        bf16* dv, bf16* dbeta, bf16* dg, RecDims d) {                                                               \
        gdn_grads<D>(q, k, v, beta, g, dout, states, dsg, dug, tm, pm, dq, dk, dv, dbeta, dg, d);                   \
    }
#define GDN_SCAN_KERNELS(D, BV)                                                                                     \
    extern "C" __global__ void __launch_bounds__(2 * D) gdn_scan_fwd_##D##_##BV(                                    \
        const bf16* s0, const bf16* w, const bf16* kh, const bf16* qt, const bf16* tb, const bf16* v,               \
        const bf16* pm, const float* gl, bf16* out, float* states, RecDims d) {                                     \
        gdn_scan_fwd<D, BV>(s0, w, kh, qt, tb, v, pm, gl, out, states, d);                                          \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(2 * D) gdn_scan_bwd_##D##_##BV(                                    \
        const bf16* ds, const bf16* dout, const bf16* w, const bf16* kh, const bf16* qt, const bf16* pm,            \
        const float* gl, bf16* dug, bf16* dsg, bf16* ds0, RecDims d) {                                              \
        gdn_scan_bwd<D, BV>(ds, dout, w, kh, qt, pm, gl, dug, dsg, ds0, d);                                         \
    }
#define GDN_HEAD_KERNELS(D)  \
    GDN_PREP_KERNEL(D)       \
    GDN_GRADS_KERNEL(D)      \
    GDN_SCAN_KERNELS(D, 32)  \
    GDN_SCAN_KERNELS(D, 64)

GDN_HEAD_KERNELS(32)
GDN_HEAD_KERNELS(64)
GDN_HEAD_KERNELS(128)
GDN_SCAN_KERNELS(64, 128)
GDN_SCAN_KERNELS(128, 128)
