//! The CPU backend: storage as plain vectors and a kernel for every op of `Backend`.
//!
//! Kernels are generic over `Real` (f32 and f64); BF16 storage is widened to f32, computed, and
//! rounded back, so bf16 arithmetic on the CPU matches the GPU's "bf16 storage, f32 math".
//! Work is spread over cores with rayon once a buffer is large enough to pay for it.
pub mod chunk;
mod copy;
mod elementwise;
mod loss;
mod mask;
mod matmul;
mod norm;
mod optim;
mod reduce;
mod rope;
mod short_conv;
mod softmax;
mod swiglu;

use crate::backend::*;
use crate::{DType, Device, Error, Result};
use half::bf16;
use std::borrow::Cow;

pub use elementwise::{sigmoid, softplus};
pub use norm::row_stats;
pub use softmax::for_rows;

/// Below this many elements a kernel runs on one thread: rayon's fork/join costs more.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// The float types CPU kernels compute in.
pub trait Real:
    num_traits::Float
    + num_traits::FromPrimitive
    + std::iter::Sum
    + Default
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
{
    fn of(v: f64) -> Self {
        Self::from_f64(v).expect("every f64 converts to a float type")
    }
    /// The values of float storage in this type: bf16 widened to f32, f32 and f64 as they are.
    fn read<'a>(op: &'static str, s: &'a CpuStorage) -> Result<Cow<'a, [Self]>>;
    /// Values computed in this type, stored as `dtype` (f32 rounded to bf16 for BF16).
    fn store(v: Vec<Self>, dtype: DType) -> CpuStorage;
}

impl Real for f32 {
    fn read<'a>(op: &'static str, s: &'a CpuStorage) -> Result<Cow<'a, [f32]>> {
        match s {
            CpuStorage::F32(v) => Ok(Cow::Borrowed(v)),
            CpuStorage::BF16(v) => Ok(Cow::Owned(widen(v))),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
            }),
        }
    }
    fn store(v: Vec<f32>, dtype: DType) -> CpuStorage {
        match dtype {
            DType::BF16 => CpuStorage::BF16(narrow(v)),
            _ => CpuStorage::F32(v),
        }
    }
}

impl Real for f64 {
    fn read<'a>(op: &'static str, s: &'a CpuStorage) -> Result<Cow<'a, [f64]>> {
        match s {
            CpuStorage::F64(v) => Ok(Cow::Borrowed(v)),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
            }),
        }
    }
    fn store(v: Vec<f64>, _dtype: DType) -> CpuStorage {
        CpuStorage::F64(v)
    }
}

#[derive(Clone, Debug)]
pub enum CpuStorage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    BF16(Vec<bf16>),
    U32(Vec<u32>),
}

