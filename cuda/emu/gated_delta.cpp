// gated_delta.cpp: the gated delta rule's bf16 kernels in the emulator (emu.h), launched as the
// Rust wrappers launch them (cuda/src/kernels/gated_delta*.rs), on the inputs that
// tests/tests/emulated_kernels.rs wrote into DIR (raw f32 files and `dims`); writes the outputs
// and gradients there as emu_*.f32. `parallel` runs gated_delta_parallel.cu (chunk 64), `walk`
// gated_delta.cu's one block per head. The test builds it.
//     gated_delta DIR parallel|walk
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

static size_t ld16(int n) { return n + 8; }
static size_t ld32(int n) { return n + 4; }

// The one-block-per-head kernels (`shared_bytes` in gated_delta.rs), one value tile.
static size_t walk_bytes(const RecDims& d, int row_tiles, int state_tiles, int vectors) {
    const int lp = (d.chunk + 15) / 16 * 16;
    const size_t f32s = lp * ld32(d.bv) + lp * ld32(lp) + lp * std::max(lp / 4, 16) + (6 + vectors) * lp;
    const size_t elems = (size_t)lp * (ld16(std::max(d.dk, d.bv)) + ld16(d.dk) + (row_tiles - 2) * ld16(d.bv)) +
                         lp * ld16(lp) + (size_t)(d.dk + (state_tiles - 1) * std::max(d.dk, lp)) * ld16(d.bv);
    return 4 * f32s + 2 * elems;
}

struct Data {
    std::vector<bf16> q, k, v, beta, g, s0, dO, ds;
    std::vector<bf16> o, dq, dk, dv, db, dg, ds0;
    std::vector<float> states;
};

static std::vector<bf16> poisoned(size_t n) {
    std::vector<bf16> x(n);
    for (auto& e : x) e.bits = 0x7fc1;
    return x;
}

static void walk(Data& x, RecDims d) {
    const int nc = (d.t + d.chunk - 1) / d.chunk, heads = d.b * d.h, lp = (d.chunk + 15) / 16 * 16;
    emu_launch({{(unsigned)heads, 1, 1}, {REC_THREADS, 1, 1}, walk_bytes(d, 5, 1, 0)}, [&] {
        gated_delta_forward_bf16(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(), x.s0.data(),
                                 x.o.data(), x.states.data(), d);
    });
    std::vector<float> scratch((size_t)heads * (d.dk * d.dv + 2 * lp * d.dk));
    emu_launch({{(unsigned)heads, 1, 1}, {REC_THREADS, 1, 1}, walk_bytes(d, 5, 2, 7)}, [&] {
        gated_delta_backward_bf16(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(), x.states.data(),
                                  x.dO.data(), x.ds.data(), x.dq.data(), x.dk.data(), x.dv.data(), x.db.data(),
                                  x.dg.data(), x.ds0.data(), scratch.data(), nullptr, d);
    });
}

// f(Const<D>, Const<X>) for the instantiated (D, X) pair (`instance!` in gated_delta_parallel.rs).
template <typename F> static void chunk_kernel(int D, int BE, F f) {
    if (D == 32 && BE == 32) f(Const<32>(), Const<32>());
    if (D == 32 && BE == 64) f(Const<32>(), Const<64>());
    if (D == 64 && BE == 32) f(Const<64>(), Const<32>());
    if (D == 64 && BE == 64) f(Const<64>(), Const<64>());
    if (D == 128 && BE == 32) f(Const<128>(), Const<32>());
    if (D == 128 && BE == 64) f(Const<128>(), Const<64>());
}
template <typename F> static void scan_kernel(int D, int BV, F f) {
    if (BV == 128 && D == 64) f(Const<64>(), Const<128>());
    if (BV == 128 && D == 128) f(Const<128>(), Const<128>());
    if (BV < 128) chunk_kernel(D, BV, f);
}

