//! Shared by the GPU tests: getting the device (or skipping), deterministic random data,
//! poisoned outputs, up/downloads in either float dtype, and tolerant comparison.
#![allow(dead_code)] // each test binary uses its own subset

use half::bf16;
use swax_cuda::{Buffer, CudaDevice, DType};

/// The device under test (its tests are ignored unless asked for: `--include-ignored`), or
/// `None` after printing why the test is skipped. With
/// `SWAX_REQUIRE_CUDA=1` a missing device fails the test instead, so a GPU run cannot pass by
/// skipping.
pub fn device() -> Option<CudaDevice> {
    match CudaDevice::new(0) {
        Ok(d) => Some(d),
        Err(err) => {
            if std::env::var("SWAX_REQUIRE_CUDA").as_deref() == Ok("1") {
                panic!("SWAX_REQUIRE_CUDA=1 but no CUDA device: {err}");
            }
            eprintln!("skipping: no CUDA device: {err}");
            None
        }
    }
}

/// `let dev = gpu!();` at the top of a GPU test: the device, or return (skip).
#[macro_export]
macro_rules! gpu {
    () => {
        match common::device() {
            Some(d) => d,
            None => return,
        }
    };
}

/// The float dtypes every float kernel is tested in.
pub const FLOATS: [DType; 2] = [DType::F32, DType::BF16];

/// splitmix64: deterministic, dependency-free test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
}

/// The values the device sees after storing `v` as `dtype`.
pub fn rounded(dtype: DType, v: &[f32]) -> Vec<f32> {
    match dtype {
        DType::BF16 => v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect(),
        _ => v.to_vec(),
    }
}

pub fn upload(dev: &CudaDevice, dtype: DType, v: &[f32]) -> Buffer {
    match dtype {
        DType::F32 => dev.htod(v).unwrap(),
        DType::BF16 => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            dev.htod(&h).unwrap()
        }
        other => panic!("upload of {other}"),
    }
}

pub fn download(dev: &CudaDevice, b: &Buffer) -> Vec<f32> {
    match b.dtype() {
        DType::F32 => dev.dtoh::<f32>(b).unwrap(),
        DType::BF16 => dev
            .dtoh::<bf16>(b)
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        other => panic!("download of {other}"),
    }
}

/// An output buffer filled with NaN, so any element a kernel fails to write fails the test.
pub fn poisoned(dev: &CudaDevice, dtype: DType, n: usize) -> Buffer {
    match dtype {
        DType::U32 => dev.htod(&vec![0xdead_beefu32; n]).unwrap(),
        _ => upload(dev, dtype, &vec![f32::NAN; n]),
    }
}

/// (rtol, atol) for a kernel's output stored as `dtype`.
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::BF16 => (1e-2, 1e-2),
        _ => (1e-5, 1e-5),
    }
}

/// Fails unless every `got[i]` is within `atol + rtol * |want[i]|`; NaN never passes.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], (rtol, atol): (f64, f64)) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g as f64;
        let err = (g - w).abs();
        assert!(
            !g.is_nan() && err <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w} (|err| {err:.3e}, rtol {rtol}, atol {atol})"
        );
    }
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Queues `ones [4, 8] @ ones [8, 2]` in f32 through cuBLAS (one call) and returns the product's
/// buffer (every element 8): the smallest GEMM a test of what the device was asked can count.
pub fn ones_gemm(dev: &CudaDevice) -> Buffer {
    let (a, b) = (
        dev.htod(&[1.0f32; 4 * 8]).unwrap(),
        dev.htod(&[1.0f32; 8 * 2]).unwrap(),
    );
    let mut c = dev.alloc(DType::F32, 4 * 2).unwrap();
    let layout = swax_cuda::MatmulLayout {
        batch: 1,
        m: 4,
        n: 2,
        k: 8,
        lhs_transposed: false,
        rhs_transposed: false,
        lhs_batch_stride: 0,
        rhs_batch_stride: 0,
    };
    let args = swax_cuda::GemmArgs {
        layout,
        a: &a,
        b: &b,
        c: &mut c,
        c_stride: 0,
        alpha: 1.0,
        beta: 0.0,
        allow_tf32: false,
    };
    swax_cuda::gemm(dev, args).unwrap();
    c
}
