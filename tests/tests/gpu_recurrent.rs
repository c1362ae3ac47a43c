//! The fused recurrent-mixer kernels on the GPU (mLSTM chunkwise, gated delta rule, short
//! convolution) against the CPU fused kernels, on values, boundary states and every gradient, in
//! f32 and bf16: T not a multiple of the chunk, T = 1, long T (4096) where the stabilizer
//! matters, a value dim unlike the key dim, a value dim split into tiles, f32 at odd sizes, a
//! chunk other than 64, head dim 32, extreme gates (no NaN or Inf), and strong decay (the gated
//! delta rule's log decays, the mLSTM's forget preactivations, about -10).
//! Skips without a GPU (see `swax_tests::gpu`).
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::gated_delta as gdn;
use swax_tests::mlstm as mlstm_cases;
use swax_tests::{gpu, relative_error, worst_element_error};

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

/// The same values as a CPU f32 reference input and a GPU input of `dtype` (rounded to it first,
/// so both sides see identical numbers).
fn pair(x: &Tensor, dtype: DType, dev: Device) -> (Tensor, Tensor) {
    let rounded = x.to_dtype(dtype).unwrap();
    (
        rounded.to_dtype(DType::F32).unwrap(),
        rounded.to_device(dev).unwrap(),
    )
}

/// Within `tol` over the tensor, and at its worst element within three times that of the
/// tensor's largest.
fn check(name: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let got = got.to_device(Device::Cpu).unwrap();
    let err = relative_error(&got, want).unwrap_or_else(|e| panic!("{name}: {e}"));
    let worst = worst_element_error(&got, want).unwrap();
    eprintln!("{name}: relative error {err:.2e}, worst element {worst:.2e}");
    assert!(err < tol, "{name}: relative error {err:.3e} > {tol:.0e}");
    assert!(
        worst < 3.0 * tol,
        "{name}: worst element {worst:.3e} of the largest > {:.0e}",
        3.0 * tol
    );
}

/// Sizes and gate distributions of a case.
#[derive(Clone, Copy)]
struct Case {
    b: usize,
    t: usize,
    h: usize,
    dk: usize,
    dv: usize,
    chunk: usize,
    /// The spread of the gates' preactivations (see each mixer's `inputs`).
    gate_std: f64,
    /// mLSTM: the forget gate's preactivation mean; gated delta rule: the log decay's.
    decay_mean: f64,
    /// The gated delta rule's beta preactivation mean (mLSTM has no beta).
    beta_mean: f64,
}

/// A fused mixer under test: its random inputs and output gradients (CPU, f32) for a case,
/// and one forward and backward on either device, returning every output and gradient.
trait Mixer {
    const NAME: &'static str;
    const OUTPUTS: &'static [&'static str];
    fn inputs(c: &Case, seed: u64) -> Vec<Tensor>;
    fn grads(c: &Case, seed: u64) -> Vec<Tensor>;
    fn run(c: &Case, x: &[Tensor], grads: &[Tensor]) -> Result<Vec<Tensor>>;
}

struct Mlstm;

impl Mixer for Mlstm {
    const NAME: &'static str = "mlstm";
    const OUTPUTS: &'static [&'static str] = &mlstm_cases::OUTPUTS;

    fn inputs(c: &Case, seed: u64) -> Vec<Tensor> {
        let gates = mlstm_cases::Gates {
            gate_std: c.gate_std,
            forget_mean: c.decay_mean,
        };
        mlstm_cases::inputs([c.b, c.t, c.h, c.dk, c.dv], gates, seed).unwrap()
    }

    fn grads(c: &Case, seed: u64) -> Vec<Tensor> {
        mlstm_cases::output_grads([c.b, c.t, c.h, c.dk, c.dv], seed).unwrap()
    }

    fn run(c: &Case, x: &[Tensor], grads: &[Tensor]) -> Result<Vec<Tensor>> {
        mlstm_cases::run(x, grads, c.chunk)
    }
}

struct GatedDelta;

