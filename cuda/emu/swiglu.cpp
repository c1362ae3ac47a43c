// swiglu.cpp: the SwiGLU kernels (cuda/kernels/swiglu.cu) in the emulator (emu.h), launched with
// the sizes tests/tests/emulated_kernels.rs wrote into DIR/launch (N F blocks threads vec: the
// Rust wrapper's `launch_shape`, vec 1 for the 16-byte-vector instantiations), on DIR/gu.f32
// [N, 2F] and DIR/dh.f32 [N, F]. Writes the forward's h and the backward's dgu and h as
// emu_h.f32, emu_dgu.f32 and emu_h_again.f32, each output filled with NaN before its kernel runs.
//     swiglu DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

// The extern "C" kernels of one instantiation.
template <typename E>
struct Kernels {
    void (*fwd)(const E*, E*, u64, u32);
    void (*bwd)(const E*, const E*, E*, E*, u64, u32);
};

template <typename E>
static void run(const std::string& dir, unsigned n, unsigned f, EmuLaunch l, Kernels<E> k) {
    const auto in = [&](const char* name) { return as<E>(read_f32(dir + "/" + name + ".f32")); };
    const std::vector<E> gu = in("gu"), dh = in("dh");
    if (gu.size() != (size_t)n * 2 * f || dh.size() != (size_t)n * f) {
        fprintf(stderr, "%s: gu or dh is not [N, 2F], [N, F] for N %u, F %u\n", dir.c_str(), n, f);
        exit(2);
    }
    std::vector<E> h = nans<E>(dh.size()), dgu = nans<E>(gu.size()), h_again = nans<E>(dh.size());
    emu_launch(l, [&] { k.fwd(gu.data(), h.data(), n, f); });
    emu_launch(l, [&] { k.bwd(gu.data(), dh.data(), dgu.data(), h_again.data(), n, f); });
    write_f32(dir + "/emu_h.f32", back(h));
    write_f32(dir + "/emu_dgu.f32", back(dgu));
    write_f32(dir + "/emu_h_again.f32", back(h_again));
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: swiglu DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    unsigned n, f, blocks, threads, vec;
    FILE* sizes = fopen((dir + "/launch").c_str(), "r");
    if (!sizes || fscanf(sizes, "%u %u %u %u %u", &n, &f, &blocks, &threads, &vec) != 5) {
        fprintf(stderr, "%s/launch: expected N F blocks threads vec\n", dir.c_str());
        return 2;
    }
    fclose(sizes);
    const EmuLaunch l{{blocks, 1, 1}, {threads, 1, 1}, 0};
    const Kernels<bf16> bf16_vec{swiglu_bf16, swiglu_bwd_bf16},
        bf16_scalar{swiglu_bf16_scalar, swiglu_bwd_bf16_scalar};
    const Kernels<float> f32_vec{swiglu_f32, swiglu_bwd_f32},
        f32_scalar{swiglu_f32_scalar, swiglu_bwd_f32_scalar};
    if (dtype == "bf16")
        run(dir, n, f, l, vec ? bf16_vec : bf16_scalar);
    else if (dtype == "f32")
        run(dir, n, f, l, vec ? f32_vec : f32_scalar);
    else {
        fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
        return 2;
    }
    return 0;
}
