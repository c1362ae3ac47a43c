//! The fused recurrent-mixer kernels on the GPU (mLSTM chunkwise, gated delta rule, short
//! convolution) against the CPU fused kernels, on values, boundary states and every gradient, in
//! f32 and bf16: T not a multiple of the chunk, T = 1, long T (4096) where the stabilizer
//! matters, a value dim unlike the key dim, a value dim split into tiles, f32 at odd sizes, and
//! extreme gates (no NaN or Inf).
//! Skips without a GPU (see `swax_tests::gpu`).
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::{gpu, relative_error};

/// f32 on both devices differs by summation order and exp's rounding; bf16 data is multiplied
/// on tensor cores with bf16 operands (the L x L weights and dnum rounded too), and the gates'
/// gradients sum many such terms.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        _ => 4e-2,
    }
}

fn randn(dims: &[usize], std: f64, seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), std, seed, DType::F32, Device::Cpu).unwrap()
}

/// `x · scale + shift`, elementwise, on the CPU in f32.
fn affine(x: &Tensor, scale: f64, shift: f64) -> Tensor {
    let v: Vec<f64> = x
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| v * scale + shift)
        .collect();
    Tensor::from_f64s(&v, x.dims().to_vec(), DType::F32, Device::Cpu).unwrap()
}

/// The same values as a CPU f32 reference input and a GPU input of `dtype` (rounded to it first,
/// so both sides see identical numbers).
fn pair(x: &Tensor, dtype: DType, dev: Device) -> (Tensor, Tensor) {
    let rounded = x.to_dtype(dtype).unwrap();
    (
        rounded.to_dtype(DType::F32).unwrap(),
        rounded.to_device(dev).unwrap(),
    )
}

fn check(name: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let err = relative_error(&got.to_device(Device::Cpu).unwrap(), want)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!("{name}: relative error {err:.2e}");
    assert!(err < tol, "{name}: relative error {err:.3e} > {tol:.0e}");
}

struct MlstmCase {
    b: usize,
    t: usize,
    h: usize,
    dk: usize,
    dv: usize,
    chunk: usize,
    /// Gate preactivations: i ~ N(0, gate_std), f ~ N(f_mean, gate_std).
    gate_std: f64,
    f_mean: f64,
}

fn mlstm_case(c: &MlstmCase, dtype: DType, seed: u64) -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    let (b, t, h) = (c.b, c.t, c.h);
    let raw = [
        randn(&[b, t, h, c.dk], 1.0, seed),
        randn(&[b, t, h, c.dk], 1.0, seed + 1),
        randn(&[b, t, h, c.dv], 1.0, seed + 2),
        affine(&randn(&[b, t, h], 1.0, seed + 3), c.gate_std, 0.0),
        affine(&randn(&[b, t, h], 1.0, seed + 4), c.gate_std, c.f_mean),
        randn(&[b, h, c.dk, c.dv], 0.3, seed + 5),
        randn(&[b, h, c.dk], 0.3, seed + 6),
        randn(&[b, h], 1.0, seed + 7),
    ];
    let (cpu, dvc): (Vec<Tensor>, Vec<Tensor>) = raw.iter().map(|x| pair(x, dtype, dev)).unzip();
    let eps = 1e-6;
    let run = |x: &[Tensor], grads: &[Tensor]| -> Result<Vec<Tensor>> {
        let (hh, st) = x[0].mlstm_chunkwise(
            &x[1], &x[2], &x[3], &x[4], &x[5], &x[6], &x[7], c.chunk, eps,
        )?;
        let g = x[0].mlstm_chunkwise_backward(
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            &st,
            &hh,
            &grads[0],
            [&grads[1], &grads[2], &grads[3]],
            c.chunk,
            eps,
        )?;
        Ok(vec![
            hh, st.c, st.n, st.m, g.dq, g.dk, g.dv, g.di, g.df, g.dc0, g.dn0, g.dm0,
        ])
    };
    let graw = [
        randn(&[b, t, h, c.dv], 1.0, seed + 8),
        randn(&[b, h, c.dk, c.dv], 0.1, seed + 9),
        randn(&[b, h, c.dk], 0.1, seed + 10),
        randn(&[b, h], 0.1, seed + 11),
    ];
    let (gcpu, gdev): (Vec<Tensor>, Vec<Tensor>) = graw.iter().map(|x| pair(x, dtype, dev)).unzip();
    let want = run(&cpu, &gcpu)?;
    let got = run(&dvc, &gdev)?;
    let names = [
        "h", "c", "n", "m", "dq", "dk", "dv", "di", "df", "dc0", "dn0", "dm0",
    ];
    for ((name, g), w) in names.iter().zip(&got).zip(&want) {
        let label = format!(
            "mlstm {dtype:?} B={b} T={t} H={h} Dk={} Dv={} chunk={} {name}",
            c.dk, c.dv, c.chunk
        );
        check(&label, g, w, tolerance(dtype));
    }
    Ok(())
}