fn widen(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

fn narrow(v: Vec<f32>) -> Vec<bf16> {
    v.into_iter().map(bf16::from_f32).collect()
}

/// The float operands of one kernel call, all of one dtype, as the type the kernel computes in.
enum Floats<'a> {
    /// f32 operands; `true` when they were BF16 and the outputs must be rounded back.
    F32(Vec<Cow<'a, [f32]>>, bool),
    F64(Vec<Cow<'a, [f64]>>),
}

fn floats<'a>(op: &'static str, xs: &[&'a CpuStorage]) -> Result<Floats<'a>> {
    let dtype = xs[0].dtype();
    // Per-row statistics saved by a BF16 forward are f32: they may join BF16 operands.
    let fits =
        |x: &&&CpuStorage| x.dtype() == dtype || (dtype == DType::BF16 && x.dtype() == DType::F32);
    if let Some(other) = xs.iter().find(|x| !fits(x)) {
        return Err(Error::DTypeMismatch {
            op,
            lhs: dtype,
            rhs: other.dtype(),
        });
    }
    Ok(match dtype {
        DType::F32 => Floats::F32(xs.iter().map(|x| Cow::Borrowed(x.f32())).collect(), false),
        DType::BF16 => Floats::F32(
            xs.iter()
                .map(|x| match x {
                    CpuStorage::F32(v) => Cow::Borrowed(&v[..]),
                    other => Cow::Owned(widen(other.bf16())),
                })
                .collect(),
            true,
        ),
        DType::F64 => Floats::F64(xs.iter().map(|x| Cow::Borrowed(x.f64())).collect()),
        DType::U32 | DType::U8 => return Err(Error::UnsupportedDType { op, dtype }),
    })
}

/// Runs a kernel written once, generically, on float operands of one dtype. Inside `$body`,
/// `$xs[i]` are the operands as `&[T]` slices, `$out(Vec<T>)` wraps a result in the operands'
/// dtype, and `$stat(Vec<T>)` wraps a per-row statistic, which stays f32 for BF16 operands.
macro_rules! with_floats {
    ($op:expr, [$($s:expr),+], |$xs:ident, $out:ident, $stat:ident| $body:expr) => {
        match floats($op, &[$($s),+])? {
            Floats::F32($xs, bf) => {
                #[allow(unused_variables)]
                let $out = |v: Vec<f32>| if bf { CpuStorage::BF16(narrow(v)) } else { CpuStorage::F32(v) };
                #[allow(unused_variables)]
                let $stat = CpuStorage::F32;
                $body
            }
            Floats::F64($xs) => {
                #[allow(unused_variables)]
                let $out = CpuStorage::F64;
                #[allow(unused_variables)]
                let $stat = CpuStorage::F64;
                $body
            }
        }
    };
}

/// Runs a dtype-agnostic kernel (copies, gathers) on any storage.
macro_rules! any_map {
    ($s:expr, |$v:ident| $body:expr) => {
        match $s {
            CpuStorage::F32($v) => CpuStorage::F32($body),
            CpuStorage::F64($v) => CpuStorage::F64($body),
            CpuStorage::BF16($v) => CpuStorage::BF16($body),
            CpuStorage::U32($v) => CpuStorage::U32($body),
        }
    };
}

macro_rules! accessor {
    ($name:ident, $variant:ident, $t:ty) => {
        /// The values, for a caller that has already checked the dtype.
        fn $name(&self) -> &[$t] {
            match self {
                CpuStorage::$variant(v) => v,
                _ => unreachable!("dtype checked by the caller"),
            }
        }
    };
}

impl CpuStorage {
    accessor!(f32, F32, f32);
    accessor!(f64, F64, f64);
    accessor!(bf16, BF16, bf16);

    /// The values of f32 storage; an error naming `op` for any other dtype.
    fn f32s(&self, op: &'static str) -> Result<&[f32]> {
        match self {
            CpuStorage::F32(v) => Ok(v),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
            }),
        }
    }

    /// [`CpuStorage::f32s`], to write.
    fn f32s_mut(&mut self, op: &'static str) -> Result<&mut [f32]> {
        match self {
            CpuStorage::F32(v) => Ok(v),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
            }),
        }
    }

    pub fn ids(&self, op: &'static str) -> Result<&[u32]> {
        match self {
            CpuStorage::U32(v) => Ok(v),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other.dtype(),
            }),
        }
    }

    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            CpuStorage::F32(v) => v.iter().map(|&x| x as f64).collect(),
            CpuStorage::F64(v) => v.clone(),
            CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            CpuStorage::U32(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// `v` stored as `dtype`; an error for U8, which tensors do not hold.
    pub fn from_f64_vec(op: &'static str, v: &[f64], dtype: DType) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F64 => CpuStorage::F64(v.to_vec()),
            DType::BF16 => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::U32 => CpuStorage::U32(v.iter().map(|&x| x as u32).collect()),
            DType::U8 => return Err(Error::UnsupportedDType { op, dtype }),
        })
    }
}

