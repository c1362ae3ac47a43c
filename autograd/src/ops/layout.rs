//! Shape and memory-order ops. Each backward moves the gradient back the way the forward moved
//! the values: narrow ↔ pad, split ↔ concat, permute ↔ inverse permute, broadcast ↔ sum.
use crate::Tape;
use swax_tensor::{Error, Result, Shape, Tensor};

impl Tape {
    pub fn reshape(&self, x: &Tensor, shape: impl Into<Shape>) -> Result<Tensor> {
        let y = x.reshape(shape)?;
        let from = x.shape().clone();
        Ok(self.record("reshape", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.reshape(from)?)])
        }))
    }

    pub fn permute(&self, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
        let y = x.permute(perm)?;
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(self.record("permute", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.permute(&inverse)?)])
        }))
    }

    pub fn transpose(&self, x: &Tensor, a: isize, b: isize) -> Result<Tensor> {
        let (a, b) = (
            x.shape().axis("transpose", a)?,
            x.shape().axis("transpose", b)?,
        );
        let mut perm: Vec<usize> = (0..x.rank()).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    pub fn narrow(&self, x: &Tensor, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let y = x.narrow(axis, start, len)?;
        let n = x.shape().dim("narrow", axis)?;
        Ok(self.record("narrow", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.pad(axis, start, n - start - len)?)])
        }))
    }

    pub fn pad(&self, x: &Tensor, axis: isize, before: usize, after: usize) -> Result<Tensor> {
        let y = x.pad(axis, before, after)?;
        let n = x.shape().dim("pad", axis)?;
        Ok(self.record("pad", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.narrow(axis, before, n)?)])
        }))
    }

    /// out[t] = x[t − k] along `axis`, zeros shifted in (a narrow then a pad).
    pub fn shift(&self, x: &Tensor, axis: isize, k: isize) -> Result<Tensor> {
        let n = x.shape().dim("shift", axis)?;
        let m = k.unsigned_abs().min(n);
        if k >= 0 {
            let kept = self.narrow(x, axis, 0, n - m)?;
            self.pad(&kept, axis, m, 0)
        } else {
            let kept = self.narrow(x, axis, m, n - m)?;
            self.pad(&kept, axis, 0, m)
        }
    }

    /// `x` cut along `axis` into consecutive parts of `sizes` (which must cover the axis), as
    /// one node: its backward writes the parts' gradients side by side into one tensor (a
    /// concat), where a narrow per part would each pad its gradient to x's full size and the
    /// tape would then add those up, a pass over x's size per part.
    pub fn split(&self, x: &Tensor, axis: isize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        let n = x.shape().dim("split", axis)?;
        if sizes.iter().sum::<usize>() != n {
            return Err(Error::Invalid {
                op: "split",
                msg: format!("parts of {sizes:?} do not cover an axis of {n}"),
            });
        }
        let mut start = 0;
        let mut parts = Vec::with_capacity(sizes.len());
        for &len in sizes {
            parts.push(x.narrow(axis, start, len)?);
            start += len;
        }
        Ok(self.record_many("split", &[x], parts, move |dys, _| {
            Ok(vec![Some(Tensor::concat(
                &dys.iter().collect::<Vec<_>>(),
                axis,
            )?)])
        }))
    }

    pub fn concat(&self, parts: &[&Tensor], axis: isize) -> Result<Tensor> {
        let y = Tensor::concat(parts, axis)?;
        let sizes: Vec<usize> = parts
            .iter()
            .map(|p| p.shape().dim("concat", axis))
            .collect::<Result<_>>()?;
        Ok(self.record("concat", parts, y, move |dy, needs| {
            let mut start = 0;
            let mut out = Vec::with_capacity(sizes.len());
            for (&len, &need) in sizes.iter().zip(needs) {
                out.push(if need {
                    Some(dy.narrow(axis, start, len)?)
                } else {
                    None
                });
                start += len;
            }
            Ok(out)
        }))
    }

    pub fn broadcast_to(&self, x: &Tensor, shape: impl Into<Shape>) -> Result<Tensor> {
        let y = x.broadcast_to(shape)?;
        let from = x.shape().clone();
        Ok(self.record("broadcast_to", &[x], y, move |dy, _| {
            Ok(vec![Some(dy.sum_to_shape(&from)?)])
        }))
    }
}
