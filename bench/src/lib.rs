//! swax-bench: benchmark programs (`src/bin`) and what they share. Benchmarks are programs,
//! never timed tests; each writes its figures as JSON lines under `bench/results/`.
//!
//! - `learning`: scoring the learning benchmark (`learn`), which trains each layer pattern on
//!   recall data and measures how fast it learns to retrieve.
//! - `record`: the date and commit every result line carries, and appending lines.
pub mod learning;
pub mod record;