const ODD_T: MlstmCase = MlstmCase {
    b: 2,
    t: 150,
    h: 3,
    dk: 64,
    dv: 128,
    chunk: 64,
    gate_std: 2.0,
    f_mean: 3.0,
};

#[test]
fn mlstm_t_not_a_multiple_of_the_chunk() -> Result<()> {
    for dtype in [DType::F32, DType::BF16] {
        mlstm_case(&ODD_T, dtype, 10)?;
    }
    Ok(())
}

#[test]
fn mlstm_single_step_and_odd_sizes() -> Result<()> {
    let one = MlstmCase {
        t: 1,
        dk: 128,
        dv: 64,
        ..ODD_T
    };
    mlstm_case(&one, DType::BF16, 20)?;
    mlstm_case(&one, DType::F32, 20)?;
    // f32 takes any head size and chunk (no tensor-core tiles).
    let odd = MlstmCase {
        t: 45,
        dk: 24,
        dv: 40,
        chunk: 13,
        ..ODD_T
    };
    mlstm_case(&odd, DType::F32, 30)
}

#[test]
fn mlstm_value_tiles() -> Result<()> {
    // A value dim too large for one block's shared memory is split into tiles, one block each
    // (bf16: 112 + 96 columns; f32: 101 + 100), their shares of dq, dk and the gates summed.
    let wide = MlstmCase {
        b: 1,
        h: 2,
        dk: 128,
        dv: 208,
        ..ODD_T
    };
    mlstm_case(&wide, DType::BF16, 60)?;
    mlstm_case(&MlstmCase { dv: 201, ..wide }, DType::F32, 60)
}

#[test]
fn mlstm_long_sequence() -> Result<()> {
    let long = MlstmCase {
        b: 1,
        t: 4096,
        h: 2,
        dk: 128,
        dv: 128,
        ..ODD_T
    };
    mlstm_case(&long, DType::BF16, 40)?;
    mlstm_case(&long, DType::F32, 40)
}

#[test]
fn mlstm_extreme_gates_stay_finite() -> Result<()> {
    let extreme = MlstmCase {
        t: 300,
        gate_std: 40.0,
        f_mean: 0.0,
        ..ODD_T
    };
    mlstm_case(&extreme, DType::BF16, 50)?;
    mlstm_case(&extreme, DType::F32, 50)
}

struct GdnCase {
    b: usize,
    t: usize,
    h: usize,
    dk: usize,
    dv: usize,
    chunk: usize,
    /// beta = sigmoid(N(beta_mean, gate_std)); log decay g = -softplus(N(g_mean, gate_std)).
    gate_std: f64,
    beta_mean: f64,
    g_mean: f64,
}

/// `f` of every element, on the CPU in f32.
fn map(x: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = x.to_f64_vec().unwrap().into_iter().map(f).collect();
    Tensor::from_f64s(&v, x.dims().to_vec(), DType::F32, Device::Cpu).unwrap()
}

fn gated_delta_case(c: &GdnCase, dtype: DType, seed: u64) -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    let (b, t, h) = (c.b, c.t, c.h);
    let softplus = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    let raw = [
        randn(&[b, t, h, c.dk], 1.0, seed),
        randn(&[b, t, h, c.dk], 1.0, seed + 1),
        randn(&[b, t, h, c.dv], 1.0, seed + 2),
        map(&randn(&[b, t, h], c.gate_std, seed + 3), |x| {
            1.0 / (1.0 + (-(x + c.beta_mean)).exp())
        }),
        map(&randn(&[b, t, h], c.gate_std, seed + 4), |x| {
            -softplus(x + c.g_mean)
        }),
        randn(&[b, h, c.dk, c.dv], 0.3, seed + 5),
    ];
    let (cpu, dvc): (Vec<Tensor>, Vec<Tensor>) = raw.iter().map(|x| pair(x, dtype, dev)).unzip();
    let run = |x: &[Tensor], grads: &[Tensor]| -> Result<Vec<Tensor>> {
        let (o, st) = x[0].gated_delta_chunkwise(&x[1], &x[2], &x[3], &x[4], &x[5], c.chunk)?;
        let g = x[0].gated_delta_chunkwise_backward(
            &x[1], &x[2], &x[3], &x[4], &st, &grads[0], &grads[1], c.chunk,
        )?;
        Ok(vec![o, st, g.dq, g.dk, g.dv, g.dbeta, g.dg, g.ds0])
    };
    let graw = [
        randn(&[b, t, h, c.dv], 1.0, seed + 8),
        randn(&[b, h, c.dk, c.dv], 0.1, seed + 9),
    ];
    let (gcpu, gdev): (Vec<Tensor>, Vec<Tensor>) = graw.iter().map(|x| pair(x, dtype, dev)).unzip();
    let want = run(&cpu, &gcpu)?;
    let got = run(&dvc, &gdev)?;
    let names = ["o", "states", "dq", "dk", "dv", "dbeta", "dg", "ds0"];
    for ((name, g), w) in names.iter().zip(&got).zip(&want) {
        let label = format!(
            "gated delta {dtype:?} B={b} T={t} H={h} Dk={} Dv={} chunk={} {name}",
            c.dk, c.dv, c.chunk
        );
        check(&label, g, w, tolerance(dtype));
    }
    Ok(())
}

