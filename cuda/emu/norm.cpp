// norm.cpp: RMSNorm's backward kernel (cuda/kernels/norm.cu, center off) in the emulator (emu.h),
// launched with the sizes tests/tests/emulated_kernels.rs wrote into DIR/launch (rows n blocks
// threads_x threads_y vec: `Launch::rows`' block shape, vec 1 for the 16-byte-vector
// instantiations), on DIR/{x,w,rstd,dy,dres}.f32. Runs it with dres and without, and writes dx
// of each (emu_dx.f32, emu_dx_plain.f32) and the weight gradient's per-block partial sums of
// the first (emu_partial.f32, [blocks, n]), each output filled with NaN before its kernel runs.
//     norm DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

template <typename E>
using NormBwd = void (*)(const E*, const float*, const float*, const float*, const E*, const E*, E*,
                         float*, u32, u32, int);

template <typename E>
static void run(const std::string& dir, unsigned rows, unsigned n, EmuLaunch l, NormBwd<E> bwd) {
    const auto f32 = [&](const char* name) { return read_f32(dir + "/" + name + ".f32"); };
    const std::vector<E> x = as<E>(f32("x")), dy = as<E>(f32("dy")), dres = as<E>(f32("dres"));
    const std::vector<float> w = f32("w"), rstd = f32("rstd");
    if (x.size() != (size_t)rows * n || dy.size() != x.size() || dres.size() != x.size() ||
        w.size() != n || rstd.size() != rows) {
        fprintf(stderr, "%s: inputs are not [rows, n], [n], [rows] for %u x %u\n", dir.c_str(), rows, n);
        exit(2);
    }
    std::vector<E> dx = nans<E>(x.size()), dx_plain = nans<E>(x.size());
    std::vector<float> partial(l.grid.x * n, NAN), partial_plain(l.grid.x * n, NAN);
    emu_launch(l, [&] {
        bwd(x.data(), w.data(), nullptr, rstd.data(), dy.data(), dres.data(), dx.data(), partial.data(), rows, n, 0);
    });
    emu_launch(l, [&] {
        bwd(x.data(), w.data(), nullptr, rstd.data(), dy.data(), nullptr, dx_plain.data(), partial_plain.data(),
            rows, n, 0);
    });
    write_f32(dir + "/emu_dx.f32", back(dx));
    write_f32(dir + "/emu_dx_plain.f32", back(dx_plain));
    write_f32(dir + "/emu_partial.f32", partial);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: norm DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    unsigned rows, n, blocks, tx, ty, vec;
    FILE* sizes = fopen((dir + "/launch").c_str(), "r");
    if (!sizes || fscanf(sizes, "%u %u %u %u %u %u", &rows, &n, &blocks, &tx, &ty, &vec) != 6) {
        fprintf(stderr, "%s/launch: expected rows n blocks threads_x threads_y vec\n", dir.c_str());
        return 2;
    }
    fclose(sizes);
    const EmuLaunch l{{blocks, 1, 1}, {tx, ty, 1}, (size_t)ty * n * 4};
    if (dtype == "bf16")
        run<bf16>(dir, rows, n, l, vec ? norm_bwd_bf16 : norm_bwd_bf16_scalar);
    else if (dtype == "f32")
        run<float>(dir, rows, n, l, vec ? norm_bwd_f32 : norm_bwd_f32_scalar);
    else {
        fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
        return 2;
    }
    return 0;
}
