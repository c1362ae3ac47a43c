//! What the chunkwise recurrent mixers (the mLSTM, the gated delta rule) share around their
//! kernels: their sizes, `RecurrentShape` (swax-cuda's, which their CUDA kernels take), read off
//! and checked against the input tensors, a chunk-boundary state picked out, and whether their
//! CUDA kernels take a dtype and head dims.
use swax_cuda::kernels::chunk::{RecArgs, RecurrentShape};
use swax_tensor::{DType, Error, Result, Shape, Tensor};

/// The checks of a chunkwise recurrent mixer's tensors, on its sizes.
pub trait RecurrentChecks: Sized {
    /// The sizes of q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]` and per-head gates `[B, T, H]`, all
    /// of one float dtype and device, every size at least 1, and a chunk of at least one step.
    fn check(
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        gates: &[&Tensor],
        chunk: usize,
    ) -> Result<Self>;

    /// A state (or state gradient) of shape `[B, H, rest..]`, of q's dtype and device.
    fn check_state(
        &self,
        op: &'static str,
        q: &Tensor,
        state: &Tensor,
        rest: &[usize],
    ) -> Result<()>;

    /// A tensor of shape `[B, H, rest..]` (saved boundary states: f32 for BF16 inputs).
    fn check_shape(&self, op: &'static str, state: &Tensor, rest: &[usize]) -> Result<()>;
}

/// The same dtype and device as q (the attention mixers' check asks it too).
pub(crate) fn like_q(op: &'static str, q: &Tensor, x: &Tensor) -> Result<()> {
    if x.dtype() != q.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: q.dtype(),
            rhs: x.dtype(),
        });
    }
    if x.device() != q.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: q.device(),
            rhs: x.device(),
        });
    }
    Ok(())
}

impl RecurrentChecks for RecurrentShape {
    fn check(
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        gates: &[&Tensor],
        chunk: usize,
    ) -> Result<RecurrentShape> {
        if !q.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: q.dtype(),
            });
        }
        for x in [k, v].iter().chain(gates) {
            like_q(op, q, x)?;
        }
        let mismatch = |other: &Tensor| Error::ShapeMismatch {
            op,
            lhs: q.shape().clone(),
            rhs: other.shape().clone(),
        };
        if k.shape() != q.shape() {
            return Err(mismatch(k));
        }
        let (&[b, t, h, dk], &[vb, vt, vh, dv]) = (q.dims(), v.dims()) else {
            return Err(mismatch(v));
        };
        if (vb, vt, vh) != (b, t, h) {
            return Err(mismatch(v));
        }
        if let Some(gate) = gates.iter().find(|g| g.dims() != [b, t, h]) {
            return Err(mismatch(gate));
        }
        if [b, t, h, dk, dv].contains(&0) || chunk == 0 {
            return Err(Error::Invalid {
                op,
                msg: format!(
                    "needs every size >= 1 and chunk >= 1: q {}, v {}, chunk {chunk}",
                    q.shape(),
                    v.shape()
                ),
            });
        }
        Ok(RecurrentShape {
            b,
            t,
            h,
            dk,
            dv,
            chunk,
        })
    }

    fn check_state(
        &self,
        op: &'static str,
        q: &Tensor,
        state: &Tensor,
        rest: &[usize],
    ) -> Result<()> {
        like_q(op, q, state)?;
        self.check_shape(op, state, rest)
    }

    fn check_shape(&self, op: &'static str, state: &Tensor, rest: &[usize]) -> Result<()> {
        let want: Vec<usize> = [self.b, self.h].iter().chain(rest).copied().collect();
        if state.dims() != want {
            return Err(Error::ShapeMismatch {
                op,
                lhs: Shape::new(want),
                rhs: state.shape().clone(),
            });
        }
        Ok(())
    }
}

/// The entry `at` of per-chunk boundary states `[B, H, N + 1, rest..]`, as `[B, H, rest..]`.
pub fn boundary(states: &Tensor, at: usize) -> Result<Tensor> {
    let mut dims = states.dims().to_vec();
    dims.remove(2);
    states.narrow(2, at, 1)?.reshape(dims)
}

/// Whether the chunkwise CUDA kernels take data of `dtype` with these head dims: what their
/// sizes check (`RecArgs::new`) accepts.
pub fn cuda_takes(op: &'static str, dtype: DType, dk: usize, dv: usize) -> bool {
    // The kernels are compiled for these two only.
    if !matches!(dtype, DType::F32 | DType::BF16) {
        return false;
    }
    let s = RecurrentShape {
        b: 1,
        t: 1,
        h: 1,
        dk,
        dv,
        chunk: 1,
    };
    RecArgs::new(op, s, dtype, 0.0).is_ok()
}
