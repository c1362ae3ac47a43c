//! Parameters: a flat, named list of f32 master tensors that layers refer to by index, and the
//! per-step view of them a forward pass reads.
//!
//! Layers hold a [`ParamId`] rather than a tensor, and read the current value through a
//! [`Weights`] built for each step; the optimizer writes the values in place once the step's
//! `Weights` (and its tape, which hold clones of them) are gone. That view is where the precision policy lives: it watches every master tensor on the tape and,
//! when the compute dtype is bf16, casts it (`tape.to_dtype`, whose backward casts the gradient
//! back to f32), so gradients always arrive in f32 keyed by the master tensor.
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Result, Shape, Tensor};

/// A parameter's index in its [`Params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamId(usize);

#[derive(Clone, Debug)]
pub struct Param {
    /// Dotted path, e.g. `blocks.3.mixer.wqkv`: the name in checkpoints.
    pub name: String,
    pub value: Tensor,
    /// Whether AdamW decays it: matrices yes; norms, biases, gate constants (1-D) no.
    pub decay: bool,
}

/// Every parameter of a model, in creation order.
#[derive(Clone, Debug)]
pub struct Params {
    entries: Vec<Param>,
    device: Device,
    seed: u64,
}

/// How a new parameter starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with this standard deviation.
    Normal(f64),
    /// Every element this value.
    Const(f64),
    /// Explicit values (small constants such as per-head decay rates).
    Values(&'static [f64]),
}

impl Params {
    /// An empty set whose random initializations derive from `seed`, created on `device`.
    pub fn new(seed: u64, device: Device) -> Params {
        Params {
            entries: Vec::new(),
            device,
            seed,
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Adds an f32 parameter; matrices (rank >= 2) are weight-decayed, the rest not.
    pub fn add(&mut self, name: String, shape: impl Into<Shape>, init: Init) -> Result<ParamId> {
        let shape = shape.into();
        // One seed per parameter, from its position: the same config gives the same weights.
        let seed = self
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(self.entries.len() as u64 + 1);
        let value = match init {
            Init::Normal(std) => Tensor::randn(shape.clone(), std, seed, DType::F32, self.device)?,
            Init::Const(c) => Tensor::full(c, shape.clone(), DType::F32, self.device)?,
            Init::Values(v) => Tensor::from_f64s(v, shape.clone(), DType::F32, self.device)?,
        };
        self.push(name, value, shape.rank() >= 2)
    }

    /// Adds a parameter given its value (built by the caller).
    pub fn push(&mut self, name: String, value: Tensor, decay: bool) -> Result<ParamId> {
        let value = value.to_dtype(DType::F32)?.to_device(self.device)?;
        self.entries.push(Param { name, value, decay });
        Ok(ParamId(self.entries.len() - 1))
    }

    /// Overrides the rank rule (a convolution's `[C, K]` taps are not decayed).
    pub fn set_decay(&mut self, id: ParamId, decay: bool) {
        self.entries[id.0].decay = decay;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.entries.iter()
    }

    pub fn get(&self, id: ParamId) -> &Tensor {
        &self.entries[id.0].value
    }

    /// Each value to write in place (the optimizer), with whether it decays.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&mut Tensor, bool)> {
        self.entries.iter_mut().map(|p| (&mut p.value, p.decay))
    }

    /// Replaces the value at position `index` (an optimizer step, a loaded checkpoint).
    pub fn set(&mut self, index: usize, value: Tensor) {
        self.entries[index].value = value;
    }

    /// Total number of scalars.
    pub fn numel(&self) -> usize {
        self.entries.iter().map(|p| p.value.numel()).sum()
    }
}

/// The parameters as one forward pass sees them: watched on a tape (when training) and cast to
/// the compute dtype.
pub struct Weights<'a> {
    tape: Recorder<'a>,
    values: Vec<Tensor>,
    pub dtype: DType,
}

/// The tape a forward pass's ops go through: the caller's when training (its `backward` follows),
/// else one of the weights' own with nothing watched, which records nothing.
enum Recorder<'a> {
    Training(&'a Tape),
    Inference(Tape),
}

impl<'a> Weights<'a> {
    /// Watches every parameter on `tape` and casts it to `dtype`.
    pub fn training(tape: &'a Tape, params: &Params, dtype: DType) -> Result<Weights<'a>> {
        for p in params.iter() {
            tape.watch(&p.value);
        }
        Weights::cast(Recorder::Training(tape), params, dtype)
    }

    /// The parameters cast to `dtype`, nothing watched and no tape needed: the forward pass
    /// records nothing (evaluation, generation).
    pub fn inference(params: &Params, dtype: DType) -> Result<Weights<'static>> {
        Weights::cast(Recorder::Inference(Tape::new()), params, dtype)
    }

    fn cast(tape: Recorder<'a>, params: &Params, dtype: DType) -> Result<Weights<'a>> {
        let mut w = Weights {
            tape,
            values: Vec::new(),
            dtype,
        };
        w.values = params
            .iter()
            .map(|p| match p.value.dtype() == dtype {
                true => Ok(p.value.clone()),
                false => w.tape().to_dtype(&p.value, dtype),
            })
            .collect::<Result<_>>()?;
        Ok(w)
    }

    /// `values` (those of [`Weights::values`]) seen through `tape`, which does not watch them:
    /// how a block recomputed in the backward runs again (see `Block::forward_recomputed`).
    pub fn bound(tape: &'a Tape, values: Vec<Tensor>, dtype: DType) -> Weights<'a> {
        Weights {
            tape: Recorder::Training(tape),
            values,
            dtype,
        }
    }

    pub fn get(&self, id: ParamId) -> &Tensor {
        &self.values[id.0]
    }

    /// Every parameter as the forward pass reads it, in creation order.
    pub fn values(&self) -> &[Tensor] {
        &self.values
    }

    /// The tape the forward pass's ops go through.
    pub fn tape(&self) -> &Tape {
        match &self.tape {
            Recorder::Training(tape) => tape,
            Recorder::Inference(tape) => tape,
        }
    }
}
