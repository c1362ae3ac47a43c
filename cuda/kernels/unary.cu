// unary.cu: elementwise y = f(x) and the fused backward dx = dy * f'(.), f chosen by `op`.
//
// The op is a run-time argument, turned into a compile-time one by `dispatch` once per thread:
// each op gets its own loop, free of a per-element switch (an indirect jump per element costs
// more than the function itself on bf16 data, where a thread handles 8 elements per 16 bytes).
// Op numbers match `UnaryOp::code` in src/kernels/unary.rs.
#include "common.cuh"

enum {
    OP_NEG = 0, OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT, OP_TANH, OP_SIGMOID, OP_SILU,
    OP_SOFTPLUS, OP_LOG_SIGMOID, OP_RELU, OP_SQUARE, OP_SCALE, OP_CLAMP, OP_ADD_SCALAR, OP_COUNT
};

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
__device__ __forceinline__ float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

// a and b are the op's parameters: the factor of OP_SCALE, the bounds of OP_CLAMP, the addend
// of OP_ADD_SCALAR.
__device__ __forceinline__ float apply_op(int op, float x, float a, float b) {
    switch (op) {
        case OP_NEG: return -x;
        case OP_EXP: return expf(x);
        case OP_LOG: return logf(x);
        case OP_SQRT: return sqrtf(x);
        case OP_RSQRT: return rsqrtf(x);
        case OP_TANH: return tanhf(x);
        case OP_SIGMOID: return sigmoid(x);
        case OP_SILU: return x * sigmoid(x);
        case OP_SOFTPLUS: return softplus(x);
        case OP_LOG_SIGMOID: return -softplus(-x);
        case OP_RELU: return fmaxf(x, 0.0f);
        case OP_SQUARE: return x * x;
        case OP_SCALE: return x * a;
        case OP_CLAMP: return fminf(fmaxf(x, a), b);
        case OP_ADD_SCALAR: return x + a;
        default: return quiet_nan();
    }
}

// f'(x) from the input.
__device__ __forceinline__ float deriv_from_x(int op, float x, float a, float b) {
    switch (op) {
        case OP_NEG: return -1.0f;
        case OP_EXP: return expf(x);
        case OP_LOG: return 1.0f / x;
        case OP_SQRT: return 0.5f / sqrtf(x);
        case OP_RSQRT: return -0.5f * rsqrtf(x) / x;
        case OP_TANH: { float t = tanhf(x); return 1.0f - t * t; }
        case OP_SIGMOID: { float s = sigmoid(x); return s * (1.0f - s); }
        case OP_SILU: { float s = sigmoid(x); return s * (1.0f + x * (1.0f - s)); }
        case OP_SOFTPLUS: return sigmoid(x);
        case OP_LOG_SIGMOID: return sigmoid(-x);
        case OP_RELU: return x > 0.0f ? 1.0f : 0.0f;
        case OP_SQUARE: return 2.0f * x;
        case OP_SCALE: return a;
        case OP_CLAMP: return (x >= a && x <= b) ? 1.0f : 0.0f;
        case OP_ADD_SCALAR: return 1.0f;
        default: return quiet_nan();
    }
}

// f'(x) from the output y = f(x), for the ops where that is exact (the wrapper refuses the
// others: silu, square, clamp).
__device__ __forceinline__ float deriv_from_y(int op, float y, float a) {
    switch (op) {
        case OP_NEG: return -1.0f;
        case OP_EXP: return y;
        case OP_LOG: return expf(-y);
        case OP_SQRT: return 0.5f / y;
        case OP_RSQRT: return -0.5f * y * y * y;
        case OP_TANH: return 1.0f - y * y;
        case OP_SIGMOID: return y * (1.0f - y);
        case OP_SOFTPLUS: return -expm1f(-y);      // sigmoid(x) = 1 - exp(-softplus(x))
        case OP_LOG_SIGMOID: return -expm1f(y);    // 1 - sigmoid(x) = 1 - exp(log_sigmoid(x))
        case OP_RELU: return y > 0.0f ? 1.0f : 0.0f;
        case OP_SCALE: return a;
        case OP_ADD_SCALAR: return 1.0f;
        default: return quiet_nan();
    }
}

// The loops, one per op O (called by `dispatch`). saved is x, or y when from_y != 0.
template <typename T>
struct Unary {
    const T* __restrict__ x;
    T* __restrict__ y;
    u64 n;
    float a, b;
    template <int O>
    __device__ void operator()(Const<O>) const {
        const float a = this->a, b = this->b;
        map1(x, y, n, [=](float v) { return apply_op(O, v, a, b); });
    }
};
template <typename T>
struct UnaryBwd {
    const T* __restrict__ saved;
    const T* __restrict__ dy;
    T* __restrict__ dx;
    u64 n;
    float a, b;
    int from_y;
    template <int O>
    __device__ void operator()(Const<O>) const {
        const float a = this->a, b = this->b;
        if (from_y)
            map2(saved, dy, dx, n, [=](float s, float g) { return g * deriv_from_y(O, s, a); });
        else
            map2(saved, dy, dx, n, [=](float s, float g) { return g * deriv_from_x(O, s, a, b); });
    }
};

#define INSTANTIATE(NAME, T)                                                                      \
    extern "C" __global__ void unary_##NAME(const T* x, T* y, u64 n, int op, float a, float b) {  \
        dispatch<OP_COUNT>(op, Unary<T>{x, y, n, a, b});                                          \
    }                                                                                             \
    extern "C" __global__ void unary_bwd_##NAME(const T* saved, const T* dy, T* dx, u64 n, int op, \
                                                float a, float b, int from_y) {                   \
        dispatch<OP_COUNT>(op, UnaryBwd<T>{saved, dy, dx, n, a, b, from_y});                      \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
