//! GPU benchmark of the fused attention mixers at the named shapes (`swax_bench::shape`: `paper`,
//! B8 T8192 H16 D128, and `swax-small`, B16 T4096 H12 D64; bf16): forward alone and forward +
//! backward, event-timed medians after warm-up, on random inputs. Sliding-window attention at
//! windows 128, 512, 2048 and full causal (the window T), with TFLOP/s counting only in-window
//! query-key pairs (forward 4·B·H·T·avg_keys·D, forward + backward 3.5 times that); RAttention at
//! window 512: the whole fused mixer node (RoPE, SWA, the linear branch, both RMSNorms and their
//! sum, forward and backward), which is nn's `mixers::rattention::node::rattention`, the node the
//! models' R layers run, with its linear branch alone (`rla`) among the line's fields. Needs a
//! GPU. Each case is set beside the fastest of its peers (bench/peers/attention_peers.py, whose
//! JSON lines `--peer` reads) and appended as a JSON line to `--results`
//! (`swax_bench::kernel_report`); `bench/kernel-pair.sh attention` runs the peers and this in one
//! call.
//!
//!     bench-attention-gpu [--shapes paper,swax-small] [--mixers swa,rattention]
//!         [--windows 128,512,2048,full] [--peer PEERS.jsonl] [--results FILE]
//!
//! One shape and one window alone is what a profiler wants (`--results /dev/null` keeps it out of
//! the results). A shape whose head dim no CUDA kernel takes is said so and not timed.
use std::path::Path;

use clap::Parser;
use swax_autograd::Tape;
use swax_bench::kernel_report::{KernelArgs, Measured, Report, HEADER};
use swax_bench::shape::Shape;
use swax_cuda::timing::median_ms;
use swax_nn::mixers::attention::{self, SwaBackward, SwaIn};
use swax_nn::mixers::rattention::{self as ra, node, Config, Features, RlaBackward};
use swax_tensor::{DType, Device, Result, Tensor};

const REPS: usize = 20;
/// RAttention's window.
const RA_WINDOW: usize = 512;

/// The fused attention mixers (SWA, RAttention) on the GPU at named shapes, beside their peers.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    kernel: KernelArgs,
    /// Which mixers: swa, rattention.
    #[arg(long, value_delimiter = ',', default_value = "swa,rattention", value_parser = ["swa", "rattention"])]
    mixers: Vec<String>,
    /// SWA's windows: numbers, and `full` for full causal attention (the window T).
    #[arg(long, value_delimiter = ',', default_value = "128,512,2048,full", value_parser = window)]
    windows: Vec<Option<usize>>,
}

/// A window (None: full causal).
fn window(s: &str) -> std::result::Result<Option<usize>, String> {
    match s {
        "full" => Ok(None),
        _ => match s.parse::<usize>() {
            Ok(w) if w > 0 => Ok(Some(w)),
            _ => Err(format!("window {s:?}: expected a positive integer or full")),
        },
    }
}

/// Mean keys a query sees: sum over t of min(t + 1, w), divided by T.
fn avg_keys(t: usize, w: usize) -> f64 {
    (0..t).map(|i| (i + 1).min(w) as f64).sum::<f64>() / t as f64
}

/// The operands of one shape, on the GPU.
struct Inputs {
    s: Shape,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    scale: f64,
}

impl Inputs {
    fn new(s: Shape) -> Result<Inputs> {
        let randn = |seed| -> Result<Tensor> {
            Tensor::randn(vec![s.b, s.t, s.h, s.d], 1.0, seed, DType::F32, Device::Cpu)?
                .to_dtype(DType::BF16)?
                .to_device(Device::Cuda(0))
        };
        Ok(Inputs {
            s,
            q: randn(1)?,
            k: randn(2)?,
            v: randn(3)?,
            dout: randn(4)?,
            scale: 1.0 / (s.d as f64).sqrt(),
        })
    }

    fn label(&self) -> String {
        self.s.label(self.s.d, self.s.d)
    }

    /// The forward's FLOPs counting in-window query-key pairs at window `w`.
    fn flop(&self, w: usize) -> f64 {
        let s = self.s;
        4.0 * (s.b * s.h * s.t * s.d) as f64 * avg_keys(s.t, w)
    }
}

