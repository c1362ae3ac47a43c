//! Index ops: select entries of an axis by id (embeddings are selects of table rows) and the
//! scatter-add that is their backward.
use crate::backend::{AxisDims, Backend};
use crate::{Result, Shape, Tensor};

impl Tensor {
    /// Entries `ids` (U32, any shape) of `axis`: the result has `ids`' dims in place of that axis.
    pub fn index_select(&self, axis: isize, ids: &Tensor) -> Result<Tensor> {
        let a = self.shape().axis("index_select", axis)?;
        let (outer, n, inner) = self.shape().split_at_axis(a);
        ids.check_ids("index_select", n)?;
        let out = self
            .storage()
            .index_select(ids.storage(), AxisDims { outer, n, inner })?;
        let mut dims = self.dims()[..a].to_vec();
        dims.extend_from_slice(ids.dims());
        dims.extend_from_slice(&self.dims()[a + 1..]);
        Ok(self.with_storage(out, Shape::new(dims)))
    }

    /// Rows of a `[V, C]` table for token ids of any shape: `[ids.., C]`.
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        self.index_select(0, ids)
    }

    /// The backward of `index_select`: adds `self` (shaped like that op's output) into a zero
    /// tensor of `shape` at the selected entries of `axis`; repeated ids accumulate.
    pub fn index_add(&self, axis: isize, ids: &Tensor, shape: &Shape) -> Result<Tensor> {
        self.float_only("index_add")?;
        let a = shape.axis("index_add", axis)?;
        let (outer, n, inner) = shape.split_at_axis(a);
        ids.check_ids("index_add", n)?;
        if self.numel() != outer * ids.numel() * inner {
            return Err(crate::Error::ShapeMismatch {
                op: "index_add",
                lhs: self.shape().clone(),
                rhs: shape.clone(),
            });
        }
        let out = self
            .storage()
            .index_add(ids.storage(), AxisDims { outer, n, inner })?;
        Ok(self.with_storage(out, shape.clone()))
    }
}
