// mlstm.cu: the mLSTM (xLSTM-7B form), chunkwise, forward and backward, as chunk-parallel kernels
// around lean sequential scans over the chunk-boundary states (TFLA's structure, arXiv 2503.14376);
// swax-cuda's mma.cuh and chunk.cuh (cuda/kernels/) are prepended. Equations and layouts: mod.rs
// beside this file; the CPU kernel cpu.rs beside it is the reference, and this file follows its
// steps. Per chunk of L rows, F the running sum of log forget gates, m the stabilizers, w_js =
// exp(i_s + F_j - F_s - m_j) (s <= j) and a_j = exp(m_prev + F_j - m_j):
//   h = (P V + diag(a) Q C_prev / sqrt(Dk)) / den,  P = w ⊙ Q K^T / sqrt(Dk),
//   C_end = a_L C_prev + (diag(w_L) K)^T V,  n_end = a_L n_prev + K^T w_L.
// Only the states (forward) and their gradients (backward) are carried from chunk to chunk, so:
//
// - mlstm_scan_fwd: a block per (head, value tile) walks the chunks, C in f32 shared memory,
//   updated by one K^T V product a chunk (tensor cores for bf16); writes the boundary states,
//   and each step's gates (f32 rows [4, B·H, T]: i, log forget gate, F, m), which the chunk
//   kernels read rather than each run the chunk's recurrence of m again. The backward's
//   mlstm_gate_rows_bwd makes the same rows from the stabilizers at the chunks' starts (ms), a
//   warp per chunk.
// - mlstm_chunk_fwd: a block per (head, value tile, chunk): h from the chunk's C_prev, n_prev,
//   m_prev and the L x L part; and per row, for the backward, the denominator's two parts q·n
//   (signed, before the max) and m (`den`, f32 [B·H, 2, T], from value tile 0).
// - mlstm_prep_bwd: a block per (head, chunk): per row, from den, 1 / (den + eps), the
//   denominator's gradient through |q·n| (dnq), the stabilizer's own (eps · dden) and which side
//   of m's max won, into f32 rows [4, B·H, T]; dden = -(dh·h) / (den + eps) over the whole of Dv.
// - mlstm_scan_bwd: a block per (head, value tile) walks the chunks in reverse: dC = a_L dC +
//   (diag(a) Q)^T dnum / sqrt(Dk) and dn likewise, storing the gradient at each chunk's end
//   (f32 [B·H, N, ..]); dC0, dn0 and the final and initial states' dots for m's gradient.
// - mlstm_grads: a block per (head, value tile, chunk): dq, dk, dv and each row's share of the
//   gate gradients with m held fixed (cpu.rs's algebra), from the chunk's state and dC, dn.
//   mlstm_grads_lean, for blocks of up to GRADS_LEAN_THREADS: the same, its registers bounded
//   for GRADS_LEAN_BLOCKS blocks an SM and C_prev in dC's tile once dk is done (less shared
//   memory, C_prev read twice: for dC·C_prev at the start, as an operand for dq at the end).
// - mlstm_gates: a block per head sends the stabilizers' own gradient back along the recurrence
//   of m (a reverse scan of affine maps over the block's threads, GATE_STEPS steps a thread),
//   adds the rows' shares and writes di, df and dm0.
//
// With several value tiles, dq, dk and the gates' shares are summed over them (Sink, then
// rec_reduce; mlstm_gates sums the gates'); terms without v (through dn and dnq) are added by the
// first tile only. bf16 data is multiplied on tensor cores from bf16 shared tiles with f32
// accumulation, f32 data in f32 (block_mm). bf16 tiles arrive by cp.async (stage_cols), landing
// under the gates' loads; the scans fetch each chunk's tiles during the previous chunk. The
// tiled kernels take any number of whole warps up to REC_THREADS (cuda.rs's block_threads picks
// it from the head's size): every loop strides by the block's threads or warps.
#include "common.cuh"

// The chunk's gates: i, log forget gate, its running sum F from the chunk's start, the
// stabilizer m, the carried state's weight a_j = exp(m_prev + F_j - m_j) and each step's weight
// in the chunk's last row (in its end state), wl_s = w_{L-1,s} (both 0 on padding rows): the
// scans and mlstm_grads use wl for every element of a [lp, D] tile, so it is one exp a row.
struct Gates {
    float* i;
    float* lf;
    float* F;
    float* m;
    float* a;
    float* wl;
};

__device__ __forceinline__ Gates carve_gates(float*& p, int lp) {
    return Gates{take(p, lp), take(p, lp), take(p, lp), take(p, lp), take(p, lp), take(p, lp)};
}

// The intra-chunk weight of step s in row j, exp(i_s + F_j - F_s - m_j), for s <= j < len.
__device__ __forceinline__ float weight(const Gates& g, int j, int s, int len) {
    return (s <= j && j < len) ? expf(g.i[s] + g.F[j] - g.F[s] - g.m[j]) : 0.0f;
}

// X(j, c) *= f(j) for rows j < rows and columns c < cols of a tile: a warp a row, its lanes
// along the columns (no index division per element, as one flat loop over rows · cols needs).
template <typename E, typename F>
__device__ __forceinline__ void scale_rows(STile<E> X, int rows, int cols, F f) {
    for (int j = warp_id(); j < rows; j += nwarps()) {
        const float x = f(j);
        for (int c = lane_id(); c < cols; c += 32) X.set(j, c, X.at(j, c) * x);
    }
}

// The gate rows, f32 [4, B·H, T]: each step's input gate i, log forget gate lf, its running
// sum F from its chunk's start and the stabilizer m; mlstm_scan_fwd writes them as it walks the
// chunks, mlstm_gate_rows_bwd again for the backward.
struct GateRows {
    float* i;
    float* lf;
    float* F;
    float* m;
    __device__ static GateRows of(const float* p, const RecDims& d) {
        const u64 n = (u64)d.b * d.h * d.t;
        float* q = const_cast<float*>(p);
        return GateRows{q, q + n, q + 2 * n, q + 3 * n};
    }
    __device__ void put(u64 at, float gi, float glf, float gF, float gm) const {
        i[at] = gi;
        lf[at] = glf;
        F[at] = gF;
        m[at] = gm;
    }
};

