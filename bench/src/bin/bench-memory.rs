//! What one training step holds in memory: a model of the given config runs the loss of one
//! batch of random tokens and its backward, and this prints the bytes the tape holds at the end
//! of the forward (the saved tensors, and the loss) and the peak of the whole step, each above
//! what was in use before it (the weights and their casts). On the GPU the bytes are the CUDA
//! pool's; on the CPU every heap allocation of the program is counted.
//!
//!   bench-memory --config swax-small                               # the GPU if there is one
//!   bench-memory --config swax-small --set model.recompute=all
//!   bench-memory --config swax-small --set data.seq_len=512 --set data.batch_size=2 --device cpu
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use clap::Parser;
use swax_autograd::Tape;
use swax_bench::config_args::ConfigArgs;
use swax_hybrid::model::Model;
use swax_nn::Weights;
use swax_tensor::{Device, Tensor};

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from `alloc` with this layout, as the caller guarantees.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    model: ConfigArgs,
    /// The attention window (0: the config's w_long).
    #[arg(long, default_value_t = 0)]
    window: usize,
    /// `cpu`, `cuda`; default: the GPU if there is one.
    #[arg(long)]
    device: Option<String>,
}

/// Bytes in use and their peak since the last `reset`.
fn in_use(device: Device) -> (usize, usize) {
    match device {
        Device::Cuda(i) => swax_tensor::cuda::device(i)
            .map(|d| d.pool_stats())
            .map_or((0, 0), |s| (s.in_use, s.peak_in_use)),
        Device::Cpu => (LIVE.load(Relaxed), PEAK.load(Relaxed)),
    }
}

fn reset_peak(device: Device) {
    match device {
        Device::Cuda(i) => {
            if let Ok(d) = swax_tensor::cuda::device(i) {
                d.reset_peak();
            }
        }
        Device::Cpu => PEAK.store(LIVE.load(Relaxed), Relaxed),
    }
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let cfg = a.model.resolve()?;
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some(_) => Device::Cuda(0),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    let dtype = swax_hybrid::train::compute_dtype(&cfg, device);
    let window = match a.window {
        0 => cfg.train.w_long,
        w => w,
    };
    let (b, t, v) = (cfg.data.batch_size, cfg.data.seq_len, cfg.model.vocab_size);
    let ids = |shift: u32| -> swax_tensor::Result<Tensor> {
        let ids: Vec<u32> = (0..(b * t) as u32)
            .map(|i| (i.wrapping_mul(7919) + shift) % v as u32)
            .collect();
        Tensor::from_vec(ids, vec![b, t], device)
    };
    let (x, y) = (ids(13)?, ids(14)?);
    let model = Model::new(&cfg.model, cfg.train.seed, device)?;
    println!(
        "{} ({} x{} layers, d_model {}), recompute {:?}, B {b}, T {t}, window {window}, on \
         {device}, {dtype:?}",
        cfg.model.name,
        cfg.model.pattern,
        cfg.model.n_layers,
        cfg.model.d_model,
        cfg.model.recompute
    );
    // Twice: the first step compiles the kernels and fills the pool's cache.
    for step in 0..2 {
        let tape = Tape::new();
        let w = Weights::training(&tape, &model.params, dtype)?;
        let before = in_use(device).0;
        reset_peak(device);
        let loss = model.loss(&w, &x, &y, window)?;
        loss.to_scalar()?;
        let forward = in_use(device).0 - before;
        let grads = tape.backward(&loss)?;
        drop(grads);
        let peak = in_use(device).1 - before;
        let logits = b * t * v * dtype.size_bytes();
        if step == 1 {
            println!(
                "held at the end of the forward: {:.3} GiB (the logits, {:.3} GiB, among them); \
                 the step's peak: {:.3} GiB above the {:.3} GiB in use before it",
                gib(forward),
                gib(logits),
                gib(peak),
                gib(before)
            );
        }
    }
    Ok(())
}
