//! bench-cuda: times swax-cuda against the ceilings it should approach, on the GPU machine,
//! and prints a markdown table.
//!
//! - bf16 GEMM (4096^3, 8192^3) through `gemm` and through a raw cuBLAS call, TFLOP/s;
//! - memory-bound kernels on >= 256 MiB inputs against a device-to-device copy, GB/s counting
//!   bytes read + written once;
//! - an allocation served by the pool against cuMemAlloc + cuMemFree;
//! - the host cost of one kernel launch, and what cudarc's per-buffer event tracking (its issue
//!   #386) would add to it: a launch through cudarc's own `launch_builder` on a `CudaSlice`
//!   created with tracking on, then off (swax keeps no cudarc-managed buffers, so it never pays
//!   for tracking).
//!
//! GPU work is timed with CUDA events around each repetition after warm-up; the median is
//! reported. Inputs are random, never zeros. Run: `bench-cuda [--quick]`.

use cudarc::cublas::{result as cublas, sys as cublas_sys};
use cudarc::driver::result as driver;
use cudarc::driver::PushKernelArg;
use half::bf16;
use std::time::Instant;
use swax_cuda::kernels::binary::{binary_same_shape, BinaryOp};
use swax_cuda::kernels::cast::fill;
use swax_cuda::kernels::cross_entropy::{cross_entropy, cross_entropy_backward};
use swax_cuda::kernels::norm::rms_norm;
use swax_cuda::kernels::softmax::{softmax, Softmax};
use swax_cuda::kernels::unary::{unary, UnaryOp};
use swax_cuda::timing::median_ms as time_ms;
use swax_cuda::{gemm, Buffer, CudaDevice, CudaError, DType, GemmArgs, MatmulLayout};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Row {
    what: String,
    size: String,
    ours: String,
    reference: String,
    /// How many times better ours is (throughput ratio, or time ratio for costs); `None` where
    /// the reference is context rather than a competitor.
    ratio: Option<f64>,
}

/// Random values in [-1, 1) as `dtype`, generated on the host (an LCG: cheap for 10^8 values).
fn random(dev: &CudaDevice, dtype: DType, n: usize, seed: u64) -> Result<Buffer> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    };
    Ok(match dtype {
        DType::F32 => dev.htod(&(0..n).map(|_| next()).collect::<Vec<f32>>())?,
        DType::BF16 => dev.htod(&(0..n).map(|_| bf16::from_f32(next())).collect::<Vec<_>>())?,
        DType::U32 => dev.htod(
            &(0..n)
                .map(|_| (next().abs() * 50000.0) as u32)
                .collect::<Vec<_>>(),
        )?,
        DType::U8 => dev.htod(
            &(0..n)
                .map(|_| (next().abs() * 255.0) as u8)
                .collect::<Vec<_>>(),
        )?,
        // Refused: the GPU holds no f64.
        DType::F64 => dev.alloc(dtype, n)?,
    })
}

/// A cuBLAS handle of our own on the device's stream, for the raw-cuBLAS reference.
struct RawBlas(cublas_sys::cublasHandle_t);

impl RawBlas {
    fn new(dev: &CudaDevice) -> Result<RawBlas> {
        dev.context().bind_to_thread()?;
        let h = cublas::create_handle()?;
        // SAFETY: a fresh handle and the device's live stream of the current context.
        unsafe { cublas::set_stream(h, dev.stream().cu_stream() as cublas_sys::cudaStream_t)? };
        Ok(RawBlas(h))
    }

    /// C = A B for square bf16 n x n (column-major, as cuBLAS sees them), f32 compute.
    fn gemm_bf16(
        &self,
        n: usize,
        a: &Buffer,
        b: &Buffer,
        c: &mut Buffer,
    ) -> std::result::Result<(), CudaError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let n = n as i32;
        // SAFETY: a, b, c hold n * n bf16; alpha/beta are host f32 matching the compute type.
        unsafe {
            cublas::gemm_ex(
                self.0,
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                n,
                &alpha as *const f32 as *const _,
                a.device_ptr() as *const _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                n,
                b.device_ptr() as *const _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                n,
                &beta as *const f32 as *const _,
                c.device_ptr() as *mut _,
                cublas_sys::cudaDataType::CUDA_R_16BF,
                n,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Blas {
            call: "cublasGemmEx",
            message: format!("{e:?}"),
        })
    }
}

impl Drop for RawBlas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { cublas::destroy_handle(self.0) };
    }
}

