//! Every primitive op, and xLSTM's gated head norm, on the GPU against the CPU, values and
//! gradients through the tape, in f32 and bf16, at odd sizes (not multiples of any block or
//! tile). Skips without a GPU (see `swax_tests::gpu`).
use swax_autograd::Tape;
use swax_nn::layers::output_norm::gated_head_layer_norm;
use swax_tensor::{DType, Device, Result, Shape, Tensor, UnaryOp, CAUSAL};
use swax_tests::{gpu, relative_error};

/// f32 on both devices differs by summation order only; bf16 rounds every stored value to 8
/// bits (relative 2^-9 ≈ 2e-3 each), a few roundings deep.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        _ => 2e-2,
    }
}

type Op = Box<dyn Fn(&Tape, &[Tensor]) -> Result<Tensor>>;

/// A unary op, its name, and the map that keeps inputs inside its smooth domain.
type UnaryCase = (&'static str, UnaryOp, fn(f64) -> f64);

struct Case {
    name: &'static str,
    /// CPU inputs in f32 (U32 for ids); float inputs are cast to the dtype under test.
    inputs: Vec<Tensor>,
    op: Op,
}

fn randn(dims: &[usize], seed: u64) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, DType::F32, Device::Cpu).unwrap()
}

fn mapped(dims: &[usize], seed: u64, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = randn(dims, seed)
        .to_f64_vec()
        .unwrap()
        .into_iter()
        .map(f)
        .collect();
    Tensor::from_f64s(&v, dims.to_vec(), DType::F32, Device::Cpu).unwrap()
}

fn ids(values: Vec<u32>, dims: &[usize]) -> Tensor {
    Tensor::from_vec(values, dims.to_vec(), Device::Cpu).unwrap()
}

fn case(
    name: &'static str,
    inputs: Vec<Tensor>,
    op: impl Fn(&Tape, &[Tensor]) -> Result<Tensor> + 'static,
) -> Case {
    Case {
        name,
        inputs,
        op: Box::new(op),
    }
}

