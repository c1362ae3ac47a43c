//! Reductions along an axis, running sums, and the reduction that undoes broadcasting.
use crate::backend::{AxisDims, Backend, ReduceOp};
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    fn axis_dims(&self, op: &'static str, axis: isize) -> Result<(usize, AxisDims)> {
        let a = self.shape().axis(op, axis)?;
        let (outer, n, inner) = self.shape().split_at_axis(a);
        Ok((a, AxisDims { outer, n, inner }))
    }

    fn reduced_shape(&self, axis: usize, keepdim: bool) -> Shape {
        let mut dims = self.dims().to_vec();
        if keepdim {
            dims[axis] = 1;
        } else {
            dims.remove(axis);
        }
        Shape::new(dims)
    }

    pub fn reduce(&self, op: ReduceOp, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.float_only("reduce")?;
        let (a, dims) = self.axis_dims("reduce", axis)?;
        let out = self.storage().reduce(op, dims)?;
        Ok(self.with_storage(out, self.reduced_shape(a, keepdim)))
    }

    pub fn sum(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axis, keepdim)
    }

    pub fn mean(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axis, keepdim)
    }

    pub fn max(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axis, keepdim)
    }

    pub fn logsumexp(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::LogSumExp, axis, keepdim)
    }

    /// Index of the (first) maximum along `axis`, as U32.
    pub fn argmax(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.float_only("argmax")?;
        let (a, dims) = self.axis_dims("argmax", axis)?;
        let out = self.storage().argmax(dims)?;
        Ok(self.with_storage(out, self.reduced_shape(a, keepdim)))
    }

    /// The sum of every element, as a scalar.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reshape([self.numel()])?.sum(0, false)
    }

    pub fn cumsum(&self, axis: isize, reverse: bool) -> Result<Tensor> {
        self.float_only("cumsum")?;
        let (_, dims) = self.axis_dims("cumsum", axis)?;
        Ok(self.with_storage(self.storage().cumsum(dims, reverse)?, self.shape().clone()))
    }

    /// Places `self` (the reduced shape, keepdim or not) at positions `idx` (U32, same shape) of
    /// `axis` in a zero tensor of `shape`: the backward of max.
    pub fn scatter_axis(&self, idx: &Tensor, axis: isize, shape: &Shape) -> Result<Tensor> {
        let a = shape.axis("scatter_axis", axis)?;
        let (outer, n, inner) = shape.split_at_axis(a);
        if self.numel() != outer * inner || idx.numel() != self.numel() {
            return Err(Error::ShapeMismatch {
                op: "scatter_axis",
                lhs: self.shape().clone(),
                rhs: shape.clone(),
            });
        }
        idx.check_ids("scatter_axis", n)?;
        let out = self
            .storage()
            .scatter_axis(idx.storage(), AxisDims { outer, n, inner })?;
        Ok(self.with_storage(out, shape.clone()))
    }

    /// Sums away the dims that broadcasting added or stretched, giving a tensor of `shape`: how
    /// the gradient of a broadcast operand is formed.
    pub fn sum_to_shape(&self, shape: &Shape) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let target = Shape::broadcast("sum_to_shape", shape, self.shape())?;
        if &target != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "sum_to_shape",
                lhs: self.shape().clone(),
                rhs: shape.clone(),
            });
        }
        let lead = self.rank() - shape.rank();
        let mut t = self.clone();
        for _ in 0..lead {
            t = t.sum(0, false)?;
        }
        for (i, &d) in shape.dims().iter().enumerate() {
            if d == 1 && t.dims()[i] != 1 {
                t = t.sum(i as isize, true)?;
            }
        }
        t.reshape(shape.clone())
    }
}
