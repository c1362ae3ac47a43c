// decode.cpp: the decoding kernels (nn/src/mixers/decode/decode.cu) in the emulator (emu.h), on
// the inputs that tests/tests/emulated_kernels.rs wrote into DIR as raw f32 files. DIR/dims
// names the kernel and its sizes: `gdn B H Dk Dv K` or `mlstm B H Dk Dv K` (inputs x, w, tail,
// the two gates a and b, the state c, and for the mLSTM n and m; writes emu_out, emu_tail,
// emu_c, and emu_n, emu_m), `attend B H Hkv D S N PER` (inputs q, k, v; writes emu_out; the
// keys in ranges of PER, as cuda.rs splits them), `rla B H Hkv D S SLOT` (inputs q, k, v and
// the state c; writes emu_out, emu_c), or `split_rope B H Hkv D POS 0` (input qkv, theta 10000;
// writes emu_q, emu_k, emu_v). Blocks of DECODE_THREADS, one per row and head (row and kv
// head for rla; row, head and range for attend_part), with the shared memory cuda.rs asks for.
//     decode DIR bf16|f32
#include "kernels.cpp"  // the kernel sources as C++ over emu.h, written by the test
#include "io.h"

#include <string>

template <typename E>
static void run(const std::string& dir, const std::string& kind, const unsigned (&a)[7]) {
    const auto in = [&](const char* x) { return as<E>(read_f32(dir + "/" + x + ".f32")); };
    const auto f32 = [&](const char* x) { return read_f32(dir + "/" + x + ".f32"); };
    const auto out = [&](const char* x, const auto& v) { write_f32(dir + "/emu_" + x + ".f32", back(v)); };
    if (kind == "attend") {
        const unsigned b = a[0], h = a[1], hkv = a[2], d = a[3], slots = a[4], n = a[5], per = a[6];
        const unsigned ranges = (n + per - 1) / per;
        const auto q = in("q"), k = in("k"), v = in("v");
        auto o = nans<E>((size_t)b * h * d);
        std::vector<float> part((size_t)b * h * ranges * (d + 2), NAN);
        const EmuLaunch parts{{b * h, ranges, 1}, {DECODE_THREADS, 1, 1}, 4 * (d + DECODE_TILE + DECODE_THREADS)};
        const float scale = 1.0f / sqrtf((float)d);
        emu_launch(parts, [&] {
            attend_part<E>(q.data(), k.data(), v.data(), part.data(), h, hkv, d, slots, n, per, scale);
        });
        const EmuLaunch join{{b * h, 1, 1}, {DECODE_THREADS, 1, 1}, 0};
        emu_launch(join, [&] { attend_join<E>(part.data(), o.data(), d, ranges); });
        out("out", o);
        return;
    }
    if (kind == "split_rope") {
        const unsigned b = a[0], h = a[1], hkv = a[2], d = a[3], pos = a[4];
        const auto qkv = in("qkv");
        auto q = nans<E>((size_t)b * h * d), k = nans<E>((size_t)b * hkv * d), v = nans<E>((size_t)b * hkv * d);
        const unsigned pairs = b * (h + 2 * hkv) * d / 2;
        const EmuLaunch grid{{(pairs + DECODE_THREADS - 1) / DECODE_THREADS, 1, 1}, {DECODE_THREADS, 1, 1}, 0};
        emu_launch(grid, [&] {
            split_rope<E>(qkv.data(), q.data(), k.data(), v.data(), b, h, hkv, d / 2, (i64)pos, 10000.0);
        });
        out("q", q);
        out("k", k);
        out("v", v);
        return;
    }
    if (kind == "rla") {
        const unsigned b = a[0], h = a[1], hkv = a[2], d = a[3], slots = a[4], slot = a[5], g = h / hkv;
        const auto q = in("q"), k = in("k"), v = in("v");
        const auto c = f32("c");
        auto o = nans<E>((size_t)b * h * d);
        std::vector<float> c_out(c.size(), NAN);
        const EmuLaunch grid{{b * hkv, 1, 1}, {DECODE_THREADS, 1, 1}, 4 * (2 * d + g * 2 * d + d + g * d)};
        emu_launch(grid, [&] {
            rla_step<E>(q.data(), k.data(), v.data(), c.data(), o.data(), c_out.data(), h, hkv, d, slots, slot);
        });
        out("out", o);
        out("c", c_out);
        return;
    }
    const unsigned b = a[0], h = a[1], dk = a[2], dv = a[3], taps = a[4];
    const auto x = in("x"), w = in("w"), tail = in("tail"), ga = in("a"), gb = in("b");
    const auto c = f32("c");
    auto o = nans<E>((size_t)b * h * dv), tail_out = nans<E>(tail.size());
    std::vector<float> c_out(c.size(), NAN);
    const EmuLaunch grid{{b * h, 1, 1}, {DECODE_THREADS, 1, 1}, 4 * (2 * dk + dv)};
    if (kind == "gdn") {
        emu_launch(grid, [&] {
            gated_delta_step<E>(x.data(), w.data(), tail.data(), ga.data(), gb.data(), c.data(), o.data(),
                                tail_out.data(), c_out.data(), h, dk, dv, taps);
        });
    } else {
        const auto n = f32("n"), m = f32("m");
        std::vector<float> n_out(n.size(), NAN), m_out(m.size(), NAN);
        emu_launch(grid, [&] {
            mlstm_step<E>(x.data(), w.data(), tail.data(), ga.data(), gb.data(), c.data(), n.data(), m.data(),
                          o.data(), tail_out.data(), c_out.data(), n_out.data(), m_out.data(), h, dk, dv, taps,
                          1e-6f);
        });
        out("n", n_out);
        out("m", m_out);
    }
    out("out", o);
    out("tail", tail_out);
    out("c", c_out);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: decode DIR bf16|f32\n");
        return 2;
    }
    const std::string dir = argv[1], dtype = argv[2];
    char kind[16];
    unsigned a[7] = {};
    FILE* f = fopen((dir + "/dims").c_str(), "r");
    const int got = f ? fscanf(f, "%15s %u %u %u %u %u %u %u", kind, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6]) : 0;
    if (got < 7 || (std::string(kind) == "attend" && got < 8)) {
        fprintf(stderr, "%s/dims: expected gdn|mlstm B H Dk Dv K, attend B H Hkv D S N PER, rla B H Hkv D S SLOT or split_rope B H Hkv D POS 0\n", dir.c_str());
        return 2;
    }
    fclose(f);
    if (dtype == "bf16") {
        run<bf16>(dir, kind, a);
    } else {
        run<float>(dir, kind, a);
    }
    return 0;
}
