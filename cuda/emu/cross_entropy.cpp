// cross_entropy.cpp: the summed cross-entropy kernels (ce_summed, ce_sum_into in
// cuda/kernels/cross_entropy.cu) in the emulator (emu.h), launched as the Rust wrapper launches
// them (a block of ROW_BLOCK threads per row, then one block of 1024), with the sizes
// tests/tests/emulated_kernels.rs wrote into DIR/launch (rows V vec ignore threads: vec 1 for the
// 16-byte-vector instantiation), on DIR/logits.f32 [rows, V] and the u32 targets listed in
// DIR/targets. Totals start at [0.25, 3]. Writes emu_dlogits.f32 (NaN-filled before the kernel)
// and emu_totals.f32, and emu_totals_alone.f32 from a run without dlogits.
//     cross_entropy DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

template <typename E>
using Summed = void (*)(const E*, const u32*, E*, float*, u32, u32, u32*);

template <typename E>
static void run(const std::string& dir, unsigned rows, unsigned vocab, unsigned ignore, unsigned threads,
                const std::vector<u32>& targets, Summed<E> summed) {
    const std::vector<E> logits = as<E>(read_f32(dir + "/logits.f32"));
    if (logits.size() != (size_t)rows * vocab || targets.size() != rows) {
        fprintf(stderr, "%s: logits are not [%u, %u] or targets not [%u]\n", dir.c_str(), rows, vocab, rows);
        exit(2);
    }
    const EmuLaunch per_row{{rows, 1, 1}, {threads, 1, 1}, 0}, one{{1, 1, 1}, {1024, 1, 1}, 0};
    std::vector<E> dlogits = nans<E>(logits.size());
    for (bool grad : {true, false}) {
        std::vector<float> loss(rows, NAN), totals = {0.25f, 3.0f};
        u32 err = 0;
        E* d = grad ? dlogits.data() : nullptr;
        emu_launch(per_row, [&] { summed(logits.data(), targets.data(), d, loss.data(), vocab, ignore, &err); });
        emu_launch(one, [&] { ce_sum_into(loss.data(), targets.data(), totals.data(), rows, ignore); });
        if (err != 0) {
            fprintf(stderr, "%s: the kernel raised error flags %u\n", dir.c_str(), err);
            exit(1);
        }
        write_f32(dir + (grad ? "/emu_totals.f32" : "/emu_totals_alone.f32"), totals);
    }
    write_f32(dir + "/emu_dlogits.f32", back(dlogits));
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cross_entropy DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    unsigned rows, vocab, vec, ignore, threads;
    FILE* sizes = fopen((dir + "/launch").c_str(), "r");
    if (!sizes || fscanf(sizes, "%u %u %u %u %u", &rows, &vocab, &vec, &ignore, &threads) != 5) {
        fprintf(stderr, "%s/launch: expected rows V vec ignore threads\n", dir.c_str());
        return 2;
    }
    fclose(sizes);
    std::vector<u32> targets(rows);
    FILE* t = fopen((dir + "/targets").c_str(), "r");
    for (unsigned r = 0; r < rows; ++r)
        if (!t || fscanf(t, "%u", &targets[r]) != 1) {
            fprintf(stderr, "%s/targets: expected %u ids\n", dir.c_str(), rows);
            return 2;
        }
    fclose(t);
    if (dtype == "bf16")
        run<bf16>(dir, rows, vocab, ignore, threads, targets, vec ? ce_summed_bf16 : ce_summed_bf16_scalar);
    else
        run<float>(dir, rows, vocab, ignore, threads, targets, vec ? ce_summed_f32 : ce_summed_f32_scalar);
    return 0;
}
