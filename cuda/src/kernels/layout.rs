//! Strided layouts for the broadcasting and copy kernels: validation, dimension collapsing, and
//! the `TwoStrided` parameter block the kernels read (`common.cuh`).

use super::KernelArg;
use crate::{Buffer, CudaError};
use std::ffi::c_void;

/// Highest rank the strided kernels take.
pub const MAX_RANK: usize = 6;

/// Passed by value to a kernel; the layout matches `struct TwoStrided` in `common.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TwoStrided {
    n: u64,
    rank: u32,
    pad: u32,
    dims: [u64; MAX_RANK],
    s0: [i64; MAX_RANK],
    s1: [i64; MAX_RANK],
    off0: i64,
    off1: i64,
}

impl KernelArg for TwoStrided {
    fn as_param(&self) -> *mut c_void {
        self as *const TwoStrided as *mut c_void
    }
}

/// One operand of a strided kernel: its name (for errors), its buffer's length, its element
/// strides over the iteration shape (0 on broadcast dimensions) and its element offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub name: &'static str,
    pub len: usize,
    pub strides: &'a [usize],
    pub offset: usize,
}

impl<'a> Operand<'a> {
    pub fn of(name: &'static str, buf: &Buffer, strides: &'a [usize], offset: usize) -> Self {
        Operand {
            name,
            len: buf.len(),
            strides,
            offset,
        }
    }
}

