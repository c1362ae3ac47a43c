//! The input checks the chunkwise recurrent mixers (mLSTM, gated delta rule) share.
use crate::backend::RecurrentDims;
use crate::{Error, Result, Shape, Tensor};

impl RecurrentDims {
    /// The sizes of q, k `[B, T, H, Dk]`, v `[B, T, H, Dv]` and per-head gates `[B, T, H]`, all of
    /// one float dtype and device, every size at least 1, and a chunk of at least one step.
    pub fn check(
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        gates: &[&Tensor],
        chunk: usize,
    ) -> Result<RecurrentDims> {
        q.float_only(op)?;
        for x in [k, v].iter().chain(gates) {
            q.same_dtype(op, x)?;
        }
        q.same_shape(op, k)?;
        let mismatch = |other: &Tensor| Error::ShapeMismatch {
            op,
            lhs: q.shape().clone(),
            rhs: other.shape().clone(),
        };
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
        Ok(RecurrentDims {
            b,
            t,
            h,
            dk,
            dv,
            chunk,
        })
    }

    /// A state (or state gradient) of shape `[B, H, rest..]`, of q's dtype and device.
    pub fn check_state(
        &self,
        op: &'static str,
        q: &Tensor,
        state: &Tensor,
        rest: &[usize],
    ) -> Result<()> {
        q.same_dtype(op, state)?;
        self.check_shape(op, state, rest)
    }

    /// A tensor of shape `[B, H, rest..]` (saved boundary states: f32 for BF16 inputs).
    pub fn check_shape(&self, op: &'static str, state: &Tensor, rest: &[usize]) -> Result<()> {
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

    /// The entry `at` of per-chunk boundary states `[B, H, N + 1, rest..]`, as `[B, H, rest..]`.
    pub fn boundary(&self, states: &Tensor, at: usize) -> Result<Tensor> {
        let mut dims = states.dims().to_vec();
        dims.remove(2);
        states.narrow(2, at, 1)?.reshape(dims)
    }
}
