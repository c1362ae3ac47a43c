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

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    EmuDim tid;
    int lin = 0;
    bool done = false;
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> committed;
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