impl TwoStrided {
    /// Checks that both operands stay inside their buffers over `dims`, then merges dimensions
    /// that both operands walk contiguously (and drops size-1 ones), so the kernel decodes as
    /// few coordinates as possible: a bias add over [B, T, C] becomes rank 2.
    pub fn new(
        op: &'static str,
        dims: &[usize],
        a: Operand<'_>,
        b: Operand<'_>,
    ) -> Result<TwoStrided, CudaError> {
        if dims.len() > MAX_RANK {
            return Err(CudaError::invalid(
                op,
                format!("rank {} exceeds {MAX_RANK} (dims {dims:?})", dims.len()),
            ));
        }
        let n = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let n = n.ok_or_else(|| CudaError::invalid(op, format!("dims {dims:?} overflow")))?;
        for o in [&a, &b] {
            if o.strides.len() != dims.len() {
                return Err(CudaError::invalid(
                    op,
                    format!("{} has strides {:?} for dims {dims:?}", o.name, o.strides),
                ));
            }
            if n == 0 {
                continue;
            }
            let last = dims
                .iter()
                .zip(o.strides)
                .try_fold(o.offset, |acc, (&d, &s)| {
                    acc.checked_add((d - 1).checked_mul(s)?)
                });
            if last.is_none_or(|last| last >= o.len) {
                return Err(CudaError::invalid(
                    op,
                    format!(
                        "{} (dims {dims:?}, strides {:?}, offset {}) reaches past its {} elements",
                        o.name, o.strides, o.offset, o.len
                    ),
                ));
            }
        }
        let mut p = TwoStrided {
            n: n as u64,
            off0: a.offset as i64,
            off1: b.offset as i64,
            ..TwoStrided::default()
        };
        let mut rank = 0;
        for d in 0..dims.len() {
            if dims[d] == 1 {
                continue;
            }
            let (s0, s1) = (a.strides[d] as i64, b.strides[d] as i64);
            let dim = dims[d] as u64;
            let merges =
                rank > 0 && p.s0[rank - 1] == s0 * dim as i64 && p.s1[rank - 1] == s1 * dim as i64;
            if merges {
                p.dims[rank - 1] *= dim;
                p.s0[rank - 1] = s0;
                p.s1[rank - 1] = s1;
            } else {
                p.dims[rank] = dim;
                p.s0[rank] = s0;
                p.s1[rank] = s1;
                rank += 1;
            }
        }
        p.rank = rank as u32;
        Ok(p)
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether operand 1 (the destination of a copy) is written at most once per position:
    /// with dimensions ordered by stride, each stride must clear everything the faster
    /// dimensions can reach.
    pub fn second_is_injective(&self) -> bool {
        let mut dims: Vec<(i64, u64)> = (0..self.rank as usize)
            .map(|d| (self.s1[d], self.dims[d]))
            .collect();
        dims.sort_unstable();
        let mut reach = 0i64;
        dims.iter().all(|&(s, d)| {
            let ok = s > reach;
            reach += s * (d as i64 - 1);
            ok
        })
    }

    /// The layout over groups of `factor` consecutive positions along the innermost dimension,
    /// for kernels that handle a group per thread with one decode: its length must be a multiple
    /// of `factor`, and each operand must either walk it contiguously from an offset and outer
    /// strides that are multiples of `factor` (the group is one aligned vector of it) or be
    /// broadcast along it (stride 0: one element serves the group). Strides and offsets stay in
    /// elements. None where the layout does not allow it (a transpose, an odd offset or length).
    pub fn grouped(&self, factor: u64) -> Option<TwoStrided> {
        let f = factor as i64;
        let last = (self.rank as usize).checked_sub(1)?;
        let fits = |s: &[i64; MAX_RANK], off: i64| match s[last] {
            0 => true,
            1 => off % f == 0 && s[..last].iter().all(|&s| s % f == 0),
            _ => false,
        };
        if factor < 2
            || !self.dims[last].is_multiple_of(factor)
            || !fits(&self.s0, self.off0)
            || !fits(&self.s1, self.off1)
        {
            return None;
        }
        let mut p = *self;
        p.n /= factor;
        p.dims[last] /= factor;
        p.s0[last] *= f;
        p.s1[last] *= f;
        Some(p)
    }

    /// The same copy over elements `factor` times wider, where both operands walk their
    /// innermost dimension contiguously and the layout groups (`grouped`): a narrow of a fused
    /// projection then moves 16-byte vectors instead of 2-byte elements, and decodes its
    /// coordinates once per vector. None where the layout does not allow it (a transpose, a
    /// broadcast, an odd offset).
    pub fn widened(&self, factor: u64) -> Option<TwoStrided> {
        let last = (self.rank as usize).checked_sub(1)?;
        if self.s0[last] != 1 || self.s1[last] != 1 {
            return None;
        }
        let mut p = self.grouped(factor)?;
        let f = factor as i64;
        for d in 0..=last {
            p.s0[d] /= f;
            p.s1[d] /= f;
        }
        p.off0 /= f;
        p.off1 /= f;
        Some(p)
    }

    /// Whether both operands walk the whole range contiguously from offset 0, i.e. the
    /// elementwise fast path applies.
    pub fn both_contiguous(&self) -> bool {
        self.off0 == 0
            && self.off1 == 0
            && (self.rank == 0 || (self.rank == 1 && self.s0[0] == 1 && self.s1[0] == 1))
    }
}

/// Row-major contiguous strides of `dims`.
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dims: &[u64], s1: &[i64]) -> TwoStrided {
        let mut p = TwoStrided {
            rank: dims.len() as u32,
            ..TwoStrided::default()
        };
        p.dims[..dims.len()].copy_from_slice(dims);
        p.s1[..dims.len()].copy_from_slice(s1);
        p
    }

    fn operand<'a>(name: &'static str, len: usize, strides: &'a [usize]) -> Operand<'a> {
        Operand {
            name,
            len,
            strides,
            offset: 0,
        }
    }

    #[test]
    fn narrow_of_aligned_rows_widens_and_odd_layouts_do_not() {
        // Columns 8..16 of [4, 24] into a [4, 8]: both rows walk contiguously from multiples of 8.
        let p = TwoStrided::new(
            "t",
            &[4, 8],
            Operand {
                offset: 8,
                ..operand("src", 96, &[24, 1])
            },
            operand("dst", 32, &[8, 1]),
        )
        .unwrap();
        let w = p.widened(8).unwrap();
        assert_eq!((w.n, w.rank, w.dims[0], w.dims[1]), (4, 2, 4, 1));
        assert_eq!((w.s0[0], w.s1[0], w.off0, w.off1), (3, 1, 1, 0));
        assert!(
            p.widened(16).is_none(),
            "inner length 8 is not a multiple of 16"
        );
        let odd = TwoStrided::new(
            "t",
            &[4, 8],
            Operand {
                offset: 2,
                ..operand("src", 96, &[24, 1])
            },
            operand("dst", 32, &[8, 1]),
        )
        .unwrap();
        assert!(odd.widened(4).is_none() && odd.widened(2).is_some());
        let transpose = TwoStrided::new(
            "t",
            &[8, 8],
            operand("src", 64, &[1, 8]),
            operand("dst", 64, &[8, 1]),
        )
        .unwrap();
        assert!(transpose.widened(2).is_none());
        let broadcast = TwoStrided::new(
            "t",
            &[8, 8],
            operand("src", 8, &[1, 0]),
            operand("dst", 64, &[8, 1]),
        )
        .unwrap();
        assert!(broadcast.widened(2).is_none());
    }

    #[test]
    fn broadcasts_along_or_across_rows_group() {
        // A per-head weight [H, D] over [B * T, H, D]: both walk the rows, which merge to H * D.
        let p = TwoStrided::new(
            "t",
            &[6, 3, 16],
            operand("x", 288, &[48, 16, 1]),
            operand("w", 48, &[0, 16, 1]),
        )
        .unwrap();
        let g = p.grouped(8).unwrap();
        assert_eq!((g.n, g.rank, g.dims[0], g.dims[1]), (36, 2, 6, 6));
        assert_eq!((g.s0[0], g.s0[1], g.s1[0], g.s1[1]), (48, 8, 0, 8));
        // A per-row gate [N, 1] times x [N, 16]: the gate is broadcast along the row.
        let gate = TwoStrided::new(
            "t",
            &[5, 16],
            operand("gate", 5, &[1, 0]),
            operand("x", 80, &[16, 1]),
        )
        .unwrap();
        let g = gate.grouped(8).unwrap();
        assert_eq!(
            (g.n, g.dims[1], g.s0[0], g.s0[1], g.s1[1]),
            (10, 2, 1, 0, 8)
        );
        // Rows of 12 do not split into groups of 8, and a transpose walks no row.
        let short = TwoStrided::new(
            "t",
            &[5, 12],
            operand("x", 60, &[12, 1]),
            operand("b", 12, &[0, 1]),
        )
        .unwrap();
        assert!(short.grouped(8).is_none() && short.grouped(4).is_some());
        let transpose = TwoStrided::new(
            "t",
            &[8, 8],
            operand("a", 64, &[1, 8]),
            operand("b", 64, &[8, 1]),
        )
        .unwrap();
        assert!(transpose.grouped(2).is_none());
    }

    #[test]
    fn bias_add_collapses_to_rank_2() {
        let dims = [2, 3, 5];
        let a = operand("a", 30, &[15, 5, 1]);
        let b = operand("b", 5, &[0, 0, 1]);
        let p = TwoStrided::new("t", &dims, a, b).unwrap();
        assert_eq!(p.rank, 2);
        assert_eq!((p.dims[0], p.dims[1]), (6, 5));
        assert_eq!((p.s0[0], p.s0[1], p.s1[0], p.s1[1]), (5, 1, 0, 1));
        assert!(!p.both_contiguous());
    }

    #[test]
    fn same_shape_collapses_to_contiguous() {
        let s = contiguous_strides(&[4, 1, 7]);
        let p = TwoStrided::new("t", &[4, 1, 7], operand("a", 28, &s), operand("b", 28, &s));
        assert!(p.unwrap().both_contiguous());
    }

    #[test]
    fn out_of_bounds_is_an_error() {
        let s = contiguous_strides(&[4, 7]);
        let err = TwoStrided::new("t", &[4, 7], operand("a", 28, &s), operand("b", 27, &s));
        let msg = err.unwrap_err().to_string();
        assert!(msg.contains("b (dims [4, 7]"), "{msg}");
    }

    #[test]
    fn injectivity() {
        assert!(layout(&[3, 4], &[4, 1]).second_is_injective());
        assert!(
            layout(&[3, 4], &[1, 3]).second_is_injective(),
            "a transpose"
        );
        assert!(
            layout(&[3, 4], &[10, 2]).second_is_injective(),
            "a padded slice"
        );
        assert!(
            !layout(&[3, 4], &[0, 1]).second_is_injective(),
            "a broadcast"
        );
        assert!(
            !layout(&[3, 4], &[2, 1]).second_is_injective(),
            "overlapping rows"
        );
    }

    #[test]
    fn contiguous() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
    }
}
