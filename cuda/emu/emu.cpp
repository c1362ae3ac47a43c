// emu.cpp: emu.h's fiber scheduler, warp collectives, cp.async queues and launch loop.
#include "emu.h"

#include <deque>

EmuDim threadIdx, blockIdx, blockDim, gridDim;
unsigned char* emu_smem = nullptr;
static size_t emu_smem_size = 0;

namespace {

struct Copy {
    void* dst;
    const void* src;
    bool valid;
};

// A bulk reduction: dst[i] += src[i] over n floats.
struct Reduce {
    float* dst;
    const float* src;
    unsigned n;
};

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    EmuDim tid;
    int lin = 0;
    bool done = false;
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> committed;
    std::vector<Reduce> bulk_open;
    std::deque<std::vector<Reduce>> bulk_committed;
};

struct WarpState {
    int arrived = 0, gen = 0, kind = -1;
    EmuLane lanes[32];
};

std::vector<Fiber> fibers;
int cur = 0, live = 0;
ucontext_t sched_ctx;
std::function<void()>* kernel_fn = nullptr;
unsigned long long progress = 0;
int bar_arrived = 0, bar_gen = 0;
struct Named {
    int arrived = 0, gen = 0;
};
Named named[16];
WarpState warps[32];

void land(std::vector<Copy>& g) {
    for (auto& c : g) {
        if (c.valid)
            memcpy(c.dst, c.src, 16);
        else
            memset(c.dst, 0, 16);
    }
    g.clear();
}

void fiber_entry() {
    (*kernel_fn)();
    Fiber& f = fibers[cur];
    if (!f.bulk_open.empty() || !f.bulk_committed.empty()) {
        fprintf(stderr, "emu: thread %d exits with bulk reductions not waited for\n", f.lin);
        abort();
    }
    f.done = true;
    --live;
    ++progress;
    if (bar_arrived > 0 && bar_arrived == live) {
        bar_arrived = 0;
        ++bar_gen;
    }
    swapcontext(&f.ctx, &sched_ctx);
}

}  // namespace

void emu_yield() { swapcontext(&fibers[cur].ctx, &sched_ctx); }

void __syncthreads() {
    ++progress;
    const int g = bar_gen;
    if (++bar_arrived == live) {
        bar_arrived = 0;
        ++bar_gen;
    } else {
        while (bar_gen == g) emu_yield();
    }
}

static void op_none(EmuLane*, int) {}
void __syncwarp(unsigned) {
    unsigned z = 0;
    emu_collective(1, &z, 1, &z, 1, op_none, 0);
}

void emu_collective(int kind, const unsigned* in, int nin, unsigned* out, int nout, void (*op)(EmuLane*, int),
                    int arg) {
    const int lin = fibers[cur].lin, lane = lin & 31;
    WarpState& ws = warps[lin >> 5];
    if (ws.arrived == 0)
        ws.kind = kind;
    else if (ws.kind != kind) {
        fprintf(stderr, "emu: warp %d, lane %d reached collective %d while others wait at %d\n", lin >> 5, lane, kind,
                ws.kind);
        abort();
    }
    memcpy(ws.lanes[lane].in, in, nin * 4);
    ++progress;
    const int g = ws.gen;
    if (++ws.arrived == 32) {
        op(ws.lanes, arg);
        ws.arrived = 0;
        ++ws.gen;
    } else {
        while (ws.gen == g) emu_yield();
    }
    memcpy(out, ws.lanes[lane].out, nout * 4);
}