fn cases() -> Vec<Case> {
    let s = [3, 37, 129];
    let away = |x: f64| x.signum() * (0.25 + x.abs());
    let pos = |x: f64| 0.3 + x.abs();
    let mut all = vec![];
    let unary: [UnaryCase; 15] = [
        ("neg", UnaryOp::Neg, std::convert::identity),
        ("exp", UnaryOp::Exp, std::convert::identity),
        ("log", UnaryOp::Log, pos),
        ("sqrt", UnaryOp::Sqrt, pos),
        ("rsqrt", UnaryOp::Rsqrt, pos),
        ("tanh", UnaryOp::Tanh, std::convert::identity),
        ("sigmoid", UnaryOp::Sigmoid, std::convert::identity),
        ("silu", UnaryOp::Silu, std::convert::identity),
        ("softplus", UnaryOp::Softplus, std::convert::identity),
        ("log_sigmoid", UnaryOp::LogSigmoid, std::convert::identity),
        ("relu", UnaryOp::Relu, away),
        ("square", UnaryOp::Square, std::convert::identity),
        ("scale", UnaryOp::Scale(-1.5), std::convert::identity),
        (
            "add_scalar",
            UnaryOp::AddScalar(0.75),
            std::convert::identity,
        ),
        ("clamp", UnaryOp::Clamp { lo: -0.5, hi: 0.5 }, |x| {
            if (x.abs() - 0.5).abs() < 0.05 {
                x * 1.3
            } else {
                x
            }
        }),
    ];
    for (name, op, domain) in unary {
        all.push(case(name, vec![mapped(&s, 1, domain)], move |t, x| {
            t.unary(&x[0], op)
        }));
    }
    let (a, row, col) = (
        randn(&s, 2),
        mapped(&[129], 3, away),
        mapped(&[3, 1, 1], 4, away),
    );
    all.push(case("add", vec![a.clone(), row.clone()], |t, x| {
        t.add(&x[0], &x[1])
    }));
    all.push(case("sub", vec![col.clone(), a.clone()], |t, x| {
        t.sub(&x[0], &x[1])
    }));
    all.push(case("mul", vec![a.clone(), col.clone()], |t, x| {
        t.mul(&x[0], &x[1])
    }));
    all.push(case("div", vec![a.clone(), row.clone()], |t, x| {
        t.div(&x[0], &x[1])
    }));
    let grid = |seed, shift: f64| mapped(&s, seed, move |v| (v * 4.0).round() / 4.0 + shift);
    all.push(case("maximum", vec![grid(5, 0.0), grid(6, 0.1)], |t, x| {
        t.maximum(&x[0], &x[1])
    }));
    let cond = Tensor::band_mask(37, 129, 40, Device::Cpu)
        .unwrap()
        .broadcast_to(s)
        .unwrap();
    all.push(case(
        "where_cond",
        vec![a.clone(), randn(&s, 7), cond],
        |t, x| t.where_cond(&x[2], &x[0], &x[1]),
    ));
    for axis in [0isize, 1, 2] {
        all.push(case("sum", vec![a.clone()], move |t, x| {
            t.sum(&x[0], axis, false)
        }));
        all.push(case("mean", vec![a.clone()], move |t, x| {
            t.mean(&x[0], axis, true)
        }));
        all.push(case("max", vec![a.clone()], move |t, x| {
            t.max(&x[0], axis, false)
        }));
        all.push(case("logsumexp", vec![a.clone()], move |t, x| {
            t.logsumexp(&x[0], axis, false)
        }));
        all.push(case("cumsum", vec![a.clone()], move |t, x| {
            t.cumsum(&x[0], axis, false)
        }));
        all.push(case("cumsum_reverse", vec![a.clone()], move |t, x| {
            t.cumsum(&x[0], axis, true)
        }));
    }
    all.push(case("softmax", vec![randn(&[5, 1001], 8)], |t, x| {
        t.softmax(&x[0])
    }));
    all.push(case("log_softmax", vec![randn(&[5, 1001], 9)], |t, x| {
        t.log_softmax(&x[0])
    }));
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = randn(if ta { &[3, 65, 33] } else { &[3, 33, 65] }, 10);
        let b = randn(if tb { &[3, 47, 65] } else { &[3, 65, 47] }, 11);
        all.push(case("matmul", vec![a.clone(), b], move |t, x| {
            t.matmul_t(&x[0], &x[1], ta, tb)
        }));
        let w = randn(if tb { &[47, 65] } else { &[65, 47] }, 12);
        all.push(case("matmul_shared", vec![a, w], move |t, x| {
            t.matmul_t(&x[0], &x[1], ta, tb)
        }));
    }
    all.push(case("reshape", vec![a.clone()], |t, x| {
        t.reshape(&x[0], [111, 129])
    }));
    all.push(case("permute", vec![a.clone()], |t, x| {
        t.permute(&x[0], &[2, 0, 1])
    }));
    all.push(case("transpose", vec![a.clone()], |t, x| {
        t.transpose(&x[0], 1, 2)
    }));
    all.push(case("narrow", vec![a.clone()], |t, x| {
        t.narrow(&x[0], 2, 5, 100)
    }));
    all.push(case("pad", vec![a.clone()], |t, x| t.pad(&x[0], 1, 3, 4)));
    all.push(case("shift", vec![a.clone()], |t, x| t.shift(&x[0], 1, 7)));
    // The parts in another order, so that each part's gradient must land in its own place.
    all.push(case("split", vec![a.clone()], |t, x| {
        let p = t.split(&x[0], -1, &[64, 1, 64])?;
        t.concat(&[&p[2], &p[0], &p[1]], -1)
    }));
    all.push(case(
        "concat",
        vec![a.clone(), randn(&[3, 5, 129], 13)],
        |t, x| t.concat(&[&x[0], &x[1]], 1),
    ));
    all.push(case("broadcast_to", vec![col.clone()], |t, x| {
        t.broadcast_to(&x[0], [2, 3, 37, 129])
    }));
    let picks: Vec<u32> = (0..50).map(|i| (i * 7 % 37) as u32).collect();
    all.push(case(
        "embedding",
        vec![randn(&[37, 129], 14), ids(picks.clone(), &[5, 10])],
        |t, x| t.embedding(&x[0], &x[1]),
    ));
    all.push(case(
        "index_select_inner",
        vec![a.clone(), ids(picks, &[50])],
        |t, x| t.index_select(&x[0], 1, &x[1]),
    ));
    all.push(case(
        "masked_fill_band",
        vec![randn(&[2, 37, 61], 15)],
        |t, x| t.masked_fill_band(&x[0], 16, -3.0),
    ));
    all.push(case(
        "masked_fill_causal",
        vec![randn(&[2, 61, 61], 16)],
        |t, x| t.masked_fill_band(&x[0], CAUSAL, -3.0),
    ));
    let w = mapped(&[129], 17, |v| 1.0 + 0.3 * v);
    all.push(case("rms_norm", vec![a.clone(), w.clone()], |t, x| {
        t.rms_norm(&x[0], &x[1], 1e-6)
    }));
    // The skip weighted apart from the norm, so x's gradient is the sum of two different ones.
    all.push(case(
        "residual_rms_norm",
        vec![a.clone(), w.clone(), randn(&s, 19)],
        |t, x| {
            let (skip, y) = t.residual_rms_norm(&x[0], &x[1], 1e-6)?;
            t.add(&t.mul(&skip, &x[2])?, &y)
        },
    ));
    // xLSTM's gated head norm (swax-nn's op, not a primitive, but a row kernel like the norms
    // around it) at the mLSTM's head width (the vector kernels) and one narrower (the scalar
    // ones), several heads, so that each row must take its own head's weight.
    for (name, d) in [("gated_head_norm", 64), ("gated_head_norm_scalar", 63)] {
        all.push(case(
            name,
            vec![
                mapped(&[2, 37, 3, d], 20, |v| 1.0 + 2.0 * v),
                mapped(&[2, 37, 3, d], 21, |v| 2.0 * v),
                mapped(&[3, d], 22, |v| 1.0 + 0.3 * v),
            ],
            |t, x| gated_head_layer_norm(t, &x[0], &x[1], &x[2], 1e-5),
        ));
    }
    all.push(case(
        "layer_norm",
        vec![a.clone(), w, randn(&[129], 18)],
        |t, x| t.layer_norm(&x[0], &x[1], &x[2], 1e-6),
    ));
    let targets: Vec<u32> = (0..37)
        .map(|i| {
            if i % 5 == 2 {
                999
            } else {
                (i * 31 % 1001) as u32
            }
        })
        .collect();
    all.push(case(
        "cross_entropy",
        vec![randn(&[37, 1001], 19), ids(targets, &[37])],
        |t, x| t.cross_entropy(&x[0], &x[1], Some(999)),
    ));
    all.push(case("rope", vec![randn(&[2, 37, 3, 64], 20)], |t, x| {
        t.rope(&x[0], 5, 10000.0)
    }));
    all.push(case("to_dtype", vec![a], |t, x| {
        let other = if x[0].dtype() == DType::F32 {
            DType::BF16
        } else {
            DType::F32
        };
        let y = t.to_dtype(&x[0], other)?;
        t.to_dtype(&y, x[0].dtype())
    }));
    all
}

