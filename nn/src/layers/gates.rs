//! Gate parameterisations of the recurrent mixer layers, composed from elementwise tape ops (each
//! is a handful of cheap maps; the tape differentiates them).
use swax_autograd::Tape;
use swax_tensor::{Error, Result, Tensor};

/// `cap · tanh(x / cap)`: keeps gate preactivations within (-cap, cap), smoothly (xLSTM-7B caps
/// its gates at 15).
pub fn soft_cap(tape: &Tape, x: &Tensor, cap: f64) -> Result<Tensor> {
    if !(cap > 0.0 && cap.is_finite()) {
        return Err(Error::Invalid {
            op: "soft_cap",
            msg: format!("the cap must be positive and finite, got {cap}"),
        });
    }
    tape.scale(&tape.tanh(&tape.scale(x, 1.0 / cap)?)?, cap)
}

/// Gated DeltaNet's log-decay `g = -exp(A) · softplus(x + dt_bias)`, x `[.., H]`, A (stored as its
/// log, `a_log`) and dt_bias `[H]`: always <= 0, so the decay `exp(g)` is in (0, 1].
pub fn log_decay(tape: &Tape, x: &Tensor, a_log: &Tensor, dt_bias: &Tensor) -> Result<Tensor> {
    let h = x.dims().last().copied().unwrap_or(0);
    for p in [a_log, dt_bias] {
        if p.dims() != [h] {
            return Err(Error::ShapeMismatch {
                op: "log_decay",
                lhs: x.shape().clone(),
                rhs: p.shape().clone(),
            });
        }
    }
    let rate = tape.softplus(&tape.add(x, dt_bias)?)?;
    tape.neg(&tape.mul(&tape.exp(a_log)?, &rate)?)
}
