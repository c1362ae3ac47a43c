//! Cross-crate properties: gradient checks, CPU/GPU parity, end-to-end training.