/// The op's output and the gradients of `sum(out * weights)` with respect to every float input.
fn run(
    case: &Case,
    device: Device,
    dtype: DType,
    weights_seed: u64,
) -> Result<(Tensor, Vec<Tensor>)> {
    let inputs: Vec<Tensor> = case
        .inputs
        .iter()
        .map(|x| {
            let x = if x.dtype().is_float() {
                x.to_dtype(dtype)?
            } else {
                x.clone()
            };
            x.to_device(device)
        })
        .collect::<Result<_>>()?;
    let tape = Tape::new();
    let floats: Vec<&Tensor> = inputs.iter().filter(|x| x.dtype().is_float()).collect();
    floats.iter().for_each(|x| tape.watch(x));
    let out = (case.op)(&tape, &inputs)?;
    let weights = Tensor::randn(
        Shape::new(out.dims()),
        1.0,
        weights_seed,
        out.dtype(),
        Device::Cpu,
    )?
    .to_device(device)?;
    let loss = tape.sum_all(&tape.mul(&out, &weights)?)?;
    let grads = tape.backward(&loss)?;
    let grads = floats
        .iter()
        .map(|x| {
            grads
                .get(x)
                .cloned()
                .expect("every float input has a gradient")
        })
        .collect();
    Ok((out, grads))
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn every_op_matches_the_cpu_in_f32_and_bf16() {
    let Some(device) = gpu() else { return };
    let mut failures = vec![];
    for case in cases() {
        for dtype in [DType::F32, DType::BF16] {
            let outcome = (|| -> Result<Vec<f64>> {
                let (want, want_grads) = run(&case, Device::Cpu, dtype, 99)?;
                let (got, got_grads) = run(&case, device, dtype, 99)?;
                let mut errors = vec![relative_error(&got, &want)?];
                for (g, w) in got_grads.iter().zip(&want_grads) {
                    errors.push(relative_error(g, w)?);
                }
                Ok(errors)
            })();
            match outcome {
                Ok(errors) if errors.iter().all(|&e| e <= tolerance(dtype)) => {}
                Ok(errors) => failures.push(format!(
                    "{} {dtype:?}: relative errors {errors:?}",
                    case.name
                )),
                Err(e) => failures.push(format!("{} {dtype:?}: {e}", case.name)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn argmax_matches_the_cpu() {
    let Some(device) = gpu() else { return };
    let x = randn(&[7, 1003], 21);
    let want = x.argmax(1, false).unwrap().to_vec::<u32>().unwrap();
    let got = x
        .to_device(device)
        .unwrap()
        .argmax(1, false)
        .unwrap()
        .to_vec::<u32>()
        .unwrap();
    assert_eq!(got, want);
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn tensors_round_trip_through_the_gpu_and_mismatched_devices_are_errors() {
    let Some(device) = gpu() else { return };
    let x = randn(&[5, 7], 22);
    let back = x.to_device(device).unwrap().to_device(Device::Cpu).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let err = x
        .add(&x.to_device(device).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cpu") && err.contains("cuda:0"), "{err}");
    let f64s = Tensor::zeros([2], DType::F64, Device::Cpu).unwrap();
    assert!(f64s.to_device(device).is_err(), "F64 stays on the CPU");
}

/// The fused SwiGLU (`Tensor::swiglu`, `Tensor::swiglu_backward`) against the CPU's in f32 and
/// bf16: F odd or 1 (element rows), F a whole number of f32 vectors but not of bf16 ones, F a
/// whole number of both (16-byte vector rows) and the model's 2048; more rows than the kernel
/// has blocks, so that blocks walk several.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swiglu_matches_the_cpu() {
    let Some(device) = gpu() else { return };
    let mut failures = vec![];
    for (n, f) in [(3, 7), (129, 1), (300, 36), (37, 24), (5, 2048), (5000, 12)] {
        let (gu, dh) = (randn(&[n, 2 * f], 30), randn(&[n, f], 31));
        for dtype in [DType::F32, DType::BF16] {
            let outcome = (|| -> Result<Vec<f64>> {
                let run = |device| -> Result<[Tensor; 2]> {
                    let gu = gu.to_dtype(dtype)?.to_device(device)?;
                    let h = gu.swiglu()?;
                    let (dgu, h_again) =
                        gu.swiglu_backward(&dh.to_dtype(dtype)?.to_device(device)?)?;
                    // The same terms in the same order: the backward's h is the forward's.
                    assert_eq!(
                        h_again.to_f64_vec()?,
                        h.to_f64_vec()?,
                        "[{n}, 2·{f}] {dtype:?}"
                    );
                    Ok([h, dgu])
                };
                let (want, got) = (run(Device::Cpu)?, run(device)?);
                got.iter()
                    .zip(&want)
                    .map(|(g, w)| relative_error(g, w))
                    .collect()
            })();
            match outcome {
                Ok(errors) if errors.iter().all(|&e| e <= tolerance(dtype)) => {}
                Ok(errors) => failures.push(format!("[{n}, 2·{f}] {dtype:?}: {errors:?}")),
                Err(e) => failures.push(format!("[{n}, 2·{f}] {dtype:?}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The SwiGLU at N · 2F past 2^31 elements (4 GiB of bf16 gu): the last rows, whose offsets
/// need 64 bits, against the CPU's. The rows repeat a block of 64 distinct ones, so that the
/// CPU computes only those.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn swiglu_reaches_rows_past_two_to_the_31_elements() {
    let Some(device) = gpu() else { return };
    let (f, distinct) = (2048, 64);
    let n = ((1usize << 31) / (2 * f) / distinct + 1) * distinct;
    let block = randn(&[distinct, 2 * f], 32).to_dtype(DType::BF16).unwrap();
    let dh_block = randn(&[distinct, f], 33).to_dtype(DType::BF16).unwrap();
    let repeat = |t: &Tensor| -> Result<Tensor> {
        let w = t.dims()[1];
        t.to_device(device)?
            .reshape([1, distinct, w])?
            .broadcast_to([n / distinct, distinct, w])?
            .reshape([n, w])
    };
    let (gu, dh) = (repeat(&block).unwrap(), repeat(&dh_block).unwrap());
    assert!(gu.numel() > 1 << 31);
    let last = |t: &Tensor| t.narrow(0, n - distinct, distinct).unwrap();
    let h = gu.swiglu().unwrap();
    let (dgu, h_again) = gu.swiglu_backward(&dh).unwrap();
    let want_h = block.swiglu().unwrap();
    let (want_dgu, _) = block.swiglu_backward(&dh_block).unwrap();
    for (what, got, want) in [
        ("h", last(&h), &want_h),
        ("dgu", last(&dgu), &want_dgu),
        ("the backward's h", last(&h_again), &want_h),
    ] {
        let err = relative_error(&got, want).unwrap();
        assert!(
            err <= tolerance(DType::BF16),
            "{what}: relative error {err}"
        );
    }
}
