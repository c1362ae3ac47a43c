// rla.cu: RAttention's residual linear attention on bf16 [B, T, H, D] q and [B, T, Hkv, D] k, v
// (q head h reads kv head h / (H / Hkv)): o_t = phi(q_t) · sum_{s <= t - W} phi(k_s)^T v_s with
// phi(x) = [softmax(x), softmax(-x)] over the head dim (F = 2D features).
//
// Keys and values shifted W steps later (k'_t = k_{t-W}, zero for t < W) make it plain causal
// linear attention of q against k', run in chunks of CH = 64 steps as in fla's chunk_linear_attn:
//
// - rla_phi: phi of every row of q and of k, once, into bf16 [B, T, heads, F] (a warp per row:
//   max, min and both exponential sums by shuffles). Every later kernel loads feature tiles as
//   it loads v (the shift and the sequence's ends give zero rows). Each used to run the
//   softmaxes itself, and ncu found the forward's two kernels issue-bound on that ALU work
//   (31% and 44% of the ALU's peak against 5.5% and 18% of the tensor pipe's).
// - rla_fwd: the output in one walk over the chunks, the state carried in registers (below).
// - rla_scan, for the backward: the state at every chunk boundary, h_c = sum over chunks before
//   c of phi(k')^T v' ([F, D] per kv head), by a sequential walk over the chunks (as fla's
//   chunk_fwd_h); a block owns 64 features and 64 columns of v, so B·Hkv·(F/64)·(D/64) small
//   blocks walk in parallel (many an SM, to hide each step's latency), the state tile in
//   registers (f32), each boundary stored as bf16 [B, Hkv, NC, F, D], the next step's tiles
//   fetched during the current one. Walked backwards over phi(q) and do, summed over a kv
//   head's q heads, the same kernel gives the state gradients dh_c = sum over chunks after c of
//   phi(q)^T do.
// - rla_bwd_dq: a block per (chunk, q head, batch): dphi(q) = do h_c^T + mask(do v'^T) phi(k').
// - rla_bwd_dkdv: a block per (chunk, kv head, batch), over the group's q heads:
//   dphi(k') = v' dh_c^T + sum_j mask(do_j v'^T)^T phi(q_j), dv' = phi(k') dh_c + sum_j
//   mask(phi(q_j) phi(k')^T)^T do_j, written back W steps earlier.
//
// The feature gradients go back through phi in the dq and dk/dv kernels, from the feature tiles
// they loaded. These kernels and rla_fwd's steps run eight warps: warp w takes rows 16 (w % 4)
// of the chunk and half w / 4 of the block's output columns (for dq and dk that half is one
// sign of the features, whose softmax backward needs only its own row dot; the two halves meet
// in shared memory). Products run on mma.sync m16n8k16 with f32 accumulation (mma.cuh).
//
// swax-cuda's mma.cuh (cuda/kernels/) is prepended by cuda.rs beside this file. Equations and
// layouts: mod.rs beside this file; the CPU kernel cpu.rs beside it is the reference these
// kernels are tested against.

#define CH 64
#define THREADS 256
#define SCAN_THREADS 128
#define SCAN_STAGES 3  // the scans' ring of tiles in flight

// phi of n rows of D (x, contiguous) into n rows of 2D (f): a warp per row, lane l holding
// elements D/32 l .. +D/32 - 1 of it. Rows are phi(x) in full; the callers' tile loads give the
// zeros of rows outside the sequence or before the shift.
template <int D>
__device__ void rla_phi(const bf16* __restrict__ x, bf16* __restrict__ f, u64 n) {
    constexpr int P = D / 64, E = 2 * P;  // u32 pairs and elements per lane
    const int lane = threadIdx.x & 31;
    const u64 row = (u64)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (row >= n) return;
    const u32* src = reinterpret_cast<const u32*>(x + row * D + lane * E);
    float xv[E], p[E], m[E];
#pragma unroll
    for (int j = 0; j < P; ++j) {
        const u32 w = src[j];
        xv[2 * j] = __uint_as_float(w << 16);
        xv[2 * j + 1] = __uint_as_float(w & 0xffff0000u);
    }
    float mx = xv[0], mn = xv[0];
#pragma unroll
    for (int e = 1; e < E; ++e) {
        mx = fmaxf(mx, xv[e]);
        mn = fminf(mn, xv[e]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mx = fmaxf(mx, shfl_xor(mx, o));
        mn = fminf(mn, shfl_xor(mn, o));
    }
    float sp = 0.0f, sm = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
        p[e] = fast_exp2((xv[e] - mx) * LOG2E);
        m[e] = fast_exp2((mn - xv[e]) * LOG2E);
        sp += p[e];
        sm += m[e];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sp += shfl_xor(sp, o);
        sm += shfl_xor(sm, o);
    }
    const float ip = 1.0f / sp, im = 1.0f / sm;
    u32* dst = reinterpret_cast<u32*>(f + row * 2 * D + lane * E);
#pragma unroll
    for (int j = 0; j < P; ++j) {
        dst[j] = bf16x2_bits(p[2 * j] * ip, p[2 * j + 1] * ip);
        dst[D / 2 + j] = bf16x2_bits(m[2 * j] * im, m[2 * j + 1] * im);
    }
}

