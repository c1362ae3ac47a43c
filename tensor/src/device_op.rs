//! `DeviceOp`: an op whose kernels live outside this crate, one per device (the fused sequence
//! mixers, each in its folder in swax-nn). `Backend` holds the primitive ops; an op of this kind
//! names its operands in a struct generic over what holds them (tensors where it is called, one
//! device's storage in that device's kernel), and `Tensor::apply` runs the kernel of the device
//! its operands live on. What such a kernel needs from this crate is the storage of each device
//! (`Storage::as_cpu`, `Storage::as_cuda`) and a tensor made from storage (`Tensor::from_storage`).
use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::{Device, Error, Result, Tensor};

pub trait DeviceOp {
    /// The op's name, for errors.
    const NAME: &'static str;
    /// The operands, named: a struct holding one `T` per operand.
    type In<T>;
    /// The results, as tensors.
    type Out;

    /// Each operand of `x` through `f`, into the same struct.
    fn map_in<'a, A: 'a, B>(
        x: &'a Self::In<A>,
        f: impl FnMut(&'a A) -> Result<B>,
    ) -> Result<Self::In<B>>;

    /// The CPU kernel.
    fn cpu(&self, _x: Self::In<&CpuStorage>) -> Result<Self::Out> {
        Err(Error::NoKernel {
            op: Self::NAME,
            device: Device::Cpu,
        })
    }

    /// The CUDA kernel, on the GPU `device` that holds every operand.
    fn cuda(&self, device: Device, _x: Self::In<&CudaStorage>) -> Result<Self::Out> {
        Err(Error::NoKernel {
            op: Self::NAME,
            device,
        })
    }
}

impl Tensor {
    /// Runs `op` on `x` with the kernel of the device every operand lives on (a
    /// `DeviceMismatch` when they are on several).
    pub fn apply<Op: DeviceOp>(op: &Op, x: &Op::In<&Tensor>) -> Result<Op::Out> {
        let mut device = None;
        Op::map_in(x, |t| match device {
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
            Some(Device::Cpu) => op.cpu(Op::map_in(x, cpu_of)?),
            Some(d @ Device::Cuda(_)) => op.cuda(d, Op::map_in(x, cuda_of)?),
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
