// attention.cpp: sliding-window attention's kernels (nn/src/mixers/attention/attention.cu) in the
// emulator (emu.h) on their mma.sync path (the emulator is no sm_90a target: wgmma's code is
// compiled out, as for Ampere, Ada and Blackwell), launched as the Rust wrapper
// (attention/cuda.rs) launches them, on the inputs tests/tests/emulated_kernels.rs wrote into
// DIR: q, k, v and the output's gradient dout (raw f32, rounded to bf16 here), `dims` (B T H Hkv
// D window) and `launch` (the wrapper's sizes, swax-nn's attention::launch_sizes: forward rows,
// threads and shared bytes, the backward's, then swa_bwd_delta's rows a block). Writes o, lse
// and the gradients dq, dk, dv there as emu_*.f32.
//     attention DIR bf16        (the kernels' only dtype)
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

int main(int argc, char** argv) {
    const auto& [dir, b, t, h, hkv, d, window, q, k, v, dout, z] = attn_case<bf16>(argc, argv, "attention", 7);
    const size_t rows = (size_t)b * t * h;
    std::vector<bf16> o = nans<bf16>(q.size()), dk = nans<bf16>(k.size()), dv = nans<bf16>(v.size());
    std::vector<float> lse(rows, NAN), delta(rows, NAN), dq(q.size(), 0.0f);
    const float scale = 1.0f / sqrtf((float)d), scale_log2 = scale * 1.4426950408889634f;
    const auto blocks = [&](unsigned n) { return (t + n - 1) / n; };
    const bool d64 = d == 64;
    emu_launch({{blocks(z[0]), h, b}, {z[1], 1, 1}, z[2]}, [&] {
        (d64 ? swa_fwd_d64 : swa_fwd_d128)(q.data(), k.data(), v.data(), o.data(), lse.data(), t, h, hkv, window,
                                           scale_log2);
    });
    emu_launch({{(unsigned)((rows + z[6] - 1) / z[6]), 1, 1}, {32 * z[6], 1, 1}, 0},
               [&] { swa_bwd_delta(o.data(), dout.data(), delta.data(), (u32)rows, t, h, d); });
    emu_launch({{blocks(z[3]), hkv, b}, {z[4], 1, 1}, z[5]}, [&] {
        (d64 ? swa_bwd_d64 : swa_bwd_d128)(q.data(), k.data(), v.data(), dout.data(), lse.data(), delta.data(),
                                           dq.data(), dk.data(), dv.data(), t, h, hkv, window, scale);
    });
    write_f32(dir + "/emu_o.f32", back(o));
    write_f32(dir + "/emu_lse.f32", lse);
    write_f32(dir + "/emu_dq.f32", dq);
    write_f32(dir + "/emu_dk.f32", back(dk));
    write_f32(dir + "/emu_dv.f32", back(dv));
    return 0;
}