// Threads of a mlstm_gate_rows_bwd block, a warp per chunk.
#define GATE_ROW_THREADS 256

// The gates of the chunk of `len` rows from t0 of a head, by one warp, m carried from `prev`
// (the stabilizer before the chunk): F and m by the CPU kernel's recurrence in its order, every
// lane running the chain over 32 rows' gates fetched by shuffles (each lane keeping its own
// row's values), the next 32 rows' gates loaded under the current ones' steps. Calls
// put(j, i, lf, F, m) for every row j and returns m at the chunk's last row.
template <typename T, typename Put>
__device__ float walk_gates(const T* __restrict__ gi, const T* __restrict__ gf, Heads hd, int b, int hh, int t0,
                            int len, float prev, Put put) {
    const int lane = lane_id();
    const auto load = [&](int j, float& ig, float& fr) {
        const u64 at = hd.at(b, hh, t0 + (j < len ? j : 0), 1);
        ig = j < len ? to_float(gi[at]) : 0.0f;
        fr = j < len ? to_float(gf[at]) : 0.0f;
    };
    float ig, fr, run = 0.0f;
    load(lane, ig, fr);
    for (int j0 = 0; j0 < len; j0 += 32) {
        const float i_row = ig, lf_row = log_sigmoid(fr);
        if (j0 + 32 < len) load(j0 + 32 + lane, ig, fr);
        float lfs[32], is[32];
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            lfs[u] = __shfl_sync(FULL_MASK, lf_row, u);
            is[u] = __shfl_sync(FULL_MASK, i_row, u);
        }
        const int n = min(32, len - j0);
        float F = 0.0f, m = 0.0f;
#pragma unroll
        for (int u = 0; u < 32; ++u) {
            if (u < n) {
                run += lfs[u];
                prev = fmaxf(lfs[u] + prev, is[u]);
                if (lane == u) F = run, m = prev;
            }
        }
        if (lane < n) put(j0 + lane, i_row, lf_row, F, m);
    }
    return prev;
}

// A warp per (head, chunk): the gate rows from the forward's ms (the stabilizer before each
// chunk), so the chunks need not wait on each other.
template <typename T>
__device__ void mlstm_gate_rows_bwd(const T* __restrict__ gi, const T* __restrict__ gf,
                                    const float* __restrict__ ms, float* __restrict__ gr, RecDims d) {
    const int nc = (d.t + d.chunk - 1) / d.chunk, w = blockIdx.x * nwarps() + warp_id();
    if (w >= d.b * d.h * nc) return;
    const int bh = w / nc, ci = w % nc, t0 = ci * d.chunk;
    const GateRows out = GateRows::of(gr, d);
    const u64 row0 = (u64)bh * d.t + t0;
    walk_gates(gi, gf, Heads{d.t, d.h}, bh / d.h, bh % d.h, t0, min(d.chunk, d.t - t0), ms[(u64)bh * (nc + 1) + ci],
               [&](int j, float i, float lf, float F, float m) { out.put(row0 + j, i, lf, F, m); });
}

// Row j's weight a_j = exp(m_prev + F_j - m_j) of the carried state, and wl_j = exp(i_j + F_L -
// F_j - m_L) in the chunk's end state (F_L, m_L: the chunk's last row's), weight()'s expression.
__device__ __forceinline__ void row_weights(const Gates& g, int j, float m_prev, float f_last, float m_last) {
    g.a[j] = expf(m_prev + g.F[j] - g.m[j]);
    g.wl[j] = expf(g.i[j] + f_last - g.F[j] - m_last);
}

