//! One decoding step of each mixer, for B rows (sequences) at once, as fused ops with a CPU and
//! a CUDA kernel each (`cpu.rs`, `cuda.rs` + `decode.cu`). The chunkwise kernels run a step as a
//! chunk of length one and attention recomputes every query of its window; these read the
//! carried state once and write the next one.
//!
//! **Recurrent steps** (the mLSTM's, the gated delta rule's): the step's pre-convolution row x
//! `[B, C]` (C = H (2 Dk + Dv): the q of every head, then k, then v), the short convolution's
//! weights `[C, K]` and its tail, the K - 1 inputs before the step `[B, K - 1, C]`. Each kernel
//! runs `silu(conv)` on the step (rounded to the data's dtype, as the chunkwise path stores it),
//! then its recurrence (equations: `mlstm/mod.rs`, `gated_delta/mod.rs`) on one token from the
//! state, and returns the output `[B, H, Dv]`, the next tail and the next state. The states are
//! f32 for bf16 data (else the data's dtype): f32 accumulates a long decoding without the
//! rounding a bf16 state would add every step. Gates `[B, H]`: the mLSTM's soft-capped input
//! and forget preactivations, the gated delta rule's beta and log decay.
//!
//! **Attention with one query** (`attend`): q `[B, H, D]` (RoPE applied at its position) against
//! the first `n` slots of a key and value cache `[B, S, Hkv, D]` (S >= n slots, keys with RoPE
//! applied at theirs): `o = softmax(scale · q·k) v` over those slots, grouped-query heads as in
//! `attention/mod.rs`. Softmax does not care about the order of the slots, so the cache of a
//! sliding window is a ring: the step's key overwrites the one that leaves the window.
//!
//! **RAttention's linear branch** (`rla_step`, equations: `rattention/mod.rs`): its SWA branch
//! is `attend`; its linear branch reads `S = sum phi(k_s)^T v_s` over the keys older than the
//! window, f32 `[B, Hkv, 2D, D]` (f64 for f64 data). A step first adds the key that leaves the
//! window, slot `slot` of the caches of keys *before* RoPE (phi reads them unrotated) and of
//! values `[B, S, Hkv, D]`, then returns `phi(q) · S` for q `[B, H, D]` (before RoPE) and the
//! next S. A slot not yet written holds zeros, and a zero value adds nothing, so the slot the
//! step's key enters can be given before the ring is full.
//!
//! **Attention's step input** (`split_rope`): the step's qkv projection `[B, (H + 2 Hkv) D]`
//! split into q `[B, H, D]` and k, v `[B, 1, Hkv, D]`, q and k rotated at the step's position:
//! what `split_heads` and two `rope`s give, in one launch on the GPU (the CPU runs those ops).
mod cpu;
mod cuda;

pub use cuda::attend_ranges;
#[cfg(test)]
pub(crate) use cuda::SOURCE;

use crate::mixers::mlstm::MlstmState;
use crate::mixers::recurrent::like_q;
use swax_tensor::cpu::CpuStorage;
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{DType, Device, DeviceOp, Error, Result, Shape, Storage, Tensor};

/// The short convolution's operands of a recurrent step: x `[B, C]`, weight `[C, K]`, tail
/// `[B, K - 1, C]`, all of the data's dtype.
#[derive(Clone, Debug)]
pub struct ConvStep<T = Tensor> {
    pub x: T,
    pub weight: T,
    pub tail: T,
}

/// The gated delta rule's step: beta and the log decay g `[B, H]`, the state `[B, H, Dk, Dv]`.
#[derive(Clone, Debug)]
pub struct GatedDeltaStep<T = Tensor> {
    pub conv: ConvStep<T>,
    pub beta: T,
    pub g: T,
    pub state: T,
}

/// The mLSTM's step: the preactivations i, f `[B, H]` and the state.
#[derive(Clone, Debug)]
pub struct MlstmStep<T = Tensor> {
    pub conv: ConvStep<T>,
    pub i: T,
    pub f: T,
    pub state: MlstmState<T>,
}

