// short_conv.cpp: the short convolution's kernels (cuda/kernels/short_conv.cu) in the emulator
// (emu.h), on the inputs that tests/tests/emulated_kernels.rs wrote into DIR: raw f32 files x, w,
// bias, dy and `dims` (B T C K, the variant: 1 for 16-byte channel groups, 0 for single
// channels, and the grid's rows of blocks). Runs the forward, dx, and the weight gradient with
// its finish in bf16 or f32 on blocks of WG_X channel groups by WG_Y runs, as short_conv.rs
// launches them, and writes emu_y, emu_dx, emu_dw, emu_db (.f32) there. The test builds it.
//     short_conv DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

struct ConvCase {
    unsigned b, t, c, k, vec, splits;
};

// f(Const<K>()) for the run-time tap count, as the wrapper picks the kernel for K.
template <typename F> static void by_taps(unsigned k, F f) {
    switch (k) {
        case 1: f(Const<1>()); break;
        case 2: f(Const<2>()); break;
        case 3: f(Const<3>()); break;
        case 4: f(Const<4>()); break;
        case 5: f(Const<5>()); break;
        case 6: f(Const<6>()); break;
        case 7: f(Const<7>()); break;
        case 8: f(Const<8>()); break;
        default: fprintf(stderr, "no kernel for %u taps\n", k); exit(2);
    }
}

template <typename E, bool VEC>
static void run(const std::string& dir, ConvCase d) {
    const auto x = as<E>(read_f32(dir + "/x.f32")), w = as<E>(read_f32(dir + "/w.f32"));
    const auto bias = as<E>(read_f32(dir + "/bias.f32")), dy = as<E>(read_f32(dir + "/dy.f32"));
    const size_t n = (size_t)d.b * d.t * d.c;
    auto y = nans<E>(n), dx = nans<E>(n), dw = nans<E>((size_t)d.c * d.k), db = nans<E>(d.c);
    std::vector<float> partial((size_t)d.splits * d.c * (d.k + 1), NAN);
    const unsigned per = VEC ? 16 / sizeof(E) : 1, tiles = (d.c / per + WG_X - 1) / WG_X, bt = d.b * d.t;
    const EmuLaunch grid{{tiles, d.splits, 1}, {WG_X, WG_Y, 1}, 0};
    by_taps(d.k, [&](auto taps) {
        constexpr int K = decltype(taps)::value;
        emu_launch(grid, [&] { Conv<E, VEC, false>{x.data(), w.data(), bias.data(), y.data(), bt, d.t, d.c}.template run<K>(); });
        emu_launch(grid, [&] { Conv<E, VEC, true>{dy.data(), w.data(), nullptr, dx.data(), bt, d.t, d.c}.template run<K>(); });
        emu_launch(grid, [&] { WeightGrad<E, VEC>{x.data(), dy.data(), partial.data(), bt, d.t, d.c}.template run<K>(); });
    });
    emu_launch({{2, 1, 1}, {64, 1, 1}, 0},
               [&] { conv_backward_finish<E>(partial.data(), dw.data(), db.data(), d.splits, d.c, d.k); });
    write_f32(dir + "/emu_y.f32", back(y));
    write_f32(dir + "/emu_dx.f32", back(dx));
    write_f32(dir + "/emu_dw.f32", back(dw));
    write_f32(dir + "/emu_db.f32", back(db));
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: short_conv DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    ConvCase d{};
    FILE* f = fopen((dir + "/dims").c_str(), "r");
    if (!f || fscanf(f, "%u %u %u %u %u %u", &d.b, &d.t, &d.c, &d.k, &d.vec, &d.splits) != 6) {
        fprintf(stderr, "%s/dims: expected B T C K vec splits\n", dir.c_str());
        return 2;
    }
    fclose(f);
    if (dtype == "bf16") {
        d.vec ? run<bf16, true>(dir, d) : run<bf16, false>(dir, d);
    } else {
        d.vec ? run<float, true>(dir, d) : run<float, false>(dir, d);
    }
    return 0;
}
