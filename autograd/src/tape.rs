//! The tape: an explicit record of the differentiable ops a computation ran, replayed in reverse
//! by `backward`.
//!
//! A tensor is *tracked* when it was `watch`ed (a leaf, e.g. a parameter) or computed by a
//! recorded op from a tracked input. Ops whose inputs are all untracked record nothing, so a tape
//! with nothing watched (inference, evaluation) costs nothing. Each node owns its backward
//! closure, and with it the tensors the closure saved; `backward` consumes the nodes newest
//! first, so each node's saved tensors are freed as soon as its gradient has been passed on.
//!
//! A node may have several outputs (a mixer's output and its final state): its backward gets
//! one gradient per output, zeros for an output no gradient reached.
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use swax_tensor::{DType, Error, Result, Shape, Tensor, TensorId};

/// Given the outputs' gradients and which inputs need one, the inputs' gradients (None where
/// not needed or not differentiable, e.g. integer ids).
pub type BackwardFn = Box<dyn FnOnce(&[Tensor], &[bool]) -> Result<Vec<Option<Tensor>>>>;

struct Node {
    name: &'static str,
    inputs: Vec<(TensorId, Shape)>,
    outputs: Vec<(TensorId, Shape, DType)>,
    backward: BackwardFn,
}

#[derive(Default)]
pub struct Tape {
    nodes: RefCell<Vec<Node>>,
    tracked: RefCell<HashSet<TensorId>>,
    leaves: RefCell<HashSet<TensorId>>,
}

/// Gradients of the watched tensors, by tensor.
#[derive(Debug, Default)]
pub struct Gradients(HashMap<TensorId, Tensor>);

impl Gradients {
    pub fn get(&self, t: &Tensor) -> Option<&Tensor> {
        self.0.get(&t.id())
    }

    pub fn remove(&mut self, t: &Tensor) -> Option<Tensor> {
        self.0.remove(&t.id())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Tape {
    pub fn new() -> Tape {
        Tape::default()
    }

    /// Marks `t` as a leaf whose gradient `backward` returns.
    pub fn watch(&self, t: &Tensor) {
        self.tracked.borrow_mut().insert(t.id());
        self.leaves.borrow_mut().insert(t.id());
    }

    pub fn is_tracked(&self, t: &Tensor) -> bool {
        self.tracked.borrow().contains(&t.id())
    }

    /// Number of recorded nodes.
    pub fn len(&self) -> usize {
        self.nodes.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.borrow().is_empty()
    }

    /// Records that `output` was computed from `inputs`, with `backward` to run in reverse.
    /// Returns `output`. Nothing is kept when no input is tracked.
    pub fn record(
        &self,
        name: &'static str,
        inputs: &[&Tensor],
        output: Tensor,
        backward: impl FnOnce(&Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + 'static,
    ) -> Tensor {
        let mut outputs = self.record_many(name, inputs, vec![output], move |dys, needs| {
            backward(&dys[0], needs)
        });
        outputs.pop().expect("one output")
    }

    /// `record` for a node with several outputs; `backward` gets one gradient per output.
    pub fn record_many(
        &self,
        name: &'static str,
        inputs: &[&Tensor],
        outputs: Vec<Tensor>,
        backward: impl FnOnce(&[Tensor], &[bool]) -> Result<Vec<Option<Tensor>>> + 'static,
    ) -> Vec<Tensor> {
        if !inputs.iter().any(|t| self.is_tracked(t)) {
            return outputs;
        }
        self.tracked
            .borrow_mut()
            .extend(outputs.iter().map(|y| y.id()));
        self.nodes.borrow_mut().push(Node {
            name,
            inputs: inputs.iter().map(|t| (t.id(), t.shape().clone())).collect(),
            outputs: outputs
                .iter()
                .map(|y| (y.id(), y.shape().clone(), y.dtype()))
                .collect(),
            backward: Box::new(backward),
        });
        outputs
    }

    /// Runs every recorded backward, newest first, from the scalar `loss`, and returns the
    /// gradients of the watched tensors. Consumes the recorded nodes.
    pub fn backward(&self, loss: &Tensor) -> Result<Gradients> {
        if loss.numel() != 1 {
            return Err(Error::Invalid {
                op: "backward",
                msg: format!("the loss must be a scalar, got shape {}", loss.shape()),
            });
        }
        self.backward_from(loss, &loss.ones_like()?)
    }

    /// `backward` from `output` of any shape, given its gradient `grad` (the gradients of
    /// `sum(output * grad)`, without computing that sum): what a benchmark needs to time a
    /// node's backward on a given output gradient and nothing else.
    pub fn backward_from(&self, output: &Tensor, grad: &Tensor) -> Result<Gradients> {
        if grad.shape() != output.shape() || grad.dtype() != output.dtype() {
            return Err(Error::Invalid {
                op: "backward",
                msg: format!(
                    "the gradient ({} {:?}) must match the output ({} {:?})",
                    grad.shape(),
                    grad.dtype(),
                    output.shape(),
                    output.dtype()
                ),
            });
        }
        if !self.is_tracked(output) {
            return Err(Error::Invalid {
                op: "backward",
                msg: "the loss does not depend on any watched tensor".into(),
            });
        }
        let nodes = std::mem::take(&mut *self.nodes.borrow_mut());
        let tracked = self.tracked.borrow();
        let leaves = self.leaves.borrow();
        let mut grads: HashMap<TensorId, Tensor> = HashMap::new();
        grads.insert(output.id(), grad.clone());
        for node in nodes.into_iter().rev() {
            let dys: Vec<Option<Tensor>> =
                node.outputs.iter().map(|y| grads.remove(&y.0)).collect();
            let Some(device) = dys.iter().flatten().next().map(|dy| dy.device()) else {
                continue;
            };
            let dys = dys
                .into_iter()
                .zip(&node.outputs)
                .map(|(dy, (_, shape, dtype))| match dy {
                    Some(dy) => Ok(dy),
                    None => Tensor::zeros(shape.clone(), *dtype, device),
                })
                .collect::<Result<Vec<_>>>()?;
            let needs: Vec<bool> = node
                .inputs
                .iter()
                .map(|(id, _)| tracked.contains(id))
                .collect();
            let input_grads = (node.backward)(&dys, &needs)?;
            for ((id, shape), g) in node.inputs.iter().zip(input_grads) {
                let Some(g) = g else { continue };
                if !tracked.contains(id) {
                    continue;
                }
                if g.shape() != shape {
                    return Err(Error::Invalid {
                        op: "backward",
                        msg: format!(
                            "{} returned a gradient of shape {} for an input of shape {}",
                            node.name,
                            g.shape(),
                            shape
                        ),
                    });
                }
                let sum = match grads.remove(id) {
                    Some(prev) => prev.add(&g)?,
                    None => g,
                };
                grads.insert(*id, sum);
            }
        }
        grads.retain(|id, _| leaves.contains(id));
        Ok(Gradients(grads))
    }
}
