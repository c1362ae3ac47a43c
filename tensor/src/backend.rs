//! The seam between the device-independent ops and the kernels: one trait that every storage
//! (the CPU's, the GPU's) implements. Ops in `ops/` check shapes and dtypes, then call exactly one
//! of these methods; a method sees plain contiguous buffers and the sizes it needs, nothing more.
use crate::{DType, Device, Result};
pub use swax_cuda::kernels::binary::BinaryOp;
pub use swax_cuda::kernels::optim::AdamWStep;
pub use swax_cuda::kernels::reduce::{AxisDims, ReduceOp};
pub use swax_cuda::kernels::rope::RopeDims;
pub use swax_cuda::kernels::short_conv::ConvDims;
pub use swax_cuda::kernels::softmax::Softmax;
pub use swax_cuda::kernels::unary::UnaryOp;
pub use swax_cuda::MatmulLayout;

/// How a binary op reads its operands: the output shape and each operand's strides in elements,
/// 0 on broadcast dims.
#[derive(Clone, Debug)]
pub struct BroadcastLayout {
    pub shape: Vec<usize>,
    pub lhs_strides: Vec<usize>,
    pub rhs_strides: Vec<usize>,
}

/// A strided view into a contiguous buffer: element `idx` of `shape` lives at
/// `offset + sum(idx[i] * strides[i])`.
#[derive(Clone, Debug)]
pub struct StridedLayout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

pub trait Backend: Sized {
    fn dtype(&self) -> DType;
    fn device(&self) -> Device;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A new zero-filled buffer on the same device.
    fn zeros(&self, len: usize, dtype: DType) -> Result<Self>;
    fn to_dtype(&self, dtype: DType) -> Result<Self>;

    fn unary(&self, op: UnaryOp) -> Result<Self>;
    /// `dy * f'(x)`, with `self` as x.
    fn unary_backward(&self, op: UnaryOp, dy: &Self) -> Result<Self>;
    fn binary(&self, rhs: &Self, op: BinaryOp, layout: &BroadcastLayout) -> Result<Self>;
    /// `self · s[0]` stored as `dtype`, the product in `s`'s dtype (f32, or f64 on the CPU).
    fn scale_cast(&self, s: &Self, dtype: DType) -> Result<Self>;
    /// `cond != 0 ? on_true : on_false`, all three of one length; `self` is the U32 condition.
    fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self>;

    /// Reduces the middle axis: `[outer, n, inner]` to `[outer, inner]`.
    fn reduce(&self, op: ReduceOp, dims: AxisDims) -> Result<Self>;
    /// Index of the maximum along the middle axis, as U32 `[outer, inner]`.
    fn argmax(&self, dims: AxisDims) -> Result<Self>;
    /// Writes `self[o, i]` to position `idx[o, i]` of the middle axis of a zero `[outer, n, inner]`.
    fn scatter_axis(&self, idx: &Self, dims: AxisDims) -> Result<Self>;
    /// Running sum along the middle axis; from the end when `reverse`.
    fn cumsum(&self, dims: AxisDims, reverse: bool) -> Result<Self>;

    /// Softmax (or log-softmax) over contiguous rows of length `n`.
    fn softmax(&self, n: usize, kind: Softmax) -> Result<Self>;
    /// Given the forward's output `self` and its gradient, the input's gradient.
    fn softmax_backward(&self, dy: &Self, n: usize, kind: Softmax) -> Result<Self>;

    fn matmul(&self, rhs: &Self, layout: &MatmulLayout) -> Result<Self>;
    /// `acc += self · rhs` as `layout` lays them out, `acc` (the `batch` products, contiguous)
    /// in the operands' accumulation dtype: f32 for bf16 and f32, f64 for f64.
    fn matmul_acc(&self, rhs: &Self, layout: &MatmulLayout, acc: &mut Self) -> Result<()>;

    /// Gathers a strided view of `self` into a new contiguous buffer.
    fn copy_strided(&self, src: &StridedLayout) -> Result<Self>;
    /// Copies a strided view of `self` onto a strided view of `dst` (same shape).
    fn copy_into(
        &self,
        src: &StridedLayout,
        dst: &mut Self,
        dst_layout: &StridedLayout,
    ) -> Result<()>;

    /// Picks `ids` (U32, each `< n`) along the middle axis: `[outer, ids.len(), inner]`.
    fn index_select(&self, ids: &Self, dims: AxisDims) -> Result<Self>;
    /// The transpose of `index_select`: adds each `[outer, j, inner]` slice of `self` into
    /// position `ids[j]` of a zero `[outer, n, inner]`; repeated ids accumulate.
    fn index_add(&self, ids: &Self, dims: AxisDims) -> Result<Self>;

    /// Over the last two dims `[rows, cols]` of `self`, fills with `value` every position that
    /// query row `r` (at absolute position `r + cols - rows`) may not see: keys `s` outside
    /// `pos - window < s <= pos`.
    fn masked_fill_band(&self, rows: usize, cols: usize, window: usize, value: f64)
        -> Result<Self>;

