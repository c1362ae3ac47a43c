// gated_delta.cuh: what the gated delta rule's two kernel families share (gated_delta.cu, one
// block walking a head's chunks; gated_delta_parallel.cu, chunk-parallel kernels around lean state
// scans), prepended to each after mma.cuh and chunk.cuh: a chunk's per-row values (beta, the log
// decays' running sum and the decays built from it, the inverse norms of q and k), the chunk
// loader that normalizes q and k in registers, and the in-place inversion of I + A.
#include "common.cuh"

// Added to |x|^2 under the square root of the L2 normalization of q and k (NORM_EPS on the CPU).
#define GDN_NORM_EPS 1e-6f

// The chunk's per-row values: beta, the running sum G of log decays from the chunk's start,
// γ = exp(G), the decay to the chunk's end exp(G_last - G_j), and the inverse norms of the
// raw q and k rows. Zero on padding rows (j >= len), so padded rows drop out of every product.
struct Rows {
    float* beta;
    float* G;
    float* gam;
    float* tend;
    float* rq;
    float* rk;
};

__device__ __forceinline__ Rows carve_rows(float*& p, int lp) {
    Rows r{p, p + lp, p + 2 * lp, p + 3 * lp, p + 4 * lp, p + 5 * lp};
    p += 6 * lp;
    return r;
}

// exp(G_j - G_s) for s <= j < len, zero elsewhere: the decay from step s to step j.
__device__ __forceinline__ float decay(const Rows& r, int j, int s, int len) {
    return (s <= j && j < len) ? expf(r.G[j] - r.G[s]) : 0.0f;
}

// The inputs of a chunk: rows t0..t0+len of head (b, h).
template <typename T>
struct ChunkInputs {
    const T* q;
    const T* k;
    const T* v;
    const T* beta;
    const T* g;
    const T* dout;
};

// Rows of q and k normalized in registers, with the value tile of v (and of dout where not null):
// each thread issues all of its loads before storing any, so the chunk costs one memory latency,
// and the lanes holding a row of q or k (Dk / V of them, a power of two up to 32, so a group of
// lanes of one warp) sum its squares with shuffles. For rows of whole 16-byte vectors in 16-byte
// aligned tile rows (`fast_load`). Does not synchronize.
template <typename T>
__device__ void load_chunk_fast(STile<T> Q, STile<T> K, STile<T> V, STile<T> DO, Rows r, const ChunkInputs<T>& in,
                                Heads hd, int b, int hh, int t0, int len, int lc, const RecDims& d, VTile vt) {
    constexpr int W = 16 / sizeof(T);
    const int per = d.dk / W, pv = max(vt.w / W, 1), nqk = lc * per, nv = lc * (vt.w / W);
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int w0 = threadIdx.x - lane_id(); w0 < max(nqk, nv); w0 += 2 * nthreads()) {
        uint4 rq[2], rk[2], rv[2], ro[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int idx = w0 + lane_id() + u * nthreads(), j = idx / per, jv = idx / pv;
            const int c = (idx % per) * W, e = (idx % pv) * W;
            const auto vec = [&](const T* src, int row, int d_, int col) {
                return *reinterpret_cast<const uint4*>(src + hd.at(b, hh, t0 + row, d_) + col);
            };
            const bool qk = idx < nqk && j < len, val = idx < nv && jv < len;
            rq[u] = qk ? vec(in.q, j, d.dk, c) : zero;
            rk[u] = qk ? vec(in.k, j, d.dk, c) : zero;
            rv[u] = val ? vec(in.v, jv, d.dv, vt.e0 + e) : zero;
            ro[u] = val && in.dout ? vec(in.dout, jv, d.dv, vt.e0 + e) : zero;
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int idx = w0 + lane_id() + u * nthreads(), j = idx / per, jv = idx / pv;
            const int c = (idx % per) * W, e = (idx % pv) * W;
            float xq[W], xk[W], sq = 0.0f, sk = 0.0f;
            unpack_vec(in.q, rq[u], xq, 0);
            unpack_vec(in.k, rk[u], xk, 0);
#pragma unroll
            for (int i = 0; i < W; ++i) {
                sq = fmaf(xq[i], xq[i], sq);
                sk = fmaf(xk[i], xk[i], sk);
            }
            for (int o = 1; o < per; o <<= 1) {
                sq += shfl_xor(sq, o);
                sk += shfl_xor(sk, o);
            }
            const float nq = j < len ? 1.0f / sqrtf(sq + GDN_NORM_EPS) : 0.0f;
            const float nk = j < len ? 1.0f / sqrtf(sk + GDN_NORM_EPS) : 0.0f;
            if (idx < nqk) {
#pragma unroll
                for (int i = 0; i < W; ++i) {
                    xq[i] *= nq * d.scale;
                    xk[i] *= nk;
                }
                store_vec(Q.p + j * Q.ld + c, xq);
                store_vec(K.p + j * K.ld + c, xk);
                if (c == 0) {
                    r.rq[j] = nq;
                    r.rk[j] = nk;
                }
            }
            if (idx < nv) {
                *reinterpret_cast<uint4*>(V.p + jv * V.ld + e) = rv[u];
                if (in.dout) *reinterpret_cast<uint4*>(DO.p + jv * DO.ld + e) = ro[u];
            }
        }
    }
}

