//! `Readback`: small tensors read to the host later, so that the host need not wait for the
//! device to read them (the trainer's loss and gradient norm, a step late). On the GPU the
//! copies are queued behind the work that produces the values and collected by waiting on an
//! event (swax-cuda's `Readback`); on the CPU the values are there at once and kept.
use crate::{Device, Error, Result, Storage, Tensor};

pub struct Readback {
    device: Device,
    on: On,
}

enum On {
    /// The values read by `start`, until `finish`.
    Cpu(Option<Vec<Vec<f64>>>),
    Cuda(swax_cuda::Readback),
}

impl Readback {
    /// Room for reads of up to `elements` f32 values at a time on `device`.
    pub fn new(device: Device, elements: usize) -> Result<Readback> {
        let on = match device {
            Device::Cpu => On::Cpu(None),
            Device::Cuda(ordinal) => {
                let dev = crate::cuda::device(ordinal)?;
                On::Cuda(swax_cuda::Readback::new(&dev, elements * 4)?)
            }
        };
        Ok(Readback { device, on })
    }

    /// Starts reading `tensors` (on this reader's device); one batch at a time.
    pub fn start(&mut self, tensors: &[&Tensor]) -> Result<()> {
        const OP: &str = "Readback::start";
        if let Some(t) = tensors.iter().find(|t| t.device() != self.device) {
            return Err(Error::DeviceMismatch {
                op: OP,
                lhs: self.device,
                rhs: t.device(),
            });
        }
        match &mut self.on {
            On::Cpu(Some(_)) => Err(Error::Invalid {
                op: OP,
                msg: "the last reads are not collected yet (call finish first)".into(),
            }),
            On::Cpu(read) => {
                let values = tensors.iter().map(|t| t.to_f64_vec());
                *read = Some(values.collect::<Result<_>>()?);
                Ok(())
            }
            On::Cuda(r) => {
                let bufs = tensors
                    .iter()
                    .map(|t| match t.storage() {
                        Storage::Cuda(s) => Ok(s.buffer()),
                        Storage::Cpu(_) => unreachable!("the device was checked above"),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(r.start(&bufs)?)
            }
        }
    }

    /// The values of the tensors the last `start` named, as f64, once they have reached the host.
    pub fn finish(&mut self) -> Result<Vec<Vec<f64>>> {
        match &mut self.on {
            On::Cpu(read) => read.take().ok_or_else(|| Error::Invalid {
                op: "Readback::finish",
                msg: "no reads were started".into(),
            }),
            On::Cuda(r) => Ok(r.finish()?),
        }
    }
}
