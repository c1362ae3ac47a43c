//! The mLSTM's chunkwise kernel on the CPU, forward and backward (the equations: `mod.rs`).
//!
//! Within a chunk the recurrence is unrolled into an `L × L` matrix of decayed, stabilized
//! weights `exp(i_s + F_j - F_s - m_j)` (F the running sum of log forget gates from the chunk's
//! start), so a chunk is a few tile products; across chunks the state `(C, n, m)` is carried.
//! The stabilizer `m_t` is the recurrence's own (`max(lf_t + m_{t-1}, i_t)`, a scalar pass per
//! head), which is also the max over every log weight a row sees: no exponent is ever positive.
//!
//! The backward treats the stabilizers as constants, then adds their own path separately. Every
//! state is `exp(-m_t)` times a stabilizer-free one, so h_t depends on m_t only through eps:
//! `dL/dm_t = eps · dden_t` (plus `-<dC_T, C_T> - <dn_T, n_T>` from the final state), which
//! flows back along the recurrence of m to whichever of `i_t` or `lf_t + m_{t-1}` won each max.
use super::{MlstmBackward, MlstmGrads, MlstmIn, MlstmOut, MlstmState};
use std::borrow::Cow;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::backend::Backend;
use swax_tensor::cpu::chunk::{
    axpy, dot, interleave, mm, per_head, reverse_cumsum, rows, scale_rows,
};
use swax_tensor::cpu::{sigmoid, softplus, CpuStorage, Real};
use swax_tensor::{DType, Error, Result};

/// The operands as the type the kernel computes in.
type Values<'a, T> = MlstmIn<Cow<'a, [T]>>;