// The states at every chunk boundary (REV false) or their gradients (REV true); see the top.
// Block (blockIdx.x = feature tile * D/64 + column tile, kv head, batch), 4 warps, warp w owning
// feature rows 64 ft + 16 w .. +15 and the block's 64 columns. x holds feature rows [B, T,
// heads, 2D], y [B, T, heads, D]; the block sums the heads kv head * group .. + group - 1 (one
// head for the states, a group of q heads for their gradients), the rows of x and y at time
// t' read at t' - shift. out [B, Hkv, NC, 2D, D]: the value before chunk c (REV: after it).
template <int D, bool REV>
__device__ void rla_scan(const bf16* __restrict__ x, const bf16* __restrict__ y, bf16* __restrict__ out, u32 t_len,
                         u32 heads, u32 group, u32 shift) {
    constexpr int F = 2 * D, TILE = CH * 64;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sx = reinterpret_cast<bf16*>(smem);  // [SCAN_STAGES][CH][64] of x: phi^T read k-major
    bf16* sy = sx + SCAN_STAGES * TILE;         // [SCAN_STAGES][CH][64] of y

    const int T = (int)t_len, nc = (T + CH - 1) / CH, sh = (int)shift;
    const int ft = blockIdx.x / (D / 64), vt = blockIdx.x % (D / 64);
    const int g = blockIdx.y, b = blockIdx.z, hkv = gridDim.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    bf16* og = out + ((u64)b * hkv + g) * nc * (F * D) + (u64)(ft * 64 + warp * 16 + gq) * D + vt * 64 + 2 * tq;

    // Step i reads head j = i % group of chunk i / group (walked backwards with REV), its tiles
    // fetched into buffer i % SCAN_STAGES SCAN_STAGES - 1 steps before. Every step commits one
    // group of copies, empty past the end, so that the wait below always means step i's.
    const int steps = nc * (int)group;
    auto chunk_of = [&](int i) { return REV ? nc - 1 - i / (int)group : i / (int)group; };
    auto fetch = [&](int i) {
        if (i < steps) {
            const u64 row = (u64)b * T * heads + g * group + i % (int)group;
            const int c0 = chunk_of(i) * CH, at = (i % SCAN_STAGES) * TILE;
            load_tile<64, CH, SCAN_THREADS, true>(sx + at, x + row * F + ft * 64, (u64)heads * F, c0, T, sh);
            load_tile<64, CH, SCAN_THREADS, true>(sy + at, y + row * D + vt * 64, (u64)heads * D, c0, T, sh);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < SCAN_STAGES - 1; ++i) fetch(i);

    float st[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.0f;

    for (int i = 0; i < steps; ++i) {
        if (i % (int)group == 0) {  // the value before the chunk (REV: after it)
            bf16* oc = og + (u64)chunk_of(i) * (F * D);
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                *reinterpret_cast<u32*>(oc + n * 8) = bf16x2_bits(st[n][0], st[n][1]);
                *reinterpret_cast<u32*>(oc + 8 * D + n * 8) = bf16x2_bits(st[n][2], st[n][3]);
            }
        }
        cp_async_wait<SCAN_STAGES - 2>();
        __syncthreads();  // step i's tiles landed; step i - 1's reads of the buffer refilled next are done
        fetch(i + SCAN_STAGES - 1);
        const bf16* x_s = sx + (i % SCAN_STAGES) * TILE;
        const bf16* y_s = sy + (i % SCAN_STAGES) * TILE;
#pragma unroll
        for (int kk = 0; kk < CH / 16; ++kk) {
            u32 a[4];
            ldsm_x4<true>(a, lane_ptr<64, false>(x_s, kk * 16, warp * 16));
#pragma unroll
            for (int nn = 0; nn < 4; ++nn) {
                u32 f[4];
                b_frag<64, false>(f, y_s, kk, nn);
                mma(st[2 * nn], a, f[0], f[1]);
                mma(st[2 * nn + 1], a, f[2], f[3]);
            }
        }
    }
}

// Zeroes rows c0 .. c0 + CH - 1 (those below T) of head `head` of a [B, T, heads, D] bf16 tensor.
template <int D>
__device__ __forceinline__ void zero_rows(bf16* __restrict__ o, int T, u32 heads, int b, int head, int c0) {
    for (int i = threadIdx.x; i < CH * D / 8; i += THREADS) {
        const int r = i / (D / 8), t = c0 + r;
        if (t < T) reinterpret_cast<uint4*>(o + (((u64)b * T + t) * heads + head) * D)[i % (D / 8)] = make_uint4(0, 0, 0, 0);
    }
}

// The chunk kernels' masked 16 x 64 products (a warp's rows against the chunk's 64 steps) are
// needed whole by both warps of a pair, w and w ^ 4, which take the two halves of the output
// columns: each makes 32 of the 64 columns, stores them as bf16 into a shared [CH][64] tile, and
// after pair_sync both read the rows whole. (Each warp used to make all 64 columns itself.)
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

// The forward in one walk over the chunks: a block per (64 columns of o, q head, batch) carries
// those columns of its kv head's state through the sequence in registers (f32; warp w owns
// feature rows F/8 w .. +F/8 - 1) and each chunk's output comes from the state before it, so
// the states never go to global memory (fla's fused_chunk). Each step: the chunk's tiles landed
// (fetched during the step before), the masked phi(q) phi(k')^T made once (store_half), o =
// P v' + phi(q) h_c from the state's bf16 copy in shared memory, then h_{c+1} = h_c + phi(k')^T v'
// in registers, copied to shared memory for the next step once every warp has read h_c.
template <int D>
__device__ void rla_fwd(const bf16* __restrict__ fq, const bf16* __restrict__ fk, const bf16* __restrict__ v,
                        bf16* __restrict__ o, u32 t_len, u32 heads, u32 kv_heads, u32 shift) {
    constexpr int F = 2 * D, MT = F / 128;  // m-tiles of state rows a warp
    constexpr int STAGE = 2 * CH * F + CH * 64;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* stages = reinterpret_cast<bf16*>(smem);  // [2] x (phi(q) [CH][F], phi(k') [CH][F], v' [CH][64])
    bf16* sh = stages + 2 * STAGE;                   // h_c [F][64]
    bf16* sp = sh + F * 64;                          // mask(phi(q) phi(k')^T) [CH][64]

    const int T = (int)t_len, nc = (T + CH - 1) / CH, sf = (int)shift;
    const int cb = blockIdx.x * 64, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (heads / kv_heads);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int r0 = (warp & 3) * 16, half = warp >> 2, n0 = half * 32;
    const u64 qrow = (u64)b * T * heads + h, krow = (u64)b * T * kv_heads + g;

    // Chunks that end before the first key have no output but zeros (all D columns, written by
    // the head's first column block).
    const int first = sf / CH;
    if (blockIdx.x == 0)
        for (int c = 0; c < first; ++c) zero_rows<D>(o, T, heads, b, h, c * CH);
    auto fetch = [&](int c) {
        if (c < nc) {
            bf16* at = stages + (c & 1) * STAGE;
            load_tile<F, CH, THREADS, false>(at, fq + qrow * F, (u64)heads * F, c * CH, T, 0);
            load_tile<F, CH, THREADS, true>(at + CH * F, fk + krow * F, (u64)kv_heads * F, c * CH, T, sf);
            load_tile<64, CH, THREADS, true>(at + 2 * CH * F, v + krow * D + cb, (u64)kv_heads * D, c * CH, T, sf);
        }
        cp_async_commit();
    };
    fetch(first);
    for (int i = threadIdx.x; i < F * 64 / 2; i += THREADS) reinterpret_cast<u32*>(sh)[i] = 0u;
    float st[MT][8][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) zero(st[m]);

    for (int c = first; c < nc; ++c) {
        cp_async_wait<0>();
        __syncthreads();  // chunk c's tiles and h_c are in; the last step's reads are done
        fetch(c + 1);
        const bf16* sq = stages + (c & 1) * STAGE;
        const bf16* sk = sq + CH * F;
        const bf16* sv = sk + CH * F;
        float acc[4][4];
        zero(acc);
        mma_smem_a<F / 16, 4, F, F>(acc, sq, r0, sk, n0);
        store_half<true>(acc, sp, r0, half);
        zero(acc);
        pair_sync();
        mma_smem_a<CH / 16, 4, 64, 64, false>(acc, sp, r0, sv, n0);
        mma_smem_a<F / 16, 4, F, 64, false>(acc, sq, r0, sh, n0);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int t = c * CH + r0 + gq + 8 * r;
            if (t >= T) continue;
            bf16* out = o + (qrow + (u64)t * heads) * D + cb + n0 + 2 * tq;
#pragma unroll
            for (int n = 0; n < 4; ++n)
                *reinterpret_cast<u32*>(out + n * 8) = bf16x2_bits(acc[n][2 * r], acc[n][2 * r + 1]);
        }
        // h_{c+1} = h_c + phi(k')^T v': phi(k') read k-major as the A operand.
#pragma unroll
        for (int kk = 0; kk < CH / 16; ++kk) {
            u32 a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m)
                ldsm_x4<true>(a[m], lane_ptr<F, false>(sk, kk * 16, warp * (F / 8) + 16 * m));
#pragma unroll
            for (int nn = 0; nn < 4; ++nn) {
                u32 f[4];
                b_frag<64, false>(f, sv, kk, nn);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma(st[m][2 * nn], a[m], f[0], f[1]);
                    mma(st[m][2 * nn + 1], a[m], f[2], f[3]);
                }
            }
        }
        __syncthreads();  // every warp has read h_c and the masked product
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<u32*>(sh + swz<64>(warp * (F / 8) + 16 * m + gq + 8 * r, n * 8 + 2 * tq)) =
                        bf16x2_bits(st[m][n][2 * r], st[m][n][2 * r + 1]);
    }
}

