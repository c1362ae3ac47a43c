//! What the GPU attention tests (SWA and RAttention) share: the cases they sweep, their bf16-rounded
//! inputs, and the comparison of GPU results with the CPU's.
use crate::relative_error;
use swax_tensor::{DType, Device, Result, Tensor};

/// The GPU multiplies bf16 tiles (probabilities, dS, features and chunk states rounded to bf16
/// before their products) with f32 accumulation; the CPU computes in f32 from the same
/// bf16-rounded inputs.
pub const TOLERANCE: f64 = 2e-2;

/// One attention shape: q `[b, t, h, d]`, k and v `[b, t, hkv, d]`, and the window.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    pub window: usize,
}

pub fn case(b: usize, t: usize, h: usize, hkv: usize, d: usize, window: usize) -> Case {
    Case {
        b,
        t,
        h,
        hkv,
        d,
        window,
    }
}

/// Every short case at the lengths `ts`: windows 1, 3, 64, 128 and 1000 (past T), grouped-query
/// ratios 1 and 4, head dims 64 and 128, batch 2.
pub fn short_cases(ts: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &t in ts {
        for window in [1, 3, 64, 128, 1000] {
            for (h, hkv) in [(2, 2), (4, 1)] {
                for d in [64, 128] {
                    cases.push(case(2, t, h, hkv, d, window));
                }
            }
        }
    }
    cases
}

/// Normal values of the given shape rounded to bf16, held in f32 on the CPU.
pub fn input(dims: Vec<usize>, std: f64, seed: u64) -> Result<Tensor> {
    Tensor::randn(dims, std, seed, DType::F32, Device::Cpu)?
        .to_dtype(DType::BF16)?
        .to_dtype(DType::F32)
}

impl Case {
    /// q, k, v and an output gradient, seeded by the case.
    pub fn inputs(&self) -> Result<[Tensor; 4]> {
        let Case {
            b, t, h, hkv, d, ..
        } = *self;
        let seed = (t * 131 + self.window * 7 + d + h) as u64;
        Ok([
            input(vec![b, t, h, d], 1.0, seed)?,
            input(vec![b, t, hkv, d], 1.0, seed + 1)?,
            input(vec![b, t, hkv, d], 1.0, seed + 2)?,
            input(vec![b, t, h, d], 1.0, seed + 3)?,
        ])
    }
}

/// ‖got − want‖ relative to ‖want‖, or to 1e-2 per element where ‖want‖ is smaller: where a
/// query sees only itself, or a linear branch sees no key, the result is zero up to rounding on
/// both devices, and the ratio of two rounding noises means nothing. `got` may be on the GPU.
pub fn error(got: &Tensor, want: &Tensor) -> Result<f64> {
    let got = got.to_device(Device::Cpu)?.to_dtype(DType::F32)?;
    let norm = want.to_f64_vec()?.iter().map(|x| x * x).sum::<f64>().sqrt();
    let floor = 1e-2 * (want.shape().numel() as f64).sqrt();
    let rel = relative_error(&got, want)?;
    let diff = if norm == 0.0 { rel } else { rel * norm };
    Ok(diff / norm.max(floor))
}

/// Asserts each of `got` within [`TOLERANCE`] of `want` (named by `names`, the case and `what`
/// in the message); returns the worst error.
pub fn assert_close(
    c: Case,
    what: &str,
    names: &[&str],
    got: &[Tensor],
    want: &[Tensor],
) -> Result<f64> {
    let mut worst = 0.0f64;
    for (name, (g, w)) in names.iter().zip(got.iter().zip(want)) {
        let err = error(g, w)?;
        assert!(
            err < TOLERANCE,
            "{c:?} {what}: {name} relative error {err:.2e}"
        );
        worst = worst.max(err);
    }
    Ok(worst)
}
