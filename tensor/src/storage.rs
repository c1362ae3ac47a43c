//! `Storage`: a tensor's buffer on whichever device holds it. It implements `Backend` by handing
//! each call to that device's storage, after checking that every operand lives on the same device.
use crate::backend::*;
use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::{DType, Device, Error, Result};

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

/// The operand of one backend call taken as a given device's storage, or a `DeviceMismatch`.
macro_rules! same_device {
    ($name:ident, $variant:ident, $t:ty) => {
        fn $name(&self, op: &'static str, lhs: Device) -> Result<&$t> {
            match self {
                Storage::$variant(s) if s.device() == lhs => Ok(s),
                other => Err(Error::DeviceMismatch {
                    op,
                    lhs,
                    rhs: other.device(),
                }),
            }
        }
    };
}

/// [`same_device!`] for an operand written in place.
macro_rules! same_device_mut {
    ($name:ident, $variant:ident, $t:ty) => {
        fn $name(&mut self, op: &'static str, lhs: Device) -> Result<&mut $t> {
            let rhs = self.device();
            match self {
                Storage::$variant(s) if rhs == lhs => Ok(s),
                _ => Err(Error::DeviceMismatch { op, lhs, rhs }),
            }
        }
    };
}

/// A device's storage taken out of `Storage`: how the many-tensor calls (`adamw`,
/// `global_norm`, `add_into`) run one generic body on either device.
trait DeviceStorage: Backend + Into<Storage> {
    fn of<'a>(s: &'a Storage, op: &'static str, device: Device) -> Result<&'a Self>;
    fn of_mut<'a>(s: &'a mut Storage, op: &'static str, device: Device) -> Result<&'a mut Self>;
}

impl DeviceStorage for CpuStorage {
    fn of<'a>(s: &'a Storage, op: &'static str, device: Device) -> Result<&'a Self> {
        s.cpu(op, device)
    }
    fn of_mut<'a>(s: &'a mut Storage, op: &'static str, device: Device) -> Result<&'a mut Self> {
        s.cpu_mut(op, device)
    }
}

impl DeviceStorage for CudaStorage {
    fn of<'a>(s: &'a Storage, op: &'static str, device: Device) -> Result<&'a Self> {
        s.cuda(op, device)
    }
    fn of_mut<'a>(s: &'a mut Storage, op: &'static str, device: Device) -> Result<&'a mut Self> {
        s.cuda_mut(op, device)
    }
}