static void op_xor(EmuLane* l, int) {
    for (int i = 0; i < 32; ++i) l[i].out[0] = l[i ^ (l[i].in[1] & 31)].in[0];
}
static void op_up(EmuLane* l, int) {
    for (int i = 0; i < 32; ++i) {
        const int o = (int)l[i].in[1];
        l[i].out[0] = i >= o ? l[i - o].in[0] : l[i].in[0];
    }
}
static void op_idx(EmuLane* l, int) {
    for (int i = 0; i < 32; ++i) l[i].out[0] = l[l[i].in[1] & 31].in[0];
}
static unsigned shfl(int kind, void (*op)(EmuLane*, int), unsigned v, int o) {
    unsigned in[2] = {v, (unsigned)o}, out;
    emu_collective(kind, in, 2, &out, 1, op, 0);
    return out;
}
float __shfl_xor_sync(unsigned, float v, int o) { return __uint_as_float(shfl(2, op_xor, __float_as_uint(v), o)); }
unsigned __shfl_xor_sync(unsigned, unsigned v, int o) { return shfl(2, op_xor, v, o); }
int __shfl_xor_sync(unsigned, int v, int o) { return (int)shfl(2, op_xor, (unsigned)v, o); }
float __shfl_up_sync(unsigned, float v, int o) { return __uint_as_float(shfl(3, op_up, __float_as_uint(v), o)); }
float __shfl_sync(unsigned, float v, int s) { return __uint_as_float(shfl(4, op_idx, __float_as_uint(v), s)); }
unsigned __shfl_sync(unsigned, unsigned v, int s) { return shfl(4, op_idx, v, s); }
int __shfl_sync(unsigned, int v, int s) { return (int)shfl(4, op_idx, (unsigned)v, s); }

static void check_smem(const void* p, size_t n, const char* what) {
    const unsigned char* c = (const unsigned char*)p;
    if (c < emu_smem || c + n > emu_smem + emu_smem_size) {
        fprintf(stderr, "emu: %s outside the block's %zu bytes of shared memory (offset %td)\n", what, emu_smem_size,
                c - emu_smem);
        abort();
    }
}

void cp_async16(void* dst, const void* src, bool valid) {
    check_smem(dst, 16, "cp.async destination");
    if ((uintptr_t)dst % 16 || (valid && (uintptr_t)src % 16)) {
        fprintf(stderr, "emu: cp.async of 16 bytes not 16-byte aligned\n");
        abort();
    }
    fibers[cur].open.push_back({dst, src, valid});
}
void cp_async_commit() {
    Fiber& f = fibers[cur];
    f.committed.push_back(std::move(f.open));
    f.open.clear();
}
void emu_cp_async_wait(int n) {
    Fiber& f = fibers[cur];
    while ((int)f.committed.size() > n) {
        land(f.committed.front());
        f.committed.pop_front();
    }
}

static void op_ldsm(EmuLane* l, int trans) {
    for (int i = 0; i < 32; ++i) {
        for (int m = 0; m < 4; ++m) {
            if (!trans) {
                const unsigned char* row = emu_smem + l[8 * m + i / 4].in[0];
                memcpy(&l[i].out[m], row + 4 * (i % 4), 4);
            } else {
                const unsigned char* r0 = emu_smem + l[8 * m + 2 * (i % 4)].in[0];
                const unsigned char* r1 = emu_smem + l[8 * m + 2 * (i % 4) + 1].in[0];
                emu_u16 lo, hi;
                memcpy(&lo, r0 + 2 * (i / 4), 2);
                memcpy(&hi, r1 + 2 * (i / 4), 2);
                l[i].out[m] = (unsigned)lo | ((unsigned)hi << 16);
            }
        }
    }
}
void emu_ldsm_x4(unsigned (&r)[4], const void* p, bool trans) {
    check_smem(p, 16, "ldmatrix row");
    if ((uintptr_t)p % 16) {
        fprintf(stderr, "emu: ldmatrix row address not 16-byte aligned (offset %td)\n",
                (const unsigned char*)p - emu_smem);
        abort();
    }
    unsigned in = (unsigned)((const unsigned char*)p - emu_smem);
    emu_collective(trans ? 6 : 5, &in, 1, r, 4, op_ldsm, trans);
}

static float bf(unsigned bits16) { return __uint_as_float((bits16 & 0xffffu) << 16); }
static float tf(unsigned bits) { return __uint_as_float(bits & 0xffffe000u); }

