// rattention.cpp: RAttention's linear-branch kernels (nn/src/mixers/rattention/rla.cu) in the
// emulator (emu.h), launched as the Rust wrapper (rattention/cuda.rs) launches them, on the
// inputs tests/tests/emulated_kernels.rs wrote into DIR: q, k, v and the output's gradient dout
// (raw f32, rounded to bf16 here), `dims` (B T H Hkv D window, the window under T) and `launch`
// (the wrapper's sizes, swax-nn's rattention::launch_sizes: chunk, the scans' threads and shared
// bytes, the feature and chunk kernels' threads, rla_fwd's shared bytes and the backward chunk
// kernels').
// Writes o and the gradients dq, dk, dv there as emu_*.f32.
//     rattention DIR bf16        (the kernels' only dtype)
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

int main(int argc, char** argv) {
    const auto& [dir, b, t, h, hkv, d, window, q, k, v, dout, z] = attn_case<bf16>(argc, argv, "rattention", 6);
    if (window >= t) {
        fprintf(stderr, "%s/dims: the window must be under T (else no query reads a key)\n", dir.c_str());
        return 2;
    }
    const unsigned chunks = (t + z[0] - 1) / z[0], group = h / hkv;
    const size_t nstates = (size_t)b * hkv * chunks * 2 * d * d;
    std::vector<bf16> o = nans<bf16>(q.size()), dq = nans<bf16>(q.size());
    // As the wrapper: keys in the last `window` steps feed no query, their rows never written.
    std::vector<bf16> dk = as<bf16>(std::vector<float>(k.size(), 0.0f)), dv = dk;
    std::vector<bf16> states = nans<bf16>(nstates), dstates = nans<bf16>(nstates);
    const bool d64 = d == 64;
    const EmuLaunch scan{{(2 * d / 64) * (d / 64), hkv, b}, {z[1], 1, 1}, z[2]};
    const EmuDim block{z[3], 1, 1};
    // phi of every row, a warp per row (NaN-filled first: every element must be written).
    auto features = [&](const std::vector<bf16>& x) {
        const unsigned long long rows = x.size() / d, per_block = z[3] / 32;
        std::vector<bf16> f = nans<bf16>(2 * x.size());
        emu_launch({{(unsigned)((rows + per_block - 1) / per_block), 1, 1}, block, 0},
                   [&] { (d64 ? rla_phi_d64 : rla_phi_d128)(x.data(), f.data(), rows); });
        return f;
    };
    const std::vector<bf16> fq = features(q), fk = features(k);
    emu_launch({{d / 64, h, b}, block, z[4]}, [&] {
        (d64 ? rla_fwd_d64 : rla_fwd_d128)(fq.data(), fk.data(), v.data(), o.data(), t, h, hkv, window);
    });
    // The backward reads the forward's features (the wrapper makes them again, to the same values).
    emu_launch(scan, [&] {
        (d64 ? rla_scan_fwd_d64 : rla_scan_fwd_d128)(fk.data(), v.data(), states.data(), t, hkv, 1, window);
    });
    emu_launch(scan, [&] {
        (d64 ? rla_scan_bwd_d64 : rla_scan_bwd_d128)(fq.data(), dout.data(), dstates.data(), t, h, group, 0);
    });
    emu_launch({{chunks, h, b}, block, z[5]}, [&] {
        (d64 ? rla_bwd_dq_d64 : rla_bwd_dq_d128)(fq.data(), fk.data(), v.data(), dout.data(), states.data(),
                                                 dq.data(), t, h, hkv, window);
    });
    emu_launch({{chunks, hkv, b}, block, z[5]}, [&] {
        (d64 ? rla_bwd_dkdv_d64 : rla_bwd_dkdv_d128)(fq.data(), fk.data(), v.data(), dout.data(), dstates.data(),
                                                     dk.data(), dv.data(), t, h, hkv, window);
    });
    write_f32(dir + "/emu_o.f32", back(o));
    write_f32(dir + "/emu_dq.f32", back(dq));
    write_f32(dir + "/emu_dk.f32", back(dk));
    write_f32(dir + "/emu_dv.f32", back(dv));
    return 0;
}
