//! The reference mixer path (what the GPU runs until its fused kernels land) trains the same
//! model as the fused CPU path: forced with SWAX_REFERENCE_MIXERS=1 (in its own test binary, as
//! it is process-wide), the first steps' losses match the fused run's closely.
mod common;

use common::{micro, paired_losses, run};
use swax_tensor::Device;

#[test]
fn reference_and_fused_mixers_train_alike() {
    let cfg = micro("SMGRF", 3, &["train.recall_probes=0", "train.w_short=16"]);
    let (fused, reference) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    run(&cfg, fused.path(), Device::Cpu, false, None);
    std::env::set_var("SWAX_REFERENCE_MIXERS", "1");
    run(&cfg, reference.path(), Device::Cpu, false, None);
    std::env::remove_var("SWAX_REFERENCE_MIXERS");
    for (step, a, b) in paired_losses(fused.path(), reference.path(), 3) {
        assert!(
            (a - b).abs() < 1e-4 * a.abs(),
            "step {step}: fused {a}, reference {b}"
        );
    }
}
