// rla.cu: RAttention's residual linear attention on bf16 [B, T, H, D] q and [B, T, Hkv, D] k, v
// (q head h reads kv head h / (H / Hkv)): o_t = phi(q_t) · sum_{s <= t - W} phi(k_s)^T v_s with
// phi(x) = [softmax(x), softmax(-x)] over the head dim (F = 2D features).
//
// Keys and values shifted W steps later (k'_t = k_{t-W}, zero for t < W) make it plain causal
// linear attention of q against k', run in chunks of CH = 64 steps as in fla's chunk_linear_attn.
// The output and each of the three gradients is itself a linear attention, causal or
// anti-causal (s >= t), of different operands:
//
//   o_t        = sum_{s <= t} (phi(q_t) . phi(k'_s)) v'_s
//   dphi(q)_t  = sum_{s <= t} (do_t . v'_s) phi(k'_s)
//   dv'_s      = sum_j sum_{t >= s} (phi(k'_s) . phi(q_jt)) do_jt       (j: the kv head's q heads)
//   dphi(k')_s = sum_j sum_{t >= s} (v'_s . do_jt) phi(q_jt)
//
// so one kernel, rla_walk, makes all four: a block walks the chunks (backwards for the
// anti-causal two) carrying the state, sum of b^T v over the chunks walked, in registers (fla's
// fused_chunk), and writes each chunk's rows a_c . state + mask(a_c b_c^T) v_c; the states never
// go to memory. The feature gradients go back through phi in the walk's epilogue, one sign half
// of the features a block (a softmax's backward needs only its own row dot), each half into its
// own D columns of a [B, T, heads, 2D] buffer that rla_sum_halves adds up.
//
// - rla_phi: phi of every row of q and of k, into bf16 [B, T, heads, F], in the forward (and in
//   a backward not given the forward's), D/8 threads a row: max, min and both exponential sums
//   by shuffles. The walks load feature tiles as they load v (the shift and the sequence's ends
//   give zero rows); each used to run the softmaxes itself, and ncu found that ALU work the
//   limit.
// - rla_walk: below. Products run on mma.sync m16n8k16 with f32 accumulation (mma.cuh); on
//   Hopper rla_walk_wg, the same walk on wgmma with its tiles loaded by TMA, takes its place
//   (below it), and the four walks' kernels take tensor maps of their operands.
//
// swax-cuda's mma.cuh, wgmma.cuh and tma.cuh (cuda/kernels/) are prepended by cuda.rs beside
// this file. Equations and layouts: mod.rs beside this file; the CPU kernel cpu.rs beside it is
// the reference these kernels are tested against.

#define CH 64
#define THREADS 256

// phi of n rows of D (x, contiguous) into n rows of 2D (f): D/8 lanes a row (THREADS / (D/8)
// rows a block), each holding 8 consecutive elements, read and written 16 bytes at a time (a warp a
// row with 8-byte pieces kept too few bytes in flight to reach DRAM's bandwidth). Rows are
// phi(x) in full; the callers' tile loads give the zeros of rows outside the sequence or before
// the shift.
template <int D>
__device__ void rla_phi(const bf16* __restrict__ x, bf16* __restrict__ f, u64 n) {
    constexpr int L = D / 8;  // lanes a row: an aligned group of a warp, so xor shuffles stay in it
    const int lane = threadIdx.x % L;
    const u64 row = (u64)blockIdx.x * (THREADS / L) + threadIdx.x / L;
    // Whole warps stay to the shuffles (a block's rows past n only skip their loads and stores).
    const bool in = row < n;
    float xv[8], p[8], m[8];
    if (in)
        load_vec(x + row * D + lane * 8, xv);
    else
        for (int e = 0; e < 8; ++e) xv[e] = 0.0f;
    float mx = xv[0], mn = xv[0];
#pragma unroll
    for (int e = 1; e < 8; ++e) {
        mx = fmaxf(mx, xv[e]);
        mn = fminf(mn, xv[e]);
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) {
        mx = fmaxf(mx, shfl_xor(mx, o));
        mn = fminf(mn, shfl_xor(mn, o));
    }
    float sp = 0.0f, sm = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        p[e] = fast_exp2((xv[e] - mx) * LOG2E);
        m[e] = fast_exp2((mn - xv[e]) * LOG2E);
        sp += p[e];
        sm += m[e];
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) {
        sp += shfl_xor(sp, o);
        sm += shfl_xor(sm, o);
    }
    const float ip = 1.0f / sp, im = 1.0f / sm;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        p[e] *= ip;
        m[e] *= im;
    }
    if (!in) return;
    store_vec(f + row * 2 * D + lane * 8, p);
    store_vec(f + row * 2 * D + D + lane * 8, m);
}

