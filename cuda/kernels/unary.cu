// unary.cu: elementwise y = f(x) and the fused backward dx = dy * f'(.), f chosen by `op`.
//
// The op is a run-time argument: it is the same for every thread, so the switch costs a few
// uniform branches in kernels that are bound by memory, and one instantiation per dtype serves
// all fourteen functions. Op numbers match `UnaryOp::code` in src/kernels/unary.rs.
#include "common.cuh"

enum {
    OP_NEG = 0, OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT, OP_TANH, OP_SIGMOID, OP_SILU,
    OP_SOFTPLUS, OP_LOG_SIGMOID, OP_RELU, OP_SQUARE, OP_SCALE, OP_CLAMP
};

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
__device__ __forceinline__ float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

// a and b are the op's parameters: the factor of OP_SCALE, the bounds of OP_CLAMP.
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
        default: return quiet_nan();
    }
}

template <typename T>
__device__ void unary_fwd(const T* __restrict__ x, T* __restrict__ y, u64 n, int op, float a, float b) {
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) {
        float v[4];
        load4(x + 4 * i, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = apply_op(op, v[j], a, b);
        store4(y + 4 * i, v);
    }
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads())
        y[i] = from_float<T>(apply_op(op, to_float(x[i]), a, b));
}

// saved is x, or y when from_y != 0.
template <typename T>
__device__ void unary_bwd(const T* __restrict__ saved, const T* __restrict__ dy, T* __restrict__ dx,
                          u64 n, int op, float a, float b, int from_y) {
    const u64 nvec = n / 4;
    for (u64 i = global_thread(); i < nvec; i += grid_threads()) {
        float s[4], g[4];
        load4(saved + 4 * i, s);
        load4(dy + 4 * i, g);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            g[j] *= from_y ? deriv_from_y(op, s[j], a) : deriv_from_x(op, s[j], a, b);
        store4(dx + 4 * i, g);
    }
    for (u64 i = 4 * nvec + global_thread(); i < n; i += grid_threads()) {
        float s = to_float(saved[i]);
        float d = from_y ? deriv_from_y(op, s, a) : deriv_from_x(op, s, a, b);
        dx[i] = from_float<T>(to_float(dy[i]) * d);
    }
}

#define INSTANTIATE(NAME, T)                                                                      \
    extern "C" __global__ void unary_##NAME(const T* x, T* y, u64 n, int op, float a, float b) {  \
        unary_fwd<T>(x, y, n, op, a, b);                                                          \
    }                                                                                             \
    extern "C" __global__ void unary_bwd_##NAME(const T* saved, const T* dy, T* dx, u64 n, int op, \
                                                float a, float b, int from_y) {                   \
        unary_bwd<T>(saved, dy, dx, n, op, a, b, from_y);                                         \
    }

INSTANTIATE(f32, float)
INSTANTIATE(bf16, bf16)
