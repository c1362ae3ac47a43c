//! Where a tensor's storage lives.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// A CUDA GPU, by ordinal.
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl Device {
    /// Waits for the work queued on the device (nothing to wait for on the CPU): for timing.
    pub fn synchronize(self) -> crate::Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(ordinal) => Ok(crate::cuda::device(ordinal)?.synchronize()?),
        }
    }
}