// y = the sum of the two D-column halves of each row of x ([rows, 2D], rows of [B, T, heads]),
// zero at times from `limit` on, whose rows of x are not read (the walk for dk writes none for
// the last `window` keys, which feed no query): a thread per 8 elements.
template <int D>
__device__ void rla_sum_halves(const bf16* __restrict__ x, bf16* __restrict__ y, u64 rows, u32 t_len, u32 heads,
                               u32 limit) {
    const u64 i = (u64)blockIdx.x * THREADS + threadIdx.x;
    if (i >= rows * (D / 8)) return;
    const u64 row = i / (D / 8);
    const int c = (int)(i % (D / 8)) * 8;
    float p[8], n[8];
    if (row / heads % t_len < limit) {
        load_vec(x + row * 2 * D + c, p);
        load_vec(x + row * 2 * D + D + c, n);
#pragma unroll
        for (int e = 0; e < 8; ++e) p[e] += n[e];
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) p[e] = 0.0f;
    }
    store_vec(y + row * D + c, p);
}

// Rows of a [B, T, heads, width] bf16 tensor as a walk reads them: row t' of a chunk is time
// t' - shift (zeros before the shift and from T on).
struct Rows {
    const bf16* p;
    u32 heads, width, shift;
    __device__ const bf16* at(int b, int T, int head) const { return p + ((u64)b * T * heads + head) * width; }
};

// Zeroes rows c0 .. c0 + CH - 1 (those below T) of N columns, o at (time 0, column 0), rows rs apart.
template <int N> __device__ __forceinline__ void zero_rows(bf16* __restrict__ o, u64 rs, int T, int c0) {
    for (int i = threadIdx.x; i < CH * N / 8; i += THREADS) {
        const int t = c0 + i / (N / 8);
        if (t < T) reinterpret_cast<uint4*>(o + (u64)t * rs)[i % (N / 8)] = make_uint4(0, 0, 0, 0);
    }
}

// A walk's masked 16 x 64 products (a warp's rows against the chunk's 64 steps) are needed whole
// by both warps of a pair, w and w ^ 4, which take the two halves of the output columns: each
// makes 32 of the 64 columns, stores them as bf16 into a shared [CH][64] tile, and after
// pair_sync both read the rows whole.
// store_half writes columns 32 half .. + 31 of rows r0 .. r0 + 15; LOWER keeps column <= row
// (queries against keys), else column >= row (keys against queries).
template <bool LOWER>
__device__ __forceinline__ void store_half(const float (&s)[4][4], bf16* p, int r0, int half) {
    const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = r0 + gq + 8 * r, col = 32 * half + 8 * n + 2 * tq;
            const bool k0 = LOWER ? col <= row : col >= row, k1 = LOWER ? col + 1 <= row : col + 1 >= row;
            *reinterpret_cast<u32*>(p + swz<64>(row, col)) =
                bf16x2_bits(k0 ? s[n][2 * r] : 0.0f, k1 ? s[n][2 * r + 1] : 0.0f);
        }
}

__device__ __forceinline__ void pair_sync() { bar_sync(1 + ((threadIdx.x >> 5) & 3), 64); }

// Zeroed accumulators.
template <int N> __device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

