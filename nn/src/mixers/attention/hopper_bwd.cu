// hopper_bwd.cu: the backward of sliding-window attention on Hopper at head dim 128 and windows
// of 512 or more (sm_90a only; elsewhere, at head dim 64 and at narrower windows, where this
// structure measured slower, attention.cu's swa_bwd runs, and this file uses its helpers),
// warp-specialised as in FlashAttention-3 (arXiv 2407.08608):
// - Roles. A tile is 128 keys of one kv head: two consumer warpgroups of 64 keys each keep dK
//   and dV of their keys in registers (240 registers a thread, given up by the producer
//   warpgroup, which keeps 24), and a producer warpgroup, of which one thread loads the tile's
//   K and V and then, for every q head of the group and query tile of the band, the tile's Q
//   and dO (TMA) and its lse2 and delta rows (bulk copies of swa_bwd_prep's padded rows) into a
//   ring of WSB_STAGES buffers; Q (with lse2) and dO (with delta) are signalled by separate
//   barriers, so that S^T can start before dO has landed. Every consumer thread hands a buffer
//   back by its own arrival (an arrival releases only its own thread's reads of lse2 and delta).
// - Persistent: one block an SM walks the (key tile, kv head, sequence) tiles, key tiles of one
//   head next to each other (the blocks at work at once read the same Q and dO tiles, from L2;
//   ordered head by head first, the kernel was bound by DRAM); the
//   producer loads the next tile's K and V once the consumers hand the last back, and its first
//   Q and dO tiles before, while the consumers store dK and dV (a narrow window's tiles have few
//   steps, so this tail would otherwise be a good part of each). dK and dV leave through shared
//   memory (the dS^T and dQ buffers, free by then), in whole rows of 16-byte stores.
// - A step (one query tile): each warpgroup forms S^T = K Q^T and dP^T = V dO^T for its 64
//   keys, P^T and dS^T in registers (bwd_probs), issues dV += P^T dO and dK += dS^T Q with those
//   as register operands, and stores dS^T into shared memory (double-buffered). After a barrier
//   of both warpgroups, each forms half of the tile's dQ = dS K (64 of D's 128 columns, over the
//   128 keys, or the 64 of a warpgroup whose keys alone meet the tile), stages it in shared
//   memory and adds it to the f32 accumulator in global memory by one bulk reduction issued by
//   one thread (the TMA unit's atomic adds, not the threads'), waited for only before the buffer
//   is rewritten a step later.
// - The dQ accumulator is blocked: [B, H, T_pad / 64, 2, 64 x 64] with each 64 x 64 block
//   in the order the accumulator fragments hold it (fragment j of thread i's four values at
//   (j * 128 + i) * 4), so that staging it is a conflict-free float4 store a fragment;
//   swa_dq_unblock scales it and writes dq in [B, T, H, D].
// The arithmetic is swa_bwd's on wgmma: the same products, probabilities and rounding to bf16.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WSB_KEYS 128  // two consumer warpgroups of 64 keys
#define WSB_CONSUMERS 256
#define WSB_THREADS 384  // and a producer warpgroup
#define WSB_STAGES 2
#define BAR_DS 1  // named barriers: dS^T of a step is whole; a warpgroup's dQ is staged (2 + warpgroup)
#define BAR_DQ 2

// dq = dS K over k-slices LO..HI (16 keys each) of a [keys][64 queries] dS^T tile and a
// 64-column block of a WSB_KEYS-row K tile; fixed bounds, so that ptxas keeps the products
// pipelined.
template <int LO, int HI, int N>
__device__ __forceinline__ void ds_k(float (&dq)[N], const bf16* ds_s, const bf16* k_s) {
#pragma unroll
    for (int kk = LO; kk < HI; ++kk)
        wgmma_ss<1, 1>(dq, desc_mn<WSB_KEYS>(ds_s, kk), desc_mn<WSB_KEYS>(k_s, kk), kk > LO);
}

