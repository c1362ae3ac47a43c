//! A block recomputed in the backward (activation checkpointing) gives the gradients of the
//! block recorded op by op, bit for bit, for every mixer kind, in f32 and f64 on the CPU (its
//! kernels are deterministic, so the rerun computes exactly what the first pass did); and the
//! MLP, which keeps its input and pre-activation and recomputes its norm and `silu(gate) · up`
//! in its backward, against finite differences.
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_nn::layers::basic::{RmsNorm, SwiGlu};
use swax_nn::layers::{Forms, MixerDims};
use swax_nn::{Block, Params, Weights};
use swax_tensor::{DType, Device, Tensor};

const DIMS: MixerDims = MixerDims {
    d_model: 8,
    heads: 2,
    kv_heads: 1,
    rope_theta: 10000.0,
    chunk: 4,
    out_std: 0.1,
    eps: 1e-6,
    forms: Forms::Fused,
};

/// Gradients of every parameter and of the input, in creation order, and the tape's node count
/// after the forward pass.
fn gradients(kind: char, dtype: DType, recompute: bool) -> (Vec<Vec<f64>>, usize) {
    let mut p = Params::new(3, Device::Cpu);
    // Two blocks, so that the second's input gradient flows back through the first.
    let blocks: Vec<Block> = (0..2)
        .map(|i| Block::new(&mut p, &format!("b{i}"), kind, DIMS, 12).unwrap())
        .collect();
    let x = Tensor::randn(vec![2, 8, DIMS.d_model], 1.0, 5, dtype, Device::Cpu).unwrap();
    let tape = Tape::new();
    tape.watch(&x);
    let w = Weights::training(&tape, &p, dtype).unwrap();
    let mut y = x.clone();
    for block in &blocks {
        y = match recompute {
            true => block.forward_recomputed(&w, &y, 3).unwrap(),
            false => block.forward(&w, &y, 3).unwrap(),
        };
    }
    let nodes = tape.len();
    let weights = Tensor::randn(y.shape().clone(), 1.0, 7, dtype, Device::Cpu).unwrap();
    let loss = tape.sum_all(&tape.mul(&y, &weights).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    let all = p
        .iter()
        .map(|param| &param.value)
        .chain([&x])
        .map(|t| grads.get(t).unwrap().to_f64_vec().unwrap())
        .collect();
    (all, nodes)
}

#[test]
fn recomputed_blocks_have_the_gradients_of_recorded_ones_for_every_mixer() {
    for kind in ['S', 'M', 'G', 'R', 'F'] {
        for dtype in [DType::F32, DType::F64] {
            let (again, nodes_again) = gradients(kind, dtype, true);
            let (once, nodes_once) = gradients(kind, dtype, false);
            assert_eq!(again, once, "{kind} in {dtype:?}");
            assert!(
                again.iter().all(|g| g.iter().any(|&v| v != 0.0)),
                "{kind} in {dtype:?}: every parameter gets a gradient"
            );
            // The f64 weights are casts of the f32 masters (one node each); beside those, a
            // recomputed block is one node.
            let casts = if dtype == DType::F32 {
                0
            } else {
                once[..once.len() - 1].len()
            };
            assert_eq!(nodes_again, casts + 2, "{kind} in {dtype:?}");
            assert!(nodes_once > nodes_again + 10, "{kind} in {dtype:?}");
        }
    }
}

#[test]
fn mlp_gradients_match_finite_differences() {
    // An even and an odd hidden width F (the fused SwiGLU's vector and scalar rows on the GPU).
    for hidden in [4, 3] {
        let mut p = Params::new(1, Device::Cpu);
        let norm = RmsNorm::new(&mut p, "norm", 3, 1e-6).unwrap();
        let mlp = SwiGlu::new(&mut p, "mlp", 3, hidden, 0.5).unwrap();
        let f64s = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        let mut inputs: Vec<Tensor> = p.iter().map(|param| f64s(&param.value)).collect();
        // A norm weight away from 1, so that its gradient and its effect are not trivial.
        inputs[0] = Tensor::randn(vec![3], 1.0, 4, DType::F64, Device::Cpu).unwrap();
        inputs.push(Tensor::randn(vec![2, 5, 3], 1.0, 2, DType::F64, Device::Cpu).unwrap());
        let f = |tape: &Tape, x: &[Tensor]| {
            // The weights as parameters 0 (norm), 1 (gate_up) and 2 (down), the input last.
            let w = Weights::bound(tape, x[..3].to_vec(), DType::F64);
            mlp.forward(&w, &norm, &x[3])
        };
        check(f, &inputs, Tolerance::default(), 3).unwrap();
    }
}
