//! Long-context evaluation behind `swax eval` and `swax report`: the tasks of the data crate
//! (needle in a haystack, passkey, MQAR) at a list of lengths and depths, scored by exact match
//! of the greedy answer (`score`), and the loss by position on held-out text past the training
//! length (`run`); the results as JSON (`results`), and markdown tables and SVG plots drawn from
//! saved results alone (`report`, `svg`), so reports need no model; results kept by window and
//! checkpoint step, never silently replaced (`store`); RULER's generation-scored
//! `string_match_all` beside exact match (`generated`). `evaluate` runs a plan of all that on one
//! checkpoint, for `swax eval` and `swax study`.
pub mod evaluate;
pub mod generated;
pub mod report;
pub mod results;
pub mod run;
pub mod score;
pub mod store;
pub mod svg;
