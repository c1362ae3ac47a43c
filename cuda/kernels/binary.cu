// binary.cu: y = a (op) b elementwise for add, sub, mul, div, with numpy broadcasting.
//
// Two kernels per dtype: a vectorised one for same-shape contiguous operands, and a strided one
// where each operand has its own strides over the output shape (0 on broadcast dimensions).
// Op numbers match `BinaryOp::code` in src/kernels/binary.rs.
#include "common.cuh"

enum { OP_ADD = 0, OP_SUB, OP_MUL, OP_DIV };

__device__ __forceinline__ float binop(int op, float a, float b) {
    switch (op) {
        case OP_ADD: return a + b;
        case OP_SUB: return a - b;
        case OP_MUL: return a * b;
        case OP_DIV: return a / b;
        default: return quiet_nan();
    }
}

template <typename T>
__device__ void binary_contig(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, u64 n, int op) {
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) {
        float va[4], vb[4];
        load4(a + 4 * i, va);
        load4(b + 4 * i, vb);
#pragma unroll
        for (int j = 0; j < 4; ++j) va[j] = binop(op, va[j], vb[j]);
        store4(y + 4 * i, va);
    }
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads())
        y[i] = from_float<T>(binop(op, to_float(a[i]), to_float(b[i])));
}

// y is contiguous over p.dims; p's operand 0 is a, operand 1 is b.
template <typename T>
__device__ void binary_strided(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, TwoStrided p, int op) {
    for (u64 i = global_thread(); i < p.n; i += grid_threads()) {
        i64 oa, ob;
        two_offsets(p, i, oa, ob);
        y[i] = from_float<T>(binop(op, to_float(a[oa]), to_float(b[ob])));
    }
}

#define INSTANTIATE(NAME, T)                                                                      \
    extern "C" __global__ void binary_##NAME(const T* a, const T* b, T* y, u64 n, int op) {       \
        binary_contig<T>(a, b, y, n, op);                                                         \
    }                                                                                             \
    extern "C" __global__ void binary_strided_##NAME(const T* a, const T* b, T* y, TwoStrided p,  \
                                                     int op) {                                    \
        binary_strided<T>(a, b, y, p, op);                                                        \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
