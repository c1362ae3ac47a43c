//! `DeviceOp`: an op whose kernels live outside this crate, one per device (the fused sequence
//! mixers, each in its folder in swax-nn, and xLSTM's gated head norm, beside its layer there).
//! `Backend` holds the primitive ops; an op of this kind names its operands in a struct generic
//! over what holds them (tensors where it is called, one device's storage in that device's
//! kernel: [`Operands`], written by [`operands!`]), and
//! `Tensor::apply` runs the kernel of the device its operands live on. What such a kernel needs
//! from this crate is the storage of each device (`Storage::as_cpu`, `Storage::as_cuda`) and a
//! tensor made from storage (`Tensor::from_storage`).
use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::{Device, Error, Result, Tensor};

pub trait DeviceOp {
    /// The op's name, for errors.
    const NAME: &'static str;
    /// The struct that names the operands, at any holder: `SwaIn` for `SwaIn<T>`.
    type In: Operands;
    /// The results, as tensors.
    type Out;

    /// The CPU kernel.
    fn cpu(&self, x: <Self::In as Operands>::Of<&CpuStorage>) -> Result<Self::Out>;

    /// The CUDA kernel, on the GPU that holds every operand.
    fn cuda(&self, x: <Self::In as Operands>::Of<&CudaStorage>) -> Result<Self::Out>;
}

/// A struct of operands generic over what holds them, `Of<T>`: each operand can be sent
/// through a function, into the same struct holding what it returns.
pub trait Operands {
    type Of<T>;

    /// Each operand of `x` through `f`, into the same struct.
    fn try_map<'a, A: 'a, B>(
        x: &'a Self::Of<A>,
        f: impl FnMut(&'a A) -> Result<B>,
    ) -> Result<Self::Of<B>>;
}

/// Writes, for a struct of operands `Name<T>`, its `try_map` (each operand through `f`, in the
/// order the fields are listed) and its [`Operands`]. A field is an operand (`q`), a struct of
/// operands with a `try_map` of its own (`input: nested`), or an optional one
/// (`features: optional`):
///
/// ```ignore
/// operands!(SwaBackward { input: nested, out: nested, dout });
/// ```
#[macro_export]
macro_rules! operands {
    ($name:ident { $($field:ident $(: $kind:ident)?),* $(,)? }) => {
        impl<T> $name<T> {
            /// Each operand through `f`, into the same struct.
            pub fn try_map<'a, U>(
                &'a self,
                mut f: impl FnMut(&'a T) -> $crate::Result<U>,
            ) -> $crate::Result<$name<U>> {
                Ok($name {
                    $($field: $crate::operands!(@field f, self.$field $(, $kind)?),)*
                })
            }
        }

        impl<X> $crate::device_op::Operands for $name<X> {
            type Of<T> = $name<T>;

            fn try_map<'a, A: 'a, B>(
                x: &'a $name<A>,
                f: impl FnMut(&'a A) -> $crate::Result<B>,
            ) -> $crate::Result<$name<B>> {
                x.try_map(f)
            }
        }
    };
    (@field $f:ident, $e:expr) => {
        $f(&$e)?
    };
    (@field $f:ident, $e:expr, nested) => {
        $e.try_map(&mut $f)?
    };
    (@field $f:ident, $e:expr, optional) => {
        match &$e {
            Some(x) => Some(x.try_map(&mut $f)?),
            None => None,
        }
    };
}

impl Tensor {
    /// Runs `op` on `x` with the kernel of the device every operand lives on (a
    /// `DeviceMismatch` when they are on several).
    pub fn apply<Op: DeviceOp>(op: &Op, x: &<Op::In as Operands>::Of<&Tensor>) -> Result<Op::Out> {
        let mut device = None;
        Op::In::try_map(x, |t| match device {
            Some(d) if d != t.device() => Err(Error::DeviceMismatch {
                op: Op::NAME,
                lhs: d,
                rhs: t.device(),
            }),
            _ => {
                device = Some(t.device());
                Ok(())
            }
        })?;
        match device {
            Some(Device::Cpu) => op.cpu(Op::In::try_map(x, cpu_of)?),
            Some(Device::Cuda(_)) => op.cuda(Op::In::try_map(x, cuda_of)?),
            None => Err(Error::Invalid {
                op: Op::NAME,
                msg: "no operands".into(),
            }),
        }
    }
}

fn cpu_of<'t>(t: &&'t Tensor) -> Result<&'t CpuStorage> {
    let t: &'t Tensor = t;
    Ok(t.storage()
        .as_cpu()
        .expect("every operand checked on the CPU"))
}

fn cuda_of<'t>(t: &&'t Tensor) -> Result<&'t CudaStorage> {
    let t: &'t Tensor = t;
    Ok(t.storage()
        .as_cuda()
        .expect("every operand checked on one GPU"))
}