/// What a recurrent step returns: its output `[B, H, Dv]`, the next tail and the next state.
#[derive(Clone, Debug)]
pub struct StepOut<S> {
    pub out: Tensor,
    pub tail: Tensor,
    pub state: S,
}

/// One query per row and head, q `[B, H, D]`, against caches k, v `[B, S, Hkv, D]`.
#[derive(Clone, Debug)]
pub struct AttendIn<T = Tensor> {
    pub q: T,
    pub k: T,
    pub v: T,
}

swax_tensor::operands!(ConvStep { x, weight, tail });
swax_tensor::operands!(GatedDeltaStep {
    conv: nested,
    beta,
    g,
    state
});
swax_tensor::operands!(MlstmStep {
    conv: nested,
    i,
    f,
    state: nested
});
/// RAttention's linear branch at a step: q `[B, H, D]`, the caches k (before RoPE), v
/// `[B, S, Hkv, D]`, the state `[B, Hkv, 2D, D]`.
#[derive(Clone, Debug)]
pub struct RlaStepIn<T = Tensor> {
    pub q: T,
    pub k: T,
    pub v: T,
    pub state: T,
}

/// Attention's step input: its qkv projection `[B, (H + 2 Hkv) D]`.
#[derive(Clone, Debug)]
pub struct QkvStep<T = Tensor> {
    pub qkv: T,
}

swax_tensor::operands!(QkvStep { qkv });
swax_tensor::operands!(AttendIn { q, k, v });
swax_tensor::operands!(RlaStepIn { q, k, v, state });

/// The sizes of a recurrent step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    pub b: usize,
    pub h: usize,
    pub dk: usize,
    pub dv: usize,
    /// K, the convolution's taps.
    pub taps: usize,
}

impl StepShape {
    /// C, the width of the pre-convolution row.
    pub fn channels(&self) -> usize {
        self.h * (2 * self.dk + self.dv)
    }
}

/// The sizes of one-query attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttendShape {
    pub b: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    /// S, the cache's slots, of which the first `n` are attended.
    pub slots: usize,
    pub n: usize,
}

/// The dtype a step's state is kept in for data of `dtype`: f32 for bf16, else the data's.
pub fn state_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 => DType::F32,
        other => other,
    }
}

fn expect(op: &'static str, x: &Tensor, dims: &[usize], dtype: DType) -> Result<()> {
    if x.dims() != dims {
        return Err(Error::ShapeMismatch {
            op,
            lhs: Shape::new(dims.to_vec()),
            rhs: x.shape().clone(),
        });
    }
    if x.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            op,
            lhs: dtype,
            rhs: x.dtype(),
        });
    }
    Ok(())
}

/// The sizes of a recurrent step whose state C (or S) is `[B, H, Dk, Dv]`, checking the
/// convolution's operands and the gates against them.
fn step_shape(
    op: &'static str,
    conv: &ConvStep<&Tensor>,
    gates: [&Tensor; 2],
    state: &Tensor,
) -> Result<StepShape> {
    let dtype = conv.x.dtype();
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op, dtype });
    }
    let &[b, h, dk, dv] = state.dims() else {
        return Err(Error::Invalid {
            op,
            msg: format!("the state must be [B, H, Dk, Dv], got {}", state.shape()),
        });
    };
    let taps = conv.weight.dims().get(1).copied().unwrap_or(0);
    let s = StepShape { b, h, dk, dv, taps };
    if [b, h, dk, dv, taps].contains(&0) {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "needs every size >= 1: state {}, weight {}",
                state.shape(),
                conv.weight.shape()
            ),
        });
    }
    let c = s.channels();
    expect(op, conv.x, &[b, c], dtype)?;
    expect(op, conv.weight, &[c, taps], dtype)?;
    expect(op, conv.tail, &[b, taps - 1, c], dtype)?;
    for gate in gates {
        expect(op, gate, &[b, h], dtype)?;
    }
    expect(op, state, &[b, h, dk, dv], state_dtype(dtype))?;
    // One device for every operand: `Tensor::apply` checks it.
    Ok(s)
}