fn adamw_on<T: DeviceStorage>(
    device: Device,
    params: &mut [AdamWSlot<'_, Storage>],
    clip: Option<(&Storage, f64)>,
    hp: AdamWStep,
) -> Result<()> {
    const OP: &str = "adamw";
    let mut slots = params
        .iter_mut()
        .map(|s| {
            Ok(AdamWSlot {
                param: T::of_mut(s.param, OP, device)?,
                grad: T::of(s.grad, OP, device)?,
                m: T::of_mut(s.m, OP, device)?,
                v: T::of_mut(s.v, OP, device)?,
                decay: s.decay,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let clip = match clip {
        Some((norm, max_norm)) => Some((T::of(norm, OP, device)?, max_norm)),
        None => None,
    };
    T::adamw(&mut slots, clip, hp)
}

fn global_norm_on<T: DeviceStorage>(device: Device, xs: &[&Storage]) -> Result<Storage> {
    let xs = xs
        .iter()
        .map(|x| T::of(x, "global_norm", device))
        .collect::<Result<Vec<_>>>()?;
    Ok(T::global_norm(&xs)?.into())
}

fn add_into_on<T: DeviceStorage>(
    device: Device,
    acc: &mut [&mut Storage],
    xs: &[&Storage],
) -> Result<()> {
    let mut acc = acc
        .iter_mut()
        .map(|a| T::of_mut(a, "add_into", device))
        .collect::<Result<Vec<_>>>()?;
    let xs = xs
        .iter()
        .map(|x| T::of(x, "add_into", device))
        .collect::<Result<Vec<_>>>()?;
    T::add_into(&mut acc, &xs)
}

impl Storage {
    same_device!(cpu, Cpu, CpuStorage);
    same_device!(cuda, Cuda, CudaStorage);
    same_device_mut!(cpu_mut, Cpu, CpuStorage);
    same_device_mut!(cuda_mut, Cuda, CudaStorage);

    pub fn as_cpu(&self) -> Option<&CpuStorage> {
        match self {
            Storage::Cpu(s) => Some(s),
            Storage::Cuda(_) => None,
        }
    }

    pub fn as_cuda(&self) -> Option<&CudaStorage> {
        match self {
            Storage::Cuda(s) => Some(s),
            Storage::Cpu(_) => None,
        }
    }

    /// The bytes its elements take.
    fn bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// A copy on `device` (host to device, device to host, or between GPUs through the host).
    pub fn to_device(&self, device: Device) -> Result<Storage> {
        let cpu = match self {
            Storage::Cpu(s) => std::borrow::Cow::Borrowed(s),
            Storage::Cuda(s) => std::borrow::Cow::Owned(s.to_cpu()?),
        };
        Ok(match device {
            Device::Cpu => Storage::Cpu(cpu.into_owned()),
            Device::Cuda(ordinal) => Storage::Cuda(CudaStorage::from_cpu(&cpu, ordinal)?),
        })
    }
}

impl From<CpuStorage> for Storage {
    fn from(s: CpuStorage) -> Storage {
        Storage::Cpu(s)
    }
}

impl From<CudaStorage> for Storage {
    fn from(s: CudaStorage) -> Storage {
        Storage::Cuda(s)
    }
}

/// Wraps a device's results back into `Storage`, whatever the method returns.
trait Lift {
    type Out;
    fn lift(self) -> Self::Out;
}

impl Lift for CpuStorage {
    type Out = Storage;
    fn lift(self) -> Storage {
        Storage::Cpu(self)
    }
}

impl Lift for CudaStorage {
    type Out = Storage;
    fn lift(self) -> Storage {
        Storage::Cuda(self)
    }
}

impl Lift for () {
    type Out = ();
    fn lift(self) {}
}

impl<A: Lift, B: Lift> Lift for (A, B) {
    type Out = (A::Out, B::Out);
    fn lift(self) -> Self::Out {
        (self.0.lift(), self.1.lift())
    }
}

impl<A: Lift, B: Lift, C: Lift> Lift for (A, B, C) {
    type Out = (A::Out, B::Out, C::Out);
    fn lift(self) -> Self::Out {
        (self.0.lift(), self.1.lift(), self.2.lift())
    }
}

impl<A: Lift, B: Lift, C: Lift, D: Lift> Lift for (A, B, C, D) {
    type Out = (A::Out, B::Out, C::Out, D::Out);
    fn lift(self) -> Self::Out {
        (self.0.lift(), self.1.lift(), self.2.lift(), self.3.lift())
    }
}

impl<A: Lift> Lift for Vec<A> {
    type Out = Vec<A::Out>;
    fn lift(self) -> Self::Out {
        self.into_iter().map(Lift::lift).collect()
    }
}

/// Calls one backend method on `self`'s device, with the other storage operands taken from the
/// same device (a `DeviceMismatch` error otherwise).
macro_rules! forward {
    ($op:literal, $this:ident, [$($o:ident),*], |$s:ident| $call:expr) => {
        {
            crate::calls::count($op, $this.bytes() $(+ $o.bytes())*);
            match $this {
                Storage::Cpu($s) => {
                    $(let $o = $o.cpu($op, Device::Cpu)?;)*
                    $call.map(Lift::lift)
                }
                Storage::Cuda($s) => {
                    $(let $o = $o.cuda($op, $s.device())?;)*
                    $call.map(Lift::lift)
                }
            }
        }
    };
}

impl Backend for Storage {
    fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) => s.dtype(),
        }
    }

    fn device(&self) -> Device {
        match self {
            Storage::Cpu(s) => s.device(),
            Storage::Cuda(s) => s.device(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            Storage::Cuda(s) => s.len(),
        }
    }

    fn zeros(&self, len: usize, dtype: DType) -> Result<Self> {
        forward!("zeros", self, [], |s| s.zeros(len, dtype))
    }

    fn to_dtype(&self, dtype: DType) -> Result<Self> {
        forward!("to_dtype", self, [], |s| s.to_dtype(dtype))
    }

    fn unary(&self, op: UnaryOp) -> Result<Self> {
        forward!("unary", self, [], |s| s.unary(op))
    }

    fn unary_backward(&self, op: UnaryOp, dy: &Self) -> Result<Self> {
        forward!("unary_backward", self, [dy], |s| s.unary_backward(op, dy))
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, layout: &BroadcastLayout) -> Result<Self> {
        forward!("binary", self, [rhs], |s| s.binary(rhs, op, layout))
    }

    fn scale_cast(&self, s: &Self, dtype: DType) -> Result<Self> {
        forward!("scale_cast", self, [s], |x| x.scale_cast(s, dtype))
    }

    fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self> {
        forward!("where_cond", self, [on_true, on_false], |s| s
            .where_cond(on_true, on_false))
    }

    fn reduce(&self, op: ReduceOp, dims: AxisDims) -> Result<Self> {
        forward!("reduce", self, [], |s| s.reduce(op, dims))
    }

    fn argmax(&self, dims: AxisDims) -> Result<Self> {
        forward!("argmax", self, [], |s| s.argmax(dims))
    }

    fn scatter_axis(&self, idx: &Self, dims: AxisDims) -> Result<Self> {
        forward!("scatter_axis", self, [idx], |s| s.scatter_axis(idx, dims))
    }

    fn cumsum(&self, dims: AxisDims, reverse: bool) -> Result<Self> {
        forward!("cumsum", self, [], |s| s.cumsum(dims, reverse))
    }

    fn softmax(&self, n: usize, kind: Softmax) -> Result<Self> {
        forward!("softmax", self, [], |s| s.softmax(n, kind))
    }

    fn softmax_backward(&self, dy: &Self, n: usize, kind: Softmax) -> Result<Self> {
        forward!("softmax_backward", self, [dy], |s| s
            .softmax_backward(dy, n, kind))
    }

    fn matmul(&self, rhs: &Self, layout: &MatmulLayout) -> Result<Self> {
        forward!("matmul", self, [rhs], |s| s.matmul(rhs, layout))
    }

    fn matmul_acc(&self, rhs: &Self, layout: &MatmulLayout, acc: &mut Self) -> Result<()> {
        const OP: &str = "matmul_acc";
        crate::calls::count(OP, self.bytes() + rhs.bytes() + acc.bytes());
        match self {
            Storage::Cpu(s) => s.matmul_acc(
                rhs.cpu(OP, Device::Cpu)?,
                layout,
                acc.cpu_mut(OP, Device::Cpu)?,
            ),
            Storage::Cuda(s) => s.matmul_acc(
                rhs.cuda(OP, s.device())?,
                layout,
                acc.cuda_mut(OP, s.device())?,
            ),
        }
    }

    fn copy_strided(&self, src: &StridedLayout) -> Result<Self> {
        forward!("copy_strided", self, [], |s| s.copy_strided(src))
    }

    fn copy_into(
        &self,
        src: &StridedLayout,
        dst: &mut Self,
        dst_layout: &StridedLayout,
    ) -> Result<()> {
        crate::calls::count("copy_into", self.bytes());
        match (self, dst) {
            (Storage::Cpu(s), Storage::Cpu(d)) => s.copy_into(src, d, dst_layout),
            (Storage::Cuda(s), Storage::Cuda(d)) if s.device() == d.device() => {
                s.copy_into(src, d, dst_layout)
            }
            (s, d) => Err(Error::DeviceMismatch {
                op: "copy_into",
                lhs: s.device(),
                rhs: d.device(),
            }),
        }
    }

    fn index_select(&self, ids: &Self, dims: AxisDims) -> Result<Self> {
        forward!("index_select", self, [ids], |s| s.index_select(ids, dims))
    }

    fn index_add(&self, ids: &Self, dims: AxisDims) -> Result<Self> {
        forward!("index_add", self, [ids], |s| s.index_add(ids, dims))
    }

    fn masked_fill_band(
        &self,
        rows: usize,
        cols: usize,
        window: usize,
        value: f64,
    ) -> Result<Self> {
        forward!("masked_fill_band", self, [], |s| s
            .masked_fill_band(rows, cols, window, value))
    }

    fn rms_norm(
        &self,
        weight: &Self,
        res: Option<&Self>,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self)> {
        match res {
            None => forward!("rms_norm", self, [weight], |s| s
                .rms_norm(weight, None, n, eps)),
            Some(r) => forward!("rms_norm", self, [weight, r], |s| s.rms_norm(
                weight,
                Some(r),
                n,
                eps
            )),
        }
    }

    fn rms_norm_backward(
        &self,
        weight: &Self,
        rstd: &Self,
        dy: &Self,
        dres: Option<&Self>,
        n: usize,
    ) -> Result<(Self, Self)> {
        match dres {
            None => forward!("rms_norm_backward", self, [weight, rstd, dy], |s| s
                .rms_norm_backward(weight, rstd, dy, None, n)),
            Some(r) => forward!("rms_norm_backward", self, [weight, rstd, dy, r], |s| s
                .rms_norm_backward(weight, rstd, dy, Some(r), n)),
        }
    }

    fn layer_norm(
        &self,
        weight: &Self,
        bias: &Self,
        n: usize,
        eps: f64,
    ) -> Result<(Self, Self, Self)> {
        forward!("layer_norm", self, [weight, bias], |s| s
            .layer_norm(weight, bias, n, eps))
    }

    fn layer_norm_backward(
        &self,
        weight: &Self,
        mean: &Self,
        rstd: &Self,
        dy: &Self,
        n: usize,
    ) -> Result<(Self, Self, Self)> {
        forward!("layer_norm_backward", self, [weight, mean, rstd, dy], |s| s
            .layer_norm_backward(weight, mean, rstd, dy, n))
    }

    fn cross_entropy(
        &self,
        targets: &Self,
        v: usize,
        ignore_index: Option<u32>,
    ) -> Result<(Self, Self, Self)> {
        forward!("cross_entropy", self, [targets], |s| s.cross_entropy(
            targets,
            v,
            ignore_index
        ))
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
        forward!(
            "cross_entropy_backward",
            self,
            [targets, lse, totals, dloss],
            |s| s.cross_entropy_backward(targets, lse, totals, dloss, v, ignore_index)
        )
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
        Ok(match self {
            Storage::Cpu(s) => s
                .cross_entropy_summed(
                    targets.cpu(OP, Device::Cpu)?,
                    v,
                    ignore_index,
                    totals.cpu_mut(OP, Device::Cpu)?,
                    grad,
                )?
                .map(Storage::Cpu),
            Storage::Cuda(s) => s
                .cross_entropy_summed(
                    targets.cuda(OP, s.device())?,
                    v,
                    ignore_index,
                    totals.cuda_mut(OP, s.device())?,
                    grad,
                )?
                .map(Storage::Cuda),
        })
    }

    fn short_conv(&self, w: &Self, bias: &Self, dims: ConvDims) -> Result<Self> {
        forward!("short_conv", self, [w, bias], |s| s
            .short_conv(w, bias, dims))
    }

    fn short_conv_backward(
        &self,
        w: &Self,
        dy: &Self,
        dims: ConvDims,
    ) -> Result<(Self, Self, Self)> {
        forward!("short_conv_backward", self, [w, dy], |s| s
            .short_conv_backward(w, dy, dims))
    }

    fn swiglu(&self, f: usize) -> Result<Self> {
        forward!("swiglu", self, [], |s| s.swiglu(f))
    }

    fn swiglu_backward(&self, dh: &Self, f: usize) -> Result<(Self, Self)> {
        forward!("swiglu_backward", self, [dh], |s| s.swiglu_backward(dh, f))
    }

    fn rope(&self, dims: RopeDims) -> Result<Self> {
        forward!("rope", self, [], |s| s.rope(dims))
    }

    fn rope_backward(&self, dims: RopeDims, dres: Option<&Self>) -> Result<Self> {
        match dres {
            None => forward!("rope_backward", self, [], |s| s.rope_backward(dims, None)),
            Some(r) => forward!("rope_backward", self, [r], |s| s
                .rope_backward(dims, Some(r))),
        }
    }

    fn adamw(
        params: &mut [AdamWSlot<'_, Self>],
        clip: Option<(&Self, f64)>,
        hp: AdamWStep,
    ) -> Result<()> {
        match params.first().map(|s| s.param.device()) {
            None => Ok(()),
            Some(Device::Cpu) => adamw_on::<CpuStorage>(Device::Cpu, params, clip, hp),
            Some(d) => adamw_on::<CudaStorage>(d, params, clip, hp),
        }
    }

    fn global_norm(xs: &[&Self]) -> Result<Self> {
        match xs.first().map(|x| x.device()) {
            None => Err(Error::Invalid {
                op: "global_norm",
                msg: "no tensors".into(),
            }),
            Some(Device::Cpu) => global_norm_on::<CpuStorage>(Device::Cpu, xs),
            Some(d) => global_norm_on::<CudaStorage>(d, xs),
        }
    }

    fn add_into(acc: &mut [&mut Self], xs: &[&Self]) -> Result<()> {
        match acc.first().map(|a| a.device()) {
            None => Ok(()),
            Some(Device::Cpu) => add_into_on::<CpuStorage>(Device::Cpu, acc, xs),
            Some(d) => add_into_on::<CudaStorage>(d, acc, xs),
        }
    }
}
