//! The CUDA backend: storage as a buffer from swax-cuda's caching pool, and every `Backend`
//! method as one or a few swax-cuda kernel launches (or a cuBLAS call). Nothing here waits for
//! the GPU: results are queued on the device's stream, and only a host copy synchronizes.
//!
//! Shapes, dtypes and op codes are swax-cuda's own types, handed over as they are; what a kernel
//! accepts, its wrapper checks. Where swax-cuda's kernel set is narrower than `Backend` (a
//! reversed running sum, selects along an inner axis), the method composes kernels that exist and
//! says so.
use crate::backend::*;
use crate::{DType, Device, Error, Result};
use std::ops::Deref;
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

/// The process-wide handle of GPU `ordinal` (swax-cuda keeps one per ordinal).
pub fn device(ordinal: usize) -> Result<cu::CudaDevice> {
    Ok(cu::CudaDevice::new(ordinal)?)
}

impl CudaStorage {
    /// The device buffer, for code that calls swax-cuda directly (benchmarks, custom kernels).
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    fn dev(&self) -> &cu::CudaDevice {
        self.buf.device()
    }

    fn wrap(buf: Buffer) -> Self {
        CudaStorage { buf }
    }

    /// A new `len`-element `dtype` tensor, written by `kernel`.
    fn output(
        &self,
        dtype: DType,
        len: usize,
        kernel: impl FnOnce(&mut Buffer) -> std::result::Result<(), cu::CudaError>,
    ) -> Result<Self> {
        let mut y = self.alloc(dtype, len)?;
        kernel(&mut y)?;
        Ok(Self::wrap(y))
    }

    /// [`CudaStorage::output`] in this tensor's dtype.
    fn output_like(
        &self,
        len: usize,
        kernel: impl FnOnce(&mut Buffer) -> std::result::Result<(), cu::CudaError>,
    ) -> Result<Self> {
        self.output(self.buf.dtype(), len, kernel)
    }

    /// A new, uninitialised buffer on the same device; every caller writes all of it.
    fn alloc(&self, dtype: DType, len: usize) -> Result<Buffer> {
        Ok(self.dev().alloc(dtype, len)?)
    }

    fn alloc_like(&self, len: usize) -> Result<Buffer> {
        self.alloc(self.buf.dtype(), len)
    }

    /// `len` zeros of `dtype` on GPU `ordinal`, set on the device.
    pub(crate) fn zeros_on(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        Ok(Self::wrap(device(ordinal)?.alloc_zeros(dtype, len)?))
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
            DType::F32 => C::F32(self.dev().dtoh(&self.buf)?),
            DType::BF16 => C::BF16(self.dev().dtoh(&self.buf)?),
            DType::U32 => C::U32(self.dev().dtoh(&self.buf)?),
            dtype @ (DType::F64 | DType::U8) => {
                return Err(Error::UnsupportedDType {
                    op: "to_cpu",
                    dtype,
                })
            }
        })
    }

    fn binary_into(&self, op: BinaryOp, rhs: &Buffer, layout: &BroadcastLayout) -> Result<Buffer> {
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
    /// norm weights and dloss go to the kernels in f32.
    fn converted(&self, b: &Buffer, dtype: DType) -> Result<Option<Buffer>> {
        if b.dtype() == dtype {
            return Ok(None);
        }
        let mut y = self.alloc(dtype, b.len())?;
        k::cast::cast(self.dev(), b, &mut y)?;
        Ok(Some(y))
    }

    /// `b` as a kernel reads it in `dtype`: `b` itself, or a converted copy.
    fn read_as<'a>(&self, b: &'a Buffer, dtype: DType) -> Result<Operand<'a>> {
        Ok(match self.converted(b, dtype)? {
            Some(y) => Operand::Owned(y),
            None => Operand::Same(b),
        })
    }

    /// A norm's weights as its forward over this data reads them (`kernels::norm::
    /// forward_weights`): as they are, or a copy in f32.
    fn weights<'a>(&self, w: &'a Buffer) -> Result<Operand<'a>> {
        Ok(match k::norm::forward_weights(self.dev(), &self.buf, w)? {
            Some(cast) => Operand::Owned(cast),
            None => Operand::Same(w),
        })
    }

    fn cast_to(&self, b: Buffer, dtype: DType) -> Result<Buffer> {
        if b.dtype() == dtype {
            return Ok(b);
        }
        let mut y = self.alloc(dtype, b.len())?;
        k::cast::cast(self.dev(), &b, &mut y)?;
        Ok(y)
    }
}

/// A buffer a kernel reads: one that already was in the dtype wanted, or a converted copy that
/// lives as long as the read.
enum Operand<'a> {
    Same(&'a Buffer),
    Owned(Buffer),
}