// The end of a tile: dK (scaled) and dV of a warpgroup's 64 keys from key r0, through `stage`
// (2 x 64 x D bf16 of shared memory: dK's then dV's, each in stage_rows' pieces).
template <int D>
__device__ __forceinline__ void store_dkv_rows(const float (&dk_acc)[D / 8][4], const float (&dv_acc)[D / 8][4],
                                               bf16* stage, int r0, int T, int b, int hk, u32 kv_heads, float scale,
                                               bf16* __restrict__ dk, bf16* __restrict__ dv) {
    const float dk_mul[2] = {scale, scale}, dv_mul[2] = {1.0f, 1.0f};
    stage_rows<D>(dk_acc, dk_mul, stage, 64 * 64);
    stage_rows<D>(dv_acc, dv_mul, stage + 64 * D, 64 * 64);
    bar_sync(BAR_DQ + (threadIdx.x >> 7), 128);
    auto at = [&](int row) { return (((u64)b * T + r0 + row) * kv_heads + hk) * D; };
    store_staged<D>(stage, 64 * 64, [&](int row) { return r0 + row < T ? dk + at(row) : nullptr; });
    store_staged<D>(stage + 64 * D, 64 * 64, [&](int row) { return r0 + row < T ? dv + at(row) : nullptr; });
}

