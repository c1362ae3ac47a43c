//! Reductions along an axis and running sums.
use super::grads;
use crate::Tape;
use swax_tensor::{Result, Shape, Tensor};

/// The reduced gradient reshaped to keep the reduced axis (size 1) of `x`'s shape, ready to
/// broadcast back.
fn kept(dy: &Tensor, x: &Shape, axis: usize) -> Result<Tensor> {
    let mut dims = x.dims().to_vec();
    dims[axis] = 1;
    dy.reshape(Shape::new(dims))
}

impl Tape {
    pub fn sum(&self, x: &Tensor, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = x.shape().axis("sum", axis)?;
        let y = x.sum(axis, keepdim)?;
        let shape = x.shape().clone();
        Ok(self.record("sum", &[x], y, move |dy, _| {
            Ok(vec![Some(kept(dy, &shape, a)?.broadcast_to(shape)?)])
        }))
    }

    pub fn mean(&self, x: &Tensor, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = x.shape().axis("mean", axis)?;
        let n = x.dims()[a] as f64;
        let y = x.mean(axis, keepdim)?;
        let shape = x.shape().clone();
        Ok(self.record("mean", &[x], y, move |dy, _| {
            Ok(vec![Some(
                kept(dy, &shape, a)?.scale(1.0 / n)?.broadcast_to(shape)?,
            )])
        }))
    }

    /// The sum of every element, as a scalar.
    pub fn sum_all(&self, x: &Tensor) -> Result<Tensor> {
        let flat = self.reshape(x, [x.numel()])?;
        self.sum(&flat, 0, false)
    }

    /// The maximum along `axis`; the gradient goes to the (first) arg max.
    pub fn max(&self, x: &Tensor, axis: isize, keepdim: bool) -> Result<Tensor> {
        let y = x.max(axis, keepdim)?;
        let idx = x.argmax(axis, keepdim)?;
        let shape = x.shape().clone();
        Ok(self.record("max", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.scatter_axis(&idx, axis, &shape)?)])
        }))
    }

    /// log Σ exp along `axis`; its gradient is the softmax along that axis.
    pub fn logsumexp(&self, x: &Tensor, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = x.shape().axis("logsumexp", axis)?;
        let y = x.logsumexp(axis, keepdim)?;
        let (saved, lse) = (x.clone(), y.clone());
        Ok(self.record("logsumexp", &[x], y, move |dy, _| {
            let p = saved.sub(&kept(&lse, saved.shape(), a)?)?.exp()?;
            Ok(vec![Some(p.mul(&kept(dy, saved.shape(), a)?)?)])
        }))
    }

    /// Running sum along `axis`; the gradient is the running sum from the other end.
    pub fn cumsum(&self, x: &Tensor, axis: isize, reverse: bool) -> Result<Tensor> {
        let y = x.cumsum(axis, reverse)?;
        Ok(self.record("cumsum", &[x], y, move |dy, needs| {
            grads(needs, [&|| dy.cumsum(axis, !reverse)])
        }))
    }
}
