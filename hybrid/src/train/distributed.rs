//! Data-parallel training: N ranks, each with a whole copy of the model, split a step's
//! micro-batches and sum their gradients, so every rank takes the same optimizer step.
//!
//! What makes a run's result independent of N: the global batch is `data.batch_size` x
//! `train.grad_accum` sequences; with N ranks (N dividing `grad_accum`) each runs
//! `grad_accum / N` micro-batches of `data.batch_size`, rank r the global micro-batches r, r + N,
//! ... (the loaders deal rows in rank order: `swax_data::Loader`), each loss scaled by
//! 1/grad_accum as on one rank, and the gradients are summed over the ranks: the sum of the same
//! micro-batches' gradients, in another order of additions. The window is a function of the step;
//! the loaders' states after a step are the same on every rank and at every N, so a checkpoint
//! resumes at any N that divides `grad_accum`.
//!
//! The gradients go out in buckets (about [`BUCKET_BYTES`], parameters in reverse order of
//! creation, the order the backward finishes them) as the backward produces them
//! (`Tape::backward_with`), on the last micro-batch of the step; buckets are started in the
//! same order on every rank whatever the order they fill in, as NCCL requires. They are summed
//! in f32, or in bf16 (`train.reduce_dtype`), which halves the bytes sent. One rank has nothing
//! to send: its backward is the tape's own, whose gradients [`StepGrads::add`] sums.
//!
//! The ranks talk through a [`Collective`]: [`Solo`] (one rank, nothing to talk to), [`Local`]
//! (ranks as threads of one process, for the tests on the CPU) and `nccl::NcclGroup` (one process
//! per GPU). A rank that fails tells the others ([`Collective::fail`]); they stop with an error
//! naming it.
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use swax_autograd::{Gradients, Tape};
use swax_nn::Params;
use swax_tensor::{DType, Tensor, TensorId};

use super::Result;

/// Gradient bytes per bucket: PyTorch DDP's default bucket size, not tuned here.
pub const BUCKET_BYTES: usize = 25 << 20;

/// How the ranks of one run talk. Every rank makes the same calls in the same order.
pub trait Collective {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;
    /// Starts summing `bucket` over the ranks (the same shapes and dtypes on every rank); the
    /// sums come from [`Collective::finish_sums`].
    fn start_sum(&mut self, bucket: Vec<Tensor>) -> Result<()>;
    /// The sums of the buckets started since the last call, in the order they were started.
    fn finish_sums(&mut self) -> Result<Vec<Vec<Tensor>>>;
    /// Rank 0's `tensors` on every rank (the others' give the shapes).
    fn broadcast(&mut self, tensors: Vec<Tensor>) -> Result<Vec<Tensor>>;
    /// The sums over the ranks of a few host values. Every rank waits for all the others: the
    /// step's barrier, where a failed rank is noticed.
    fn sum_host(&mut self, values: &[f64]) -> Result<Vec<f64>>;
    /// Tells the other ranks that this one stopped on `why`, so that they stop too.
    fn fail(&mut self, why: &str);
    /// Seconds the summing of gradients ran past the backward (not hidden by it), over the run
    /// so far; measured where the device can time it.
    fn exposed_s(&self) -> Option<f64> {
        None
    }
}

/// Micro-batches per rank: `grad_accum / world`, or an error naming the world sizes that fit.
pub fn micro_batches(grad_accum: usize, world: usize) -> Result<usize> {
    match world > 0 && grad_accum.is_multiple_of(world) {
        true => Ok(grad_accum / world),
        false => {
            let fit: Vec<String> = (1..=grad_accum)
                .filter(|&n| grad_accum.is_multiple_of(n))
                .map(|n| n.to_string())
                .collect();
            Err(format!(
                "{world} ranks cannot share train.grad_accum = {grad_accum} micro-batches: the \
                 global batch (data.batch_size x train.grad_accum) is the same at every world \
                 size, so the ranks must divide grad_accum ({} here); raise train.grad_accum \
                 (and lower data.batch_size to keep the global batch)",
                fit.join(", ")
            )
            .into())
        }
    }
}

/// Makes every rank's parameters rank 0's.
pub fn share_params(group: &mut dyn Collective, params: &mut Params) -> Result<()> {
    if group.world() == 1 {
        return Ok(());
    }
    let values: Vec<Tensor> = params.iter().map(|p| p.value.clone()).collect();
    for (i, v) in group.broadcast(values)?.into_iter().enumerate() {
        // AdamW writes the parameters in place: ranks in one process must not share a buffer
        // (the in-process broadcast hands out rank 0's tensors themselves).
        params.set(i, v.into_unique()?);
    }
    Ok(())
}

/// The one rank there is.
#[derive(Debug, Default)]
pub struct Solo {
    sums: Vec<Vec<Tensor>>,
}

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn start_sum(&mut self, bucket: Vec<Tensor>) -> Result<()> {
        self.sums.push(bucket);
        Ok(())
    }
    fn finish_sums(&mut self) -> Result<Vec<Vec<Tensor>>> {
        Ok(std::mem::take(&mut self.sums))
    }
    fn broadcast(&mut self, tensors: Vec<Tensor>) -> Result<Vec<Tensor>> {
        Ok(tensors)
    }
    fn sum_host(&mut self, values: &[f64]) -> Result<Vec<f64>> {
        Ok(values.to_vec())
    }
    fn fail(&mut self, _why: &str) {}
}