// Fills g for chunk rows t0..t0+len of head bh from the gate rows (m_prev the stabilizer before
// the chunk): each thread its rows' gates and from them a_j and wl_j (the chunk's last F and m
// read by every thread). Synchronizes, after waiting for the caller's cp.async copies
// (stage_cols), which so land under the gates' loads.
__device__ void chunk_gates(Gates g, const float* gr, const RecDims& d, int bh, int t0, int len, int lp,
                            float m_prev) {
    const GateRows r = GateRows::of(gr, d);
    const u64 at0 = (u64)bh * d.t + t0;
    const float f_last = r.F[at0 + len - 1], m_last = r.m[at0 + len - 1];
    for (int j = threadIdx.x; j < lp; j += nthreads()) {
        if (j < len) {
            g.i[j] = r.i[at0 + j];
            g.lf[j] = r.lf[at0 + j];
            g.F[j] = r.F[at0 + j];
            g.m[j] = r.m[at0 + j];
            row_weights(g, j, m_prev, f_last, m_last);
        } else {
            g.a[j] = g.wl[j] = 0.0f;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
}

// P = w ⊙ (Q K^T) · scale into a [lp, lp] tile, each row's sum (in f32, before P is rounded to
// the tile's type) added to psum (zeroed by the caller). Synchronizes. Q holds q unscaled, so
// that its tensor-core operands are the bf16 inputs exactly (1/sqrt(Dk) is no power of two).
template <bool TC, typename E>
__device__ __forceinline__ void chunk_scores(STile<E> P, float* psum, STile<E> Q, STile<E> K, int dk, const Gates& g,
                                             int len, int lp, float scale) {
    block_mm_sums<TC>(
        Q, K.t(), lp, dk, lp,
        [&](int j, int s, float v) {
            const float x = v * scale * weight(g, j, s, len);
            P.set(j, s, x);
            return make_float2(x, 0.0f);
        },
        psum, nullptr);
    __syncthreads();
}


// The value tile of a head's f32 [Dk, Dv] state at `src` (its first column) into a tile of E,
// each thread loading a batch before storing any (the compiler would not hoist the loads above
// stores to shared memory that could alias them), so that swax-small's [32, 64] state waits out
// one memory latency, not eight. Where the columns are whole 16-byte vectors and their count
// divides the block, each thread keeps one vector column and walks the rows (LOAD_BATCH vectors
// a batch): no index division per element, which as the flat loop below costs more integer
// instructions than the load itself.
template <typename E>
__device__ __forceinline__ void load_state(STile<E> dst, const float* src, const RecDims& d, VTile vt) {
    const int per = vt.w / 4;
    if (vt.w % 4 == 0 && d.dv % 4 == 0 && vt.e0 % 4 == 0 && nthreads() % per == 0) {
        constexpr int U = LOAD_BATCH;
        const int c = threadIdx.x % per * 4, step = nthreads() / per;
        for (int r0 = threadIdx.x / per; r0 < d.dk; r0 += U * step) {
            float4 x[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int r = r0 + u * step;
                x[u] = r < d.dk ? *reinterpret_cast<const float4*>(src + (u64)r * d.dv + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int r = r0 + u * step;
                if (r >= d.dk) continue;
                dst.set(r, c, x[u].x);
                dst.set(r, c + 1, x[u].y);
                dst.set(r, c + 2, x[u].z);
                dst.set(r, c + 3, x[u].w);
            }
        }
        return;
    }
    constexpr int U = 2 * LOAD_BATCH;
    const int n = d.dk * vt.w;
    for (int base = threadIdx.x; base < n; base += U * nthreads()) {
        float x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int idx = base + u * nthreads();
            x[u] = idx < n ? src[(u64)(idx / vt.w) * d.dv + idx % vt.w] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int idx = base + u * nthreads();
            if (idx < n) dst.set(idx / vt.w, idx % vt.w, x[u]);
        }
    }
}

// Where chunk ci of head bh starts in [B·H, n, size] buffers.
__device__ __forceinline__ u64 at_chunk(int bh, int n, int ci, u64 size) { return ((u64)bh * n + ci) * size; }

// The per-row f32 outputs of mlstm_prep_bwd, each [B·H, T].
struct RowStats {
    float* r;
    float* dnq;
    float* dm;
    float* win;
    __device__ static RowStats of(float* p, const RecDims& d) {
        const u64 n = (u64)d.b * d.h * d.t;
        return RowStats{p, p + n, p + 2 * n, p + 3 * n};
    }
};

// Shared memory (`scan_fwd_bytes` in cuda.rs matches): f32 C [Dk, bv], n [Dk] and the gates;
// then tiles of T: k [lp, Dk], v [lp, bv], twice: the next chunk's arrive in one pair (cp.async
// for bf16) while the current chunk's are used.
template <typename T, bool TC>
__device__ void mlstm_scan_fwd(const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ gi,
                               const T* __restrict__ gf, const T* __restrict__ c0, const T* __restrict__ n0,
                               const T* __restrict__ m0, float* __restrict__ cs, float* __restrict__ ns,
                               float* __restrict__ ms, float* __restrict__ gr, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    const STile<float> C = take_tile(f, d.dk, tile_ld<float>(d.bv));
    float* nv = take(f, round16(d.dk));
    const Gates g = carve_gates(f, lp);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv);
    const STile<T> K0 = take_tile(e, lp, ldk), V0 = take_tile(e, lp, ldv);
    const STile<T> K1 = take_tile(e, lp, ldk), V1 = take_tile(e, lp, ldv);
    // Chunk ci's k and v into the tiles of its parity.
    const auto stage = [&](int ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        stage_cols((ci & 1 ? K1 : K0).p, ldk, k, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
        stage_cols((ci & 1 ? V1 : V0).p, ldv, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w);
        cp_async_commit();
    };
    stage(0);

    const u64 csz = (u64)d.dk * d.dv;
    float* c_out = cs + at_chunk(bh, nc + 1, 0, csz) + vt.e0;
    float* n_out = ns + at_chunk(bh, nc + 1, 0, d.dk);
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int r = idx / vt.w, c = idx % vt.w;
        const float x = to_float(c0[bh * csz + vt.e0 + r * d.dv + c]);
        C.set(r, c, x);
        c_out[r * d.dv + c] = x;
    }
    // n and m do not depend on v: every value tile carries them, the first one stores them.
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        nv[c] = to_float(n0[(u64)bh * d.dk + c]);
        if (lead) n_out[c] = nv[c];
    }
    float m_prev = to_float(m0[bh]);
    if (lead && threadIdx.x == 0) ms[(u64)bh * (nc + 1)] = m_prev;
    const GateRows rows = GateRows::of(gr, d);
    __syncthreads();

    for (int ci = 0; ci < nc; ++ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        const STile<T> K = ci & 1 ? K1 : K0, V = ci & 1 ? V1 : V0;
        // The chunk's gates by warp 0, into shared memory and (the first tile's blocks) the gate
        // rows the chunk kernels read; then every row's weights.
        if (warp_id() == 0) {
            const u64 row0 = (u64)bh * d.t + t0;
            const auto put = [&](int j, float i, float lf, float F, float m) {
                g.i[j] = i;
                g.lf[j] = lf;
                g.F[j] = F;
                g.m[j] = m;
                if (lead) rows.put(row0 + j, i, lf, F, m);
            };
            const float m_end = walk_gates(gi, gf, hd, b, hh, t0, len, m_prev, put);
            if (lead && lane_id() == 0) ms[(u64)bh * (nc + 1) + ci + 1] = m_end;
        }
        cp_async_wait<0>();
        __syncthreads();
        const float f_last = g.F[len - 1], m_last = g.m[len - 1];
        for (int j = threadIdx.x; j < lc; j += nthreads()) {
            if (j < len)
                row_weights(g, j, m_prev, f_last, m_last);
            else
                g.a[j] = g.wl[j] = 0.0f;
        }
        __syncthreads();
        m_prev = m_last;
        if (ci + 1 < nc) stage(ci + 1);
        // n = a_end n + sum_s w_last,s k_s, from k before its scaling below.
        const float a_end = g.a[len - 1];
        for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s = fmaf(K.at(j, c), g.wl[j], s);
            nv[c] = a_end * nv[c] + s;
            if (lead) n_out[(u64)(ci + 1) * d.dk + c] = nv[c];
        }
        __syncthreads();
        // K becomes diag(w_last) K: each step's weight in the state at the chunk's end.
        scale_rows(K, len, d.dk, [&](int s) { return g.wl[s]; });
        __syncthreads();
        float* c_next = c_out + (u64)(ci + 1) * csz;
        block_mm_onto<TC>(K.t(), V, d.dk, lc, vt.w, C, [&](int r, int c, float x, float o) {
            const float y = a_end * o + x;
            C.set(r, c, y);
            c_next[r * d.dv + c] = y;
        });
        __syncthreads();
    }
}

