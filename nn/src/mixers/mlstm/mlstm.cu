// mlstm.cu: the mLSTM (xLSTM-7B form), chunkwise, forward and backward; swax-cuda's mma.cuh and
// chunk.cuh (cuda/kernels/) are prepended. Equations and layouts: mod.rs beside this file; the
// CPU kernel cpu.rs beside it is the reference, and this file follows its steps.
//
// One block per (batch, head, value tile) walks its chunks in order (forward) or in reverse
// (backward), keeping the chunk's q, k, v and the L x L weight tiles in shared memory as f32; the
// products run on tensor cores for bf16 data (block_mm). At B·H >= the number of SMs every SM is
// busy, and the recurrent state never leaves the SM in the forward. The backward reads the saved
// boundary states and carries dC (in a global f32 scratch, L2-resident) and dn. The value
// dimension is split into tiles only where one block's tiles would not fit shared memory
// (chunk.rs): each tile redoes the chunk's L x L work, which costs more than the extra blocks
// gain once a block fills an SM.
#include "common.cuh"

// The chunk's gates: i, log forget gate, its running sum F from the chunk's start, the
// stabilizer m, and the carried state's weight a_j = exp(m_prev + F_j - m_j) (0 on padding rows).
struct Gates {
    float* i;
    float* lf;
    float* F;
    float* m;
    float* a;
};

__device__ __forceinline__ Gates carve_gates(float*& p, int lp) {
    return Gates{take(p, lp), take(p, lp), take(p, lp), take(p, lp), take(p, lp)};
}

