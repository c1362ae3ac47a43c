// gated_head_norm.cpp: xLSTM's gated head norm (cuda/kernels/norm.cu), forward and backward, in
// the emulator (emu.h), launched with the sizes tests/tests/emulated_kernels.rs wrote into
// DIR/launch (rows heads n blocks threads_x threads_y vec: `Launch::rows`' block shape, blocks
// per head of the backward, vec 1 for the 16-byte-vector instantiations), on
// DIR/{x,o,dy,w}.f32. Writes y, dx, do (emu_y.f32, emu_dx.f32, emu_do.f32) and the weight
// gradient's per-block partial sums (emu_partial.f32, [blocks, heads, n]), each output filled
// with NaN before its kernel runs.
//     gated_head_norm DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

template <typename E>
using Fwd = void (*)(const E*, const E*, const float*, E*, u32, u32, u32, float);
template <typename E>
using Bwd = void (*)(const E*, const E*, const float*, const E*, E*, E*, float*, u32, u32, u32, float);

struct Sizes {
    unsigned rows, heads, n, blocks, tx, ty;
};

template <typename E>
static void run(const std::string& dir, Sizes s, Fwd<E> fwd, Bwd<E> bwd) {
    const auto f32 = [&](const char* name) { return read_f32(dir + "/" + name + ".f32"); };
    const std::vector<E> x = as<E>(f32("x")), o = as<E>(f32("o")), dy = as<E>(f32("dy"));
    const std::vector<float> w = f32("w");
    const size_t len = (size_t)s.rows * s.n, width = (size_t)s.heads * s.n;
    if (x.size() != len || o.size() != len || dy.size() != len || w.size() != width) {
        fprintf(stderr, "%s: inputs are not [rows, n] x3, [heads, n] for %u x %u\n", dir.c_str(), s.rows, s.n);
        exit(2);
    }
    const float eps = 1e-5f;
    std::vector<E> y = nans<E>(len), dx = nans<E>(len), d_o = nans<E>(len);
    std::vector<float> partial(s.blocks * width, NAN);
    const EmuLaunch lf{{(s.rows + s.ty - 1) / s.ty, 1, 1}, {s.tx, s.ty, 1}, 0};
    emu_launch(lf, [&] { fwd(x.data(), o.data(), w.data(), y.data(), s.rows, s.heads, s.n, eps); });
    const EmuLaunch lb{{s.blocks, s.heads, 1}, {s.tx, s.ty, 1}, (size_t)s.ty * s.n * 4};
    emu_launch(lb, [&] {
        bwd(x.data(), o.data(), w.data(), dy.data(), dx.data(), d_o.data(), partial.data(), s.rows, s.heads, s.n, eps);
    });
    write_f32(dir + "/emu_y.f32", back(y));
    write_f32(dir + "/emu_dx.f32", back(dx));
    write_f32(dir + "/emu_do.f32", back(d_o));
    write_f32(dir + "/emu_partial.f32", partial);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: gated_head_norm DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    Sizes s;
    unsigned vec;
    FILE* sizes = fopen((dir + "/launch").c_str(), "r");
    if (!sizes || fscanf(sizes, "%u %u %u %u %u %u %u", &s.rows, &s.heads, &s.n, &s.blocks, &s.tx, &s.ty, &vec) != 7) {
        fprintf(stderr, "%s/launch: expected rows heads n blocks threads_x threads_y vec\n", dir.c_str());
        return 2;
    }
    fclose(sizes);
    if (dtype == "bf16")
        run<bf16>(dir, s, vec ? gated_head_norm_fwd_bf16 : gated_head_norm_fwd_bf16_scalar,
                  vec ? gated_head_norm_bwd_bf16 : gated_head_norm_bwd_bf16_scalar);
    else if (dtype == "f32")
        run<float>(dir, s, vec ? gated_head_norm_fwd_f32 : gated_head_norm_fwd_f32_scalar,
                   vec ? gated_head_norm_bwd_f32 : gated_head_norm_bwd_f32_scalar);
    else {
        fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
        return 2;
    }
    return 0;
}