// Shared memory (`chunk_fwd_bytes` in cuda.rs matches): f32 n [Dk] and the per-row vectors; then
// tiles of T: q, k [lp, Dk], v [lp, bv], C_prev [Dk, bv], the scores [lp, lp].
template <typename T, bool TC>
__device__ void mlstm_chunk_fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                const float* __restrict__ gr, const float* __restrict__ cs,
                                const float* __restrict__ ns, const float* __restrict__ ms, T* __restrict__ hout,
                                float* __restrict__ den, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h, ci = blockIdx.z;
    const VTile vt = value_tile(d);
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    float* nv = take(f, round16(d.dk));
    float* rden = take(f, lp);
    float* psum = take(f, lp);
    const Gates g = carve_gates(f, lp);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv);
    const STile<T> Q = take_tile(e, lp, ldk), K = take_tile(e, lp, ldk), V = take_tile(e, lp, ldv);
    const STile<T> Cb = take_tile(e, d.dk, ldv), P = take_tile(e, lp, tile_ld<T>(lp));

    const u64 csz = (u64)d.dk * d.dv;
    stage_cols(Q.p, Q.ld, q, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
    stage_cols(K.p, K.ld, k, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
    stage_cols(V.p, V.ld, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w);
    cp_async_commit();
    load_state(Cb, cs + at_chunk(bh, nc + 1, ci, csz) + vt.e0, d, vt);
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) nv[c] = ns[at_chunk(bh, nc + 1, ci, d.dk) + c];
    for (int j = threadIdx.x; j < lp; j += nthreads()) psum[j] = 0.0f;
    chunk_gates(g, gr, d, bh, t0, len, lc, ms[(u64)bh * (nc + 1) + ci]);
    // q·n by row (in rden until the scores' row sums make it the denominator's inverse), beside
    // the scores: both only read Q.
    for (int j = warp_id(); j < lc; j += nwarps()) {
        const float x = warp_dot(Q.p + j * Q.ld, nv, d.dk) * d.scale;
        if (lane_id() == 0) rden[j] = x;
    }
    chunk_scores<TC>(P, psum, Q, K, d.dk, g, len, lc, d.scale);
    // Per row the denominator's inverse, its parts q·n and m into den (the first value tile's
    // blocks), and Q becomes diag(a) Q / sqrt(Dk) (neither reads what the other writes); then
    // h = [P | Q] [V ; C] / den, one product.
    float* row = blockIdx.y == 0 ? den + (u64)bh * 2 * d.t + t0 : nullptr;
    for (int j = threadIdx.x; j < lc; j += nthreads()) {
        const float nq = psum[j] + g.a[j] * rden[j];
        rden[j] = j < len ? 1.0f / (fmaxf(fabsf(nq), expf(-g.m[j])) + d.eps) : 0.0f;
        if (row && j < len) {
            row[j] = nq;
            row[j + d.t] = g.m[j];
        }
    }
    scale_rows(Q, lc, d.dk, [&](int j) { return g.a[j] * d.scale; });
    __syncthreads();
    block_mm<TC>(cat_cols(P, Q, lc), cat_rows(V, Cb, lc), lc, lc + d.dk, vt.w, [&](int j, int c, float x) {
        if (j < len) hout[hd.at(b, hh, t0 + j, d.dv) + vt.e0 + c] = from_float<T>(x * rden[j]);
    });
}

// Rows whose dh·h a warp of mlstm_prep_bwd sums at once.
#define PREP_ROWS 8

