//! The gated delta rule's chunkwise forward and backward as ops (see
//! `Backend::gated_delta_forward` for the equations and layouts).
use crate::backend::{Backend, RecurrentDims};
use crate::{Result, Tensor};

/// The gradients of the gated delta rule's inputs.
#[derive(Clone, Debug)]
pub struct GatedDeltaGrads {
    pub dq: Tensor,
    pub dk: Tensor,
    pub dv: Tensor,
    pub dbeta: Tensor,
    pub dg: Tensor,
    pub ds0: Tensor,
}

impl Tensor {
    /// Gated delta rule over `[B, T, H, D]` inputs, `self` as q, from the state s0
    /// `[B, H, Dk, Dv]`, in chunks of `chunk` steps. Returns o `[B, T, H, Dv]` and the state
    /// before each chunk and after the last, `[B, H, N + 1, Dk, Dv]`.
    pub fn gated_delta_chunkwise(
        &self,
        k: &Tensor,
        v: &Tensor,
        beta: &Tensor,
        g: &Tensor,
        s0: &Tensor,
        chunk: usize,
    ) -> Result<(Tensor, Tensor)> {
        let op = "gated_delta_chunkwise";
        let dims = RecurrentDims::check(op, self, k, v, &[beta, g], chunk)?;
        dims.check_state(op, self, s0, &[dims.dk, dims.dv])?;
        let (o, s) = self.storage().gated_delta_forward(
            k.storage(),
            v.storage(),
            beta.storage(),
            g.storage(),
            s0.storage(),
            dims,
        )?;
        let nb = dims.chunks() + 1;
        Ok((
            self.with_storage(o, v.shape().clone()),
            self.with_storage(s, vec![dims.b, dims.h, nb, dims.dk, dims.dv].into()),
        ))
    }

    /// The gradients of `gated_delta_chunkwise` given its inputs, its boundary states, the
    /// output's gradient and the final state's ds (zeros where the final state is unused).
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_chunkwise_backward(
        &self,
        k: &Tensor,
        v: &Tensor,
        beta: &Tensor,
        g: &Tensor,
        states: &Tensor,
        dout: &Tensor,
        ds: &Tensor,
        chunk: usize,
    ) -> Result<GatedDeltaGrads> {
        let op = "gated_delta_chunkwise_backward";
        let dims = RecurrentDims::check(op, self, k, v, &[beta, g], chunk)?;
        dims.check_state(op, self, ds, &[dims.dk, dims.dv])?;
        dims.check_shape(op, states, &[dims.chunks() + 1, dims.dk, dims.dv])?;
        v.same_shape(op, dout)?;
        let mut grads = self
            .storage()
            .gated_delta_backward(
                k.storage(),
                v.storage(),
                beta.storage(),
                g.storage(),
                states.storage(),
                dout.storage(),
                ds.storage(),
                dims,
            )?
            .into_iter();
        let mut next = |like: &Tensor| -> Tensor {
            let s = grads.next().expect("the backend returns six gradients");
            like.with_storage(s, like.shape().clone())
        };
        Ok(GatedDeltaGrads {
            dq: next(self),
            dk: next(k),
            dv: next(v),
            dbeta: next(beta),
            dg: next(g),
            ds0: next(ds),
        })
    }
}
