//! GPU benchmark of the fused mLSTM and gated delta rule chunkwise kernels at the shape their
//! PyTorch peers are timed at (B=8, T=8192, H=16, D=128, bf16, chunk 64), or at another shape
//! (swax-small's mixers: 4096 16 12 32 64): forward alone, backward alone and forward +
//! backward, event-timed medians after warm-up, on random inputs (the gated delta rule's beta in
//! (0, 1) and log decay below 0, as its layer makes them). Needs a GPU; the peers are timed in
//! the same run by bench/peers/recurrent_peers.py.
//!
//!     .gpu/bin/bench-recurrent-gpu [T [B H Dk Dv]]
//!
//! `SWAX_MLSTM_THREADS` (a multiple of 32 up to 512) sets the mLSTM's block size in place of the
//! one its wrapper picks from the head size (nn/src/mixers/mlstm/cuda.rs, `block_threads`).
use swax_cuda::timing::median_ms;
use swax_nn::mixers::gated_delta::{
    self, GatedDeltaBackward, GatedDeltaGrads, GatedDeltaIn, GatedDeltaOut,
};
use swax_nn::mixers::mlstm::{self, MlstmBackward, MlstmGrads, MlstmIn, MlstmOut, MlstmState};
use swax_tensor::{DType, Device, Result, Tensor};

const CHUNK: usize = 64;
const REPS: usize = 10;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = |i: usize, name: &str, default: usize| -> Result<usize> {
        match args.get(i) {
            Some(s) => s.parse().map_err(|e| swax_tensor::Error::Invalid {
                op: "bench-recurrent-gpu",
                msg: format!("{name} {s:?}: {e}"),
            }),
            None => Ok(default),
        }
    };
    if args.len() > 1 && args.len() != 5 {
        return Err(swax_tensor::Error::Invalid {
            op: "bench-recurrent-gpu",
            msg: format!("expected [T [B H Dk Dv]], got {args:?}"),
        });
    }
    let t = size(0, "T", 8192)?;
    let (b, h) = (size(1, "B", 8)?, size(2, "H", 16)?);
    let (dk, dv) = (size(3, "Dk", 128)?, size(4, "Dv", 128)?);
    let dev = swax_tensor::cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let randn = |dims: Vec<usize>, std: f64, seed| -> Result<Tensor> {
        Tensor::randn(dims, std, seed, DType::F32, Device::Cpu)?
            .to_dtype(DType::BF16)?
            .to_device(gpu)
    };
    let (q, k, v) = (
        randn(vec![b, t, h, dk], 1.0, 1)?,
        randn(vec![b, t, h, dk], 1.0, 2)?,
        randn(vec![b, t, h, dv], 1.0, 3)?,
    );
    let (i, f) = (randn(vec![b, t, h], 1.0, 4)?, randn(vec![b, t, h], 1.0, 5)?);
    let zeros = |dims: Vec<usize>| Tensor::zeros(dims, DType::BF16, gpu);
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
    let eps = 1e-6;
    // The gradient of the final state: zeros, as where the final state is unused.
    let backward = |out: &MlstmOut| -> Result<MlstmGrads> {
        mlstm::backward(
            &MlstmBackward {
                input: x.clone(),
                out: out.try_map(Ok)?,
                dh: &dh,
                d_final: s0.try_map(Ok)?,
            },
            CHUNK,
            eps,
        )
    };
    let fwd = median_ms(&dev, 2, REPS, || mlstm::forward(&x, CHUNK, eps).map(drop))?;
    let both = median_ms(&dev, 2, REPS, || {
        backward(&mlstm::forward(&x, CHUNK, eps)?).map(drop)
    })?;
    // The backward alone, from the boundary states the forward stored: recomputing them in the
    // backward instead would add a forward pass (the state pass is the forward kernel).
    let bwd = {
        let out = mlstm::forward(&x, CHUNK, eps)?;
        median_ms(&dev, 2, REPS, || backward(&out).map(drop))?
    };
    let beta = randn(vec![b, t, h], 1.0, 7)?.sigmoid()?;
    let g = randn(vec![b, t, h], 1.0, 8)?.softplus()?.scale(-0.1)?;
    let s1 = zeros(vec![b, h, dk, dv])?;
    let gx = GatedDeltaIn {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
        state: &s1,
    };
    // The output stands in for its own gradient; the final state's gradient is zeros.
    let gdn_backward = |out: &GatedDeltaOut| -> Result<GatedDeltaGrads> {
        let x = GatedDeltaBackward {
            input: gx.clone(),
            boundary: &out.boundary,
            d_out: &out.o,
            d_final: &s1,
        };
        gated_delta::backward(&x, CHUNK)
    };
    let gdn_fwd = median_ms(&dev, 2, REPS, || gated_delta::forward(&gx, CHUNK).map(drop))?;
    let gdn_both = median_ms(&dev, 2, REPS, || {
        gdn_backward(&gated_delta::forward(&gx, CHUNK)?).map(drop)
    })?;
    let gdn_bwd = {
        let out = gated_delta::forward(&gx, CHUNK)?;
        median_ms(&dev, 2, REPS, || gdn_backward(&out).map(drop))?
    };
    println!(
        "swax chunkwise mixers, B={b} T={t} H={h} Dk={dk} Dv={dv} chunk={CHUNK} bf16, median of {REPS}"
    );
    println!("| mixer | fwd ms | bwd ms (stored states) | fwd+bwd ms |");
    println!("|---|---|---|---|");
    println!("| swax mLSTM | {fwd:.3} | {bwd:.3} | {both:.3} |");
    println!("| swax gated delta rule | {gdn_fwd:.3} | {gdn_bwd:.3} | {gdn_both:.3} |");
    Ok(())
}
