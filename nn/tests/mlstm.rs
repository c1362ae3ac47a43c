//! The mLSTM: the references hold to finite differences (f64), the parallel form and the fused
//! chunkwise node hold to the recurrence on values and every gradient (q, k, v, gates, initial
//! state) at chunk sizes that do and do not divide T, T = 1 and long T; single steps and
//! pieces carrying the state hold to one shot; extreme gates stay finite; bad input is an error.
//! The tests it shares with the gated delta rule are in `recurrent_support`; the parallel
//! form's, here.
#[macro_use]
mod recurrent_support;

use recurrent_support::*;
use swax_autograd::Tape;
use swax_nn::mixers::mlstm::{self, MlstmState};
use swax_tensor::{DType, Result, Tensor};

/// The mLSTM at its stabilizer's eps.
#[derive(Clone, Copy, Debug)]
struct Mlstm {
    eps: f64,
}

fn state(s: &[Tensor]) -> MlstmState {
    MlstmState {
        c: s[0].clone(),
        n: s[1].clone(),
        m: s[2].clone(),
    }
}

/// The fused kernel's operands: q, k, v, i, f from `x` (as `Mlstm::inputs` lists them) and the
/// initial state `s0`.
fn kernel_input<'a>(x: &'a [Tensor], s0: &'a MlstmState) -> Result<mlstm::MlstmIn<&'a Tensor>> {
    Ok(mlstm::MlstmIn {
        q: &x[0],
        k: &x[1],
        v: &x[2],
        i: &x[3],
        f: &x[4],
        state: s0.try_map(Ok)?,
    })
}

fn listed((h, s): (Tensor, MlstmState)) -> (Tensor, Vec<Tensor>) {
    (h, vec![s.c, s.n, s.m])
}

impl RecurrentMixer for Mlstm {
    const GATES: GateCases = GateCases {
        reference: [(0.0, 1.5), (1.0, 2.0)],
        matching: [(0.0, 3.0), (1.0, 3.0)],
        typical: [(0.0, 2.0), (1.0, 2.0)],
        // Large input gates and forget gates near 1 would overflow exp(i) and the accumulated
        // state without the stabilizer.
        long: [(20.0, 5.0), (6.0, 2.0)],
        extreme: [
            [(0.0, 1.0), (-30.0, 5.0)],
            [(0.0, 1.0), (30.0, 5.0)],
            [(80.0, 20.0), (0.0, 30.0)],
        ],
    };
    const DEFAULT: Mlstm = Mlstm { eps: mlstm::EPS };
    const REFERENCE: [Mlstm; 2] = [Mlstm { eps: mlstm::EPS }, Mlstm { eps: 0.3 }];
    /// A large eps makes the stabilizer's own path count.
    const MATCHING: &'static [Mlstm] = &[Mlstm { eps: mlstm::EPS }, Mlstm { eps: 0.5 }];
    const FINITE_DIFFERENCES: Mlstm = Mlstm { eps: 0.3 };

    /// q, k, v, i, f, then c0, n0, m0; the gates normal with the given (mean, std).
    fn inputs(dims: [usize; 5], gates: Gates, seed: u64, dtype: DType) -> Vec<Tensor> {
        let [b, t, h, dk, dv] = dims;
        let gate = |(mean, std): (f64, f64), s: u64| {
            randn(&[b, t, h], std, s, dtype).add_scalar(mean).unwrap()
        };
        vec![
            randn(&[b, t, h, dk], 1.0, seed, dtype),
            randn(&[b, t, h, dk], 1.0, seed + 1, dtype),
            randn(&[b, t, h, dv], 1.0, seed + 2, dtype),
            gate(gates[0], seed + 3),
            gate(gates[1], seed + 4),
            randn(&[b, h, dk, dv], 0.5, seed + 5, dtype),
            randn(&[b, h, dk], 0.5, seed + 6, dtype),
            randn(&[b, h], 0.5, seed + 7, dtype),
        ]
    }

    fn recurrent(
        self,
        tape: &Tape,
        x: &[Tensor],
        s: Option<&[Tensor]>,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let s = s.map(state);
        let [q, k, v, i, f] = x else {
            panic!("five inputs")
        };
        mlstm::recurrent(tape, q, k, v, i, f, s.as_ref(), self.eps).map(listed)
    }

