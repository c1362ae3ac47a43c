// hopper_fwd.cu: the forward of sliding-window attention on Hopper at head dim 128 (sm_90a only;
// elsewhere, and at head dim 64, where this structure measured slower, attention.cu's swa_fwd
// runs, and this file uses its helpers), warp-specialised as in FlashAttention-3 (arXiv
// 2407.08608):
// - Roles. One producer warp, of which one thread loads every tile by TMA (tma.cuh), and two
//   consumer warpgroups of 64 query rows each, which never load anything. The producer
//   loads a block's Q rows once (double-buffered across blocks) and the K and V tiles of its
//   band into a ring of WS_STAGES buffers, K and V each signalled by its own barrier so that
//   Q K^T can start before V has landed; it refills a buffer once every consumer warp has
//   arrived on its `empty` barrier.
// - Overlap inside a warpgroup: it issues the scores of the next K tile before the P V product
//   of the current one, and runs the online softmax of those scores while P V runs on the tensor
//   cores. Between the warpgroups, ping-pong: they take turns issuing their products (named
//   barriers), so that one's softmax runs under the other's products.
// - Persistent: one block an SM walks the (query block, q head, sequence) tiles, so the
//   producer loads the next tile's Q and K/V while the consumers finish the last one; a
//   warpgroup's output leaves through its rows of the Q buffer (stage_rows) in whole rows. A
//   warpgroup whose rows do not meet a K/V tile of its block's band (the band's edges) only
//   waits for it and hands it back.
// The arithmetic is swa_fwd's on wgmma, in the same order: acc = alpha acc + P V tile by tile.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WS_ROWS 128  // two consumer warpgroups of 64 rows
#define WS_CONSUMER_WARPS 8
#define WS_STAGES 4
#define WS_BAR_TURN 1  // named barriers 1 and 2: warpgroup 0's and 1's turn to issue products
#define WS_BAR_STAGE 3  // 3 and 4: a warpgroup's output is staged

