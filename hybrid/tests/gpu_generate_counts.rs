//! What a greedy decoding step asks of the GPU, for a model with every bounded mixer on the step
//! path: at most one host sync (reading back the B token ids the device's argmax picked) and
//! B × 4 bytes read back. Alone in its binary, as the counts are process-wide. Ignored unless
//! asked for (`--include-ignored`), like every GPU test; then skips without a GPU.
mod common;

use common::micro;
use swax_hybrid::generate::{generate_profiled, Request, Sampling};
use swax_hybrid::model::Model;
use swax_tensor::DType;

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn a_greedy_step_syncs_the_host_at_most_once() {
    let Some(gpu) = swax_tests::gpu() else {
        return;
    };
    let sets = ["model.d_model=128", "model.n_heads=2", "model.d_ff=128"];
    let model = Model::new(&micro("SMGR", 1, &sets).model, 7, gpu).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 255).collect();
    let batch = 4;
    let req = Request {
        max_tokens: 24,
        sampling: Sampling::GREEDY,
        batch,
        window: 16,
        piece: 24,
        stop: None,
    };
    let (_, p) =
        generate_profiled(&model, &prompt, &req, DType::BF16, gpu, &mut |_, _| {}).unwrap();
    eprintln!("{}", p.per_step());
    assert_eq!(p.steps, 23);
    assert!(p.gpu.syncs <= p.steps, "{}", p.per_step());
    assert_eq!(p.read_back_bytes, p.steps * 4 * batch as u64);
    assert!(p.gpu.launches > 0, "{}", p.per_step());
}