impl Deref for Operand<'_> {
    type Target = Buffer;

    fn deref(&self) -> &Buffer {
        match self {
            Operand::Same(b) => b,
            Operand::Owned(b) => b,
        }
    }
}

fn contiguous(shape: &[usize]) -> Vec<usize> {
    crate::Shape::new(shape).strides()
}

impl Backend for CudaStorage {
    fn dtype(&self) -> DType {
        self.buf.dtype()
    }

    fn device(&self) -> Device {
        Device::Cuda(self.dev().ordinal())
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn zeros(&self, len: usize, dtype: DType) -> Result<Self> {
        Ok(Self::wrap(self.dev().alloc_zeros(dtype, len)?))
    }

    fn to_dtype(&self, dtype: DType) -> Result<Self> {
        if dtype == DType::U32 || self.buf.dtype() == DType::U32 {
            // Index <-> float casts are rare (masks, counts): go through the host.
            let cpu = self.to_cpu()?.to_dtype(dtype)?;
            return CudaStorage::from_cpu(&cpu, self.dev().ordinal());
        }
        let mut y = self.alloc(dtype, self.buf.len())?;
        k::cast::cast(self.dev(), &self.buf, &mut y)?;
        Ok(Self::wrap(y))
    }

    fn unary(&self, op: UnaryOp) -> Result<Self> {
        self.output_like(self.buf.len(), |y| {
            k::unary::unary(self.dev(), op, &self.buf, y)
        })
    }

    fn unary_backward(&self, op: UnaryOp, dy: &Self) -> Result<Self> {
        let saved = k::unary::Saved::Input(&self.buf);
        self.output_like(self.buf.len(), |dx| {
            k::unary::unary_backward(self.dev(), op, saved, &dy.buf, dx)
        })
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, layout: &BroadcastLayout) -> Result<Self> {
        Ok(Self::wrap(self.binary_into(op, &rhs.buf, layout)?))
    }

    fn scale_cast(&self, s: &Self, dtype: DType) -> Result<Self> {
        self.output(dtype, self.buf.len(), |y| {
            k::cast::scale_cast(self.dev(), &self.buf, &s.buf, y)
        })
    }

    fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self> {
        on_true.output_like(on_true.buf.len(), |y| {
            k::mask::where_select(self.dev(), &self.buf, &on_true.buf, &on_false.buf, y)
        })
    }

    fn reduce(&self, op: ReduceOp, dims: AxisDims) -> Result<Self> {
        self.output_like(dims.outer * dims.inner, |y| {
            k::reduce::reduce(self.dev(), op, &self.buf, dims, y, None)
        })
    }

    fn argmax(&self, dims: AxisDims) -> Result<Self> {
        let mut y = self.alloc_like(dims.outer * dims.inner)?;
        self.output(DType::U32, dims.outer * dims.inner, |idx| {
            k::reduce::reduce(
                self.dev(),
                ReduceOp::Max,
                &self.buf,
                dims,
                &mut y,
                Some(idx),
            )
        })
    }

    fn scatter_axis(&self, idx: &Self, dims: AxisDims) -> Result<Self> {
        let mut y = self
            .dev()
            .alloc_zeros(self.buf.dtype(), dims.outer * dims.n * dims.inner)?;
        k::scatter::scatter_axis(self.dev(), &self.buf, &idx.buf, dims, &mut y)?;
        Ok(Self::wrap(y))
    }

    fn cumsum(&self, dims: AxisDims, reverse: bool) -> Result<Self> {
        let c = self.output_like(self.buf.len(), |c| {
            k::reduce::cumsum(self.dev(), &self.buf, dims, c)
        })?;
        if !reverse {
            return Ok(c);
        }
        // From the end: sum_{s >= t} x_s = total - sum_{s <= t} x_s + x_t.
        let total = self.reduce(ReduceOp::Sum, dims)?;
        let shape = vec![dims.outer, dims.n, dims.inner];
        let minus = total.binary_into(
            BinaryOp::Sub,
            &c.buf,
            &BroadcastLayout {
                lhs_strides: vec![dims.inner, 0, 1],
                rhs_strides: contiguous(&shape),
                shape,
            },
        )?;
        self.output_like(self.buf.len(), |out| {
            k::binary::binary_same_shape(self.dev(), BinaryOp::Add, &minus, &self.buf, out)
        })
    }

    fn softmax(&self, n: usize, kind: Softmax) -> Result<Self> {
        self.output_like(self.buf.len(), |y| {
            k::softmax::softmax(self.dev(), kind, &self.buf, n, y)
        })
    }

    fn softmax_backward(&self, dy: &Self, n: usize, kind: Softmax) -> Result<Self> {
        self.output_like(self.buf.len(), |dx| {
            k::softmax::softmax_backward(self.dev(), kind, &self.buf, &dy.buf, n, dx)
        })
    }

    fn matmul(&self, rhs: &Self, l: &MatmulLayout) -> Result<Self> {
        self.output_like(l.batch * l.m * l.n, |c| {
            let args = cu::GemmArgs {
                layout: *l,
                a: &self.buf,
                b: &rhs.buf,
                c,
                c_stride: l.m * l.n,
                alpha: 1.0,
                beta: 0.0,
                allow_tf32: false,
            };
            cu::gemm(self.dev(), args)
        })
    }

    fn matmul_acc(&self, rhs: &Self, l: &MatmulLayout, acc: &mut Self) -> Result<()> {
        let args = cu::GemmArgs {
            layout: *l,
            a: &self.buf,
            b: &rhs.buf,
            c: &mut acc.buf,
            c_stride: l.m * l.n,
            alpha: 1.0,
            beta: 1.0,
            allow_tf32: false,
        };
        Ok(cu::gemm(self.dev(), args)?)
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
            Operand::Same(&self.buf)
        } else {
            Operand::Owned(self.swap_outer(&self.buf, d.outer, d.n, d.inner)?)
        };
        let row_len = d.outer * d.inner;
        let mut y = self.alloc_like(m * row_len)?;
        k::embedding::index_select(self.dev(), &rows, row_len, &ids.buf, &mut y)?;
        if d.outer == 1 {
            return Ok(Self::wrap(y));
        }
        Ok(Self::wrap(self.swap_outer(&y, m, d.outer, d.inner)?))
    }

