//! The CUDA sliding-window attention kernels against the CPU fused kernels: output, log-sum-exp
//! and every gradient, at lengths and windows that are not multiples of the 64-row tile (T = 1,
//! 7, 64, 1000 and more; windows 1, 3, 64, 128 and larger than T, which is full causal
//! attention), head dims 64 and 128, grouped-query ratios 1 and 4. Skips without a GPU (see
//! `swax_tests::gpu`).
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::{gpu, relative_error};

/// The GPU multiplies bf16 tiles (probabilities and dS rounded to bf16 before their products)
/// with f32 accumulation; the CPU computes in f32 from the same bf16-rounded inputs.
const TOLERANCE: f64 = 2e-2;

/// ‖got − want‖ relative to ‖want‖, or to 1e-2 per element where ‖want‖ is smaller: where a
/// query sees only itself (T = 1, window 1) dq and dk are zero up to rounding on both devices,
/// and the ratio of two rounding noises means nothing.
fn error(got: &Tensor, want: &Tensor) -> Result<f64> {
    let norm = want.to_f64_vec()?.iter().map(|x| x * x).sum::<f64>().sqrt();
    let floor = 1e-2 * (want.shape().numel() as f64).sqrt();
    let rel = relative_error(got, want)?;
    let diff = if norm == 0.0 { rel } else { rel * norm };
    Ok(diff / norm.max(floor))
}

/// `[b, t, heads, d]` normal values rounded to bf16, held in f32 on the CPU.
fn input(b: usize, t: usize, heads: usize, d: usize, seed: u64) -> Result<Tensor> {
    Tensor::randn(vec![b, t, heads, d], 1.0, seed, DType::F32, Device::Cpu)?
        .to_dtype(DType::BF16)?
        .to_dtype(DType::F32)
}

#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    t: usize,
    h: usize,
    hkv: usize,
    d: usize,
    window: usize,
}

/// Runs one case in `dtype` on the GPU and compares with the CPU in f32; returns the worst
/// relative error over o, lse, dq, dk, dv.
fn check(c: Case, dtype: DType, gpu: Device) -> Result<f64> {
    let Case {
        b,
        t,
        h,
        hkv,
        d,
        window,
    } = c;
    let seed = (t * 131 + window * 7 + d + h) as u64;
    let q = input(b, t, h, d, seed)?;
    let k = input(b, t, hkv, d, seed + 1)?;
    let v = input(b, t, hkv, d, seed + 2)?;
    let dout = input(b, t, h, d, seed + 3)?;
    let scale = 1.0 / (d as f64).sqrt();
    let (o, lse) = q.swa(&k, &v, window, scale)?;
    let want = [o.clone(), lse.clone()]
        .into_iter()
        .chain(<[Tensor; 3]>::from(
            q.swa_backward(&k, &v, &o, &lse, &dout, window, scale)?,
        ))
        .collect::<Vec<_>>();
    let on_gpu = |x: &Tensor| x.to_dtype(dtype)?.to_device(gpu);
    let (gq, gk, gv, gd) = (on_gpu(&q)?, on_gpu(&k)?, on_gpu(&v)?, on_gpu(&dout)?);
    let (go, glse) = gq.swa(&gk, &gv, window, scale)?;
    let grads = gq.swa_backward(&gk, &gv, &go, &glse, &gd, window, scale)?;
    let got = [go, glse, grads.0, grads.1, grads.2];
    let mut worst = 0.0f64;
    for (name, (g, w)) in ["o", "lse", "dq", "dk", "dv"]
        .iter()
        .zip(got.iter().zip(&want))
    {
        let g = g.to_device(Device::Cpu)?.to_dtype(DType::F32)?;
        let err = error(&g, w)?;
        assert!(
            err < TOLERANCE,
            "{c:?} {dtype:?}: {name} relative error {err:.2e}"
        );
        worst = worst.max(err);
    }
    Ok(worst)
}

fn case(b: usize, t: usize, h: usize, hkv: usize, d: usize, window: usize) -> Case {
    Case {
        b,
        t,
        h,
        hkv,
        d,
        window,
    }
}

#[test]
fn swa_matches_cpu_at_short_lengths() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for t in [1, 7, 64] {
        for window in [1, 3, 64, 128, 1000] {
            for (h, hkv) in [(2, 2), (4, 1)] {
                for d in [64, 128] {
                    let err = check(case(2, t, h, hkv, d, window), DType::BF16, gpu)?;
                    println!("t {t} w {window} h {h}/{hkv} d {d}: {err:.2e}");
                }
            }
        }
    }
    Ok(())
}

#[test]
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
    ];
    for c in cases {
        let err = check(c, DType::BF16, gpu)?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}

/// f32 operands go through the same bf16 tensor cores (rounded on the way in).
#[test]
fn swa_takes_f32_operands() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for c in [case(1, 100, 4, 1, 64, 30), case(1, 77, 2, 2, 128, 500)] {
        check(c, DType::F32, gpu)?;
    }
    Ok(())
}

#[test]
fn swa_rejects_head_dims_without_a_kernel() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let x = input(1, 8, 2, 32, 1)?
        .to_dtype(DType::BF16)?
        .to_device(gpu)?;
    assert!(x.swa(&x, &x, 4, 0.2).is_err());
    Ok(())
}
