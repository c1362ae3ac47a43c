// binary.cu: y = a (op) b elementwise for add, sub, mul, div, maximum, with numpy broadcasting.
//
// Three kernels per dtype: a vectorised one for same-shape contiguous operands (the op made a
// compile-time constant by `dispatch`, so the loop has no per-element switch); a grouped one for
// broadcasts whose innermost dimension every operand walks contiguously or is broadcast along
// (a bias or a per-head weight over [B, T, H, D], a per-row gate over D); and a strided one for
// any layout, each operand with its own strides over the output shape (0 on broadcast
// dimensions). Op numbers match `BinaryOp::code` in src/kernels/binary.rs.
#include "common.cuh"

enum { OP_ADD = 0, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_COUNT };

__device__ __forceinline__ float binop(int op, float a, float b) {
    switch (op) {
        case OP_ADD: return a + b;
        case OP_SUB: return a - b;
        case OP_MUL: return a * b;
        case OP_DIV: return a / b;
        case OP_MAX: return fmaxf(a, b);
        default: return quiet_nan();
    }
}

// The same-shape loop for op O (called by `dispatch`).
template <typename T>
struct Contig {
    const T* __restrict__ a;
    const T* __restrict__ b;
    T* __restrict__ y;
    u64 n;
    template <int O>
    __device__ void operator()(Const<O>) const {
        map2(a, b, y, n, [](float p, float q) { return binop(O, p, q); });
    }
};

// A group's V elements of an operand at p: one 16-byte vector where the operand walks the group,
// else (broadcast along it) one element repeated.
template <typename T, int V>
__device__ __forceinline__ void load_group(const T* p, bool walks, float (&v)[V]) {
    if (walks) {
        load_vec(p, v);
    } else {
        const float s = to_float(*p);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = s;
    }
}

// y in groups of V = 16 / sizeof(T) consecutive elements along the innermost dimension, p the
// layout over groups (layout.rs `grouped`, offsets in elements): one decode and 16-byte accesses
// per group instead of per element, so a [B, T, H, D] by [H, D] product moves its bytes as fast
// as a same-shape one. For op O (called by `dispatch`).
template <typename T>
struct Grouped {
    const T* __restrict__ a;
    const T* __restrict__ b;
    T* __restrict__ y;
    TwoStrided p;
    bool wa, wb;  // whether a, b walk the groups (else are broadcast along them)
    template <int O>
    __device__ void operator()(Const<O>) const {
        constexpr int V = 16 / sizeof(T);
        for_each_strided(p, [&](u64 g, i64 oa, i64 ob) {
            float va[V], vb[V];
            load_group(a + oa, wa, va);
            load_group(b + ob, wb, vb);
#pragma unroll
            for (int j = 0; j < V; ++j) va[j] = binop(O, va[j], vb[j]);
            store_vec(y + g * V, va);
        });
    }
};

// y is contiguous over p.dims; p's operand 0 is a, operand 1 is b.
template <typename T>
__device__ void binary_strided(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, TwoStrided p, int op) {
    for_each_strided(p, [&](u64 i, i64 oa, i64 ob) { y[i] = from_float<T>(binop(op, to_float(a[oa]), to_float(b[ob]))); });
}

#define INSTANTIATE(NAME, T)                                                                      \
    extern "C" __global__ void binary_##NAME(const T* a, const T* b, T* y, u64 n, int op) {       \
        dispatch<OP_COUNT>(op, Contig<T>{a, b, y, n});                                           \
    }                                                                                             \
    extern "C" __global__ void binary_grouped_##NAME(const T* a, const T* b, T* y, TwoStrided p,  \
                                                     int op) {                                    \
        const u32 last = p.rank - 1;                                                              \
        dispatch<OP_COUNT>(op, Grouped<T>{a, b, y, p, p.s0[last] != 0, p.s1[last] != 0});         \
    }                                                                                             \
    extern "C" __global__ void binary_strided_##NAME(const T* a, const T* b, T* y, TwoStrided p,  \
                                                     int op) {                                    \
        binary_strided<T>(a, b, y, p, op);                                                        \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
