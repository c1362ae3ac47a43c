//! Sampling the next token where the logits are: for logits `[B, V]` (f32 or bf16) and a random
//! u32 `r` per row, each row's token at a temperature with top-k and top-p (nucleus) cuts, one
//! launch on CUDA (`sampling.cu`), so that a sampled decoding step reads back B ids instead of
//! B × V logits. The draw, which the CPU form below computes step by step and the kernel
//! computes with the same integers:
//!
//! 1. Rank the tokens by logit, ties to the lower index ([`key`]).
//! 2. Keep the first `top_k` (all where `top_k` is 0 or at least V).
//! 3. Weigh each kept token by `exp((logit - top) / temperature)` in f32, `top` the first's
//!    logit, as an integer with 32 fractional bits ([`weight`]: the first weighs 2^32, a token
//!    below 2^-32 of it weighs 0 and is never drawn). Integers add exactly in any order, so the
//!    kernel's parallel sums are the CPU's sums.
//! 4. With `top_p` < 1, keep the shortest run from the first whose weight reaches
//!    `ceil(top_p · total)`.
//! 5. The token is the first of the run at which the running weight exceeds
//!    `floor(r · kept / 2^32)`, `kept` the run's weight.
//!
//! The draw is the same on both devices except where the device's `expf` (within 2 ulp, not
//! always correctly rounded) gives a weight other last bits than the CPU's and that moves a
//! boundary of the run past the row's r, a chance of about one in a million a draw.
mod cuda;

use swax_tensor::cpu::{CpuStorage, Real};
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, DeviceOp, Error, Result, Tensor};

#[cfg(test)]
pub(crate) use cuda::SOURCE;

/// The cuts of a draw: a temperature above 0, top-k (0: none) and top-p in (0, 1] (1: none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cuts {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
}

/// The rank of a token: larger first; the logit's bits made ordered as an unsigned integer, then
/// the index reversed, so equal logits rank the lower index first.
pub fn key(logit: f32, index: usize) -> u64 {
    let bits = logit.to_bits();
    let ordered = if bits >> 31 == 1 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    (u64::from(ordered) << 32) | u64::from(u32::MAX - index as u32)
}

/// A kept token's weight: `exp((logit - top) / temperature)` with 32 fractional bits.
pub fn weight(logit: f32, top: f32, temperature: f32) -> u64 {
    (((logit - top) / temperature).exp() * 4_294_967_296.0f32) as u64
}

/// How much of `total` the nucleus must reach: `ceil(top_p · total)`, at least 1.
fn reach(top_p: f32, total: u64) -> u64 {
    ((f64::from(top_p) * total as f64).ceil() as u64).clamp(1, total.max(1))
}

/// The token of one row of logits for the random `r` (the CPU form of the draw).
pub fn pick_row(logits: &[f32], r: u32, cuts: &Cuts) -> u32 {
    let mut ranked: Vec<(u64, u32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (key(l, i), i as u32))
        .collect();
    ranked.sort_unstable_by_key(|&(key, _)| std::cmp::Reverse(key));
    let first = ranked[0].1;
    if cuts.top_k != 0 && cuts.top_k < ranked.len() {
        ranked.truncate(cuts.top_k);
    }
    let top = logits[first as usize];
    let weights: Vec<u64> = ranked
        .iter()
        .map(|&(_, i)| weight(logits[i as usize], top, cuts.temperature))
        .collect();
    let mut run = weights.len();
    if cuts.top_p < 1.0 {
        let need = reach(cuts.top_p, weights.iter().sum());
        let mut acc = 0;
        run = weights
            .iter()
            .position(|&w| {
                acc += w;
                acc >= need
            })
            .map_or(run, |i| i + 1);
    }
    let kept: u64 = weights[..run].iter().sum();
    if kept == 0 {
        return first;
    }
    let target = ((u128::from(kept) * u128::from(r)) >> 32) as u64;
    let mut acc = 0;
    for (&w, &(_, i)) in weights.iter().zip(&ranked) {
        acc += w;
        if acc > target {
            return i;
        }
    }
    unreachable!("the run's weight exceeds every target")
}

/// Each row's token of `logits` `[B, V]` (f32 or bf16) for the random `r` `[B]` (u32): ids
/// `[B]` (u32), on the logits' device.
pub fn sample(logits: &Tensor, r: &Tensor, cuts: &Cuts) -> Result<Tensor> {
    let op = SampleOp::NAME;
    let &[b, v] = logits.dims() else {
        return Err(Error::Invalid {
            op,
            msg: format!("logits must be [B, V], got {}", logits.shape()),
        });
    };
    if !matches!(logits.dtype(), DType::F32 | DType::BF16) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: logits.dtype(),
        });
    }
    if r.dims() != [b] || r.dtype() != DType::U32 {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "r must be one u32 per row, [{b}], got {} {}",
                r.dtype(),
                r.shape()
            ),
        });
    }
    let cut_ok = cuts.temperature > 0.0
        && cuts.temperature.is_finite()
        && cuts.top_p > 0.0
        && cuts.top_p <= 1.0;
    if !cut_ok || v == 0 || v > u32::MAX as usize {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "needs a temperature > 0, top_p in (0, 1] and 1 <= V < 2^32: {cuts:?}, V {v}"
            ),
        });
    }
    Tensor::apply(&SampleOp { cuts: *cuts, b, v }, &SampleIn { logits, r })
}

/// The operands: logits `[B, V]`, r `[B]`.
#[derive(Clone, Debug)]
pub struct SampleIn<T = Tensor> {
    pub logits: T,
    pub r: T,
}

swax_tensor::operands!(SampleIn { logits, r });

struct SampleOp {
    cuts: Cuts,
    b: usize,
    v: usize,
}

impl DeviceOp for SampleOp {
    const NAME: &'static str = "sample";
    type In = SampleIn;
    type Out = Tensor;

    fn cpu(&self, x: SampleIn<&CpuStorage>) -> Result<Tensor> {
        let logits = f32::read(Self::NAME, x.logits)?;
        let r = x.r.ids(Self::NAME)?;
        let ids: Vec<u32> = logits
            .chunks(self.v)
            .zip(r)
            .map(|(row, &r)| pick_row(row, r, &self.cuts))
            .collect();
        Tensor::from_storage(CpuStorage::U32(ids), vec![self.b])
    }

    fn cuda(&self, x: SampleIn<&CudaStorage>) -> Result<Tensor> {
        let ids = cuda::sample(x.logits.buffer(), x.r.buffer(), self.v, &self.cuts)?;
        Tensor::from_storage(ids, vec![self.b])
    }
}
