//! Rotary position embedding on `[B, T, H, D]`, "rotate half" pairing: element i rotates with
//! i + D/2 by angle pos · theta^(-2i/D).
use super::softmax::for_rows;
use super::Real;
use crate::backend::RopeDims;

/// The rotation of x (`inverse`: back), plus `add` where given.
pub(crate) fn rope<T: Real>(x: &[T], d: RopeDims, inverse: bool, add: Option<&[T]>) -> Vec<T> {
    let half = d.d / 2;
    // Angles in f64 so f32 and f64 runs see the same rotation up to their own rounding.
    let freqs: Vec<f64> = (0..half)
        .map(|i| d.theta.powf(-2.0 * i as f64 / d.d as f64))
        .collect();
    let sign = if inverse { -1.0 } else { 1.0 };
    for_rows(x.len(), d.d, |r, out| {
        let pos = ((r / d.h) % d.t + d.offset) as f64;
        let row = &x[r * d.d..(r + 1) * d.d];
        for i in 0..half {
            let (sin, cos) = (pos * freqs[i]).sin_cos();
            let (s, c) = (T::of(sign * sin), T::of(cos));
            let (a, b) = (row[i], row[i + half]);
            let at = |k: usize| add.map_or(T::zero(), |add| add[r * d.d + k]);
            out[i] = a * c - b * s + at(i);
            out[i + half] = b * c + a * s + at(i + half);
        }
    })
}