fn bench_gemm(dev: &CudaDevice, rows: &mut Vec<Row>, reps: usize) -> Result<()> {
    let raw = RawBlas::new(dev)?;
    for n in [4096usize, 8192] {
        let a = random(dev, DType::BF16, n * n, 1)?;
        let b = random(dev, DType::BF16, n * n, 2)?;
        let mut c = dev.alloc(DType::BF16, n * n)?;
        let flops = 2.0 * (n as f64).powi(3);
        let ours = time_ms(dev, 5, reps, || {
            gemm(
                dev,
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
                    a: &a,
                    b: &b,
                    c: &mut c,
                    c_stride: 0,
                    alpha: 1.0,
                    beta: 0.0,
                    allow_tf32: false,
                },
            )
        })?;
        let reference = time_ms(dev, 5, reps, || raw.gemm_bf16(n, &a, &b, &mut c))?;
        let tflops = |ms: f64| flops / (ms * 1e-3) / 1e12;
        rows.push(Row {
            what: "bf16 GEMM (f32 accumulate) vs raw cublasGemmEx".into(),
            size: format!("{n}^3"),
            ours: format!("{:.0} TFLOP/s", tflops(ours)),
            reference: format!("{:.0} TFLOP/s", tflops(reference)),
            ratio: Some(reference / ours),
        });
    }
    Ok(())
}

fn bench_memory(dev: &CudaDevice, rows: &mut Vec<Row>, reps: usize) -> Result<()> {
    const BYTES: usize = 256 << 20;
    let gbs = |bytes: f64, ms: f64| bytes / (ms * 1e-3) / 1e9;
    // The ceiling: a device-to-device copy of the same size.
    let copy_src = random(dev, DType::F32, BYTES / 4, 3)?;
    let mut copy_dst = dev.alloc(DType::F32, BYTES / 4)?;
    let copy_ms = time_ms(dev, 3, reps, || dev.copy(&copy_src, &mut copy_dst))?;
    let copy_gbs = gbs(2.0 * BYTES as f64, copy_ms);
    drop((copy_src, copy_dst));
    let mut push = |what: &str, size: String, bytes: f64, ms: f64| {
        let ours = gbs(bytes, ms);
        rows.push(Row {
            what: format!("{what} vs device-to-device copy"),
            size,
            ours: format!("{ours:.0} GB/s"),
            reference: format!("{copy_gbs:.0} GB/s"),
            ratio: Some(ours / copy_gbs),
        });
    };

    for dt in [DType::F32, DType::BF16] {
        let n = BYTES / dt.size_bytes();
        let bytes = BYTES as f64;
        let x = random(dev, dt, n, 4)?;
        let x2 = random(dev, dt, n, 5)?;
        let mut y = dev.alloc(dt, n)?;
        let size = format!("{n} x {dt}");
        let ms = time_ms(dev, 3, reps, || unary(dev, UnaryOp::Silu, &x, &mut y))?;
        push("unary silu", size.clone(), 2.0 * bytes, ms);
        let ms = time_ms(dev, 3, reps, || {
            binary_same_shape(dev, BinaryOp::Add, &x, &x2, &mut y)
        })?;
        push("binary add", size.clone(), 3.0 * bytes, ms);
        let row = 4096;
        let ms = time_ms(dev, 3, reps, || {
            softmax(dev, Softmax::Softmax, &x, row, &mut y)
        })?;
        push("softmax rows of 4096", size.clone(), 2.0 * bytes, ms);
        let w = random(dev, DType::F32, row, 6)?;
        let mut rstd = dev.alloc(DType::F32, n / row)?;
        let ms = time_ms(dev, 3, reps, || {
            rms_norm(dev, &x, row, &w, 1e-5, None, &mut y, &mut rstd)
        })?;
        push("rms_norm rows of 4096", size, 2.0 * bytes, ms);
    }

    let vocab = 50304;
    let rows_ce = (BYTES / 2).div_ceil(vocab);
    let logits = random(dev, DType::BF16, rows_ce * vocab, 7)?;
    let targets = random(dev, DType::U32, rows_ce, 8)?;
    let bytes = (rows_ce * vocab * 2) as f64;
    let size = format!("{rows_ce} x {vocab} bf16");
    let ms = time_ms(dev, 3, reps, || {
        cross_entropy(dev, &logits, vocab, &targets, u32::MAX).map(drop)
    })?;
    push("cross_entropy forward", size.clone(), bytes, ms);
    let saved = cross_entropy(dev, &logits, vocab, &targets, u32::MAX)?;
    let dloss = dev.htod(&[1.0f32])?;
    let mut dlogits = dev.alloc(DType::BF16, rows_ce * vocab)?;
    let ms = time_ms(dev, 3, reps, || {
        cross_entropy_backward(
            dev,
            &logits,
            vocab,
            &targets,
            u32::MAX,
            &saved.lse,
            &saved.stats,
            &dloss,
            &mut dlogits,
        )
    })?;
    push("cross_entropy backward", size, 2.0 * bytes, ms);
    Ok(())
}

