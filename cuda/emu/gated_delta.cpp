// gated_delta.cpp: the gated delta rule's bf16 kernels in the emulator (emu.h), launched as the
// Rust wrappers launch them, on the inputs that tests/tests/emulated_kernels.rs wrote into DIR:
// raw f32 files, `dims` (B T H Dk Dv chunk) and `launch`, the wrappers' launch sizes (swax-nn's
// gated_delta::parallel_sizes, gated_delta::one_tile_sizes). Writes the outputs and gradients
// there as emu_*.f32. `parallel` runs gated_delta_parallel.cu (chunk 64), `walk` gated_delta.cu's
// one block per head (both in nn/src/mixers/gated_delta/). The test builds it.
//     gated_delta DIR parallel|walk
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

struct Data {
    std::vector<bf16> q, k, v, beta, g, s0, dO, ds;
    std::vector<bf16> o, dq, dk, dv, db, dg, ds0;
    std::vector<float> states;
};

// launch: threads, forward bytes, backward bytes (one value tile).
static void walk(Data& x, RecDims d, const std::vector<size_t>& z) {
    const int nc = (d.t + d.chunk - 1) / d.chunk, heads = d.b * d.h, lp = (d.chunk + 15) / 16 * 16;
    const EmuDim grid{(unsigned)heads, 1, 1}, block{(unsigned)z[0], 1, 1};
    emu_launch({grid, block, z[1]}, [&] {
        gated_delta_forward_bf16(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(), x.s0.data(),
                                 x.o.data(), x.states.data(), d);
    });
    std::vector<float> scratch((size_t)heads * (d.dk * d.dv + 2 * lp * d.dk));
    emu_launch({grid, block, z[2]}, [&] {
        gated_delta_backward_bf16(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(), x.states.data(),
                                  x.dO.data(), x.ds.data(), x.dq.data(), x.dk.data(), x.dv.data(), x.db.data(),
                                  x.dg.data(), x.ds0.data(), scratch.data(), nullptr, d);
    });
}

// f(Const<D>) for an instantiated head dim (gdn_prep).
template <typename F> static void head_kernel(int D, F f) {
    if (D == 32) f(Const<32>());
    if (D == 64) f(Const<64>());
    if (D == 128) f(Const<128>());
}
// f(Const<D>, Const<X>) for the instantiated (D, X) pair (the macros at the end of gated_delta_parallel.cu).
template <typename F> static void scan_kernel(int D, int BV, F f) {
    if (D == 32 && BV == 32) f(Const<32>(), Const<32>());
    if (D == 32 && BV == 64) f(Const<32>(), Const<64>());
    if (D == 64 && BV == 32) f(Const<64>(), Const<32>());
    if (D == 64 && BV == 64) f(Const<64>(), Const<64>());
    if (D == 64 && BV == 128) f(Const<64>(), Const<128>());
    if (D == 128 && BV == 32) f(Const<128>(), Const<32>());
    if (D == 128 && BV == 64) f(Const<128>(), Const<64>());
    if (D == 128 && BV == 128) f(Const<128>(), Const<128>());
}

// cuda_parallel.rs's launches; launch: BV (the scans), then gdn_prep's threads and bytes, the
// scans' threads, the forward scan's bytes and the backward's, gdn_grads' threads and bytes.
static void parallel(Data& x, RecDims d, const std::vector<size_t>& z) {
    const int D = d.dk, V = d.dv, L = GDN_L, nc = (d.t + L - 1) / L, BH = d.b * d.h;
    const int BV = (int)z[0];
    const size_t rows = (size_t)BH * nc * L;
    auto w = nans<bf16>(rows * D), kh = nans<bf16>(rows * D), qt = nans<bf16>(rows * D), tb = nans<bf16>(rows * L);
    auto pm = nans<bf16>(rows * L), tm = nans<bf16>(rows * L), dug = nans<bf16>(rows * V);
    auto dsg = nans<bf16>((size_t)BH * nc * D * V);
    std::vector<float> gl(BH * nc, NAN);
    const EmuDim chunks{(unsigned)nc, (unsigned)BH, 1}, tiles{(unsigned)(V / BV), (unsigned)BH, 1};
    const EmuLaunch prep{chunks, {(unsigned)z[1], 1, 1}, z[2]};
    const EmuLaunch scan_fwd{tiles, {(unsigned)z[3], 1, 1}, z[4]}, scan_bwd{tiles, {(unsigned)z[3], 1, 1}, z[5]};
    const EmuLaunch grads{chunks, {(unsigned)z[6], 1, 1}, z[7]};
    const auto factors = [&](bf16* t_beta, bf16* t) {
        emu_launch(prep, [&] {
            head_kernel(D, [&](auto dd) {
                gdn_prep<dd.value>(x.q.data(), x.k.data(), x.beta.data(), x.g.data(), w.data(), kh.data(), qt.data(),
                                   pm.data(), t_beta, t, gl.data(), d);
            });
        });
    };
    factors(tb.data(), nullptr);
    emu_launch(scan_fwd, [&] {
        scan_kernel(D, BV, [&](auto dd, auto vv) {
            gdn_scan_fwd<dd.value, vv.value>(x.s0.data(), w.data(), kh.data(), qt.data(), tb.data(), x.v.data(),
                                             pm.data(), gl.data(), x.o.data(), x.states.data(), d);
        });
    });
    factors(nullptr, tm.data());
    emu_launch(scan_bwd, [&] {
        scan_kernel(D, BV, [&](auto dd, auto vv) {
            gdn_scan_bwd<dd.value, vv.value>(x.ds.data(), x.dO.data(), w.data(), kh.data(), qt.data(), pm.data(),
                                             gl.data(), dug.data(), dsg.data(), x.ds0.data(), d);
        });
    });
    emu_launch(grads, [&] {
        head_kernel(D, [&](auto dd) {
            gdn_grads<dd.value>(x.q.data(), x.k.data(), x.v.data(), x.beta.data(), x.g.data(),
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
    RecDims d = read_dims<RecDims>(dir);
    d.bv = d.dv;
    d.nv = 1;
    d.scale = 1.0f / sqrtf((float)d.dk);
    const auto in = [&](const char* n) { return to_bf16<bf16>(read_f32(dir + "/" + n + ".f32")); };
    Data x{in("q"), in("k"), in("v"), in("beta"), in("g"), in("s0"), in("do"), in("ds")};
    const int nc = (d.t + d.chunk - 1) / d.chunk;
    x.o = nans<bf16>(x.v.size());
    x.dq = nans<bf16>(x.q.size());
    x.dk = nans<bf16>(x.k.size());
    x.dv = nans<bf16>(x.v.size());
    x.db = nans<bf16>(x.beta.size());
    x.dg = nans<bf16>(x.g.size());
    x.ds0 = nans<bf16>(x.s0.size());
    x.states.assign((size_t)d.b * d.h * (nc + 1) * d.dk * d.dv, NAN);
    if (family == "parallel")
        parallel(x, d, read_numbers<size_t>(dir, "launch", 8, "the wrapper's 8 sizes"));
    else if (family == "walk")
        walk(x, d, read_numbers<size_t>(dir, "launch", 3, "the wrapper's 3 sizes"));
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