// D = A B + C for a warp's m16n8kK product whose A [16][K] and B [K][8] were gathered from the
// lanes: C from each lane's in[6..9], D to its out[0..3] (mma's C layout, the same at every K).
template <int K> static void mma_finish(EmuLane* l, const float (&A)[16][K], const float (&B)[K][8]) {
    float C[16][8];
    for (int i = 0; i < 32; ++i) {
        const int g = i / 4, q = i % 4;
        C[g][2 * q] = __uint_as_float(l[i].in[6]);
        C[g][2 * q + 1] = __uint_as_float(l[i].in[7]);
        C[g + 8][2 * q] = __uint_as_float(l[i].in[8]);
        C[g + 8][2 * q + 1] = __uint_as_float(l[i].in[9]);
    }
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 8; ++c) {
            float s = 0.0f;
            for (int k = 0; k < K; ++k) s = fmaf(A[r][k], B[k][c], s);
            C[r][c] += s;
        }
    for (int i = 0; i < 32; ++i) {
        const int g = i / 4, q = i % 4;
        l[i].out[0] = __float_as_uint(C[g][2 * q]);
        l[i].out[1] = __float_as_uint(C[g][2 * q + 1]);
        l[i].out[2] = __float_as_uint(C[g + 8][2 * q]);
        l[i].out[3] = __float_as_uint(C[g + 8][2 * q + 1]);
    }
}

// m16n8k16 on bf16 pairs: A's registers (g, 2q..), (g + 8, 2q..), (g, 2q + 8..), (g + 8, 2q + 8..);
// B's (k 2q.., n g), (k 2q + 8.., n g).
static void op_mma(EmuLane* l, int) {
    float A[16][16], B[16][8];
    for (int i = 0; i < 32; ++i) {
        const int g = i / 4, q = i % 4;
        const unsigned* a = l[i].in;
        A[g][2 * q] = bf(a[0]);
        A[g][2 * q + 1] = bf(a[0] >> 16);
        A[g + 8][2 * q] = bf(a[1]);
        A[g + 8][2 * q + 1] = bf(a[1] >> 16);
        A[g][2 * q + 8] = bf(a[2]);
        A[g][2 * q + 9] = bf(a[2] >> 16);
        A[g + 8][2 * q + 8] = bf(a[3]);
        A[g + 8][2 * q + 9] = bf(a[3] >> 16);
        B[2 * q][g] = bf(a[4]);
        B[2 * q + 1][g] = bf(a[4] >> 16);
        B[2 * q + 8][g] = bf(a[5]);
        B[2 * q + 9][g] = bf(a[5] >> 16);
    }
    mma_finish(l, A, B);
}

// m16n8k8 on tf32: A's registers (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4); B's (k q, n g),
// (k q + 4, n g).
static void op_mma_tf32(EmuLane* l, int) {
    float A[16][8], B[8][8];
    for (int i = 0; i < 32; ++i) {
        const int g = i / 4, q = i % 4;
        const unsigned* a = l[i].in;
        A[g][q] = tf(a[0]);
        A[g + 8][q] = tf(a[1]);
        A[g][q + 4] = tf(a[2]);
        A[g + 8][q + 4] = tf(a[3]);
        B[q][g] = tf(a[4]);
        B[q + 4][g] = tf(a[5]);
    }
    mma_finish(l, A, B);
}

static void run_mma(int kind, void (*op)(EmuLane*, int), float (&c)[4], const unsigned (&a)[4], unsigned b0,
                    unsigned b1) {
    unsigned in[10] = {a[0], a[1], a[2], a[3], b0, b1, __float_as_uint(c[0]), __float_as_uint(c[1]),
                       __float_as_uint(c[2]), __float_as_uint(c[3])};
    unsigned out[4];
    emu_collective(kind, in, 10, out, 4, op, 0);
    for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(out[i]);
}
void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { run_mma(7, op_mma, c, a, b0, b1); }
void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    run_mma(8, op_mma_tf32, c, a, b0, b1);
}

