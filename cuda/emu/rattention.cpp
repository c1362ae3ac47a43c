// rattention.cpp: RAttention's linear-branch kernels (nn/src/mixers/rattention/rla.cu) in the
// emulator (emu.h), launched as the Rust wrapper (rattention/cuda.rs) launches them, on the
// inputs tests/tests/emulated_kernels.rs wrote into DIR: q, k, v and the output's gradient dout
// (raw f32, rounded to bf16 here), `dims` (B T H Hkv D window, the window under T) and `launch`
// (the wrapper's sizes, swax-nn's rattention::launch_sizes: chunk, threads, the shared bytes of
// the walks over features and of the walks for dq and dk, rows a block of rla_phi).
// Writes o and the gradients dq, dk, dv there as emu_*.f32.
//     rattention DIR bf16        (the kernels' only dtype)
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

int main(int argc, char** argv) {
    const auto& [dir, b, t, h, hkv, d, window, q, k, v, dout, z] = attn_case<bf16>(argc, argv, "rattention", 5);
    if (window >= t) {
        fprintf(stderr, "%s/dims: the window must be under T (else no query reads a key)\n", dir.c_str());
        return 2;
    }
    const bool d64 = d == 64;
    const EmuDim block{z[1], 1, 1};
    // Every element the kernels write is NaN first, but the rows the wrapper zeroes: those of the
    // keys in the last `window` steps, which feed no query, in dv (dk's halves there are not
    // read).
    std::vector<bf16> o = nans<bf16>(q.size()), dq2 = nans<bf16>(2 * q.size()), dk2 = nans<bf16>(2 * k.size());
    std::vector<bf16> dv = as<bf16>(std::vector<float>(k.size(), 0.0f));
    std::vector<bf16> dq = nans<bf16>(q.size()), dk = nans<bf16>(k.size());
    // phi of every row, d / 8 threads a row.
    auto features = [&](const std::vector<bf16>& x) {
        const unsigned long long rows = x.size() / d, per_block = z[4];
        std::vector<bf16> f = nans<bf16>(2 * x.size());
        emu_launch({{(unsigned)((rows + per_block - 1) / per_block), 1, 1}, block, 0},
                   [&] { (d64 ? rla_phi_d64 : rla_phi_d128)(x.data(), f.data(), rows); });
        return f;
    };
    const std::vector<bf16> fq = features(q), fk = features(k);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // Hopper's walks take tensor maps (as emu.h reads them: address, sizes and box, innermost
    // first) of boxes of a chunk's rows by 64 columns where the others take pointers.
    const auto map = [&](const std::vector<bf16>& x, unsigned heads) {
        TensorMap m{};
        const unsigned long long w[9] = {
            (unsigned long long)x.data(), x.size() / ((size_t)b * t * heads), heads, t, b, 64, 1, z[0], 1};
        memcpy(&m, w, sizeof w);
        return m;
    };
    const TensorMap mq = map(fq, h), mk = map(fk, hkv), mv = map(v, hkv), mdo = map(dout, h);
#else
    const bf16 *mq = fq.data(), *mk = fk.data(), *mv = v.data(), *mdo = dout.data();
#endif
    emu_launch({{d / 64, h, b}, block, z[2]}, [&] {
        (d64 ? rla_fwd_d64 : rla_fwd_d128)(mq, mk, mv, o.data(), t, h, hkv, window);
    });
    // The backward reads the forward's features (the wrapper makes them again, to the same values).
    emu_launch({{2, h, b}, block, z[3]}, [&] {
        (d64 ? rla_bwd_dq_d64 : rla_bwd_dq_d128)(mq, mk, mv, mdo, dq2.data(), t, h, hkv, window);
    });
    emu_launch({{2, hkv, b}, block, z[3]}, [&] {
        (d64 ? rla_bwd_dk_d64 : rla_bwd_dk_d128)(mq, mk, mv, mdo, dk2.data(), t, h, hkv, window);
    });
    emu_launch({{d / 64, hkv, b}, block, z[2]}, [&] {
        (d64 ? rla_bwd_dv_d64 : rla_bwd_dv_d128)(mq, mk, mdo, dv.data(), t, h, hkv, window);
    });
    auto sum_halves = [&](const std::vector<bf16>& x, std::vector<bf16>& y, unsigned heads, unsigned limit) {
        const unsigned long long rows = y.size() / d, threads = y.size() / 8;
        emu_launch({{(unsigned)((threads + z[1] - 1) / z[1]), 1, 1}, block, 0}, [&] {
            (d64 ? rla_sum_halves_d64 : rla_sum_halves_d128)(x.data(), y.data(), rows, t, heads, limit);
        });
    };
    sum_halves(dq2, dq, h, t);
    sum_halves(dk2, dk, hkv, t - window);
    write_f32(dir + "/emu_o.f32", back(o));
    write_f32(dir + "/emu_dq.f32", back(dq));
    write_f32(dir + "/emu_dk.f32", back(dk));
    write_f32(dir + "/emu_dv.f32", back(dv));
    return 0;
}
