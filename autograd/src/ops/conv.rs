//! The causal depthwise short convolution over `[B, T, C]` (Gated DeltaNet's, kernel 4): one
//! node on the fused kernel, and the SiLU that follows it in the layer.
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    /// `y[b, t, c] = bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]`, weights `[C, K]`, bias
    /// `[C]` optional; steps before 0 are zeros.
    pub fn short_conv(&self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let y = x.short_conv(w, bias)?;
        let (sx, sw) = (x.clone(), w.clone());
        let inputs: Vec<&Tensor> = [x, w].into_iter().chain(bias).collect();
        Ok(self.record("short_conv", &inputs, y, move |dy, needs| {
            let (dx, dw, db) = sx.short_conv_backward(&sw, dy)?;
            // Without a bias `needs` has two entries and the zip drops dbias.
            Ok([dx, dw, db]
                .into_iter()
                .zip(needs)
                .map(|(g, &need)| need.then_some(g))
                .collect())
        }))
    }

    /// `silu(short_conv(x, w, bias))`, as Gated DeltaNet applies it to q, k and v. Recomputed
    /// (see `recompute.rs`): it keeps x, and the backward convolves again (K taps a channel)
    /// rather than memory holding the convolution's output for the SiLU's backward.
    pub fn short_conv_silu(&self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let inputs: Vec<&Tensor> = [x, w].into_iter().chain(bias).collect();
        self.recompute("short_conv_silu", &inputs, |tape, xs| {
            tape.silu(&tape.short_conv(&xs[0], &xs[1], xs.get(2))?)
        })
    }
}
