//! The decoding steps on the CPU (the spec: `mod.rs`), in f32 for f32 and bf16 data and in f64
//! for f64: the reference the CUDA kernels of `decode.cu` are tested against, computing the same
//! sums in the same order per row and head.
use super::{
    AttendIn, AttendShape, ConvStep, GatedDeltaStep, MlstmStep, RlaStepIn, SplitRope, StepShape,
    Stepped,
};
use crate::mixers::mlstm::MlstmState;
use swax_tensor::backend::Backend;
use swax_tensor::cpu::{CpuStorage, Real};
use swax_tensor::{DType, Error, Result, Tensor};

/// Added to |x|^2 under the square root of the L2 normalization of q and k (the chunkwise
/// kernels' `NORM_EPS`).
const NORM_EPS: f64 = 1e-6;

/// `x` as data of `dtype` holds it: rounded to bf16 for bf16.
fn rounded<T: Real>(x: T, dtype: DType) -> T {
    match dtype {
        DType::BF16 => T::of(f64::from(half::bf16::from_f64(x.to_f64().unwrap_or(0.0)))),
        _ => x,
    }
}

/// q, k, v of every row and head `[B, H, 2 Dk + Dv]` after `silu(conv)`, rounded to `dtype`, and
/// the next tail.
fn conv<T: Real>(x: &ConvStep<&[T]>, d: &StepShape, dtype: DType) -> (Vec<T>, Vec<T>) {
    let (c, k) = (d.channels(), d.taps);
    let mut tail = vec![T::zero(); d.b * (k - 1) * c];
    let per = 2 * d.dk + d.dv;
    let mut heads = vec![T::zero(); d.b * d.h * per];
    for b in 0..d.b {
        let at = |j: usize, ch: usize| match j + 1 == k {
            true => x.x[b * c + ch],
            false => x.tail[(b * (k - 1) + j) * c + ch],
        };
        for ch in 0..c {
            let sum = (0..k).fold(T::zero(), |s, j| s + x.weight[ch * k + j] * at(j, ch));
            let y = rounded(sum / (T::one() + (-sum).exp()), dtype);
            for j in 0..k - 1 {
                tail[(b * (k - 1) + j) * c + ch] = at(j + 1, ch);
            }
            // Channel ch is element e of part `part` (q, k, v) of head h.
            let (part, within) = match ch < 2 * d.h * d.dk {
                true => (ch / (d.h * d.dk), ch % (d.h * d.dk)),
                false => (2, ch - 2 * d.h * d.dk),
            };
            let width = if part == 2 { d.dv } else { d.dk };
            let (h, e) = (within / width, within % width);
            heads[(b * d.h + h) * per + part * d.dk + e] = y;
        }
    }
    (heads, tail)
}

/// [`conv`] of the step's stored operands: the heads' q, k, v and the next tail.
fn conv_of<T: Real>(
    op: &'static str,
    x: &ConvStep<&CpuStorage>,
    d: &StepShape,
) -> Result<(Vec<T>, Vec<T>)> {
    let (xs, weight, tail) = (
        T::read(op, x.x)?,
        T::read(op, x.weight)?,
        T::read(op, x.tail)?,
    );
    let read = ConvStep {
        x: &*xs,
        weight: &*weight,
        tail: &*tail,
    };
    Ok(conv(&read, d, x.x.dtype()))
}

/// Runs `f` in the type the data computes in.
macro_rules! by_dtype {
    ($op:expr, $dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::F64 => $f::<f64>($($arg),*),
            DType::F32 | DType::BF16 => $f::<f32>($($arg),*),
            dtype => Err(Error::UnsupportedDType { op: $op, dtype }),
        }
    };
}

pub(super) fn gated_delta_step(
    op: &'static str,
    x: &GatedDeltaStep<&CpuStorage>,
    d: &StepShape,
) -> Result<Stepped<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &GatedDeltaStep<&CpuStorage>,
        d: &StepShape,
    ) -> Result<Stepped<CpuStorage>> {
        let dtype = x.conv.x.dtype();
        let (heads, tail) = conv_of::<T>(op, &x.conv, d)?;
        let (beta, g, s) = (
            T::read(op, x.beta)?,
            T::read(op, x.g)?,
            T::read(op, x.state)?,
        );
        let (dk, dv, per) = (d.dk, d.dv, 2 * d.dk + d.dv);
        let mut out = vec![T::zero(); d.b * d.h * dv];
        let mut next = vec![T::zero(); s.len()];
        for bh in 0..d.b * d.h {
            let hv = &heads[bh * per..(bh + 1) * per];
            let (q, k, v) = (&hv[..dk], &hv[dk..2 * dk], &hv[2 * dk..]);
            let norm = |x: &[T]| {
                (x.iter().fold(T::zero(), |a, &e| a + e * e) + T::of(NORM_EPS))
                    .sqrt()
                    .recip()
            };
            let qs = norm(q) / T::of(dk as f64).sqrt();
            let ks = norm(k);
            let (a, bt) = (g[bh].exp(), beta[bh]);
            let (st, nx) = (
                &s[bh * dk * dv..],
                &mut next[bh * dk * dv..(bh + 1) * dk * dv],
            );
            for j in 0..dv {
                let ksum = (0..dk).fold(T::zero(), |acc, i| acc + k[i] * st[i * dv + j]);
                let u = bt * (v[j] - a * ks * ksum);
                let mut o = T::zero();
                for i in 0..dk {
                    nx[i * dv + j] = a * st[i * dv + j] + ks * k[i] * u;
                    o = o + q[i] * nx[i * dv + j];
                }
                out[bh * dv + j] = o * qs;
            }
        }
        Ok(Stepped {
            out: T::store(out, dtype),
            tail: T::store(tail, dtype),
            state: vec![T::store(next, DType::F32)],
        })
    }
    by_dtype!(op, x.conv.x.dtype(), run(op, x, d))
}