/// The forward on storage of any float dtype: bf16 computed in f32, h rounded back, the boundary
/// states kept f32 (`Real::store` of `F32` keeps f32 as f32 and f64 as f64).
pub(super) fn forward(
    op: &'static str,
    x: &MlstmIn<&CpuStorage>,
    dims: &RecurrentShape,
    eps: f64,
) -> Result<MlstmOut<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &MlstmIn<&CpuStorage>,
        dims: &RecurrentShape,
        eps: f64,
    ) -> Result<MlstmOut<CpuStorage>> {
        let dtype = x.q.dtype();
        let y = forward_values(&x.try_map(|s| T::read(op, s))?, dims, eps);
        let stat = |v: Vec<T>| T::store(v, DType::F32);
        Ok(MlstmOut {
            h: T::store(y.h, dtype),
            boundary: MlstmState {
                c: stat(y.boundary.c),
                n: stat(y.boundary.n),
                m: stat(y.boundary.m),
            },
            den: stat(y.den),
        })
    }
    match x.q.dtype() {
        DType::F64 => run::<f64>(op, x, dims, eps),
        DType::F32 | DType::BF16 => run::<f32>(op, x, dims, eps),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The backward on storage of any float dtype, the gradients in the inputs' dtype.
pub(super) fn backward(
    op: &'static str,
    x: &MlstmBackward<&CpuStorage>,
    dims: &RecurrentShape,
    eps: f64,
) -> Result<MlstmGrads<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &MlstmBackward<&CpuStorage>,
        dims: &RecurrentShape,
        eps: f64,
    ) -> Result<MlstmGrads<CpuStorage>> {
        let dtype = x.input.q.dtype();
        let g = backward_values(&x.try_map(|s| T::read(op, s))?, dims, eps);
        let out = |v: Vec<T>| T::store(v, dtype);
        Ok(MlstmIn {
            q: out(g.q),
            k: out(g.k),
            v: out(g.v),
            i: out(g.i),
            f: out(g.f),
            state: MlstmState {
                c: out(g.state.c),
                n: out(g.state.n),
                m: out(g.state.m),
            },
        })
    }
    match x.input.q.dtype() {
        DType::F64 => run::<f64>(op, x, dims, eps),
        DType::F32 | DType::BF16 => run::<f32>(op, x, dims, eps),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// One chunk of one head: what the forward computes and the backward recomputes.
struct Chunk<T> {
    len: usize,
    /// q scaled by 1/sqrt(Dk), k `[L, Dk]`, v `[L, Dv]`.
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    /// The stabilizers, `[L]`.
    m: Vec<T>,
    /// `exp(i_s + F_j - F_s - m_j)` for s <= j, zero above the diagonal, `[L, L]`.
    w: Vec<T>,
    /// `w ⊙ q k^T`.
    p: Vec<T>,
    /// The carried state's weight in row j, `exp(m_prev + F_j - m_j)`.
    a: Vec<T>,
    /// `q C_prev` `[L, Dv]` and `q · n_prev` `[L]`.
    qc: Vec<T>,
    qn: Vec<T>,
    /// `q_j^T n_j` and the denominator before eps, `max(|q_j^T n_j|, exp(-m_j))`.
    nq: Vec<T>,
    den: Vec<T>,
}

fn log_sigmoid<T: Real>(x: T) -> T {
    -softplus(-x)
}

impl<T: Real> Chunk<T> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        x: &Values<T>,
        dims: &RecurrentShape,
        bh: usize,
        t0: usize,
        len: usize,
        c_prev: &[T],
        n_prev: &[T],
        m_prev: T,
    ) -> Self {
        let (dk, dv) = (dims.dk, dims.dv);
        let scale = T::of(1.0 / (dk as f64).sqrt());
        let q: Vec<T> = rows(&x.q, dims, dk, bh, t0, len)
            .into_iter()
            .map(|v| v * scale)
            .collect();
        let k = rows(&x.k, dims, dk, bh, t0, len);
        let v = rows(&x.v, dims, dv, bh, t0, len);
        let i = rows(&x.i, dims, 1, bh, t0, len);
        let lf: Vec<T> = rows(&x.f, dims, 1, bh, t0, len)
            .into_iter()
            .map(log_sigmoid)
            .collect();
        let (mut fcum, mut m) = (Vec::with_capacity(len), Vec::with_capacity(len));
        let (mut run, mut prev) = (T::zero(), m_prev);
        for j in 0..len {
            run = run + lf[j];
            prev = (lf[j] + prev).max(i[j]);
            fcum.push(run);
            m.push(prev);
        }
        let mut w = vec![T::zero(); len * len];
        for j in 0..len {
            for s in 0..=j {
                w[j * len + s] = (i[s] + fcum[j] - fcum[s] - m[j]).exp();
            }
        }
        let a: Vec<T> = (0..len).map(|j| (m_prev + fcum[j] - m[j]).exp()).collect();
        let s = mm(&q, false, &k, true, len, dk, len);
        let p: Vec<T> = w.iter().zip(&s).map(|(&w, &s)| w * s).collect();
        let qc = mm(&q, false, c_prev, false, len, dk, dv);
        let qn: Vec<T> = q.chunks(dk).map(|row| dot(row, n_prev)).collect();
        let nq: Vec<T> = (0..len)
            .map(|j| p[j * len..(j + 1) * len].iter().copied().sum::<T>() + a[j] * qn[j])
            .collect();
        let den = (0..len).map(|j| nq[j].abs().max((-m[j]).exp())).collect();
        Chunk {
            len,
            q,
            k,
            v,
            m,
            w,
            p,
            a,
            qc,
            qn,
            nq,
            den,
        }
    }

    /// Row `len - 1` of the weights: each step's weight in the state at the chunk's end.
    fn last_row(&self) -> &[T] {
        &self.w[(self.len - 1) * self.len..]
    }
}

