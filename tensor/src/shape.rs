//! Shapes: dimensions of a row-major contiguous tensor, axis resolution and broadcasting rules.
use crate::{Error, Result};

#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl Shape {
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.rank()];
        for i in (0..self.rank().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.0[i + 1];
        }
        strides
    }

    /// Resolves a possibly negative axis (-1 is the last) to an index.
    pub fn axis(&self, op: &'static str, axis: isize) -> Result<usize> {
        let rank = self.rank() as isize;
        let resolved = if axis < 0 { axis + rank } else { axis };
        if resolved < 0 || resolved >= rank {
            return Err(Error::AxisOutOfRange {
                op,
                axis,
                shape: self.clone(),
            });
        }
        Ok(resolved as usize)
    }

    pub fn dim(&self, op: &'static str, axis: isize) -> Result<usize> {
        Ok(self.0[self.axis(op, axis)?])
    }

    /// The `[outer, n, inner]` view of this shape around `axis`, how axis kernels see it.
    pub fn split_at_axis(&self, axis: usize) -> (usize, usize, usize) {
        let outer = self.0[..axis].iter().product();
        let inner = self.0[axis + 1..].iter().product();
        (outer, self.0[axis], inner)
    }

    /// Numpy broadcasting: dims align from the right; each pair is equal or one of them is 1.
    pub fn broadcast(op: &'static str, lhs: &Shape, rhs: &Shape) -> Result<Shape> {
        let rank = lhs.rank().max(rhs.rank());
        let mut dims = vec![0; rank];
        for i in 0..rank {
            let l = lhs.dim_from_right(rank - 1 - i);
            let r = rhs.dim_from_right(rank - 1 - i);
            dims[i] = match (l, r) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => {
                    return Err(Error::ShapeMismatch {
                        op,
                        lhs: lhs.clone(),
                        rhs: rhs.clone(),
                    })
                }
            };
        }
        Ok(Shape(dims))
    }

    /// Strides (in elements) that read this shape as if broadcast to `target`: 0 on broadcast
    /// dims. Assumes `Shape::broadcast` accepted the pair.
    pub fn broadcast_strides(&self, target: &Shape) -> Vec<usize> {
        let own = self.strides();
        let offset = target.rank() - self.rank();
        (0..target.rank())
            .map(|i| {
                if i < offset || self.0[i - offset] == 1 {
                    0
                } else {
                    own[i - offset]
                }
            })
            .collect()
    }

    fn dim_from_right(&self, i: usize) -> usize {
        if i < self.rank() {
            self.0[self.rank() - 1 - i]
        } else {
            1
        }
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(d.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(d.to_vec())
    }
}

impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(d)
    }
}

impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}

impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape::scalar()
    }
}