pub(super) fn mlstm_step(
    op: &'static str,
    x: &MlstmStep<&CpuStorage>,
    d: &StepShape,
    eps: f64,
) -> Result<Stepped<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &MlstmStep<&CpuStorage>,
        d: &StepShape,
        eps: f64,
    ) -> Result<Stepped<CpuStorage>> {
        let dtype = x.conv.x.dtype();
        let (heads, tail) = conv_of::<T>(op, &x.conv, d)?;
        let (ig, fg) = (T::read(op, x.i)?, T::read(op, x.f)?);
        let s = MlstmState {
            c: T::read(op, x.state.c)?,
            n: T::read(op, x.state.n)?,
            m: T::read(op, x.state.m)?,
        };
        let (dk, dv, per) = (d.dk, d.dv, 2 * d.dk + d.dv);
        let mut out = vec![T::zero(); d.b * d.h * dv];
        let mut c = vec![T::zero(); s.c.len()];
        let mut n = vec![T::zero(); s.n.len()];
        let mut m = vec![T::zero(); s.m.len()];
        let qs = T::of(dk as f64).sqrt().recip();
        for bh in 0..d.b * d.h {
            let hv = &heads[bh * per..(bh + 1) * per];
            let (q, k, v) = (&hv[..dk], &hv[dk..2 * dk], &hv[2 * dk..]);
            let (i_t, f_t, m0) = (ig[bh], fg[bh], s.m[bh]);
            let lf = f_t.min(T::zero()) - (-f_t.abs()).exp().ln_1p();
            let m1 = (lf + m0).max(i_t);
            let (decay, input) = ((lf + m0 - m1).exp(), (i_t - m1).exp());
            m[bh] = m1;
            let mut qn = T::zero();
            for i in 0..dk {
                n[bh * dk + i] = decay * s.n[bh * dk + i] + input * k[i];
                qn = qn + q[i] * n[bh * dk + i];
            }
            let den = (qn * qs).abs().max((-m1).exp()) + T::of(eps);
            let (c0, c1) = (
                &s.c[bh * dk * dv..],
                &mut c[bh * dk * dv..(bh + 1) * dk * dv],
            );
            for j in 0..dv {
                let mut o = T::zero();
                for i in 0..dk {
                    c1[i * dv + j] = decay * c0[i * dv + j] + k[i] * input * v[j];
                    o = o + q[i] * c1[i * dv + j];
                }
                out[bh * dv + j] = o * qs / den;
            }
        }
        let f32s = |v| T::store(v, DType::F32);
        Ok(Stepped {
            out: T::store(out, dtype),
            tail: T::store(tail, dtype),
            state: vec![f32s(c), f32s(n), f32s(m)],
        })
    }
    by_dtype!(op, x.conv.x.dtype(), run(op, x, d, eps))
}