fn forward_values<T: Real>(x: &Values<T>, dims: &RecurrentShape, eps: f64) -> MlstmOut<Vec<T>> {
    let (c0, n0, m0) = (&x.state.c, &x.state.n, &x.state.m);
    let RecurrentShape { dk, dv, chunk, .. } = *dims;
    let eps = T::of(eps);
    let heads = per_head(dims, |bh| {
        let mut c = c0[bh * dk * dv..(bh + 1) * dk * dv].to_vec();
        let mut n = n0[bh * dk..(bh + 1) * dk].to_vec();
        let mut m = m0[bh];
        let (mut cs, mut ns, mut ms) = (c.clone(), n.clone(), vec![m]);
        let mut h = Vec::with_capacity(dims.t * dv);
        // This head's rows of `den`: q·n by step, then m.
        let (mut den, mut m_steps) = (Vec::with_capacity(2 * dims.t), Vec::with_capacity(dims.t));
        for t0 in (0..dims.t).step_by(chunk) {
            let len = chunk.min(dims.t - t0);
            let ch = Chunk::new(x, dims, bh, t0, len, &c, &n, m);
            let pv = mm(&ch.p, false, &ch.v, false, len, len, dv);
            for j in 0..len {
                let r = (ch.den[j] + eps).recip();
                for e in 0..dv {
                    h.push((pv[j * dv + e] + ch.a[j] * ch.qc[j * dv + e]) * r);
                }
            }
            let a_end = ch.a[len - 1];
            let kw = scale_rows(&ch.k, ch.last_row(), dk);
            let kv = mm(&kw, true, &ch.v, false, dk, len, dv);
            for (c, add) in c.iter_mut().zip(kv) {
                *c = a_end * *c + add;
            }
            for (d, n) in n.iter_mut().enumerate() {
                *n = a_end * *n + (0..len).map(|s| kw[s * dk + d]).sum::<T>();
            }
            m = ch.m[len - 1];
            cs.extend_from_slice(&c);
            ns.extend_from_slice(&n);
            ms.push(m);
            den.extend_from_slice(&ch.nq);
            m_steps.extend_from_slice(&ch.m);
        }
        den.extend(m_steps);
        (h, cs, ns, ms, den)
    });
    let hs: Vec<&[T]> = heads.iter().map(|r| &r.0[..]).collect();
    MlstmOut {
        h: interleave(&hs, dims, dv),
        boundary: MlstmState {
            c: heads.iter().flat_map(|r| r.1.iter().copied()).collect(),
            n: heads.iter().flat_map(|r| r.2.iter().copied()).collect(),
            m: heads.iter().flat_map(|r| r.3.iter().copied()).collect(),
        },
        den: heads.iter().flat_map(|r| r.4.iter().copied()).collect(),
    }
}

/// One head's gradients, `[T, D]` / `[T]` / state-shaped.
struct HeadGrads<T> {
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    di: Vec<T>,
    df: Vec<T>,
    dc0: Vec<T>,
    dn0: Vec<T>,
    dm0: T,
}

fn backward_values<T: Real>(
    x: &MlstmBackward<Cow<[T]>>,
    dims: &RecurrentShape,
    eps: f64,
) -> MlstmGrads<Vec<T>> {
    let heads = per_head(dims, |bh| head_backward(x, dims, eps, bh));
    let field = |get: fn(&HeadGrads<T>) -> &[T], d: usize| {
        let hs: Vec<&[T]> = heads.iter().map(get).collect();
        interleave(&hs, dims, d)
    };
    MlstmIn {
        q: field(|g| &g.dq, dims.dk),
        k: field(|g| &g.dk, dims.dk),
        v: field(|g| &g.dv, dims.dv),
        i: field(|g| &g.di, 1),
        f: field(|g| &g.df, 1),
        state: MlstmState {
            c: heads.iter().flat_map(|g| g.dc0.iter().copied()).collect(),
            n: heads.iter().flat_map(|g| g.dn0.iter().copied()).collect(),
            m: heads.iter().map(|g| g.dm0).collect(),
        },
    }
}