template <int D>
__device__ void swa_bwd_ws(const TensorMap& tq, const TensorMap& tk, const TensorMap& tv, const TensorMap& tdo,
                           const float* __restrict__ lse2, const float* __restrict__ delta, float* __restrict__ dq_acc,
                           bf16* __restrict__ dk, bf16* __restrict__ dv, u32 t_len, u32 heads, u32 kv_heads,
                           u32 batch, u32 window, float scale) {
    constexpr int NT = TILE / 8, DT = D / 8, KT = D / 16, DQ = 64;  // DQ: dQ columns a warpgroup
    constexpr u32 KV_BYTES = WSB_KEYS * D * 2, TILE_BYTES = TILE * D * 2, ROW_BYTES = TILE * 4;
    static_assert(D == 128, "each warpgroup's dQ is one of D's two 64-column blocks");
    bf16* sk = aligned_smem();                                         // [WSB_KEYS][D]
    bf16* sv = sk + WSB_KEYS * D;                                      // [WSB_KEYS][D]
    bf16* sq = sv + WSB_KEYS * D;                                      // [WSB_STAGES][TILE][D]
    bf16* sdo = sq + WSB_STAGES * TILE * D;                            // [WSB_STAGES][TILE][D]
    bf16* sds = sdo + WSB_STAGES * TILE * D;                           // [2][WSB_KEYS][TILE], dS^T
    float* sdq = reinterpret_cast<float*>(sds + 2 * WSB_KEYS * TILE);  // [2 warpgroups][TILE * DQ]
    float* slse = sdq + 2 * TILE * DQ;                                 // [WSB_STAGES][TILE]
    float* sdelta = slse + WSB_STAGES * TILE;                          // [WSB_STAGES][TILE]
    u64* kv_full = reinterpret_cast<u64*>(sdelta + WSB_STAGES * TILE);
    u64* kv_empty = kv_full + 1;
    u64* q_full = kv_empty + 1;          // [WSB_STAGES]: Q and lse2
    u64* do_full = q_full + WSB_STAGES;  // [WSB_STAGES]: dO and delta
    u64* empty = do_full + WSB_STAGES;   // [WSB_STAGES]

    const int T = (int)t_len, t_pad = (T + TILE - 1) / TILE * TILE, group = (int)(heads / kv_heads);
    const int tiles = (T + WSB_KEYS - 1) / WSB_KEYS * (int)(kv_heads * batch);
    // The warpgroup, as a value the compiler knows is uniform over a warp (so that wgmma under a
    // condition on it is not taken for divergent code and serialised).
    const int wg = __shfl_sync(FULL_MASK, threadIdx.x >> 7, 0), lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        mbar_init(kv_empty, WSB_CONSUMERS);
        for (int i = 0; i < WSB_STAGES; ++i) {
            mbar_init(q_full + i, 1);
            mbar_init(do_full + i, 1);
            mbar_init(empty + i, WSB_CONSUMERS);
        }
        mbar_init_fence();
    }
    __syncthreads();
    // Tile n: its first key s0, kv head and sequence (a head's key tiles in order, so the ones
    // with the most queries first), and its steps: step i is q head hk * group + i / nq, query
    // tile qt0 + i % nq.
    struct Work {
        int s0, hk, b, qt0, nq, steps;
    };
    auto work = [&](int n) {
        Work w;
        const int key_tiles = (T + WSB_KEYS - 1) / WSB_KEYS;
        w.s0 = n % key_tiles * WSB_KEYS;
        w.hk = n / key_tiles % (int)kv_heads;
        w.b = n / key_tiles / (int)kv_heads;
        const int q_end = (int)min((i64)T - 1, (i64)min(w.s0 + WSB_KEYS, T) - 1 + window - 1);
        w.qt0 = w.s0 / TILE;
        w.nq = q_end / TILE - w.qt0 + 1;
        w.steps = group * w.nq;
        return w;
    };
    auto head = [&](const Work& w, int i) { return w.hk * group + i / w.nq; };
    auto first = [&](const Work& w, int i) { return (w.qt0 + i % w.nq) * TILE; };

    if (wg == WSB_CONSUMERS / 128) {
        regs_lower<24>();
        if (threadIdx.x != WSB_CONSUMERS) return;
        tma_prefetch(tq);
        tma_prefetch(tk);
        tma_prefetch(tv);
        tma_prefetch(tdo);
        u32 it = 0, used = 0;  // steps and tiles loaded so far
        for (int n = blockIdx.x; n < tiles; n += gridDim.x, ++used) {
            const Work w = work(n);
            if (used > 0) mbar_wait(kv_empty, (used - 1) & 1);
            mbar_expect(kv_full, 2 * KV_BYTES);
            for (int c = 0; c < D / 64; ++c) {
                tma_load_4d(sk + c * WSB_KEYS * 64, tk, c * 64, w.hk, w.s0, w.b, kv_full);
                tma_load_4d(sv + c * WSB_KEYS * 64, tv, c * 64, w.hk, w.s0, w.b, kv_full);
            }
            for (int i = 0; i < w.steps; ++i, ++it) {
                const u32 s = it % WSB_STAGES, use = it / WSB_STAGES;
                const int hq = head(w, i), t0 = first(w, i);
                const u64 stat = ((u64)w.b * heads + hq) * t_pad + t0;
                if (use > 0) mbar_wait(empty + s, (use - 1) & 1);
                mbar_expect(q_full + s, TILE_BYTES + ROW_BYTES);
                for (int c = 0; c < D / 64; ++c)
                    tma_load_4d(sq + s * TILE * D + c * TILE * 64, tq, c * 64, hq, t0, w.b, q_full + s);
                bulk_load(slse + s * TILE, lse2 + stat, ROW_BYTES, q_full + s);
                mbar_expect(do_full + s, TILE_BYTES + ROW_BYTES);
                for (int c = 0; c < D / 64; ++c)
                    tma_load_4d(sdo + s * TILE * D + c * TILE * 64, tdo, c * 64, hq, t0, w.b, do_full + s);
                bulk_load(sdelta + s * TILE, delta + stat, ROW_BYTES, do_full + s);
            }
        }
        return;
    }

    regs_raise<240>();
    const int wl = (threadIdx.x >> 5) & 3, g = lane >> 2, tid = threadIdx.x & 127;
    const bool leader = tid == 0;  // issues and waits for the warpgroup's dQ reductions
    const bf16* k_s = sk + 64 * wg * 64;  // this warpgroup's 64 rows of the 128-row tiles
    const bf16* v_s = sv + 64 * wg * 64;
    const bf16* kq_s = sk + wg * WSB_KEYS * 64;  // K's columns of this warpgroup's half of dQ
    float* dq_s = sdq + wg * TILE * DQ;
    u32 it = 0, used = 0;
    for (int n = blockIdx.x; n < tiles; n += gridDim.x, ++used) {
        const Work w = work(n);
        const int key0 = w.s0 + 64 * wg + 16 * wl + g;  // this thread's keys: key0 and key0 + 8
        // Whether warpgroup x's keys meet query tile t0's band.
        auto meets = [&](int x, int t0) {
            const int r = w.s0 + 64 * x;
            return r < T && meets_band(t0, TILE, r, 64, window);
        };
        float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
        for (int i = 0; i < DT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.0f;
        auto& dk_f = reinterpret_cast<float(&)[D / 2]>(dk_acc);
        auto& dv_f = reinterpret_cast<float(&)[D / 2]>(dv_acc);
        mbar_wait(kv_full, used & 1);

        for (int i = 0; i < w.steps; ++i, ++it) {
            const u32 s = it % WSB_STAGES, parity = (it / WSB_STAGES) & 1;
            const int hq = head(w, i), t0 = first(w, i);
            bf16* ds_s = sds + (it & 1) * WSB_KEYS * TILE;
            const bf16* q_s = sq + s * TILE * D;
            const bf16* do_s = sdo + s * TILE * D;
            u32 ap[NT / 2][4], ad[NT / 2][4];
            if (meets(wg, t0)) {
                float st[NT][4], dpt[NT][4];
                auto& st_f = reinterpret_cast<float(&)[TILE / 2]>(st);
                auto& dpt_f = reinterpret_cast<float(&)[TILE / 2]>(dpt);
                mbar_wait(q_full + s, parity);
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < KT; ++kk)
                    wgmma_ss<0, 0>(st_f, desc_k<WSB_KEYS>(k_s, kk), desc_k<TILE>(q_s, kk), kk > 0);
                wg_commit();
                mbar_wait(do_full + s, parity);
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < KT; ++kk)
                    wgmma_ss<0, 0>(dpt_f, desc_k<WSB_KEYS>(v_s, kk), desc_k<TILE>(do_s, kk), kk > 0);
                wg_commit();
                wg_wait<0>();
                wg_hold(st_f);
                wg_hold(dpt_f);
                bwd_probs(st, dpt, slse + s * TILE, sdelta + s * TILE, t0, key0,
                          leaves_band(t0, TILE, w.s0 + 64 * wg, 64, window), window, scale * LOG2E);
#pragma unroll
                for (int kk = 0; kk < NT / 2; ++kk) {
                    c_to_a(st, kk, ap[kk]);
                    c_to_a(dpt, kk, ad[kk]);
                }
                dkv_products(dk_f, dv_f, ap, ad, q_s, do_s);
                store_ds(ds_s, 64 * wg + 16 * wl + g, dpt);
                fence_proxy_async();
            }
            if (leader) bulk_wait_read<0>();  // the last step's reduction has read dq_s
            bar_sync(BAR_DS, WSB_CONSUMERS);

            // This warpgroup's 64 columns of dQ = dS K, over the keys of the warpgroups that met
            // the tile (one that did not wrote no dS^T).
            float dq[DQ / 8][4];
            auto& dq_f = reinterpret_cast<float(&)[DQ / 2]>(dq);
            wg_arrive();
            if (!meets(1, t0))
                ds_k<0, 4>(dq_f, ds_s, kq_s);
            else if (!meets(0, t0))
                ds_k<4, 8>(dq_f, ds_s, kq_s);
            else
                ds_k<0, 8>(dq_f, ds_s, kq_s);
            wg_commit();
            wg_wait<0>();  // and the dV, dK products before it
            wg_hold(dq_f);
            wg_hold(dk_f);
            wg_hold(dv_f);
            wg_keep(ap);
            wg_keep(ad);
            mbar_arrive(empty + s);  // this warp no longer reads the stage's Q, dO, lse2, delta

#pragma unroll
            for (int j = 0; j < DQ / 8; ++j)
                *reinterpret_cast<float4*>(dq_s + (j * 128 + tid) * 4) =
                    make_float4(dq[j][0], dq[j][1], dq[j][2], dq[j][3]);
            fence_proxy_async();
            bar_sync(BAR_DQ + wg, 128);
            if (leader) {
                const u64 tile = ((u64)w.b * heads + hq) * (t_pad / TILE) + t0 / TILE;
                bulk_reduce_add(dq_acc + (tile * 2 + wg) * TILE * DQ, dq_s, TILE * DQ * 4);
                bulk_commit();
            }
        }
        mbar_arrive(kv_empty);  // every product reading K and V is done
        // The dS^T and dQ buffers hold dK and dV once both warpgroups' last dQ products and
        // reductions have read them, and are dS^T and dQ again once both have stored them.
        if (leader) bulk_wait_read<0>();
        bar_sync(BAR_DS, WSB_CONSUMERS);
        store_dkv_rows<D>(dk_acc, dv_acc, sds + wg * 2 * 64 * D, w.s0 + 64 * wg, T, w.b, w.hk, kv_heads, scale, dk, dv);
        bar_sync(BAR_DS, WSB_CONSUMERS);
    }
    if (leader) bulk_wait<0>();
}

