// io.h: the emulator harnesses' files: raw little-endian f32 arrays, as the emulated-kernel
// tests write them, and their bf16 conversions.
#pragma once
#include <math.h>
#include <string>
#include <type_traits>
#include <vector>
#include <stdio.h>
#include <stdlib.h>

inline std::vector<float> read_f32(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path.c_str()); exit(1); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    std::vector<float> v(n);
    if (fread(v.data(), 4, n, f) != (size_t)n) exit(1);
    fclose(f);
    return v;
}
inline void write_f32(const std::string& path, const std::vector<float>& v) {
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(v.data(), 4, v.size(), f);
    fclose(f);
}
template <typename B> std::vector<B> to_bf16(const std::vector<float>& v) {
    std::vector<B> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i].bits = emu_bf16_bits(v[i]);
    return r;
}
template <typename B> std::vector<float> from_bf16(const std::vector<B>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = __uint_as_float((unsigned)v[i].bits << 16);
    return r;
}

// A harness's element type E (float, or the kernels' bf16) from f32 values, and back to f32.
template <typename E> std::vector<E> as(const std::vector<float>& x) {
    if constexpr (std::is_same_v<E, float>)
        return x;
    else
        return to_bf16<E>(x);
}
inline std::vector<float> back(const std::vector<float>& x) { return x; }
template <typename B> std::vector<float> back(const std::vector<B>& x) { return from_bf16(x); }
// An output of n elements filled with NaN before its kernel runs, so that any it leaves
// unwritten fails the comparison.
template <typename E> std::vector<E> nans(size_t n) { return as<E>(std::vector<float>(n, NAN)); }

// The sizes the Rust test writes to DIR/dims (B T H Dk Dv chunk) into a RecDims-like struct;
// a missing or short file ends the harness with a message.
template <typename Dims> Dims read_dims(const std::string& dir) {
    Dims d{};
    FILE* f = fopen((dir + "/dims").c_str(), "r");
    if (!f || fscanf(f, "%d %d %d %d %d %d", &d.b, &d.t, &d.h, &d.dk, &d.dv, &d.chunk) != 6) {
        fprintf(stderr, "%s/dims: expected B T H Dk Dv chunk\n", dir.c_str());
        exit(2);
    }
    fclose(f);
    return d;
}

// `n` numbers from the file DIR/NAME (a wrapper's launch sizes, a case's sizes), `what` saying
// what it should hold; a missing or short file ends the harness with that message.
template <typename N> std::vector<N> read_numbers(const std::string& dir, const char* name, int n, const char* what) {
    std::vector<N> v(n);
    FILE* f = fopen((dir + "/" + name).c_str(), "r");
    for (int i = 0; i < n; ++i) {
        double x;
        if (!f || fscanf(f, "%lf", &x) != 1) {
            fprintf(stderr, "%s/%s: expected %s\n", dir.c_str(), name, what);
            exit(2);
        }
        v[i] = (N)x;
    }
    fclose(f);
    return v;
}

// An attention harness's case, from its command line `NAME DIR bf16` (bf16: the kernels' only
// dtype): DIR, its sizes from DIR/dims (B T H Hkv D window), its operands q, k, v and the
// output's gradient dout (raw f32 files) as bf16, checked against the sizes, and the `nlaunch`
// launch sizes the wrapper wrote to DIR/launch. A wrong command line or file ends the harness
// with a message.
template <typename B> struct AttnCase {
    std::string dir;
    unsigned b, t, h, hkv, d, window;
    std::vector<B> q, k, v, dout;
    std::vector<unsigned> launch;
};
template <typename B> AttnCase<B> attn_case(int argc, char** argv, const char* name, int nlaunch) {
    if (argc != 3 || std::string(argv[2]) != "bf16") {
        fprintf(stderr, "usage: %s DIR bf16\n", name);
        exit(2);
    }
    const std::string dir = argv[1];
    const std::vector<unsigned> n = read_numbers<unsigned>(dir, "dims", 6, "B T H Hkv D window");
    const auto in = [&](const char* x) { return to_bf16<B>(read_f32(dir + "/" + x + ".f32")); };
    AttnCase<B> c{dir, n[0], n[1], n[2], n[3], n[4], n[5], in("q"), in("k"), in("v"), in("dout"),
                  read_numbers<unsigned>(dir, "launch", nlaunch, "the wrapper's launch sizes")};
    const size_t q = (size_t)c.b * c.t * c.h * c.d, kv = (size_t)c.b * c.t * c.hkv * c.d;
    if (c.q.size() != q || c.k.size() != kv || c.v.size() != kv || c.dout.size() != q) {
        fprintf(stderr, "%s: q, k, v, dout do not have the sizes of dims\n", dir.c_str());
        exit(2);
    }
    return c;
}
