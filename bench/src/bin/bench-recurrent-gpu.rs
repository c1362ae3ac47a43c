//! GPU benchmark of the fused mLSTM and gated delta rule chunkwise kernels (bf16, chunk 64 unless
//! `--chunk` says otherwise) at the named shapes (`swax_bench::shape`): `paper`, B8 T8192 H16,
//! the mLSTM at Dk = Dv = 128 and the gated delta rule at D 128; `swax-small`, B16 T4096 H12, the
//! mLSTM at Dk 32 and Dv 64 (as swax-small's layers make them) and the gated delta rule at D 64.
//! Forward alone, backward alone and forward + backward, event-timed medians after warm-up, on
//! random inputs (the gated delta rule's beta in (0, 1) and log decay below 0, as its layer makes
//! them). Needs a GPU. Each case is set beside the fastest of its peers
//! (bench/peers/recurrent_peers.py, whose JSON lines `--peer` reads) and appended as a JSON line
//! to `--results` (`swax_bench::kernel_report`); `bench/kernel-pair.sh recurrent` runs the peers
//! and this in one call.
//!
//!     bench-recurrent-gpu [--shapes paper,swax-small] [--mixers mlstm,gated-delta]
//!         [--chunk 64] [--peer PEERS.jsonl] [--results FILE]
//!
//! A shape whose head dims the mixer's CUDA kernel does not take (its `has_kernel`) is said so
//! and not timed: the models' layers would run the reference there instead. The gated delta
//! rule's line names which of its CUDA kernels ran (`kernel`: the chunk-parallel ones, or the
//! one block per head and value tile that takes every other shape).
use std::path::Path;

use clap::Parser;
use swax_bench::kernel_report::{KernelArgs, Measured, Report, HEADER};
use swax_bench::shape::Shape;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_cuda::timing::median_ms;
use swax_nn::mixers::gated_delta::{self, GatedDeltaBackward, GatedDeltaIn, GatedDeltaOut};
use swax_nn::mixers::mlstm::{self, MlstmBackward, MlstmIn, MlstmOut, MlstmState};
use swax_tensor::{DType, Device, Result, Tensor};

const REPS: usize = 10;

/// The chunkwise recurrent mixers (mLSTM, gated delta rule) on the GPU at named shapes, beside
/// their peers.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    kernel: KernelArgs,
    /// Which mixers: mlstm, gated-delta.
    #[arg(long, value_delimiter = ',', default_value = "mlstm,gated-delta", value_parser = ["mlstm", "gated-delta"])]
    mixers: Vec<String>,
    /// The chunk length L the kernels run at (the layers' default is 64; a chunk whose tiles do
    /// not fit the GPU's shared memory is an error that says so).
    #[arg(long, default_value_t = 64)]
    chunk: usize,
}

fn randn(dims: Vec<usize>, std: f64, seed: u64) -> Result<Tensor> {
    Tensor::randn(dims, std, seed, DType::F32, Device::Cpu)?
        .to_dtype(DType::BF16)?
        .to_device(Device::Cuda(0))
}

fn zeros(dims: Vec<usize>) -> Result<Tensor> {
    Tensor::zeros(dims, DType::BF16, Device::Cuda(0))
}

/// The medians of a mixer's forward, of its backward alone (from the results of one forward:
/// the boundary states it stored, so the backward does not recompute them), and of both.
fn time<O>(
    dev: &swax_cuda::CudaDevice,
    forward: impl Fn() -> Result<O>,
    backward: impl Fn(&O) -> Result<()>,
) -> Result<(f64, f64, f64)> {
    let fwd = median_ms(dev, 2, REPS, || forward().map(drop))?;
    let both = median_ms(dev, 2, REPS, || backward(&forward()?))?;
    let out = forward()?;
    let bwd = median_ms(dev, 2, REPS, || backward(&out))?;
    Ok((fwd, bwd, both))
}

