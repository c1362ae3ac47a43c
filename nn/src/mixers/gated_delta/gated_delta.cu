// gated_delta.cu: the gated delta rule, chunkwise (WY/UT form), forward and backward, for any
// dtype, chunk and head size (where gated_delta_parallel.cu takes the shape, it runs); swax-cuda's
// mma.cuh and chunk.cuh (cuda/kernels/), then gated_delta.cuh, are prepended. Equations and
// layouts: mod.rs beside this file; the CPU kernel cpu.rs beside it is the reference, and this
// file follows its chunk decomposition and the order of its backward, with two rewritings of the
// same algebra that save tiles (shared memory is what bounds a block here):
//
// - U = T X - W S0 (X = diag(beta) V, W = T diag(beta γ) K) is computed as U = T diag(beta) Rb
//   with Rb = V - diag(γ) K S0, the per-row delta target; W is never formed.
// - In the backward, with DX = T^T dU: dA = -T^T dT T^T = -DX U^T (since dT = dU R^T and
//   U = T R), and dY = T^T dW = -DX S0^T; so no L x L product with T beyond T^T dU is needed.
//
// One block per (batch, head, value tile) walks its chunks in order (forward) or in reverse
// (backward); see ../mlstm/mlstm.cu for when Dv is split. The chunk's tiles are in shared memory in
// the data's type E (bf16 tiles reach the tensor cores through ldmatrix): normalized q (times
// 1/sqrt(Dk)), normalized k, the value tile of v (then the delta targets Rb, then dO), the deltas
// U, the L x L tile that holds in turn T diag(beta), the scores P, dP, dA and d(k k^T), and the
// chunk's start state S0 (and, backward, the gradient dS of its end state). Each is either a
// product's operand, which the tensor cores round to bf16 anyway, or an input to a gradient that is
// itself written in bf16. In f32: T = (I + A)^-1 (inverted in place) and one tile that sums two
// products (the forward's output, the backward's dU). The states themselves stay in global f32
// memory (the forward's output); the backward carries dS, and accumulates dq and dk per chunk, in
// global f32 scratch.
#include "common.cuh"

// Shared-memory layout of both kernels (`shared_bytes` in cuda.rs matches):
// first the f32 regions (the tile F [lp, bv] that sums two products, TT [lp, lp], the inversion
// scratch [lp, max(16, lp / 4)] and the per-row vectors), then the tiles of E: the row tiles Q
// [lp, max(Dk, bv)] (the backward's dX reuses it), K [lp, Dk], V, U and a fifth [lp, bv] (the
// forward's UT = diag(tend) U, the backward's dO), PP [lp, lp], and the state tile [Dk, bv] S0s
// (the backward a second, dSs [max(Dk, lp), bv], which holds dS as an operand and then dX). Every
// row is padded by 16 bytes (tile_ld).
template <typename E>
struct Tiles {
    STile<float> F;
    STile<float> TT;
    float* scratch;
    Rows r;
    float* vec;
    STile<E> Q, K, V, U, UT, DO, PP, S0s, dSs;
};

// Written out rather than through chunk.cuh's take/take_tile (as mlstm.cu carves): with those,
// ptxas scheduled the backward differently and it ran slower.
template <typename E>
__device__ __forceinline__ Tiles<E> carve_tiles(void* base, int lp, const RecDims& d, int vectors, bool backward) {
    Tiles<E> t;
    float* f = static_cast<float*>(base);
    const int ldf = tile_ld<float>(d.bv), ldt = tile_ld<float>(lp);
    t.F = STile<float>{f, ldf};
    f += lp * ldf;
    t.TT = STile<float>{f, ldt};
    f += lp * ldt;
    t.scratch = f;
    f += lp * max(16, lp / 4);
    t.r = carve_rows(f, lp);
    t.vec = f;
    f += vectors * lp;
    E* e = reinterpret_cast<E*>(f);
    const int ldq = tile_ld<E>(max(d.dk, d.bv)), ldk = tile_ld<E>(d.dk), ldv = tile_ld<E>(d.bv);
    const int ldp = tile_ld<E>(lp);
    STile<E>* rows[5] = {&t.Q, &t.K, &t.V, &t.U, backward ? &t.DO : &t.UT};
    t.UT = t.DO = STile<E>{nullptr, ldv};
    for (int i = 0; i < 5; ++i) {
        const int ld = i == 0 ? ldq : i == 1 ? ldk : ldv;
        *rows[i] = STile<E>{e, ld};
        e += lp * ld;
    }
    t.PP = STile<E>{e, ldp};
    e += lp * ldp;
    t.S0s = STile<E>{e, ldv};
    e += d.dk * ldv;
    t.dSs = STile<E>{backward ? e : nullptr, ldv};
    return t;
}