// The feature gradient g (a warp's 16 rows, its half of the block's N columns of one sign's
// features) carried back through that sign of phi: sgn p (g - <p, g>), phi's values p read from
// the [CH][N] shared tile `ph`; the row dot over all N columns meets the pair's other half in
// `dots` ([2][CH] floats). Written over g.
template <int N>
__device__ __forceinline__ void phi_backward(float (&g)[N / 16][4], const bf16* ph, int r0, int half, float* dots,
                                             float sgn) {
    const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    float p[N / 16][4], dot[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < N / 16; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const u32 w = *reinterpret_cast<const u32*>(ph + swz<N>(r0 + gq + 8 * r, half * (N / 2) + n * 8 + 2 * tq));
            p[n][2 * r] = __uint_as_float(w << 16);
            p[n][2 * r + 1] = __uint_as_float(w & 0xffff0000u);
            dot[r] += p[n][2 * r] * g[n][2 * r] + p[n][2 * r + 1] * g[n][2 * r + 1];
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        dot[r] += shfl_xor(dot[r], 1);
        dot[r] += shfl_xor(dot[r], 2);
        if (tq == 0) dots[half * CH + r0 + gq + 8 * r] = dot[r];
    }
    pair_sync();
#pragma unroll
    for (int r = 0; r < 2; ++r) dot[r] += dots[(half ^ 1) * CH + r0 + gq + 8 * r];
#pragma unroll
    for (int n = 0; n < N / 16; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) g[n][e] = sgn * p[n][e] * (g[n][e] - dot[e >> 1]);
}

