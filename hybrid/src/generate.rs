//! Generation: a prompt read in pieces, then one token at a time, each layer carrying its
//! decoding state from step to step (`swax_nn::layers::pieces`: the window's keys and values
//! for attention, all of them for full attention, the recurrent state and the short
//! convolution's last inputs for the mLSTM and the gated delta rule, the window and the linear
//! branch's state for RAttention). Memory stays bounded by the window and the states, whatever
//! the length, except for full attention.
//!
//! Sampling: greedy at temperature 0, else softmax at the temperature, cut to the `top_k` most
//! likely tokens and to the smallest set whose probability reaches `top_p`; each sequence of a
//! batch draws from its own stream of the seed, so a seed gives the same text every time.
//! Both run on the device that holds the logits (`Tensor::argmax` over each row's vocabulary,
//! and `swax_nn::sampling`'s draw from one random u32 a row), so a step reads back B token ids
//! instead of B × V logits.
//!
//! Profile: [`generate_profiled`] counts what each decoding step asked of the device
//! (`DecodeProfile`: swax-cuda's launches, cuBLAS calls, host syncs and uploads, the backend
//! calls either device makes, the bytes read back), for `swax generate --profile`.
//!
//! Output: [`Utf8Stream`] turns the bytes of the tokens, as they come, into text a terminal
//! shows, whatever the model emits.
use std::time::Instant;

use swax_data::Rng;
use swax_nn::layers::pieces::Decode;
use swax_nn::sampling::{self, Cuts};
use swax_nn::Weights;
use swax_tensor::counters::{self, Counts};
use swax_tensor::{calls, DType, Device, Result, Tensor};

use crate::model::{Model, SequenceState};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0: greedy.
    pub temperature: f64,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1: all).
    pub top_p: f64,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        seed: 0,
    };

    /// The ranges a user can give, each error naming its option.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!(
                "--temperature {}: must be finite and >= 0 (0: greedy)",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("--top-p {}: must be in (0, 1]", self.top_p));
        }
        Ok(())
    }

    /// Whether the next token is the most likely one: temperature 0 or top-k 1.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }

    /// The cuts of a draw (`swax_nn::sampling`), for a temperature above 0.
    fn cuts(&self) -> Cuts {
        Cuts {
            temperature: self.temperature as f32,
            top_k: self.top_k,
            top_p: self.top_p as f32,
        }
    }

    /// The next token from one row of logits, on the host (the draw the device makes).
    pub fn pick(&self, logits: &[f32], rng: &mut Rng) -> u32 {
        let greedy = || {
            logits
                .iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &x)| match x > best.1 {
                    true => (i, x),
                    false => best,
                })
                .0 as u32
        };
        if self.is_greedy() {
            return greedy();
        }
        sampling::pick_row(logits, draw(rng), &self.cuts())
    }
}

/// A row's random u32 for a draw: the high half of its stream's next value.
fn draw(rng: &mut Rng) -> u32 {
    (rng.next_u64() >> 32) as u32
}