// No shared memory: every row's statistics come from its dh·h and the forward's den.
template <typename T>
__device__ void mlstm_prep_bwd(const T* __restrict__ gi, const T* __restrict__ gf, const float* __restrict__ ms,
                               const float* __restrict__ den, const T* __restrict__ hfw, const T* __restrict__ dh,
                               float* __restrict__ rows, RecDims d) {
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h, ci = blockIdx.z;
    const int nc = (d.t + d.chunk - 1) / d.chunk, t0 = ci * d.chunk, len = min(d.chunk, d.t - t0);
    const Heads hd{d.t, d.h};
    const float* nqs = den + (u64)bh * 2 * d.t;
    const float* m_row = nqs + d.t;
    const RowStats out = RowStats::of(rows, d);
    // Each row's dh·h over all of Dv, a warp per PREP_ROWS rows whose elements it loads before
    // summing any: one wait on global memory a batch, not one a row. Lane u then finishes row u.
    for (int j0 = warp_id() * PREP_ROWS; j0 < len; j0 += nwarps() * PREP_ROWS) {
        float sum[PREP_ROWS];
#pragma unroll
        for (int u = 0; u < PREP_ROWS; ++u) sum[u] = 0.0f;
        for (int c = lane_id(); c < d.dv; c += 32) {
            float x[PREP_ROWS], y[PREP_ROWS];
#pragma unroll
            for (int u = 0; u < PREP_ROWS; ++u) {
                const bool in = j0 + u < len;
                const u64 at = hd.at(b, hh, t0 + (in ? j0 + u : 0), d.dv) + c;
                x[u] = in ? to_float(dh[at]) : 0.0f;
                y[u] = in ? to_float(hfw[at]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < PREP_ROWS; ++u) sum[u] = fmaf(x[u], y[u], sum[u]);
        }
        float hdot = 0.0f;
#pragma unroll
        for (int u = 0; u < PREP_ROWS; ++u) {
            const float x = warp_sum(sum[u]);
            if (lane_id() == u) hdot = x;
        }
        const int t = t0 + j0 + lane_id();
        if (lane_id() < PREP_ROWS && t < t0 + len) {
            const float nq = nqs[t], floor = expf(-m_row[t]);
            const float r = 1.0f / (fmaxf(fabsf(nq), floor) + d.eps), dden = -hdot * r;
            const u64 at = (u64)bh * d.t + t, g_at = hd.at(b, hh, t, 1);
            out.r[at] = r;
            // The max's gradient goes to |q^T n| only where it strictly won (ties: exp(-m)).
            out.dnq[at] = fabsf(nq) > floor ? (nq > 0.0f ? dden : -dden) : 0.0f;
            out.dm[at] = d.eps * dden;
            const float before = t == 0 ? ms[(u64)bh * (nc + 1)] : m_row[t - 1];
            out.win[at] = log_sigmoid(to_float(gf[g_at])) + before > to_float(gi[g_at]) ? 1.0f : 0.0f;
        }
    }
}

// Shared memory (`scan_bwd_bytes` in cuda.rs matches): f32 dC [Dk, bv], dn [Dk], 1 / (den + eps)
// and dnq by row, the gates, 32 floats of block-sum scratch; then tiles of T: q [lp, Dk], dnum
// [lp, bv], twice (as mlstm_scan_fwd's k and v).
template <typename T, bool TC>
__device__ void mlstm_scan_bwd(const T* __restrict__ q, const float* __restrict__ gr, const float* __restrict__ cs,
                               const float* __restrict__ ns, const float* __restrict__ ms,
                               const float* __restrict__ rows,
                               const T* __restrict__ dh, const T* __restrict__ dcT, const T* __restrict__ dnT,
                               float* __restrict__ dcs, float* __restrict__ dns, T* __restrict__ dc0,
                               T* __restrict__ dn0, float* __restrict__ dots, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    const STile<float> dC = take_tile(f, d.dk, tile_ld<float>(d.bv));
    float* dn = take(f, round16(d.dk));
    float* rr = take(f, lp);
    float* dnq = take(f, lp);
    const Gates g = carve_gates(f, lp);
    float* red = take(f, 32);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv);
    const STile<T> Q0 = take_tile(e, lp, ldk), DN0 = take_tile(e, lp, ldv);
    const STile<T> Q1 = take_tile(e, lp, ldk), DN1 = take_tile(e, lp, ldv);
    const RowStats st = RowStats::of(const_cast<float*>(rows), d);
    // Chunk ci's q and dh into the tiles of its parity.
    const auto stage = [&](int ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        stage_cols((ci & 1 ? Q1 : Q0).p, ldk, q, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
        stage_cols((ci & 1 ? DN1 : DN0).p, ldv, dh, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w);
        cp_async_commit();
    };
    stage(nc - 1);

    const u64 csz = (u64)d.dk * d.dv;
    const float* c_all = cs + at_chunk(bh, nc + 1, 0, csz) + vt.e0;
    const float* n_all = ns + at_chunk(bh, nc + 1, 0, d.dk);
    // The final state's dot with its gradient, and at the end the initial state's: m's gradient
    // through the states (each is exp(-m) times a stable one), summed over the tiles by mlstm_gates.
    float part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int r = idx / vt.w, c = idx % vt.w;
        const float x = to_float(dcT[bh * csz + vt.e0 + r * d.dv + c]);
        dC.set(r, c, x);
        dcs[at_chunk(bh, nc, nc - 1, csz) + vt.e0 + r * d.dv + c] = x;
        part = fmaf(x, c_all[nc * csz + r * d.dv + c], part);
    }
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        dn[c] = to_float(dnT[(u64)bh * d.dk + c]);
        if (lead) part = fmaf(dn[c], n_all[(u64)nc * d.dk + c], part);
    }
    float* dot_out = dots + ((u64)bh * d.nv + blockIdx.y) * 2;
    part = block_sum(part, red);
    if (threadIdx.x == 0) dot_out[0] = part;

    for (int ci = nc - 1; ci >= 0; --ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        for (int c = threadIdx.x; c < d.dk; c += nthreads())
            if (lead) dns[at_chunk(bh, nc, ci, d.dk) + c] = dn[c];
        const STile<T> Q = ci & 1 ? Q1 : Q0, DN = ci & 1 ? DN1 : DN0;
        for (int j = threadIdx.x; j < lp; j += nthreads()) {
            const u64 at = (u64)bh * d.t + t0 + j;
            rr[j] = j < len ? st.r[at] : 0.0f;
            dnq[j] = j < len ? st.dnq[at] : 0.0f;
        }
        chunk_gates(g, gr, d, bh, t0, len, lc, ms[(u64)bh * (nc + 1) + ci]);
        if (ci > 0) stage(ci - 1);
        const float a_end = g.a[len - 1];
        // dn = a_end dn + (diag(a) Q)^T dnq / sqrt(Dk), from q before its scaling below.
        for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s = fmaf(Q.at(j, c) * g.a[j], dnq[j], s);
            dn[c] = a_end * dn[c] + s * d.scale;
        }
        __syncthreads();
        scale_rows(Q, lc, d.dk, [&](int j) { return g.a[j] * d.scale; });
        scale_rows(DN, lc, vt.w, [&](int j) { return rr[j]; });
        __syncthreads();
        // dC = a_end dC + (diag(a) Q)^T dnum / sqrt(Dk): the gradient at the previous chunk's
        // end, stored as it is made (the last chunk's came with dcT).
        float* dc_end = dcs + at_chunk(bh, nc, ci > 0 ? ci - 1 : 0, csz) + vt.e0;
        block_mm_onto<TC>(Q.t(), DN, d.dk, lc, vt.w, dC, [&](int r, int c, float x, float o) {
            const float y = a_end * o + x;
            dC.set(r, c, y);
            if (ci > 0) dc_end[r * d.dv + c] = y;
        });
        __syncthreads();
    }
    part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int r = idx / vt.w, c = idx % vt.w;
        const float x = dC.at(r, c);
        dc0[bh * csz + vt.e0 + r * d.dv + c] = from_float<T>(x);
        part = fmaf(x, c_all[r * d.dv + c], part);
    }
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        if (lead) {
            dn0[(u64)bh * d.dk + c] = from_float<T>(dn[c]);
            part = fmaf(dn[c], n_all[c], part);
        }
    }
    part = block_sum(part, red);
    if (threadIdx.x == 0) dot_out[1] = part;
}