pub(super) fn attend(
    op: &'static str,
    x: &AttendIn<&CpuStorage>,
    d: &AttendShape,
    scale: f64,
) -> Result<CpuStorage> {
    fn run<T: Real>(
        op: &'static str,
        x: &AttendIn<&CpuStorage>,
        d: &AttendShape,
        scale: f64,
    ) -> Result<CpuStorage> {
        let (q, k, v) = (T::read(op, x.q)?, T::read(op, x.k)?, T::read(op, x.v)?);
        let dh = d.d;
        let mut out = vec![T::zero(); d.b * d.h * dh];
        let mut p = vec![T::zero(); d.n];
        for b in 0..d.b {
            for h in 0..d.h {
                let hk = h / (d.h / d.hkv);
                let row = |t: usize| ((b * d.slots + t) * d.hkv + hk) * dh;
                let qh = &q[(b * d.h + h) * dh..][..dh];
                for (t, pt) in p.iter_mut().enumerate() {
                    let key = &k[row(t)..][..dh];
                    *pt =
                        T::of(scale) * qh.iter().zip(key).fold(T::zero(), |a, (&x, &y)| a + x * y);
                }
                let mx = p.iter().fold(T::neg_infinity(), |a, &x| a.max(x));
                p.iter_mut().for_each(|x| *x = (*x - mx).exp());
                let l = p.iter().fold(T::zero(), |a, &x| a + x);
                let o = &mut out[(b * d.h + h) * dh..][..dh];
                for (t, &pt) in p.iter().enumerate() {
                    for (oe, &ve) in o.iter_mut().zip(&v[row(t)..][..dh]) {
                        *oe = *oe + pt * ve;
                    }
                }
                o.iter_mut().for_each(|x| *x = *x / l);
            }
        }
        Ok(T::store(out, x.q.dtype()))
    }
    by_dtype!(op, x.q.dtype(), run(op, x, d, scale))
}

/// `phi(x) = [softmax(x), softmax(-x)]` of one head's x, each feature rounded to `dtype` (the
/// pieces path computes phi in the data's dtype).
fn phi<T: Real>(x: &[T], dtype: DType) -> Vec<T> {
    let hi = x.iter().fold(T::neg_infinity(), |a, &e| a.max(e));
    let lo = x.iter().fold(T::infinity(), |a, &e| a.min(e));
    let up: Vec<T> = x.iter().map(|&e| (e - hi).exp()).collect();
    let down: Vec<T> = x.iter().map(|&e| (lo - e).exp()).collect();
    let (zu, zd) = (
        up.iter().fold(T::zero(), |a, &e| a + e),
        down.iter().fold(T::zero(), |a, &e| a + e),
    );
    let up = up.into_iter().map(|e| rounded(e / zu, dtype));
    up.chain(down.into_iter().map(|e| rounded(e / zd, dtype)))
        .collect()
}

/// The slot is `d.n` (`mod.rs`).
pub(super) fn rla_step(
    op: &'static str,
    x: &RlaStepIn<&CpuStorage>,
    d: &AttendShape,
) -> Result<(CpuStorage, CpuStorage)> {
    fn run<T: Real>(
        op: &'static str,
        x: &RlaStepIn<&CpuStorage>,
        d: &AttendShape,
    ) -> Result<(CpuStorage, CpuStorage)> {
        let dtype = x.q.dtype();
        let (q, k, v) = (T::read(op, x.q)?, T::read(op, x.k)?, T::read(op, x.v)?);
        let mut s = T::read(op, x.state)?.into_owned();
        let (dh, f, group) = (d.d, 2 * d.d, d.h / d.hkv);
        let mut out = vec![T::zero(); d.b * d.h * dh];
        for b in 0..d.b {
            for hk in 0..d.hkv {
                let at = ((b * d.slots + d.n) * d.hkv + hk) * dh;
                let (fk, vs) = (phi(&k[at..at + dh], dtype), &v[at..at + dh]);
                let st = &mut s[(b * d.hkv + hk) * f * dh..][..f * dh];
                for i in 0..f {
                    for j in 0..dh {
                        st[i * dh + j] = st[i * dh + j] + fk[i] * vs[j];
                    }
                }
                for h in hk * group..(hk + 1) * group {
                    let row = (b * d.h + h) * dh;
                    let fq = phi(&q[row..row + dh], dtype);
                    for j in 0..dh {
                        out[row + j] = (0..f).fold(T::zero(), |a, i| a + fq[i] * st[i * dh + j]);
                    }
                }
            }
        }
        Ok((T::store(out, dtype), T::store(s, x.state.dtype())))
    }
    by_dtype!(op, x.q.dtype(), run(op, x, d))
}

/// `split_rope` on the CPU: the ops it fuses (the split of the row into heads, then RoPE of q
/// and k), so that a CPU step computes what a piece of one token does.
pub(super) fn split_rope(qkv: &CpuStorage, d: &SplitRope) -> Result<[Tensor; 3]> {
    let (b, width) = (d.b, (d.h + 2 * d.hkv) * d.d);
    let x = Tensor::from_storage(qkv.clone(), vec![b, 1, width])?;
    // Heads `n` of the row from head `at` on, as `[B, 1, n, D]`.
    let heads = |at: usize, n: usize| x.narrow(-1, at * d.d, n * d.d)?.reshape(vec![b, 1, n, d.d]);
    let q = heads(0, d.h)?
        .rope(d.pos, d.theta)?
        .reshape(vec![b, d.h, d.d])?;
    let k = heads(d.h, d.hkv)?.rope(d.pos, d.theta)?;
    Ok([q, k, heads(d.h + d.hkv, d.hkv)?])
}
