//! `Buffer`: a typed device allocation from a device's pool, returned to the pool on drop.

use crate::{CudaDevice, DType};

/// `len` elements of `dtype` in device memory. The memory belongs to the device's caching pool:
/// dropping the buffer files it for reuse by later work on the same stream (no driver call, no
/// wait). Contents are whatever the last kernel wrote; a fresh buffer is uninitialised.
pub struct Buffer {
    /// A plain u64, so a `&Buffer` can be handed to a kernel as a pointer argument (see
    /// `kernels::KernelArg`).
    ptr: u64,
    len: usize,
    dtype: DType,
    device: CudaDevice,
}

impl Buffer {
    pub(crate) fn from_parts(ptr: u64, len: usize, dtype: DType, device: CudaDevice) -> Buffer {
        Buffer {
            ptr,
            len,
            dtype,
            device,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn size_bytes(&self) -> usize {
        self.len * self.dtype.size_bytes()
    }

    /// The raw device address (`CUdeviceptr`); 0 for an empty buffer. Valid while `self` lives.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    pub(crate) fn ptr_field(&self) -> &u64 {
        &self.ptr
    }

    pub fn device(&self) -> &CudaDevice {
        &self.device
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.ptr != 0 {
            self.device.release(self.ptr);
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({} x {} at {:#x} on cuda:{})",
            self.len,
            self.dtype,
            self.ptr,
            self.device.ordinal()
        )
    }
}