// mlstm_grads_lean's bound (GRADS_LEAN_THREADS and _BLOCKS in cuda.rs): at 256 threads and three
// blocks per SM, ptxas must fit it in about 80 registers, where REC_THREADS' bound lets it take
// about 120, which leaves room for two such blocks only (register counts: BENCHMARKS.md).
#define GRADS_LEAN_THREADS 256
#define GRADS_LEAN_BLOCKS 3

// Shared memory (`grads_bytes` in cuda.rs matches): f32 an accumulator tile [lp, max(Dk, bv)],
// dn and n_prev [Dk], the per-row vectors, the gates, 32 floats of block-sum scratch; then tiles
// of T: q, k [lp, Dk], v and dnum [lp, bv], the scores and their gradient [lp, lp], dC and
// (unless LEAN) C_prev [Dk, bv]. gates: each tile's shares of dlf and di with m held fixed, f32 [nv, 2, B·H, T].
template <typename T, bool TC, bool LEAN>
__device__ void mlstm_grads(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                            const float* __restrict__ gr, const float* __restrict__ cs,
                            const float* __restrict__ ns, const float* __restrict__ ms,
                            const float* __restrict__ rows, const T* __restrict__ dh,
                            const float* __restrict__ dcs, const float* __restrict__ dns, T* __restrict__ dq,
                            T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ gates,
                            float* __restrict__ part_buf, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h, ci = blockIdx.z;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    const STile<float> ACC = take_tile(f, lp, tile_ld<float>(max(d.dk, d.bv)));
    float* dnv = take(f, round16(d.dk));
    float* np = take(f, round16(d.dk));
    float* qn = take(f, lp);
    float* dnq = take(f, lp);
    float* rr = take(f, lp);
    float* drow = take(f, lp);
    float* dcol = take(f, lp);
    float* dlend = take(f, lp);
    float* qdc = take(f, lp);
    float* psum = take(f, lp);
    const Gates g = carve_gates(f, lp);
    float* red = take(f, 32);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv), ldp = tile_ld<T>(lp);
    const STile<T> Q = take_tile(e, lp, ldk), K = take_tile(e, lp, ldk), V = take_tile(e, lp, ldv);
    const STile<T> DN = take_tile(e, lp, ldv), P = take_tile(e, lp, ldp), DP = take_tile(e, lp, ldp);
    const STile<T> dCb = take_tile(e, d.dk, ldv), Cpb = LEAN ? dCb : take_tile(e, d.dk, ldv);
    const RowStats st = RowStats::of(const_cast<float*>(rows), d);

    const u64 rk = (u64)d.b * d.t * d.h * d.dk, stride = 2 * rk, csz = (u64)d.dk * d.dv;
    const bool split = d.nv > 1;
    const Sink<T> s_dq{dq, part_buf, stride, split}, s_dk{dk, part_buf + rk, stride, split};
    stage_cols(Q.p, Q.ld, q, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
    stage_cols(K.p, K.ld, k, hd, b, hh, t0, len, lc, d.dk, 0, d.dk);
    stage_cols(V.p, V.ld, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w);
    stage_cols(DN.p, DN.ld, dh, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w);
    cp_async_commit();
    // n_prev, dn (by column) and the rows' statistics in one loop, so that their loads wait out
    // one latency together.
    float part = 0.0f;
    for (int i = threadIdx.x; i < max(d.dk, lp); i += nthreads()) {
        const bool col = i < d.dk, row = i < len;
        const u64 at = (u64)bh * d.t + t0 + i;
        const float n_i = col ? ns[at_chunk(bh, nc + 1, ci, d.dk) + i] : 0.0f;
        const float dn_i = col && lead ? dns[at_chunk(bh, nc, ci, d.dk) + i] : 0.0f;
        const float r_i = row ? st.r[at] : 0.0f, dnq_i = row && lead ? st.dnq[at] : 0.0f;
        if (col) {
            np[i] = n_i;
            dnv[i] = dn_i;
            part = fmaf(dn_i, n_i, part);
        }
        if (i < lp) {
            rr[i] = r_i;
            dnq[i] = dnq_i;
            dlend[i] = psum[i] = drow[i] = dcol[i] = qdc[i] = 0.0f;
        }
    }
    // The carried dC and the state before the chunk, as operands; their dot (with dn·n) is the
    // share of the chunk's log decay in the carried gradient.
    const float* c_prev = cs + at_chunk(bh, nc + 1, ci, csz) + vt.e0;
    part += stage_states(LEAN ? STile<T>{nullptr, 0} : Cpb, c_prev, dCb, dcs + at_chunk(bh, nc, ci, csz) + vt.e0,
                         d, vt);
    chunk_gates(g, gr, d, bh, t0, len, lc, ms[(u64)bh * (nc + 1) + ci]);
    // What needs only the operands and the gates, between the same two barriers (none reads
    // what another writes): q·n by row, dnum = dh / (den + eps) in place, dv's second term
    // diag(w_last) K dC into ACC (its dot with v by row into dlend) and the scores.
    for (int j = warp_id(); j < lc; j += nwarps()) {
        const float x = warp_dot(Q.p + j * Q.ld, np, d.dk) * d.scale;
        if (lane_id() == 0) qn[j] = x;
    }
    scale_rows(DN, lc, vt.w, [&](int j) { return rr[j]; });
    block_mm_sums<TC>(
        K, dCb, lc, d.dk, vt.w,
        [&](int s, int c, float x) {
            const float w = g.wl[s] * x;
            ACC.set(s, c, w);
            return make_float2(w * V.at(s, c), 0.0f);
        },
        dlend, nullptr);
    chunk_scores<TC>(P, psum, Q, K, d.dk, g, len, lc, d.scale);
    // The scores' row sums are not read again: psum holds dP ⊙ P's diagonal from here.
    float* ddiag = psum;
    // dv = P^T dnum + diag(w_last) K dC.
    block_mm_onto<TC>(P.t(), DN, lc, lc, vt.w, ACC, [&](int s, int c, float x, float o) {
        if (s < len) dv[hd.at(b, hh, t0 + s, d.dv) + vt.e0 + c] = from_float<T>(o + x);
    });
    // dP = dnum V^T (+ dnq on the causal part): dP ⊙ P, the log-weight gradients, by rows (to
    // F_j) and columns (to i_s and -F_s), the diagonal apart (its F_j - F_s is zero: its terms to F
    // cancel exactly, so they are left out rather than rounded in f32; it goes to i_j alone);
    // DP becomes dS = dP ⊙ w.
    block_mm_sums<TC>(
        DN, V.t(), lc, vt.w, lc,
        [&](int j, int s, float x) {
            const bool in = s <= j && j < len;
            const float dp = in ? x + dnq[j] : 0.0f, dl = dp * P.at(j, s);
            DP.set(j, s, dp * weight(g, j, s, len));
            if (s == j) ddiag[j] = dl;
            const float off = s == j ? 0.0f : dl;
            return make_float2(off, off);
        },
        drow, dcol);
    __syncthreads();
    // dk = dS^T Q / sqrt(Dk) + diag(w_last) (V dC^T + dn); dq = (dS K + diag(a) (dnum C_prev^T +
    // dnq n_prev^T)) / sqrt(Dk), and q·(C_prev dnum) by row into qdc.
    block_mm<TC>(V, dCb.t(), lc, vt.w, d.dk, [&](int s, int c, float x) {
        ACC.set(s, c, g.wl[s] * (x + dnv[c]));
    });
    __syncthreads();
    block_mm_onto<TC>(DP.t(), Q, lc, lc, d.dk, ACC, [&](int s, int c, float x, float o) {
        if (s < len) s_dk.put(hd.at(b, hh, t0 + s, d.dk) + c, o + x * d.scale);
    });
    // dC's last use was the product before the barrier above: C_prev takes its tile.
    if constexpr (LEAN) load_state(Cpb, c_prev, d, vt);
    __syncthreads();
    block_mm<TC>(DN, Cpb.t(), lc, vt.w, d.dk, [&](int j, int c, float x) { ACC.set(j, c, x); });
    __syncthreads();
    for (int j = warp_id(); j < lc; j += nwarps()) {
        const float x = warp_dot(Q.p + j * Q.ld, ACC.p + j * ACC.ld, d.dk);
        const float kn = warp_dot(K.p + j * K.ld, dnv, d.dk);
        if (lane_id() == 0) {
            qdc[j] = x;
            dlend[j] += g.wl[j] * kn;
        }
    }
    block_mm<TC>(DP, K, lc, lc, d.dk, [&](int j, int c, float x) {
        if (j < len)
            s_dq.put(hd.at(b, hh, t0 + j, d.dk) + c, (x + g.a[j] * (ACC.at(j, c) + dnq[j] * np[c])) * d.scale);
    });
    const float dlog_carry = g.a[len - 1] * block_sum(part, red);
    // The gates with m held fixed: log w_js = i_s + F_j - F_s - m_j, log a_j = m_prev + F_j - m_j
    // and the chunk's end state through a_L and w_L; dlf_j is the reverse sum of dF from j (drow
    // becomes dF, then those sums), by one warp. The last step's share of the end state has
    // F_L - F_s zero, as the diagonal: it goes to i alone.
    if (warp_id() == 0) {
        const int last = len - 1;
        float end_sum = 0.0f;
        for (int s = lane_id(); s < last; s += 32) end_sum += dlend[s];
        end_sum = warp_sum(end_sum);
        for (int j = lane_id(); j < len; j += 32)
            drow[j] += g.a[j] * (qdc[j] * d.scale + dnq[j] * qn[j]) - dcol[j] +
                       (j == last ? dlog_carry + end_sum : -dlend[j]);
        __syncwarp();
        warp_cumsum(drow, len, true);
        const u64 n = (u64)d.b * d.h * d.t, tile = (u64)blockIdx.y * 2 * n;
        for (int j = lane_id(); j < len; j += 32) {
            const u64 at = (u64)bh * d.t + t0 + j;
            gates[tile + at] = drow[j];
            gates[tile + n + at] = dcol[j] + ddiag[j] + dlend[j];
        }
    }
}