static void op_any(EmuLane* l, int) {
    unsigned any = 0;
    for (int i = 0; i < 32; ++i) any |= l[i].in[0];
    for (int i = 0; i < 32; ++i) l[i].out[0] = any;
}
bool __any_sync(unsigned, bool p) {
    unsigned in = p, out;
    emu_collective(9, &in, 1, &out, 1, op_any, 0);
    return out != 0;
}
static void op_match_any(EmuLane* l, int) {
    for (int i = 0; i < 32; ++i) {
        unsigned peers = 0;
        for (int j = 0; j < 32; ++j) peers |= (unsigned)(l[j].in[0] == l[i].in[0]) << j;
        l[i].out[0] = peers;
    }
}
unsigned __match_any_sync(unsigned, unsigned v) {
    unsigned out;
    emu_collective(10, &v, 1, &out, 1, op_match_any, 0);
    return out;
}

namespace {
struct WarpgroupState {
    int arrived = 0, gen = 0;
    float* d[128];
    unsigned a[128][4];
};
WarpgroupState warpgroups[8];

// Element (mn, k) of a wgmma operand in shared memory, through its descriptor: 128-byte
// swizzle, K-major (rows mn, 8-row groups SBO apart, k along the row) or MN-major (rows k, 8-row
// groups SBO apart, mn along the row in 64-element blocks LBO apart). The swizzle XORs an
// address's 16-byte chunk (bits 4-6) with its 128-byte row (bits 7-9).
float operand(unsigned long long desc, int mn, int k, bool mn_major) {
    if ((desc >> 62) != 1) {
        fprintf(stderr, "emu: wgmma descriptor without 128-byte swizzling\n");
        abort();
    }
    const unsigned start = (unsigned)(desc & 0x3FFF) << 4, lbo = (unsigned)((desc >> 16) & 0x3FFF) << 4,
                   sbo = (unsigned)((desc >> 32) & 0x3FFF) << 4;
    unsigned at = mn_major ? start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (mn % 64) * 2
                           : start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2;
    at ^= ((at >> 7) & 7) << 4;
    check_smem(emu_smem + at, 2, "wgmma operand");
    emu_u16 bits;
    memcpy(&bits, emu_smem + at, 2);
    return bf(bits);
}
}  // namespace

void emu_wgmma(float* d, int n, const unsigned* a, unsigned long long da, int ta, unsigned long long db, int tb,
               bool add) {
    const int lin = fibers[cur].lin, t = lin & 127;
    WarpgroupState& s = warpgroups[lin >> 7];
    s.d[t] = d;
    if (a) memcpy(s.a[t], a, 16);
    ++progress;
    const int g = s.gen;
    if (++s.arrived < 128) {
        while (s.gen == g) emu_yield();
        return;
    }
    // A (64 x 16): a thread's register fragment is the mma.sync A layout of its warp's 16 rows.
    float A[64][16], B[16][128];
    for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k) {
            if (a) {
                const int r = m % 16, lane = (r % 8) * 4 + (k % 8) / 2;
                A[m][k] = bf(s.a[(m / 16) * 32 + lane][r / 8 + 2 * (k / 8)] >> (16 * (k % 2)));
            } else {
                A[m][k] = operand(da, m, k, ta != 0);
            }
        }
    for (int k = 0; k < 16; ++k)
        for (int c = 0; c < n; ++c) B[k][c] = operand(db, c, k, tb != 0);
    for (int i = 0; i < 128; ++i) {
        const int w = i / 32, gq = (i % 32) / 4, tq = i % 4;
        for (int j = 0; j < n / 8; ++j)
            for (int e = 0; e < 4; ++e) {
                const int row = 16 * w + gq + 8 * (e / 2), col = 8 * j + 2 * tq + e % 2;
                float sum = 0.0f;
                for (int k = 0; k < 16; ++k) sum = fmaf(A[row][k], B[k][col], sum);
                s.d[i][4 * j + e] = add ? s.d[i][4 * j + e] + sum : sum;
            }
    }
    s.arrived = 0;
    ++s.gen;
}

// An mbarrier's 8 bytes: the arrivals a phase needs, those still missing, the transaction bytes
// still expected, and the phase.
namespace {
struct Mbar {
    unsigned short count, missing;
    int tx : 31;
    unsigned phase : 1;
};
static_assert(sizeof(Mbar) == 8, "an mbarrier is 8 bytes");
Mbar& mbar(unsigned long long* bar) {
    check_smem(bar, 8, "mbarrier");
    return *reinterpret_cast<Mbar*>(bar);
}
void complete_if_done(Mbar& b) {
    if (b.missing == 0 && b.tx == 0) {
        b.phase ^= 1;
        b.missing = b.count;
    }
}
}  // namespace