// One linear attention over the chunks (see the top): rows of a ([CH][K] a chunk, of head
// blockIdx.y) against rows of b ([CH][K]) and of N columns of v (from column blockIdx.x * N), of
// the b/v head blockIdx.y / group, or (REV) of each of the group's heads blockIdx.y * group + j,
// summed; batch blockIdx.z. o (heads as a's, rows of o_width, written from column blockIdx.x * N
// at a's times) gets, chunk by chunk in time order (REV: backwards), a_c . S + mask(a_c b_c^T) v_c
// with the mask s <= t (REV: s >= t) and S the sum of b^T v over the chunks walked before. PHI:
// the N columns are sign blockIdx.x of a feature gradient, carried back through phi with phi's
// values from the same columns of `ph` (rows as a's).
//
// The state lives in registers (f32, warp w owning rows K/WR (w % WR) .. and columns N/WC (w /
// WR) ..), its bf16 copy in shared memory for the rows' a_c . S. Eight warps: warp w takes the
// chunk's rows 16 (w % 4) .. +15 and half w / 4 of the N columns. Each step: the step's tiles
// landed (fetched during the step before, a two-stage ring), the masked product made once a
// pair (store_half), the rows' products, S += b_c^T v_c in registers; once a chunk's last head
// is in, its rows are written and S copied to shared memory for the next chunk, after every warp
// has read the old copy. Chunks before the first key have no rows but zeros (not REV: written
// here; REV: the rows are before time 0).
template <int K, int N, bool REV, bool PHI>
__device__ void rla_walk(const Rows a, const Rows b, const Rows v, const Rows ph, bf16* __restrict__ o, u32 o_width,
                         u32 t_len, u32 group) {
    constexpr int WR = K / 16 < 8 ? K / 16 : 8, MT = K / (16 * WR);  // the state's warp rows, m-tiles a warp
    constexpr int SC = N * WR / 8, NS = SC / 8;                       // its columns a warp, n8-tiles
    constexpr int NO = N / 16;                                         // n8-tiles of a warp's output half
    constexpr int STAGE = 2 * CH * K + (PHI ? 2 : 1) * CH * N;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* stages = reinterpret_cast<bf16*>(smem);  // [2] x (a [CH][K], b [CH][K], v [CH][N], PHI: ph [CH][N])
    bf16* sh = stages + 2 * STAGE;                   // S [K][N]
    bf16* sp = sh + K * N;                           // mask(a b^T) [CH][64]
    float* dots = reinterpret_cast<float*>(sp + CH * CH);  // PHI: the pair's row dots [2][CH]

    const int T = (int)t_len, nc = (T + CH - 1) / CH, G = REV ? (int)group : 1;
    const int col = blockIdx.x * N, ha = blockIdx.y, bz = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int r0 = (warp & 3) * 16, half = warp >> 2;
    const int sr0 = (warp % WR) * (K / WR), sc0 = (warp / WR) * SC;
    const u64 o_rs = (u64)gridDim.y * o_width;
    bf16* go = o + ((u64)bz * T * gridDim.y + ha) * o_width + col;
    const bf16* ga = a.at(bz, T, ha);

    const int first = (int)(REV ? a.shift : b.shift) / CH;
    if (!REV)
        for (int c = 0; c < first; ++c) zero_rows<N>(go, o_rs, T, c * CH);
    const int steps = (nc - first) * G;
    auto chunk_of = [&](int i) { return REV ? nc - 1 - i / G : first + i / G; };
    auto fetch = [&](int i) {
        if (i < steps) {
            const int c0 = chunk_of(i) * CH, hb = REV ? ha * (int)group + i % G : ha / (int)group;
            bf16* at = stages + (i & 1) * STAGE;
            load_tile<K, CH, THREADS, true>(at, ga, (u64)a.heads * a.width, c0, T, a.shift);
            load_tile<K, CH, THREADS, true>(at + CH * K, b.at(bz, T, hb), (u64)b.heads * b.width, c0, T, b.shift);
            load_tile<N, CH, THREADS, true>(at + 2 * CH * K, v.at(bz, T, hb) + col, (u64)v.heads * v.width, c0, T,
                                            v.shift);
            if constexpr (PHI)
                load_tile<N, CH, THREADS, true>(at + 2 * CH * K + CH * N, ph.at(bz, T, ha) + col,
                                                (u64)ph.heads * ph.width, c0, T, ph.shift);
        }
        cp_async_commit();
    };
    fetch(0);
    for (int i = threadIdx.x; i < K * N / 2; i += THREADS) reinterpret_cast<u32*>(sh)[i] = 0u;
    float st[MT][NS][4], acc[NO][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) zero(st[m]);

    for (int i = 0; i < steps; ++i) {
        const int c0 = chunk_of(i) * CH, j = i % G;
        cp_async_wait<0>();
        __syncthreads();  // step i's tiles and S's copy are in; the last step's reads are done
        fetch(i + 1);
        const bf16* sa = stages + (i & 1) * STAGE;
        const bf16* sb = sa + CH * K;
        const bf16* sv = sb + CH * K;
        {
            float p[4][4];
            zero(p);
            mma_smem_a<K / 16, 4, K, K>(p, sa, r0, sb, 32 * half);
            store_half<!REV>(p, sp, r0, half);
        }
        if (j == 0) zero(acc);
        pair_sync();
        mma_smem_a<CH / 16, NO, 64, N, false>(acc, sp, r0, sv, half * (N / 2));
        if (j == 0) mma_smem_a<K / 16, NO, K, N, false>(acc, sa, r0, sh, half * (N / 2));
        // S += b^T v: b read k-major as the A operand.
#pragma unroll
        for (int kk = 0; kk < CH / 16; ++kk) {
            u32 f[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) ldsm_x4<true>(f[m], lane_ptr<K, false>(sb, kk * 16, sr0 + 16 * m));
#pragma unroll
            for (int nn = 0; nn < NS / 2; ++nn) {
                u32 g[4];
                b_frag<N, false>(g, sv, kk, nn, sc0);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma(st[m][2 * nn], f[m], g[0], g[1]);
                    mma(st[m][2 * nn + 1], f[m], g[2], g[3]);
                }
            }
        }
        if (j < G - 1) continue;
        if constexpr (PHI) phi_backward<N>(acc, sv + CH * N, r0, half, dots, blockIdx.x ? -1.0f : 1.0f);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int tp = c0 + r0 + gq + 8 * r;
            if (tp < (int)a.shift || tp >= T) continue;
            bf16* out = go + (u64)(tp - (int)a.shift) * o_rs + half * (N / 2) + 2 * tq;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *reinterpret_cast<u32*>(out + n * 8) = bf16x2_bits(acc[n][2 * r], acc[n][2 * r + 1]);
        }
        __syncthreads();  // every warp has read S's copy
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<u32*>(sh + swz<N>(sr0 + 16 * m + gq + 8 * r, sc0 + n * 8 + 2 * tq)) =
                        bf16x2_bits(st[m][n][2 * r], st[m][n][2 * r + 1]);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A walk's operand on Hopper: its tensor map (boxes of CH rows by 64 columns of one head, swax-
// cuda's tma.rs) and its shift. Tile row t' of a chunk is time t' - shift, so a box starts at
// time c0 - shift, and the TMA unit fills the rows before time 0 and from T on with zeros.
struct Tiles {
    const TensorMap* map;
    u32 shift;
};