// The feature gradient g (a warp's 16 rows, D features of sign `half` held as mma accumulators)
// carried back through that half of phi: p (g - <p, g>) for sign 0, -n (g - <n, g>) for sign 1,
// with phi's values read from the [CH][2D] shared tile `ph`; written over g.
template <int D>
__device__ __forceinline__ void phi_backward(float (&gr)[D / 8][4], const bf16* ph, int r0, int half) {
    const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    float p[D / 8][4], dot[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const u32 w = *reinterpret_cast<const u32*>(ph + swz<2 * D>(r0 + gq + 8 * r, half * D + n * 8 + 2 * tq));
            p[n][2 * r] = __uint_as_float(w << 16);
            p[n][2 * r + 1] = __uint_as_float(w & 0xffff0000u);
            dot[r] += p[n][2 * r] * gr[n][2 * r] + p[n][2 * r + 1] * gr[n][2 * r + 1];
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        dot[r] += shfl_xor(dot[r], 1);
        dot[r] += shfl_xor(dot[r], 2);
    }
    const float sgn = half ? -1.0f : 1.0f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) gr[n][e] = sgn * p[n][e] * (gr[n][e] - dot[e >> 1]);
}

// Sums the two halves' phi_backward results and writes rows of a [B, T, heads, D] bf16 tensor:
// warps of half 1 leave theirs in `buf` (f32 [CH][D], shared memory nobody reads any more),
// warps of half 0 add and store row r0 + i of the chunk at time c0 + r0 + i - shift when that
// is in [0, T). Every thread of the block must call it.
template <int D>
__device__ __forceinline__ void sum_halves_store(const float (&gr)[D / 8][4], float* buf, int r0, int half,
                                                 bf16* __restrict__ dst, int T, u32 heads, int b, int head, int c0,
                                                 int shift) {
    const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    __syncthreads();  // `buf` is free
    if (half) {
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                *reinterpret_cast<float2*>(buf + (r0 + gq + 8 * r) * D + n * 8 + 2 * tq) =
                    make_float2(gr[n][2 * r], gr[n][2 * r + 1]);
    }
    __syncthreads();
    if (half) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = r0 + gq + 8 * r, t = c0 + row - shift;
        if (c0 + row < shift || t >= T) continue;
        bf16* out = dst + (((u64)b * T + t) * heads + head) * D + 2 * tq;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            const float2 o = *reinterpret_cast<const float2*>(buf + row * D + n * 8 + 2 * tq);
            *reinterpret_cast<u32*>(out + n * 8) = bf16x2_bits(gr[n][2 * r] + o.x, gr[n][2 * r + 1] + o.y);
        }
    }
}