// A block per head. The stabilizers' own gradient dm_s (mlstm_prep_bwd's eps · dden, and at the
// last step the final state's share) flows back along m_s = max(lf_s + m_{s-1}, i_s): with c_s
// the gradient reaching m_s, c_s = dm_s + win_{s+1} c_{s+1}, and c_s goes to lf_s where the
// carried side won (win_s), else to i_s; what passes m_0's max reaches the initial m. The
// recurrence is a reverse scan of affine maps x -> A x + B (A = win_{s+1}, 0 or 1, so the scan is
// exact), run over the whole block: each thread composes GATE_STEPS consecutive steps, the block
// scans the threads' maps (lanes by shuffles, warps through shared memory), and each thread then
// walks its steps from the carry its predecessors hand it. Pieces of GATE_STEPS · blockDim steps
// follow one another, the last c of one the carry into the next.
#define GATE_THREADS 256
#define GATE_STEPS 4
template <typename T>
__device__ void mlstm_gates(const T* __restrict__ gf, const float* __restrict__ rows,
                            const float* __restrict__ gates, const float* __restrict__ dots,
                            const T* __restrict__ dmT, T* __restrict__ di, T* __restrict__ df,
                            T* __restrict__ dm0, RecDims d) {
    constexpr int U = GATE_STEPS;
    __shared__ float warp_a[32], warp_b[32], to_m0;
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h, lane = lane_id(), w = warp_id();
    const Heads hd{d.t, d.h};
    const RowStats st = RowStats::of(const_cast<float*>(rows), d);
    const u64 n = (u64)d.b * d.h * d.t;
    float last = to_float(dmT[bh]);
    for (int v = 0; v < d.nv; ++v) last -= dots[((u64)bh * d.nv + v) * 2];
    if (threadIdx.x == 0) to_m0 = 0.0f;
    float carry = 0.0f;
    for (int hi = d.t - 1; hi >= 0; hi -= U * nthreads()) {
        // This thread's steps s = hi - U threadIdx - u, all loaded before any is used.
        float win[U], A[U], B[U], dlf[U], dii[U], f[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int s = hi - U * (int)threadIdx.x - u;
            const u64 at = (u64)bh * d.t + (s >= 0 ? s : 0);
            win[u] = s >= 0 ? st.win[at] : 0.0f;
            // Steps before the sequence's start pass their carry through unchanged.
            A[u] = s < 0 ? 1.0f : s + 1 < d.t ? st.win[at + 1] : 0.0f;
            B[u] = s >= 0 ? st.dm[at] + (s == d.t - 1 ? last : 0.0f) : 0.0f;
            f[u] = s >= 0 ? to_float(gf[hd.at(b, hh, s, 1)]) : 0.0f;
            dlf[u] = dii[u] = 0.0f;
            for (int v = 0; s >= 0 && v < d.nv; ++v) {
                dlf[u] += gates[(u64)v * 2 * n + at];
                dii[u] += gates[(u64)v * 2 * n + n + at];
            }
        }
        // The thread's steps as one map, then the inclusive scan of the lanes' maps (a lane's map
        // applied after those of the lanes before it).
        float ma = 1.0f, mb = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            mb = fmaf(A[u], mb, B[u]);
            ma *= A[u];
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float pa = __shfl_up_sync(FULL_MASK, ma, o), pb = __shfl_up_sync(FULL_MASK, mb, o);
            if (lane >= o) {
                mb = fmaf(ma, pb, mb);
                ma *= pa;
            }
        }
        float ea = __shfl_up_sync(FULL_MASK, ma, 1), eb = __shfl_up_sync(FULL_MASK, mb, 1);
        if (lane == 0) ea = 1.0f, eb = 0.0f;
        if (lane == 31) warp_a[w] = ma, warp_b[w] = mb;
        __syncthreads();
        // The carry into this warp (through the warps before it), into this thread, and into the
        // next piece (through all of them).
        float into_warp = carry;
        for (int v = 0; v < nwarps(); ++v) {
            if (v == w) into_warp = carry;
            carry = fmaf(warp_a[v], carry, warp_b[v]);
        }
        float x = fmaf(ea, into_warp, eb);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int s = hi - U * (int)threadIdx.x - u;
            x = fmaf(A[u], x, B[u]);
            if (s < 0) continue;
            if (win[u] != 0.0f)
                dlf[u] += x;
            else
                dii[u] += x;
            const u64 g_at = hd.at(b, hh, s, 1);
            // d lf / d f = sigmoid(-f) = 1 - exp(lf), without cancellation near lf = 0.
            di[g_at] = from_float<T>(dii[u]);
            df[g_at] = from_float<T>(-dlf[u] * expm1f(log_sigmoid(f[u])));
            if (s == 0) to_m0 = win[u] * x;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float init = 0.0f;
        for (int v = 0; v < d.nv; ++v) init += dots[((u64)bh * d.nv + v) * 2 + 1];
        dm0[bh] = from_float<T>(init + to_m0);
    }
}