// rla_walk on Hopper (sm_90a), the same walk on wgmma with the two warpgroups at different
// work, so that the state's chain no longer waits for the rows' products: warpgroup 1 holds the
// state S (f32, K/64 m64 blocks of N columns) and adds b_c^T v_c to it each step; warpgroup 0
// makes the chunk's rows, mask(a_c b_c^T) v_c plus a_c . S from the bf16 copy of S that
// warpgroup 1 left in shared memory after the chunk before (two copies, by chunk parity). A
// step's tiles come by TMA, issued by one thread a step ahead into a two-stage ring and counted
// on the stage's mbarrier, in the 128-byte-swizzle layout wgmma reads: no thread computes a
// load's address (every thread's cp.async, which this replaced, made the walks slower by about
// half again). The
// masked product goes from registers straight into P v. PHI: warpgroup 0 holds all N columns
// of a row, so the row dot is its own lanes'; phi's values come as a fourth tile at a chunk's
// last head.
template <int K, int N, bool REV, bool PHI>
__device__ void rla_walk_wg(const Tiles a, const Tiles b, const Tiles v, const Tiles ph, bf16* __restrict__ o,
                            u32 o_width, u32 t_len, u32 group) {
    constexpr int STAGE = 2 * CH * K + (PHI ? 2 : 1) * CH * N, MB = K / 64;  // MB: the state's m64 blocks
    constexpr int LOADER = 128;  // warpgroup 1's first thread: warpgroup 0's products are the longer chain
    bf16* stages = aligned_smem();        // [2] x (a [CH][K], b [CH][K], v [CH][N], PHI: ph [CH][N])
    bf16* copies = stages + 2 * STAGE;    // [2] x S [K][N]
    u64* full = reinterpret_cast<u64*>(copies + 2 * K * N);  // [2]: a stage's tiles have landed

    const int T = (int)t_len, nc = (T + CH - 1) / CH, G = REV ? (int)group : 1;
    const int col = blockIdx.x * N, ha = blockIdx.y, bz = blockIdx.z;
    const int wg = __shfl_sync(FULL_MASK, threadIdx.x >> 7, 0), wl = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3, r0 = 16 * wl + g;
    const u64 o_rs = (u64)gridDim.y * o_width;
    bf16* go = o + ((u64)bz * T * gridDim.y + ha) * o_width + col;

    const int first = (int)(REV ? a.shift : b.shift) / CH;
    if (!REV)
        for (int c = 0; c < first; ++c) zero_rows<N>(go, o_rs, T, c * CH);
    const int steps = (nc - first) * G;
    auto chunk_of = [&](int i) { return REV ? nc - 1 - i / G : first + i / G; };
    auto box = [&](bf16* dst, const Tiles& x, int c, int head, int c0, u64* bar) {
        tma_load_4d(dst, *x.map, c, head, c0 - (int)x.shift, bz, bar);
    };
    // Step i's tiles, by the loader alone (phi's only at a chunk's last head, where they are read).
    auto fetch = [&](int i) {
        if (i >= steps) return;
        const int c0 = chunk_of(i) * CH, hb = REV ? ha * (int)group + i % G : ha / (int)group;
        const bool with_phi = PHI && i % G == G - 1;
        bf16* at = stages + (i & 1) * STAGE;
        u64* bar = full + (i & 1);
        mbar_expect(bar, 2 * CH * (2 * K + (with_phi ? 2 : 1) * N));
#pragma unroll
        for (int c = 0; c < K / 64; ++c) {
            box(at + c * CH * 64, a, 64 * c, ha, c0, bar);
            box(at + CH * K + c * CH * 64, b, 64 * c, hb, c0, bar);
        }
#pragma unroll
        for (int c = 0; c < N / 64; ++c) {
            box(at + 2 * CH * K + c * CH * 64, v, col + 64 * c, hb, c0, bar);
            if (with_phi) box(at + 2 * CH * K + CH * N + c * CH * 64, ph, col + 64 * c, ha, c0, bar);
        }
    };
    if (threadIdx.x == LOADER) {
        mbar_init(full, 1);
        mbar_init(full + 1, 1);
        mbar_init_fence();
        tma_prefetch(*a.map);
        tma_prefetch(*b.map);
        tma_prefetch(*v.map);
        if constexpr (PHI) tma_prefetch(*ph.map);
    }
    for (int i = threadIdx.x; i < K * N / 2; i += THREADS) reinterpret_cast<u32*>(copies)[i] = 0u;
    __syncthreads();  // the barriers are set up
    if (threadIdx.x == LOADER) fetch(0);
    float acc[N / 8][4], st[MB][N / 2];
    auto& acc_f = reinterpret_cast<float(&)[N / 2]>(acc);
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int e = 0; e < N / 2; ++e) st[m][e] = 0.0f;

    for (int i = 0; i < steps; ++i) {
        const int ci = i / G, c0 = chunk_of(i) * CH, j = i % G;
        mbar_wait(full + (i & 1), (i >> 1) & 1);
        fence_proxy_async();  // S's copy, written by threads, is read by wgmma
        __syncthreads();      // S's copy is in; the last step's reads of the other stage are done
        if (threadIdx.x == LOADER) fetch(i + 1);
        const bf16* sa = stages + (i & 1) * STAGE;
        const bf16* sb = sa + CH * K;
        const bf16* sv = sb + CH * K;
        if (wg == 1) {
            // S += b^T v: b read MN-major as the A operand, an m64 block of features at a time.
            wg_arrive();
#pragma unroll
            for (int m = 0; m < MB; ++m)
#pragma unroll
                for (int kk = 0; kk < CH / 16; ++kk)
                    wgmma_ss<1, 1>(st[m], desc_mn<CH>(sb + m * CH * 64, kk), desc_mn<CH>(sv, kk));
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int m = 0; m < MB; ++m) wg_hold(st[m]);
            if (j < G - 1) continue;
            // The copy the next chunk's rows read (the other one is the one this chunk's read).
            bf16* cp = copies + ((ci + 1) & 1) * K * N;
#pragma unroll
            for (int m = 0; m < MB; ++m)
#pragma unroll
                for (int n = 0; n < N / 8; ++n)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        *reinterpret_cast<u32*>(cp + swz_blocks<K>(64 * m + r0 + 8 * r, 8 * n + 2 * tq)) =
                            bf16x2_bits(st[m][4 * n + 2 * r], st[m][4 * n + 2 * r + 1]);
            continue;
        }
        // Warpgroup 0: the masked product, and at a chunk's first head its rows' a_c . S.
        float p[CH / 8][4];
        auto& p_f = reinterpret_cast<float(&)[CH / 2]>(p);
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < K / 16; ++kk) wgmma_ss<0, 0>(p_f, desc_k<CH>(sa, kk), desc_k<CH>(sb, kk), kk > 0);
        if (j == 0) {
            const bf16* cp = copies + (ci & 1) * K * N;
#pragma unroll
            for (int kk = 0; kk < K / 16; ++kk)
                wgmma_ss<0, 1>(acc_f, desc_k<CH>(sa, kk), desc_mn<K>(cp, kk), kk > 0);
        }
        wg_commit();
        wg_wait<0>();
        wg_hold(p_f);
        wg_hold(acc_f);
        u32 pa[CH / 16][4];