    fn index_add(&self, ids: &Self, d: AxisDims) -> Result<Self> {
        let m = ids.buf.len();
        let rows = if d.outer == 1 {
            Operand::Same(&self.buf)
        } else {
            Operand::Owned(self.swap_outer(&self.buf, d.outer, m, d.inner)?)
        };
        let row_len = d.outer * d.inner;
        let mut acc = self.dev().alloc_zeros(DType::F32, d.n * row_len)?;
        k::embedding::embedding_backward(self.dev(), &ids.buf, &rows, d.n, row_len, &mut acc)?;
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
        let offset = (cols - rows) as i64;
        self.output_like(self.buf.len(), |y| {
            k::mask::band_mask(
                self.dev(),
                &self.buf,
                rows,
                cols,
                offset,
                window.min(cols + 1),
                value as f32,
                y,
            )
        })
    }

    fn rms_norm(
        &self,
        weight: &Self,
        res: Option<&Self>,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self)> {
        let w = self.weights(&weight.buf)?;
        let mut y = self.alloc_like(self.buf.len())?;
        let mut rstd = self.alloc(DType::F32, self.buf.len() / n.max(1))?;
        let res = res.map(|r| &r.buf);
        k::norm::rms_norm(
            self.dev(),
            &self.buf,
            n,
            &w,
            eps as f32,
            res,
            &mut y,
            &mut rstd,
        )?;
        Ok((Self::wrap(y), Self::wrap(rstd)))
    }

