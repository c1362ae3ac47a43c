//! What the mixer tests share: seeded inputs, and the check of a fused mixer against its
//! reference on values and on the gradient of every input, through a random weighted sum of
//! the output (a plain sum of a normalised output could hide a wrong backward).
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Tensor};

/// A mixer under test: its inputs in, its output out.
pub type Mixer<'a> = &'a dyn Fn(&Tape, &[Tensor]) -> Result<Tensor>;

pub fn randn(dims: &[usize], std: f64, seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), std, seed, DType::F64, Device::Cpu).unwrap()
}

/// `|a - b| <= atol + rtol · max |b|`, b being the reference and the max taken over the whole
/// tensor: an element's rounding error comes from sums of terms on the tensor's scale, so an
/// element much smaller than the rest (a near-cancellation) carries an error relative to the
/// rest, not to itself.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

/// Both sides compute in f64, in different orders (tiles, online softmax rescaling, chunk
/// states against one masked product): each rounding is ~1e-16 relative and the sums here have
/// at most ~1e4 O(1) terms, so honest differences stay near 1e-12. A wrong term, mask edge or
/// head mapping moves values by O(1e-2) or more.
pub const F64_TOL: Tol = Tol {
    atol: 1e-9,
    rtol: 1e-9,
};

/// f32 kernels against the f64 reference: f32 rounding (6e-8) accumulated over sums of up to
/// ~1e3 terms, and through exp and the RMSNorm.
pub const F32_TOL: Tol = Tol {
    atol: 2e-4,
    rtol: 2e-3,
};

/// The output and each input's gradient, as f64, of `f` at `inputs` (cast to `dtype`).
fn run(f: Mixer, inputs: &[Tensor], dtype: DType, seed: u64) -> (Vec<f64>, Vec<Vec<f64>>) {
    let tape = Tape::new();
    let xs: Vec<Tensor> = inputs.iter().map(|x| x.to_dtype(dtype).unwrap()).collect();
    xs.iter().for_each(|x| tape.watch(x));
    let out = f(&tape, &xs).unwrap();
    let weights = randn(out.dims(), 1.0, seed).to_dtype(dtype).unwrap();
    let loss = tape.sum_all(&tape.mul(&out, &weights).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    let grads = xs
        .iter()
        .map(|x| {
            grads
                .get(x)
                .expect("every input gets a gradient")
                .to_f64_vec()
                .unwrap()
        })
        .collect();
    (out.to_f64_vec().unwrap(), grads)
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: Tol) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol.atol + tol.rtol * scale,
            "{what}[{i}]: fused {g:.12e}, reference {w:.12e} (largest reference {scale:.3e})"
        );
    }
}

/// The reference in f64 against the fused mixer in f64 and in f32, on the same f64 inputs.
pub fn check_fused(fused: Mixer, reference: Mixer, inputs: &[Tensor], seed: u64) {
    let (want, want_grads) = run(reference, inputs, DType::F64, seed);
    for (dtype, tol) in [(DType::F64, F64_TOL), (DType::F32, F32_TOL)] {
        let (got, got_grads) = run(fused, inputs, dtype, seed);
        assert_close(&format!("{dtype:?} output"), &got, &want, tol);
        for (i, (g, w)) in got_grads.iter().zip(&want_grads).enumerate() {
            assert_close(&format!("{dtype:?} gradient of input {i}"), g, w, tol);
        }
    }
}