#pragma unroll
        for (int n = 0; n < CH / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = r0 + 8 * (e >> 1), c = 8 * n + 2 * tq + (e & 1);
                if (REV ? c < row : c > row) p[n][e] = 0.0f;
            }
#pragma unroll
        for (int kk = 0; kk < CH / 16; ++kk) c_to_a(p, kk, pa[kk]);
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < CH / 16; ++kk) wgmma_rs<1>(acc_f, pa[kk], desc_mn<CH>(sv, kk));
        wg_commit();
        wg_wait<0>();
        wg_hold(acc_f);
        wg_keep(pa);
        if (j < G - 1) continue;
        // The rows out; PHI: as sgn p (g - <p, g>) over this sign's N columns, phi's values p
        // (bf16 pairs) from the stage's phi tile (acc is left as the products wrote it: a value
        // written into it here would make ptxas serialise the next chunk's products on it).
        const bf16* sph = sv + CH * N;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int tp = c0 + r0 + 8 * r;
            u32 pw[N / 8];
            float dot = 0.0f;
            if constexpr (PHI) {
#pragma unroll
                for (int n = 0; n < N / 8; ++n) {
                    pw[n] = *reinterpret_cast<const u32*>(sph + swz_blocks<CH>(r0 + 8 * r, 8 * n + 2 * tq));
                    dot += __uint_as_float(pw[n] << 16) * acc[n][2 * r] +
                           __uint_as_float(pw[n] & 0xffff0000u) * acc[n][2 * r + 1];
                }
                dot += shfl_xor(dot, 1);
                dot += shfl_xor(dot, 2);
            }
            if (tp < (int)a.shift || tp >= T) continue;
            bf16* out = go + (u64)(tp - (int)a.shift) * o_rs + 2 * tq;