// Fills g for chunk rows t0..t0+len (m_prev the stabilizer before the chunk). Synchronizes.
// The gates are loaded by all threads at once; one thread then runs the two short scans.
template <typename T>
__device__ void chunk_gates(Gates g, const T* gi, const T* gf, Heads hd, int b, int hh, int t0, int len, int lp,
                            float m_prev) {
    for (int j = threadIdx.x; j < len; j += nthreads()) {
        const u64 at = hd.at(b, hh, t0 + j, 1);
        g.i[j] = to_float(gi[at]);
        g.lf[j] = log_sigmoid(to_float(gf[at]));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float run = 0.0f, prev = m_prev;
        for (int j = 0; j < len; ++j) {
            run += g.lf[j];
            prev = fmaxf(g.lf[j] + prev, g.i[j]);
            g.F[j] = run;
            g.m[j] = prev;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < lp; j += nthreads()) g.a[j] = j < len ? expf(m_prev + g.F[j] - g.m[j]) : 0.0f;
    __syncthreads();
}

// The intra-chunk weight of step s in row j, exp(i_s + F_j - F_s - m_j), for s <= j < len.
__device__ __forceinline__ float weight(const Gates& g, int j, int s, int len) {
    return (s <= j && j < len) ? expf(g.i[s] + g.F[j] - g.F[s] - g.m[j]) : 0.0f;
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

// Shared memory of the forward (`forward_bytes` in cuda.rs matches): f32 first, the
// state C [Dk, bv], the tile HB [lp, bv] that sums the output's two products, n [Dk] and the
// per-row vectors; then tiles of T: q, k [lp, Dk], v [lp, bv], C rounded to T (Cb, the products'
// operand) [Dk, bv], the scores [lp, lp]. Every row is padded by 16 bytes (tile_ld).
template <typename T, bool TC>
__device__ void mlstm_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                              const T* __restrict__ gi, const T* __restrict__ gf, const T* __restrict__ c0,
                              const T* __restrict__ n0, const T* __restrict__ m0, T* __restrict__ hout,
                              float* __restrict__ cs, float* __restrict__ ns, float* __restrict__ ms, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), ldc = tile_ld<float>(d.bv);
    const int nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    const STile<float> C = take_tile(f, d.dk, ldc);
    const STile<float> HB = take_tile(f, lp, ldc);
    float* nv = take(f, round16(d.dk));
    float* qn = take(f, lp);
    float* rden = take(f, lp);
    float* psum = take(f, lp);
    const Gates g = carve_gates(f, lp);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv);
    const STile<T> Q = take_tile(e, lp, ldk), K = take_tile(e, lp, ldk), V = take_tile(e, lp, ldv);
    const STile<T> Cb = take_tile(e, d.dk, ldv), P = take_tile(e, lp, tile_ld<T>(lp));
    __shared__ float m_prev;

    const u64 csz = (u64)d.dk * d.dv;
    float* c_out = cs + (u64)bh * (nc + 1) * csz;
    float* n_out = ns + (u64)bh * (nc + 1) * d.dk;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int r = idx / vt.w, c = idx % vt.w;
        const float x = to_float(c0[bh * csz + r * d.dv + vt.e0 + c]);
        C.set(r, c, x);
        Cb.set(r, c, x);
        c_out[r * d.dv + vt.e0 + c] = x;
    }
    // n and m do not depend on v: every value tile carries them, the first one stores them.
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        nv[c] = to_float(n0[(u64)bh * d.dk + c]);
        if (lead) n_out[c] = nv[c];
    }
    if (threadIdx.x == 0) {
        m_prev = to_float(m0[bh]);
        if (lead) ms[(u64)bh * (nc + 1)] = m_prev;
    }
    __syncthreads();

    for (int ci = 0; ci < nc; ++ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        load_rows(Q.p, Q.ld, q, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_rows(K.p, K.ld, k, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_cols(V.p, V.ld, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        for (int j = threadIdx.x; j < lp; j += nthreads()) psum[j] = 0.0f;
        chunk_gates(g, gi, gf, hd, b, hh, t0, len, lc, m_prev);
        chunk_scores<TC>(P, psum, Q, K, d.dk, g, len, lc, d.scale);
        // Per row: q·n and the denominator's inverse.
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float x = warp_dot(Q.p + j * Q.ld, nv, d.dk) * d.scale;
            if (lane_id() == 0) {
                qn[j] = x;
                const float nq = psum[j] + g.a[j] * x;
                rden[j] = j < len ? 1.0f / (fmaxf(fabsf(nq), expf(-g.m[j])) + d.eps) : 0.0f;
            }
        }
        // h = (P V + diag(a) Q C / sqrt(Dk)) / den, the second term first into HB.
        block_mm<TC>(Q, Cb, lc, d.dk, vt.w, [&](int j, int c, float x) { HB.set(j, c, g.a[j] * d.scale * x); });
        __syncthreads();
        block_mm_onto<TC>(P, V, lc, lc, vt.w, HB, [&](int j, int c, float x, float o) {
            if (j < len) hout[hd.at(b, hh, t0 + j, d.dv) + vt.e0 + c] = from_float<T>((o + x) * rden[j]);
        });
        // n = a_end n + sum_s w_last,s k_s, from k before its scaling below.
        const float a_end = g.a[len - 1];
        for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s = fmaf(K.at(j, c), weight(g, len - 1, j, len), s);
            nv[c] = a_end * nv[c] + s;
            if (lead) n_out[(u64)(ci + 1) * d.dk + c] = nv[c];
        }
        __syncthreads();
        // K becomes diag(w_last) K: each step's weight in the state at the chunk's end.
        for (int idx = threadIdx.x; idx < len * d.dk; idx += nthreads()) {
            const int s = idx / d.dk, c = idx % d.dk;
            K.set(s, c, K.at(s, c) * weight(g, len - 1, s, len));
        }
        __syncthreads();
        float* c_next = c_out + (u64)(ci + 1) * csz;
        block_mm<TC>(K.t(), V, d.dk, lc, vt.w, [&](int r, int c, float x) {
            const float y = a_end * C.at(r, c) + x;
            C.set(r, c, y);
            Cb.set(r, c, y);
            c_next[r * d.dv + vt.e0 + c] = y;
        });
        __syncthreads();
        if (threadIdx.x == 0) {
            m_prev = g.m[len - 1];
            if (lead) ms[(u64)bh * (nc + 1) + ci + 1] = m_prev;
        }
        __syncthreads();
    }
}