/// One step of the gated delta rule (`gated_delta/mod.rs`) after the short convolution.
pub fn gated_delta_step(x: &GatedDeltaStep<&Tensor>) -> Result<StepOut<Tensor>> {
    let op = GatedDeltaOp::NAME;
    let dims = step_shape(op, &x.conv, [x.beta, x.g], x.state)?;
    Tensor::apply(&GatedDeltaOp { dims }, x)
}

/// One step of the mLSTM (`mlstm/mod.rs`) after the short convolution; `eps` as there.
pub fn mlstm_step(x: &MlstmStep<&Tensor>, eps: f64) -> Result<StepOut<MlstmState>> {
    let op = MlstmOp::NAME;
    let dims = step_shape(op, &x.conv, [x.i, x.f], x.state.c)?;
    let sd = state_dtype(x.conv.x.dtype());
    expect(op, x.state.n, &[dims.b, dims.h, dims.dk], sd)?;
    expect(op, x.state.m, &[dims.b, dims.h], sd)?;
    Tensor::apply(&MlstmOp { dims, eps }, x)
}

/// Attention of one query per row and head to the first `n` slots of the caches; `scale`
/// `1/sqrt(D)` when None.
pub fn attend(x: &AttendIn<&Tensor>, n: usize, scale: Option<f64>) -> Result<Tensor> {
    let op = AttendOp::NAME;
    let (q, k) = (x.q, x.k);
    if !q.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: q.dtype(),
        });
    }
    like_q(op, q, k)?;
    like_q(op, q, x.v)?;
    let mismatch = || Error::ShapeMismatch {
        op,
        lhs: q.shape().clone(),
        rhs: k.shape().clone(),
    };
    let (&[b, h, d], &[kb, slots, hkv, kd]) = (q.dims(), k.dims()) else {
        return Err(mismatch());
    };
    if (kb, kd) != (b, d) || x.v.shape() != k.shape() {
        return Err(mismatch());
    }
    if hkv == 0 || h % hkv != 0 || n == 0 || n > slots {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "needs H {h} a multiple of Hkv {hkv} and 1 <= n {n} <= the cache's {slots} slots"
            ),
        });
    }
    let dims = AttendShape {
        b,
        h,
        hkv,
        d,
        slots,
        n,
    };
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    Tensor::apply(&AttendOp { dims, scale }, x)
}

/// RAttention's linear branch at a step: adds slot `slot` of the caches to the state, then reads
/// it with q. Returns the branch's output `[B, H, D]` (q's dtype) and the next state.
pub fn rla_step(x: &RlaStepIn<&Tensor>, slot: usize) -> Result<(Tensor, Tensor)> {
    let op = RlaStepOp::NAME;
    let (q, k) = (x.q, x.k);
    let dtype = q.dtype();
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op, dtype });
    }
    let &[b, slots, hkv, d] = k.dims() else {
        return Err(Error::Invalid {
            op,
            msg: format!("the key cache must be [B, S, Hkv, D], got {}", k.shape()),
        });
    };
    let h = q.dims().get(1).copied().unwrap_or(0);
    if hkv == 0 || h % hkv != 0 || slot >= slots {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "needs H {h} a multiple of Hkv {hkv} and slot {slot} < the cache's {slots} slots"
            ),
        });
    }
    expect(op, q, &[b, h, d], dtype)?;
    expect(op, k, &[b, slots, hkv, d], dtype)?;
    expect(op, x.v, &[b, slots, hkv, d], dtype)?;
    expect(op, x.state, &[b, hkv, 2 * d, d], state_dtype(dtype))?;
    let dims = AttendShape {
        b,
        h,
        hkv,
        d,
        slots,
        n: slot,
    };
    Tensor::apply(&RlaStepOp { dims }, x)
}

/// The heads of a step's qkv row and where RoPE turns them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitRope {
    pub b: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    /// The step's position.
    pub pos: usize,
    pub theta: f64,
}