impl Mixer for GatedDelta {
    const NAME: &'static str = "gated delta";
    const OUTPUTS: &'static [&'static str] = &gdn::OUTPUTS;

    fn inputs(c: &Case, seed: u64) -> Vec<Tensor> {
        let gates = gdn::Gates {
            gate_std: c.gate_std,
            decay_mean: c.decay_mean,
            beta_mean: c.beta_mean,
        };
        gdn::inputs([c.b, c.t, c.h, c.dk, c.dv], gates, seed).unwrap()
    }

    fn grads(c: &Case, seed: u64) -> Vec<Tensor> {
        gdn::output_grads([c.b, c.t, c.h, c.dk, c.dv], seed).unwrap()
    }

    fn run(c: &Case, x: &[Tensor], grads: &[Tensor]) -> Result<Vec<Tensor>> {
        gdn::run(x, grads, c.chunk)
    }
}

/// The mixer on the GPU against the CPU fused kernel, in `dtype` (both sides see the inputs
/// rounded to it), on every output and gradient.
fn case<M: Mixer>(c: &Case, dtype: DType, seed: u64) -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    let on_both = |xs: Vec<Tensor>| -> (Vec<Tensor>, Vec<Tensor>) {
        xs.iter().map(|x| pair(x, dtype, dev)).unzip()
    };
    let (cpu, dvc) = on_both(M::inputs(c, seed));
    let (gcpu, gdev) = on_both(M::grads(c, seed));
    let want = M::run(c, &cpu, &gcpu)?;
    let got = M::run(c, &dvc, &gdev)?;
    for ((name, g), w) in M::OUTPUTS.iter().zip(&got).zip(&want) {
        let label = format!(
            "{} {dtype:?} B={} T={} H={} Dk={} Dv={} chunk={} {name}",
            M::NAME,
            c.b,
            c.t,
            c.h,
            c.dk,
            c.dv,
            c.chunk
        );
        check(&label, g, w, tolerance(dtype));
    }
    Ok(())
}

/// In both dtypes, the bf16 one first.
fn both<M: Mixer>(c: &Case, seed: u64) -> Result<()> {
    case::<M>(c, DType::BF16, seed)?;
    case::<M>(c, DType::F32, seed)
}

// The scenarios, each from a mixer's base case: T not a multiple of the chunk (the base itself).
fn t_not_a_multiple_of_the_chunk<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(base, seed)
}

fn single_step<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(
        &Case {
            t: 1,
            dk: 128,
            dv: 64,
            ..*base
        },
        seed,
    )
}

/// f32 takes any head size and chunk (no tensor-core tiles).
fn f32_odd_sizes<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    let odd = Case {
        t: 45,
        dk: 24,
        dv: 40,
        chunk: 13,
        ..*base
    };
    case::<M>(&odd, DType::F32, seed)?;
    let tiny = Case {
        t: 70,
        dk: 5,
        dv: 3,
        chunk: 32,
        ..*base
    };
    case::<M>(&tiny, DType::F32, seed + 1)
}

/// A value dim too large for one block's shared memory is split into tiles, one block each
/// (bf16: 112 + 96 columns; f32: 101 + 100), their shares of dq, dk and the gates summed.
fn value_tiles<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    let wide = Case {
        b: 1,
        h: 2,
        dk: 128,
        dv: 208,
        ..*base
    };
    case::<M>(&wide, DType::BF16, seed)?;
    case::<M>(&Case { dv: 201, ..wide }, DType::F32, seed)
}

fn long_sequence<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(
        &Case {
            b: 1,
            t: 4096,
            h: 2,
            dk: 128,
            dv: 128,
            ..*base
        },
        seed,
    )
}

/// A chunk other than 64 (the gated delta rule's bf16 chunk-parallel kernels take 64 only, so
/// this runs its one-block-per-head kernels in bf16 too).
fn other_chunk<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(&Case { chunk: 32, ..*base }, seed)
}

/// Head dim 32 with a value dim of 96 (the gated delta rule's value tiles of 32 columns).
fn small_heads<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(
        &Case {
            dk: 32,
            dv: 96,
            ..*base
        },
        seed,
    )
}

/// swax-small's heads (Dk 32, Dv 64) over 1500 steps (the mLSTM's stabilizer gradient crosses
/// two pieces of its gates kernel's block), then Dk = Dv = 64: the mLSTM's kernels run 256-thread
/// blocks at these sizes, 512 at the base case's.
fn layer_heads<M: Mixer>(base: &Case, seed: u64) -> Result<()> {
    both::<M>(
        &Case {
            t: 1500,
            dk: 32,
            dv: 64,
            ..*base
        },
        seed,
    )?;
    both::<M>(
        &Case {
            dk: 64,
            dv: 64,
            ..*base
        },
        seed + 1,
    )
}

