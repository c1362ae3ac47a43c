//! Finite-difference gradient checking: the analytic gradient of every differentiable op is held
//! to central differences, in f64.
//!
//! The function under test is reduced to a scalar by a weighted sum with random weights, never a
//! plain sum: a plain sum of a normalised output (softmax rows sum to 1) has zero gradient and
//! would pass any backward.
use crate::Tape;
use swax_tensor::{DType, Device, Result, Tensor};

/// How strictly analytic and numeric gradients must agree: |a − n| <= atol + rtol·|n|.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// The finite-difference step.
    pub step: f64,
    pub atol: f64,
    pub rtol: f64,
}

impl Default for Tolerance {
    /// In f64 with a step of 1e-6, central differences have truncation error ~1e-12·|f'''| and
    /// rounding error ~1e-16·|f|/1e-6 = 1e-10·|f|; for the O(1)-valued losses of the tests both
    /// sit far below 1e-6. A gradient off by a factor of 2, a transposed one, or a missing term
    /// is off by O(|g|), far above 1e-6 + 1e-5·|g|.
    fn default() -> Self {
        Tolerance {
            step: 1e-6,
            atol: 1e-6,
            rtol: 1e-5,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GradCheckError {
    #[error("input {input}, element {index}: analytic {analytic:.9e}, numeric {numeric:.9e}")]
    Mismatch {
        input: usize,
        index: usize,
        analytic: f64,
        numeric: f64,
    },
    #[error("input {input} got no gradient although it is a float input")]
    Missing { input: usize },
    #[error(transparent)]
    Op(#[from] swax_tensor::Error),
}

/// Checks the gradient of `f` with respect to every float input. Inputs must be F64 (ids may be
/// U32: they are passed through and not differentiated).
pub fn check(
    f: impl Fn(&Tape, &[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    tol: Tolerance,
    seed: u64,
) -> std::result::Result<(), GradCheckError> {
    let tape = Tape::new();
    for x in inputs.iter().filter(|x| x.dtype() == DType::F64) {
        tape.watch(x);
    }
    let out = f(&tape, inputs)?;
    let weights = Tensor::randn(out.shape().clone(), 1.0, seed, DType::F64, Device::Cpu)?;
    let weighted = tape.mul(&out, &weights)?;
    let loss = tape.sum_all(&weighted)?;
    let grads = tape.backward(&loss)?;

    // The same scalar without a tape, for perturbed inputs.
    let value = |xs: &[Tensor]| -> Result<f64> {
        let y = f(&Tape::new(), xs)?;
        y.mul(&weights)?.sum_all()?.to_scalar()
    };
    for (i, x) in inputs.iter().enumerate() {
        if x.dtype() != DType::F64 {
            continue;
        }
        let analytic = grads
            .get(x)
            .ok_or(GradCheckError::Missing { input: i })?
            .to_f64_vec()?;
        let base = x.to_f64_vec()?;
        for j in 0..base.len() {
            let at = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += delta;
                let mut xs = inputs.to_vec();
                xs[i] = Tensor::from_f64s(&v, x.shape().clone(), DType::F64, Device::Cpu)?;
                value(&xs)
            };
            let numeric = (at(tol.step)? - at(-tol.step)?) / (2.0 * tol.step);
            let a = analytic[j];
            let fine = (a - numeric).abs() <= tol.atol + tol.rtol * numeric.abs();
            if !fine || a.is_nan() {
                return Err(GradCheckError::Mismatch {
                    input: i,
                    index: j,
                    analytic: a,
                    numeric,
                });
            }
        }
    }
    Ok(())
}
