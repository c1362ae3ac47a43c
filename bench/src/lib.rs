//! swax-bench: the benchmark programs (`src/bin`) and what they share. Benchmarks are programs,
//! never timed tests, and live here rather than in the crates they measure, so that a program
//! may use any crate (the attention benchmark times nn's fused RAttention node itself). Their
//! figures, with the commands and dates, are in BENCHMARKS.md.
//!
//! - `learn`: how fast each layer pattern learns to retrieve; appends JSON lines to
//!   `bench/results/learn.jsonl`. With `--check`, the learning gate (`gate`): fused mixers
//!   against their reference forms, several seeds per case.
//! - On the GPU (built for the GPU machine by `tools/gpu-pack`): `bench-gpu` (engine ops against
//!   bare swax-cuda calls and a copy), `bench-cuda` (swax-cuda against raw cuBLAS, a copy and the
//!   driver's allocator), `bench-attention-gpu` (SWA and RAttention) and `bench-recurrent-gpu`
//!   (mLSTM and the gated delta rule), each at two named shapes beside its peers and appending
//!   JSON lines to `bench/results/attention.jsonl` or `recurrent.jsonl`, `bench-generate`
//!   (prefill and decoding) and `bench-train` (training tokens/s, MFU and peak memory of a config
//!   beside its PyTorch peer; it runs on the CPU too); their PyTorch peers are `bench/peers/*.py`.
//! - On the CPU: `bench-cpu` (matmul against numpy, softmax, rms_norm), `bench-mixers-cpu`
//!   (each fused mixer against its reference), `bench_loader` (the loader's batches), and
//!   `gen_text` (a text file of corpus documents, to time `swax prepare` on).
//! - `twin-dump` (`twin`): a config's initial weights, the trainer's batches and step 0's
//!   logits and gradients, for the PyTorch twin's parity check (docs/parity.md).
//!
//! The library: `config_args` is the config a model benchmark builds; `learning` scores the learning benchmark; `record` gives the date and commit
//! every result line carries, appends lines, reads them back and finds a case's line;
//! `nvidia_smi` samples the card's memory in the background; for the two kernel benchmarks,
//! `shape` names the shapes they run at, `peers` reads their peers' figures and `kernel_report`
//! sets each case beside its fastest peer, as a table row and a JSON line.
pub mod config_args;
pub mod gate;
pub mod kernel_report;
pub mod learning;
pub mod nvidia_smi;
pub mod peers;
pub mod record;
pub mod shape;
pub mod twin;