// What the forward and the backward both compute for a chunk from its start state (S0s, the
// value tile in shared memory): TT = (I + A)^-1, V becomes Rb = V - diag(γ) K S0, U = T diag(beta)
// Rb, and PP the scores P = (exp(G_j - G_s) q_j·k_s)_{s<=j}; for the forward (UT.p set) also UT =
// diag(tend) U and F = diag(γ) Q S0, the output's first term. Synchronizes.
template <bool TC, typename E>
__device__ void chunk_deltas(const Tiles<E>& tl, int len, int lc, const RecDims& d, VTile vt) {
    const Rows& r = tl.r;
    block_mm<TC>(tl.K, tl.K.t(), lc, d.dk, lc, [&](int j, int s, float x) {
        tl.TT.set(j, s, s < j ? r.beta[j] * decay(r, j, s, len) * x : 0.0f);
    });
    block_mm<TC>(tl.K, tl.S0s, lc, d.dk, vt.w,
                 [&](int j, int e, float x) { tl.V.set(j, e, tl.V.at(j, e) - r.gam[j] * x); });
    if (tl.UT.p)
        block_mm<TC>(tl.Q, tl.S0s, lc, d.dk, vt.w, [&](int j, int e, float x) { tl.F.set(j, e, r.gam[j] * x); });
    __syncthreads();
    invert_unit_lower(tl.TT.p, tl.TT.ld, lc, tl.scratch);
    for (int idx = threadIdx.x; idx < lc * lc; idx += nthreads()) {
        const int j = idx / lc, s = idx % lc;
        tl.PP.set(j, s, tl.TT.at(j, s) * r.beta[s]);
    }
    __syncthreads();
    block_mm<TC>(tl.PP, tl.V, lc, lc, vt.w, [&](int j, int e, float x) {
        tl.U.set(j, e, x);
        if (tl.UT.p) tl.UT.set(j, e, r.tend[j] * x);
    });
    __syncthreads();
    block_mm<TC>(tl.Q, tl.K.t(), lc, d.dk, lc, [&](int j, int s, float x) { tl.PP.set(j, s, x * decay(r, j, s, len)); });
    __syncthreads();
}

// acc += a · b for acc [M, Dk] f32 in global memory (rows of Dk), adding each row's dot with
// the same row of n into dots: the last term of dq or dk, with the row dots n·dy that the
// backward of q's or k's normalization needs.
template <bool TC, typename A, typename B, typename E>
__device__ __forceinline__ void add_with_row_dots(A a, B b, int M, int K, int dk, float* acc, STile<E> n,
                                                  float* dots) {
    block_mm_core<TC>(
        a, b, M, K, dk, Mat{acc, dk, 1},
        [&](int j, int e, float x, float o) {
            acc[j * dk + e] = o + x;
            return make_float2((o + x) * n.at(j, e), 0.0f);
        },
        dots, nullptr);
}

template <typename T, bool TC>
__device__ void gdn_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                            const T* __restrict__ beta, const T* __restrict__ g, const T* __restrict__ s0,
                            T* __restrict__ out, float* __restrict__ states, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    const Tiles<T> tl = carve_tiles<T>(smem, lp, d, 0, false);
    const Rows& r = tl.r;
    const ChunkInputs<T> in{q, k, v, beta, g, nullptr};
    const u64 csz = (u64)d.dk * d.dv;
    float* st = states + (u64)bh * (nc + 1) * csz + vt.e0;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int i = idx / vt.w, e = idx % vt.w;
        const float x = to_float(s0[bh * csz + vt.e0 + i * d.dv + e]);
        st[i * d.dv + e] = x;
        tl.S0s.set(i, e, x);
    }

    for (int ci = 0; ci < nc; ++ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        const float* S0 = st + ci * csz;
        float* S1 = st + (ci + 1) * csz;
        load_chunk(tl.Q, tl.K, tl.V, tl.DO, r, in, hd, b, hh, t0, len, lc, d, vt);
        chunk_deltas<TC>(tl, len, lc, d, vt);
        // O = diag(γ) Q S0 + P U, the first term in F.
        block_mm_onto<TC>(tl.PP, tl.U, lc, lc, vt.w, tl.F, [&](int j, int e, float x, float f) {
            if (j < len) out[hd.at(b, hh, t0 + j, d.dv) + vt.e0 + e] = from_float<T>(f + x);
        });
        // S_L = γ_L S0 + K^T diag(tend) U, also into S0s for the next chunk (no product reads
        // S0s here).
        const float g_end = r.gam[len - 1];
        block_mm_onto<TC>(tl.K.t(), tl.UT, d.dk, lc, vt.w, Mat{S0, d.dv, 1}, [&](int i, int e, float x, float s) {
            const float y = g_end * s + x;
            S1[i * d.dv + e] = y;
            tl.S0s.set(i, e, y);
        });
        __syncthreads();
    }
}

