// mlstm.cpp: the mLSTM's kernels (nn/src/mixers/mlstm/mlstm.cu) in the emulator (emu.h), launched
// as the Rust wrapper (mlstm/cuda.rs) launches them, on the inputs that
// tests/tests/emulated_kernels.rs wrote into DIR: raw f32 files, `dims` (B T H Dk Dv chunk) and
// `launch`, the wrapper's launch sizes (swax-nn's mlstm::launch_sizes). Runs the forward and the
// backward in bf16 (tensor cores) or f32 and writes the outputs, boundary states and gradients
// there as emu_*.f32. The test builds it.
//     mlstm DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

// Inputs and results as the kernels' element type E, states f32.
template <typename E>
struct Data {
    std::vector<E> q, k, v, i, f, c0, n0, m0, dh, dcT, dnT, dmT;
    std::vector<E> h, dq, dk, dv, di, df, dc0, dn0, dm0;
    std::vector<float> cs, ns, ms, den;
};

// The value tiles of `bv` columns.
static RecDims tiled(RecDims d, int bv) {
    d.bv = bv;
    d.nv = (d.dv + bv - 1) / bv;
    return d;
}

// launch (cuda.rs's Sizes): the tiled kernels' threads, mlstm_gates', the forward's tile width
// and the shared bytes of its scan and chunk kernels, the backward's tile width and those of
// scan and grads (prep takes none), and 1 where the gradients run mlstm_grads_lean (else 0).
template <typename E, typename Kernels>
static void run(Data<E>& x, RecDims d0, const std::vector<float>& z, Kernels kn) {
    const unsigned heads = d0.b * d0.h, nc = (d0.t + d0.chunk - 1) / d0.chunk, threads = (unsigned)z[0];
    const size_t rows = (size_t)d0.b * d0.t * d0.h, rk = rows * d0.dk, csz = (size_t)d0.dk * d0.dv;
    const RecDims fd = tiled(d0, (int)z[2]);
    const EmuDim block{threads, 1, 1};
    std::vector<float> fwd_rows(4 * rows, NAN), bwd_rows(4 * rows, NAN);
    emu_launch({{heads, (unsigned)fd.nv, 1}, block, (size_t)z[3]}, [&] {
        kn.scan_fwd(x.k.data(), x.v.data(), x.i.data(), x.f.data(), x.c0.data(), x.n0.data(), x.m0.data(),
                    x.cs.data(), x.ns.data(), x.ms.data(), fwd_rows.data(), fd);
    });
    emu_launch({{heads, (unsigned)fd.nv, nc}, block, (size_t)z[4]}, [&] {
        kn.chunk_fwd(x.q.data(), x.k.data(), x.v.data(), fwd_rows.data(), x.cs.data(), x.ns.data(), x.ms.data(),
                     x.h.data(), x.den.data(), fd);
    });
    const RecDims bd = tiled(d0, (int)z[5]);
    // mlstm_gate_rows_bwd: a warp per chunk, GATE_ROW_THREADS a block (as cuda.rs launches it).
    const unsigned per_block = GATE_ROW_THREADS / 32;
    emu_launch({{(heads * nc + per_block - 1) / per_block, 1, 1}, {GATE_ROW_THREADS, 1, 1}, 0}, [&] {
        kn.gate_rows_bwd(x.i.data(), x.f.data(), x.ms.data(), bwd_rows.data(), bd);
    });
    std::vector<float> stats(4 * rows, NAN), dcs(heads * nc * csz, NAN), dns(heads * nc * d0.dk, NAN);
    std::vector<float> dots(heads * bd.nv * 2, NAN), gates(bd.nv * 2 * rows, NAN), part(bd.nv * 2 * rk, NAN);
    emu_launch({{heads, 1, nc}, block, 0}, [&] {
        kn.prep(x.i.data(), x.f.data(), x.ms.data(), x.den.data(), x.h.data(), x.dh.data(), stats.data(), bd);
    });
    emu_launch({{heads, (unsigned)bd.nv, 1}, block, (size_t)z[6]}, [&] {
        kn.scan_bwd(x.q.data(), bwd_rows.data(), x.cs.data(), x.ns.data(), x.ms.data(), stats.data(),
                    x.dh.data(), x.dcT.data(), x.dnT.data(), dcs.data(), dns.data(), x.dc0.data(), x.dn0.data(),
                    dots.data(), bd);
    });
    emu_launch({{heads, (unsigned)bd.nv, nc}, block, (size_t)z[7]}, [&] {
        kn.grads(z[8] != 0.0f, x.q.data(), x.k.data(), x.v.data(), bwd_rows.data(), x.cs.data(), x.ns.data(),
                 x.ms.data(), stats.data(), x.dh.data(), dcs.data(), dns.data(), x.dq.data(),
                 x.dk.data(), x.dv.data(), gates.data(), part.data(), bd);
    });
    emu_launch({{heads, 1, 1}, {(unsigned)z[1], 1, 1}, 0}, [&] {
        kn.gates(x.f.data(), stats.data(), gates.data(), dots.data(), x.dmT.data(), x.di.data(), x.df.data(),
                 x.dm0.data(), bd);
    });
    if (bd.nv > 1) {
        const EmuLaunch sum{{4, 1, 1}, {128, 1, 1}, 0};
        emu_launch(sum, [&] { kn.reduce(part.data(), 0, 2 * rk, bd.nv, rk, x.dq.data()); });
        emu_launch(sum, [&] { kn.reduce(part.data(), rk, 2 * rk, bd.nv, rk, x.dk.data()); });
    }
}

