//! `Tensor`: an immutable, row-major, contiguous n-d array with a unique id. Cloning is cheap
//! (the storage is shared); every op returns a new tensor. The id is what the tape keys
//! gradients by, so even a reshape (which shares storage) gets a fresh one.
use crate::backend::Backend;
use crate::cpu::CpuStorage;
use crate::rng::Rng;
use crate::{DType, Device, Element, Error, Result, Shape, Storage};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

impl TensorId {
    fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TensorId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

#[derive(Clone)]
pub struct Tensor {
    id: TensorId,
    shape: Shape,
    storage: Arc<Storage>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({}, {:?}, {})",
            self.shape,
            self.dtype(),
            self.device()
        )
    }
}

impl Tensor {
    pub(crate) fn new(storage: Storage, shape: Shape) -> Tensor {
        debug_assert_eq!(storage.len(), shape.numel());
        Tensor {
            id: TensorId::fresh(),
            shape,
            storage: Arc::new(storage),
        }
    }

    /// The same storage seen with another shape of equal size (a reshape), under a new id.
    pub(crate) fn view(&self, shape: Shape) -> Tensor {
        Tensor {
            id: TensorId::fresh(),
            shape,
            storage: self.storage.clone(),
        }
    }

    /// A tensor of `shape` over `storage` (a kernel's result), which must hold its elements.
    pub fn from_storage(storage: impl Into<Storage>, shape: impl Into<Shape>) -> Result<Tensor> {
        let (storage, shape) = (storage.into(), shape.into());
        if storage.len() != shape.numel() {
            return Err(Error::LengthMismatch {
                op: "from_storage",
                len: storage.len(),
                shape,
            });
        }
        Ok(Tensor::new(storage, shape))
    }

    pub(crate) fn with_storage(&self, storage: Storage, shape: Shape) -> Tensor {
        Tensor::new(storage, shape)
    }

    pub fn id(&self) -> TensorId {
        self.id
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    pub fn device(&self) -> Device {
        self.storage.device()
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The storage, to write in place (the optimizer's ops); an error naming `op` when another
    /// tensor shares it (a clone or a view of this one is alive), whose values would change too.
    pub(crate) fn storage_mut(&mut self, op: &'static str) -> Result<&mut Storage> {
        let shape = self.shape.clone();
        Arc::get_mut(&mut self.storage).ok_or_else(|| Error::Invalid {
            op,
            msg: format!(
                "the buffer of a {shape} tensor is shared with another tensor (a clone or a view \
                 of it is alive), so it cannot be written in place"
            ),
        })
    }

    /// This tensor, or a copy of it where its buffer is shared: a tensor that in-place ops may
    /// write without changing any other.
    pub fn into_unique(mut self) -> Result<Tensor> {
        if Arc::get_mut(&mut self.storage).is_some() {
            return Ok(self);
        }
        let layout = crate::backend::StridedLayout {
            shape: self.dims().to_vec(),
            strides: self.shape.strides(),
            offset: 0,
        };
        Ok(self.with_storage(self.storage.copy_strided(&layout)?, self.shape.clone()))
    }

    fn on(device: Device, cpu: CpuStorage, shape: Shape) -> Result<Tensor> {
        Tensor::new(Storage::Cpu(cpu), shape).to_device(device)
    }

    pub fn from_vec<T: Element>(
        values: Vec<T>,
        shape: impl Into<Shape>,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        if values.len() != shape.numel() {
            return Err(Error::LengthMismatch {
                op: "from_vec",
                len: values.len(),
                shape,
            });
        }
        let any: Box<dyn std::any::Any> = Box::new(values);
        let cpu = match T::DTYPE {
            DType::F32 => CpuStorage::F32(*any.downcast().expect("T is f32")),
            DType::F64 => CpuStorage::F64(*any.downcast().expect("T is f64")),
            DType::BF16 => CpuStorage::BF16(*any.downcast().expect("T is bf16")),
            DType::U32 => CpuStorage::U32(*any.downcast().expect("T is u32")),
            DType::U8 => {
                return Err(Error::UnsupportedDType {
                    op: "from_vec",
                    dtype: DType::U8,
                })
            }
        };
        Tensor::on(device, cpu, shape)
    }

    /// Values given as f64, stored as `dtype` (rounded as that dtype rounds).
    pub fn from_f64s(
        values: &[f64],
        shape: impl Into<Shape>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        if values.len() != shape.numel() {
            return Err(Error::LengthMismatch {
                op: "from_f64s",
                len: values.len(),
                shape,
            });
        }
        Tensor::on(
            device,
            CpuStorage::from_f64_vec("from_f64s", values, dtype)?,
            shape,
        )
    }

    /// `value` everywhere. On a GPU the buffer is zeroed there (and `value` added), never built
    /// on the host and copied: for a large tensor (the loss's f32 accumulator of the output
    /// projection's gradient, a mixer's zero state) that copy costs far more than the kernels
    /// that use it, and the host waits for it.
    pub fn full(
        value: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        match device {
            Device::Cuda(ordinal) if dtype != DType::U32 => {
                let zeros = crate::cuda::CudaStorage::zeros_on(ordinal, dtype, shape.numel())?;
                let zeros = Tensor::new(Storage::Cuda(zeros), shape);
                match value == 0.0 {
                    true => Ok(zeros),
                    false => zeros.add_scalar(value),
                }
            }
            _ => Tensor::from_f64s(&vec![value; shape.numel()], shape, dtype, device),
        }
    }

    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(0.0, shape, dtype, device)
    }

    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(1.0, shape, dtype, device)
    }

    pub fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(value, Shape::scalar(), dtype, device)
    }