    /// RMSNorm over rows of length `n`: returns `(y, rstd)`, rstd per row; with `res` (like x),
    /// y is `res` plus the norm's, in the same pass.
    fn rms_norm(
        &self,
        weight: &Self,
        res: Option<&Self>,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self)>;
    /// Returns `(dx, dweight)` given x (`self`), the weight, the saved rstd and dy; with `dres`
    /// (like x), dx is `dres` plus the norm's, in the same pass.
    fn rms_norm_backward(
        &self,
        weight: &Self,
        rstd: &Self,
        dy: &Self,
        dres: Option<&Self>,
        n: usize,
    ) -> Result<(Self, Self)>;
    /// LayerNorm over rows of length `n`: returns `(y, mean, rstd)`.
    fn layer_norm(
        &self,
        weight: &Self,
        bias: &Self,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self, Self)>;
    /// Returns `(dx, dweight, dbias)`.
    fn layer_norm_backward(
        &self,
        weight: &Self,
        mean: &Self,
        rstd: &Self,
        dy: &Self,
        n: usize,
    ) -> Result<(Self, Self, Self)>;

    /// Mean cross-entropy of logit rows of length `v` against U32 targets, rows whose target is
    /// `ignore_index` left out. Returns `(loss, lse, totals)`: the scalar loss, each row's
    /// log-sum-exp, and f32 `[mean loss, counted rows]` (the count scales the backward).
    fn cross_entropy(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<(Self, Self, Self)>;
    /// dlogits given logits (`self`), targets, the saved lse and totals, and the scalar dloss.
    fn cross_entropy_backward(
        &self,
        targets: &Self,
        lse: &Self,
        totals: &Self,
        dloss: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<Self>;

    /// The cross-entropy of logit rows of length `v` against U32 targets summed over the rows
    /// whose target is not `ignore_index`, added with the number of those rows into `totals`
    /// (`[summed loss, counted rows]` in the accumulator dtype); with `grad`, also that sum's
    /// gradient: softmax - onehot on counted rows, zero on the others.
    fn cross_entropy_summed(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
        totals: &mut Self,
        grad: bool,
    ) -> Result<Option<Self>>;

    /// Causal depthwise convolution, `self` as x `[B, T, C]`, weights `[C, K]`, bias `[C]`:
    /// `y[b, t, c] = bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]` (zeros before t = 0).
    fn short_conv(&self, w: &Self, bias: &Self, dims: ConvDims) -> Result<Self>;
    /// `(dx, dw, dbias)` of `short_conv` given x (`self`), the weights and dy.
    fn short_conv_backward(
        &self,
        w: &Self,
        dy: &Self,
        dims: ConvDims,
    ) -> Result<(Self, Self, Self)>;

    /// SwiGLU over rows `[gate | up]` of `2f` elements (`self`, the pre-activation `gu`):
    /// `h = silu(gate) · up`, rows of `f`.
    fn swiglu(&self, f: usize) -> Result<Self>;
    /// `(dgu, h)` given gu (`self`) and dh (rows of `f`): `dgu = [dh · up · silu'(gate) | dh ·
    /// silu(gate)]`, and the forward's h again, which the caller's next gradient needs.
    fn swiglu_backward(&self, dh: &Self, f: usize) -> Result<(Self, Self)>;

    /// Rotary embedding on `[B, T, H, D]` pairs `(i, i + D/2)`.
    fn rope(&self, dims: RopeDims) -> Result<Self>;
    /// The inverse rotation (rope's backward); with `dres` (like x), `dres` plus it, in the same
    /// pass.
    fn rope_backward(&self, dims: RopeDims, dres: Option<&Self>) -> Result<Self>;

    /// One AdamW step (see [`AdamWStep`]) in place over every parameter of `params`: each
    /// slot's param, m and v are written, its grad read; all f32, one length per slot. With
    /// `clip = Some((norm, max_norm))` every gradient is multiplied by
    /// `min(1, max_norm / (norm + 1e-6))`, `norm` an f32 `[1]` read where it lies (no host sync).
    fn adamw(
        params: &mut [AdamWSlot<'_, Self>],
        clip: Option<(&Self, f64)>,
        hp: AdamWStep,
    ) -> Result<()>;
    /// `sqrt(sum of the squares of every element of every x)`, the x all f32 on one device, as
    /// an f32 `[1]` there; accumulated in a fixed order (deterministic).
    fn global_norm(xs: &[&Self]) -> Result<Self>;
    /// `acc[i] += xs[i]` in place for every pair, f32 buffers of equal lengths.
    fn add_into(acc: &mut [&mut Self], xs: &[&Self]) -> Result<()>;
}

/// One parameter's storages for [`Backend::adamw`]: param, m and v are written in place.
pub struct AdamWSlot<'a, S> {
    pub param: &'a mut S,
    pub grad: &'a S,
    pub m: &'a mut S,
    pub v: &'a mut S,
    /// Whether weight decay applies to it.
    pub decay: bool,
}