// dq [B, T, H, D] (O: f32 or bf16) = scale times the blocked accumulator of swa_bwd_ws: a block
// a 64 x 64 accumulator block at a time (grid-stride), read whole in float4s, laid out by rows in
// shared memory, written as 16-byte pieces of rows. (A thread a pair of columns, each a 2- or
// 4-byte store to a different row, ran at a quarter of DRAM's bandwidth.)
template <typename O, int D>
__device__ void swa_dq_unblock(const float* __restrict__ acc, O* __restrict__ dq, u32 t_len, u32 heads, u32 batch,
                               float scale) {
    constexpr int DQ = 64, PAD = DQ + 4, E = 16 / sizeof(O);  // E: elements a 16-byte piece
    __shared__ float4 rows4[DQ * PAD / 4];  // float4: 16-byte aligned rows
    float* rows = reinterpret_cast<float*>(rows4);
    const u32 tiles = (t_len + TILE - 1) / TILE;
    const u64 blocks = (u64)batch * heads * tiles * (D / DQ);
    for (u64 k = blockIdx.x; k < blocks; k += gridDim.x) {
        // k: 64-column block w of a tile; float4 f of it is fragment j = f / 128 of thread i = f %
        // 128, its rows r and r + 8, columns c and c + 1.
        const u32 w = k % (D / DQ), tile = (k / (D / DQ)) % tiles, bh = k / (D / DQ) / tiles;
        const float4* src = reinterpret_cast<const float4*>(acc + k * DQ * DQ);
        __syncthreads();  // the last block's rows are read
        for (int f = threadIdx.x; f < DQ * DQ / 4; f += blockDim.x) {
            const float4 v = src[f];
            const int j = f >> 7, i = f & 127;
            const int r = 16 * (i >> 5) + ((i & 31) >> 2), c = 8 * j + 2 * (i & 3);
            rows[r * PAD + c] = v.x;
            rows[r * PAD + c + 1] = v.y;
            rows[(r + 8) * PAD + c] = v.z;
            rows[(r + 8) * PAD + c + 1] = v.w;
        }
        __syncthreads();
        for (int p = threadIdx.x; p < DQ * DQ / E; p += blockDim.x) {
            const int r = p / (DQ / E), c = (p % (DQ / E)) * E;
            const u32 row = tile * TILE + r;
            if (row >= t_len) continue;
            O* out = dq + (((u64)(bh / heads) * t_len + row) * heads + bh % heads) * D + w * DQ + c;
            float x[E];
#pragma unroll
            for (int e = 0; e < E; ++e) x[e] = rows[r * PAD + c + e] * scale;
            store_vec(out, x);
        }
    }
}

#define INSTANTIATE_WS_BWD(D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(WSB_THREADS, 1) swa_bwd_ws_d##D(                            \
        const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tk,                              \
        const __grid_constant__ TensorMap tv, const __grid_constant__ TensorMap tdo, const float* lse2,          \
        const float* delta, float* dq_acc, bf16* dk, bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 batch,    \
        u32 window, float scale) {                                                                               \
        swa_bwd_ws<D>(tq, tk, tv, tdo, lse2, delta, dq_acc, dk, dv, t_len, heads, kv_heads, batch, window, scale); \
    }                                                                                                            \
    extern "C" __global__ void swa_dq_unblock_f32_d##D(const float* acc, float* dq, u32 t_len, u32 heads,       \
                                                       u32 batch, float scale) {                                 \
        swa_dq_unblock<float, D>(acc, dq, t_len, heads, batch, scale);                                           \
    }                                                                                                            \
    extern "C" __global__ void swa_dq_unblock_bf16_d##D(const float* acc, bf16* dq, u32 t_len, u32 heads,       \
                                                        u32 batch, float scale) {                                \
        swa_dq_unblock<bf16, D>(acc, dq, t_len, heads, batch, scale);                                            \
    }

INSTANTIATE_WS_BWD(128)
#endif