    pub fn zeros_like(&self) -> Result<Tensor> {
        Ok(self.with_storage(
            self.storage.zeros(self.numel(), self.dtype())?,
            self.shape.clone(),
        ))
    }

    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape.clone(), self.dtype(), self.device())
    }

    /// Normal(0, std) values from `seed`: the same on every run and machine.
    pub fn randn(
        shape: impl Into<Shape>,
        std: f64,
        seed: u64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let mut rng = Rng::new(seed);
        let v: Vec<f64> = (0..shape.numel()).map(|_| rng.normal() * std).collect();
        Tensor::from_f64s(&v, shape, dtype, device)
    }

    /// Uniform values in `[lo, hi)` from `seed`.
    pub fn rand_uniform(
        shape: impl Into<Shape>,
        lo: f64,
        hi: f64,
        seed: u64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        let mut rng = Rng::new(seed);
        let v: Vec<f64> = (0..shape.numel())
            .map(|_| lo + (hi - lo) * rng.uniform())
            .collect();
        Tensor::from_f64s(&v, shape, dtype, device)
    }

    fn cpu_values(&self) -> Result<std::borrow::Cow<'_, CpuStorage>> {
        match &*self.storage {
            Storage::Cpu(s) => Ok(std::borrow::Cow::Borrowed(s)),
            Storage::Cuda(s) => Ok(std::borrow::Cow::Owned(s.to_cpu()?)),
        }
    }

    /// The values, copied to the host, as `T`, which must be this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        let values = self.cpu_values()?;
        let any: &dyn std::any::Any = match values.as_ref() {
            CpuStorage::F32(v) => v,
            CpuStorage::F64(v) => v,
            CpuStorage::BF16(v) => v,
            CpuStorage::U32(v) => v,
        };
        Ok(any.downcast_ref::<Vec<T>>().expect("dtype checked").clone())
    }

    /// The values as f64, whatever the dtype (exact for every dtype we store).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.cpu_values()?.to_f64_vec())
    }

    /// The single value of a one-element tensor.
    pub fn to_scalar(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::Invalid {
                op: "to_scalar",
                msg: format!("shape {} has {} elements, not 1", self.shape, self.numel()),
            });
        }
        Ok(self.to_f64_vec()?[0])
    }

    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Ok(self.with_storage(self.storage.to_dtype(dtype)?, self.shape.clone()))
    }

    /// Moves the tensor to `device` (an explicit host/device transfer).
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        Ok(self.with_storage(self.storage.to_device(device)?, self.shape.clone()))
    }

    /// True when both tensors share one buffer (a reshape of the other, or a clone).
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }
}