/// A model reading sequences of a batch in step, carrying every layer's state.
pub struct Decoder<'a> {
    model: &'a Model,
    weights: Weights<'a>,
    window: usize,
    device: Device,
    state: SequenceState,
    batch: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder of `batch` sequences at attention window `window`, computing in `dtype`.
    pub fn new(
        model: &'a Model,
        window: usize,
        dtype: DType,
        device: Device,
        batch: usize,
    ) -> Result<Decoder<'a>> {
        Ok(Decoder {
            model,
            weights: Weights::inference(&model.params, dtype)?,
            window,
            device,
            state: SequenceState::default(),
            batch,
        })
    }

    /// How the layers read a token after the prompt: `Decode::Steps` (the default) by the
    /// single-step kernels, `Decode::Recompute` as a piece of one token. Set before the first
    /// read.
    pub fn with_decode(mut self, decode: Decode) -> Decoder<'a> {
        self.state.decode = decode;
        self
    }

    /// Tokens read so far.
    pub fn position(&self) -> usize {
        self.state.pos
    }

    /// The layers' decoding state (what stays in memory between steps).
    pub fn state(&self) -> &SequenceState {
        &self.state
    }

    /// Reads `tokens` (row-major `[batch, n]`) and returns the logits after the last of each
    /// row, `[batch, V]` in f32.
    pub fn read(&mut self, tokens: &[u32]) -> Result<Tensor> {
        self.logits(tokens)?.to_dtype(DType::F32)
    }

    /// [`Decoder::read`] with the logits in the compute dtype: a decoding step picks from them
    /// on the device (the argmax, or the sampled draw, each reading bf16 as it is), so the cast
    /// to f32 would only add a launch.
    pub fn logits(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let n = tokens.len() / self.batch.max(1);
        let ids = Tensor::from_vec(tokens.to_vec(), vec![self.batch, n], self.device)?;
        let hidden = self
            .model
            .hidden_piece(&self.weights, &ids, self.window, &mut self.state)?;
        let logits = self
            .model
            .project(&self.weights, &hidden.narrow(1, n - 1, 1)?)?;
        let v = logits.dims()[2];
        logits.reshape(vec![self.batch, v])
    }

    /// Reads a prompt shared by every row, `piece` tokens at a time (0: at once), and returns
    /// the logits after its last token.
    pub fn prefill(&mut self, prompt: &[u32], piece: usize) -> Result<Tensor> {
        if prompt.is_empty() {
            return Err(swax_tensor::Error::Invalid {
                op: "Decoder::prefill",
                msg: "the prompt is empty: give at least one token".into(),
            });
        }
        let step = match piece {
            0 => prompt.len(),
            p => p,
        };
        let mut last = None;
        for part in prompt.chunks(step) {
            let rows: Vec<u32> = (0..self.batch).flat_map(|_| part.iter().copied()).collect();
            last = Some(self.read(&rows)?);
        }
        Ok(last.expect("a non-empty prompt has a piece"))
    }
}

/// What [`generate`] was asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Sequences generated from the one prompt.
    pub batch: usize,
    /// The attention window (the model's `w_long` by default).
    pub window: usize,
    /// Prompt tokens read per forward pass (0: all at once).
    pub piece: usize,
    /// Generation of a row stops after this token (the tokenizer's end of text).
    pub stop: Option<u32>,
}

/// What the decoding steps after the prompt asked of the device, summed over `steps`; a step is
/// reading one token per row and picking the next from its logits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecodeProfile {
    pub steps: u64,
    /// swax-cuda's launches, cuBLAS calls, host syncs and uploads: all zero on the CPU, which
    /// runs no kernels of swax-cuda. Process-wide counts: other threads' work shows in them.
    pub gpu: Counts,
    /// Backend calls (`swax_tensor::calls`), on either device: on the GPU each is at least one
    /// launch; the fused ops (`DeviceOp`s, such as the decoding steps) are not among them.
    pub backend_calls: u64,
    /// Bytes read back to the host: B token ids (u32) a greedy step, B × V f32 logits a
    /// sampled one.
    pub read_back_bytes: u64,
    /// Wall time, host and device together.
    pub seconds: f64,
}

impl DecodeProfile {
    /// One line per step's averages.
    pub fn per_step(&self) -> String {
        let n = self.steps.max(1) as f64;
        let each = |x: u64| x as f64 / n;
        let g = &self.gpu;
        format!(
            "{} decoding steps, per step: {:.2} ms, {:.1} launches, {:.1} cuBLAS calls, {:.2} host \
             syncs, {:.2} event waits, {:.2} uploads ({:.0} bytes), {:.1} backend calls, {:.0} \
             bytes read back{}",
            self.steps,
            self.seconds * 1e3 / n,
            each(g.launches),
            each(g.blas_calls),
            each(g.syncs),
            each(g.event_waits),
            each(g.uploads),
            each(g.upload_bytes),
            each(self.backend_calls),
            each(self.read_back_bytes),
            match g == &Counts::default() {
                true => " (no swax-cuda counts: the CPU runs none of its kernels)",
                false => "",
            }
        )
    }
}

/// The counts at one moment: swax-cuda's and the backend calls.
fn snapshot() -> (Counts, u64, Instant) {
    let backend = calls::calls().values().map(|c| c.calls).sum();
    (counters::counts(), backend, Instant::now())
}

