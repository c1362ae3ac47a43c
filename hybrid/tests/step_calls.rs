//! The backend calls one training step of swax-small's structure makes (12 layers "SM", the
//! loss in 32 groups), counted on the CPU at small sizes (the counts do not depend on the
//! sizes): each call is one pass over its operands and at least one launch on the GPU, so this
//! is where a change that adds elementwise passes shows (run with --nocapture for the table).
//! It bounds the passes per layer, so that a fusion passes and a layer that grows unfused
//! elementwise work fails.
use swax_autograd::Tape;
use swax_hybrid::config::Config;
use swax_hybrid::model::Model;
use swax_nn::Weights;
use swax_tensor::{calls, DType, Device, Tensor};

#[test]
fn a_swax_small_step_makes_the_counted_binary_passes() {
    let sets: Vec<String> = [
        "model.d_model=64",
        "model.n_heads=2",
        "model.n_kv_heads=2",
        "model.d_ff=128",
        "model.vocab_size=96",
        "model.chunk=16",
        "model.loss_rows=4",
    ]
    .map(String::from)
    .into();
    let cfg = Config::resolve(Some("swax-small"), &sets).unwrap();
    let (b, t) = (2, 64);
    let model = Model::new(&cfg.model, 0, Device::Cpu).unwrap();
    let ids: Vec<u32> = (0..(b * t) as u32).map(|i| (i * 7 + 3) % 96).collect();
    let x = Tensor::from_vec(ids.clone(), vec![b as usize, t as usize], Device::Cpu).unwrap();
    let y = Tensor::from_vec(ids.clone(), vec![b as usize, t as usize], Device::Cpu).unwrap();

    let tape = Tape::new();
    let w = Weights::training(&tape, &model.params, DType::BF16).unwrap();
    calls::reset();
    let loss = model.loss(&w, &x, &y, 16).unwrap();
    tape.backward(&loss).unwrap();
    let step = calls::calls();
    for (op, c) in &step {
        println!(
            "{op:>24} {:>5} calls {:>12} bytes read",
            c.calls, c.bytes_read
        );
    }
    // A fused layer needs at most a residual add and a few gradient sums per layer (44 binary
    // passes and 19 zero fills in all when this was written), and no more zero fills than a
    // couple per layer for its accumulators.
    let layers = cfg.model.n_layers as u64;
    let calls = |op| step.get(op).copied().unwrap_or_default().calls;
    assert!(
        calls("binary") <= 4 * layers,
        "{} binary passes in a step of {layers} layers: more than 4 per layer",
        calls("binary")
    );
    assert!(
        calls("zeros") <= 2 * layers,
        "{} zero fills in a step of {layers} layers: more than 2 per layer",
        calls("zeros")
    );
}