// Gradients, chunk by chunk in reverse, in the CPU kernel's order; dgc accumulates the
// gradient of each G_j (the running sum), turned into dg by a reverse cumulative sum at the end
// of the chunk. dS [Dk, Dv] (each value tile its columns), and dq, dk [lp, Dk] per chunk and
// value tile, are f32 scratch in global memory (`scratch`: per head Dk·Dv + nv·2·lp·Dk floats);
// dSs holds dS rounded to E, the products' operand. Every term of dq, dk, dbeta and dg is linear
// in one value tile's columns (of dO, dS, U, dX), so each tile computes its share (`Sink`).
template <typename T, bool TC>
__device__ void gdn_backward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             const T* __restrict__ beta, const T* __restrict__ g, const float* __restrict__ states,
                             const T* __restrict__ dout, const T* __restrict__ dsT, T* __restrict__ dq,
                             T* __restrict__ dk, T* __restrict__ dv, T* __restrict__ dbeta, T* __restrict__ dg,
                             T* __restrict__ ds0, float* __restrict__ scratch, float* __restrict__ part_buf,
                             RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    const Tiles<T> tl = carve_tiles<T>(smem, lp, d, 7, true);
    const Rows& r = tl.r;
    const ChunkInputs<T> in{q, k, v, beta, g, dout};
    float* dgc = tl.vec;
    float* dl = dgc + lp;
    float* dbt = dl + lp;
    float* z = dbt + lp;
    float* ke = z + lp;
    float* cq = ke + lp;
    float* ck = cq + lp;
    __shared__ float red[32];

    const u64 rk = (u64)d.b * d.t * d.h * d.dk, r1 = (u64)d.b * d.t * d.h, stride = 2 * rk + 2 * r1;
    const bool split = d.nv > 1;
    const Sink<T> s_dq{dq, part_buf, stride, split}, s_dk{dk, part_buf + rk, stride, split};
    const Sink<T> s_db{dbeta, part_buf + 2 * rk, stride, split}, s_dg{dg, part_buf + 2 * rk + r1, stride, split};
    const u64 csz = (u64)d.dk * d.dv;
    const float* st = states + (u64)bh * (nc + 1) * csz + vt.e0;
    float* head_scratch = scratch + (u64)bh * (csz + (u64)d.nv * 2 * lp * d.dk);
    float* dS = head_scratch + vt.e0;
    float* DQ = head_scratch + csz + (u64)blockIdx.y * 2 * lp * d.dk;
    float* DK = DQ + (u64)lp * d.dk;
    const Mat dSm{dS, d.dv, 1}, DKm{DK, d.dk, 1};
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int i = idx / vt.w, e = idx % vt.w;
        dS[i * d.dv + e] = to_float(dsT[bh * csz + vt.e0 + i * d.dv + e]);
    }
    __syncthreads();

    for (int ci = nc - 1; ci >= 0; --ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        const float* S0 = st + ci * csz;
        for (int j = threadIdx.x; j < lp; j += nthreads()) dgc[j] = dl[j] = dbt[j] = z[j] = ke[j] = cq[j] = ck[j] = 0.0f;
        const float part = stage_states(tl.S0s, S0, tl.dSs, dS, d, vt);
        const STile<T> DO = tl.DO, DX = tl.dSs;
        const STile<float> DU = tl.F;
        load_chunk(tl.Q, tl.K, tl.V, DO, r, in, hd, b, hh, t0, len, lc, d, vt);
        chunk_deltas<TC>(tl, len, lc, d, vt);
        const float g_end = r.gam[len - 1];
        const float dlog_carry = g_end * block_sum(part, red);
        // dU = diag(tend) K dS + P^T dO; the end state's share of each step's log decay.
        block_mm_sums<TC>(
            tl.K, tl.dSs, lc, d.dk, vt.w,
            [&](int s, int e, float x) {
                const float w = r.tend[s] * x;
                DU.set(s, e, w);
                return make_float2(w * tl.U.at(s, e), 0.0f);
            },
            dl, nullptr);
        __syncthreads();
        block_mm<TC>(tl.PP.t(), DO, lc, lc, vt.w, [&](int s, int e, float x) { DU.set(s, e, DU.at(s, e) + x); });
        // dk = diag(tend) U dS^T + ...: the last read of dSs as dS.
        block_mm<TC>(tl.U, tl.dSs.t(), lc, vt.w, d.dk,
                     [&](int j, int e, float x) { DK[j * d.dk + e] = r.tend[j] * x; });
        __syncthreads();
        // dP = dO U^T: dP ⊙ P is the gradient of the log decays (+ to G_j, - to G_s, so the
        // diagonal's cancels and is left out: see gdn_grads); PP becomes dP ⊙ decay, the
        // gradient of q_j·k_s.
        block_mm_sums<TC>(
            DO, tl.U.t(), lc, vt.w, lc,
            [&](int j, int s, float x) {
                const float dlog = j == s ? 0.0f : x * tl.PP.at(j, s);
                tl.PP.set(j, s, x * decay(r, j, s, len));
                return make_float2(dlog, -dlog);
            },
            dgc, dgc);
        // dq = diag(γ) dO S0^T + ...; γ_j dO_j·(q_j S0) to G_j.
        block_mm_sums<TC>(
            DO, tl.S0s.t(), lc, vt.w, d.dk,
            [&](int j, int e, float x) {
                DQ[j * d.dk + e] = r.gam[j] * x;
                return make_float2(r.gam[j] * x * tl.Q.at(j, e), 0.0f);
            },
            dgc, nullptr);
        // dX = T^T dU, the gradient of R = diag(beta) Rb (into dSs, spent as dS).
        block_mm<TC>(tl.TT.t(), DU, lc, lc, vt.w, [&](int j, int e, float x) { DX.set(j, e, x); });
        __syncthreads();
        // dk += dP^T q, dq += dP k, with the row dots n·dy of q's normalization's backward (n = q
        // r) into cq.
        block_mm_onto<TC>(tl.PP.t(), tl.Q, lc, lc, d.dk, DKm,
                          [&](int j, int e, float x, float o) { DK[j * d.dk + e] = o + x; });
        add_with_row_dots<TC>(tl.PP, tl.K, lc, lc, d.dk, DQ, tl.Q, cq);
        // dv = beta dX, dbeta = dX·Rb (V holds Rb).
        for (int j = warp_id(); j < len; j += nwarps()) {
            float xv = 0.0f;
            for (int e = lane_id(); e < vt.w; e += 32) {
                const float x = DX.at(j, e);
                xv = fmaf(x, tl.V.at(j, e), xv);
                dv[hd.at(b, hh, t0 + j, d.dv) + vt.e0 + e] = from_float<T>(r.beta[j] * x);
            }
            xv = warp_sum(xv);
            if (lane_id() == 0) dbt[j] += xv;
        }
        __syncthreads();
        // Back through q / sqrt(|q|^2 + eps) / sqrt(Dk): scale r (dy - n (n·dy)); then q becomes
        // diag(γ) q for dS_prev.
        for_each_loaded(DQ, len * d.dk, [&](int idx, float y) {
            const int j = idx / d.dk, e = idx % d.dk;
            const float c = cq[j] / (d.scale * d.scale), nq = tl.Q.at(j, e);
            s_dq.put(hd.at(b, hh, t0 + j, d.dk) + e, d.scale * r.rq[j] * (y - nq * c));
            tl.Q.set(j, e, r.gam[j] * nq);
        });
        // Through Rb's -diag(γ) K S0: dY = -dX S0^T, z_j = k_j·(dX S0^T)_j (to G_j).
        block_mm_core<TC>(
            DX, tl.S0s.t(), lc, vt.w, d.dk, DKm,
            [&](int j, int e, float x, float o) {
                DK[j * d.dk + e] = o - r.beta[j] * r.gam[j] * x;
                return make_float2(tl.K.at(j, e) * x, 0.0f);
            },
            z, nullptr);
        // dA = -dX U^T on the strictly lower part.
        block_mm<TC>(DX, tl.U.t(), lc, vt.w, lc, [&](int j, int s, float x) { tl.PP.set(j, s, s < j ? -x : 0.0f); });
        __syncthreads();
        // A_js = beta_j exp(G_j - G_s) k_j·k_s: to beta, the log decays and k k^T (the row sums
        // e_j = sum_s dA_js A_js / beta_j into ke, to beta_j and, times beta_j, to G_j); PP
        // becomes d(k k^T) + its transpose (the two sides of k k^T), so one product gives dk.
        block_mm_sums<TC>(
            tl.K, tl.K.t(), lc, d.dk, lc,
            [&](int j, int s, float x) {
                if (s >= j) return make_float2(0.0f, 0.0f);
                const float da = tl.PP.at(j, s), dec = decay(r, j, s, len), e = da * dec * x;
                tl.PP.set(j, s, da * r.beta[j] * dec);
                tl.PP.set(s, j, da * r.beta[j] * dec);
                return make_float2(e, -r.beta[j] * e);
            },
            ke, dgc);
        // dX scaled for dS_prev's -W^T dU = K^T (-diag(beta γ) dX).
        for (int idx = threadIdx.x; idx < lc * vt.w; idx += nthreads()) {
            const int j = idx / vt.w, e = idx % vt.w;
            DX.set(j, e, -r.beta[j] * r.gam[j] * DX.at(j, e));
        }
        __syncthreads();
        // dS_prev = γ_L dS + (diag(γ) q)^T dO - W^T dU, the two products as one.
        block_mm_onto<TC>(cat_cols(tl.Q.t(), tl.K.t(), lc), cat_rows(DO, DX, lc), d.dk, 2 * lc, vt.w, dSm,
                          [&](int i, int e, float x, float o) { dS[i * d.dv + e] = g_end * o + x; });
        // dk += (d(k k^T) + its transpose) k, with the row dots of k's normalization into ck.
        add_with_row_dots<TC>(tl.PP, tl.K, lc, lc, d.dk, DK, tl.K, ck);
        __syncthreads();
        for_each_loaded(DK, len * d.dk, [&](int idx, float y) {
            const int j = idx / d.dk, e = idx % d.dk;
            s_dk.put(hd.at(b, hh, t0 + j, d.dk) + e, r.rk[j] * (y - tl.K.at(j, e) * ck[j]));
        });
        // dg_j = dlog_carry + sum_s dl_s + sum_{i >= j} (dgc_i + beta_i ke_i - dl_i), by warp 0
        // (dgc first takes z's share, -beta_j γ_j z_j), with dl_{len-1} left out of both sums,
        // where it cancels (see gdn_grads).
        if (warp_id() == 0) {
            if (lane_id() == 0) dl[len - 1] = 0.0f;
            __syncwarp();
            float end = 0.0f;
            for (int j = lane_id(); j < len; j += 32) end += dl[j];
            end = dlog_carry + warp_sum(end);
            for (int j = lane_id(); j < len; j += 32)
                dl[j] = dgc[j] - r.beta[j] * r.gam[j] * z[j] + r.beta[j] * ke[j] - dl[j];
            __syncwarp();
            warp_cumsum(dl, len, true);
            for (int j = lane_id(); j < len; j += 32) {
                const u64 at = hd.at(b, hh, t0 + j, 1);
                s_dg.put(at, end + dl[j]);
                s_db.put(at, dbt[j] + ke[j]);
            }
        }
        __syncthreads();
    }
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int at = (idx / vt.w) * d.dv + idx % vt.w;
        ds0[bh * csz + vt.e0 + at] = from_float<T>(dS[at]);
    }
}

#define GDN_KERNELS(T, SUFFIX, TC)                                                                                 \
    extern "C" __global__ void __launch_bounds__(REC_THREADS)                                                      \
        gated_delta_forward_##SUFFIX(const T* q, const T* k, const T* v, const T* beta, const T* g, const T* s0,   \
                                     T* out, float* states, RecDims d) {                                           \
        gdn_forward<T, TC>(q, k, v, beta, g, s0, out, states, d);                                                  \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) gated_delta_backward_##SUFFIX(                       \
        const T* q, const T* k, const T* v, const T* beta, const T* g, const float* states, const T* dout,         \
        const T* ds, T* dq, T* dk, T* dv, T* dbeta, T* dg, T* ds0, float* scratch, float* part, RecDims d) {       \
        gdn_backward<T, TC>(q, k, v, beta, g, states, dout, ds, dq, dk, dv, dbeta, dg,                             \
                            ds0, scratch, part, d);                                                                \
    }

GDN_KERNELS(float, f32, false)
GDN_KERNELS(bf16, bf16, true)
