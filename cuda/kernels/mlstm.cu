// mlstm.cu: the mLSTM (xLSTM-7B form), chunkwise, forward and backward; mma.cuh and chunk.cuh are
// prepended. Equations and layouts: `Backend::mlstm_chunk_forward` in tensor/src/backend.rs; the
// CPU kernel tensor/src/cpu/mlstm.rs is the reference, and this file follows its steps.
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
    Gates g{p, p + lp, p + 2 * lp, p + 3 * lp, p + 4 * lp};
    p += 5 * lp;
    return g;
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

// P = w ⊙ (Q K^T) · scale into a [lp, ldl] tile. Synchronizes. Q holds q unscaled, so that
// its tensor-core operands are the bf16 inputs exactly (1/sqrt(Dk) is no power of two).
template <bool TC>
__device__ __forceinline__ void chunk_scores(float* P, int ldl, const float* Q, const float* K, int ldk, int dk,
                                             const Gates& g, int len, int lp, float scale) {
    block_mm<TC>(rows_of(Q, ldk), rows_of(K, ldk).t(), lp, dk, lp,
                 [&](int j, int s, float v) { P[j * ldl + s] = v * scale * weight(g, j, s, len); });
    __syncthreads();
}

template <typename T, bool TC>
__device__ void mlstm_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                              const T* __restrict__ gi, const T* __restrict__ gf, const T* __restrict__ c0,
                              const T* __restrict__ n0, const T* __restrict__ m0, T* __restrict__ hout,
                              float* __restrict__ cs, float* __restrict__ ns, float* __restrict__ ms, RecDims d) {
    extern __shared__ float smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), ldk = d.dk + 4, ldv = d.bv + 4, ldl = lp + 4;
    const int nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* p = smem;
    float* Q = p;
    p += lp * ldk;
    float* K = p;
    p += lp * ldk;
    float* V = p;
    p += lp * ldv;
    float* C = p;
    p += d.dk * ldv;
    float* P = p;
    p += lp * ldl;
    float* HB = p;
    p += lp * ldv;
    float* nv = p;
    p += d.dk;
    float* qn = p;
    p += lp;
    float* rden = p;
    p += lp;
    const Gates g = carve_gates(p, lp);
    __shared__ float m_prev;

    const u64 csz = (u64)d.dk * d.dv;
    float* c_out = cs + (u64)bh * (nc + 1) * csz;
    float* n_out = ns + (u64)bh * (nc + 1) * d.dk;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int r = idx / vt.w, e = idx % vt.w;
        const float x = to_float(c0[bh * csz + r * d.dv + vt.e0 + e]);
        C[r * ldv + e] = x;
        c_out[r * d.dv + vt.e0 + e] = x;
    }
    // n and m do not depend on v: every value tile carries them, the first one stores them.
    for (int e = threadIdx.x; e < d.dk; e += nthreads()) {
        nv[e] = to_float(n0[(u64)bh * d.dk + e]);
        if (lead) n_out[e] = nv[e];
    }
    if (threadIdx.x == 0) {
        m_prev = to_float(m0[bh]);
        if (lead) ms[(u64)bh * (nc + 1)] = m_prev;
    }
    __syncthreads();

    for (int ci = 0; ci < nc; ++ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        load_rows(Q, ldk, q, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_rows(K, ldk, k, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_cols(V, ldv, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        chunk_gates(g, gi, gf, hd, b, hh, t0, len, lc, m_prev);
        chunk_scores<TC>(P, ldl, Q, K, ldk, d.dk, g, len, lc, d.scale);
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float x = warp_dot(Q + j * ldk, nv, d.dk);
            if (lane_id() == 0) qn[j] = x * d.scale;
        }
        block_mm<TC>(rows_of(P, ldl), rows_of(V, ldv), lc, lc, vt.w,
                     [&](int j, int e, float x) { HB[j * ldv + e] = x; });
        __syncthreads();
        block_mm<TC>(rows_of(Q, ldk), rows_of(C, ldv), lc, d.dk, vt.w,
                     [&](int j, int e, float x) { HB[j * ldv + e] += g.a[j] * d.scale * x; });
        for (int j = warp_id(); j < lc; j += nwarps()) {
            float s = 0.0f;
            for (int c = lane_id(); c < lc; c += 32) s += P[j * ldl + c];
            s = warp_sum(s);
            if (lane_id() == 0) {
                const float nq = s + g.a[j] * qn[j];
                rden[j] = j < len ? 1.0f / (fmaxf(fabsf(nq), expf(-g.m[j])) + d.eps) : 0.0f;
            }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < len * vt.w; idx += nthreads()) {
            const int j = idx / vt.w, e = idx % vt.w;
            hout[hd.at(b, hh, t0 + j, d.dv) + vt.e0 + e] = from_float<T>(HB[j * ldv + e] * rden[j]);
        }
        // K becomes diag(w_last) K: each step's weight in the state at the chunk's end.
        for (int idx = threadIdx.x; idx < len * d.dk; idx += nthreads()) {
            const int s = idx / d.dk;
            K[s * ldk + idx % d.dk] *= weight(g, len - 1, s, len);
        }
        __syncthreads();
        const float a_end = g.a[len - 1];
        float* c_next = c_out + (u64)(ci + 1) * csz;
        block_mm<TC>(rows_of(K, ldk).t(), rows_of(V, ldv), d.dk, lc, vt.w, [&](int r, int e, float x) {
            const float c = a_end * C[r * ldv + e] + x;
            C[r * ldv + e] = c;
            c_next[r * d.dv + vt.e0 + e] = c;
        });
        for (int e = threadIdx.x; e < d.dk; e += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s += K[j * ldk + e];
            nv[e] = a_end * nv[e] + s;
            if (lead) n_out[(u64)(ci + 1) * d.dk + e] = nv[e];
        }
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
// of m at the end of each chunk, whose m values are at hand then.
template <typename T, bool TC>
__device__ void mlstm_backward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               const T* __restrict__ gi, const T* __restrict__ gf, const float* __restrict__ cs,
                               const float* __restrict__ ns, const float* __restrict__ ms,
                               const T* __restrict__ hfw, const T* __restrict__ dh, const T* __restrict__ dcT,
                               const T* __restrict__ dnT, const T* __restrict__ dmT, T* __restrict__ dq,
                               T* __restrict__ dk, T* __restrict__ dv, T* __restrict__ di, T* __restrict__ df,
                               T* __restrict__ dc0, T* __restrict__ dn0, T* __restrict__ dm0,
                               float* __restrict__ dcs, float* __restrict__ part_buf, RecDims d) {
    extern __shared__ float smem[];
    const int bh = blockIdx.x, b = bh / d.h, hh = bh % d.h;
    const VTile vt = value_tile(d);
    const bool lead = blockIdx.y == 0;
    const int lp = round16(d.chunk), ldk = d.dk + 4, ldv = d.bv + 4, ldl = lp + 4, lda = max(ldk, ldv);
    const int nc = (d.t + d.chunk - 1) / d.chunk;
    const Heads hd{d.t, d.h};
    float* p = smem;
    float* Q = p;
    p += lp * ldk;
    float* K = p;
    p += lp * ldk;
    float* V = p;
    p += lp * ldv;
    float* DN = p;
    p += lp * ldv;
    float* ACC = p;
    p += lp * lda;
    float* P = p;
    p += lp * ldl;
    float* DP = p;
    p += lp * ldl;
    float* dnv = p;
    p += d.dk;
    float* np = p;
    p += d.dk;
    float* qn = p;
    p += lp;
    float* dnq = p;
    p += lp;
    float* dmv = p;
    p += lp;
    float* drow = p;
    p += lp;
    float* dcol = p;
    p += lp;
    float* dlend = p;
    p += lp;
    float* dloga = p;
    p += lp;
    const Gates g = carve_gates(p, lp);
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
    float part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int at = (idx / vt.w) * d.dv + idx % vt.w;
        dc[at] = to_float(dcT[bh * csz + vt.e0 + at]);
        part -= dc[at] * c_all[nc * csz + at];
    }
    for (int e = threadIdx.x; e < d.dk; e += nthreads()) {
        dnv[e] = lead ? to_float(dnT[(u64)bh * d.dk + e]) : 0.0f;
        part -= dnv[e] * n_all[(u64)nc * d.dk + e];
    }
    // dL/dm at the last step, from the final state: every state is exp(-m) times a stable one.
    const float dm_last = (lead ? to_float(dmT[bh]) : 0.0f) + block_sum(part, scratch);
    if (threadIdx.x == 0) carry = 0.0f;

    for (int ci = nc - 1; ci >= 0; --ci) {
        const int t0 = ci * d.chunk, len = min(d.chunk, d.t - t0), lc = round16(len);
        const float* c_prev = c_all + (u64)ci * csz;
        const float m_prev = m_all[ci];
        load_rows(Q, ldk, q, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_rows(K, ldk, k, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_cols(V, ldv, v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        // dh into DN (scaled by 1 / (den + eps) below) and h into ACC, free until dv's product.
        load_cols(DN, ldv, dh, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        load_cols(ACC, lda, hfw, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        for (int e = threadIdx.x; e < d.dk; e += nthreads()) np[e] = n_all[(u64)ci * d.dk + e];
        for (int j = threadIdx.x; j < lc; j += nthreads()) dlend[j] = 0.0f;
        chunk_gates(g, gi, gf, hd, b, hh, t0, len, lc, m_prev);
        chunk_scores<TC>(P, ldl, Q, K, ldk, d.dk, g, len, lc, d.scale);
        // Per row: the denominator, dnum = dh / (den + eps) in DN, dden's shares.
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float qnj = warp_dot(Q + j * ldk, np, d.dk) * d.scale;
            float s = 0.0f;
            for (int c = lane_id(); c < lc; c += 32) s += P[j * ldl + c];
            s = warp_sum(s);
            const float nq = s + g.a[j] * qnj, den = fmaxf(fabsf(nq), expf(-g.m[j]));
            const float r = j < len ? 1.0f / (den + d.eps) : 0.0f;
            float hd_dot = 0.0f;
            for (int e = lane_id(); e < vt.w; e += 32) {
                hd_dot = fmaf(DN[j * ldv + e], ACC[j * lda + e], hd_dot);
                DN[j * ldv + e] *= r;
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
        // dv = P^T dnum + diag(w_last) K dC.
        block_mm_sums<TC>(
            rows_of(K, ldk), Mat{dc, d.dv, 1}, lc, d.dk, vt.w,
            [&](int s, int e, float x) {
                const float w = weight(g, len - 1, s, len) * x;
                ACC[s * lda + e] = w;
                return make_float2(w * V[s * ldv + e], 0.0f);
            },
            dlend, nullptr);
        __syncthreads();
        block_mm<TC>(rows_of(P, ldl).t(), rows_of(DN, ldv), lc, lc, vt.w, [&](int s, int e, float x) {
            if (s < len) dv[hd.at(b, hh, t0 + s, d.dv) + vt.e0 + e] = from_float<T>(ACC[s * lda + e] + x);
        });
        block_mm<TC>(rows_of(DN, ldv), rows_of(V, ldv).t(), lc, vt.w, lc, [&](int j, int s, float x) {
            DP[j * ldl + s] = (s <= j && j < len) ? x + dnq[j] : 0.0f;
        });
        __syncthreads();
        // Log-weight gradients dP ⊙ P by rows (to F_j) and columns (to i_s and -F_s); dS = dP ⊙ w.
        for (int j = threadIdx.x; j < lc; j += nthreads()) {
            float r = 0.0f, c = 0.0f;
            for (int s = 0; s < lc; ++s) {
                r = fmaf(DP[j * ldl + s], P[j * ldl + s], r);
                c = fmaf(DP[s * ldl + j], P[s * ldl + j], c);
            }
            drow[j] = r;
            dcol[j] = c;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < lc * lc; idx += nthreads()) {
            const int j = idx / lc, s = idx % lc;
            DP[j * ldl + s] *= weight(g, j, s, len);
        }
        // dk = dS^T Q + diag(w_last) (V dC^T + dn).
        block_mm<TC>(rows_of(V, ldv), Mat{dc, 1, d.dv}, lc, vt.w, d.dk, [&](int s, int e, float x) {
            ACC[s * lda + e] = weight(g, len - 1, s, len) * (x + dnv[e]);
        });
        __syncthreads();
        block_mm<TC>(rows_of(DP, ldl).t(), rows_of(Q, ldk), lc, lc, d.dk, [&](int s, int e, float x) {
            if (s < len) s_dk.put(hd.at(b, hh, t0 + s, d.dk) + e, ACC[s * lda + e] + x * d.scale);
        });
        __syncthreads();
        // dq = (dS K + diag(a) (dnum C_prev^T + dnq n_prev^T)) / sqrt(Dk).
        block_mm<TC>(rows_of(DN, ldv), Mat{c_prev, 1, d.dv}, lc, vt.w, d.dk,
                     [&](int j, int e, float x) { ACC[j * lda + e] = x; });
        __syncthreads();
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float qx = warp_dot(Q + j * ldk, ACC + j * lda, d.dk) * d.scale;
            const float kn = warp_dot(K + j * ldk, dnv, d.dk);
            if (lane_id() == 0) {
                dloga[j] = g.a[j] * (qx + dnq[j] * qn[j]);
                dlend[j] += weight(g, len - 1, j, len) * kn;
            }
        }
        block_mm<TC>(rows_of(DP, ldl), rows_of(K, ldk), lc, lc, d.dk, [&](int j, int e, float x) {
            if (j < len)
                s_dq.put(hd.at(b, hh, t0 + j, d.dk) + e, (x + g.a[j] * (ACC[j * lda + e] + dnq[j] * np[e])) * d.scale);
        });
        part = 0.0f;
        for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
            const int at = (idx / vt.w) * d.dv + idx % vt.w;
            part = fmaf(dc[at], c_prev[at], part);
        }
        for (int e = threadIdx.x; e < d.dk; e += nthreads()) part = fmaf(dnv[e], np[e], part);
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
        // The state gradient to the chunk before: dC = a_end dC + (diag(a) Q)^T dnum, Q scaled.
        for (int idx = threadIdx.x; idx < lc * d.dk; idx += nthreads())
            Q[(idx / d.dk) * ldk + idx % d.dk] *= g.a[idx / d.dk] * d.scale;
        __syncthreads();
        block_mm<TC>(rows_of(Q, ldk).t(), rows_of(DN, ldv), d.dk, lc, vt.w,
                     [&](int r, int e, float x) { dc[r * d.dv + e] = a_end * dc[r * d.dv + e] + x; });
        for (int e = threadIdx.x; e < d.dk; e += nthreads()) {
            float s = 0.0f;
            for (int j = 0; j < len; ++j) s = fmaf(Q[j * ldk + e], dnq[j], s);
            dnv[e] = a_end * dnv[e] + s;
        }
        __syncthreads();
    }
    part = 0.0f;
    for (int idx = threadIdx.x; idx < d.dk * vt.w; idx += nthreads()) {
        const int at = (idx / vt.w) * d.dv + idx % vt.w;
        dc0[bh * csz + vt.e0 + at] = from_float<T>(dc[at]);
        part = fmaf(dc[at], c_all[at], part);
    }
    for (int e = threadIdx.x; e < d.dk; e += nthreads()) {
        s_dn.put((u64)bh * d.dk + e, dnv[e]);
        part = fmaf(dnv[e], n_all[e], part);
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
