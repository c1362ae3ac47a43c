// attention.cpp: sliding-window attention's kernels (nn/src/mixers/attention/attention.cu) in the
// emulator (emu.h), launched as the Rust wrapper (attention/cuda.rs) launches them, on the
// inputs tests/tests/emulated_kernels.rs wrote into DIR: q, k, v and the output's gradient dout
// (raw f32, rounded to bf16 here), `dims` (B T H Hkv D window) and `launch` (the wrapper's sizes,
// swax-nn's attention::launch_sizes: forward rows, threads and shared bytes, the backward's,
// swa_bwd_prep's rows a block, then Hopper's forward's rows, threads and shared bytes and its
// backward's keys, threads and shared bytes, then swa_bwd_prep's threads a block). Writes o,
// lse and the gradients dq, dk, dv there as emu_*.f32. Built as it is, the kernels take their
// mma.sync path (as on Ampere, Ada and Blackwell); built by attention_hopper.cpp, Hopper's
// (wgmma, and at head dim 128 hopper_fwd.cu's forward and hopper_bwd.cu's backward, at every
// window: the wrapper takes the latter only from window 512, a dispatch of speed, not of
// correctness).
//     attention DIR bf16        (the kernels' only dtype)
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

int main(int argc, char** argv) {
    const auto& [dir, b, t, h, hkv, d, window, q, k, v, dout, z] = attn_case<bf16>(argc, argv, "attention", 14);
    const size_t rows = (size_t)b * t * h;
    std::vector<bf16> o = nans<bf16>(q.size()), dk = nans<bf16>(k.size()), dv = nans<bf16>(v.size());
    // The backward's row statistics, [B, H, T] padded to whole 64-row tiles.
    const unsigned t_pad = (t + 63) / 64 * 64;
    const unsigned stat_rows = b * h * t_pad;
    std::vector<float> lse(rows, NAN), delta(stat_rows, NAN), lse2(stat_rows, NAN), dq(q.size(), 0.0f);
    const float scale = 1.0f / sqrtf((float)d), scale_log2 = scale * 1.4426950408889634f;
    const auto blocks = [&](unsigned n) { return (t + n - 1) / n; };
    const bool d64 = d == 64;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // Tensor maps as emu.h reads them: address, sizes and box, innermost first.
    const auto map = [&](const std::vector<bf16>& x, unsigned heads, unsigned rows) {
        TensorMap m{};
        const unsigned long long w[9] = {(unsigned long long)x.data(), d, heads, t, b, 64, 1, rows, 1};
        memcpy(&m, w, sizeof w);
        return m;
    };
    if (!d64) {
        const TensorMap tq = map(q, h, z[7]), tk = map(k, hkv, 64), tv = map(v, hkv, 64);
        // Three persistent blocks (the wrapper launches one an SM), so that each walks several tiles.
        emu_launch({{3, 1, 1}, {z[8], 1, 1}, z[9]}, [&] {
            swa_fwd_ws_d128(tq, tk, tv, o.data(), lse.data(), t, h, hkv, b, window, scale_log2);
        });
    } else
#endif
        emu_launch({{blocks(z[0]), h, b}, {z[1], 1, 1}, z[2]}, [&] {
            (d64 ? swa_fwd_d64 : swa_fwd_d128)(q.data(), k.data(), v.data(), o.data(), lse.data(), t, h, hkv,
                                               window, scale_log2);
        });
    emu_launch({{(stat_rows + z[6] - 1) / z[6], 1, 1}, {z[13], 1, 1}, 0}, [&] {
        swa_bwd_prep(o.data(), dout.data(), lse.data(), delta.data(), lse2.data(), stat_rows, t, t_pad, h, d);
    });
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (!d64) {
        const TensorMap tq = map(q, h, 64), tdo = map(dout, h, 64), tk = map(k, hkv, z[10]), tv = map(v, hkv, z[10]);
        std::vector<float> acc((size_t)stat_rows * d, 0.0f);
        // Three persistent blocks, as for the forward.
        emu_launch({{3, 1, 1}, {z[11], 1, 1}, z[12]}, [&] {
            swa_bwd_ws_d128(tq, tk, tv, tdo, lse2.data(), delta.data(), acc.data(), dk.data(), dv.data(), t, h, hkv, b,
                            window, scale);
        });
        emu_launch({{4, 1, 1}, {256, 1, 1}, 0},
                   [&] { swa_dq_unblock_f32_d128(acc.data(), dq.data(), t, h, b, scale); });
    } else
#endif
        emu_launch({{blocks(z[3]), hkv, b}, {z[4], 1, 1}, z[5]}, [&] {
            (d64 ? swa_bwd_d64 : swa_bwd_d128)(q.data(), k.data(), v.data(), dout.data(), lse2.data(), delta.data(),
                                               dq.data(), dk.data(), dv.data(), t, h, hkv, window, scale);
        });
    write_f32(dir + "/emu_o.f32", back(o));
    write_f32(dir + "/emu_lse.f32", lse);
    write_f32(dir + "/emu_dq.f32", dq);
    write_f32(dir + "/emu_dk.f32", back(dk));
    write_f32(dir + "/emu_dv.f32", back(dv));
    return 0;
}