/// Gates spread by `gate_std` around a zero mean, over 300 steps.
fn extreme_gates<M: Mixer>(base: &Case, gate_std: f64, seed: u64) -> Result<()> {
    both::<M>(
        &Case {
            t: 300,
            gate_std,
            decay_mean: 0.0,
            ..*base
        },
        seed,
    )
}

const MLSTM: Case = Case {
    b: 2,
    t: 150,
    h: 3,
    dk: 64,
    dv: 128,
    chunk: 64,
    gate_std: 2.0,
    decay_mean: 3.0,
    beta_mean: 0.0,
};

const GDN: Case = Case {
    gate_std: 1.0,
    decay_mean: -2.0,
    ..MLSTM
};

/// The scenarios above as tests of one mixer, in a module of its name: `$mixer::single_step`
/// and so on, each with its own seed (`$seed` plus a per-scenario offset), the extreme case
/// spreading the gates by `$extreme_std`.
macro_rules! mixer_tests {
    ($module:ident, $mixer:ty, $base:expr, $seed:expr, $extreme_std:expr) => {
        mod $module {
            use super::*;

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn t_not_a_multiple_of_the_chunk() -> Result<()> {
                super::t_not_a_multiple_of_the_chunk::<$mixer>(&$base, $seed + 10)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn single_step() -> Result<()> {
                super::single_step::<$mixer>(&$base, $seed + 20)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn f32_odd_sizes() -> Result<()> {
                super::f32_odd_sizes::<$mixer>(&$base, $seed + 30)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn long_sequence() -> Result<()> {
                super::long_sequence::<$mixer>(&$base, $seed + 40)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn extreme_gates_stay_finite() -> Result<()> {
                super::extreme_gates::<$mixer>(&$base, $extreme_std, $seed + 50)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn value_tiles() -> Result<()> {
                super::value_tiles::<$mixer>(&$base, $seed + 60)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn other_chunk() -> Result<()> {
                super::other_chunk::<$mixer>(&$base, $seed + 70)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn small_heads() -> Result<()> {
                super::small_heads::<$mixer>(&$base, $seed + 80)
            }

            #[test]
            #[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
            fn layer_heads() -> Result<()> {
                super::layer_heads::<$mixer>(&$base, $seed + 90)
            }
        }
    };
}

// mLSTM: input gates up to e^100 and beyond, forget gates from ~0 to ~1 (the stabilizer's work).
mixer_tests!(mlstm, Mlstm, MLSTM, 0, 40.0);
// Gated delta rule: beta near 0 and 1, decays from ~1 to underflowing exp(G) within a chunk.
mixer_tests!(gated_delta, GatedDelta, GDN, 100, 30.0);

/// Log decays about -10 a step: each gate gradient is small beside the terms that cancel in it,
/// which the kernels leave out (summed in f32, their rounding put the CPU kernel's f32 dg 2e-3
/// from its f64 one; see nn/tests/gated_delta.rs).
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn gated_delta_strong_decay() -> Result<()> {
    let strong = Case {
        gate_std: 0.5,
        decay_mean: 10.0,
        ..GDN
    };
    both::<GatedDelta>(&strong, 200)
}

/// Forget preactivations about -10: as for the gated delta rule, the terms of df that cancel
/// exactly are left out (nn/tests/mlstm.rs holds the CPU kernel's f32 df to its f64 one there).
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn mlstm_strong_decay() -> Result<()> {
    let strong = Case {
        gate_std: 0.5,
        decay_mean: -10.0,
        ..MLSTM
    };
    both::<Mlstm>(&strong, 210)
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn short_conv_matches_cpu() -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    for dtype in [DType::F32, DType::BF16] {
        // Odd C (the scalar kernels), C a whole number of vectors (the vector ones), T short of
        // the taps and not a whole number of runs, 1 to 8 taps, and enough runs that threads
        // take several (20000 steps over 2 channel groups).
        for (b, t, c, k) in [
            (2, 37, 67, 4),
            (1, 1, 16, 3),
            (3, 1000, 256, 4),
            (2, 21, 264, 8),
            (3, 9, 8, 1),
            (1, 5, 7, 5),
            (2, 100, 40, 2),
            (2, 20000, 16, 4),
        ] {
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