/// Which parameters go out together, planned once from the parameters' sizes.
pub struct Buckets {
    members: Vec<Vec<usize>>,
    of: Vec<usize>,
    dtype: DType,
}

impl Buckets {
    /// Parameters in reverse order of creation, cut at `BUCKET_BYTES` of f32; summed in
    /// `dtype` (f32 or bf16).
    pub fn plan(params: &Params, dtype: DType) -> Buckets {
        let mut members: Vec<Vec<usize>> = vec![Vec::new()];
        let mut bytes = 0;
        let sizes: Vec<usize> = params.iter().map(|p| p.value.numel() * 4).collect();
        for (i, &size) in sizes.iter().enumerate().rev() {
            if bytes > 0 && bytes + size > BUCKET_BYTES {
                members.push(Vec::new());
                bytes = 0;
            }
            members.last_mut().expect("one at least").push(i);
            bytes += size;
        }
        let mut of = vec![0; params.len()];
        for (b, m) in members.iter().enumerate() {
            for &i in m {
                of[i] = b;
            }
        }
        Buckets { members, of, dtype }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// One step's gradients: summed over this rank's micro-batches, then over the ranks.
pub struct StepGrads<'a> {
    plan: &'a Buckets,
    index: HashMap<TensorId, usize>,
    sums: Vec<Option<Tensor>>,
    filled: Vec<usize>,
    /// Buckets started, all before this one.
    started: usize,
}

impl<'a> StepGrads<'a> {
    pub fn new(plan: &'a Buckets, params: &Params) -> StepGrads<'a> {
        StepGrads {
            plan,
            index: params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.value.id(), i))
                .collect(),
            sums: vec![None; params.len()],
            filled: vec![0; plan.len()],
            started: 0,
        }
    }

    /// Adds one micro-batch's gradients in, from the tape's backward on one rank.
    pub fn add(&mut self, params: &Params, mut grads: Gradients) -> Result<()> {
        for (i, p) in params.iter().enumerate() {
            if let Some(g) = grads.remove(&p.value) {
                self.accumulate(i, g)?;
            }
        }
        Ok(())
    }

    /// Runs the backward of one micro-batch's (scaled) loss and adds its gradients in; on the
    /// step's `last` micro-batch, each bucket is sent to be summed over the ranks as soon as its
    /// gradients are final.
    pub fn backward_sending(
        &mut self,
        tape: &Tape,
        loss: &Tensor,
        last: bool,
        group: &mut dyn Collective,
    ) -> Result<()> {
        let grad = loss.ones_like()?;
        // A collective's error stops the backward; it is returned as it is, not as a tensor error.
        let mut stopped = None;
        let ran = tape.backward_with(loss, &grad, &mut |id, g| {
            let Some(&i) = self.index.get(&id) else {
                return Ok(());
            };
            self.accumulate(i, g.clone())?;
            if last {
                self.filled[self.plan.of[i]] += 1;
                if let Err(e) = self.start_ready(group) {
                    let msg = e.to_string();
                    stopped = Some(e);
                    return Err(swax_tensor::Error::Invalid {
                        op: "backward",
                        msg,
                    });
                }
            }
            Ok(())
        });
        match (stopped, ran) {
            (Some(e), _) => Err(e),
            (None, ran) => Ok(ran.map(drop)?),
        }
    }

    /// Adds `g` into parameter `i`'s sum, in place: the sum is this step's own buffer (copied
    /// once if still shared).
    fn accumulate(&mut self, i: usize, g: Tensor) -> swax_tensor::Result<()> {
        self.sums[i] = Some(match self.sums[i].take() {
            Some(sum) => {
                let mut sum = sum.into_unique()?;
                Tensor::add_in_place(&mut [&mut sum], &[&g])?;
                sum
            }
            None => g,
        });
        Ok(())
    }

    /// Starts, in order, every bucket whose gradients are all final.
    fn start_ready(&mut self, group: &mut dyn Collective) -> Result<()> {
        while self.started < self.plan.len()
            && self.filled[self.started] == self.plan.members[self.started].len()
        {
            let world = group.world();
            let bucket = self.plan.members[self.started]
                .iter()
                .map(|&i| {
                    let g = self.sums[i].as_ref().expect("filled");
                    match world > 1 && g.dtype() != self.plan.dtype {
                        true => g.to_dtype(self.plan.dtype),
                        false => Ok(g.clone()),
                    }
                })
                .collect::<swax_tensor::Result<Vec<_>>>()?;
            group.start_sum(bucket)?;
            self.started += 1;
        }
        Ok(())
    }