template <int D>
__device__ void swa_fwd_ws(const TensorMap& tq, const TensorMap& tk, const TensorMap& tv, bf16* __restrict__ o,
                           float* __restrict__ lse, u32 t_len, u32 heads, u32 kv_heads, u32 batch, u32 window,
                           float scale_log2) {
    constexpr int NT = TILE / 8, DT = D / 8, KT = D / 16;
    constexpr u32 Q_BYTES = WS_ROWS * D * 2, TILE_BYTES = TILE * D * 2;
    bf16* sq = aligned_smem();                // [2][WS_ROWS][D]
    bf16* sk = sq + 2 * WS_ROWS * D;          // [WS_STAGES][TILE][D]
    bf16* sv = sk + WS_STAGES * TILE * D;     // [WS_STAGES][TILE][D]
    u64* q_full = reinterpret_cast<u64*>(sv + WS_STAGES * TILE * D);  // [2]
    u64* q_empty = q_full + 2;                                        // [2]
    u64* k_full = q_empty + 2;                                        // [WS_STAGES]
    u64* v_full = k_full + WS_STAGES;                                 // [WS_STAGES]
    u64* empty = v_full + WS_STAGES;                                  // [WS_STAGES]

    const int T = (int)t_len, q_blocks = (T + WS_ROWS - 1) / WS_ROWS;
    const int tiles = q_blocks * (int)(heads * batch);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; ++i) {
            mbar_init(q_full + i, 1);
            mbar_init(q_empty + i, WS_CONSUMER_WARPS);
        }
        for (int i = 0; i < WS_STAGES; ++i) {
            mbar_init(k_full + i, 1);
            mbar_init(v_full + i, 1);
            mbar_init(empty + i, WS_CONSUMER_WARPS);
        }
        mbar_init_fence();
    }
    __syncthreads();

    // Tile n: its first query row, q head and sequence (the longest rows first), and the K/V
    // tiles kt0..kt1 its band meets.
    struct Work {
        int q0, h, b, kt0, kt1;
    };
    auto work = [&](int n) {
        Work w;
        const int per = (int)(heads * batch);
        w.q0 = (q_blocks - 1 - n / per) * WS_ROWS;
        w.h = n % (int)heads;
        w.b = n / (int)heads % (int)batch;
        w.kt0 = max(0, w.q0 - (int)window + 1) / TILE;
        w.kt1 = (min(w.q0 + WS_ROWS, T) - 1) / TILE;
        return w;
    };

    if (warp == WS_CONSUMER_WARPS) {
        if (lane != 0) return;
        tma_prefetch(tq);
        tma_prefetch(tk);
        tma_prefetch(tv);
        u32 it = 0, used = 0;  // K/V tiles and blocks loaded so far
        for (int n = blockIdx.x; n < tiles; n += gridDim.x, ++used) {
            const Work w = work(n);
            const int hk = w.h / (int)(heads / kv_heads);
            const u32 qb = used & 1;
            if (used >= 2) mbar_wait(q_empty + qb, ((used >> 1) - 1) & 1);
            mbar_expect(q_full + qb, Q_BYTES);
            for (int c = 0; c < D / 64; ++c)
                tma_load_4d(sq + qb * WS_ROWS * D + c * WS_ROWS * 64, tq, c * 64, w.h, w.q0, w.b, q_full + qb);
            for (int j = w.kt0; j <= w.kt1; ++j, ++it) {
                const u32 s = it % WS_STAGES, use = it / WS_STAGES;
                if (use > 0) mbar_wait(empty + s, (use - 1) & 1);
                mbar_expect(k_full + s, TILE_BYTES);
                for (int c = 0; c < D / 64; ++c)
                    tma_load_4d(sk + s * TILE * D + c * TILE * 64, tk, c * 64, hk, j * TILE, w.b, k_full + s);
                mbar_expect(v_full + s, TILE_BYTES);
                for (int c = 0; c < D / 64; ++c)
                    tma_load_4d(sv + s * TILE * D + c * TILE * 64, tv, c * 64, hk, j * TILE, w.b, v_full + s);
            }
        }
        return;
    }

    // The warpgroup, as a value the compiler knows is uniform over a warp (so that wgmma under a
    // condition on it is not taken for divergent code and serialised).
    const int wg = __shfl_sync(FULL_MASK, warp >> 2, 0), wl = warp & 3, g = lane >> 2;
    // Each consumer warp hands a buffer back once its share of the products reading it is done.
    auto hand_back = [&](u64* bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    };
    // The two warpgroups take turns issuing their products (FlashAttention-3's ping-pong), so
    // that one's softmax runs under the other's products rather than both at once: a turn waits
    // for the other warpgroup's last turn and hands the next to it. Both take a turn at every
    // step of a block's band, with or without products of their own, so that they stay in step.
    auto take_turn = [&] { bar_sync(WS_BAR_TURN + wg, 256); };
    auto pass_turn = [&] { bar_arrive(WS_BAR_TURN + (wg ^ 1), 256); };
    if (wg == 1) pass_turn();  // the first turn is warpgroup 0's
    u32 it = 0, used = 0;
    for (int n = blockIdx.x; n < tiles; n += gridDim.x, ++used) {
        const Work w = work(n);
        const int r0 = w.q0 + 64 * wg, row0 = r0 + 16 * wl + g;
        // The K/V tiles a..z that this warpgroup's rows meet (none when they start past T).
        int a = w.kt1 + 1, z = w.kt1;
        if (r0 < T) {
            a = max(0, r0 - (int)window + 1) / TILE;
            z = (min(r0 + 64, T) - 1) / TILE;
        }
        auto stage = [&](int j) { return (it + (j - w.kt0)) % WS_STAGES; };
        auto parity = [&](int j) { return ((it + (j - w.kt0)) / WS_STAGES) & 1; };
        const u32 qb = used & 1;
        mbar_wait(q_full + qb, (used >> 1) & 1);
        const bf16* q_s = sq + qb * WS_ROWS * D + 64 * wg * 64;
        float acc[DT][4], s[NT][4], m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f}, alpha[2];
        u32 pf[NT / 2][4];
