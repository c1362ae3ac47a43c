//! The SwiGLU activation over rows `[gate | up]` of 2F elements (gate the first F): the forward
//! `h = silu(gate) · up` (rows of F) and the backward `dgu = [dh · up · silu'(gate) | dh ·
//! silu(gate)]`. The same formula, term for term, as `kernels/swiglu.cu`.
use super::elementwise::sigmoid;
use super::softmax::for_rows;
use super::Real;

/// `(silu(g) · u, d/dg, d/du)`: `silu'(g) = s (1 + g (1 − s))` with `s = sigmoid(g)`.
fn swiglu_at<T: Real>(g: T, u: T) -> (T, T, T) {
    let s = sigmoid(g);
    let silu = g * s;
    (silu * u, u * s * (T::one() + g * (T::one() - s)), silu)
}

/// `h [N, F]` of `gu [N, 2F]`.
pub(crate) fn swiglu<T: Real>(gu: &[T], f: usize) -> Vec<T> {
    for_rows(gu.len() / 2, f, |r, h| {
        let (gate, up) = gu[2 * f * r..2 * f * (r + 1)].split_at(f);
        for ((h, &g), &u) in h.iter_mut().zip(gate).zip(up) {
            *h = swiglu_at(g, u).0;
        }
    })
}

/// `dgu [N, 2F]` of `gu [N, 2F]` and `dh [N, F]`.
pub(crate) fn swiglu_backward<T: Real>(gu: &[T], dh: &[T], f: usize) -> Vec<T> {
    for_rows(gu.len(), 2 * f, |r, dgu| {
        let (gate, up) = gu[2 * f * r..2 * f * (r + 1)].split_at(f);
        let (dgate, dup) = dgu.split_at_mut(f);
        let dh = &dh[f * r..f * (r + 1)];
        for j in 0..f {
            let (_, d_gate, d_up) = swiglu_at(gate[j], up[j]);
            dgate[j] = dh[j] * d_gate;
            dup[j] = dh[j] * d_up;
        }
    })
}
