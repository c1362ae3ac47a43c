//! Sequence mixers. Inputs are `[B, T, H, D]` unless a mixer documents otherwise.
pub mod attention;
pub mod decode;
pub mod gated_delta;
pub mod mlstm;
mod one_step;
pub mod rattention;
mod recurrent;

#[cfg(test)]
mod tests {
    use swax_cuda::kernels::compile_for_every_architecture;
    use swax_cuda::CudaError;

    /// Every fused mixer's CUDA source (and the sampled draw's) compiles for every architecture (see
    /// `compile_for_every_architecture`). Skips where libnvrtc is missing (`.ci/run` installs
    /// it), fails there under SWAX_REQUIRE_CUDA=1 like every GPU test.
    #[test]
    fn every_mixer_kernel_compiles_for_every_architecture() {
        match compile_for_every_architecture(&[
            &super::attention::SOURCE,
            &super::decode::SOURCE,
            &super::gated_delta::SOURCE,
            &super::gated_delta::PARALLEL_SOURCE,
            &super::mlstm::SOURCE,
            &super::rattention::SOURCE,
            &crate::sampling::SOURCE,
        ]) {
            Err(CudaError::LibraryMissing { reason, .. })
                if std::env::var("SWAX_REQUIRE_CUDA").as_deref() != Ok("1") =>
            {
                eprintln!("skipping: {reason}");
            }
            result => result.expect("every mixer kernel compiles"),
        }
    }
}