    fn rms_norm_backward(
        &self,
        weight: &Self,
        rstd: &Self,
        dy: &Self,
        dres: Option<&Self>,
        n: usize,
    ) -> Result<(Self, Self)> {
        let w = self.read_as(&weight.buf, DType::F32)?;
        let mut dx = self.alloc_like(self.buf.len())?;
        let mut dw = self.alloc(DType::F32, n)?;
        k::norm::rms_norm_backward(
            self.dev(),
            &self.buf,
            n,
            &w,
            &rstd.buf,
            &dy.buf,
            dres.map(|r| &r.buf),
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
        let (w, b) = match weight.dtype() == bias.dtype() {
            true => (self.weights(&weight.buf)?, self.weights(&bias.buf)?),
            false => (
                self.read_as(&weight.buf, DType::F32)?,
                self.read_as(&bias.buf, DType::F32)?,
            ),
        };
        let rows = self.buf.len() / n.max(1);
        let mut y = self.alloc_like(self.buf.len())?;
        let mut mean = self.alloc(DType::F32, rows)?;
        let mut rstd = self.alloc(DType::F32, rows)?;
        k::norm::layer_norm(
            self.dev(),
            &self.buf,
            n,
            &w,
            &b,
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
        let w = self.read_as(&weight.buf, DType::F32)?;
        let mut dx = self.alloc_like(self.buf.len())?;
        let mut dw = self.alloc(DType::F32, n)?;
        let mut db = self.alloc(DType::F32, n)?;
        k::norm::layer_norm_backward(
            self.dev(),
            &self.buf,
            n,
            &w,
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
        let dloss = self.read_as(&dloss.buf, DType::F32)?;
        self.output_like(self.buf.len(), |dlogits| {
            k::cross_entropy::cross_entropy_backward(
                self.dev(),
                &self.buf,
                v,
                &targets.buf,
                ignore_index.unwrap_or(u32::MAX),
                &lse.buf,
                &count.buf,
                &dloss,
                dlogits,
            )
        })
    }

    fn cross_entropy_summed(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
        totals: &mut Self,
        grad: bool,
    ) -> Result<Option<Self>> {
        let mut dlogits = match grad {
            true => Some(self.alloc(self.buf.dtype(), self.buf.len())?),
            false => None,
        };
        k::cross_entropy::cross_entropy_summed(
            self.dev(),
            &self.buf,
            v,
            &targets.buf,
            ignore_index.unwrap_or(u32::MAX),
            &mut totals.buf,
            dlogits.as_mut(),
        )?;
        Ok(dlogits.map(Self::wrap))
    }

    fn swiglu(&self, f: usize) -> Result<Self> {
        self.output_like(self.buf.len() / 2, |h| {
            k::swiglu::swiglu(self.dev(), &self.buf, f, h)
        })
    }

    fn swiglu_backward(&self, dh: &Self, f: usize) -> Result<(Self, Self)> {
        let mut dgu = self.alloc_like(self.buf.len())?;
        let mut h = self.alloc_like(dh.buf.len())?;
        k::swiglu::swiglu_backward(self.dev(), &self.buf, &dh.buf, f, &mut dgu, &mut h)?;
        Ok((Self::wrap(dgu), Self::wrap(h)))
    }

    fn rope(&self, dims: RopeDims) -> Result<Self> {
        self.output_like(self.buf.len(), |y| {
            k::rope::rope(self.dev(), dims, &self.buf, y)
        })
    }

    fn rope_backward(&self, dims: RopeDims, dres: Option<&Self>) -> Result<Self> {
        let dres = dres.map(|r| &r.buf);
        self.output_like(self.buf.len(), |y| {
            k::rope::rope_backward(self.dev(), dims, &self.buf, dres, y)
        })
    }

    fn short_conv(&self, w: &Self, bias: &Self, dims: ConvDims) -> Result<Self> {
        self.output_like(self.buf.len(), |y| {
            k::short_conv::short_conv(self.dev(), &self.buf, &w.buf, &bias.buf, dims, y)
        })
    }

    fn short_conv_backward(
        &self,
        w: &Self,
        dy: &Self,
        dims: ConvDims,
    ) -> Result<(Self, Self, Self)> {
        let (dx, dw, db) =
            k::short_conv::short_conv_backward(self.dev(), &self.buf, &w.buf, &dy.buf, dims)?;
        Ok((Self::wrap(dx), Self::wrap(dw), Self::wrap(db)))
    }

    fn adamw(
        params: &mut [AdamWSlot<'_, Self>],
        clip: Option<(&Self, f64)>,
        hp: AdamWStep,
    ) -> Result<()> {
        let Some(dev) = params.first().map(|s| s.param.dev().clone()) else {
            return Ok(());
        };
        let mut bufs: Vec<k::optim::AdamWBuffers> = params
            .iter_mut()
            .map(|s| k::optim::AdamWBuffers {
                param: &mut s.param.buf,
                grad: &s.grad.buf,
                m: &mut s.m.buf,
                v: &mut s.v.buf,
                decay: s.decay,
            })
            .collect();
        let clip = clip.map(|(norm, max_norm)| (&norm.buf, max_norm as f32));
        Ok(k::optim::adamw(&dev, hp, &mut bufs, clip)?)
    }

    fn global_norm(xs: &[&Self]) -> Result<Self> {
        let first = xs.first().ok_or_else(|| Error::Invalid {
            op: "global_norm",
            msg: "no tensors".into(),
        })?;
        let bufs: Vec<&Buffer> = xs.iter().map(|x| &x.buf).collect();
        first.output(DType::F32, 1, |out| {
            k::optim::global_norm(first.dev(), &bufs, out)
        })
    }

    fn add_into(acc: &mut [&mut Self], xs: &[&Self]) -> Result<()> {
        let Some(dev) = acc.first().map(|a| a.dev().clone()) else {
            return Ok(());
        };
        let mut bufs: Vec<&mut Buffer> = acc.iter_mut().map(|a| &mut a.buf).collect();
        let xs: Vec<&Buffer> = xs.iter().map(|x| &x.buf).collect();
        Ok(k::optim::add_into(&dev, &mut bufs, &xs)?)
    }
}