fn swa(dev: &swax_cuda::CudaDevice, x: &Inputs, w: usize) -> Result<Measured> {
    let input = SwaIn {
        q: &x.q,
        k: &x.k,
        v: &x.v,
    };
    let fwd = median_ms(dev, 3, REPS, || {
        attention::forward(&input, w, x.scale).map(drop)
    })?;
    let both = median_ms(dev, 3, REPS, || {
        let out = attention::forward(&input, w, x.scale)?;
        let b = SwaBackward {
            input: input.clone(),
            out: out.try_map(Ok)?,
            dout: &x.dout,
        };
        attention::backward(&b, w, x.scale).map(drop)
    })?;
    let case = match w >= x.s.t {
        true => "full-causal".to_string(),
        false => format!("swa-w{w}"),
    };
    let flop = x.flop(w);
    Ok(Measured::new(case, x.label(), fwd, None, both)
        .with("window", w)
        .with("fwd_tflops", flop / fwd / 1e9)
        .with("tflops", 3.5 * flop / both / 1e9))
}

/// nn's fused RAttention node at window `RA_WINDOW` with its default settings (RoPE from
/// position 0 with theta 10000, eps 1e-6, chunks of 64): forward alone on a tape that watches
/// nothing, so it records nothing, or forward and, from `dout`, backward to q, k, v and both
/// norm scales.
fn rattention_node(x: &Inputs, norms: (&Tensor, &Tensor), backward: bool) -> Result<()> {
    let tape = Tape::new();
    if backward {
        for input in [&x.q, &x.k, &x.v, norms.0, norms.1] {
            tape.watch(input);
        }
    }
    let cfg = Config::new(RA_WINDOW);
    let y = node::rattention(&tape, &x.q, &x.k, &x.v, norms.0, norms.1, &cfg)?;
    if backward {
        tape.backward_from(&y, &x.dout)?;
    }
    Ok(())
}

fn rattention(dev: &swax_cuda::CudaDevice, x: &Inputs) -> Result<Measured> {
    let w = RA_WINDOW;
    let norm = |seed| {
        Tensor::randn(vec![x.s.d], 0.3, seed, DType::F32, Device::Cpu)?
            .add_scalar(1.0)?
            .to_dtype(DType::BF16)?
            .to_device(Device::Cuda(0))
    };
    let (ns, nr) = (norm(5)?, norm(6)?);
    let input = SwaIn {
        q: &x.q,
        k: &x.k,
        v: &x.v,
    };
    let rla_fwd = median_ms(dev, 3, REPS, || ra::forward(&input, w, 64).map(drop))?;
    let rla_both = median_ms(dev, 3, REPS, || {
        let (_, features) = ra::forward_keeping_features(&input, w, 64)?;
        let b = RlaBackward {
            input: input.clone(),
            dout: &x.dout,
            features: features.as_ref().map(|f| Features { q: &f.q, k: &f.k }),
        };
        ra::backward(&b, w, 64).map(drop)
    })?;
    let fwd = median_ms(dev, 3, REPS, || rattention_node(x, (&ns, &nr), false))?;
    let both = median_ms(dev, 3, REPS, || rattention_node(x, (&ns, &nr), true))?;
    Ok(
        Measured::new(format!("rattention-w{w}"), x.label(), fwd, None, both)
            .with("window", w)
            .with("tflops", 3.5 * x.flop(w) / both / 1e9)
            .with("tflops_counts", "the SWA branch's in-window pairs only")
            .with("rla_fwd_ms", rla_fwd)
            .with("rla_ms", rla_both),
    )
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let results = a
        .kernel
        .results
        .clone()
        .unwrap_or_else(|| "bench/results/attention.jsonl".into());
    let mut report = Report::new("attention-gpu", a.kernel.peer.as_deref())?;
    let dev = swax_tensor::cuda::device(0)?;
    println!(
        "swax attention mixers, bf16, median of {REPS}; fwd+bwd compared with the fastest peer"
    );
    println!("{HEADER}");
    for &s in &a.kernel.shapes {
        let label = s.label(s.d, s.d);
        if !attention::has_kernel(Device::Cuda(0), DType::BF16, s.d) {
            println!("  ({label}: no CUDA attention kernel takes head dim {} in bf16; SWA and RAttention not timed)", s.d);
            continue;
        }
        let x = Inputs::new(s)?;
        if a.mixers.iter().any(|m| m == "swa") {
            for w in &a.windows {
                report.add(swa(&dev, &x, w.unwrap_or(s.t))?);
            }
        }
        if a.mixers.iter().any(|m| m == "rattention") {
            report.add(rattention(&dev, &x)?);
        }
    }
    report.write(Path::new(&results))?;
    Ok(())
}