    fn chunkwise(
        self,
        tape: &Tape,
        x: &[Tensor],
        s: Option<&[Tensor]>,
        chunk: usize,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let s = s.map(state);
        let [q, k, v, i, f] = x else {
            panic!("five inputs")
        };
        mlstm::chunkwise(tape, q, k, v, i, f, s.as_ref(), chunk, self.eps).map(listed)
    }

    fn step(self, tape: &Tape, x: &[Tensor], s: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)> {
        let [q, k, v, i, f] = x else {
            panic!("five inputs")
        };
        mlstm::step(tape, q, k, v, i, f, &state(s), self.eps).map(listed)
    }
}

recurrent_mixer_tests!(Mlstm);

/// The parallel reference from the inputs' initial state, outputs listed.
fn parallel(eps: f64) -> impl Fn(&Tape, &[Tensor]) -> Result<Vec<Tensor>> {
    move |tape, x| {
        let [q, k, v, i, f, ..] = x else {
            panic!("eight inputs")
        };
        let (h, s) = listed(mlstm::parallel(
            tape,
            q,
            k,
            v,
            i,
            f,
            Some(&state(&x[5..])),
            eps,
        )?);
        Ok([vec![h], s].concat())
    }
}

#[test]
fn parallel_reference_gradients() {
    gradcheck(
        parallel(0.3),
        &Mlstm::inputs([1, 4, 2, 2, 3], [(0.0, 1.5), (1.0, 2.0)], 3, DType::F64),
        3,
    );
}

#[test]
fn parallel_matches_recurrent() {
    for (dims, seed) in [([2, 9, 3, 4, 5], 10), ([1, 1, 1, 3, 2], 11)] {
        let x = Mlstm::inputs(dims, [(0.0, 3.0), (2.0, 3.0)], seed, DType::F64);
        let (rv, rg) = value_and_grads(recurrent_form(Mlstm { eps: 0.1 }), &x, seed);
        let (pv, pg) = value_and_grads(parallel(0.1), &x, seed);
        assert_all_close("values", &pv, &rv, 1e-10, 1e-9);
        assert_all_close("grads", &pg, &rg, 1e-10, 1e-9);
    }
}

#[test]
fn parallel_rejects_bad_input() {
    let x = Mlstm::inputs([1, 5, 2, 3, 4], Mlstm::GATES.typical, 70, DType::F64);
    let wrong_v = randn(&[1, 5, 3, 4], 1.0, 1, DType::F64);
    let tape = Tape::new();
    assert!(mlstm::parallel(
        &tape,
        &x[0],
        &x[1],
        &wrong_v,
        &x[3],
        &x[4],
        None,
        mlstm::EPS
    )
    .is_err());
}