template <int D>
__device__ void rla_bwd_dq(const bf16* __restrict__ fq, const bf16* __restrict__ fk, const bf16* __restrict__ v,
                           const bf16* __restrict__ dout, const bf16* __restrict__ states, bf16* __restrict__ dq,
                           u32 t_len, u32 heads, u32 kv_heads, u32 shift) {
    constexpr int F = 2 * D;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sq = reinterpret_cast<bf16*>(smem);  // phi(q) [CH][F]
    bf16* sk = sq + CH * F;                     // phi(k') [CH][F]
    bf16* sv = sk + CH * F;                     // v' [CH][D]
    bf16* sdo = sv + CH * D;                    // do [CH][D]
    bf16* sh = sdo + CH * D;                    // h_c [F][D], then the halves' sum (f32 [CH][D])
    bf16* sp = sh + F * D;                      // mask(do v'^T) [CH][64]

    const int T = (int)t_len, nc = (T + CH - 1) / CH, sf = (int)shift;
    const int c = blockIdx.x, c0 = c * CH, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (heads / kv_heads);
    if (c0 + CH <= sf) {
        zero_rows<D>(dq, T, heads, b, h, c0);
        return;
    }
    const u64 qrow = (u64)b * T * heads + h, krow = (u64)b * T * kv_heads + g;
    load_tile<D, CH, THREADS, true>(sv, v + krow * D, (u64)kv_heads * D, c0, T, sf);
    load_tile<D, CH, THREADS, false>(sdo, dout + qrow * D, (u64)heads * D, c0, T, 0);
    load_tile<D, F, THREADS, false>(sh, states + (((u64)b * kv_heads + g) * nc + c) * F * D, D, 0, F, 0);
    load_tile<F, CH, THREADS, false>(sq, fq + qrow * F, (u64)heads * F, c0, T, 0);
    load_tile<F, CH, THREADS, true>(sk, fk + krow * F, (u64)kv_heads * F, c0, T, sf);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    const int warp = threadIdx.x >> 5, half = warp >> 2, r0 = (warp & 3) * 16;
    {
        float ds[4][4];
        zero(ds);
        mma_smem_a<D / 16, 4, D, D>(ds, sdo, r0, sv, 32 * half);
        store_half<true>(ds, sp, r0, half);
    }
    float gr[D / 8][4];
    zero(gr);
    pair_sync();
    mma_smem_a<CH / 16, D / 8, 64, F, false>(gr, sp, r0, sk, half * D);
    mma_smem_a<D / 16, D / 8, D, D>(gr, sdo, r0, sh, half * D);
    phi_backward<D>(gr, sq, r0, half);
    sum_halves_store<D>(gr, reinterpret_cast<float*>(sh), r0, half, dq, T, heads, b, h, c0, 0);
}

