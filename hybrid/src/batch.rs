//! Token ids as the model reads them: U32 tensors `[B, T]` on the device, for the trainer's
//! batches and for any other sequence (validation, evaluation).
use swax_data::Batch;
use swax_tensor::{Device, Result, Tensor};

/// Ids as a U32 tensor `[B, T]` on `device`.
pub fn ids(values: &[u32], b: usize, t: usize, device: Device) -> Result<Tensor> {
    Tensor::from_vec(values.to_vec(), vec![b, t], device)
}

/// A batch's inputs and targets, each `[B, T]` on `device`.
pub fn to_device(batch: &Batch, device: Device) -> Result<(Tensor, Tensor)> {
    Ok((
        ids(&batch.inputs, batch.b, batch.t, device)?,
        ids(&batch.targets, batch.b, batch.t, device)?,
    ))
}