/// The step's qkv row `[B, (H + 2 Hkv) D]` (or `[B, 1, ..]`) as q `[B, H, D]` and k, v
/// `[B, 1, Hkv, D]`, q and k rotated at `pos` (RoPE's rotate-half pairing, frequencies
/// `theta^(-2i/D)`).
pub fn split_rope(
    qkv: &Tensor,
    [h, hkv, d]: [usize; 3],
    pos: usize,
    theta: f64,
) -> Result<[Tensor; 3]> {
    let op = SplitRopeOp::NAME;
    let b = qkv.dims().first().copied().unwrap_or(0);
    let width = (h + 2 * hkv) * d;
    if qkv.numel() != b * width || !d.is_multiple_of(2) || h == 0 || hkv == 0 {
        return Err(Error::Invalid {
            op,
            msg: format!(
                "needs a row of (H {h} + 2 Hkv {hkv}) x D {d} (D even) per row, got {}",
                qkv.shape()
            ),
        });
    }
    if !qkv.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: qkv.dtype(),
        });
    }
    let dims = SplitRope {
        b,
        h,
        hkv,
        d,
        pos,
        theta,
    };
    let qkv = qkv.reshape(vec![b, width])?;
    Tensor::apply(&SplitRopeOp { dims }, &QkvStep { qkv: &qkv })
}

/// Whether the decoding kernels run for data of this dtype and head dims (the largest of them)
/// on this device: the CPU's take every float dtype, the CUDA kernels f32 and bf16 with head
/// dims up to `cuda::MAX_HEAD_DIM`.
pub fn has_kernel(device: Device, dtype: DType, head_dim: usize) -> bool {
    match device {
        Device::Cpu => dtype.is_float(),
        Device::Cuda(_) => {
            matches!(dtype, DType::F32 | DType::BF16) && head_dim <= cuda::MAX_HEAD_DIM
        }
    }
}

fn tensor<S: Into<Storage>>(s: S, dims: &[usize]) -> Result<Tensor> {
    Tensor::from_storage(s, dims.to_vec())
}

/// A recurrent step's results as storage: output, tail, then the state's parts.
pub(crate) struct Stepped<S> {
    pub out: S,
    pub tail: S,
    pub state: Vec<S>,
}

impl<S: Into<Storage>> Stepped<S> {
    /// The output, the tail and the state's parts as tensors of `dims` (the state's each).
    fn tensors(self, d: &StepShape, state: &[&[usize]]) -> Result<(Tensor, Tensor, Vec<Tensor>)> {
        let out = tensor(self.out, &[d.b, d.h, d.dv])?;
        let tail = tensor(self.tail, &[d.b, d.taps - 1, d.channels()])?;
        let parts = self
            .state
            .into_iter()
            .zip(state)
            .map(|(s, dims)| tensor(s, dims))
            .collect::<Result<Vec<_>>>()?;
        Ok((out, tail, parts))
    }
}

struct GatedDeltaOp {
    dims: StepShape,
}

impl GatedDeltaOp {
    fn out(&self, y: Stepped<impl Into<Storage>>) -> Result<StepOut<Tensor>> {
        let d = &self.dims;
        let (out, tail, mut state) = y.tensors(d, &[&[d.b, d.h, d.dk, d.dv]])?;
        Ok(StepOut {
            out,
            tail,
            state: state.remove(0),
        })
    }
}

impl DeviceOp for GatedDeltaOp {
    const NAME: &'static str = "gated_delta_step";
    type In = GatedDeltaStep;
    type Out = StepOut<Tensor>;

    fn cpu(&self, x: GatedDeltaStep<&CpuStorage>) -> Result<StepOut<Tensor>> {
        self.out(cpu::gated_delta_step(Self::NAME, &x, &self.dims)?)
    }

    fn cuda(&self, x: GatedDeltaStep<&CudaStorage>) -> Result<StepOut<Tensor>> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        self.out(cuda::gated_delta_step(&x, &self.dims)?)
    }
}