template <int D>
__device__ void rla_bwd_dkdv(const bf16* __restrict__ fq, const bf16* __restrict__ fk, const bf16* __restrict__ v,
                             const bf16* __restrict__ dout, const bf16* __restrict__ dstates, bf16* __restrict__ dk,
                             bf16* __restrict__ dv, u32 t_len, u32 heads, u32 kv_heads, u32 shift) {
    constexpr int F = 2 * D, NV = D / 16;  // n8-tiles of a half row of dv
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sk = reinterpret_cast<bf16*>(smem);  // phi(k') [CH][F]
    bf16* sv = sk + CH * F;                     // v' [CH][D]
    bf16* sds = sv + CH * D;                    // dh_c [F][D], then the halves' sum (f32 [CH][D])
    bf16* sq = sds + F * D;                     // phi(q_j) [CH][F]
    bf16* sdo = sq + CH * F;                    // do_j [CH][D]
    bf16* sa = sdo + CH * D;                    // mask(phi(k') phi(q_j)^T) [CH][64]
    bf16* sda = sa + CH * 64;                   // mask(v' do_j^T) [CH][64]

    const int T = (int)t_len, nc = (T + CH - 1) / CH, sf = (int)shift;
    const int c = blockIdx.x, c0 = c * CH, g = blockIdx.y, b = blockIdx.z;
    const int group = heads / kv_heads;
    if (c0 + CH <= sf) return;  // no key of the chunk exists; dk, dv come zeroed
    const u64 krs = (u64)kv_heads * D, krow = (u64)b * T * kv_heads + g;
    load_tile<D, CH, THREADS, true>(sv, v + krow * D, krs, c0, T, sf);
    load_tile<D, F, THREADS, false>(sds, dstates + (((u64)b * kv_heads + g) * nc + c) * F * D, D, 0, F, 0);
    load_tile<F, CH, THREADS, true>(sk, fk + krow * F, (u64)kv_heads * F, c0, T, sf);
    cp_async_commit();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int half = warp >> 2, r0 = (warp & 3) * 16;
    float dva[NV][4], gr[D / 8][4];
    zero(dva);
    zero(gr);

    // group >= 1, so the loop's first wait also lands v', dh_c and phi(k').
    for (int j = 0; j < group; ++j) {
        const u64 qrow = (u64)b * T * heads + g * group + j;
        if (j > 0) __syncthreads();  // the last head's reads of sq, sdo are done
        load_tile<D, CH, THREADS, false>(sdo, dout + qrow * D, (u64)heads * D, c0, T, 0);
        load_tile<F, CH, THREADS, false>(sq, fq + qrow * F, (u64)heads * F, c0, T, 0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        // Keys along rows (key row i sees query columns >= i): a^T = phi(k') phi(q)^T and
        // da^T = v' do^T, then dv' += mask(a^T) do and dphi(k') += mask(da^T) phi(q).
        {
            float s[4][4];
            zero(s);
            mma_smem_a<F / 16, 4, F, F>(s, sk, r0, sq, 32 * half);
            store_half<false>(s, sa, r0, half);
            zero(s);
            mma_smem_a<D / 16, 4, D, D>(s, sv, r0, sdo, 32 * half);
            store_half<false>(s, sda, r0, half);
        }
        pair_sync();
        mma_smem_a<CH / 16, NV, 64, D, false>(dva, sa, r0, sdo, half * (D / 2));
        mma_smem_a<CH / 16, D / 8, 64, F, false>(gr, sda, r0, sq, half * D);
    }
    // What later chunks read through the state: dphi(k') += v' dh^T, dv' += phi(k') dh.
    mma_smem_a<D / 16, D / 8, D, D>(gr, sv, r0, sds, half * D);
    mma_smem_a<F / 16, NV, F, D, false>(dva, sk, r0, sds, half * (D / 2));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = r0 + gq + 8 * r, t = c0 + row - sf;
        if (c0 + row < sf || t >= T) continue;
        bf16* out = dv + ((u64)b * T + t) * krs + (u64)g * D + half * (D / 2) + 2 * tq;
#pragma unroll
        for (int n = 0; n < NV; ++n) *reinterpret_cast<u32*>(out + n * 8) = bf16x2_bits(dva[n][2 * r], dva[n][2 * r + 1]);
    }
    phi_backward<D>(gr, sk, r0, half);
    sum_halves_store<D>(gr, reinterpret_cast<float*>(sds), r0, half, dk, T, kv_heads, b, g, c0, sf);
}

