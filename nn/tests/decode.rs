//! The decoding steps (`mixers::decode`) on the CPU against the forms they stand in for: T
//! tokens stepped one by one through the mLSTM's and the gated delta rule's step give the
//! outputs and final state of the short convolution and the chunkwise kernel over all T; one
//! query attending to its window's cached keys gives the last row of sliding-window attention
//! over the whole sequence, whatever the order of the cache's slots; attention's step input is
//! rotated as the sequence's token at its position; RAttention's linear branch
//! stepped over a ring of the window's keys gives each row of the branch over the whole sequence.
use swax_autograd::Tape;
use swax_nn::mixers::decode::{self, AttendIn, ConvStep, GatedDeltaStep, MlstmStep, RlaStepIn};
use swax_nn::mixers::{attention, gated_delta, mlstm, rattention};
use swax_tensor::{DType, Device, Result, Tensor};

const TAPS: usize = 4;

fn randn(dims: &[usize], std: f64, seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims.to_vec(), std, seed, DType::F32, Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

/// `f` of each element of x.
fn map(x: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    let v: Vec<f64> = x.to_f64_vec().unwrap().into_iter().map(f).collect();
    Tensor::from_f64s(&v, x.dims().to_vec(), x.dtype(), Device::Cpu).unwrap()
}

/// The worst element's error against the largest element of `want`.
fn worst(got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    assert_eq!(g.len(), w.len());
    let scale = w.iter().fold(0.0f64, |a, b| a.max(b.abs())).max(1e-30);
    g.iter()
        .zip(&w)
        .map(|(a, b)| {
            if a.is_finite() {
                (a - b).abs()
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
        / scale
}

fn close(name: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let err = worst(got, want);
    eprintln!("{name}: worst element {err:.2e}");
    assert!(err < tol, "{name}: worst element {err:.3e} > {tol:.0e}");
}

/// Tolerance of a comparison in `dtype`: summation order in f32, a bf16 rounding of q, k, v
/// (one more or one fewer than the chunkwise path's) in bf16.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 4e-2,
        _ => 2e-5,
    }
}

/// Row t of x `[B, T, ..]` as `[B, ..]`.
fn at(x: &Tensor, t: usize) -> Tensor {
    let mut dims = x.dims().to_vec();
    dims.remove(1);
    x.narrow(1, t, 1).unwrap().reshape(dims).unwrap()
}

/// The chunkwise path's q, k, v `[B, T, H, D]` from the pre-convolution rows x `[B, T, C]`.
fn conv_heads(tape: &Tape, x: &Tensor, w: &Tensor, h: usize, dk: usize, dv: usize) -> [Tensor; 3] {
    let y = tape.short_conv_silu(x, w, None).unwrap();
    let (b, t) = (x.dims()[0], x.dims()[1]);
    let part = |start: usize, d: usize| {
        y.narrow(2, start, h * d)
            .unwrap()
            .reshape(vec![b, t, h, d])
            .unwrap()
    };
    [part(0, dk), part(h * dk, dk), part(2 * h * dk, dv)]
}

fn gated_delta_case([b, t, h, dk, dv]: [usize; 5], dtype: DType) -> Result<()> {
    let c = h * (2 * dk + dv);
    let x = randn(&[b, t, c], 1.0, 1, dtype);
    let w = randn(&[c, TAPS], 0.5, 2, dtype);
    let beta = map(&randn(&[b, t, h], 1.0, 3, dtype), |z| {
        1.0 / (1.0 + (-z).exp())
    });
    let g = map(&randn(&[b, t, h], 1.0, 4, dtype), |z| -(z - 2.0).exp());
    let tape = Tape::new();
    let [q, k, v] = conv_heads(&tape, &x, &w, h, dk, dv);
    let (o, fin) = gated_delta::chunkwise(&tape, &q, &k, &v, &beta, &g, None, 16)?;
    let sd = decode::state_dtype(dtype);
    let mut state = Tensor::zeros(vec![b, h, dk, dv], sd, Device::Cpu)?;
    let mut tail = Tensor::zeros(vec![b, TAPS - 1, c], dtype, Device::Cpu)?;
    for step in 0..t {
        let y = decode::gated_delta_step(&GatedDeltaStep {
            conv: ConvStep {
                x: &at(&x, step),
                weight: &w,
                tail: &tail,
            },
            beta: &at(&beta, step),
            g: &at(&g, step),
            state: &state,
        })?;
        close(
            &format!("gdn {dtype} o[{step}]"),
            &y.out,
            &at(&o, step),
            tolerance(dtype),
        );
        (state, tail) = (y.state, y.tail);
    }
    close(
        &format!("gdn {dtype} state"),
        &state,
        &fin,
        tolerance(dtype),
    );
    Ok(())
}

fn mlstm_case([b, t, h, dk, dv]: [usize; 5], dtype: DType) -> Result<()> {
    let c = h * (2 * dk + dv);
    let x = randn(&[b, t, c], 1.0, 5, dtype);
    let w = randn(&[c, TAPS], 0.5, 6, dtype);
    let i = randn(&[b, t, h], 2.0, 7, dtype);
    let f = map(&randn(&[b, t, h], 1.5, 8, dtype), |z| z + 3.0);
    let tape = Tape::new();
    let [q, k, v] = conv_heads(&tape, &x, &w, h, dk, dv);
    let (hs, fin) = mlstm::chunkwise(&tape, &q, &k, &v, &i, &f, None, 16, mlstm::EPS)?;
    let sd = decode::state_dtype(dtype);
    let mut state = mlstm::MlstmState::zeros(b, h, dk, dv, sd, Device::Cpu)?;
    let mut tail = Tensor::zeros(vec![b, TAPS - 1, c], dtype, Device::Cpu)?;
    for step in 0..t {
        let y = decode::mlstm_step(
            &MlstmStep {
                conv: ConvStep {
                    x: &at(&x, step),
                    weight: &w,
                    tail: &tail,
                },
                i: &at(&i, step),
                f: &at(&f, step),
                state: state.try_map(Ok)?,
            },
            mlstm::EPS,
        )?;
        close(
            &format!("mlstm {dtype} h[{step}]"),
            &y.out,
            &at(&hs, step),
            tolerance(dtype),
        );
        (state, tail) = (y.state, y.tail);
    }
    // C and n are stored divided by exp(m): compare them, and m, as the chunkwise path has them.
    close(
        &format!("mlstm {dtype} C"),
        &state.c,
        &fin.c,
        tolerance(dtype),
    );
    close(
        &format!("mlstm {dtype} n"),
        &state.n,
        &fin.n,
        tolerance(dtype),
    );
    close(
        &format!("mlstm {dtype} m"),
        &state.m,
        &fin.m,
        tolerance(dtype),
    );
    Ok(())
}

#[test]
fn gated_delta_steps_match_the_chunkwise_kernel() -> Result<()> {
    gated_delta_case([2, 37, 3, 16, 24], DType::F32)?;
    gated_delta_case([2, 37, 3, 16, 16], DType::BF16)?;
    gated_delta_case([1, 5, 2, 8, 8], DType::F64)
}

#[test]
fn mlstm_steps_match_the_chunkwise_kernel() -> Result<()> {
    mlstm_case([2, 37, 3, 8, 16], DType::F32)?;
    mlstm_case([2, 37, 3, 16, 32], DType::BF16)?;
    mlstm_case([1, 5, 2, 4, 8], DType::F64)
}

/// The last query of sliding-window attention over `[B, T, ..]` at window W, against `attend`
/// over a ring cache of W slots holding the window's keys rotated by `turn` slots, behind which
/// `extra` slots of garbage are never read.
fn attend_case(
    [b, t, h, hkv, d, window]: [usize; 6],
    turn: usize,
    extra: usize,
    dtype: DType,
) -> Result<()> {
    let q = randn(&[b, t, h, d], 1.0, 9, dtype);
    let k = randn(&[b, t, hkv, d], 1.0, 10, dtype);
    let v = randn(&[b, t, hkv, d], 1.0, 11, dtype);
    let tape = Tape::new();
    let o = attention::reference::swa(
        &tape,
        &q.to_dtype(DType::F32)?,
        &k.to_dtype(DType::F32)?,
        &v.to_dtype(DType::F32)?,
        window,
        None,
    )?;
    let n = window.min(t);
    let ring = |x: &Tensor| -> Result<Tensor> {
        let keys = x.narrow(1, t - n, n)?;
        let (late, early) = (keys.narrow(1, turn, n - turn)?, keys.narrow(1, 0, turn)?);
        let junk = map(&randn(&[b, extra, hkv, d], 1.0, 12, dtype), |z| 1e4 * z);
        Tensor::concat(&[&late, &early, &junk], 1)
    };
    let got = decode::attend(
        &AttendIn {
            q: &at(&q, t - 1),
            k: &ring(&k)?,
            v: &ring(&v)?,
        },
        n,
        None,
    )?;
    let tol = match dtype {
        DType::BF16 => 1e-2,
        _ => 1e-5,
    };
    close(
        &format!("attend {dtype} W {window}"),
        &got,
        &at(&o, t - 1),
        tol,
    );
    Ok(())
}

#[test]
fn one_query_attends_as_the_windows_last_row() -> Result<()> {
    attend_case([2, 40, 4, 2, 16, 13], 5, 3, DType::F32)?;
    attend_case([1, 9, 2, 2, 8, 64], 0, 0, DType::F32)?;
    attend_case([2, 40, 4, 1, 32, 13], 12, 2, DType::BF16)?;
    attend_case([1, 30, 3, 3, 8, 30], 29, 1, DType::F64)
}

/// A cache whose slots leave fewer than one query's keys, or a head count that is no multiple
/// of the kv heads', is refused by name.
#[test]
fn attend_refuses_bad_sizes() {
    let q = randn(&[1, 3, 8], 1.0, 1, DType::F32);
    let k = randn(&[1, 4, 2, 8], 1.0, 2, DType::F32);
    let x = AttendIn {
        q: &q,
        k: &k,
        v: &k,
    };
    for n in [0, 5] {
        let err = decode::attend(&x, n, None).unwrap_err().to_string();
        assert!(err.contains("attend"), "{err}");
    }
}

/// Attention's step input: q and k rotated as a whole sequence's RoPE rotates the token at that
/// position (the last of T = pos + 1), v as it came; a row of the wrong width refused by name.
#[test]
fn split_rope_rotates_the_step_as_the_sequence_does() -> Result<()> {
    let [b, h, hkv, d, pos] = [2, 4, 2, 16, 9];
    let qkv = randn(&[b, 1, (h + 2 * hkv) * d], 1.0, 3, DType::F32);
    let [q, k, v] = decode::split_rope(&qkv, [h, hkv, d], pos, 500.0)?;
    // Each part as the last token of a sequence of pos + 1 (zeros before it), rotated whole.
    let whole = |at: usize, n: usize| -> Result<Tensor> {
        let part = qkv.narrow(-1, at * d, n * d)?.reshape(vec![b, 1, n, d])?;
        part.pad(1, pos, 0)?.rope(0, 500.0)?.narrow(1, pos, 1)
    };
    assert!(worst(&q, &whole(0, h)?.reshape(vec![b, h, d])?) < 1e-6);
    assert!(worst(&k, &whole(h, hkv)?) < 1e-6);
    let plain = qkv
        .narrow(-1, (h + hkv) * d, hkv * d)?
        .reshape(vec![b, 1, hkv, d])?;
    assert_eq!(v.to_f64_vec()?, plain.to_f64_vec()?);
    assert!(worst(&q, &qkv.narrow(-1, 0, h * d)?.reshape(vec![b, h, d])?) > 1e-2);
    let err = decode::split_rope(&qkv, [h, hkv + 1, d], pos, 500.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("split_rope") && err.contains("Hkv 3"), "{err}");
    Ok(())
}

/// RAttention's linear branch over `[B, T, ..]` at window W, against `rla_step` token by token:
/// the state from zero, the step's key written into a ring of W slots after the step reads the
/// slot it overwrites (zeros until the ring is full).
fn rla_case([b, t, h, hkv, d, window]: [usize; 6], dtype: DType) -> Result<()> {
    let q = randn(&[b, t, h, d], 1.0, 13, dtype);
    let k = randn(&[b, t, hkv, d], 1.0, 14, dtype);
    let v = randn(&[b, t, hkv, d], 1.0, 15, dtype);
    let tape = Tape::new();
    let f32s = |x: &Tensor| x.to_dtype(DType::F32);
    let (qf, kf, vf) = (f32s(&q)?, f32s(&k)?, f32s(&v)?);
    let dims = attention::shape("rla", &qf, &kf, &vf, window)?;
    let want = rattention::reference::linear(&tape, &qf, &kf, &vf, dims, window)?;
    let ring = || Tensor::zeros(vec![b, window, hkv, d], dtype, Device::Cpu);
    let (mut rk, mut rv) = (ring()?, ring()?);
    let mut s = Tensor::zeros(
        vec![b, hkv, 2 * d, d],
        decode::state_dtype(dtype),
        Device::Cpu,
    )?;
    for step in 0..t {
        let slot = step % window;
        let (o, next) = decode::rla_step(
            &RlaStepIn {
                q: &at(&q, step),
                k: &rk,
                v: &rv,
                state: &s,
            },
            slot,
        )?;
        s = next;
        rk.write_at(1, slot, &k.narrow(1, step, 1)?)?;
        rv.write_at(1, slot, &v.narrow(1, step, 1)?)?;
        if step >= window {
            close(
                &format!("rla_step {dtype} W {window} t {step}"),
                &o,
                &at(&want, step),
                tolerance(dtype),
            );
        }
    }
    Ok(())
}

#[test]
fn rla_steps_match_the_linear_branch() -> Result<()> {
    rla_case([2, 30, 4, 2, 16, 7], DType::F32)?;
    rla_case([1, 20, 3, 3, 8, 1], DType::F32)?;
    rla_case([2, 24, 4, 1, 32, 5], DType::BF16)?;
    rla_case([1, 12, 2, 1, 8, 4], DType::F64)
}