#define MLSTM_KERNELS(T, SUFFIX, TC)                                                                               \
    extern "C" __global__ void __launch_bounds__(GATE_ROW_THREADS) mlstm_gate_rows_bwd_##SUFFIX(                    \
        const T* gi, const T* gf, const float* ms, float* gr, RecDims d) {                                         \
        mlstm_gate_rows_bwd<T>(gi, gf, ms, gr, d);                                                                 \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_scan_fwd_##SUFFIX(                             \
        const T* k, const T* v, const T* gi, const T* gf, const T* c0, const T* n0, const T* m0, float* cs,        \
        float* ns, float* ms, float* gr, RecDims d) {                                                              \
        mlstm_scan_fwd<T, TC>(k, v, gi, gf, c0, n0, m0, cs, ns, ms, gr, d);                                        \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_chunk_fwd_##SUFFIX(                            \
        const T* q, const T* k, const T* v, const float* gr, const float* cs, const float* ns, const float* ms,    \
        T* h, float* den, RecDims d) {                                                                             \
        mlstm_chunk_fwd<T, TC>(q, k, v, gr, cs, ns, ms, h, den, d);                                                \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_prep_bwd_##SUFFIX(                             \
        const T* gi, const T* gf, const float* ms, const float* den, const T* h, const T* dh, float* rows,         \
        RecDims d) {                                                                                               \
        mlstm_prep_bwd<T>(gi, gf, ms, den, h, dh, rows, d);                                                        \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_scan_bwd_##SUFFIX(                             \
        const T* q, const float* gr, const float* cs, const float* ns, const float* ms, const float* rows,          \
        const T* dh, const T* dcT, const T* dnT, float* dcs, float* dns, T* dc0, T* dn0, float* dots, RecDims d) { \
        mlstm_scan_bwd<T, TC>(q, gr, cs, ns, ms, rows, dh, dcT, dnT, dcs, dns, dc0, dn0, dots, d);                 \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_grads_##SUFFIX(                                \
        const T* q, const T* k, const T* v, const float* gr, const float* cs, const float* ns, const float* ms,    \
        const float* rows, const T* dh, const float* dcs, const float* dns, T* dq, T* dk, T* dv, float* gates,     \
        float* part, RecDims d) {                                                                                  \
        mlstm_grads<T, TC, false>(q, k, v, gr, cs, ns, ms, rows, dh, dcs, dns, dq, dk, dv, gates, part, d);   \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(GRADS_LEAN_THREADS, GRADS_LEAN_BLOCKS) mlstm_grads_lean_##SUFFIX( \
        const T* q, const T* k, const T* v, const float* gr, const float* cs, const float* ns, const float* ms,    \
        const float* rows, const T* dh, const float* dcs, const float* dns, T* dq, T* dk, T* dv, float* gates,     \
        float* part, RecDims d) {                                                                                  \
        mlstm_grads<T, TC, true>(q, k, v, gr, cs, ns, ms, rows, dh, dcs, dns, dq, dk, dv, gates, part, d);    \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(GATE_THREADS) mlstm_gates_##SUFFIX(                               \
        const T* gf, const float* rows, const float* gates, const float* dots, const T* dmT, T* di, T* df,        \
        T* dm0, RecDims d) {                                                                                       \
        mlstm_gates<T>(gf, rows, gates, dots, dmT, di, df, dm0, d);                                                \
    }

MLSTM_KERNELS(float, f32, false)
MLSTM_KERNELS(bf16, bf16, true)
