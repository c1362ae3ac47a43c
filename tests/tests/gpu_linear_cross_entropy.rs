//! The fused linear cross-entropy (`swax_nn::layers::linear_cross_entropy`) on the GPU: loss, dx
//! and dW against the CPU in f32 and bf16 and against the unfused GPU path, at odd sizes (groups
//! that do not divide the rows, a vocabulary that is no multiple of any tile); every row ignored;
//! and at swax-small's shape the pool's peak against the unfused path's, which holds the `[N, V]`
//! logits and their gradient. Skips without a GPU (see `swax_tests::gpu`).
use std::sync::Mutex;
use swax_autograd::Tape;
use swax_nn::layers::linear_cross_entropy::linear_cross_entropy;
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::{gpu, relative_error};

const IGNORE: u32 = u32::MAX;

/// The memory test reads the pool's peak, which any test running beside it would raise.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// x `[n, d]` and W `[d, v]` in f32 on the CPU, scaled so the logits are O(1), and targets with
/// every fifth row ignored.
fn inputs(n: usize, d: usize, v: usize, seed: u64) -> (Tensor, Tensor, Tensor) {
    let targets: Vec<u32> = (0..n)
        .map(|i| match i % 5 {
            2 => IGNORE,
            _ => ((i * 7919 + seed as usize) % v) as u32,
        })
        .collect();
    let randn = |dims: [usize; 2], std, seed| {
        Tensor::randn(dims, std, seed, DType::F32, Device::Cpu).unwrap()
    };
    (
        randn([n, d], 1.0, seed),
        randn([d, v], 1.0 / (d as f64).sqrt(), seed + 1),
        Tensor::from_vec(targets, [n], Device::Cpu).unwrap(),
    )
}

type Loss = dyn Fn(&Tape, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;

fn fused(rows: usize) -> impl Fn(&Tape, &Tensor, &Tensor, &Tensor) -> Result<Tensor> {
    move |tape, x, w, t| linear_cross_entropy(tape, x, w, t, Some(IGNORE), rows)
}

fn unfused(tape: &Tape, x: &Tensor, w: &Tensor, t: &Tensor) -> Result<Tensor> {
    tape.cross_entropy(&tape.matmul(x, w)?, t, Some(IGNORE))
}

/// The loss, dx and dW of `f` with the inputs cast to `dtype` on `device`.
fn run(
    f: &Loss,
    (x, w, t): &(Tensor, Tensor, Tensor),
    dtype: DType,
    device: Device,
) -> Result<[Tensor; 3]> {
    let on = |a: &Tensor| a.to_dtype(dtype)?.to_device(device);
    let (x, w, t) = (on(x)?, on(w)?, t.to_device(device)?);
    let tape = Tape::new();
    tape.watch(&x);
    tape.watch(&w);
    let loss = f(&tape, &x, &w, &t)?;
    let mut grads = tape.backward(&loss)?;
    let mut grad = |a: &Tensor| grads.remove(a).expect("a watched input has a gradient");
    Ok([loss, grad(&x), grad(&w)])
}

/// f32 on both devices differs by summation order only; bf16 rounds the logits and every stored
/// gradient to 8 significant bits (2^-9 ≈ 2e-3 relative each), a few roundings deep: the
/// tolerances of `gpu_parity`.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        _ => 2e-2,
    }
}

fn assert_close(what: &str, got: &[Tensor; 3], want: &[Tensor; 3], tol: f64) {
    for (name, (g, w)) in ["loss", "dx", "dW"].iter().zip(got.iter().zip(want)) {
        let e = relative_error(g, w).unwrap();
        assert!(
            e <= tol,
            "{what}: {name} relative error {e:.3e} > {tol:.0e}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn matches_the_cpu_and_the_unfused_path_in_f32_and_bf16() {
    let Some(device) = gpu() else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let case = inputs(1000, 96, 5003, 1);
    for dtype in [DType::F32, DType::BF16] {
        let got = run(&fused(300), &case, dtype, device).unwrap();
        let cpu = run(&fused(300), &case, dtype, Device::Cpu).unwrap();
        let whole = run(&unfused, &case, dtype, device).unwrap();
        assert_close(
            &format!("{dtype:?} GPU vs CPU"),
            &got,
            &cpu,
            tolerance(dtype),
        );
        assert_close(
            &format!("{dtype:?} fused vs unfused on the GPU"),
            &got,
            &whole,
            tolerance(dtype),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn every_row_ignored_gives_zero_loss_and_gradients() {
    let Some(device) = gpu() else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (x, w, _) = inputs(70, 32, 257, 2);
    let ignored = Tensor::from_vec(vec![IGNORE; 70], [70], Device::Cpu).unwrap();
    for dtype in [DType::F32, DType::BF16] {
        let out = run(
            &fused(32),
            &(x.clone(), w.clone(), ignored.clone()),
            dtype,
            device,
        )
        .unwrap();
        for t in &out {
            assert!(
                t.to_f64_vec().unwrap().iter().all(|&v| v == 0.0),
                "{dtype:?}"
            );
        }
    }
}

/// At swax-small's shape (B 16 x T 4096 rows, d 768, V 50304, bf16) the unfused path holds the
/// logits and their gradient, 2 x 6.6 GB; the fused one a group's (2048 rows: 2 x 206 MB) and
/// dW's f32 sums. Prints both peaks (the pool's, above what the inputs hold) for the record.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn the_fused_loss_holds_one_group_of_logits_not_all() {
    let Some(device) = gpu() else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (n, d, v) = (16 * 4096, 768, 50304);
    let case = inputs(n, d, v, 3);
    let gpu = swax_tensor::cuda::device(0).unwrap();
    let peak = |f: &Loss| {
        let on = |a: &Tensor| a.to_dtype(DType::BF16)?.to_device(device);
        let (x, w, t) = (on(&case.0)?, on(&case.1)?, case.2.to_device(device)?);
        let base = gpu.pool_stats().in_use;
        gpu.reset_peak();
        let tape = Tape::new();
        tape.watch(&x);
        tape.watch(&w);
        let loss = f(&tape, &x, &w, &t)?;
        let grads = tape.backward(&loss)?;
        drop((loss, grads));
        Ok::<_, swax_tensor::Error>((gpu.pool_stats().peak_in_use - base) as f64)
    };
    let fused_peak = peak(&fused(2048)).unwrap();
    let unfused_peak = peak(&unfused).unwrap();
    let logits = (n * v * 2) as f64;
    eprintln!(
        "peak above the inputs at N {n}, d {d}, V {v}, bf16: fused (2048 rows at a time) \
         {:.3} GB, unfused {:.3} GB; the logits alone {:.3} GB",
        fused_peak / 1e9,
        unfused_peak / 1e9,
        logits / 1e9
    );
    assert!(unfused_peak >= 2.0 * logits, "unfused {unfused_peak}");
    assert!(fused_peak < 0.25 * logits, "fused {fused_peak}");
}
