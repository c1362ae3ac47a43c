//! GPU benchmark of the fused attention mixers at the shape their PyTorch peers are timed at
//! (B=8, T=8192, H=16, D=128, bf16): forward alone and forward + backward, event-timed medians
//! after warm-up, on random inputs. Sliding-window attention at windows 128, 512, 2048 and T,
//! with TFLOP/s counting only in-window query-key pairs (forward 4·B·H·T·avg_keys·D, forward +
//! backward 3.5 times that); RAttention at window 512: its linear branch alone (`rla`) and the
//! whole fused mixer node (RoPE, SWA, the linear branch, both RMSNorms and their sum, forward and
//! backward), which is nn's `mixers::rattention::node::rattention`, the node the models' R
//! layers run. Needs a GPU; the peers are timed in the same run by
//! bench/peers/attention_peers.py.
//!
//!     .gpu/bin/bench-attention-gpu [T] [all|swa|rattention] [SWA WINDOWS, comma-separated]
//!
//! The windows default to 128, 512, 2048 and T (one window alone is what a profiler wants).
use swax_autograd::Tape;
use swax_cuda::timing::median_ms;
use swax_nn::mixers::attention::{self, SwaBackward, SwaIn};
use swax_nn::mixers::rattention::{self as ra, node, Config, RlaBackward};
use swax_tensor::{DType, Device, Error, Result, Tensor};

const B: usize = 8;
const H: usize = 16;
const D: usize = 128;
const REPS: usize = 20;
/// RAttention's window, and its peer's time: FlexAttention at w=512 (4.78 ms) plus fla's
/// `chunk_linear_attn` (7.18 ms), each measured on the H200 on 2026-11-29 (BENCHMARKS.md).
const RA_WINDOW: usize = 512;
const RA_PEER_MS: f64 = 11.96;

/// Mean keys a query sees: sum over t of min(t + 1, w), divided by T.
fn avg_keys(t: usize, w: usize) -> f64 {
    (0..t).map(|i| (i + 1).min(w) as f64).sum::<f64>() / t as f64
}

struct Inputs {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    t: usize,
    scale: f64,
}

fn swa(dev: &swax_cuda::Device, x: &Inputs, windows: &[usize]) -> Result<()> {
    let Inputs {
        q,
        k,
        v,
        dout,
        t,
        scale,
    } = x;
    println!("swax SWA, B={B} T={t} H={H} D={D} bf16, median of {REPS}");
    println!("| window | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |");
    println!("|---|---|---|---|---|");
    let input = SwaIn { q, k, v };
    for &w in windows {
        let fwd = median_ms(dev, 3, REPS, || {
            attention::forward(&input, w, *scale).map(drop)
        })?;
        let both = median_ms(dev, 3, REPS, || {
            let out = attention::forward(&input, w, *scale)?;
            let x = SwaBackward {
                input: input.clone(),
                out: out.try_map(Ok)?,
                dout,
            };
            attention::backward(&x, w, *scale).map(drop)
        })?;
        let flop = 4.0 * (B * H * t * D) as f64 * avg_keys(*t, w);
        let label = if w >= *t {
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

/// nn's fused RAttention node at window `RA_WINDOW` with its default settings (RoPE from
/// position 0 with theta 10000, eps 1e-6, chunks of 64): forward alone on a tape that watches
/// nothing, so it records nothing, or forward and, from `dout`, backward to q, k, v and both
/// norm scales.
fn rattention_node(x: &Inputs, norms: (&Tensor, &Tensor), backward: bool) -> Result<()> {
    let Inputs { q, k, v, dout, .. } = x;
    let tape = Tape::new();
    if backward {
        for input in [q, k, v, norms.0, norms.1] {
            tape.watch(input);
        }
    }
    let cfg = Config::new(RA_WINDOW);
    let y = node::rattention(&tape, q, k, v, norms.0, norms.1, &cfg)?;
    if backward {
        tape.backward_from(&y, dout)?;
    }
    Ok(())
}

fn rattention(dev: &swax_cuda::Device, x: &Inputs) -> Result<()> {
    let Inputs {
        q, k, v, dout, t, ..
    } = x;
    let w = RA_WINDOW;
    let norm = |seed| {
        Tensor::randn(vec![D], 0.3, seed, DType::F32, Device::Cpu)?
            .add_scalar(1.0)?
            .to_dtype(DType::BF16)?
            .to_device(Device::Cuda(0))
    };
    let (ns, nr) = (norm(5)?, norm(6)?);
    println!("swax RAttention w={w}, B={B} T={t} H={H} D={D} bf16, median of {REPS}; peer {RA_PEER_MS} ms fwd+bwd");
    println!("| part | fwd ms | fwd+bwd ms | fwd+bwd TFLOP/s (in-window pairs) | speed vs peer |");
    println!("|---|---|---|---|---|");
    let input = SwaIn { q, k, v };
    let rla_fwd = median_ms(dev, 3, REPS, || ra::forward(&input, w, 64).map(drop))?;
    let rla_both = median_ms(dev, 3, REPS, || {
        ra::forward(&input, w, 64)?;
        let x = RlaBackward {
            input: input.clone(),
            dout,
        };
        ra::backward(&x, w, 64).map(drop)
    })?;
    println!("| linear branch | {rla_fwd:.3} | {rla_both:.3} | | |");
    let fwd = median_ms(dev, 3, REPS, || rattention_node(x, (&ns, &nr), false))?;
    let both = median_ms(dev, 3, REPS, || rattention_node(x, (&ns, &nr), true))?;
    let flop = 3.5 * 4.0 * (B * H * t * D) as f64 * avg_keys(*t, w);
    println!(
        "| whole node | {fwd:.3} | {both:.3} | {:.0} | {:.2}x |",
        flop / both / 1e9,
        RA_PEER_MS / both
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let t: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| Error::Invalid {
            op: "bench-attention-gpu",
            msg: format!("T {s:?}: {e}"),
        })?,
        None => 8192,
    };
    let which = args.next().unwrap_or_else(|| "all".into());
    let windows = match args.next() {
        Some(list) => list
            .split(',')
            .map(|w| match w.parse::<usize>() {
                Ok(w) if w > 0 => Ok(w),
                _ => Err(Error::Invalid {
                    op: "bench-attention-gpu",
                    msg: format!("window {w:?}: expected a positive integer"),
                }),
            })
            .collect::<Result<Vec<_>>>()?,
        None => vec![128, 512, 2048, t],
    };
    let dev = swax_tensor::cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let randn = |seed| -> Result<Tensor> {
        Tensor::randn(vec![B, t, H, D], 1.0, seed, DType::F32, Device::Cpu)?
            .to_dtype(DType::BF16)?
            .to_device(gpu)
    };
    let x = Inputs {
        q: randn(1)?,
        k: randn(2)?,
        v: randn(3)?,
        dout: randn(4)?,
        t,
        scale: 1.0 / (D as f64).sqrt(),
    };
    match which.as_str() {
        "all" => {
            swa(&dev, &x, &windows)?;
            rattention(&dev, &x)
        }
        "swa" => swa(&dev, &x, &windows),
        "rattention" => rattention(&dev, &x),
        other => Err(Error::Invalid {
            op: "bench-attention-gpu",
            msg: format!("{other:?}: expected all, swa or rattention"),
        }),
    }
}