#pragma unroll
        for (int i = 0; i < DT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        auto& s_f = reinterpret_cast<float(&)[TILE / 2]>(s);
        auto& acc_f = reinterpret_cast<float(&)[D / 2]>(acc);
        auto scores = [&](int j) {  // issued, not waited for
            wg_arrive();
            const bf16* k_s = sk + stage(j) * TILE * D;
#pragma unroll
            for (int kk = 0; kk < KT; ++kk)
                wgmma_ss<0, 0>(s_f, desc_k<WS_ROWS>(q_s, kk), desc_k<TILE>(k_s, kk), kk > 0);
            wg_commit();
        };
        auto values = [&](int j) {  // acc += P V_j, issued
            wg_arrive();
            const bf16* v_s = sv + stage(j) * TILE * D;
#pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk) wgmma_rs<1>(acc_f, pf[kk], desc_mn<TILE>(v_s, kk));
            wg_commit();
        };

        // Step j (kt0 .. kt1 + 1) is a turn: the scores of tile j and P V of tile j - 1, those
        // of them that this warpgroup's rows meet. A tile they do not meet is only waited for
        // and handed back.
        auto pass = [&](int j) {
            mbar_wait(k_full + stage(j), parity(j));
            mbar_wait(v_full + stage(j), parity(j));
            hand_back(empty + stage(j));
            take_turn();
            pass_turn();
        };
        auto values_done = [&](int j) {
            wg_wait<0>();
            wg_hold(acc_f);
            wg_keep(pf);
            hand_back(empty + stage(j));
        };
        auto to_a = [&] {
#pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk) c_to_a(s, kk, pf[kk]);
        };
        auto softmax = [&](int j) {
            softmax_scores(s, m, l, alpha, row0, j * TILE, leaves_band(r0, 64, j * TILE, TILE, window), window,
                           scale_log2);
        };
        for (int j = w.kt0; j < a; ++j) pass(j);
        if (a <= z) {
            mbar_wait(k_full + stage(a), parity(a));
            take_turn();
            scores(a);
            pass_turn();
            wg_wait<0>();
            wg_hold(s_f);
            softmax(a);
            to_a();
            for (int j = a + 1; j <= z; ++j) {
                mbar_wait(k_full + stage(j), parity(j));
                mbar_wait(v_full + stage(j - 1), parity(j - 1));
                take_turn();
                scores(j);
                values(j - 1);
                pass_turn();
                wg_wait<1>();  // the scores of tile j; P V of tile j - 1 may still run
                wg_hold(s_f);
                softmax(j);
                values_done(j - 1);
                // Where no row of the warp's has a new max (alpha exactly 1), the warp skips the
                // D / 2 multiplications a thread (how often is not measured).
                if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) rescale(acc, alpha);
                to_a();
            }
            mbar_wait(v_full + stage(z), parity(z));
            take_turn();
            values(z);
            pass_turn();
            values_done(z);
        } else {
            take_turn();
            pass_turn();
        }
        // The tiles past this warpgroup's rows before its output, so that the other's last turns
        // do not wait for the stores.
        for (int j = z + 1; j <= w.kt1; ++j) pass(j);
        if (a <= z) {
            // Every product reading this warpgroup's Q rows is done: o leaves through them.
            bf16* stage = sq + qb * WS_ROWS * D + 64 * wg * 64;
            float inv[2];
            finish_rows(m, l, row0, T, w.b, w.h, heads, lse, inv);
            stage_rows<D>(acc, inv, stage, WS_ROWS * 64);
            bar_sync(WS_BAR_STAGE + wg, 128);
            store_staged<D>(stage, WS_ROWS * 64, [&](int row) {
                return r0 + row < T ? o + (((u64)w.b * T + r0 + row) * heads + w.h) * D : nullptr;
            });
            fence_proxy_async();  // before the next Q's TMA writes over the stage
        }
        hand_back(q_empty + qb);
        it += w.kt1 - w.kt0 + 1;
    }
}

#define INSTANTIATE_WS(D)                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * (WS_CONSUMER_WARPS + 1), 1) swa_fwd_ws_d##D(         \
        const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tk,                         \
        const __grid_constant__ TensorMap tv, bf16* o, float* lse, u32 t_len, u32 heads, u32 kv_heads,      \
        u32 batch, u32 window, float scale_log2) {                                                          \
        swa_fwd_ws<D>(tq, tk, tv, o, lse, t_len, heads, kv_heads, batch, window, scale_log2);               \
    }

INSTANTIATE_WS(128)
#endif
