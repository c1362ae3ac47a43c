//! GPU benchmark through the engine: `Tensor` ops on the GPU (output taken from the pool, kernel
//! or cuBLAS call queued, tensor bookkeeping) against swax-cuda's bare call into a preallocated
//! output, and memory-bound ops against a device-to-device copy, in the same run. Event-timed
//! medians after warm-up, on random inputs. Needs a GPU.
//!
//!     .gpu/bin/bench-gpu        (built by tools/gpu-pack)
use swax_cuda::timing::median_ms;
use swax_cuda::{gemm, Buffer, GemmArgs, MatmulLayout};
use swax_tensor::{DType, Device, Error, Result, Tensor};

fn buffer(t: &Tensor) -> Result<&Buffer> {
    t.storage()
        .as_cuda()
        .map(|s| s.buffer())
        .ok_or(Error::Invalid {
            op: "bench-gpu",
            msg: "expected a GPU tensor".into(),
        })
}

fn main() -> Result<()> {
    let dev = swax_tensor::cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let randn = |dims: &[usize], seed, dtype| -> Result<Tensor> {
        Tensor::randn(dims.to_vec(), 1.0, seed, DType::F32, Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(gpu)
    };
    println!("| op | size | engine | reference | engine / reference |");
    println!("|---|---|---|---|---|");
    for n in [4096usize, 8192] {
        let (a, b) = (
            randn(&[n, n], 1, DType::BF16)?,
            randn(&[n, n], 2, DType::BF16)?,
        );
        let tflops = |ms: f64| 2.0 * (n as f64).powi(3) / ms / 1e9;
        let engine = median_ms(&dev, 3, 20, || a.matmul(&b).map(drop))?;
        let mut c = dev.alloc(swax_cuda::DType::BF16, n * n)?;
        let (ab, bb) = (buffer(&a)?, buffer(&b)?);
        let bare = median_ms(&dev, 3, 20, || {
            gemm(
                &dev,
                GemmArgs {
                    layout: MatmulLayout {
                        batch: 1,
                        m: n,
                        n,
                        k: n,
                        lhs_transposed: false,
                        rhs_transposed: false,
                        lhs_batch_stride: 0,
                        rhs_batch_stride: 0,
                    },
                    a: ab,
                    b: bb,
                    c: &mut c,
                    c_stride: 0,
                    alpha: 1.0,
                    beta: 0.0,
                    allow_tf32: false,
                },
            )
        })?;
        println!(
            "| matmul bf16 | {n}³ | {:.0} TFLOP/s | {:.0} TFLOP/s (swax_cuda::gemm) | {:.2} |",
            tflops(engine),
            tflops(bare),
            bare / engine
        );
    }
    // 256 MiB of f32 (or 128 Mi bf16 elements), rows of 4096: bytes read + written once.
    let (rows, cols) = (16384usize, 4096usize);
    for dtype in [DType::F32, DType::BF16] {
        let x = randn(&[rows, cols], 3, dtype)?;
        let y = randn(&[rows, cols], 4, dtype)?;
        let w = randn(&[cols], 5, dtype)?;
        let bytes = (rows * cols * dtype.size_bytes()) as f64;
        let mut copy_dst = dev.alloc(buffer(&x)?.dtype(), rows * cols)?;
        let xb = buffer(&x)?;
        let copy = median_ms(&dev, 3, 20, || dev.copy(xb, &mut copy_dst))?;
        let gbs = |moved: f64, ms: f64| moved / ms / 1e6;
        let copy_gbs = gbs(2.0 * bytes, copy);
        let row = |name: &str, moved: f64, ms: f64| {
            println!(
                "| {name} {dtype:?} | {rows}×{cols} | {:.0} GB/s | {copy_gbs:.0} GB/s (copy) | {:.2} |",
                gbs(moved, ms),
                gbs(moved, ms) / copy_gbs
            )
        };
        row(
            "silu",
            2.0 * bytes,
            median_ms(&dev, 3, 20, || x.silu().map(drop))?,
        );
        row(
            "add",
            3.0 * bytes,
            median_ms(&dev, 3, 20, || x.add(&y).map(drop))?,
        );
        // x as an MLP pre-activation [rows, 2F], F = cols / 2: the forward reads it and writes
        // h (half as much); the backward reads it and dh and writes dgu and h.
        let dh = y.narrow(1, 0, cols / 2)?;
        row(
            "swiglu",
            1.5 * bytes,
            median_ms(&dev, 3, 20, || x.swiglu().map(drop))?,
        );
        row(
            "swiglu_backward",
            3.0 * bytes,
            median_ms(&dev, 3, 20, || x.swiglu_backward(&dh).map(drop))?,
        );
        row(
            "softmax",
            2.0 * bytes,
            median_ms(&dev, 3, 20, || x.softmax().map(drop))?,
        );
        row(
            "rms_norm",
            2.0 * bytes,
            median_ms(&dev, 3, 20, || x.rms_norm(&w, 1e-6).map(drop))?,
        );
    }
    let (n, v) = (4096usize, 50304usize);
    let logits = randn(&[n, v], 6, DType::BF16)?;
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 7919 % v as u32).collect();
    let targets = Tensor::from_vec(targets, [n], Device::Cpu)?.to_device(gpu)?;
    let bytes = (n * v * 2) as f64;
    let fwd = median_ms(&dev, 3, 20, || {
        logits.cross_entropy(&targets, None).map(drop)
    })?;
    let (loss, stats) = logits.cross_entropy(&targets, None)?;
    let dloss = loss.ones_like()?;
    let bwd = median_ms(&dev, 3, 20, || {
        logits
            .cross_entropy_backward(&targets, &stats, &dloss, None)
            .map(drop)
    })?;
    println!(
        "| cross_entropy fwd BF16 | {n}×{v} | {:.0} GB/s | | |",
        bytes / fwd / 1e6
    );
    println!(
        "| cross_entropy bwd BF16 | {n}×{v} | {:.0} GB/s | | |",
        2.0 * bytes / bwd / 1e6
    );
    let stats = dev.pool_stats();
    println!("\npool: {stats:?}");
    Ok(())
}
