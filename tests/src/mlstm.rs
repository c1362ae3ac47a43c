//! What the mLSTM's kernel tests share (on the GPU, gpu_recurrent.rs; in the CPU emulation of the
//! CUDA kernels, emulated_kernels.rs): the random inputs and output gradients of a case, and one
//! forward and backward through the fused kernel of whatever device holds them.
use swax_nn::mixers::mlstm::{self, MlstmBackward, MlstmIn, MlstmState};
use swax_tensor::{DType, Device, Result, Tensor};

/// The spreads of a case's gate preactivations: i ~ N(0, gate_std), f ~ N(forget_mean,
/// gate_std).
#[derive(Debug, Clone, Copy)]
pub struct Gates {
    pub gate_std: f64,
    pub forget_mean: f64,
}

fn randn(dims: &[usize], std: f64, seed: u64) -> Result<Tensor> {
    Tensor::randn(dims.to_vec(), std, seed, DType::F32, Device::Cpu)
}

fn shifted(dims: &[usize], std: f64, mean: f64, seed: u64) -> Result<Tensor> {
    let v: Vec<f64> = randn(dims, 1.0, seed)?
        .to_f64_vec()?
        .into_iter()
        .map(|x| x * std + mean)
        .collect();
    Tensor::from_f64s(&v, dims.to_vec(), DType::F32, Device::Cpu)
}

/// q, k `[b, t, h, dk]`, v `[b, t, h, dv]`, i and f `[b, t, h]` and the initial state C
/// `[b, h, dk, dv]`, n `[b, h, dk]`, m `[b, h]`, f32 on the CPU.
pub fn inputs(dims: [usize; 5], gates: Gates, seed: u64) -> Result<Vec<Tensor>> {
    let [b, t, h, dk, dv] = dims;
    Ok(vec![
        randn(&[b, t, h, dk], 1.0, seed)?,
        randn(&[b, t, h, dk], 1.0, seed + 1)?,
        randn(&[b, t, h, dv], 1.0, seed + 2)?,
        shifted(&[b, t, h], gates.gate_std, 0.0, seed + 3)?,
        shifted(&[b, t, h], gates.gate_std, gates.forget_mean, seed + 4)?,
        randn(&[b, h, dk, dv], 0.3, seed + 5)?,
        randn(&[b, h, dk], 0.3, seed + 6)?,
        randn(&[b, h], 1.0, seed + 7)?,
    ])
}

/// The gradients of h `[b, t, h, dv]` and of the final state (C, n, m).
pub fn output_grads(dims: [usize; 5], seed: u64) -> Result<Vec<Tensor>> {
    let [b, t, h, dk, dv] = dims;
    Ok(vec![
        randn(&[b, t, h, dv], 1.0, seed + 8)?,
        randn(&[b, h, dk, dv], 0.1, seed + 9)?,
        randn(&[b, h, dk], 0.1, seed + 10)?,
        randn(&[b, h], 0.1, seed + 11)?,
    ])
}

/// One forward and backward from the inputs and output gradients: [`OUTPUTS`], on whatever
/// device the tensors are.
pub fn run(x: &[Tensor], grads: &[Tensor], chunk: usize) -> Result<Vec<Tensor>> {
    let input = MlstmIn {
        q: &x[0],
        k: &x[1],
        v: &x[2],
        i: &x[3],
        f: &x[4],
        state: MlstmState {
            c: &x[5],
            n: &x[6],
            m: &x[7],
        },
    };
    let out = mlstm::forward(&input, chunk, mlstm::EPS)?;
    let saved = MlstmBackward {
        input,
        out: out.try_map(Ok)?,
        dh: &grads[0],
        d_final: MlstmState {
            c: &grads[1],
            n: &grads[2],
            m: &grads[3],
        },
    };
    let g = mlstm::backward(&saved, chunk, mlstm::EPS)?;
    let (st, gs) = (out.boundary, g.state);
    Ok(vec![
        out.h, st.c, st.n, st.m, out.den, g.q, g.k, g.v, g.i, g.f, gs.c, gs.n, gs.m,
    ])
}

/// The names of `run`'s results, in order.
pub const OUTPUTS: [&str; 13] = [
    "h", "c", "n", "m", "den", "dq", "dk", "dv", "di", "df", "dc0", "dn0", "dm0",
];