const GDN_ODD_T: GdnCase = GdnCase {
    b: 2,
    t: 150,
    h: 3,
    dk: 64,
    dv: 128,
    chunk: 64,
    gate_std: 1.0,
    beta_mean: 0.0,
    g_mean: -2.0,
};

#[test]
fn gated_delta_t_not_a_multiple_of_the_chunk() -> Result<()> {
    for dtype in [DType::F32, DType::BF16] {
        gated_delta_case(&GDN_ODD_T, dtype, 110)?;
    }
    Ok(())
}

#[test]
fn gated_delta_single_step() -> Result<()> {
    let one = GdnCase {
        t: 1,
        dk: 128,
        dv: 64,
        ..GDN_ODD_T
    };
    gated_delta_case(&one, DType::BF16, 120)?;
    gated_delta_case(&one, DType::F32, 120)
}

#[test]
fn gated_delta_f32_odd_sizes() -> Result<()> {
    // f32 takes any head size and chunk (no tensor-core tiles).
    let odd = GdnCase {
        t: 45,
        dk: 24,
        dv: 40,
        chunk: 13,
        ..GDN_ODD_T
    };
    gated_delta_case(&odd, DType::F32, 130)?;
    let tiny = GdnCase {
        t: 70,
        dk: 5,
        dv: 3,
        chunk: 32,
        ..GDN_ODD_T
    };
    gated_delta_case(&tiny, DType::F32, 131)
}

#[test]
fn gated_delta_value_tiles() -> Result<()> {
    // As mlstm_value_tiles: Dv split into tiles of 112 + 96 (bf16) and 101 + 100 (f32).
    let wide = GdnCase {
        b: 1,
        h: 2,
        dk: 128,
        dv: 208,
        ..GDN_ODD_T
    };
    gated_delta_case(&wide, DType::BF16, 160)?;
    gated_delta_case(&GdnCase { dv: 201, ..wide }, DType::F32, 160)
}

#[test]
fn gated_delta_long_sequence() -> Result<()> {
    let long = GdnCase {
        b: 1,
        t: 4096,
        h: 2,
        dk: 128,
        dv: 128,
        ..GDN_ODD_T
    };
    gated_delta_case(&long, DType::BF16, 140)?;
    gated_delta_case(&long, DType::F32, 140)
}

#[test]
fn gated_delta_extreme_gates_stay_finite() -> Result<()> {
    // beta near 0 and 1, decays from ~1 to underflowing exp(G) within a chunk.
    let extreme = GdnCase {
        t: 300,
        gate_std: 30.0,
        g_mean: 0.0,
        ..GDN_ODD_T
    };
    gated_delta_case(&extreme, DType::BF16, 150)?;
    gated_delta_case(&extreme, DType::F32, 150)
}

#[test]
fn short_conv_matches_cpu() -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    for dtype in [DType::F32, DType::BF16] {
        for (b, t, c, k) in [(2, 37, 67, 4), (1, 1, 16, 3), (3, 1000, 256, 4)] {
            let raw = [
                randn(&[b, t, c], 1.0, 1),
                randn(&[c, k], 0.5, 2),
                randn(&[c], 0.5, 3),
                randn(&[b, t, c], 1.0, 4),
            ];
            let (cpu, gpu_in): (Vec<Tensor>, Vec<Tensor>) =
                raw.iter().map(|x| pair(x, dtype, dev)).unzip();
            let run = |x: &[Tensor]| -> Result<Vec<Tensor>> {
                let y = x[0].short_conv(&x[1], Some(&x[2]))?;
                let (dx, dw, db) = x[0].short_conv_backward(&x[1], &x[3])?;
                Ok(vec![y, dx, dw, db])
            };
            let (want, got) = (run(&cpu)?, run(&gpu_in)?);
            for ((name, g), w) in ["y", "dx", "dw", "dbias"].iter().zip(&got).zip(&want) {
                let label = format!("short_conv {dtype:?} B={b} T={t} C={c} K={k} {name}");
                check(&label, g, w, tolerance(dtype) / 4.0);
            }
        }
    }
    Ok(())
}