#define INSTANTIATE(D)                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_phi_d##D(const bf16* x, bf16* f, u64 rows) {     \
        rla_phi<D>(x, f, rows);                                                                                 \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) rla_scan_fwd_d##D(                              \
        const bf16* x, const bf16* y, bf16* out, u32 t_len, u32 heads, u32 group, u32 shift) {                 \
        rla_scan<D, false>(x, y, out, t_len, heads, group, shift);                                              \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) rla_scan_bwd_d##D(                              \
        const bf16* x, const bf16* y, bf16* out, u32 t_len, u32 heads, u32 group, u32 shift) {                 \
        rla_scan<D, true>(x, y, out, t_len, heads, group, shift);                                               \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_fwd_d##D(                                        \
        const bf16* fq, const bf16* fk, const bf16* v, bf16* o, u32 t_len, u32 heads, u32 kv_heads, u32 shift) { \
        rla_fwd<D>(fq, fk, v, o, t_len, heads, kv_heads, shift);                                                \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_bwd_dq_d##D(                                     \
        const bf16* fq, const bf16* fk, const bf16* v, const bf16* dout, const bf16* states, bf16* dq,         \
        u32 t_len, u32 heads, u32 kv_heads, u32 shift) {                                                        \
        rla_bwd_dq<D>(fq, fk, v, dout, states, dq, t_len, heads, kv_heads, shift);                              \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rla_bwd_dkdv_d##D(                                   \
        const bf16* fq, const bf16* fk, const bf16* v, const bf16* dout, const bf16* dstates, bf16* dk,        \
        bf16* dv, u32 t_len, u32 heads, u32 kv_heads, u32 shift) {                                              \
        rla_bwd_dkdv<D>(fq, fk, v, dout, dstates, dk, dv, t_len, heads, kv_heads, shift);                       \
    }

INSTANTIATE(64)
INSTANTIATE(128)
