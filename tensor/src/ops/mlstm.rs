//! The mLSTM's chunkwise forward and backward as ops (see `Backend::mlstm_chunk_forward` for the
//! equations and layouts).
use crate::backend::{Backend, RecurrentDims};
use crate::{Result, Tensor};

/// The state before each chunk and after the last, `[B, H, N + 1, ..]`: what the forward returns
/// besides h and the backward reads instead of re-running the sequential pass.
#[derive(Clone, Debug)]
pub struct MlstmChunkStates {
    /// `[B, H, N + 1, Dk, Dv]`.
    pub c: Tensor,
    /// `[B, H, N + 1, Dk]`.
    pub n: Tensor,
    /// `[B, H, N + 1]`.
    pub m: Tensor,
}

/// The gradients of the mLSTM's inputs.
#[derive(Clone, Debug)]
pub struct MlstmGrads {
    pub dq: Tensor,
    pub dk: Tensor,
    pub dv: Tensor,
    pub di: Tensor,
    pub df: Tensor,
    pub dc0: Tensor,
    pub dn0: Tensor,
    pub dm0: Tensor,
}

impl Tensor {
    /// Checks the inputs of either pass; returns the sizes.
    #[allow(clippy::too_many_arguments)]
    fn mlstm_check(
        &self,
        op: &'static str,
        k: &Tensor,
        v: &Tensor,
        i: &Tensor,
        f: &Tensor,
        state: [&Tensor; 3],
        chunk: usize,
    ) -> Result<RecurrentDims> {
        let dims = RecurrentDims::check(op, self, k, v, &[i, f], chunk)?;
        dims.check_state(op, self, state[0], &[dims.dk, dims.dv])?;
        dims.check_state(op, self, state[1], &[dims.dk])?;
        dims.check_state(op, self, state[2], &[])?;
        Ok(dims)
    }

    /// mLSTM over `[B, T, H, D]` inputs, `self` as q, from the state `(c0, n0, m0)`, in chunks of
    /// `chunk` steps. Returns h `[B, T, H, Dv]` and the chunk-boundary states.
    #[allow(clippy::too_many_arguments)]
    pub fn mlstm_chunkwise(
        &self,
        k: &Tensor,
        v: &Tensor,
        i: &Tensor,
        f: &Tensor,
        c0: &Tensor,
        n0: &Tensor,
        m0: &Tensor,
        chunk: usize,
        eps: f64,
    ) -> Result<(Tensor, MlstmChunkStates)> {
        let op = "mlstm_chunkwise";
        let dims = self.mlstm_check(op, k, v, i, f, [c0, n0, m0], chunk)?;
        let (h, c, n, m) = self.storage().mlstm_chunk_forward(
            k.storage(),
            v.storage(),
            i.storage(),
            f.storage(),
            c0.storage(),
            n0.storage(),
            m0.storage(),
            dims,
            eps,
        )?;
        let (b, hh, nb) = (dims.b, dims.h, dims.chunks() + 1);
        Ok((
            self.with_storage(h, vec![b, dims.t, hh, dims.dv].into()),
            MlstmChunkStates {
                c: self.with_storage(c, vec![b, hh, nb, dims.dk, dims.dv].into()),
                n: self.with_storage(n, vec![b, hh, nb, dims.dk].into()),
                m: self.with_storage(m, vec![b, hh, nb].into()),
            },
        ))
    }

    /// The gradients of `mlstm_chunkwise` given its inputs, saved states and output h, the
    /// output's gradient dh and the final state's dc, dn, dm (zeros where the final state is
    /// unused).
    #[allow(clippy::too_many_arguments)]
    pub fn mlstm_chunkwise_backward(
        &self,
        k: &Tensor,
        v: &Tensor,
        i: &Tensor,
        f: &Tensor,
        saved: &MlstmChunkStates,
        h: &Tensor,
        dh: &Tensor,
        d_final: [&Tensor; 3],
        chunk: usize,
        eps: f64,
    ) -> Result<MlstmGrads> {
        let op = "mlstm_chunkwise_backward";
        let dims = self.mlstm_check(op, k, v, i, f, d_final, chunk)?;
        let nb = dims.chunks() + 1;
        dims.check_shape(op, &saved.c, &[nb, dims.dk, dims.dv])?;
        dims.check_shape(op, &saved.n, &[nb, dims.dk])?;
        dims.check_shape(op, &saved.m, &[nb])?;
        v.same_shape(op, h)?;
        v.same_shape(op, dh)?;
        let mut g = self
            .storage()
            .mlstm_chunk_backward(
                k.storage(),
                v.storage(),
                i.storage(),
                f.storage(),
                saved.c.storage(),
                saved.n.storage(),
                saved.m.storage(),
                h.storage(),
                dh.storage(),
                d_final[0].storage(),
                d_final[1].storage(),
                d_final[2].storage(),
                dims,
                eps,
            )?
            .into_iter();
        let mut next = |like: &Tensor| -> Tensor {
            let s = g.next().expect("the backend returns eight gradients");
            like.with_storage(s, like.shape().clone())
        };
        Ok(MlstmGrads {
            dq: next(self),
            dk: next(k),
            dv: next(v),
            di: next(i),
            df: next(f),
            dc0: next(d_final[0]),
            dn0: next(d_final[1]),
            dm0: next(d_final[2]),
        })
    }
}
