//! Index ops. The backward of a select is a scatter-add of the gradient into the selected
//! entries; the ids get no gradient.
use crate::Tape;
use swax_tensor::{Result, Tensor};

impl Tape {
    pub fn index_select(&self, x: &Tensor, axis: isize, ids: &Tensor) -> Result<Tensor> {
        let y = x.index_select(axis, ids)?;
        let (saved_ids, shape) = (ids.clone(), x.shape().clone());
        Ok(self.record("index_select", &[x, ids], y, move |dy, needs| {
            Ok(vec![
                if needs[0] {
                    Some(dy.index_add(axis, &saved_ids, &shape)?)
                } else {
                    None
                },
                None,
            ])
        }))
    }

    /// Rows of a `[V, C]` table for token ids of any shape.
    pub fn embedding(&self, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        self.index_select(table, 0, ids)
    }
}
