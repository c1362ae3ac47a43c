//! The gated delta rule's chunkwise kernel on the CPU, in the WY/UT form, forward and backward
//! (the equations: `mod.rs`). The state is kept as `[Dk, Dv]` (the paper's S transposed).
//!
//! Within a chunk (local steps j, G_j the running sum of log decays, γ_j = exp(G_j)), write
//! `S_j = exp(g_j) S_{j-1} + k_j u_j^T` with the delta `u_j = beta_j (v_j - exp(g_j) S_{j-1}^T k_j)`.
//! Unrolled, the deltas solve a unit lower-triangular system `(I + A) U = diag(beta) V -
//! diag(beta γ) K S_0`, `A_js = beta_j exp(G_j - G_s) k_j·k_s` (s < j). With `T = (I + A)^-1` (by
//! forward substitution), `U = T diag(beta) V - (T diag(beta γ) K) S_0`; then
//! `O = diag(γ) Q S_0 + (exp(G_j - G_s) q_j·k_s)_{s<=j} U` and
//! `S_L = γ_L S_0 + K^T diag(exp(G_L - G_s)) U`. Decays enter only as `exp` of a difference of
//! running sums over s <= j, never above 1.
use super::{GatedDeltaBackward, GatedDeltaGrads, GatedDeltaIn, GatedDeltaOut};
use std::borrow::Cow;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_tensor::backend::Backend;
use swax_tensor::cpu::chunk::{
    axpy, dot, interleave, mm, per_head, reverse_cumsum, rows, scale_rows,
};
use swax_tensor::cpu::{CpuStorage, Real};
use swax_tensor::{DType, Error, Result};

/// Added to |x|^2 under the square root of the L2 normalization of q and k.
const NORM_EPS: f64 = 1e-6;

/// The operands as the type the kernel computes in.
type Values<'a, T> = GatedDeltaIn<Cow<'a, [T]>>;

