//! Shape and memory-order ops. A reshape is a view; everything that changes memory order
//! (transpose, permute, narrow, concat, pad, broadcast) makes a new contiguous tensor by one
//! strided copy, unless the result is the input's memory as it lies (a full-range narrow, a
//! permutation that only moves axes of size 1, a broadcast to the same shape, a pad by nothing,
//! a concat of one part): that is a view, sharing the storage.
use crate::backend::{Backend, StridedLayout};
use crate::{Error, Result, Shape, Tensor};

impl Tensor {
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.numel() != self.numel() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().clone(),
                rhs: shape,
            });
        }
        Ok(self.view(shape))
    }

    fn gather(&self, shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Result<Tensor> {
        let shape = Shape::new(shape);
        let in_order = offset == 0
            && shape.numel() == self.numel()
            && (shape.dims().iter().zip(&strides).zip(shape.strides()))
                .all(|((&n, &s), c)| n == 1 || s == c);
        if in_order {
            return Ok(self.view(shape));
        }
        let shape = shape.dims().to_vec();
        let layout = StridedLayout {
            shape: shape.clone(),
            strides,
            offset,
        };
        Ok(self.with_storage(self.storage().copy_strided(&layout)?, Shape::new(shape)))
    }

    /// Reorders the dims: output dim i is input dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let mut seen = vec![false; self.rank()];
        let valid = perm.len() == self.rank()
            && perm
                .iter()
                .all(|&p| p < self.rank() && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(Error::Invalid {
                op: "permute",
                msg: format!(
                    "{perm:?} is not a permutation of the dims of {}",
                    self.shape()
                ),
            });
        }
        let strides = self.shape().strides();
        self.gather(
            perm.iter().map(|&p| self.dims()[p]).collect(),
            perm.iter().map(|&p| strides[p]).collect(),
            0,
        )
    }

    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let (a, b) = (
            self.shape().axis("transpose", a)?,
            self.shape().axis("transpose", b)?,
        );
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// `len` entries of `axis` from `start`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let a = self.shape().axis("narrow", axis)?;
        if start + len > self.dims()[a] {
            return Err(Error::Invalid {
                op: "narrow",
                msg: format!(
                    "{start}..{} is outside axis {a} of {}",
                    start + len,
                    self.shape()
                ),
            });
        }
        let strides = self.shape().strides();
        let mut dims = self.dims().to_vec();
        dims[a] = len;
        self.gather(dims, strides.clone(), start * strides[a])
    }

    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if Shape::broadcast("broadcast_to", self.shape(), &shape)? != shape {
            return Err(Error::ShapeMismatch {
                op: "broadcast_to",
                lhs: self.shape().clone(),
                rhs: shape,
            });
        }
        let strides = self.shape().broadcast_strides(&shape);
        self.gather(shape.dims().to_vec(), strides, 0)
    }

    /// Joins tensors along `axis`; all other dims must agree.
    pub fn concat(parts: &[&Tensor], axis: isize) -> Result<Tensor> {
        let first = parts.first().ok_or(Error::Invalid {
            op: "concat",
            msg: "no tensors to join".into(),
        })?;
        let a = first.shape().axis("concat", axis)?;
        if parts.len() == 1 {
            return Ok(first.view(first.shape().clone()));
        }
        let mut dims = first.dims().to_vec();
        dims[a] = 0;
        for p in parts {
            first.same_dtype("concat", p)?;
            let fits = p.rank() == first.rank()
                && (0..p.rank()).all(|i| i == a || p.dims()[i] == first.dims()[i]);
            if !fits {
                return Err(Error::ShapeMismatch {
                    op: "concat",
                    lhs: first.shape().clone(),
                    rhs: p.shape().clone(),
                });
            }
            dims[a] += p.dims()[a];
        }
        let shape = Shape::new(dims);
        let mut out = first.storage().zeros(shape.numel(), first.dtype())?;
        let dst_strides = shape.strides();
        let mut offset = 0;
        for p in parts {
            p.copy_to_region(&mut out, &dst_strides, offset * dst_strides[a])?;
            offset += p.dims()[a];
        }
        Ok(first.with_storage(out, shape))
    }

    /// Copies all of `self` into the region of `out` (laid out by `dst_strides`) at `offset`.
    fn copy_to_region(
        &self,
        out: &mut crate::Storage,
        dst_strides: &[usize],
        offset: usize,
    ) -> Result<()> {
        let src = StridedLayout {
            shape: self.dims().to_vec(),
            strides: self.shape().strides(),
            offset: 0,
        };
        let dst = StridedLayout {
            shape: self.dims().to_vec(),
            strides: dst_strides.to_vec(),
            offset,
        };
        self.storage().copy_into(&src, out, &dst)
    }

    /// Zero padding: `before` zeros ahead of and `after` zeros behind the entries of `axis`.
    pub fn pad(&self, axis: isize, before: usize, after: usize) -> Result<Tensor> {
        let a = self.shape().axis("pad", axis)?;
        if before + after == 0 {
            return Ok(self.view(self.shape().clone()));
        }
        let mut dims = self.dims().to_vec();
        dims[a] += before + after;
        let shape = Shape::new(dims);
        let mut out = self.storage().zeros(shape.numel(), self.dtype())?;
        let strides = shape.strides();
        self.copy_to_region(&mut out, &strides, before * strides[a])?;
        Ok(self.with_storage(out, shape))
    }

    /// Writes `src` over entries `start..start + src.dims()[axis]` of `axis`, in place: one copy
    /// of `src`'s size, where building the tensor anew would copy all of it (a decoding cache
    /// taking one step's keys). `src` has this tensor's dtype and device and its dims off `axis`;
    /// an error where this tensor's buffer is shared (`Tensor::into_unique` makes it its own).
    pub fn write_at(&mut self, axis: isize, start: usize, src: &Tensor) -> Result<()> {
        const OP: &str = "write_at";
        let a = self.shape().axis(OP, axis)?;
        let fits = src.dims().len() == self.dims().len()
            && src
                .dims()
                .iter()
                .zip(self.dims())
                .enumerate()
                .all(|(i, (&s, &d))| if i == a { start + s <= d } else { s == d });
        if !fits || src.dtype() != self.dtype() {
            return Err(crate::Error::Invalid {
                op: OP,
                msg: format!(
                    "{} {} does not fit at {start} of axis {a} of {} {}",
                    src.dtype(),
                    src.shape(),
                    self.dtype(),
                    self.shape()
                ),
            });
        }
        let strides = self.shape().strides();
        let offset = start * strides[a];
        src.copy_to_region(self.storage_mut(OP)?, &strides, offset)
    }

    /// Shifts entries along `axis` by `k` (later for k > 0), filling with zeros: out[t] = x[t-k].
    /// How a state "as of w steps ago" is read off a running sum.
    pub fn shift(&self, axis: isize, k: isize) -> Result<Tensor> {
        let a = self.shape().axis("shift", axis)?;
        let n = self.dims()[a];
        let m = k.unsigned_abs().min(n);
        if k >= 0 {
            self.narrow(axis, 0, n - m)?.pad(axis, m, 0)
        } else {
            self.narrow(axis, m, n - m)?.pad(a as isize, 0, m)
        }
    }
}