/// One head's backward, chunk by chunk from the last. Each chunk's forward quantities are
/// recomputed from its boundary state (`Chunk::new`); the gradient then flows through the
/// outputs' normalization ([`output_backward`]), the chunk's weighted scores and its share of
/// the state at its end ([`qkv_backward`]), into the gates ([`gate_backward`]), and the state's
/// gradient is carried to the chunk before ([`carry_state`]). The stabilizers' own path is
/// added last ([`stabilizer_backward`]): the module comment says why it can wait.
fn head_backward<T: Real>(
    x: &MlstmBackward<Cow<[T]>>,
    dims: &RecurrentShape,
    eps: f64,
    bh: usize,
) -> HeadGrads<T> {
    let inputs = &x.input;
    let (cb, nb, mb) = (&x.out.boundary.c, &x.out.boundary.n, &x.out.boundary.m);
    let (h, dh) = (&x.out.h, &x.dh);
    let RecurrentShape {
        t, dk, dv, chunk, ..
    } = *dims;
    let nc = dims.chunks();
    let (csz, eps) = (dk * dv, T::of(eps));
    let c_at = |ci: usize| &cb[(bh * (nc + 1) + ci) * csz..(bh * (nc + 1) + ci + 1) * csz];
    let n_at = |ci: usize| &nb[(bh * (nc + 1) + ci) * dk..(bh * (nc + 1) + ci + 1) * dk];
    let m_at = |ci: usize| mb[bh * (nc + 1) + ci];
    let mut state = StateGrads {
        dc: x.d_final.c[bh * csz..(bh + 1) * csz].to_vec(),
        dn: x.d_final.n[bh * dk..(bh + 1) * dk].to_vec(),
    };
    let scale = T::of(1.0 / (dk as f64).sqrt());
    let mut g = HeadGrads {
        dq: vec![T::zero(); t * dk],
        dk: vec![T::zero(); t * dk],
        dv: vec![T::zero(); t * dv],
        di: vec![T::zero(); t],
        df: vec![T::zero(); t],
        dc0: Vec::new(),
        dn0: Vec::new(),
        dm0: T::zero(),
    };
    // The stabilizers' own gradient, before it is sent along the recurrence of m.
    let mut dm = vec![T::zero(); t];
    dm[t - 1] = x.d_final.m[bh] - dot(&state.dc, c_at(nc)) - dot(&state.dn, n_at(nc));
    let mut dlf = vec![T::zero(); t];
    for ci in (0..nc).rev() {
        let t0 = ci * chunk;
        let len = chunk.min(t - t0);
        let steps = t0..t0 + len;
        let (c_prev, n_prev) = (c_at(ci), n_at(ci));
        let ch = Chunk::new(inputs, dims, bh, t0, len, c_prev, n_prev, m_at(ci));
        let hr = rows(h, dims, dv, bh, t0, len);
        let dhr = rows(dh, dims, dv, bh, t0, len);
        let out = output_backward(&ch, &hr, &dhr, dv, eps, &mut dm[steps.clone()]);
        let qkv = qkv_backward(&ch, &out, c_prev, n_prev, &state, dims);
        let (di, dlf) = (&mut g.di[steps.clone()], &mut dlf[steps]);
        gate_backward(&ch, &out, &qkv, c_prev, n_prev, &state, dims, di, dlf);
        carry_state(&ch, &out, dims, &mut state);
        for (o, &d) in g.dq[t0 * dk..(t0 + len) * dk].iter_mut().zip(&qkv.dq) {
            *o = d * scale;
        }
        g.dk[t0 * dk..(t0 + len) * dk].copy_from_slice(&qkv.dk);
        g.dv[t0 * dv..(t0 + len) * dv].copy_from_slice(&qkv.dv);
    }
    // The initial state: C0 stands for exp(m0) times a stabilizer-free state.
    let gm = dot(&state.dc, c_at(0)) + dot(&state.dn, n_at(0));
    let i = rows(&inputs.i, dims, 1, bh, 0, t);
    let f = rows(&inputs.f, dims, 1, bh, 0, t);
    let lf: Vec<T> = f.iter().map(|&v| log_sigmoid(v)).collect();
    let dm0 = stabilizer_backward(&i, &lf, m_at(0), &dm, &mut g.di, &mut dlf);
    for s in 0..t {
        g.df[s] = dlf[s] * sigmoid(-f[s]);
    }
    g.dc0 = state.dc;
    g.dn0 = state.dn;
    g.dm0 = gm + dm0;
    g
}

/// The gradient of the state at a chunk's end (at the start of the backward, of the final
/// state), `[Dk, Dv]` and `[Dk]`.
struct StateGrads<T> {
    dc: Vec<T>,
    dn: Vec<T>,
}

/// The gradients of a chunk's outputs `h_j = num_j / (den_j + eps)` with respect to the
/// numerator, `dnum` `[L, Dv]`, and to `q_j^T n_j`, `dnq` `[L]`.
struct OutputGrads<T> {
    dnum: Vec<T>,
    dnq: Vec<T>,
}