/// The forward on storage of any float dtype: bf16 computed in f32, o rounded back, the boundary
/// states kept f32 (`Real::store` of `F32` keeps f32 as f32 and f64 as f64).
pub(super) fn forward(
    op: &'static str,
    x: &GatedDeltaIn<&CpuStorage>,
    dims: &RecurrentShape,
) -> Result<GatedDeltaOut<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &GatedDeltaIn<&CpuStorage>,
        dims: &RecurrentShape,
    ) -> Result<GatedDeltaOut<CpuStorage>> {
        let y = forward_values(&x.try_map(|s| T::read(op, s))?, dims);
        Ok(GatedDeltaOut {
            o: T::store(y.o, x.q.dtype()),
            boundary: T::store(y.boundary, DType::F32),
        })
    }
    match x.q.dtype() {
        DType::F64 => run::<f64>(op, x, dims),
        DType::F32 | DType::BF16 => run::<f32>(op, x, dims),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The backward on storage of any float dtype, the gradients in the inputs' dtype.
pub(super) fn backward(
    op: &'static str,
    x: &GatedDeltaBackward<&CpuStorage>,
    dims: &RecurrentShape,
) -> Result<GatedDeltaGrads<CpuStorage>> {
    fn run<T: Real>(
        op: &'static str,
        x: &GatedDeltaBackward<&CpuStorage>,
        dims: &RecurrentShape,
    ) -> Result<GatedDeltaGrads<CpuStorage>> {
        let dtype = x.input.q.dtype();
        let g = backward_values(&x.try_map(|s| T::read(op, s))?, dims);
        let out = |v: Vec<T>| T::store(v, dtype);
        Ok(GatedDeltaIn {
            q: out(g.q),
            k: out(g.k),
            v: out(g.v),
            beta: out(g.beta),
            g: out(g.g),
            state: out(g.state),
        })
    }
    match x.input.q.dtype() {
        DType::F64 => run::<f64>(op, x, dims),
        DType::F32 | DType::BF16 => run::<f32>(op, x, dims),
        dtype => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// One chunk of one head: what the forward computes and the backward recomputes.
struct Chunk<T> {
    len: usize,
    /// Raw q, k rows `[L, Dk]` and their inverse norms `[L]`.
    q_raw: Vec<T>,
    k_raw: Vec<T>,
    rq: Vec<T>,
    rk: Vec<T>,
    /// Normalized q (times 1/sqrt(Dk)) and k.
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    beta: Vec<T>,
    /// Running sum of log decays from the chunk's start and its exp.
    gcum: Vec<T>,
    gamma: Vec<T>,
    /// k k^T, A (strictly lower), T = (I + A)^-1 (unit lower), all `[L, L]`.
    kk: Vec<T>,
    a: Vec<T>,
    tri: Vec<T>,
    /// diag(beta) V, diag(beta γ) K, W = T · diag(beta γ) K, the deltas U.
    x: Vec<T>,
    y: Vec<T>,
    w: Vec<T>,
    u: Vec<T>,
    /// `exp(G_j - G_s) q_j·k_s` for s <= j, zero above.
    p: Vec<T>,
}

/// Each row of a `[rows, d]` tile divided by its norm (with `NORM_EPS`), and the inverse norms.
fn normalize<T: Real>(x: &[T], d: usize, scale: T) -> (Vec<T>, Vec<T>) {
    let r: Vec<T> = x
        .chunks(d)
        .map(|row| (dot(row, row) + T::of(NORM_EPS)).sqrt().recip())
        .collect();
    let scaled: Vec<T> = r.iter().map(|&r| r * scale).collect();
    (scale_rows(x, &scaled, d), r)
}

/// The gradient of `scale · x / sqrt(|x|^2 + eps)` per row, r the inverse norm:
/// `scale · (r dy - r^3 x (x·dy))`.
fn normalize_backward<T: Real>(x: &[T], r: &[T], dy: &[T], d: usize, scale: T) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for ((xr, dr), &r) in x.chunks(d).zip(dy.chunks(d)).zip(r) {
        let c = r * r * r * dot(xr, dr);
        out.extend(xr.iter().zip(dr).map(|(&x, &dy)| scale * (r * dy - c * x)));
    }
    out
}

impl<T: Real> Chunk<T> {
    fn new(
        x: &Values<T>,
        dims: &RecurrentShape,
        bh: usize,
        t0: usize,
        len: usize,
        s0: &[T],
    ) -> Self {
        let (dk, dv) = (dims.dk, dims.dv);
        let q_raw = rows(&x.q, dims, dk, bh, t0, len);
        let k_raw = rows(&x.k, dims, dk, bh, t0, len);
        let (q, rq) = normalize(&q_raw, dk, T::of(1.0 / (dk as f64).sqrt()));
        let (k, rk) = normalize(&k_raw, dk, T::one());
        let v = rows(&x.v, dims, dv, bh, t0, len);
        let beta = rows(&x.beta, dims, 1, bh, t0, len);
        let mut gcum = rows(&x.g, dims, 1, bh, t0, len);
        for j in 1..len {
            gcum[j] = gcum[j] + gcum[j - 1];
        }
        let gamma: Vec<T> = gcum.iter().map(|g| g.exp()).collect();
        let kk = mm(&k, false, &k, true, len, dk, len);
        let mut a = vec![T::zero(); len * len];
        for j in 0..len {
            for s in 0..j {
                a[j * len + s] = beta[j] * (gcum[j] - gcum[s]).exp() * kk[j * len + s];
            }
        }
        let tri = unit_lower_inverse(&a, len);
        let x_tile = scale_rows(&v, &beta, dv);
        let bg: Vec<T> = beta.iter().zip(&gamma).map(|(&b, &g)| b * g).collect();
        let y = scale_rows(&k, &bg, dk);
        let w = mm(&tri, false, &y, false, len, len, dk);
        let mut u = mm(&tri, false, &x_tile, false, len, len, dv);
        let ws = mm(&w, false, s0, false, len, dk, dv);
        for (u, ws) in u.iter_mut().zip(ws) {
            *u = *u - ws;
        }
        let mut p = mm(&q, false, &k, true, len, dk, len);
        for j in 0..len {
            for s in 0..len {
                let e = &mut p[j * len + s];
                *e = if s <= j {
                    *e * (gcum[j] - gcum[s]).exp()
                } else {
                    T::zero()
                };
            }
        }
        Chunk {
            len,
            q_raw,
            k_raw,
            rq,
            rk,
            q,
            k,
            v,
            beta,
            gcum,
            gamma,
            kk,
            a,
            tri,
            x: x_tile,
            y,
            w,
            u,
            p,
        }
    }

    /// `exp(G_L - G_s)`: each step's decay to the chunk's end.
    fn to_end(&self) -> Vec<T> {
        let last = self.gcum[self.len - 1];
        self.gcum.iter().map(|&g| (last - g).exp()).collect()
    }
}

/// `(I + A)^-1` for strictly lower-triangular `A` `[n, n]`, by forward substitution:
/// row j of the inverse is `e_j - sum_{s<j} A_js · row s`.
fn unit_lower_inverse<T: Real>(a: &[T], n: usize) -> Vec<T> {
    let mut t = vec![T::zero(); n * n];
    for j in 0..n {
        t[j * n + j] = T::one();
        for s in 0..j {
            let c = a[j * n + s];
            if c != T::zero() {
                let (done, row) = t.split_at_mut(j * n);
                axpy(&mut row[..s + 1], -c, &done[s * n..s * n + s + 1]);
            }
        }
    }
    t
}

fn forward_values<T: Real>(x: &Values<T>, dims: &RecurrentShape) -> GatedDeltaOut<Vec<T>> {
    let RecurrentShape { dk, dv, chunk, .. } = *dims;
    let heads = per_head(dims, |bh| {
        let mut s = x.state[bh * dk * dv..(bh + 1) * dk * dv].to_vec();
        let mut states = s.clone();
        let mut o = Vec::with_capacity(dims.t * dv);
        for t0 in (0..dims.t).step_by(chunk) {
            let len = chunk.min(dims.t - t0);
            let ch = Chunk::new(x, dims, bh, t0, len, &s);
            let qs = mm(&ch.q, false, &s, false, len, dk, dv);
            let pu = mm(&ch.p, false, &ch.u, false, len, len, dv);
            for j in 0..len {
                for e in 0..dv {
                    o.push(ch.gamma[j] * qs[j * dv + e] + pu[j * dv + e]);
                }
            }
            let kd = scale_rows(&ch.k, &ch.to_end(), dk);
            let add = mm(&kd, true, &ch.u, false, dk, len, dv);
            let g_end = ch.gamma[len - 1];
            for (s, add) in s.iter_mut().zip(add) {
                *s = g_end * *s + add;
            }
            states.extend_from_slice(&s);
        }
        (o, states)
    });
    let os: Vec<&[T]> = heads.iter().map(|r| &r.0[..]).collect();
    GatedDeltaOut {
        o: interleave(&os, dims, dv),
        boundary: heads.iter().flat_map(|r| r.1.iter().copied()).collect(),
    }
}

struct HeadGrads<T> {
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dbeta: Vec<T>,
    dg: Vec<T>,
    ds0: Vec<T>,
}

fn backward_values<T: Real>(
    x: &GatedDeltaBackward<Cow<[T]>>,
    dims: &RecurrentShape,
) -> GatedDeltaGrads<Vec<T>> {
    let heads = per_head(dims, |bh| head_backward(x, dims, bh));
    let field = |get: fn(&HeadGrads<T>) -> &[T], d: usize| {
        let hs: Vec<&[T]> = heads.iter().map(get).collect();
        interleave(&hs, dims, d)
    };
    GatedDeltaIn {
        q: field(|g| &g.dq, dims.dk),
        k: field(|g| &g.dk, dims.dk),
        v: field(|g| &g.dv, dims.dv),
        beta: field(|g| &g.dbeta, 1),
        g: field(|g| &g.dg, 1),
        state: heads.iter().flat_map(|g| g.ds0.iter().copied()).collect(),
    }
}

fn head_backward<T: Real>(
    x: &GatedDeltaBackward<Cow<[T]>>,
    dims: &RecurrentShape,
    bh: usize,
) -> HeadGrads<T> {
    let inputs = &x.input;
    let RecurrentShape {
        t, dk, dv, chunk, ..
    } = *dims;
    let (nc, ssz) = (dims.chunks(), dk * dv);
    let s_at = |ci: usize| &x.boundary[(bh * (nc + 1) + ci) * ssz..(bh * (nc + 1) + ci + 1) * ssz];
    let mut ds = x.d_final[bh * ssz..(bh + 1) * ssz].to_vec();
    let mut g = HeadGrads {
        dq: vec![T::zero(); t * dk],
        dk: vec![T::zero(); t * dk],
        dv: vec![T::zero(); t * dv],
        dbeta: vec![T::zero(); t],
        dg: vec![T::zero(); t],
        ds0: Vec::new(),
    };
    let scale = T::of(1.0 / (dk as f64).sqrt());
    for ci in (0..nc).rev() {
        let t0 = ci * chunk;
        let len = chunk.min(t - t0);
        let s0 = s_at(ci);
        let ch = Chunk::new(inputs, dims, bh, t0, len, s0);
        let dout = rows(&x.d_out, dims, dv, bh, t0, len);
        let to_end = ch.to_end();
        let g_end = ch.gamma[len - 1];
        let mut dgcum = vec![T::zero(); len];
        // Outputs: O = diag(γ) Q S0 + P U, and the end state S_L = γ_L S0 + K^T diag(to_end) U.
        let mut du = mm(&ch.p, true, &dout, false, len, len, dv);
        let kds = mm(&ch.k, false, &ds, false, len, dk, dv);
        // Each log decay's gradient goes to dgcum twice, + at the later step and - at the
        // earlier: terms whose two steps coincide (the last step's here, the diagonal of dP ⊙ P
        // below) cancel and are left out, as under strong decay they dwarf the rest and their
        // rounding would stay in dg.
        for s in 0..len {
            let (kd, ur) = (&kds[s * dv..(s + 1) * dv], &ch.u[s * dv..(s + 1) * dv]);
            if s + 1 < len {
                let dlog = to_end[s] * dot(kd, ur);
                dgcum[len - 1] = dgcum[len - 1] + dlog;
                dgcum[s] = dgcum[s] - dlog;
            }
            axpy(&mut du[s * dv..(s + 1) * dv], to_end[s], kd);
        }
        dgcum[len - 1] = dgcum[len - 1] + g_end * dot(&ds, s0);
        let mut dp = mm(&dout, false, &ch.u, true, len, dv, len);
        for j in 0..len {
            for s in 0..len {
                let (e, p) = (&mut dp[j * len + s], ch.p[j * len + s]);
                if s != j {
                    let dlog = *e * p;
                    dgcum[j] = dgcum[j] + dlog;
                    dgcum[s] = dgcum[s] - dlog;
                }
                *e = if s <= j {
                    *e * (ch.gcum[j] - ch.gcum[s]).exp()
                } else {
                    T::zero()
                };
            }
        }
        let mut dq = mm(&dp, false, &ch.k, false, len, len, dk);
        let mut dk_n = mm(&dp, true, &ch.q, false, len, len, dk);
        let qs = mm(&ch.q, false, s0, false, len, dk, dv);
        let dos = mm(&dout, false, s0, true, len, dv, dk);
        let uds = mm(&ch.u, false, &ds, true, len, dv, dk);
        for j in 0..len {
            axpy(
                &mut dq[j * dk..(j + 1) * dk],
                ch.gamma[j],
                &dos[j * dk..(j + 1) * dk],
            );
            axpy(
                &mut dk_n[j * dk..(j + 1) * dk],
                to_end[j],
                &uds[j * dk..(j + 1) * dk],
            );
            let d = ch.gamma[j] * dot(&dout[j * dv..(j + 1) * dv], &qs[j * dv..(j + 1) * dv]);
            dgcum[j] = dgcum[j] + d;
        }
        // The state gradient to the chunk before, first the parts through O and S_L.
        let qg = scale_rows(&ch.q, &ch.gamma, dk);
        let mut ds_prev = mm(&qg, true, &dout, false, dk, len, dv);
        let wdu = mm(&ch.w, true, &du, false, dk, len, dv);
        for ((d, &carry), wdu) in ds_prev.iter_mut().zip(&ds).zip(wdu) {
            *d = *d + g_end * carry - wdu;
        }
        // U = T X - W S0 with X = diag(beta) V, W = T Y, Y = diag(beta γ) K.
        let dw: Vec<T> = mm(&du, false, s0, true, len, dv, dk)
            .into_iter()
            .map(|v| -v)
            .collect();
        let mut dtri = mm(&du, false, &ch.x, true, len, dv, len);
        let dty = mm(&dw, false, &ch.y, true, len, dk, len);
        for (d, e) in dtri.iter_mut().zip(dty) {
            *d = *d + e;
        }
        let dx = mm(&ch.tri, true, &du, false, len, len, dv);
        let dy = mm(&ch.tri, true, &dw, false, len, len, dk);
        let mut dbeta = vec![T::zero(); len];
        let mut dv_r = vec![T::zero(); len * dv];
        for j in 0..len {
            let (dxr, dyr) = (&dx[j * dv..(j + 1) * dv], &dy[j * dk..(j + 1) * dk]);
            let bg = ch.beta[j] * ch.gamma[j];
            let dyk = dot(dyr, &ch.k[j * dk..(j + 1) * dk]);
            dbeta[j] = dot(dxr, &ch.v[j * dv..(j + 1) * dv]) + ch.gamma[j] * dyk;
            dgcum[j] = dgcum[j] + bg * dyk;
            axpy(&mut dv_r[j * dv..(j + 1) * dv], ch.beta[j], dxr);
            axpy(&mut dk_n[j * dk..(j + 1) * dk], bg, dyr);
        }
        // T = (I + A)^-1: dA = -T^T dT T^T on the strictly lower part.
        let tdt = mm(&ch.tri, true, &dtri, false, len, len, len);
        let da = mm(&tdt, false, &ch.tri, true, len, len, len);
        let mut dkk = vec![T::zero(); len * len];
        for j in 0..len {
            for s in 0..j {
                let d = -da[j * len + s];
                let dlog = d * ch.a[j * len + s];
                dgcum[j] = dgcum[j] + dlog;
                dgcum[s] = dgcum[s] - dlog;
                let decay = (ch.gcum[j] - ch.gcum[s]).exp();
                dbeta[j] = dbeta[j] + d * decay * ch.kk[j * len + s];
                dkk[j * len + s] = d * ch.beta[j] * decay;
            }
        }
        let dkk_k = mm(&dkk, false, &ch.k, false, len, len, dk);
        let dkk_t_k = mm(&dkk, true, &ch.k, false, len, len, dk);
        for ((d, a), b) in dk_n.iter_mut().zip(dkk_k).zip(dkk_t_k) {
            *d = *d + a + b;
        }
        let dq_raw = normalize_backward(&ch.q_raw, &ch.rq, &dq, dk, scale);
        let dk_raw = normalize_backward(&ch.k_raw, &ch.rk, &dk_n, dk, T::one());
        g.dq[t0 * dk..(t0 + len) * dk].copy_from_slice(&dq_raw);
        g.dk[t0 * dk..(t0 + len) * dk].copy_from_slice(&dk_raw);
        g.dv[t0 * dv..(t0 + len) * dv].copy_from_slice(&dv_r);
        g.dbeta[t0..t0 + len].copy_from_slice(&dbeta);
        g.dg[t0..t0 + len].copy_from_slice(&reverse_cumsum(&dgcum));
        ds = ds_prev;
    }
    g.ds0 = ds;
    g
}