fn mlstm(dev: &swax_cuda::CudaDevice, s: Shape, dk: usize, chunk: usize) -> Result<Measured> {
    let (b, t, h, dv) = (s.b, s.t, s.h, s.d);
    let (q, k, v) = (
        randn(vec![b, t, h, dk], 1.0, 1)?,
        randn(vec![b, t, h, dk], 1.0, 2)?,
        randn(vec![b, t, h, dv], 1.0, 3)?,
    );
    let (i, f) = (randn(vec![b, t, h], 1.0, 4)?, randn(vec![b, t, h], 1.0, 5)?);
    let s0 = MlstmState {
        c: zeros(vec![b, h, dk, dv])?,
        n: zeros(vec![b, h, dk])?,
        m: zeros(vec![b, h])?,
    };
    let x = MlstmIn {
        q: &q,
        k: &k,
        v: &v,
        i: &i,
        f: &f,
        state: s0.try_map(Ok)?,
    };
    let dh = randn(vec![b, t, h, dv], 1.0, 6)?;
    // The gradient of the final state: zeros, as where the final state is unused.
    let backward = |out: &MlstmOut| -> Result<()> {
        mlstm::backward(
            &MlstmBackward {
                input: x.clone(),
                out: out.try_map(Ok)?,
                dh: &dh,
                d_final: s0.try_map(Ok)?,
            },
            chunk,
            mlstm::EPS,
        )
        .map(drop)
    };
    let (fwd, bwd, both) = time(dev, || mlstm::forward(&x, chunk, mlstm::EPS), backward)?;
    Ok(Measured::new("mlstm".into(), s.label(dk, dv), fwd, Some(bwd), both).with("chunk", chunk))
}

fn gated_delta(dev: &swax_cuda::CudaDevice, s: Shape, chunk: usize) -> Result<Measured> {
    let (b, t, h, d) = (s.b, s.t, s.h, s.d);
    let (q, k, v) = (
        randn(vec![b, t, h, d], 1.0, 1)?,
        randn(vec![b, t, h, d], 1.0, 2)?,
        randn(vec![b, t, h, d], 1.0, 3)?,
    );
    let beta = randn(vec![b, t, h], 1.0, 7)?.sigmoid()?;
    let g = randn(vec![b, t, h], 1.0, 8)?.softplus()?.scale(-0.1)?;
    let s1 = zeros(vec![b, h, d, d])?;
    let x = GatedDeltaIn {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
        state: &s1,
    };
    // The output stands in for its own gradient; the final state's gradient is zeros.
    let backward = |out: &GatedDeltaOut| -> Result<()> {
        let b = GatedDeltaBackward {
            input: x.clone(),
            boundary: &out.boundary,
            d_out: &out.o,
            d_final: &s1,
        };
        gated_delta::backward(&b, chunk).map(drop)
    };
    let (fwd, bwd, both) = time(dev, || gated_delta::forward(&x, chunk), backward)?;
    let dims = RecurrentShape {
        b,
        t,
        h,
        dk: d,
        dv: d,
        chunk,
    };
    let shared = dev.max_shared_optin() as usize;
    let kernel = match gated_delta::parallel_sizes(dims, swax_cuda::DType::BF16, shared) {
        Some(_) => "chunk-parallel",
        None => "one block per (batch, head, value tile)",
    };
    Ok(
        Measured::new("gated-delta".into(), s.label(d, d), fwd, Some(bwd), both)
            .with("chunk", chunk)
            .with("kernel", kernel),
    )
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let results =
        (a.kernel.results.clone()).unwrap_or_else(|| "bench/results/recurrent.jsonl".into());
    let mut report = Report::new("recurrent-gpu", a.kernel.peer.as_deref())?;
    let dev = swax_tensor::cuda::device(0)?;
    let gpu = Device::Cuda(0);
    println!("swax chunkwise mixers, chunk {}, bf16, median of {REPS}; bwd alone from the stored boundary states; fwd+bwd compared with the fastest peer", a.chunk);
    println!("{HEADER}");
    let no_kernel = |mixer: &str, label: &str, dims: &str| {
        println!("  ({mixer} at {label}: its CUDA kernel does not take {dims} in bf16; not timed)")
    };
    for &s in &a.kernel.shapes {
        for mixer in &a.mixers {
            let m = match mixer.as_str() {
                "mlstm" => {
                    let (dk, dv) = (s.mlstm_dk, s.d);
                    if !mlstm::has_kernel(gpu, DType::BF16, dk, dv) {
                        no_kernel("mlstm", &s.label(dk, dv), &format!("Dk {dk}, Dv {dv}"));
                        continue;
                    }
                    mlstm(&dev, s, dk, a.chunk)?
                }
                _ => {
                    if !gated_delta::has_kernel(gpu, DType::BF16, s.d, s.d) {
                        no_kernel("gated-delta", &s.label(s.d, s.d), &format!("D {}", s.d));
                        continue;
                    }
                    gated_delta(&dev, s, a.chunk)?
                }
            };
            report.add(m);
        }
    }
    report.write(Path::new(&results))?;
    Ok(())
}
