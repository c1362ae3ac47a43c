//! One tape node with several outputs (a mixer's output and its final state). A node has one
//! output tensor, so this records the flattened concatenation of all of them and hands each back
//! as a reshaped narrow of it: a gradient reaching any output reaches the node, and the node's
//! backward gets every output's gradient (zeros for the unused ones). With nothing tracked it
//! records and copies nothing.
use swax_autograd::Tape;
use swax_tensor::{Result, Tensor};

/// Records `backward` (given each output's gradient and which inputs need one) for `outputs`
/// computed from `inputs`; returns the outputs as the tape now knows them.
pub(crate) fn record_joined(
    tape: &Tape,
    name: &'static str,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    backward: impl FnOnce(&[Tensor], &[bool]) -> Result<Vec<Option<Tensor>>> + 'static,
) -> Result<Vec<Tensor>> {
    if !inputs.iter().any(|x| tape.is_tracked(x)) {
        return Ok(outputs.iter().map(|&x| x.clone()).collect());
    }
    let shapes: Vec<Vec<usize>> = outputs.iter().map(|x| x.dims().to_vec()).collect();
    let flat: Vec<Tensor> = outputs
        .iter()
        .map(|x| x.reshape(vec![x.numel()]))
        .collect::<Result<_>>()?;
    let joined = Tensor::concat(&flat.iter().collect::<Vec<_>>(), 0)?;
    let split_shapes = shapes.clone();
    let node = tape.record(name, inputs, joined, move |dy, needs| {
        let parts = split(&shapes, |start, len, shape| {
            dy.narrow(0, start, len)?.reshape(shape)
        })?;
        backward(&parts, needs)
    });
    split(&split_shapes, |start, len, shape| {
        tape.reshape(&tape.narrow(&node, 0, start, len)?, shape)
    })
}

/// Cuts a flat tensor into parts of `shapes`, `cut(start, len, shape)` making each.
fn split(
    shapes: &[Vec<usize>],
    cut: impl Fn(usize, usize, Vec<usize>) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    let mut start = 0;
    shapes
        .iter()
        .map(|shape| {
            let len = shape.iter().product();
            let part = cut(start, len, shape.clone());
            start += len;
            part
        })
        .collect()
}
