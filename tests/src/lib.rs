//! Cross-crate properties: gradient checks, CPU/GPU parity, end-to-end training.
//!
//! This library holds what the test files share: finding the GPU (or saying why a GPU test
//! skips), comparing tensors across devices and dtypes, and the cases of the attention,
//! gated delta and mLSTM kernels.
use swax_tensor::{Device, Result, Tensor};

pub mod attention;
pub mod gated_delta;
pub mod mlstm;

/// The GPU to test on. GPU tests are `#[ignore = "needs a CUDA GPU ..."]`, so `cargo test` lists
/// them as ignored; run with `--include-ignored` and no GPU, they print why and return, and with
/// `SWAX_REQUIRE_CUDA=1` they fail instead, so a GPU run can never pass by skipping.
pub fn gpu() -> Option<Device> {
    match swax_tensor::cuda::device(0) {
        Ok(_) => Some(Device::Cuda(0)),
        Err(e) if std::env::var("SWAX_REQUIRE_CUDA").as_deref() == Ok("1") => {
            panic!("SWAX_REQUIRE_CUDA=1 but no GPU: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no CUDA device: {e}");
            None
        }
    }
}

/// ‖got − want‖ / ‖want‖ over all elements (0 for two zero tensors), or an error naming the
/// first NaN or Inf in `got`, which never passes.
pub fn relative_error(got: &Tensor, want: &Tensor) -> Result<f64> {
    let (g, w) = (got.to_f64_vec()?, want.to_f64_vec()?);
    if g.len() != w.len() {
        return Err(swax_tensor::Error::ShapeMismatch {
            op: "relative_error",
            lhs: got.shape().clone(),
            rhs: want.shape().clone(),
        });
    }
    if let Some(i) = g.iter().position(|v| !v.is_finite()) {
        return Err(swax_tensor::Error::Invalid {
            op: "relative_error",
            msg: format!("element {i} is {}", g[i]),
        });
    }
    let diff: f64 = g.iter().zip(&w).map(|(a, b)| (a - b).powi(2)).sum();
    let norm: f64 = w.iter().map(|b| b * b).sum();
    Ok(if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    })
}

/// The worst element's error against the tensor's largest value, max |got − want| / max |want|
/// (the absolute error for a zero tensor; infinity for a NaN or Inf in `got`): an error confined
/// to a few elements (one chunk, one gate) that [`relative_error`] averages away.
pub fn worst_element_error(got: &Tensor, want: &Tensor) -> Result<f64> {
    let (g, w) = (got.to_f64_vec()?, want.to_f64_vec()?);
    let mut worst = 0.0f64;
    let mut scale = 0.0f64;
    for (a, b) in g.iter().zip(&w) {
        worst = worst.max(if a.is_finite() {
            (a - b).abs()
        } else {
            f64::INFINITY
        });
        scale = scale.max(b.abs());
    }
    Ok(if scale > 0.0 { worst / scale } else { worst })
}
