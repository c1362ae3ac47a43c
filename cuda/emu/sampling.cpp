// sampling.cpp: the draw (nn/src/sampling/sampling.cu) in the emulator (emu.h), on the inputs
// that tests/tests/emulated_kernels.rs wrote into DIR: logits.f32 (B rows of V), r.u32 (B raw
// little-endian u32) and dims (B V top_k top_p temperature). Runs a block of SAMPLE_THREADS per
// row, as sampling/cuda.rs launches it, and writes the tokens to DIR/emu_ids.u32.
//     sampling DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

template <typename E>
static void run(const std::string& dir, unsigned b, unsigned v, unsigned top_k, float top_p, float temperature) {
    const auto logits = as<E>(read_f32(dir + "/logits.f32"));
    std::vector<unsigned> r(b), ids(b, 0xffffffffu);
    FILE* f = fopen((dir + "/r.u32").c_str(), "rb");
    if (!f || fread(r.data(), 4, b, f) != b) {
        fprintf(stderr, "%s/r.u32: expected %u u32\n", dir.c_str(), b);
        exit(2);
    }
    fclose(f);
    const EmuLaunch grid{{b, 1, 1}, {SAMPLE_THREADS, 1, 1}, 0};
    emu_launch(grid, [&] { sample<E>(logits.data(), r.data(), ids.data(), v, top_k, top_p, temperature); });
    FILE* o = fopen((dir + "/emu_ids.u32").c_str(), "wb");
    fwrite(ids.data(), 4, b, o);
    fclose(o);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sampling DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    unsigned b = 0, v = 0, top_k = 0;
    float top_p = 0, temperature = 0;
    FILE* f = fopen((dir + "/dims").c_str(), "r");
    if (!f || fscanf(f, "%u %u %u %f %f", &b, &v, &top_k, &top_p, &temperature) != 5) {
        fprintf(stderr, "%s/dims: expected B V top_k top_p temperature\n", dir.c_str());
        return 2;
    }
    fclose(f);
    if (dtype == "bf16") {
        run<bf16>(dir, b, v, top_k, top_p, temperature);
    } else {
        run<float>(dir, b, v, top_k, top_p, temperature);
    }
    return 0;
}