// The instantiations of one element type, by their extern "C" names.
#define MLSTM_EMU_KERNELS(SUFFIX)                                                                   \
    struct Kernels_##SUFFIX {                                                                       \
        template <typename... A> void gate_rows_bwd(A... a) { mlstm_gate_rows_bwd_##SUFFIX(a...); } \
        template <typename... A> void scan_fwd(A... a) { mlstm_scan_fwd_##SUFFIX(a...); }           \
        template <typename... A> void chunk_fwd(A... a) { mlstm_chunk_fwd_##SUFFIX(a...); }         \
        template <typename... A> void prep(A... a) { mlstm_prep_bwd_##SUFFIX(a...); }               \
        template <typename... A> void scan_bwd(A... a) { mlstm_scan_bwd_##SUFFIX(a...); }           \
        template <typename... A> void grads(bool lean, A... a) {                                    \
            lean ? mlstm_grads_lean_##SUFFIX(a...) : mlstm_grads_##SUFFIX(a...);                    \
        }                                                                                           \
        template <typename... A> void gates(A... a) { mlstm_gates_##SUFFIX(a...); }                 \
        template <typename... A> void reduce(A... a) { rec_reduce_##SUFFIX(a...); }                 \
    };
MLSTM_EMU_KERNELS(f32)
MLSTM_EMU_KERNELS(bf16)

template <typename E, typename Kernels>
static void main_of(const std::string& dir, RecDims d, Kernels kn) {
    const auto in = [&](const char* n) { return as<E>(read_f32(dir + "/" + n + ".f32")); };
    Data<E> x{in("q"), in("k"), in("v"), in("i"), in("f"), in("c0"), in("n0"), in("m0"),
              in("dh"), in("dc"), in("dn"), in("dm")};
    const size_t nb = (size_t)d.b * d.h * ((d.t + d.chunk - 1) / d.chunk + 1);
    x.h = nans<E>(x.v.size());
    x.dq = nans<E>(x.q.size());
    x.dk = nans<E>(x.k.size());
    x.dv = nans<E>(x.v.size());
    x.di = nans<E>(x.i.size());
    x.df = nans<E>(x.f.size());
    x.dc0 = nans<E>(x.c0.size());
    x.dn0 = nans<E>(x.n0.size());
    x.dm0 = nans<E>(x.m0.size());
    x.cs.assign(nb * d.dk * d.dv, NAN);
    x.ns.assign(nb * d.dk, NAN);
    x.ms.assign(nb, NAN);
    x.den.assign((size_t)d.b * d.h * 2 * d.t, NAN);
    run(x, d, read_numbers<float>(dir, "launch", 9, "the wrapper's 9 sizes"), kn);
    const auto out = [&](const char* n, const auto& v) { write_f32(dir + "/emu_" + n + ".f32", back(v)); };
    out("h", x.h);
    out("c", x.cs);
    out("n", x.ns);
    out("m", x.ms);
    out("den", x.den);
    out("dq", x.dq);
    out("dk", x.dk);
    out("dv", x.dv);
    out("di", x.di);
    out("df", x.df);
    out("dc0", x.dc0);
    out("dn0", x.dn0);
    out("dm0", x.dm0);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: mlstm DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    RecDims d = read_dims<RecDims>(dir);
    d.eps = 1e-6f;
    d.scale = 1.0f / sqrtf((float)d.dk);
    if (dtype == "bf16")
        main_of<bf16>(dir, d, Kernels_bf16{});
    else if (dtype == "f32")
        main_of<float>(dir, d, Kernels_f32{});
    else {
        fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
        return 2;
    }
    return 0;
}
