//! CPU benchmark: f32 matmul GFLOP/s at 1024³ and 2048³, softmax and rms_norm GB/s, with numpy
//! (its BLAS, on the same cores) timed in the same run when python3 and numpy are there.
//!
//!     cargo run --release -p swax-bench --bin bench-cpu
use std::process::Command;
use std::time::Instant;
use swax_tensor::{DType, Device, Result, Tensor};

/// Median wall time of `reps` runs after one warm-up, in seconds.
fn median_secs(reps: usize, mut f: impl FnMut() -> Result<Tensor>) -> Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        let out = f()?;
        times.push(start.elapsed().as_secs_f64());
        drop(out);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[reps / 2])
}

/// numpy's median time for `a @ b` at n³ in f32, or None without python3/numpy.
fn numpy_matmul_secs(n: usize, reps: usize) -> Option<f64> {
    let script = format!(
        "import numpy as np, time\n\
         a = np.random.randn({n}, {n}).astype(np.float32); b = np.random.randn({n}, {n}).astype(np.float32)\n\
         a @ b\n\
         ts = []\n\
         for _ in range({reps}):\n    t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)\n\
         print(sorted(ts)[len(ts) // 2])"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn main() -> Result<()> {
    let threads = rayon::current_num_threads();
    println!("swax CPU benchmark, {threads} threads\n");
    println!("| op | size | swax | numpy | swax / numpy |");
    println!("|---|---|---|---|---|");
    for (n, reps) in [(1024, 21), (2048, 7)] {
        let a = Tensor::randn([n, n], 1.0, 1, DType::F32, Device::Cpu)?;
        let b = Tensor::randn([n, n], 1.0, 2, DType::F32, Device::Cpu)?;
        let flops = 2.0 * (n as f64).powi(3);
        let ours = flops / median_secs(reps, || a.matmul(&b))? / 1e9;
        let (theirs, ratio) = match numpy_matmul_secs(n, reps) {
            Some(s) => (
                format!("{:.0} GFLOP/s", flops / s / 1e9),
                format!("{:.2}x", ours / (flops / s / 1e9)),
            ),
            None => ("(numpy not found)".into(), "-".into()),
        };
        println!("| matmul f32 | {n}³ | {ours:.0} GFLOP/s | {theirs} | {ratio} |");
    }
    // Memory-bound kernels on 64 MiB of f32: bytes read plus bytes written per call.
    let (rows, cols) = (4096, 4096);
    let x = Tensor::randn([rows, cols], 1.0, 3, DType::F32, Device::Cpu)?;
    let w = Tensor::ones([cols], DType::F32, Device::Cpu)?;
    let bytes = 2.0 * (rows * cols * 4) as f64;
    let softmax = bytes / median_secs(11, || x.softmax())? / 1e9;
    let rms = bytes / median_secs(11, || Ok(x.rms_norm(&w, 1e-6)?.0))? / 1e9;
    println!("| softmax f32 | {rows}×{cols} | {softmax:.1} GB/s | | |");
    println!("| rms_norm f32 | {rows}×{cols} | {rms:.1} GB/s | | |");
    Ok(())
}