struct MlstmOp {
    dims: StepShape,
    eps: f64,
}

impl MlstmOp {
    fn out(&self, y: Stepped<impl Into<Storage>>) -> Result<StepOut<MlstmState>> {
        let d = &self.dims;
        let shapes: [&[usize]; 3] = [&[d.b, d.h, d.dk, d.dv], &[d.b, d.h, d.dk], &[d.b, d.h]];
        let (out, tail, state) = y.tensors(d, &shapes)?;
        let [c, n, m]: [Tensor; 3] = state.try_into().expect("three parts");
        Ok(StepOut {
            out,
            tail,
            state: MlstmState { c, n, m },
        })
    }
}

impl DeviceOp for MlstmOp {
    const NAME: &'static str = "mlstm_step";
    type In = MlstmStep;
    type Out = StepOut<MlstmState>;

    fn cpu(&self, x: MlstmStep<&CpuStorage>) -> Result<StepOut<MlstmState>> {
        self.out(cpu::mlstm_step(Self::NAME, &x, &self.dims, self.eps)?)
    }

    fn cuda(&self, x: MlstmStep<&CudaStorage>) -> Result<StepOut<MlstmState>> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        self.out(cuda::mlstm_step(&x, &self.dims, self.eps as f32)?)
    }
}

struct AttendOp {
    dims: AttendShape,
    scale: f64,
}

impl DeviceOp for AttendOp {
    const NAME: &'static str = "attend";
    type In = AttendIn;
    type Out = Tensor;

    fn cpu(&self, x: AttendIn<&CpuStorage>) -> Result<Tensor> {
        let d = &self.dims;
        tensor(
            cpu::attend(Self::NAME, &x, d, self.scale)?,
            &[d.b, d.h, d.d],
        )
    }

    fn cuda(&self, x: AttendIn<&CudaStorage>) -> Result<Tensor> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        let d = &self.dims;
        tensor(cuda::attend(&x, d, self.scale as f32)?, &[d.b, d.h, d.d])
    }
}

/// `rla_step` with the slot in `dims.n`.
struct RlaStepOp {
    dims: AttendShape,
}

impl RlaStepOp {
    fn out(&self, (o, s): (impl Into<Storage>, impl Into<Storage>)) -> Result<(Tensor, Tensor)> {
        let d = &self.dims;
        Ok((
            tensor(o, &[d.b, d.h, d.d])?,
            tensor(s, &[d.b, d.hkv, 2 * d.d, d.d])?,
        ))
    }
}

impl DeviceOp for RlaStepOp {
    const NAME: &'static str = "rla_step";
    type In = RlaStepIn;
    type Out = (Tensor, Tensor);

    fn cpu(&self, x: RlaStepIn<&CpuStorage>) -> Result<(Tensor, Tensor)> {
        self.out(cpu::rla_step(Self::NAME, &x, &self.dims)?)
    }

    fn cuda(&self, x: RlaStepIn<&CudaStorage>) -> Result<(Tensor, Tensor)> {
        let x = x.try_map(|s| Ok(s.buffer()))?;
        self.out(cuda::rla_step(&x, &self.dims)?)
    }
}

struct SplitRopeOp {
    dims: SplitRope,
}

impl DeviceOp for SplitRopeOp {
    const NAME: &'static str = "split_rope";
    type In = QkvStep;
    type Out = [Tensor; 3];

    fn cpu(&self, x: QkvStep<&CpuStorage>) -> Result<[Tensor; 3]> {
        cpu::split_rope(x.qkv, &self.dims)
    }

    fn cuda(&self, x: QkvStep<&CudaStorage>) -> Result<[Tensor; 3]> {
        let d = &self.dims;
        let [q, k, v] = cuda::split_rope(x.qkv.buffer(), d)?;
        Ok([
            tensor(q, &[d.b, d.h, d.d])?,
            tensor(k, &[d.b, 1, d.hkv, d.d])?,
            tensor(v, &[d.b, 1, d.hkv, d.d])?,
        ])
    }
}