// Gradients; see the CPU kernel for the derivation. dC is carried in `dcs` ([B·H, Dk, Dv] f32
// scratch), dn in shared memory; the stabilizers' own gradient is routed along the recurrence
// of m at the end of each chunk, whose m values are at hand then. Shared memory
// (`backward_bytes` in cuda.rs matches): f32 first, an accumulator tile [lp,
// max(Dk, bv)], dn and n [Dk] and the per-row vectors; then tiles of T: q, k [lp, Dk], v and
// dnum [lp, bv], the scores and their gradient [lp, lp], and dC and C_prev rounded to T (the
// products' operands) [Dk, bv].
template <typename T, bool TC>
__device__ void mlstm_backward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               const T* __restrict__ gi, const T* __restrict__ gf, const float* __restrict__ cs,
                               const float* __restrict__ ns, const float* __restrict__ ms,
                               const T* __restrict__ hfw, const T* __restrict__ dh, const T* __restrict__ dcT,
                               const T* __restrict__ dnT, const T* __restrict__ dmT, T* __restrict__ dq,
                               T* __restrict__ dk, T* __restrict__ dv, T* __restrict__ di, T* __restrict__ df,
                               T* __restrict__ dc0, T* __restrict__ dn0, T* __restrict__ dm0,
                               float* __restrict__ dcs, float* __restrict__ part_buf, RecDims d) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* f = reinterpret_cast<float*>(smem);
    const STile<float> ACC = take_tile(f, lp, tile_ld<float>(max(d.dk, d.bv)));
    float* dnv = take(f, round16(d.dk));
    float* np = take(f, round16(d.dk));
    float* qn = take(f, lp);
    float* dnq = take(f, lp);
    float* dmv = take(f, lp);
    float* drow = take(f, lp);
    float* dcol = take(f, lp);
    float* dlend = take(f, lp);
    float* dloga = take(f, lp);
    float* psum = take(f, lp);
    const Gates g = carve_gates(f, lp);
    T* e = reinterpret_cast<T*>(f);
    const int ldk = tile_ld<T>(d.dk), ldv = tile_ld<T>(d.bv), ldp = tile_ld<T>(lp);
    const STile<T> Q = take_tile(e, lp, ldk), K = take_tile(e, lp, ldk), V = take_tile(e, lp, ldv);
    const STile<T> DN = take_tile(e, lp, ldv), P = take_tile(e, lp, ldp), DP = take_tile(e, lp, ldp);
    const STile<T> dCb = take_tile(e, d.dk, ldv), Cpb = take_tile(e, d.dk, ldv);
    __shared__ float scratch[32];
    __shared__ float carry;

    // With several value tiles, each computes its share of the gradients summed over v (dq, dk,
    // the gates, dn0, dm0): the terms through dn and dm, which have no v, are linear in dden =
    // -(dh·h) / (den + eps), a sum over v too, so each tile carries its own dn and dm shares,
    // and the first one adds the incoming dn and dm.
    const u64 rk = (u64)d.b * d.t * d.h * d.dk, r1 = (u64)d.b * d.t * d.h, nh = (u64)d.b * d.h;
    const u64 stride = 2 * rk + 2 * r1 + nh * d.dk + nh;
    const bool split = d.nv > 1;
    const Sink<T> s_dq{dq, part_buf, stride, split}, s_dk{dk, part_buf + rk, stride, split};
    const Sink<T> s_di{di, part_buf + 2 * rk, stride, split}, s_df{df, part_buf + 2 * rk + r1, stride, split};
    const Sink<T> s_dn{dn0, part_buf + 2 * rk + 2 * r1, stride, split};
    const Sink<T> s_dm{dm0, part_buf + 2 * rk + 2 * r1 + nh * d.dk, stride, split};
    const u64 csz = (u64)d.dk * d.dv;
    const float* c_all = cs + (u64)bh * (nc + 1) * csz + vt.e0;
    const float* n_all = ns + (u64)bh * (nc + 1) * d.dk;
    const float* m_all = ms + (u64)bh * (nc + 1);
    float* dc = dcs + (u64)bh * csz + vt.e0;
    const Mat dcm{dc, d.dv, 1};
    float part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int at = (idx / vt.w) * d.dv + idx % vt.w;
        dc[at] = to_float(dcT[bh * csz + vt.e0 + at]);
        part -= dc[at] * c_all[nc * csz + at];
    }
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        dnv[c] = lead ? to_float(dnT[(u64)bh * d.dk + c]) : 0.0f;
        part -= dnv[c] * n_all[(u64)nc * d.dk + c];
    }
    // dL/dm at the last step, from the final state: every state is exp(-m) times a stable one.
    const float dm_last = (lead ? to_float(dmT[bh]) : 0.0f) + block_sum(part, scratch);
    if (threadIdx.x == 0) carry = 0.0f;

    for (int ci = nc - 1; ci >= 0; --ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        const float* c_prev = c_all + (u64)ci * csz;
        const float m_prev = m_all[ci];
        // The carried dC and the state before the chunk, as operands; their dot (with dn·n) is
        // the share of the chunk's log decay in the carried gradient.
        part = stage_states(Cpb, c_prev, dCb, dc, d, vt);
        load_rows(Q.p, Q.ld, q, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_rows(K.p, K.ld, k, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_cols(V.p, V.ld, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        // dh into DN (scaled by 1 / (den + eps) below) and h into ACC, free until dv's product.
        load_cols(DN.p, DN.ld, dh, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        load_cols(ACC.p, ACC.ld, hfw, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
            np[c] = n_all[(u64)ci * d.dk + c];
            part = fmaf(dnv[c], np[c], part);
        }
        for (int j = threadIdx.x; j < lp; j += nthreads()) dlend[j] = psum[j] = drow[j] = dcol[j] = 0.0f;
        chunk_gates(g, gi, gf, hd, b, hh, t0, len, lc, m_prev);
        chunk_scores<TC>(P, psum, Q, K, d.dk, g, len, lc, d.scale);
        // Per row: the denominator, dnum = dh / (den + eps) in DN, dden's shares.
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float qnj = warp_dot(Q.p + j * Q.ld, np, d.dk) * d.scale;
            const float nq = psum[j] + g.a[j] * qnj, den = fmaxf(fabsf(nq), expf(-g.m[j]));
            const float r = j < len ? 1.0f / (den + d.eps) : 0.0f;
            float hd_dot = 0.0f;
            for (int c = lane_id(); c < vt.w; c += 32) {
                const float x = DN.at(j, c);
                hd_dot = fmaf(x, ACC.at(j, c), hd_dot);
                DN.set(j, c, x * r);
            }
            const float dden = -warp_sum(hd_dot) * r;
            if (lane_id() == 0) {
                qn[j] = qnj;
                dmv[j] = d.eps * dden + (t0 + j == d.t - 1 ? dm_last : 0.0f);
                // The max's gradient goes to |q^T n| only where it strictly won.
                dnq[j] = fabsf(nq) > expf(-g.m[j]) ? (nq > 0.0f ? dden : -dden) : 0.0f;
            }
        }
        __syncthreads();
        const float a_end = g.a[len - 1];
        // dv = P^T dnum + diag(w_last) K dC (its second term into ACC first).
        block_mm_sums<TC>(
            K, dCb, lc, d.dk, vt.w,
            [&](int s, int c, float x) {
                const float w = weight(g, len - 1, s, len) * x;
                ACC.set(s, c, w);
                return make_float2(w * V.at(s, c), 0.0f);
            },
            dlend, nullptr);
        __syncthreads();
        block_mm_onto<TC>(P.t(), DN, lc, lc, vt.w, ACC, [&](int s, int c, float x, float o) {
            if (s < len) dv[hd.at(b, hh, t0 + s, d.dv) + vt.e0 + c] = from_float<T>(o + x);
        });
        // dP = dnum V^T (+ dnq on the causal part): dP ⊙ P, the log-weight gradients, by rows (to
        // F_j) and columns (to i_s and -F_s); DP becomes dS = dP ⊙ w.
        block_mm_sums<TC>(
            DN, V.t(), lc, vt.w, lc,
            [&](int j, int s, float x) {
                const bool in = s <= j && j < len;
                const float dp = in ? x + dnq[j] : 0.0f, dl = dp * P.at(j, s);
                DP.set(j, s, dp * weight(g, j, s, len));
                return make_float2(dl, dl);
            },
            drow, dcol);
        __syncthreads();
        // dk = dS^T Q + diag(w_last) (V dC^T + dn).
        block_mm<TC>(V, dCb.t(), lc, vt.w, d.dk, [&](int s, int c, float x) {
            ACC.set(s, c, weight(g, len - 1, s, len) * (x + dnv[c]));
        });
        __syncthreads();
        block_mm_onto<TC>(DP.t(), Q, lc, lc, d.dk, ACC, [&](int s, int c, float x, float o) {
            if (s < len) s_dk.put(hd.at(b, hh, t0 + s, d.dk) + c, o + x * d.scale);
        });
        __syncthreads();
        // dq = (dS K + diag(a) (dnum C_prev^T + dnq n_prev^T)) / sqrt(Dk).
        block_mm<TC>(DN, Cpb.t(), lc, vt.w, d.dk, [&](int j, int c, float x) { ACC.set(j, c, x); });
        __syncthreads();
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float qx = warp_dot(Q.p + j * Q.ld, ACC.p + j * ACC.ld, d.dk) * d.scale;
            const float kn = warp_dot(K.p + j * K.ld, dnv, d.dk);
            if (lane_id() == 0) {
                dloga[j] = g.a[j] * (qx + dnq[j] * qn[j]);
                dlend[j] += weight(g, len - 1, j, len) * kn;
            }
        }
        block_mm<TC>(DP, K, lc, lc, d.dk, [&](int j, int c, float x) {
            if (j < len)
                s_dq.put(hd.at(b, hh, t0 + j, d.dk) + c,
                         (x + g.a[j] * (ACC.at(j, c) + dnq[j] * np[c])) * d.scale);
        });
        const float dlog_carry = a_end * block_sum(part, scratch);
        // The gates: log w_js = i_s + F_j - F_s - m_j and log a_j = m_prev + F_j - m_j (m held
        // fixed), then m's own gradient along its recurrence.
        if (threadIdx.x == 0) {
            float end_sum = 0.0f;
            for (int s = 0; s < len; ++s) end_sum += dlend[s];
            float run = 0.0f, c = carry;
            for (int j = len - 1; j >= 0; --j) {
                float dF = dloga[j] + drow[j] - dcol[j] - dlend[j];
                if (j == len - 1) dF += dlog_carry + end_sum;
                run += dF;
                float dlf = run, dij = dcol[j] + dlend[j];
                c += dmv[j];
                const float before = j == 0 ? m_prev : g.m[j - 1];
                if (g.lf[j] + before > g.i[j]) {
                    dlf += c;
                } else {
                    dij += c;
                    c = 0.0f;
                }
                // d lf / d f = sigmoid(-f) = 1 - exp(lf), without cancellation near lf = 0.
                const u64 at = hd.at(b, hh, t0 + j, 1);
                s_di.put(at, dij);
                s_df.put(at, -dlf * expm1f(g.lf[j]));
            }
            carry = c;
        }
        // The state gradients to the chunk before: dn = a_end dn + (diag(a) Q)^T dnq / sqrt(Dk)
        // (from q before its scaling below), then dC = a_end dC + (diag(a) Q)^T dnum / sqrt(Dk).
        for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s = fmaf(Q.at(j, c) * g.a[j], dnq[j], s);
            dnv[c] = a_end * dnv[c] + s * d.scale;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < lc * d.dk; idx += nthreads()) {
            const int j = idx / d.dk, c = idx % d.dk;
            Q.set(j, c, Q.at(j, c) * g.a[j] * d.scale);
        }
        __syncthreads();
        block_mm_onto<TC>(Q.t(), DN, d.dk, lc, vt.w, dcm,
                          [&](int r, int c, float x, float o) { dc[r * d.dv + c] = a_end * o + x; });
        __syncthreads();
    }
    part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int at = (idx / vt.w) * d.dv + idx % vt.w;
        dc0[bh * csz + vt.e0 + at] = from_float<T>(dc[at]);
        part = fmaf(dc[at], c_all[at], part);
    }
    for (int c = threadIdx.x; c < d.dk; c += nthreads()) {
        s_dn.put((u64)bh * d.dk + c, dnv[c]);
        part = fmaf(dnv[c], n_all[c], part);
    }
    const float gm = block_sum(part, scratch);
    if (threadIdx.x == 0) s_dm.put(bh, gm + carry);
}