/// The gradient through a chunk's normalization, from its outputs `h` and their gradient `dh`
/// (`[L, Dv]`). The denominator `max(|q_j^T n_j|, exp(-m_j))` passes its gradient to `q_j^T n_j`
/// only where that strictly won (ties go to exp(-m)); each step's stabilizer gets its share
/// through eps, added into `dm` (`[L]`).
fn output_backward<T: Real>(
    ch: &Chunk<T>,
    h: &[T],
    dh: &[T],
    dv: usize,
    eps: T,
    dm: &mut [T],
) -> OutputGrads<T> {
    let len = ch.len;
    let mut dnum = vec![T::zero(); len * dv];
    let mut dnq = vec![T::zero(); len];
    for j in 0..len {
        let r = (ch.den[j] + eps).recip();
        let row = j * dv..(j + 1) * dv;
        let dden = -dot(&dh[row.clone()], &h[row.clone()]) * r;
        dm[j] = dm[j] + eps * dden;
        if ch.nq[j].abs() > (-ch.m[j]).exp() {
            dnq[j] = if ch.nq[j] > T::zero() { dden } else { -dden };
        }
        for (d, &y) in dnum[row.clone()].iter_mut().zip(&dh[row]) {
            *d = y * r;
        }
    }
    OutputGrads { dnum, dnq }
}

/// A chunk's gradients of q (still scaled), k and v, and of its log weights: those of the
/// scores `p = w ⊙ q k^T` (`dlogw` `[L, L]`) and of each step's weight in the end state
/// (`dlog_end` `[L]`).
struct QkvGrads<T> {
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dlogw: Vec<T>,
    dlog_end: Vec<T>,
}

/// The gradients of a chunk's q, k and v: through the numerator `p v + a_j q_j C_prev` and
/// `q_j^T n_j = sum_s p_js + a_j q_j · n_prev`, and through the chunk's share of the state at
/// its end, `C_end = a_e C_prev + K^T diag(w_e) V` (n likewise), whose gradient is `state`.
fn qkv_backward<T: Real>(
    ch: &Chunk<T>,
    out: &OutputGrads<T>,
    c_prev: &[T],
    n_prev: &[T],
    state: &StateGrads<T>,
    dims: &RecurrentShape,
) -> QkvGrads<T> {
    let (len, dk, dv) = (ch.len, dims.dk, dims.dv);
    let (dnum, dnq) = (&out.dnum, &out.dnq);
    let (dc, dn) = (&state.dc, &state.dn);
    // dp: from the numerator, and from q^T n (every s <= j), zero above the diagonal.
    let mut dp = mm(dnum, false, &ch.v, true, len, dv, len);
    for j in 0..len {
        for s in 0..len {
            let e = &mut dp[j * len + s];
            *e = if s <= j { *e + dnq[j] } else { T::zero() };
        }
    }
    let ds: Vec<T> = dp.iter().zip(&ch.w).map(|(&d, &w)| d * w).collect();
    let dlogw: Vec<T> = dp.iter().zip(&ch.p).map(|(&d, &p)| d * p).collect();
    let mut dq = mm(&ds, false, &ch.k, false, len, len, dk);
    let dq_state = mm(dnum, false, c_prev, true, len, dv, dk);
    for j in 0..len {
        let row = &mut dq[j * dk..(j + 1) * dk];
        axpy(row, ch.a[j], &dq_state[j * dk..(j + 1) * dk]);
        axpy(row, ch.a[j] * dnq[j], n_prev);
    }
    let mut dkr = mm(&ds, true, &ch.q, false, len, len, dk);
    let mut dvr = mm(&ch.p, true, dnum, false, len, len, dv);
    // The chunk's contribution to the state at its end: C_end = a_e C_prev + K^T diag(w) V.
    let wl = ch.last_row();
    let kdc = mm(&ch.k, false, dc, false, len, dk, dv);
    let vdc = mm(&ch.v, false, dc, true, len, dv, dk);
    let mut dlog_end = vec![T::zero(); len];
    for s in 0..len {
        axpy(
            &mut dvr[s * dv..(s + 1) * dv],
            wl[s],
            &kdc[s * dv..(s + 1) * dv],
        );
        let dk_row = &mut dkr[s * dk..(s + 1) * dk];
        axpy(dk_row, wl[s], &vdc[s * dk..(s + 1) * dk]);
        axpy(dk_row, wl[s], dn);
        let (kr, vr) = (&ch.k[s * dk..(s + 1) * dk], &ch.v[s * dv..(s + 1) * dv]);
        dlog_end[s] = wl[s] * (dot(&kdc[s * dv..(s + 1) * dv], vr) + dot(kr, dn));
    }
    QkvGrads {
        dq,
        dk: dkr,
        dv: dvr,
        dlogw,
        dlog_end,
    }
}

