//! What the gated delta rule's kernel tests share (on the GPU, gpu_recurrent.rs; in the CPU
//! emulation of the CUDA kernels, emulated_kernels.rs): the random inputs and output gradients of
//! a case, with the distributions its layer gives beta and the log decay.
use swax_nn::mixers::gated_delta::{self, GatedDeltaBackward, GatedDeltaIn};
use swax_tensor::{DType, Device, Result, Tensor};

/// The spreads of a case's gates: beta = sigmoid(N(beta_mean, gate_std)) and the log decay
/// g = -softplus(N(decay_mean, gate_std)).
#[derive(Debug, Clone, Copy)]
pub struct Gates {
    pub gate_std: f64,
    pub decay_mean: f64,
    pub beta_mean: f64,
}

fn randn(dims: &[usize], std: f64, seed: u64) -> Result<Tensor> {
    Tensor::randn(dims.to_vec(), std, seed, DType::F32, Device::Cpu)
}

fn map(x: &Tensor, f: impl Fn(f64) -> f64) -> Result<Tensor> {
    let v: Vec<f64> = x.to_f64_vec()?.into_iter().map(f).collect();
    Tensor::from_f64s(&v, x.dims().to_vec(), DType::F32, Device::Cpu)
}

/// q, k `[b, t, h, dk]`, v `[b, t, h, dv]`, beta and g `[b, t, h]` and the initial state
/// `[b, h, dk, dv]`, f32 on the CPU.
pub fn inputs(dims: [usize; 5], gates: Gates, seed: u64) -> Result<Vec<Tensor>> {
    let [b, t, h, dk, dv] = dims;
    let softplus = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    Ok(vec![
        randn(&[b, t, h, dk], 1.0, seed)?,
        randn(&[b, t, h, dk], 1.0, seed + 1)?,
        randn(&[b, t, h, dv], 1.0, seed + 2)?,
        map(&randn(&[b, t, h], gates.gate_std, seed + 3)?, |x| {
            1.0 / (1.0 + (-(x + gates.beta_mean)).exp())
        })?,
        map(&randn(&[b, t, h], gates.gate_std, seed + 4)?, |x| {
            -softplus(x + gates.decay_mean)
        })?,
        randn(&[b, h, dk, dv], 0.3, seed + 5)?,
    ])
}

/// The gradients of the output `[b, t, h, dv]` and of the final state `[b, h, dk, dv]`.
pub fn output_grads(dims: [usize; 5], seed: u64) -> Result<Vec<Tensor>> {
    let [b, t, h, dk, dv] = dims;
    Ok(vec![
        randn(&[b, t, h, dv], 1.0, seed + 8)?,
        randn(&[b, h, dk, dv], 0.1, seed + 9)?,
    ])
}

/// One forward and backward from the inputs and output gradients: o, the boundary states, dq,
/// dk, dv, dbeta, dg and ds0, on whatever device the tensors are.
pub fn run(x: &[Tensor], grads: &[Tensor], chunk: usize) -> Result<Vec<Tensor>> {
    let input = GatedDeltaIn {
        q: &x[0],
        k: &x[1],
        v: &x[2],
        beta: &x[3],
        g: &x[4],
        state: &x[5],
    };
    let out = gated_delta::forward(&input, chunk)?;
    let saved = GatedDeltaBackward {
        input,
        boundary: &out.boundary,
        d_out: &grads[0],
        d_final: &grads[1],
    };
    let g = gated_delta::backward(&saved, chunk)?;
    Ok(vec![
        out.o,
        out.boundary,
        g.q,
        g.k,
        g.v,
        g.beta,
        g.g,
        g.state,
    ])
}

/// The names of `run`'s results, in order.
pub const OUTPUTS: [&str; 8] = ["o", "states", "dq", "dk", "dv", "dbeta", "dg", "ds0"];