    /// The step's gradients summed over the ranks, in f32, by parameter (zeros for a parameter
    /// the loss does not reach).
    pub fn finish(mut self, params: &Params, group: &mut dyn Collective) -> Result<Vec<Tensor>> {
        for (i, p) in params.iter().enumerate() {
            if self.sums[i].is_none() {
                self.sums[i] = Some(p.value.zeros_like()?);
            }
        }
        self.filled = self.plan.members.iter().map(|m| m.len()).collect();
        self.start_ready(group)?;
        let mut out: Vec<Option<Tensor>> = vec![None; params.len()];
        for (members, sums) in self.plan.members.iter().zip(group.finish_sums()?) {
            for (&i, s) in members.iter().zip(sums) {
                out[i] = Some(match s.dtype() {
                    DType::F32 => s,
                    _ => s.to_dtype(DType::F32)?,
                });
            }
        }
        Ok(out
            .into_iter()
            .map(|g| g.expect("every bucket summed"))
            .collect())
    }
}

/// Ranks as threads of one process, exchanging tensors through shared memory: the trainer's
/// data-parallel path on the CPU, for tests. Sums add the ranks' tensors in rank order, so
/// every rank gets the same bits.
pub struct Local {
    rank: usize,
    world: usize,
    board: Arc<Board>,
    round: u64,
    sums: Vec<Vec<Tensor>>,
}

#[derive(Default)]
struct Board {
    rounds: Mutex<Rounds>,
    turn: Condvar,
}

#[derive(Default)]
struct Rounds {
    open: HashMap<u64, Round>,
    /// The first rank that failed, and why.
    failed: Option<(usize, String)>,
}

struct Round {
    given: Vec<Option<Payload>>,
    taken: usize,
}

#[derive(Clone)]
enum Payload {
    Tensors(Vec<Tensor>),
    Values(Vec<f64>),
}

impl Local {
    /// The `world` ranks of one group, to be moved each to its thread.
    pub fn group(world: usize) -> Vec<Local> {
        let board = Arc::new(Board::default());
        (0..world)
            .map(|rank| Local {
                rank,
                world,
                board: board.clone(),
                round: 0,
                sums: Vec::new(),
            })
            .collect()
    }

    /// Gives `mine` to this round and returns every rank's, in rank order, once all are in.
    fn exchange(&mut self, mine: Payload) -> Result<Vec<Payload>> {
        let world = self.world;
        let mut rounds = self.board.rounds.lock().unwrap_or_else(|e| e.into_inner());
        let id = self.round;
        self.round += 1;
        rounds
            .open
            .entry(id)
            .or_insert_with(|| Round {
                given: vec![None; world],
                taken: 0,
            })
            .given[self.rank] = Some(mine);
        self.board.turn.notify_all();
        loop {
            let round = rounds.open.get_mut(&id).expect("open until all took it");
            if round.given.iter().all(Option::is_some) {
                let all = round.given.iter().flatten().cloned().collect();
                round.taken += 1;
                if round.taken == world {
                    rounds.open.remove(&id);
                }
                return Ok(all);
            }
            if let Some((rank, why)) = &rounds.failed {
                return Err(format!("rank {rank} stopped: {why}").into());
            }
            rounds = self
                .board
                .turn
                .wait(rounds)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Collective for Local {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn start_sum(&mut self, bucket: Vec<Tensor>) -> Result<()> {
        let all = self.exchange(Payload::Tensors(bucket))?;
        let mut sums: Option<Vec<Tensor>> = None;
        for p in all {
            let Payload::Tensors(ts) = p else {
                return Err("the ranks' collectives are out of step".into());
            };
            sums = Some(match sums {
                None => ts,
                Some(acc) => acc
                    .iter()
                    .zip(&ts)
                    .map(|(a, t)| a.add(t))
                    .collect::<swax_tensor::Result<_>>()?,
            });
        }
        self.sums.push(sums.expect("world >= 1"));
        Ok(())
    }
    fn finish_sums(&mut self) -> Result<Vec<Vec<Tensor>>> {
        Ok(std::mem::take(&mut self.sums))
    }
    fn broadcast(&mut self, tensors: Vec<Tensor>) -> Result<Vec<Tensor>> {
        match self.exchange(Payload::Tensors(tensors))?.swap_remove(0) {
            Payload::Tensors(ts) => Ok(ts),
            Payload::Values(_) => Err("the ranks' collectives are out of step".into()),
        }
    }
    fn sum_host(&mut self, values: &[f64]) -> Result<Vec<f64>> {
        let mut sums = vec![0.0; values.len()];
        for p in self.exchange(Payload::Values(values.to_vec()))? {
            let Payload::Values(v) = p else {
                return Err("the ranks' collectives are out of step".into());
            };
            sums.iter_mut().zip(v).for_each(|(s, v)| *s += v);
        }
        Ok(sums)
    }
    fn fail(&mut self, why: &str) {
        let mut rounds = self.board.rounds.lock().unwrap_or_else(|e| e.into_inner());
        rounds.failed.get_or_insert((self.rank, why.to_string()));
        self.board.turn.notify_all();
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.fail("its thread panicked");
        }
    }
}