impl Backend for CpuStorage {
    fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::U32(_) => DType::U32,
        }
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn len(&self) -> usize {
        match self {
            CpuStorage::F32(v) => v.len(),
            CpuStorage::F64(v) => v.len(),
            CpuStorage::BF16(v) => v.len(),
            CpuStorage::U32(v) => v.len(),
        }
    }

    fn zeros(&self, len: usize, dtype: DType) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(vec![0.0; len]),
            DType::F64 => CpuStorage::F64(vec![0.0; len]),
            DType::BF16 => CpuStorage::BF16(vec![bf16::ZERO; len]),
            DType::U32 => CpuStorage::U32(vec![0; len]),
            DType::U8 => return Err(Error::UnsupportedDType { op: "zeros", dtype }),
        })
    }

    fn to_dtype(&self, dtype: DType) -> Result<Self> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Ok(match (self, dtype) {
            (CpuStorage::F32(v), DType::BF16) => CpuStorage::BF16(narrow(v.clone())),
            (CpuStorage::BF16(v), DType::F32) => CpuStorage::F32(widen(v)),
            _ => CpuStorage::from_f64_vec("to_dtype", &self.to_f64_vec(), dtype)?,
        })
    }

    fn unary(&self, op: UnaryOp) -> Result<Self> {
        Ok(with_floats!("unary", [self], |x, out, _s| out(
            elementwise::unary(&x[0], op)
        )))
    }

    fn unary_backward(&self, op: UnaryOp, dy: &Self) -> Result<Self> {
        Ok(with_floats!(
            "unary_backward",
            [self, dy],
            |x, out, _s| out(elementwise::unary_backward(&x[0], &x[1], op))
        ))
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, layout: &BroadcastLayout) -> Result<Self> {
        Ok(with_floats!("binary", [self, rhs], |x, out, _s| out(
            elementwise::binary(&x[0], &x[1], op, layout)
        )))
    }

    fn scale_cast(&self, s: &Self, dtype: DType) -> Result<Self> {
        const OP: &str = "scale_cast";
        Ok(match s {
            CpuStorage::F32(c) if c.len() == 1 => {
                f32::store(elementwise::scale(&f32::read(OP, self)?, c[0]), dtype)
            }
            CpuStorage::F64(c) if c.len() == 1 => {
                f64::store(elementwise::scale(&f64::read(OP, self)?, c[0]), dtype)
            }
            other => {
                return Err(Error::Invalid {
                    op: OP,
                    msg: format!(
                        "the scale must be one f32 or f64, got {} {}",
                        other.len(),
                        other.dtype()
                    ),
                })
            }
        })
    }

    fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self> {
        let cond = self.ids("where_cond")?;
        Ok(with_floats!(
            "where_cond",
            [on_true, on_false],
            |x, out, _s| out(elementwise::where_cond(cond, &x[0], &x[1]))
        ))
    }

    fn reduce(&self, op: ReduceOp, dims: AxisDims) -> Result<Self> {
        Ok(with_floats!("reduce", [self], |x, out, _s| out(
            reduce::reduce(&x[0], op, dims)
        )))
    }

    fn argmax(&self, dims: AxisDims) -> Result<Self> {
        Ok(CpuStorage::U32(with_floats!(
            "argmax",
            [self],
            |x, _o, _s| reduce::argmax(&x[0], dims)
        )))
    }

    fn scatter_axis(&self, idx: &Self, dims: AxisDims) -> Result<Self> {
        let idx = idx.ids("scatter_axis")?;
        Ok(with_floats!("scatter_axis", [self], |x, out, _s| out(
            reduce::scatter_axis(&x[0], idx, dims)
        )))
    }

    fn cumsum(&self, dims: AxisDims, reverse: bool) -> Result<Self> {
        Ok(with_floats!("cumsum", [self], |x, out, _s| out(
            reduce::cumsum(&x[0], dims, reverse)
        )))
    }

    fn softmax(&self, n: usize, kind: Softmax) -> Result<Self> {
        Ok(with_floats!("softmax", [self], |x, out, _s| out(
            softmax::softmax(&x[0], n, kind)
        )))
    }

    fn softmax_backward(&self, dy: &Self, n: usize, kind: Softmax) -> Result<Self> {
        Ok(with_floats!(
            "softmax_backward",
            [self, dy],
            |x, out, _s| out(softmax::softmax_backward(&x[0], &x[1], n, kind))
        ))
    }

    fn matmul(&self, rhs: &Self, layout: &MatmulLayout) -> Result<Self> {
        Ok(with_floats!("matmul", [self, rhs], |x, out, _s| out(
            matmul::matmul(&x[0], &x[1], layout)
        )))
    }

    fn matmul_acc(&self, rhs: &Self, layout: &MatmulLayout, acc: &mut Self) -> Result<()> {
        const OP: &str = "matmul_acc";
        match (floats(OP, &[self, rhs])?, acc) {
            (Floats::F32(x, _), CpuStorage::F32(c)) => matmul::matmul_acc(&x[0], &x[1], layout, c),
            (Floats::F64(x), CpuStorage::F64(c)) => matmul::matmul_acc(&x[0], &x[1], layout, c),
            (_, c) => {
                return Err(Error::DTypeMismatch {
                    op: OP,
                    lhs: self.dtype(),
                    rhs: c.dtype(),
                })
            }
        }
        Ok(())
    }

    fn copy_strided(&self, src: &StridedLayout) -> Result<Self> {
        Ok(any_map!(self, |v| copy::gather_strided(v, src)))
    }

    fn copy_into(
        &self,
        src: &StridedLayout,
        dst: &mut Self,
        dst_layout: &StridedLayout,
    ) -> Result<()> {
        match (self, dst) {
            (CpuStorage::F32(s), CpuStorage::F32(d)) => copy::copy_into(s, src, d, dst_layout),
            (CpuStorage::F64(s), CpuStorage::F64(d)) => copy::copy_into(s, src, d, dst_layout),
            (CpuStorage::BF16(s), CpuStorage::BF16(d)) => copy::copy_into(s, src, d, dst_layout),
            (CpuStorage::U32(s), CpuStorage::U32(d)) => copy::copy_into(s, src, d, dst_layout),
            (s, d) => {
                return Err(Error::DTypeMismatch {
                    op: "copy_into",
                    lhs: s.dtype(),
                    rhs: d.dtype(),
                })
            }
        }
        Ok(())
    }

    fn index_select(&self, ids: &Self, dims: AxisDims) -> Result<Self> {
        let ids = ids.ids("index_select")?;
        Ok(any_map!(self, |v| copy::index_select(v, ids, dims)))
    }

    fn index_add(&self, ids: &Self, dims: AxisDims) -> Result<Self> {
        let ids = ids.ids("index_add")?;
        Ok(with_floats!("index_add", [self], |x, out, _s| out(
            copy::index_add(&x[0], ids, dims)
        )))
    }

    fn masked_fill_band(
        &self,
        rows: usize,
        cols: usize,
        window: usize,
        value: f64,
    ) -> Result<Self> {
        Ok(with_floats!("masked_fill_band", [self], |x, out, _s| out(
            mask::fill_band(&x[0], rows, cols, window, value)
        )))
    }

    fn rms_norm(
        &self,
        weight: &Self,
        res: Option<&Self>,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self)> {
        const OP: &str = "rms_norm";
        // x, w and, where given, res: the reference adds it before the one rounding.
        Ok(match res {
            None => with_floats!(OP, [self, weight], |x, out, stat| {
                let (y, rstd) = norm::rms_norm(&x[0], &x[1], None, n, eps);
                (out(y), stat(rstd))
            }),
            Some(r) => with_floats!(OP, [self, weight, r], |x, out, stat| {
                let (y, rstd) = norm::rms_norm(&x[0], &x[1], Some(&x[2]), n, eps);
                (out(y), stat(rstd))
            }),
        })
    }

    fn rms_norm_backward(
        &self,
        weight: &Self,
        rstd: &Self,
        dy: &Self,
        dres: Option<&Self>,
        n: usize,
    ) -> Result<(Self, Self)> {
        const OP: &str = "rms_norm_backward";
        // x, w, rstd, dy and, where given, dres: the reference adds it before the one rounding.
        Ok(match dres {
            None => with_floats!(OP, [self, weight, rstd, dy], |x, out, _s| {
                let (dx, dw) = norm::rms_norm_backward(&x[0], &x[1], &x[2], &x[3], None, n);
                (out(dx), out(dw))
            }),
            Some(r) => with_floats!(OP, [self, weight, rstd, dy, r], |x, out, _s| {
                let (dx, dw) = norm::rms_norm_backward(&x[0], &x[1], &x[2], &x[3], Some(&x[4]), n);
                (out(dx), out(dw))
            }),
        })
    }

    fn layer_norm(
        &self,
        weight: &Self,
        bias: &Self,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self, Self)> {
        Ok(with_floats!(
            "layer_norm",
            [self, weight, bias],
            |x, out, stat| {
                let (y, mean, rstd) = norm::layer_norm(&x[0], &x[1], &x[2], n, eps);
                (out(y), stat(mean), stat(rstd))
            }
        ))
    }

    fn layer_norm_backward(
        &self,
        weight: &Self,
        mean: &Self,
        rstd: &Self,
        dy: &Self,
        n: usize,
    ) -> Result<(Self, Self, Self)> {
        Ok(with_floats!(
            "layer_norm_backward",
            [self, weight, mean, rstd, dy],
            |x, out, _s| {
                let (dx, dw, db) = norm::layer_norm_backward(&x[0], &x[1], &x[2], &x[3], &x[4], n);
                (out(dx), out(dw), out(db))
            }
        ))
    }

    fn cross_entropy(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<(Self, Self, Self)> {
        let targets = targets.ids("cross_entropy")?;
        Ok(with_floats!("cross_entropy", [self], |x, _o, stat| {
            let (loss, lse, count) = loss::cross_entropy(&x[0], targets, v, ignore_index);
            let totals = CpuStorage::F32(vec![
                num_traits::ToPrimitive::to_f32(&loss).unwrap_or(f32::NAN),
                count as f32,
            ]);
            (stat(vec![loss]), stat(lse), totals)
        }))
    }

    fn cross_entropy_summed(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
        totals: &mut Self,
        grad: bool,
    ) -> Result<Option<Self>> {
        const OP: &str = "cross_entropy_summed";
        let targets = targets.ids(OP)?;
        let (sum, count, dlogits) = with_floats!(OP, [self], |x, out, _s| {
            let (sum, lse, count) = loss::cross_entropy_sum(&x[0], targets, v, ignore_index);
            // The backward of a sum: unit upstream gradient over a count of 1.
            let dlogits = grad.then(|| {
                out(loss::cross_entropy_backward(
                    &x[0],
                    targets,
                    &lse,
                    1.0,
                    1,
                    v,
                    ignore_index,
                ))
            });
            (
                num_traits::ToPrimitive::to_f64(&sum).unwrap_or(f64::NAN),
                count,
                dlogits,
            )
        });
        match totals {
            CpuStorage::F32(t) if self.dtype() != DType::F64 => {
                t[0] += sum as f32;
                t[1] += count as f32;
            }
            CpuStorage::F64(t) if self.dtype() == DType::F64 => {
                t[0] += sum;
                t[1] += count as f64;
            }
            t => {
                return Err(Error::DTypeMismatch {
                    op: OP,
                    lhs: self.dtype(),
                    rhs: t.dtype(),
                })
            }
        }
        Ok(dlogits)
    }

    fn cross_entropy_backward(
        &self,
        targets: &Self,
        lse: &Self,
        totals: &Self,
        dloss: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<Self> {
        let targets = targets.ids("cross_entropy_backward")?;
        let dloss = dloss.to_f64_vec()[0];
        let count = totals.to_f64_vec()[1] as usize;
        Ok(with_floats!(
            "cross_entropy_backward",
            [self, lse],
            |x, out, _s| out(loss::cross_entropy_backward(
                &x[0],
                targets,
                &x[1],
                dloss,
                count,
                v,
                ignore_index
            ))
        ))
    }

    fn short_conv(&self, w: &Self, bias: &Self, dims: ConvDims) -> Result<Self> {
        Ok(with_floats!("short_conv", [self, w, bias], |x, out, _s| {
            out(short_conv::forward(&x[0], &x[1], &x[2], dims))
        }))
    }

    fn short_conv_backward(
        &self,
        w: &Self,
        dy: &Self,
        dims: ConvDims,
    ) -> Result<(Self, Self, Self)> {
        Ok(with_floats!(
            "short_conv_backward",
            [self, w, dy],
            |x, out, _s| {
                let (dx, dw, db) = short_conv::backward(&x[0], &x[1], &x[2], dims);
                (out(dx), out(dw), out(db))
            }
        ))
    }

    fn swiglu(&self, f: usize) -> Result<Self> {
        Ok(with_floats!("swiglu", [self], |x, out, _s| out(
            swiglu::swiglu(&x[0], f)
        )))
    }

    fn swiglu_backward(&self, dh: &Self, f: usize) -> Result<(Self, Self)> {
        Ok(with_floats!("swiglu_backward", [self, dh], |x, out, _s| (
            out(swiglu::swiglu_backward(&x[0], &x[1], f)),
            out(swiglu::swiglu(&x[0], f))
        )))
    }

    fn rope(&self, dims: RopeDims) -> Result<Self> {
        Ok(with_floats!("rope", [self], |x, out, _s| out(rope::rope(
            &x[0], dims, false, None
        ))))
    }

    fn rope_backward(&self, dims: RopeDims, dres: Option<&Self>) -> Result<Self> {
        const OP: &str = "rope_backward";
        Ok(match dres {
            None => with_floats!(OP, [self], |x, out, _s| out(rope::rope(
                &x[0], dims, true, None
            ))),
            Some(r) => with_floats!(OP, [self, r], |x, out, _s| out(rope::rope(
                &x[0],
                dims,
                true,
                Some(&x[1])
            ))),
        })
    }

    fn adamw(
        params: &mut [AdamWSlot<'_, Self>],
        clip: Option<(&Self, f64)>,
        hp: AdamWStep,
    ) -> Result<()> {
        const OP: &str = "adamw";
        let grad_scale = match clip {
            Some((norm, max_norm)) => optim::clip_factor(norm.f32s(OP)?[0], max_norm as f32),
            None => 1.0,
        };
        let mut slots = params
            .iter_mut()
            .map(|s| {
                Ok(optim::Slot {
                    p: s.param.f32s_mut(OP)?,
                    g: s.grad.f32s(OP)?,
                    m: s.m.f32s_mut(OP)?,
                    v: s.v.f32s_mut(OP)?,
                    decay: s.decay,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        optim::adamw(&mut slots, grad_scale, hp);
        Ok(())
    }

    fn global_norm(xs: &[&Self]) -> Result<Self> {
        let xs = xs
            .iter()
            .map(|x| x.f32s("global_norm"))
            .collect::<Result<Vec<_>>>()?;
        Ok(CpuStorage::F32(vec![optim::global_norm(&xs) as f32]))
    }

    fn add_into(acc: &mut [&mut Self], xs: &[&Self]) -> Result<()> {
        for (a, x) in acc.iter_mut().zip(xs) {
            optim::add_into(a.f32s_mut("add_into")?, x.f32s("add_into")?);
        }
        Ok(())
    }
}