// Whether load_chunk_fast applies (the tile of dO has V's row length).
template <typename T>
__device__ __forceinline__ bool fast_load(const STile<T>& Q, const STile<T>& K, const STile<T>& V, const RecDims& d,
                                          VTile vt) {
    constexpr int W = 16 / sizeof(T);
    const int per = d.dk / W;
    const bool rows16 = (Q.ld * sizeof(T)) % 16 == 0 && (K.ld * sizeof(T)) % 16 == 0 && (V.ld * sizeof(T)) % 16 == 0;
    return d.dk % W == 0 && per <= 32 && (per & (per - 1)) == 0 && vt.w % W == 0 && d.dv % W == 0 &&
           vt.e0 % W == 0 && rows16;
}

// Loads rows t0..t0+len of q, k (normalized, q times `scale`), the value tile of v (none where it
// has no columns) and (where in.dout is not null) of dout into [lc, ld] tiles (zero padding rows),
// and the chunk's per-row values. Synchronizes.
template <typename T>
__device__ void load_chunk(STile<T> Q, STile<T> K, STile<T> V, STile<T> DO, Rows r, const ChunkInputs<T>& in,
                           Heads hd, int b, int hh, int t0, int len, int lc, const RecDims& d, VTile vt) {
    for (int j = threadIdx.x; j < lc; j += nthreads()) {
        r.beta[j] = j < len ? to_float(in.beta[hd.at(b, hh, t0 + j, 1)]) : 0.0f;
        r.G[j] = j < len ? to_float(in.g[hd.at(b, hh, t0 + j, 1)]) : 0.0f;
    }
    const bool fast = fast_load(Q, K, V, d, vt);
    if (fast) {
        load_chunk_fast(Q, K, V, DO, r, in, hd, b, hh, t0, len, lc, d, vt);
    } else {
        load_rows(Q.p, Q.ld, in.q, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_rows(K.p, K.ld, in.k, hd, b, hh, t0, len, lc, d.dk, 1.0f);
        load_cols(V.p, V.ld, in.v, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
        if (in.dout) load_cols(DO.p, DO.ld, in.dout, hd, b, hh, t0, len, lc, d.dv, vt.e0, vt.w, 1.0f);
    }
    __syncthreads();
    if (warp_id() == 0) warp_cumsum(r.G, len, false);
    if (!fast) {
        // Inverse norms (a warp per row), then the rows scaled in place.
        for (int j = warp_id(); j < lc; j += nwarps()) {
            const float nq = warp_dot(Q.p + j * Q.ld, Q.p + j * Q.ld, d.dk);
            const float nk = warp_dot(K.p + j * K.ld, K.p + j * K.ld, d.dk);
            if (lane_id() == 0) {
                r.rq[j] = j < len ? 1.0f / sqrtf(nq + GDN_NORM_EPS) : 0.0f;
                r.rk[j] = j < len ? 1.0f / sqrtf(nk + GDN_NORM_EPS) : 0.0f;
            }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < lc * d.dk; idx += nthreads()) {
            const int j = idx / d.dk, c = idx % d.dk;
            Q.set(j, c, Q.at(j, c) * r.rq[j] * d.scale);
            K.set(j, c, K.at(j, c) * r.rk[j]);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < lc; j += nthreads()) {
        r.gam[j] = j < len ? expf(r.G[j]) : 0.0f;
        r.tend[j] = j < len ? expf(r.G[len - 1] - r.G[j]) : 0.0f;
    }
    __syncthreads();
}

// The diagonal 16 x 16 blocks of (I + A)^-1 in place, for the strictly lower-triangular A [lp, lp]
// (zero on and above the diagonal and on padding rows; lp a multiple of 16, at most two blocks
// per warp of the block): forward substitution, half a warp a block, lane c holding column c in registers (so
// no step waits on shared memory). Does not synchronize.
__device__ __forceinline__ void invert_diagonal_blocks(float* A, int ldl, int lp) {
    const int nb = lp / 16;
    const int blk = warp_id() * 2 + (lane_id() >> 4), c = lane_id() & 15;
    float* D = A + blk * 16 * (ldl + 1);
    float t[16];
    if (blk < nb) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            float x = j == c ? 1.0f : 0.0f;
#pragma unroll
            for (int s = 0; s < j; ++s) x = fmaf(-D[j * ldl + s], t[s], x);
            t[j] = x;
        }
    }
    __syncwarp();
    if (blk < nb) {
#pragma unroll
        for (int j = 0; j < 16; ++j) D[j * ldl + c] = t[j];
    }
}

// (I + A)^-1 in place over the strictly lower-triangular A [lp, lp] (as invert_diagonal_blocks):
// the diagonal blocks, then, doubling the block size h, each pair of adjacent diagonal blocks (A
// above B) from its inverted halves, T_BA = -T_BB (A_BA T_AA), in two passes through `scratch`
// (lp * max(16, lp / 4) floats). Synchronizes.
__device__ void invert_unit_lower(float* A, int ldl, int lp, float* scratch) {
    invert_diagonal_blocks(A, ldl, lp);
    __syncthreads();
    for (int h = 16; h < lp; h *= 2) {
        const int n = ((lp + 2 * h - 1) / (2 * h)) * h * h;
        // X = A_BA T_AA, pair m's rows r < h (those inside lp) of B. The sums run over all h
        // terms, zeros included (T_AA is lower triangular), so that their loads unroll.
        for (int idx = threadIdx.x; idx < n; idx += nthreads()) {
            const int m = idx / (h * h), r = idx % (h * h) / h, col = idx % h, a0 = 2 * m * h, b0 = a0 + h;
            if (b0 + r >= lp) continue;
            const float* arow = A + (b0 + r) * ldl + a0;
            const float* tcol = A + a0 * ldl + a0 + col;
            float x = 0.0f;
#pragma unroll 8
            for (int k = 0; k < h; ++k) x = fmaf(arow[k], tcol[k * ldl], x);
            scratch[idx] = x;
        }
        __syncthreads();
        // T_BA = -T_BB X (T_BB lower triangular, ones on its diagonal). Where B ends at lp, short
        // of h rows, the sum stops there too: T_BB's columns past lp and X's rows past lp were
        // never written (this chunk or any: the backward's first chunk is the last one), and
        // shared memory left over there is not zero, nor always finite.
        for (int idx = threadIdx.x; idx < n; idx += nthreads()) {
            const int m = idx / (h * h), r = idx % (h * h) / h, col = idx % h, a0 = 2 * m * h, b0 = a0 + h;
            if (b0 + r >= lp) continue;
            const float* trow = A + (b0 + r) * ldl + b0;
            const float* x0 = scratch + m * h * h + col;
            const int kn = min(h, lp - b0);
            float x = 0.0f;
#pragma unroll 8
            for (int k = 0; k < kn; ++k) x = fmaf(trow[k], x0[k * h], x);
            A[(b0 + r) * ldl + a0 + col] = -x;
        }
        __syncthreads();
    }
}

