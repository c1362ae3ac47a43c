//! The CUDA sliding-window attention kernels against the CPU fused kernels: output, log-sum-exp
//! and every gradient, at lengths and windows that are not multiples of the 64-row tile (T = 1,
//! 7, 64, 1000 and more; windows 1, 3, 64, 128 and larger than T, which is full causal
//! attention), head dims 64 and 128, grouped-query ratios 1 and 4. Skips without a GPU (see
//! `swax_tests::gpu`).
use swax_nn::mixers::attention::{self, SwaBackward, SwaIn};
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::attention::{assert_close, case, input, short_cases, Case};
use swax_tests::gpu;

/// The fused kernel's o, lse, dq, dk, dv for q, k, v and the gradient `dout` of o.
fn swa(x: [&Tensor; 4], window: usize, scale: f64) -> Result<[Tensor; 5]> {
    let [q, k, v, dout] = x;
    let input = SwaIn { q, k, v };
    let out = attention::forward(&input, window, scale)?;
    let g = attention::backward(
        &SwaBackward {
            input,
            out: out.try_map(Ok)?,
            dout,
        },
        window,
        scale,
    )?;
    Ok([out.o, out.lse, g.q, g.k, g.v])
}

/// Runs one case in `dtype` on the GPU and compares with the CPU in f32; returns the worst
/// relative error over o, lse, dq, dk, dv.
fn check(c: Case, dtype: DType, gpu: Device) -> Result<f64> {
    let [q, k, v, dout] = c.inputs()?;
    let (window, scale) = (c.window, 1.0 / (c.d as f64).sqrt());
    let cpu = swa([&q, &k, &v, &dout], window, scale)?;
    let on_gpu = |x: &Tensor| x.to_dtype(dtype)?.to_device(gpu);
    let (gq, gk, gv, gd) = (on_gpu(&q)?, on_gpu(&k)?, on_gpu(&v)?, on_gpu(&dout)?);
    let gpu = swa([&gq, &gk, &gv, &gd], window, scale)?;
    assert_close(
        c,
        &format!("swa {dtype:?}"),
        &["o", "lse", "dq", "dk", "dv"],
        &gpu,
        &cpu,
    )
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swa_matches_cpu_at_short_lengths() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for c in short_cases(&[1, 7, 64]) {
        let err = check(c, DType::BF16, gpu)?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swa_matches_cpu_at_long_lengths() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let cases = [
        case(1, 1000, 2, 2, 64, 1),
        case(1, 1000, 4, 1, 128, 3),
        case(1, 1000, 2, 2, 128, 64),
        case(1, 1031, 4, 1, 64, 128),
        case(1, 1500, 2, 2, 128, 200),
        case(1, 1000, 4, 1, 64, 4096),
        case(1, 2100, 2, 2, 128, 3000),
        // Every key tile of a block's walk adds to dQ of a query tile that others add to too,
        // for four heads of a group and both 64-column halves of D = 128, two sequences.
        case(2, 777, 4, 1, 128, 700),
        // More 128-query tiles than an H200 has SMs (512, 640 and 144). At head dim 128 each
        // block of Hopper's persistent forward walks several, reusing its Q buffers and K/V
        // ring across tiles (the third full causal, so tiles of every length); the second, full
        // causal at head dim 64, runs swa_fwd. Hopper's persistent backward takes the cases at
        // head dim 128 with windows of 512 or more (here from the 2100-long one on) and walks
        // several key tiles a block in the first of these three, up to 288 query tiles a key
        // tile in the third (group 4).
        case(2, 4096, 8, 2, 128, 700),
        case(2, 2500, 16, 4, 64, 4096),
        case(1, 4608, 4, 1, 128, 5000),
    ];
    for c in cases {
        let err = check(c, DType::BF16, gpu)?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}

/// f32 operands go through the same bf16 tensor cores (rounded on the way in); on Hopper the
/// third takes the warp-specialised backward (window 512 or more), whose dq leaves its f32
/// accumulator as f32.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swa_takes_f32_operands() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for c in [
        case(1, 100, 4, 1, 64, 30),
        case(1, 77, 2, 2, 128, 500),
        case(1, 700, 4, 2, 128, 600),
    ] {
        check(c, DType::F32, gpu)?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swa_rejects_head_dims_without_a_kernel() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let x = input(vec![1, 8, 2, 32], 1.0, 1)?
        .to_dtype(DType::BF16)?
        .to_device(gpu)?;
    assert!(attention::forward(
        &SwaIn {
            q: &x,
            k: &x,
            v: &x
        },
        4,
        0.2
    )
    .is_err());
    Ok(())
}