fn bench_alloc(dev: &CudaDevice, rows: &mut Vec<Row>) -> Result<()> {
    let bytes = 4 << 20;
    let iters = 20_000;
    drop(dev.alloc(DType::U8, bytes)?); // the pool now caches one block of this size
    let t = Instant::now();
    for _ in 0..iters {
        drop(dev.alloc(DType::U8, bytes)?);
    }
    let pool_ns = t.elapsed().as_nanos() as f64 / iters as f64;

    let iters = 1_000;
    dev.context().bind_to_thread()?;
    let t = Instant::now();
    for _ in 0..iters {
        // SAFETY: allocate and immediately free device memory nothing uses.
        unsafe {
            let p = driver::malloc_sync(bytes)?;
            driver::free_sync(p)?;
        }
    }
    let driver_ns = t.elapsed().as_nanos() as f64 / iters as f64;
    rows.push(Row {
        what: "allocation + free: pool vs cuMemAlloc + cuMemFree".into(),
        size: "4 MiB".into(),
        ours: format!("{pool_ns:.0} ns"),
        reference: format!("{driver_ns:.0} ns"),
        ratio: Some(driver_ns / pool_ns),
    });
    Ok(())
}

fn bench_launch(dev: &CudaDevice, rows: &mut Vec<Row>) -> Result<()> {
    let mut one = dev.alloc(DType::F32, 1)?;
    for _ in 0..100 {
        fill(dev, &mut one, 1.0)?;
    }
    dev.synchronize()?;
    let iters = 20_000;
    let t = Instant::now();
    for _ in 0..iters {
        fill(dev, &mut one, 1.0)?;
    }
    let host_us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    dev.synchronize()?;
    let total_us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    rows.push(Row {
        what: "kernel launch: host enqueue cost vs enqueue + run".into(),
        size: "1 element".into(),
        ours: format!("{host_us:.2} us"),
        reference: format!("{total_us:.2} us"),
        ratio: None,
    });
    Ok(())
}

fn bench_event_tracking(dev: &CudaDevice, rows: &mut Vec<Row>) -> Result<()> {
    let ptx = cudarc::nvrtc::compile_ptx(
        "extern \"C\" __global__ void touch(float* x) { x[0] += 1.0f; }",
    )?;
    let ctx = dev.context();
    let touch = ctx.load_module(ptx)?.load_function("touch")?;
    let stream = dev.stream();
    let launch_us = |tracking: bool| -> Result<f64> {
        // SAFETY: one stream only, so there is no cross-stream use for tracking to order; the
        // flag only decides whether the slice made next records events. It is switched back off,
        // as swax-cuda leaves it.
        unsafe {
            if tracking {
                ctx.enable_event_tracking()
            } else {
                ctx.disable_event_tracking()
            }
        }
        let mut x = stream.alloc_zeros::<f32>(1)?;
        // SAFETY: as above.
        unsafe { ctx.disable_event_tracking() };
        let cfg = cudarc::driver::LaunchConfig::for_num_elems(1);
        let mut launch = || -> Result<()> {
            let mut args = stream.launch_builder(&touch);
            args.arg(&mut x);
            // SAFETY: `touch` takes one float pointer and writes its first element; `x` holds one.
            unsafe { args.launch(cfg)? };
            Ok(())
        };
        for _ in 0..100 {
            launch()?;
        }
        stream.synchronize()?;
        let iters = 20_000;
        let t = Instant::now();
        for _ in 0..iters {
            launch()?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
        stream.synchronize()?;
        Ok(us)
    };
    let (on, off) = (launch_us(true)?, launch_us(false)?);
    rows.push(Row {
        what: "cudarc launch_builder: event tracking off vs on (cudarc #386)".into(),
        size: "1 element".into(),
        ours: format!("{off:.2} us"),
        reference: format!("{on:.2} us"),
        ratio: Some(on / off),
    });
    Ok(())
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 5 } else { 51 };
    let dev = CudaDevice::new(0)?;
    println!("device: {dev:?}, {} SMs\n", dev.sm_count());
    let mut rows = Vec::new();
    bench_launch(&dev, &mut rows)?;
    bench_event_tracking(&dev, &mut rows)?;
    bench_alloc(&dev, &mut rows)?;
    bench_gemm(&dev, &mut rows, reps)?;
    bench_memory(&dev, &mut rows, reps)?;
    dev.take_kernel_errors()?;

    println!("| benchmark | size | swax-cuda | reference | ours vs reference (>1: ours better) |");
    println!("|---|---|---|---|---|");
    for r in rows {
        let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}"));
        println!(
            "| {} | {} | {} | {} | {ratio} |",
            r.what, r.size, r.ours, r.reference
        );
    }
    let s = dev.pool_stats();
    println!(
        "\npool: peak {} MiB in use, {} MiB reserved, {} cache hits, {} driver allocations",
        s.peak_in_use >> 20,
        s.reserved >> 20,
        s.cache_hits,
        s.driver_allocs
    );
    Ok(())
}