/// The log weights' gradients to the gates, the stabilizers held fixed: with
/// `log w_js = i_s + F_j - F_s - m_j`, each adds to `di[s]` and to the running sums of log
/// forget gates `F`, whose gradient, summed back (`F_j` is the sum of `lf` up to j), is the
/// chunk's `dlf` (`[L]` each). The carried state's weights `a_j = exp(m_prev + F_j - m_j)` add
/// to `F` too.
fn gate_backward<T: Real>(
    ch: &Chunk<T>,
    out: &OutputGrads<T>,
    qkv: &QkvGrads<T>,
    c_prev: &[T],
    n_prev: &[T],
    state: &StateGrads<T>,
    dims: &RecurrentShape,
    di: &mut [T],
    dlf: &mut [T],
) {
    let (len, dv) = (ch.len, dims.dv);
    let (dnum, dnq) = (&out.dnum, &out.dnq);
    let (dlogw, dlog_end) = (&qkv.dlogw, &qkv.dlog_end);
    // F_j - F_s is zero on the diagonal and for the last step's share of the end state:
    // their terms to F cancel exactly, so they are left out, not summed and subtracted
    // (under strong decay they are most of each sum and their rounding dwarfs the true dF).
    let mut dfcum = vec![T::zero(); len];
    for j in 0..len {
        let dlog_a = ch.a[j]
            * (dot(&dnum[j * dv..(j + 1) * dv], &ch.qc[j * dv..(j + 1) * dv]) + dnq[j] * ch.qn[j]);
        dfcum[j] = dfcum[j] + dlog_a;
        for s in 0..=j {
            let d = dlogw[j * len + s];
            if s < j {
                dfcum[j] = dfcum[j] + d;
                dfcum[s] = dfcum[s] - d;
            }
            di[s] = di[s] + d;
        }
    }
    let a_end = ch.a[len - 1];
    let dlog_carry = a_end * (dot(&state.dc, c_prev) + dot(&state.dn, n_prev));
    let last = len - 1;
    dfcum[last] = dfcum[last] + dlog_carry + dlog_end[..last].iter().copied().sum::<T>();
    for s in 0..len {
        if s < last {
            dfcum[s] = dfcum[s] - dlog_end[s];
        }
        di[s] = di[s] + dlog_end[s];
    }
    dlf.copy_from_slice(&reverse_cumsum(&dfcum));
}

/// Carries the state's gradient from a chunk's end to its start: the end state is
/// `a_e C_prev + ...` and each output read `a_j q_j C_prev` (and `a_j q_j · n_prev`).
fn carry_state<T: Real>(
    ch: &Chunk<T>,
    out: &OutputGrads<T>,
    dims: &RecurrentShape,
    state: &mut StateGrads<T>,
) {
    let (len, dk) = (ch.len, dims.dk);
    let a_end = ch.a[len - 1];
    let qa = scale_rows(&ch.q, &ch.a, dk);
    let dc_in = mm(&qa, true, &out.dnum, false, dk, len, dims.dv);
    for (d, add) in state.dc.iter_mut().zip(dc_in) {
        *d = a_end * *d + add;
    }
    for (e, d) in state.dn.iter_mut().enumerate() {
        *d = a_end * *d + (0..len).map(|j| qa[j * dk + e] * out.dnq[j]).sum::<T>();
    }
}

/// The stabilizers' own path: their gradient `dm` (`[T]`) goes back along
/// `m_t = max(lf_t + m_{t-1}, i_t)` to whichever side won each max, adding to `dlf` or `di`.
/// Returns what reaches the initial stabilizer `m0`.
fn stabilizer_backward<T: Real>(
    i: &[T],
    lf: &[T],
    m0: T,
    dm: &[T],
    di: &mut [T],
    dlf: &mut [T],
) -> T {
    let t = dm.len();
    let mut ms = Vec::with_capacity(t);
    let mut prev = m0;
    for s in 0..t {
        prev = (lf[s] + prev).max(i[s]);
        ms.push(prev);
    }
    let mut carry = T::zero();
    for s in (0..t).rev() {
        carry = carry + dm[s];
        let before = if s == 0 { m0 } else { ms[s - 1] };
        if lf[s] + before > i[s] {
            dlf[s] = dlf[s] + carry;
        } else {
            di[s] = di[s] + carry;
            carry = T::zero();
        }
    }
    carry
}