// gated_delta_parallel.rs's Plan and launches.
static void parallel(Data& x, RecDims d) {
    const int D = d.dk, V = d.dv, L = GDN_L, nc = (d.t + L - 1) / L, BH = d.b * d.h;
    const int BE = V % 64 == 0 ? 64 : 32;
    const int BV = V % 128 == 0 && D >= 64 ? 128 : V % 64 == 0 ? 64 : 32;
    const size_t rows = (size_t)BH * nc * L;
    auto w = poisoned(rows * D), kh = poisoned(rows * D), qt = poisoned(rows * D), ut = poisoned(rows * V);
    auto pm = poisoned(rows * L), tm = poisoned(rows * L), dug = poisoned(rows * V);
    auto dsg = poisoned((size_t)BH * nc * D * V);
    std::vector<float> gl(BH * nc, NAN);
    const size_t prep = 4 * (L * ld32(L) + 7 * L) + 2 * (2 * L * ld16(D) + 2 * L * ld16(L));
    const size_t scan = 2 * (2 * (3 * L * ld16(D) + L * ld16(L) + L * ld16(BV)) + D * ld16(BV) + L * ld16(BV));
    const size_t grads = 4 * (14 * L + 32) + 2 * (2 * L * ld16(D) + 4 * L * ld16(L) + 3 * D * ld16(BE) +
                                                  7 * L * ld16(BE)) + 4 * D * ld32(BE);
    const EmuDim chunks{(unsigned)nc, (unsigned)BH, 1}, tiles{(unsigned)(V / BV), (unsigned)BH, 1};
    const EmuDim scan_block{(unsigned)(2 * D), 1, 1};
    const auto factors = [&](bf16* u, bf16* t) {
        emu_launch({chunks, {GDN_THREADS, 1, 1}, prep}, [&] {
            chunk_kernel(D, BE, [&](auto dd, auto ee) {
                gdn_prep<dd.value, ee.value>(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(), w.data(),
                                             kh.data(), qt.data(), u, pm.data(), t, gl.data(), d);
            });
        });
    };
    factors(ut.data(), nullptr);
    emu_launch({tiles, scan_block, scan}, [&] {
        scan_kernel(D, BV, [&](auto dd, auto vv) {
            gdn_scan_fwd<dd.value, vv.value>(x.s0.data(), w.data(), kh.data(), qt.data(), ut.data(), pm.data(),
                                             gl.data(), x.o.data(), x.states.data(), d);
        });
    });
    factors(nullptr, tm.data());
    emu_launch({tiles, scan_block, scan}, [&] {
        scan_kernel(D, BV, [&](auto dd, auto vv) {
            gdn_scan_bwd<dd.value, vv.value>(x.ds.data(), x.dO.data(), w.data(), kh.data(), qt.data(), pm.data(),
                                             gl.data(), dug.data(), dsg.data(), x.ds0.data(), d);
        });
    });
    emu_launch({chunks, {(unsigned)GDN_GRAD_THREADS(D, BE), 1, 1}, grads}, [&] {
        chunk_kernel(D, BE, [&](auto dd, auto ee) {
            gdn_grads<dd.value, ee.value>(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(),
                                          x.dO.data(), x.states.data(), dsg.data(), dug.data(), tm.data(), pm.data(),
                                          x.dq.data(), x.dk.data(), x.dv.data(), x.db.data(), x.dg.data(), d);
        });
    });
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: gated_delta DIR parallel|walk\n");
        return 2;
    }
    const std::string dir = argv[1], family = argv[2];
    RecDims d{};
    FILE* f = fopen((dir + "/dims").c_str(), "r");
    if (!f || fscanf(f, "%d %d %d %d %d %d", &d.b, &d.t, &d.h, &d.dk, &d.dv, &d.chunk) != 6) {
        fprintf(stderr, "%s/dims: expected B T H Dk Dv chunk\n", dir.c_str());
        return 2;
    }
    fclose(f);
    d.bv = d.dv;
    d.nv = 1;
    d.scale = 1.0f / sqrtf((float)d.dk);
    const auto in = [&](const char* n) { return to_bf16<bf16>(read_f32(dir + "/" + n + ".f32")); };
    Data x{in("q"), in("k"), in("v"), in("beta"), in("g"), in("s0"), in("do"), in("ds")};
    const int nc = (d.t + d.chunk - 1) / d.chunk;
    x.o = poisoned(x.v.size());
    x.dq = poisoned(x.q.size());
    x.dk = poisoned(x.k.size());
    x.dv = poisoned(x.v.size());
    x.db = poisoned(x.beta.size());
    x.dg = poisoned(x.g.size());
    x.ds0 = poisoned(x.s0.size());
    x.states.assign((size_t)d.b * d.h * (nc + 1) * d.dk * d.dv, NAN);
    if (family == "parallel")
        parallel(x, d);
    else if (family == "walk")
        walk(x, d);
    else {
        fprintf(stderr, "unknown kernel family %s\n", family.c_str());
        return 2;
    }
    const auto out = [&](const char* n, const std::vector<bf16>& v) { write_f32(dir + "/emu_" + n + ".f32", from_bf16(v)); };
    out("o", x.o);
    write_f32(dir + "/emu_states.f32", x.states);
    out("dq", x.dq);
    out("dk", x.dk);
    out("dv", x.dv);
    out("dbeta", x.db);
    out("dg", x.dg);
    out("ds0", x.ds0);
    return 0;
}