/// The forward's `den` is, per step, `q_t·n_t` (q scaled by 1/sqrt(Dk)) and `m_t` of the
/// recurrence (here stepped in plain f64), across chunks that do not divide T and from an initial
/// state; the backward rejects one of the wrong shape, naming itself.
#[test]
fn the_forward_keeps_the_denominators_parts_and_the_backward_checks_them() -> Result<()> {
    let [b, t, h, dk, dv] = [2, 7, 2, 3, 4];
    let x = Mlstm::inputs([b, t, h, dk, dv], Mlstm::GATES.typical, 71, DType::F64);
    let s0 = state(&x[5..8]);
    let input = kernel_input(&x, &s0)?;
    let out = mlstm::forward(&input, 3, mlstm::EPS)?;
    assert_eq!(out.den.dims(), [b, h, 2, t]);
    let [q, k, i, f, n0, m0, den] =
        [&x[0], &x[1], &x[3], &x[4], &x[6], &x[7], &out.den].map(|x| x.to_vec::<f64>().unwrap());
    for bh in 0..b * h {
        let (bb, hh) = (bh / h, bh % h);
        let (mut n, mut m) = (n0[bh * dk..(bh + 1) * dk].to_vec(), m0[bh]);
        for s in 0..t {
            let g = (bb * t + s) * h + hh;
            let lf = -(-f[g]).exp().ln_1p();
            let m_new = (lf + m).max(i[g]);
            let (decay, input) = ((lf + m - m_new).exp(), (i[g] - m_new).exp());
            for (e, n) in n.iter_mut().enumerate() {
                *n = decay * *n + input * k[g * dk + e];
            }
            m = m_new;
            let qn: f64 = (0..dk).map(|e| q[g * dk + e] * n[e]).sum::<f64>() / (dk as f64).sqrt();
            let (got_qn, got_m) = (den[bh * 2 * t + s], den[(bh * 2 + 1) * t + s]);
            assert!(
                (got_qn - qn).abs() < 1e-12 * (1.0 + qn.abs()),
                "q·n at {bh}, {s}: {got_qn} vs {qn}"
            );
            assert!(
                (got_m - m).abs() < 1e-12 * (1.0 + m.abs()),
                "m at {bh}, {s}: {got_m} vs {m}"
            );
        }
    }
    let dh = randn(&[b, t, h, dv], 1.0, 72, DType::F64);
    let d_final = MlstmState {
        c: x[5].zeros_like()?,
        n: x[6].zeros_like()?,
        m: x[7].zeros_like()?,
    };
    let short = Tensor::zeros(vec![b, h, 1, t], DType::F64, swax_tensor::Device::Cpu)?;
    for (den, ok) in [(&out.den, true), (&short, false)] {
        let saved = mlstm::MlstmBackward {
            input: input.clone(),
            out: mlstm::MlstmOut {
                h: &out.h,
                boundary: out.boundary.try_map(Ok)?,
                den,
            },
            dh: &dh,
            d_final: d_final.try_map(Ok)?,
        };
        match mlstm::backward(&saved, 3, mlstm::EPS) {
            Ok(_) => assert!(ok, "a den of shape {:?} was taken", den.dims()),
            Err(e) => {
                assert!(!ok, "the forward's own den was refused: {e}");
                assert!(e.to_string().contains("mlstm::backward"), "{e}");
            }
        }
    }
    Ok(())
}

/// Under strong decay (forget preactivations about -10, so log forget gates about -10) the
/// fused kernel's f32 gate gradients hold to its f64 ones as dq and dk do: the terms of dF that
/// cancel exactly (the diagonal of dP ⊙ P, the last step's share of the end state) are left out
/// rather than summed and subtracted in f32, where their rounding dwarfed the small true dF
/// (df 4.3e-4 relative before, 3.1e-5 after; di, dq and dk about 9e-6; measured with this test
/// on 2026-12-02).
#[test]
fn f32_gate_gradients_hold_under_strong_decay() -> Result<()> {
    let dims = [1, 200, 2, 32, 64];
    let run = |dtype: DType| -> Result<Vec<Vec<f64>>> {
        let x = Mlstm::inputs(dims, [(0.0, 1.0), (-10.0, 1.0)], 7, dtype);
        let [b, t, h, dk, dv] = dims;
        let dh = randn(&[b, t, h, dv], 1.0, 20, dtype);
        let d_final = MlstmState {
            c: randn(&[b, h, dk, dv], 0.1, 21, dtype),
            n: randn(&[b, h, dk], 0.1, 22, dtype),
            m: x[7].zeros_like()?,
        };
        let s0 = state(&x[5..8]);
        let input = kernel_input(&x, &s0)?;
        let out = mlstm::forward(&input, 64, mlstm::EPS)?;
        let saved = mlstm::MlstmBackward {
            input,
            out: out.try_map(Ok)?,
            dh: &dh,
            d_final: d_final.try_map(Ok)?,
        };
        let g = mlstm::backward(&saved, 64, mlstm::EPS)?;
        [g.i, g.f, g.q, g.k]
            .iter()
            .map(|t| t.to_f64_vec())
            .collect()
    };
    let (got, want) = (run(DType::F32)?, run(DType::F64)?);
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    for (name, (g, w)) in ["di", "df", "dq", "dk"].iter().zip(got.iter().zip(&want)) {
        let err = norm(&mut g.iter().zip(w).map(|(a, b)| a - b)) / norm(&mut w.iter().copied());
        assert!(
            err < 1e-4,
            "{name} relative error {err:.2e} in f32 against f64"
        );
    }
    Ok(())
}
