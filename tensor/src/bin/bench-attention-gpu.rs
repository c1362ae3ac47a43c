//! GPU benchmark of the fused sliding-window attention kernels at the shape of the attention
//! issue (B=8, T=8192, H=16, D=128, bf16): forward alone and forward + backward, event-timed
//! medians after warm-up, on random inputs, with TFLOP/s counting only in-window query-key pairs
//! (forward 4·B·H·T·avg_keys·D, forward + backward 3.5 times that). Needs a GPU; the peers are
//! timed in the same run by nn/peers/attention_peers.py.
//!
//!     .gpu/bin/bench-attention-gpu [T]
use swax_cuda::timing::median_ms;
use swax_tensor::{DType, Device, Result, Tensor};

const B: usize = 8;
const H: usize = 16;
const D: usize = 128;
const REPS: usize = 20;

/// Mean keys a query sees: sum over t of min(t + 1, w), divided by T.
fn avg_keys(t: usize, w: usize) -> f64 {
    (0..t).map(|i| (i + 1).min(w) as f64).sum::<f64>() / t as f64
}

fn main() -> Result<()> {
    let t: usize = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| swax_tensor::Error::Invalid {
            op: "bench-attention-gpu",
            msg: format!("T {s:?}: {e}"),
        })?,
        None => 8192,
    };
    let dev = swax_tensor::cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let randn = |seed| -> Result<Tensor> {
        Tensor::randn(vec![B, t, H, D], 1.0, seed, DType::F32, Device::Cpu)?
            .to_dtype(DType::BF16)?
            .to_device(gpu)
    };
    let (q, k, v, dout) = (randn(1)?, randn(2)?, randn(3)?, randn(4)?);
    let scale = 1.0 / (D as f64).sqrt();
    println!("swax SWA, B={B} T={t} H={H} D={D} bf16, median of {REPS}");
    println!("| window | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |");
    println!("|---|---|---|---|---|");
    for w in [128, 512, 2048, t] {
        let fwd = median_ms(&dev, 3, REPS, || q.swa(&k, &v, w, scale).map(drop))?;
        let both = median_ms(&dev, 3, REPS, || {
            let (o, lse) = q.swa(&k, &v, w, scale)?;
            q.swa_backward(&k, &v, &o, &lse, &dout, w, scale).map(drop)
        })?;
        let flop = 4.0 * (B * H * t * D) as f64 * avg_keys(t, w);
        let label = if w >= t {
            format!("full ({w})")
        } else {
            w.to_string()
        };
        println!(
            "| {label} | {fwd:.3} | {:.0} | {both:.3} | {:.0} |",
            flop / fwd / 1e9,
            3.5 * flop / both / 1e9
        );
    }
    Ok(())
}