void mbar_init(unsigned long long* bar, unsigned count) {
    Mbar& b = mbar(bar);
    b.count = b.missing = (unsigned short)count;
    b.tx = 0;
    b.phase = 0;
}
void mbar_arrive(unsigned long long* bar) {
    Mbar& b = mbar(bar);
    --b.missing;
    complete_if_done(b);
    ++progress;
}
void mbar_expect(unsigned long long* bar, unsigned bytes) {
    mbar(bar).tx += (int)bytes;
    mbar_arrive(bar);
}
// TMA copies issued and not yet landed: each lands when a thread first waits on its barrier
// (the latest a GPU may land it), so a read of the buffer before that wait reads what was there.
namespace {
struct TmaCopy {
    unsigned long long* bar;
    std::function<void()> land;
};
std::vector<TmaCopy> tma_pending;
void land_copies(unsigned long long* bar) {
    for (size_t i = 0; i < tma_pending.size();) {
        if (tma_pending[i].bar == bar) {
            const std::function<void()> land = std::move(tma_pending[i].land);
            tma_pending.erase(tma_pending.begin() + (long)i);
            land();
        } else {
            ++i;
        }
    }
}
}  // namespace

void mbar_wait(unsigned long long* bar, unsigned parity) {
    land_copies(bar);
    while (mbar(bar).phase == (parity & 1)) {
        emu_yield();
        land_copies(bar);
    }
}

void tma_load_4d(bf16* dst, const TensorMap& map, int c0, int c1, int c2, int c3, unsigned long long* bar) {
    const unsigned long long* w = reinterpret_cast<const unsigned long long*>(&map);
    const unsigned char* base = reinterpret_cast<const unsigned char*>(w[0]);
    unsigned long long dims[4], box[4];
    memcpy(dims, w + 1, sizeof dims);
    memcpy(box, w + 5, sizeof box);
    const long long at[4] = {c0, c1, c2, c3};
    unsigned char* out = reinterpret_cast<unsigned char*>(dst);
    if (box[0] * 2 != 128 || (out - emu_smem) % 1024) {
        fprintf(stderr, "emu: a TMA box of 128-byte rows into 1024-byte aligned shared memory expected\n");
        abort();
    }
    const unsigned bytes = (unsigned)(box[0] * box[1] * box[2] * box[3] * 2);
    check_smem(out, bytes, "TMA destination");
    // The box's rows (its dimensions 1 to 3) in order, each 128 bytes whose 16-byte chunks are
    // swizzled by the row.
    const unsigned rows = (unsigned)(box[1] * box[2] * box[3]);
    tma_pending.push_back({bar, [=] {
                               for (unsigned row = 0; row < rows; ++row) {
                                   const unsigned long long x1 = at[1] + row % box[1],
                                                            x2 = at[2] + row / box[1] % box[2],
                                                            x3 = at[3] + row / (box[1] * box[2]);
                                   for (unsigned i0 = 0; i0 < box[0]; ++i0) {
                                       const unsigned long long x0 = at[0] + i0;
                                       emu_u16 v = 0;  // past the tensor (negative coordinates wrap past it too)
                                       if (x0 < dims[0] && x1 < dims[1] && x2 < dims[2] && x3 < dims[3])
                                           memcpy(&v, base + 2 * (((x3 * dims[2] + x2) * dims[1] + x1) * dims[0] + x0),
                                                  2);
                                       memcpy(out + ((row * 128 + i0 * 2) ^ ((row & 7) << 4)), &v, 2);
                                   }
                               }
                               Mbar& b = mbar(bar);
                               b.tx -= (int)bytes;
                               complete_if_done(b);
                           }});
    ++progress;
}

void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    if (bytes % 16 || smem_addr(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16) {
        fprintf(stderr, "emu: a bulk copy of %u bytes not in 16-byte units\n", bytes);
        abort();
    }
    check_smem(dst, bytes, "bulk copy destination");
    tma_pending.push_back({bar, [=] {
                               memcpy(dst, src, bytes);
                               Mbar& b = mbar(bar);
                               b.tx -= (int)bytes;
                               complete_if_done(b);
                           }});
    ++progress;
}

