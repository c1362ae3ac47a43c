//! RAttention on CUDA against the CPU fused kernels. The linear branch alone (`rla`, its output
//! and dq, dk, dv, the backward with the forward's features and with its own) at lengths and windows that are not multiples of the 64-step chunk (T = 1, 7,
//! 64, 1000 and more; windows 1, 3, 64, 128 and larger than T, where the branch sees nothing),
//! head dims 64 and 128, grouped-query ratios 1 and 4; then the whole fused RAttention node (SWA
//! with RoPE, the linear branch, both RMSNorms, the sum): output and the gradients of q, k, v
//! and both norm scales. Skips without a GPU (see `swax_tests::gpu`).
use swax_autograd::Tape;
use swax_nn::mixers::attention::SwaIn;
use swax_nn::mixers::rattention::{self, node, Config, Features, RlaBackward};
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::attention::{assert_close, case, input, short_cases, Case};
use swax_tests::gpu;

/// The linear branch's fused kernel: o, dq, dk, dv for q, k, v and the gradient `dout` of o,
/// the backward reading the features the forward kept. Where it kept them (CUDA), a backward
/// that makes its own must give the same gradients, bit for bit.
fn rla(x: [&Tensor; 4], window: usize, chunk: usize) -> Result<[Tensor; 4]> {
    let [q, k, v, dout] = x;
    let input = SwaIn { q, k, v };
    let (o, features) = rattention::forward_keeping_features(&input, window, chunk)?;
    let backward = |features: Option<Features<&Tensor>>| {
        let x = RlaBackward {
            input: input.clone(),
            dout,
            features,
        };
        rattention::backward(&x, window, chunk)
    };
    let g = backward(features.as_ref().map(|f| Features { q: &f.q, k: &f.k }))?;
    if features.is_some() {
        let own = backward(None)?;
        for (name, a, b) in [
            ("dq", &g.q, &own.q),
            ("dk", &g.k, &own.k),
            ("dv", &g.v, &own.v),
        ] {
            let (a, b) = (a.to_f64_vec()?, b.to_f64_vec()?);
            assert!(
                a == b,
                "{name}: the kept features give other gradients than the backward's own"
            );
        }
    }
    Ok([o, g.q, g.k, g.v])
}

/// The linear branch in `dtype` on the GPU against the CPU in f32; the worst relative error over
/// o, dq, dk, dv. The chunk sizes differ on purpose (the GPU runs chunks of 64 whatever it is
/// given; the CPU takes 16): every chunk size gives the same values.
fn check_rla(c: Case, dtype: DType, gpu: Device) -> Result<f64> {
    let [q, k, v, dout] = c.inputs()?;
    let w = c.window;
    let [o, dq, dk, dv] = rla([&q, &k, &v, &dout], w, 16)?;
    let on_gpu = |x: &Tensor| x.to_dtype(dtype)?.to_device(gpu);
    let (gq, gk, gv, gd) = (on_gpu(&q)?, on_gpu(&k)?, on_gpu(&v)?, on_gpu(&dout)?);
    let [go, gdq, gdk, gdv] = rla([&gq, &gk, &gv, &gd], w, 64)?;
    assert_eq!(go.dtype(), dtype);
    assert_close(
        c,
        &format!("rla {dtype:?}"),
        &["o", "dq", "dk", "dv"],
        &[go, gdq, gdk, gdv],
        &[o, dq, dk, dv],
    )
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rla_matches_cpu_at_short_lengths() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for c in short_cases(&[1, 7, 64, 200]) {
        let err = check_rla(c, DType::BF16, gpu)?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rla_matches_cpu_at_long_lengths() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let cases = [
        case(1, 1000, 2, 2, 64, 1),
        case(1, 1000, 4, 1, 128, 3),
        case(2, 1000, 2, 2, 128, 64),
        case(1, 1031, 4, 1, 64, 128),
        case(1, 1500, 8, 2, 128, 200),
        case(1, 1000, 4, 1, 64, 4096),
        case(1, 2100, 2, 2, 128, 512),
    ];
    for c in cases {
        let err = check_rla(c, DType::BF16, gpu)?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}

/// f32 operands go through the same bf16 tensor cores (rounded on the way in).
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rla_takes_f32_operands() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    for c in [case(1, 100, 4, 1, 64, 30), case(1, 300, 2, 2, 128, 5)] {
        check_rla(c, DType::F32, gpu)?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rla_rejects_head_dims_without_a_kernel() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let x = input(vec![1, 80, 2, 32], 1.0, 1)?
        .to_dtype(DType::BF16)?
        .to_device(gpu)?;
    assert!(rattention::forward(
        &SwaIn {
            q: &x,
            k: &x,
            v: &x
        },
        4,
        64
    )
    .is_err());
    Ok(())
}

/// The fused RAttention node's output and the gradients of `sum(out * weights)` with respect to
/// q, k, v and both norm scales. On the GPU everything is bf16, as in a model (its `Weights` cast
/// the scales to the activations' dtype).
fn rattention(inputs: &[Tensor], weights: &Tensor, cfg: &Config) -> Result<Vec<Tensor>> {
    let tape = Tape::new();
    inputs.iter().for_each(|x| tape.watch(x));
    let [q, k, v, ns, nr] = inputs else {
        unreachable!("five inputs")
    };
    let out = node::rattention(&tape, q, k, v, ns, nr, cfg)?;
    let loss = tape.sum_all(&tape.mul(&out, weights)?)?;
    let grads = tape.backward(&loss)?;
    let mut all = vec![out];
    for x in inputs {
        all.push(grads.get(x).cloned().expect("every input has a gradient"));
    }
    Ok(all)
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rattention_node_matches_cpu() -> Result<()> {
    let Some(gpu) = gpu() else { return Ok(()) };
    let cases = [
        case(2, 7, 4, 1, 64, 3),
        case(2, 300, 4, 1, 64, 64),
        case(1, 1100, 2, 2, 128, 128),
        case(1, 100, 2, 2, 128, 1000),
    ];
    for c in cases {
        let [q, k, v, _] = c.inputs()?;
        // Scales around 1, rounded to bf16 so that both devices see the same values.
        let scale = |seed| {
            input(vec![c.d], 0.3, seed)?
                .add_scalar(1.0)?
                .to_dtype(DType::BF16)?
                .to_dtype(DType::F32)
        };
        let (ns, nr) = (scale(5)?, scale(6)?);
        let weights = input(vec![c.b, c.t, c.h, c.d], 1.0, 7)?;
        let cfg = Config::new(c.window);
        let want = rattention(
            &[q.clone(), k.clone(), v.clone(), ns.clone(), nr.clone()],
            &weights,
            &cfg,
        )?;
        let bf = |x: &Tensor| x.to_dtype(DType::BF16)?.to_device(gpu);
        let got = rattention(
            &[bf(&q)?, bf(&k)?, bf(&v)?, bf(&ns)?, bf(&nr)?],
            &bf(&weights)?,
            &cfg,
        )?;
        let err = assert_close(
            c,
            "rattention",
            &["out", "dq", "dk", "dv", "dnorm_swa", "dnorm_rla"],
            &got,
            &want,
        )?;
        println!("{c:?}: {err:.2e}");
    }
    Ok(())
}