#pragma unroll
            for (int n = 0; n < N / 8; ++n) {
                float y0 = acc[n][2 * r], y1 = acc[n][2 * r + 1];
                if constexpr (PHI) {
                    const float sgn = blockIdx.x ? -1.0f : 1.0f;
                    y0 = sgn * __uint_as_float(pw[n] << 16) * (y0 - dot);
                    y1 = sgn * __uint_as_float(pw[n] & 0xffff0000u) * (y1 - dot);
                }
                *reinterpret_cast<u32*>(out + n * 8) = bf16x2_bits(y0, y1);
            }
        }
    }
}

// How a walk kernel takes its operands: on Hopper their tensor maps (boxes of CH rows by 64
// columns, made by the wrapper), elsewhere their pointers. ROWS(x, heads, width, shift) is operand
// x as the walk reads it; NO_ROWS an operand the walk does not read.
#define OPERAND const __grid_constant__ TensorMap
#define ROWS(x, heads, width, shift) Tiles{&x, shift}
#define NO_ROWS Tiles{}
#define WALK rla_walk_wg
#else
#define OPERAND const bf16*
#define ROWS(x, heads, width, shift) Rows{x, heads, width, shift}
#define NO_ROWS Rows{}
#define WALK rla_walk
#endif

// The four walks (see the top), by the operands' roles; group = H / Hkv.
#define WALKS(D)                                                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_fwd_d##D(                                        \
        OPERAND fq, OPERAND fk, OPERAND v, bf16* o, u32 t_len, u32 heads, u32 kv_heads, u32 shift) {            \
        WALK<2 * D, 64, false, false>(ROWS(fq, heads, 2 * D, 0), ROWS(fk, kv_heads, 2 * D, shift),              \
                                      ROWS(v, kv_heads, D, shift), NO_ROWS, o, D, t_len, heads / kv_heads);     \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_bwd_dq_d##D(                                     \
        OPERAND fq, OPERAND fk, OPERAND v, OPERAND dout, bf16* dq2, u32 t_len, u32 heads, u32 kv_heads,         \
        u32 shift) {                                                                                            \
        WALK<D, D, false, true>(ROWS(dout, heads, D, 0), ROWS(v, kv_heads, D, shift),                           \
                                ROWS(fk, kv_heads, 2 * D, shift), ROWS(fq, heads, 2 * D, 0), dq2, 2 * D, t_len, \
                                heads / kv_heads);                                                              \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_bwd_dk_d##D(                                     \
        OPERAND fq, OPERAND fk, OPERAND v, OPERAND dout, bf16* dk2, u32 t_len, u32 heads, u32 kv_heads,         \
        u32 shift) {                                                                                            \
        WALK<D, D, true, true>(ROWS(v, kv_heads, D, shift), ROWS(dout, heads, D, 0), ROWS(fq, heads, 2 * D, 0),  \
                               ROWS(fk, kv_heads, 2 * D, shift), dk2, 2 * D, t_len, heads / kv_heads);          \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_bwd_dv_d##D(                                     \
        OPERAND fq, OPERAND fk, OPERAND dout, bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 shift) {       \
        WALK<2 * D, 64, true, false>(ROWS(fk, kv_heads, 2 * D, shift), ROWS(fq, heads, 2 * D, 0),              \
                                     ROWS(dout, heads, D, 0), NO_ROWS, dv, D, t_len, heads / kv_heads);         \
    }

#define INSTANTIATE(D)                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_phi_d##D(const bf16* x, bf16* f, u64 rows) {     \
        rla_phi<D>(x, f, rows);                                                                                 \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                       \
        rla_sum_halves_d##D(const bf16* x, bf16* y, u64 rows, u32 t_len, u32 heads, u32 limit) {              \
        rla_sum_halves<D>(x, y, rows, t_len, heads, limit);                                                     \
    }                                                                                                           \
    WALKS(D)

INSTANTIATE(64)
INSTANTIATE(128)
