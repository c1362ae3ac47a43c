//! The CUDA backend: storage as a buffer from swax-cuda's caching pool, and every `Backend`
//! method as one or a few swax-cuda kernel launches (or a cuBLAS call). Nothing here waits for
//! the GPU: results are queued on the device's stream, and only a host copy synchronizes.
//!
//! F64 does not exist on the GPU (it is for gradient checks on the CPU). Where swax-cuda's kernel
//! set is narrower than `Backend` (an `AddScalar`, a `maximum`, a reversed running sum, selects
//! along an inner axis), the method composes kernels that exist and says so.
use crate::backend::*;
use crate::{DType, Device, Error, Result};
use swax_cuda as cu;
use swax_cuda::kernels as k;
use swax_cuda::Buffer;

pub struct CudaStorage {
    buf: Buffer,
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaStorage({:?})", self.buf)
    }
}

/// A kernel's result buffer as storage (the fused mixers' CUDA kernels, in swax-nn).
impl From<Buffer> for CudaStorage {
    fn from(buf: Buffer) -> Self {
        CudaStorage { buf }
    }
}

impl From<cu::CudaError> for Error {
    fn from(e: cu::CudaError) -> Self {
        Error::Cuda(e.to_string())
    }
}

fn to_cu(op: &'static str, dtype: DType) -> Result<cu::DType> {
    match dtype {
        DType::F32 => Ok(cu::DType::F32),
        DType::BF16 => Ok(cu::DType::BF16),
        DType::U32 => Ok(cu::DType::U32),
        DType::F64 => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The process-wide handle of GPU `ordinal` (swax-cuda keeps one per ordinal).
pub fn device(ordinal: usize) -> Result<cu::Device> {
    Ok(cu::Device::new(ordinal)?)
}

impl CudaStorage {
    /// The device buffer, for code that calls swax-cuda directly (benchmarks, custom kernels).
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    fn dev(&self) -> &cu::Device {
        self.buf.device()
    }

    fn wrap(buf: Buffer) -> Self {
        CudaStorage { buf }
    }

    /// A new, uninitialised buffer on the same device; every caller writes all of it.
    fn alloc(&self, dtype: cu::DType, len: usize) -> Result<Buffer> {
        Ok(self.dev().alloc(dtype, len)?)
    }

    fn alloc_like(&self, len: usize) -> Result<Buffer> {
        self.alloc(self.buf.dtype(), len)
    }

    pub fn from_cpu(cpu: &crate::cpu::CpuStorage, ordinal: usize) -> Result<Self> {
        use crate::cpu::CpuStorage as C;
        let dev = device(ordinal)?;
        let buf = match cpu {
            C::F32(v) => dev.htod(v)?,
            C::BF16(v) => dev.htod(v)?,
            C::U32(v) => dev.htod(v)?,
            C::F64(_) => {
                return Err(Error::UnsupportedDType {
                    op: "to_device",
                    dtype: DType::F64,
                })
            }
        };
        Ok(CudaStorage::wrap(buf))
    }

    pub fn to_cpu(&self) -> Result<crate::cpu::CpuStorage> {
        use crate::cpu::CpuStorage as C;
        Ok(match self.buf.dtype() {
            cu::DType::F32 => C::F32(self.dev().dtoh(&self.buf)?),
            cu::DType::BF16 => C::BF16(self.dev().dtoh(&self.buf)?),
            cu::DType::U32 => C::U32(self.dev().dtoh(&self.buf)?),
            cu::DType::U8 => C::U32(
                self.dev()
                    .dtoh::<u8>(&self.buf)?
                    .into_iter()
                    .map(u32::from)
                    .collect(),
            ),
        })
    }

    /// A one-element f32 buffer holding `value` (a scalar operand, broadcast with stride 0).
    fn scalar(&self, value: f64) -> Result<Buffer> {
        let mut s = self.alloc(self.buf.dtype(), 1)?;
        k::cast::fill(self.dev(), &mut s, value as f32)?;
        Ok(s)
    }

    fn binary_into(
        &self,
        op: k::binary::BinaryOp,
        rhs: &Buffer,
        layout: &BroadcastLayout,
    ) -> Result<Buffer> {
        let len = layout.shape.iter().product();
        let mut y = self.alloc_like(len)?;
        k::binary::binary(
            self.dev(),
            op,
            &layout.shape,
            &self.buf,
            &layout.lhs_strides,
            rhs,
            &layout.rhs_strides,
            &mut y,
        )?;
        Ok(y)
    }

    fn copy(&self, src: &Buffer, l: &StridedLayout) -> Result<Buffer> {
        let mut y = self.alloc(src.dtype(), l.shape.iter().product())?;
        let dst = crate::Shape::new(l.shape.clone()).strides();
        k::copy::strided_copy(
            self.dev(),
            &l.shape,
            src,
            &l.strides,
            l.offset,
            &mut y,
            &dst,
            0,
        )?;
        Ok(y)
    }

    /// `[outer, n, inner]` to `[n, outer, inner]` (or back): selects along an inner axis run as
    /// row selects on the swapped layout.
    fn swap_outer(&self, src: &Buffer, outer: usize, n: usize, inner: usize) -> Result<Buffer> {
        self.copy(
            src,
            &StridedLayout {
                shape: vec![n, outer, inner],
                strides: vec![inner, n * inner, 1],
                offset: 0,
            },
        )
    }

    /// A `dtype` copy of `b`, or None when `b` already is `dtype` (the caller then reads `b`):
    /// norm weights and dloss go to the kernels in f32, attention operands in bf16.
    fn converted(&self, b: &Buffer, dtype: cu::DType) -> Result<Option<Buffer>> {
        if b.dtype() == dtype {
            return Ok(None);
        }
        let mut y = self.alloc(dtype, b.len())?;
        k::cast::cast(self.dev(), b, &mut y)?;
        Ok(Some(y))
    }

    fn cast_to(&self, b: Buffer, dtype: cu::DType) -> Result<Buffer> {
        if b.dtype() == dtype {
            return Ok(b);
        }
        let mut y = self.alloc(dtype, b.len())?;
        k::cast::cast(self.dev(), &b, &mut y)?;
        Ok(y)
    }
}

fn cu_unary(op: UnaryOp) -> Option<k::unary::UnaryOp> {
    use k::unary::UnaryOp as U;
    Some(match op {
        UnaryOp::Neg => U::Neg,
        UnaryOp::Exp => U::Exp,
        UnaryOp::Log => U::Log,
        UnaryOp::Sqrt => U::Sqrt,
        UnaryOp::Rsqrt => U::Rsqrt,
        UnaryOp::Tanh => U::Tanh,
        UnaryOp::Sigmoid => U::Sigmoid,
        UnaryOp::Silu => U::Silu,
        UnaryOp::Softplus => U::Softplus,
        UnaryOp::LogSigmoid => U::LogSigmoid,
        UnaryOp::Relu => U::Relu,
        UnaryOp::Square => U::Square,
        UnaryOp::Scale(c) => U::Scale(c as f32),
        UnaryOp::Clamp(lo, hi) => U::Clamp {
            lo: lo as f32,
            hi: hi as f32,
        },
        UnaryOp::AddScalar(_) => return None,
    })
}

/// Whether a fused mixer kernel has a CUDA version for this dtype and head dim (the mixer's
/// query `[B, T, H, D]`). The one place that says so: layers read it (through
/// `Device::has_fused`) to pick the fused or the reference form, so a kernel that lands here is
/// used by the models with no change elsewhere.
pub fn has_fused(kernel: FusedKernel, dtype: DType, head_dim: usize) -> bool {
    match kernel {
        // bf16 tensor-core tiles of the head dims the kernels' own check takes; f32 would be
        // rounded to bf16 inside, so an f32 model keeps the exact reference.
        FusedKernel::Swa | FusedKernel::Rla => {
            let one_head = k::attention::Heads {
                b: 1,
                t: 1,
                h: 1,
                hkv: 1,
                d: head_dim,
            };
            dtype == DType::BF16 && one_head.check("has_fused").is_ok()
        }
        FusedKernel::ShortConv => true,
    }
}

fn conv_shape(d: ConvDims) -> k::short_conv::ConvShape {
    k::short_conv::ConvShape {
        b: d.b,
        t: d.t,
        c: d.c,
        k: d.k,
    }
}

fn heads(d: AttnDims) -> k::attention::Heads {
    k::attention::Heads {
        b: d.b,
        t: d.t,
        h: d.h,
        hkv: d.hkv,
        d: d.d,
    }
}

fn attn(d: AttnDims, window: usize, scale: f64) -> k::attention::Attn {
    k::attention::Attn {
        heads: heads(d),
        window,
        scale,
    }
}

fn rla(d: AttnDims, window: usize) -> k::rla::Rla {
    k::rla::Rla {
        heads: heads(d),
        window,
    }
}

fn axis(d: AxisDims) -> k::reduce::Axis {
    k::reduce::Axis {
        outer: d.outer,
        n: d.n,
        inner: d.inner,
    }
}

fn contiguous(shape: &[usize]) -> Vec<usize> {
    crate::Shape::new(shape).strides()
}

impl Backend for CudaStorage {
    fn dtype(&self) -> DType {
        match self.buf.dtype() {
            cu::DType::F32 => DType::F32,
            cu::DType::BF16 => DType::BF16,
            cu::DType::U32 | cu::DType::U8 => DType::U32,
        }
    }

    fn device(&self) -> Device {
        Device::Cuda(self.dev().ordinal())
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn zeros(&self, len: usize, dtype: DType) -> Result<Self> {
        Ok(Self::wrap(
            self.dev().alloc_zeros(to_cu("zeros", dtype)?, len)?,
        ))
    }

    fn to_dtype(&self, dtype: DType) -> Result<Self> {
        let target = to_cu("to_dtype", dtype)?;
        if target == cu::DType::U32 || self.buf.dtype() == cu::DType::U32 {
            // Index <-> float casts are rare (masks, counts): go through the host.
            let cpu = self.to_cpu()?.to_dtype(dtype)?;
            return CudaStorage::from_cpu(&cpu, self.dev().ordinal());
        }
        let mut y = self.alloc(target, self.buf.len())?;
        k::cast::cast(self.dev(), &self.buf, &mut y)?;
        Ok(Self::wrap(y))
    }

    fn unary(&self, op: UnaryOp) -> Result<Self> {
        match cu_unary(op) {
            Some(op) => {
                let mut y = self.alloc_like(self.buf.len())?;
                k::unary::unary(self.dev(), op, &self.buf, &mut y)?;
                Ok(Self::wrap(y))
            }
            None => {
                let UnaryOp::AddScalar(c) = op else {
                    unreachable!("only AddScalar lacks a kernel")
                };
                let s = self.scalar(c)?;
                let n = self.buf.len();
                let layout = BroadcastLayout {
                    shape: vec![n],
                    lhs_strides: vec![1],
                    rhs_strides: vec![0],
                };
                Ok(Self::wrap(self.binary_into(
                    k::binary::BinaryOp::Add,
                    &s,
                    &layout,
                )?))
            }
        }
    }

    fn unary_backward(&self, op: UnaryOp, dy: &Self) -> Result<Self> {
        let mut dx = self.alloc_like(self.buf.len())?;
        match cu_unary(op) {
            Some(op) => k::unary::unary_backward(
                self.dev(),
                op,
                k::unary::Saved::Input(&self.buf),
                &dy.buf,
                &mut dx,
            )?,
            // d(x + c)/dx = 1.
            None => self.dev().copy(&dy.buf, &mut dx)?,
        }
        Ok(Self::wrap(dx))
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, layout: &BroadcastLayout) -> Result<Self> {
        use k::binary::BinaryOp as B;
        let cu_op = match op {
            BinaryOp::Add => B::Add,
            BinaryOp::Sub => B::Sub,
            BinaryOp::Mul => B::Mul,
            BinaryOp::Div => B::Div,
            BinaryOp::Maximum => {
                // max(a, b) = b + relu(a - b), with b broadcast back in by its own strides.
                let diff = self.binary_into(B::Sub, &rhs.buf, layout)?;
                let mut pos = self.alloc_like(diff.len())?;
                k::unary::unary(self.dev(), k::unary::UnaryOp::Relu, &diff, &mut pos)?;
                let back = BroadcastLayout {
                    shape: layout.shape.clone(),
                    lhs_strides: contiguous(&layout.shape),
                    rhs_strides: layout.rhs_strides.clone(),
                };
                let pos = Self::wrap(pos);
                return Ok(Self::wrap(pos.binary_into(B::Add, &rhs.buf, &back)?));
            }
        };
        Ok(Self::wrap(self.binary_into(cu_op, &rhs.buf, layout)?))
    }

    fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self> {
        let mut y = on_true.alloc_like(on_true.buf.len())?;
        k::mask::where_select(self.dev(), &self.buf, &on_true.buf, &on_false.buf, &mut y)?;
        Ok(Self::wrap(y))
    }

    fn reduce(&self, op: ReduceOp, dims: AxisDims) -> Result<Self> {
        use k::reduce::ReduceOp as R;
        let op = match op {
            ReduceOp::Sum => R::Sum,
            ReduceOp::Mean => R::Mean,
            ReduceOp::Max => R::Max,
            ReduceOp::LogSumExp => R::LogSumExp,
        };
        let mut y = self.alloc_like(dims.outer * dims.inner)?;
        k::reduce::reduce(self.dev(), op, &self.buf, axis(dims), &mut y, None)?;
        Ok(Self::wrap(y))
    }

    fn argmax(&self, dims: AxisDims) -> Result<Self> {
        let mut y = self.alloc_like(dims.outer * dims.inner)?;
        let mut idx = self.alloc(cu::DType::U32, dims.outer * dims.inner)?;
        k::reduce::reduce(
            self.dev(),
            k::reduce::ReduceOp::Max,
            &self.buf,
            axis(dims),
            &mut y,
            Some(&mut idx),
        )?;
        Ok(Self::wrap(idx))
    }

    fn scatter_axis(&self, idx: &Self, dims: AxisDims) -> Result<Self> {
        let mut y = self
            .dev()
            .alloc_zeros(self.buf.dtype(), dims.outer * dims.n * dims.inner)?;
        k::scatter::scatter_axis(self.dev(), &self.buf, &idx.buf, axis(dims), &mut y)?;
        Ok(Self::wrap(y))
    }

    fn cumsum(&self, dims: AxisDims, reverse: bool) -> Result<Self> {
        let mut c = self.alloc_like(self.buf.len())?;
        k::reduce::cumsum(self.dev(), &self.buf, axis(dims), &mut c)?;
        if !reverse {
            return Ok(Self::wrap(c));
        }
        // From the end: sum_{s >= t} x_s = total - sum_{s <= t} x_s + x_t.
        let mut total = self.alloc_like(dims.outer * dims.inner)?;
        k::reduce::reduce(
            self.dev(),
            k::reduce::ReduceOp::Sum,
            &self.buf,
            axis(dims),
            &mut total,
            None,
        )?;
        let shape = vec![dims.outer, dims.n, dims.inner];
        let minus = Self::wrap(total).binary_into(
            k::binary::BinaryOp::Sub,
            &c,
            &BroadcastLayout {
                lhs_strides: vec![dims.inner, 0, 1],
                rhs_strides: contiguous(&shape),
                shape,
            },
        )?;
        let mut out = self.alloc_like(self.buf.len())?;
        k::binary::binary_same_shape(
            self.dev(),
            k::binary::BinaryOp::Add,
            &minus,
            &self.buf,
            &mut out,
        )?;
        Ok(Self::wrap(out))
    }

    fn softmax(&self, n: usize, log: bool) -> Result<Self> {
        let kind = if log {
            k::softmax::Softmax::LogSoftmax
        } else {
            k::softmax::Softmax::Softmax
        };
        let mut y = self.alloc_like(self.buf.len())?;
        k::softmax::softmax(self.dev(), kind, &self.buf, n, &mut y)?;
        Ok(Self::wrap(y))
    }

    fn softmax_backward(&self, dy: &Self, n: usize, log: bool) -> Result<Self> {
        let kind = if log {
            k::softmax::Softmax::LogSoftmax
        } else {
            k::softmax::Softmax::Softmax
        };
        let mut dx = self.alloc_like(self.buf.len())?;
        k::softmax::softmax_backward(self.dev(), kind, &self.buf, &dy.buf, n, &mut dx)?;
        Ok(Self::wrap(dx))
    }

    fn matmul(&self, rhs: &Self, l: &MatmulLayout) -> Result<Self> {
        let mut c = self.alloc_like(l.batch * l.m * l.n)?;
        cu::gemm(
            self.dev(),
            cu::GemmArgs {
                ta: l.lhs_transposed,
                tb: l.rhs_transposed,
                m: l.m,
                n: l.n,
                k: l.k,
                batch: l.batch,
                a: &self.buf,
                a_stride: l.lhs_batch_stride,
                b: &rhs.buf,
                b_stride: l.rhs_batch_stride,
                c: &mut c,
                c_stride: l.m * l.n,
                alpha: 1.0,
                beta: 0.0,
                allow_tf32: false,
            },
        )?;
        Ok(Self::wrap(c))
    }

    fn copy_strided(&self, src: &StridedLayout) -> Result<Self> {
        Ok(Self::wrap(self.copy(&self.buf, src)?))
    }

    fn copy_into(
        &self,
        src: &StridedLayout,
        dst: &mut Self,
        dst_layout: &StridedLayout,
    ) -> Result<()> {
        k::copy::strided_copy(
            self.dev(),
            &src.shape,
            &self.buf,
            &src.strides,
            src.offset,
            &mut dst.buf,
            &dst_layout.strides,
            dst_layout.offset,
        )?;
        Ok(())
    }

    fn index_select(&self, ids: &Self, d: AxisDims) -> Result<Self> {
        let m = ids.buf.len();
        let rows = if d.outer == 1 {
            None
        } else {
            Some(self.swap_outer(&self.buf, d.outer, d.n, d.inner)?)
        };
        let row_len = d.outer * d.inner;
        let mut y = self.alloc_like(m * row_len)?;
        k::embedding::index_select(
            self.dev(),
            rows.as_ref().unwrap_or(&self.buf),
            row_len,
            &ids.buf,
            &mut y,
        )?;
        if d.outer == 1 {
            return Ok(Self::wrap(y));
        }
        Ok(Self::wrap(self.swap_outer(&y, m, d.outer, d.inner)?))
    }

    fn index_add(&self, ids: &Self, d: AxisDims) -> Result<Self> {
        let m = ids.buf.len();
        let rows = if d.outer == 1 {
            None
        } else {
            Some(self.swap_outer(&self.buf, d.outer, m, d.inner)?)
        };
        let row_len = d.outer * d.inner;
        let mut acc = self.dev().alloc_zeros(cu::DType::F32, d.n * row_len)?;
        k::embedding::embedding_backward(
            self.dev(),
            &ids.buf,
            rows.as_ref().unwrap_or(&self.buf),
            d.n,
            row_len,
            &mut acc,
        )?;
        let acc = self.cast_to(acc, self.buf.dtype())?;
        if d.outer == 1 {
            return Ok(Self::wrap(acc));
        }
        Ok(Self::wrap(self.swap_outer(&acc, d.n, d.outer, d.inner)?))
    }

    fn masked_fill_band(
        &self,
        rows: usize,
        cols: usize,
        window: usize,
        value: f64,
    ) -> Result<Self> {
        let mut y = self.alloc_like(self.buf.len())?;
        let offset = (cols - rows) as i64;
        k::mask::band_mask(
            self.dev(),
            &self.buf,
            rows,
            cols,
            offset,
            window.min(cols + 1),
            value as f32,
            &mut y,
        )?;
        Ok(Self::wrap(y))
    }

    fn rms_norm(&self, weight: &Self, n: usize, eps: f64) -> Result<(Self, Self)> {
        let w32 = self.converted(&weight.buf, cu::DType::F32)?;
        let w = w32.as_ref().unwrap_or(&weight.buf);
        let mut y = self.alloc_like(self.buf.len())?;
        let mut rstd = self.alloc(cu::DType::F32, self.buf.len() / n.max(1))?;
        k::norm::rms_norm(self.dev(), &self.buf, n, w, eps as f32, &mut y, &mut rstd)?;
        Ok((Self::wrap(y), Self::wrap(rstd)))
    }

    fn rms_norm_backward(
        &self,
        weight: &Self,
        rstd: &Self,
        dy: &Self,
        n: usize,
    ) -> Result<(Self, Self)> {
        let w32 = self.converted(&weight.buf, cu::DType::F32)?;
        let w = w32.as_ref().unwrap_or(&weight.buf);
        let mut dx = self.alloc_like(self.buf.len())?;
        let mut dw = self.alloc(cu::DType::F32, n)?;
        k::norm::rms_norm_backward(
            self.dev(),
            &self.buf,
            n,
            w,
            &rstd.buf,
            &dy.buf,
            &mut dx,
            &mut dw,
        )?;
        Ok((
            Self::wrap(dx),
            Self::wrap(self.cast_to(dw, weight.buf.dtype())?),
        ))
    }

    fn layer_norm(
        &self,
        weight: &Self,
        bias: &Self,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self, Self)> {
        let (w32, b32) = (
            self.converted(&weight.buf, cu::DType::F32)?,
            self.converted(&bias.buf, cu::DType::F32)?,
        );
        let (w, b) = (
            w32.as_ref().unwrap_or(&weight.buf),
            b32.as_ref().unwrap_or(&bias.buf),
        );
        let rows = self.buf.len() / n.max(1);
        let mut y = self.alloc_like(self.buf.len())?;
        let mut mean = self.alloc(cu::DType::F32, rows)?;
        let mut rstd = self.alloc(cu::DType::F32, rows)?;
        k::norm::layer_norm(
            self.dev(),
            &self.buf,
            n,
            w,
            b,
            eps as f32,
            &mut y,
            &mut mean,
            &mut rstd,
        )?;
        Ok((Self::wrap(y), Self::wrap(mean), Self::wrap(rstd)))
    }

    fn layer_norm_backward(
        &self,
        weight: &Self,
        mean: &Self,
        rstd: &Self,
        dy: &Self,
        n: usize,
    ) -> Result<(Self, Self, Self)> {
        let w32 = self.converted(&weight.buf, cu::DType::F32)?;
        let w = w32.as_ref().unwrap_or(&weight.buf);
        let mut dx = self.alloc_like(self.buf.len())?;
        let mut dw = self.alloc(cu::DType::F32, n)?;
        let mut db = self.alloc(cu::DType::F32, n)?;
        k::norm::layer_norm_backward(
            self.dev(),
            &self.buf,
            n,
            w,
            &mean.buf,
            &rstd.buf,
            &dy.buf,
            &mut dx,
            &mut dw,
            &mut db,
        )?;
        let dtype = weight.buf.dtype();
        Ok((
            Self::wrap(dx),
            Self::wrap(self.cast_to(dw, dtype)?),
            Self::wrap(self.cast_to(db, dtype)?),
        ))
    }

    fn cross_entropy(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<(Self, Self, Self)> {
        let saved = k::cross_entropy::cross_entropy(
            self.dev(),
            &self.buf,
            v,
            &targets.buf,
            ignore_index.unwrap_or(u32::MAX),
        )?;
        // stats = [mean loss, counted rows]: split into the scalar loss and the count.
        let pick = |i: usize| {
            self.copy(
                &saved.stats,
                &StridedLayout {
                    shape: vec![1],
                    strides: vec![1],
                    offset: i,
                },
            )
        };
        Ok((
            Self::wrap(pick(0)?),
            Self::wrap(saved.lse),
            Self::wrap(saved.stats),
        ))
    }

    fn cross_entropy_backward(
        &self,
        targets: &Self,
        lse: &Self,
        count: &Self,
        dloss: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<Self> {
        let mut dlogits = self.alloc_like(self.buf.len())?;
        let dloss32 = self.converted(&dloss.buf, cu::DType::F32)?;
        let dloss = dloss32.as_ref().unwrap_or(&dloss.buf);
        k::cross_entropy::cross_entropy_backward(
            self.dev(),
            &self.buf,
            v,
            &targets.buf,
            ignore_index.unwrap_or(u32::MAX),
            &lse.buf,
            &count.buf,
            dloss,
            &mut dlogits,
        )?;
        Ok(Self::wrap(dlogits))
    }

    fn rope(&self, d: RopeDims, inverse: bool) -> Result<Self> {
        let r = k::rope::Rope {
            b: d.b,
            t: d.t,
            h: d.h,
            d: d.d,
            pos_offset: d.offset as i64,
            theta: d.theta,
        };
        let mut y = self.alloc_like(self.buf.len())?;
        if inverse {
            k::rope::rope_backward(self.dev(), r, &self.buf, &mut y)?;
        } else {
            k::rope::rope(self.dev(), r, &self.buf, &mut y)?;
        }
        Ok(Self::wrap(y))
    }

    fn short_conv(&self, w: &Self, bias: &Self, dims: ConvDims) -> Result<Self> {
        let mut y = self.alloc_like(self.buf.len())?;
        k::short_conv::short_conv(
            self.dev(),
            &self.buf,
            &w.buf,
            &bias.buf,
            conv_shape(dims),
            &mut y,
        )?;
        Ok(Self::wrap(y))
    }

    fn short_conv_backward(
        &self,
        w: &Self,
        dy: &Self,
        dims: ConvDims,
    ) -> Result<(Self, Self, Self)> {
        let (dx, dw, db) = k::short_conv::short_conv_backward(
            self.dev(),
            &self.buf,
            &w.buf,
            &dy.buf,
            conv_shape(dims),
        )?;
        Ok((Self::wrap(dx), Self::wrap(dw), Self::wrap(db)))
    }

    /// bf16 tensor cores for either dtype: f32 operands are rounded to bf16 on the way in and
    /// the results widened back (the softmax statistics and accumulations stay f32).
    fn swa_forward(
        &self,
        k: &Self,
        v: &Self,
        dims: AttnDims,
        window: usize,
        scale: f64,
    ) -> Result<(Self, Self)> {
        let (qc, kc, vc) = (
            self.converted(&self.buf, cu::DType::BF16)?,
            self.converted(&k.buf, cu::DType::BF16)?,
            self.converted(&v.buf, cu::DType::BF16)?,
        );
        let mut o = self.alloc(cu::DType::BF16, self.buf.len())?;
        let mut lse = self.alloc(cu::DType::F32, dims.b * dims.h * dims.t)?;
        k::attention::swa_forward(
            self.dev(),
            attn(dims, window, scale),
            qc.as_ref().unwrap_or(&self.buf),
            kc.as_ref().unwrap_or(&k.buf),
            vc.as_ref().unwrap_or(&v.buf),
            &mut o,
            &mut lse,
        )?;
        Ok((
            Self::wrap(self.cast_to(o, self.buf.dtype())?),
            Self::wrap(lse),
        ))
    }

    fn swa_backward(
        &self,
        k: &Self,
        v: &Self,
        o: &Self,
        lse: &Self,
        dout: &Self,
        dims: AttnDims,
        window: usize,
        scale: f64,
    ) -> Result<(Self, Self, Self)> {
        let [qc, kc, vc, oc, dc] = [&self.buf, &k.buf, &v.buf, &o.buf, &dout.buf]
            .map(|b| self.converted(b, cu::DType::BF16));
        let (qc, kc, vc, oc, dc) = (qc?, kc?, vc?, oc?, dc?);
        let mut dq = self.alloc_like(self.buf.len())?;
        let mut dk = self.alloc(cu::DType::BF16, k.buf.len())?;
        let mut dv = self.alloc(cu::DType::BF16, v.buf.len())?;
        let saved = k::attention::Saved {
            q: qc.as_ref().unwrap_or(&self.buf),
            k: kc.as_ref().unwrap_or(&k.buf),
            v: vc.as_ref().unwrap_or(&v.buf),
            o: oc.as_ref().unwrap_or(&o.buf),
            lse: &lse.buf,
            dout: dc.as_ref().unwrap_or(&dout.buf),
        };
        k::attention::swa_backward(
            self.dev(),
            attn(dims, window, scale),
            saved,
            &mut dq,
            &mut dk,
            &mut dv,
        )?;
        let dtype = self.buf.dtype();
        Ok((
            Self::wrap(dq),
            Self::wrap(self.cast_to(dk, dtype)?),
            Self::wrap(self.cast_to(dv, dtype)?),
        ))
    }

    /// bf16 tensor cores for either dtype, like `swa_forward`; `chunk` is ignored (the kernels
    /// run chunks of 64 steps, and every chunk size gives the same values).
    fn rla_forward(
        &self,
        k: &Self,
        v: &Self,
        dims: AttnDims,
        window: usize,
        _chunk: usize,
    ) -> Result<Self> {
        let [qc, kc, vc] = [&self.buf, &k.buf, &v.buf].map(|b| self.converted(b, cu::DType::BF16));
        let (qc, kc, vc) = (qc?, kc?, vc?);
        let mut o = self.alloc(cu::DType::BF16, self.buf.len())?;
        k::rla::rla_forward(
            self.dev(),
            rla(dims, window),
            qc.as_ref().unwrap_or(&self.buf),
            kc.as_ref().unwrap_or(&k.buf),
            vc.as_ref().unwrap_or(&v.buf),
            &mut o,
        )?;
        Ok(Self::wrap(self.cast_to(o, self.buf.dtype())?))
    }

    fn rla_backward(
        &self,
        k: &Self,
        v: &Self,
        dout: &Self,
        dims: AttnDims,
        window: usize,
        _chunk: usize,
    ) -> Result<(Self, Self, Self)> {
        let [qc, kc, vc, dc] =
            [&self.buf, &k.buf, &v.buf, &dout.buf].map(|b| self.converted(b, cu::DType::BF16));
        let (qc, kc, vc, dc) = (qc?, kc?, vc?, dc?);
        let mut dq = self.alloc(cu::DType::BF16, self.buf.len())?;
        let mut dk = self.alloc(cu::DType::BF16, k.buf.len())?;
        let mut dv = self.alloc(cu::DType::BF16, v.buf.len())?;
        let inputs = (
            qc.as_ref().unwrap_or(&self.buf),
            kc.as_ref().unwrap_or(&k.buf),
            vc.as_ref().unwrap_or(&v.buf),
            dc.as_ref().unwrap_or(&dout.buf),
        );
        k::rla::rla_backward(
            self.dev(),
            rla(dims, window),
            inputs,
            &mut dq,
            &mut dk,
            &mut dv,
        )?;
        let dtype = self.buf.dtype();
        Ok((
            Self::wrap(self.cast_to(dq, dtype)?),
            Self::wrap(self.cast_to(dk, dtype)?),
            Self::wrap(self.cast_to(dv, dtype)?),
        ))
    }

    fn adamw(
        &self,
        grad: &Self,
        m: &Self,
        v: &Self,
        grad_scale: &Self,
        hp: AdamWStep,
    ) -> Result<(Self, Self, Self)> {
        // Tensors are immutable: the kernel updates fresh copies in place.
        let dev = self.dev();
        let fresh = |src: &Buffer| -> Result<Buffer> {
            let mut dst = self.alloc(src.dtype(), src.len())?;
            dev.copy(src, &mut dst)?;
            Ok(dst)
        };
        let (mut p, mut m2, mut v2) = (fresh(&self.buf)?, fresh(&m.buf)?, fresh(&v.buf)?);
        let cfg = k::optim::AdamW {
            lr: hp.lr as f32,
            beta1: hp.beta1 as f32,
            beta2: hp.beta2 as f32,
            eps: hp.eps as f32,
            weight_decay: hp.weight_decay as f32,
        };
        k::optim::adamw_step(
            dev,
            cfg,
            hp.step,
            &mut p,
            &grad.buf,
            &mut m2,
            &mut v2,
            Some(&grad_scale.buf),
        )?;
        Ok((Self::wrap(p), Self::wrap(m2), Self::wrap(v2)))
    }

    fn sum_squares(&self) -> Result<Self> {
        let mut out = self.alloc(cu::DType::F32, 1)?;
        k::optim::sum_squares(self.dev(), &self.buf, &mut out, false)?;
        Ok(Self::wrap(out))
    }
}
