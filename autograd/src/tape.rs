//! The tape: an explicit record of the differentiable ops a computation ran, replayed in reverse
//! by `backward`.
//!
//! A tensor is *tracked* when it was `watch`ed (a leaf, e.g. a parameter) or computed by a
//! recorded op from a tracked input. Ops whose inputs are all untracked record nothing, so a tape
//! with nothing watched (inference, evaluation) costs nothing. Each node owns its backward
//! closure, and with it the tensors the closure saved; `backward` consumes the nodes newest
//! first (a node fed only by watched tensors as soon as its outputs' gradients are final), so
//! each node's saved tensors are freed as soon as its gradient has been passed on.
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
        self.backward_with(output, grad, &mut |_, _| Ok(()))
    }

    /// `backward_from`, calling `on_final(leaf, gradient)` as soon as a watched tensor's
    /// gradient is final (its last consumer has run), while the rest of the backward is still
    /// to run: what a data-parallel trainer needs to send gradients as they come. A node whose
    /// inputs are all watched or untracked (a parameter's cast) runs as soon as its output's
    /// gradient is final rather than in its place in the recorded order, so a parameter cast at
    /// the start of the forward is final where it was used, not at the end of the backward.
    pub fn backward_with(
        &self,
        output: &Tensor,
        grad: &Tensor,
        on_final: &mut dyn FnMut(TensorId, &Tensor) -> Result<()>,
    ) -> Result<Gradients> {
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
        let mut nodes: Vec<Option<Node>> = std::mem::take(&mut *self.nodes.borrow_mut())
            .into_iter()
            .map(Some)
            .collect();
        let tracked = self.tracked.borrow();
        let leaves = self.leaves.borrow();
        // Per tracked tensor, the nodes still to run that read it; per output, its node.
        let mut readers: HashMap<TensorId, usize> = HashMap::new();
        let mut producer: HashMap<TensorId, usize> = HashMap::new();
        for (i, node) in nodes.iter().flatten().enumerate() {
            producer.extend(node.outputs.iter().map(|y| (y.0, i)));
            for id in distinct_inputs(node) {
                *readers.entry(id).or_default() += 1;
            }
        }
        let leaf_fed = |node: &Node| {
            node.inputs
                .iter()
                .all(|(id, _)| !tracked.contains(id) || leaves.contains(id))
        };
        let finished = |node: &Node, readers: &HashMap<TensorId, usize>| {
            node.outputs
                .iter()
                .all(|y| readers.get(&y.0).is_none_or(|&n| n == 0))
        };
        let mut grads: HashMap<TensorId, Tensor> = HashMap::new();
        grads.insert(output.id(), grad.clone());
        for newest in (0..nodes.len()).rev() {
            let mut ready = vec![newest];
            while let Some(i) = ready.pop() {
                let Some(node) = nodes[i].take() else {
                    continue;
                };
                let read = distinct_inputs(&node);
                let dys: Vec<Option<Tensor>> =
                    node.outputs.iter().map(|y| grads.remove(&y.0)).collect();
                if let Some(device) = dys.iter().flatten().next().map(|dy| dy.device()) {
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
                for id in read {
                    let left = readers.get_mut(&id).expect("counted above");
                    *left -= 1;
                    if *left > 0 {
                        continue;
                    }
                    if leaves.contains(&id) {
                        if let Some(g) = grads.get(&id) {
                            on_final(id, g)?;
                        }
                    } else if let Some(&p) = producer.get(&id) {
                        let early = nodes[p]
                            .as_ref()
                            .is_some_and(|n| leaf_fed(n) && finished(n, &readers));
                        if early {
                            ready.push(p);
                        }
                    }
                }
            }
        }
        grads.retain(|id, _| leaves.contains(id));
        Ok(Gradients(grads))
    }
}

/// The tracked tensors `node` reads, each once (`x * x` reads `x` once).
fn distinct_inputs(node: &Node) -> HashSet<TensorId> {
    node.inputs.iter().map(|(id, _)| *id).collect()
}
