//! The gated delta rule: the reference holds to finite differences (f64), the fused chunkwise
//! node (WY form) holds to the reference on values and every gradient (q, k, v, beta, decay,
//! initial state) at chunk sizes that do and do not divide T, T = 1 and long T; single steps
//! and pieces carrying the state hold to one shot; extreme gates stay finite; bad input is an
//! error. The tests are the ones the mLSTM passes too, in `recurrent_support`.
#[macro_use]
mod recurrent_support;

use recurrent_support::*;
use swax_autograd::Tape;
use swax_nn::mixers::gated_delta;
use swax_tensor::{DType, Result, Tensor};

/// The gated delta rule (it has no settings).
#[derive(Clone, Copy, Debug)]
struct GatedDelta;

const BETA: (f64, f64) = (0.05, 0.95);
const DECAY: (f64, f64) = (-1.0, 0.0);

impl RecurrentMixer for GatedDelta {
    const GATES: GateCases = GateCases {
        reference: [BETA, DECAY],
        matching: [BETA, DECAY],
        typical: [BETA, DECAY],
        // Decays near 1 (the state keeps everything) and beta near 1 (the deltas overwrite it):
        // chunk states carried across 64 chunks.
        long: [(0.5, 1.0), (-0.01, 0.0)],
        extreme: [
            [(0.999, 1.0), (-1e-4, 0.0)],
            [(0.0, 1e-3), (-60.0, -20.0)],
            [BETA, (-200.0, 0.0)],
        ],
    };
    const DEFAULT: GatedDelta = GatedDelta;
    const REFERENCE: [GatedDelta; 2] = [GatedDelta, GatedDelta];
    const MATCHING: &'static [GatedDelta] = &[GatedDelta];
    const FINITE_DIFFERENCES: GatedDelta = GatedDelta;

    /// q, k, v, beta, g, then s0; beta and g uniform in the given ranges.
    fn inputs(dims: [usize; 5], gates: Gates, seed: u64, dtype: DType) -> Vec<Tensor> {
        let [b, t, h, dk, dv] = dims;
        let [beta, g] = gates;
        vec![
            randn(&[b, t, h, dk], 1.0, seed, dtype),
            randn(&[b, t, h, dk], 1.0, seed + 1, dtype),
            randn(&[b, t, h, dv], 1.0, seed + 2, dtype),
            uniform(&[b, t, h], beta.0, beta.1, seed + 3, dtype),
            uniform(&[b, t, h], g.0, g.1, seed + 4, dtype),
            randn(&[b, h, dk, dv], 0.5, seed + 5, dtype),
        ]
    }

    fn recurrent(
        self,
        tape: &Tape,
        x: &[Tensor],
        s: Option<&[Tensor]>,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let [q, k, v, beta, g] = x else {
            panic!("five inputs")
        };
        let (o, fin) = gated_delta::recurrent(tape, q, k, v, beta, g, s.map(|s| &s[0]))?;
        Ok((o, vec![fin]))
    }

    fn chunkwise(
        self,
        tape: &Tape,
        x: &[Tensor],
        s: Option<&[Tensor]>,
        chunk: usize,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let [q, k, v, beta, g] = x else {
            panic!("five inputs")
        };
        let (o, fin) = gated_delta::chunkwise(tape, q, k, v, beta, g, s.map(|s| &s[0]), chunk)?;
        Ok((o, vec![fin]))
    }

    fn step(self, tape: &Tape, x: &[Tensor], s: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)> {
        let [q, k, v, beta, g] = x else {
            panic!("five inputs")
        };
        let (o, next) = gated_delta::step(tape, q, k, v, beta, g, &s[0])?;
        Ok((o, vec![next]))
    }
}

recurrent_mixer_tests!(GatedDelta);