#define MLSTM_KERNELS(T, SUFFIX, TC)                                                                               \
    extern "C" __global__ void __launch_bounds__(REC_THREADS)                                                      \
        mlstm_forward_##SUFFIX(const T* q, const T* k, const T* v, const T* gi, const T* gf, const T* c0,          \
                               const T* n0, const T* m0, T* h, float* cs, float* ns, float* ms, RecDims d) {       \
        mlstm_forward<T, TC>(q, k, v, gi, gf, c0, n0, m0, h, cs, ns, ms, d);                                       \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(REC_THREADS) mlstm_backward_##SUFFIX(                             \
        const T* q, const T* k, const T* v, const T* gi, const T* gf, const float* cs, const float* ns,            \
        const float* ms, const T* h, const T* dh, const T* dcT, const T* dnT, const T* dmT, T* dq, T* dk, T* dv,   \
        T* di, T* df, T* dc0, T* dn0, T* dm0, float* dcs, float* part, RecDims d) {                                \
        mlstm_backward<T, TC>(q, k, v, gi, gf, cs, ns, ms, h, dh, dcT, dnT, dmT, dq, dk,                           \
                              dv, di, df, dc0, dn0, dm0, dcs, part, d);                                            \
    }

MLSTM_KERNELS(float, f32, false)
MLSTM_KERNELS(bf16, bf16, true)