/// Each row's next token from the logits `[B, V]`, on their device: greedy, or drawn from one
/// random u32 a row (uploaded). Returns the tokens and the bytes read back.
fn pick_all(logits: &Tensor, how: &Sampling, rngs: &mut [Rng]) -> Result<(Vec<u32>, u64)> {
    let ids = match how.is_greedy() {
        true => logits.argmax(-1, false)?,
        false => {
            let r: Vec<u32> = rngs.iter_mut().map(draw).collect();
            let r = Tensor::from_vec(r, vec![rngs.len()], logits.device())?;
            sampling::sample(logits, &r, &how.cuts())?
        }
    };
    let ids = ids.to_vec::<u32>()?;
    let bytes = 4 * ids.len() as u64;
    Ok((ids, bytes))
}

/// Generates up to `req.max_tokens` tokens after `prompt` for each of `req.batch` rows, telling
/// `each(row, token)` every token as it comes; returns each row's tokens (its stop token
/// included when it stopped on it).
pub fn generate(
    model: &Model,
    prompt: &[u32],
    req: &Request,
    dtype: DType,
    device: Device,
    each: &mut dyn FnMut(usize, u32),
) -> Result<Vec<Vec<u32>>> {
    Ok(generate_profiled(model, prompt, req, dtype, device, each)?.0)
}

/// [`generate`], also returning what its decoding steps asked of the device.
pub fn generate_profiled(
    model: &Model,
    prompt: &[u32],
    req: &Request,
    dtype: DType,
    device: Device,
    each: &mut dyn FnMut(usize, u32),
) -> Result<(Vec<Vec<u32>>, DecodeProfile)> {
    let mut dec = Decoder::new(model, req.window, dtype, device, req.batch)?;
    let mut rngs: Vec<Rng> = (0..req.batch as u64)
        .map(|row| Rng::derive(req.sampling.seed, &[0x47_454e, row]))
        .collect();
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); req.batch];
    let mut done = vec![false; req.batch];
    let mut profile = DecodeProfile::default();
    let mut logits = dec.prefill(prompt, req.piece)?;
    // The counts when the step now reading began (none while the prompt's logits are picked).
    let mut began: Option<(Counts, u64, Instant)> = None;
    for step in 0..req.max_tokens {
        let (picked, bytes) = pick_all(&logits, &req.sampling, &mut rngs)?;
        if let Some((gpu, backend, at)) = began.take() {
            let (gpu_now, backend_now, _) = snapshot();
            profile.steps += 1;
            profile.gpu = profile.gpu + gpu_now.since(&gpu);
            profile.backend_calls += backend_now - backend;
            profile.read_back_bytes += bytes;
            profile.seconds += at.elapsed().as_secs_f64();
        }
        let mut next = Vec::with_capacity(req.batch);
        for (row, &t) in picked.iter().enumerate() {
            // A finished row keeps reading its stop token: the batch steps together.
            let token = match done[row] {
                true => *out[row].last().expect("a finished row has its stop token"),
                false => {
                    out[row].push(t);
                    each(row, t);
                    done[row] = Some(t) == req.stop;
                    t
                }
            };
            next.push(token);
        }
        if done.iter().all(|&d| d) || step + 1 == req.max_tokens {
            break;
        }
        began = Some(snapshot());
        logits = dec.logits(&next)?;
    }
    Ok((out, profile))
}

/// Bytes to printable text as they come: a character split over tokens is held until it is
/// whole, and bytes that are not UTF-8 (a model trained on token ids, such as MQAR's, emits
/// any byte) print as U+FFFD and are counted, so the output is always valid text.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    /// The start of a character whose remaining bytes have not come yet.
    pending: Vec<u8>,
    replaced: usize,
}

impl Utf8Stream {
    /// The text `bytes` complete, after what came before.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut text = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    text.push_str(s);
                    self.pending.clear();
                    return text;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Valid up to there: the lossy reading is the exact one.
                    text.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // A character cut short: its other bytes may still come.
                        None => {
                            self.pending.drain(..valid);
                            return text;
                        }
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            self.replaced += bad;
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// The text left at the end: a character still cut short prints as U+FFFD.
    pub fn finish(&mut self) -> String {
        match self.pending.is_empty() {
            true => String::new(),
            false => {
                self.replaced += self.pending.len();
                self.pending.clear();
                char::REPLACEMENT_CHARACTER.to_string()
            }
        }
    }

    /// How many bytes printed as U+FFFD.
    pub fn replaced(&self) -> usize {
        self.replaced
    }
}
