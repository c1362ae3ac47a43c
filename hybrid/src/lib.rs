//! swax-hybrid: hybrid models from a layer pattern (`model`) and the token ids they read
//! (`batch`), a trained one loaded from its checkpoint (`loaded`), their configs (`config`), the
//! stochastic window schedule (`window`), the trainer with its validation (`train`),
//! long-context evaluation with its reports (`eval`), generation (`generate`) and window studies
//! (`study`); the `swax` CLI (`main.rs`, `cli/`) is built on them.
pub mod batch;
pub mod config;
pub mod eval;
pub mod export;
pub mod generate;
pub mod loaded;
pub mod model;
pub mod study;
pub mod train;
pub mod window;
