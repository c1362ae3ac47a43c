//! Training's numerics beside the model: AdamW with global-norm clipping (`adamw`), the
//! learning-rate schedules (`schedule`).
pub mod adamw;
pub mod schedule;

pub use adamw::{AdamW, AdamWConfig, StepStats};
pub use schedule::Schedule;