void bulk_reduce_add(float* dst, const float* src, unsigned bytes) {
    if (bytes % 16 || smem_addr(src) % 16 || reinterpret_cast<uintptr_t>(dst) % 16) {
        fprintf(stderr, "emu: a bulk reduction of %u bytes not in 16-byte units\n", bytes);
        abort();
    }
    check_smem(src, bytes, "bulk reduction source");
    fibers[cur].bulk_open.push_back({dst, src, bytes / 4});
}
void bulk_commit() {
    Fiber& f = fibers[cur];
    f.bulk_committed.push_back(std::move(f.bulk_open));
    f.bulk_open.clear();
}
void emu_bulk_wait(int n) {
    Fiber& f = fibers[cur];
    while ((int)f.bulk_committed.size() > n) {
        for (const Reduce& r : f.bulk_committed.front())
            for (unsigned i = 0; i < r.n; ++i) r.dst[i] += r.src[i];
        f.bulk_committed.pop_front();
    }
    ++progress;
}

// Named barrier id of `threads` threads, checked.
static Named& named_barrier(unsigned id, unsigned threads) {
    if (id == 0 || id >= 16 || threads % 32) {
        fprintf(stderr, "emu: named barrier %u of %u threads\n", id, threads);
        abort();
    }
    ++progress;
    return named[id];
}

// A thread's arrival; true where it completes the barrier's phase.
static bool named_arrive(Named& n, unsigned threads) {
    if (++n.arrived < (int)threads) return false;
    n.arrived = 0;
    ++n.gen;
    return true;
}

void bar_sync(unsigned id, unsigned threads) {
    Named& n = named_barrier(id, threads);
    const int g = n.gen;
    if (!named_arrive(n, threads))
        while (n.gen == g) emu_yield();
}

void bar_arrive(unsigned id, unsigned threads) { named_arrive(named_barrier(id, threads), threads); }

void emu_launch(EmuLaunch L, std::function<void()> kernel) {
    const int nthreads = L.block.x * L.block.y * L.block.z;
    if (nthreads % 32) {
        fprintf(stderr, "emu: blocks must be whole warps (%d threads)\n", nthreads);
        abort();
    }
    std::vector<unsigned char> smem(L.shared + 16);
    gridDim = L.grid;
    blockDim = L.block;
    kernel_fn = &kernel;
    for (unsigned bz = 0; bz < L.grid.z; ++bz)
        for (unsigned by = 0; by < L.grid.y; ++by)
            for (unsigned bx = 0; bx < L.grid.x; ++bx) {
                blockIdx = {bx, by, bz};
                memset(smem.data(), 0xff, smem.size());
                emu_smem = smem.data();
                emu_smem_size = L.shared;
                fibers.assign(nthreads, Fiber());
                live = nthreads;
                bar_arrived = 0;
                for (auto& w : warps) w.arrived = 0;
                for (auto& w : warpgroups) w.arrived = 0;
                for (auto& n : named) n.arrived = 0;
                tma_pending.clear();
                for (int t = 0; t < nthreads; ++t) {
                    Fiber& f = fibers[t];
                    f.lin = t;
                    f.tid = {(unsigned)(t % L.block.x), (unsigned)(t / L.block.x % L.block.y),
                             (unsigned)(t / (L.block.x * L.block.y))};
                    f.stack.resize(256 * 1024);
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, fiber_entry, 0);
                }
                while (live > 0) {
                    const unsigned long long before = progress;
                    for (int t = 0; t < nthreads; ++t) {
                        if (fibers[t].done) continue;
                        cur = t;
                        threadIdx = fibers[t].tid;
                        swapcontext(&sched_ctx, &fibers[t].ctx);
                    }
                    if (progress == before && live > 0) {
                        fprintf(stderr, "emu: deadlock in block (%u, %u, %u): %d threads wait\n", bx, by, bz, live);
                        abort();
                    }
                }
            }
}
