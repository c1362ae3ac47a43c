//! The plain layers: Linear (no bias; weight `[in, out]`, so `y = x W`), Embedding, RMSNorm and
//! the SwiGLU MLP. Each is a handful of [`ParamId`]s and a `forward` over tape ops.
use crate::params::{Init, ParamId, Params, Weights};
use swax_autograd::Tape;
use swax_tensor::{Result, Tensor};

/// The standard deviation of every projection's initial weights (GPT-2's).
pub const INIT_STD: f64 = 0.02;

#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub w: ParamId,
    pub d_in: usize,
    pub d_out: usize,
}

impl Linear {
    pub fn new(p: &mut Params, name: &str, d_in: usize, d_out: usize, std: f64) -> Result<Linear> {
        let w = p.add(
            format!("{name}.weight"),
            vec![d_in, d_out],
            Init::Normal(std),
        )?;
        Ok(Linear { w, d_in, d_out })
    }

    /// `x W` over the last axis of x `[.., in]`.
    pub fn forward(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        let tape = w.tape();
        let dims = x.dims().to_vec();
        let rows = dims[..dims.len() - 1].iter().product::<usize>();
        let y = tape.matmul(&tape.reshape(x, vec![rows, self.d_in])?, w.get(self.w))?;
        let mut out = dims;
        *out.last_mut().expect("x has an axis") = self.d_out;
        tape.reshape(&y, out)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Embedding {
    pub table: ParamId,
}

impl Embedding {
    pub fn new(p: &mut Params, name: &str, vocab: usize, d: usize) -> Result<Embedding> {
        let table = p.add(
            format!("{name}.weight"),
            vec![vocab, d],
            Init::Normal(INIT_STD),
        )?;
        Ok(Embedding { table })
    }

    /// Rows of the table for U32 ids `[..]`: `[.., d]`.
    pub fn forward(&self, w: &Weights, ids: &Tensor) -> Result<Tensor> {
        w.tape().embedding(w.get(self.table), ids)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct RmsNorm {
    pub weight: ParamId,
    pub eps: f64,
}

impl RmsNorm {
    pub fn new(p: &mut Params, name: &str, d: usize, eps: f64) -> Result<RmsNorm> {
        let weight = p.add(format!("{name}.weight"), vec![d], Init::Const(1.0))?;
        Ok(RmsNorm { weight, eps })
    }

    pub fn forward(&self, w: &Weights, x: &Tensor) -> Result<Tensor> {
        w.tape().rms_norm(x, w.get(self.weight), self.eps)
    }

    /// `(skip, norm(x))` for a residual branch, `skip` being x: see `Tape::residual_rms_norm`.
    pub fn forward_residual(&self, w: &Weights, x: &Tensor) -> Result<(Tensor, Tensor)> {
        w.tape().residual_rms_norm(x, w.get(self.weight), self.eps)
    }
}

/// `down(silu(x W_gate) * x W_up)`, gate and up as one `[C, 2F]` matmul, of x normalized by the
/// block's RMSNorm, added to the residual stream x.
#[derive(Clone, Copy, Debug)]
pub struct SwiGlu {
    pub gate_up: Linear,
    pub down: Linear,
    pub hidden: usize,
}

impl SwiGlu {
    /// `out_std` initializes the down projection (scaled down with depth by the model).
    pub fn new(p: &mut Params, name: &str, d: usize, hidden: usize, out_std: f64) -> Result<Self> {
        Ok(SwiGlu {
            gate_up: Linear::new(p, &format!("{name}.gate_up"), d, 2 * hidden, INIT_STD)?,
            down: Linear::new(p, &format!("{name}.down"), hidden, d, out_std)?,
            hidden,
        })
    }

    /// `x + ` the MLP of `norm(x)`, x `[.., C]`.
    pub fn forward(&self, w: &Weights, norm: &RmsNorm, x: &Tensor) -> Result<Tensor> {
        let tape = w.tape();
        let c = self.gate_up.d_in;
        let x2 = tape.reshape(x, vec![x.numel() / c, c])?;
        let weights = [norm.weight, self.gate_up.w, self.down.w].map(|id| w.get(id));
        tape.reshape(&mlp(tape, &x2, weights, norm.eps)?, x.shape().clone())
    }
}

/// `x + swiglu(rms_norm(x, g) · w_gate_up) · w_down` over x `[N, C]`, as one node that keeps x
/// (the residual stream, kept anyway), the norm's per-row statistics and the pre-activation
/// `gu`; its backward recomputes the norm and `silu(gate) · up` (elementwise work, the latter in
/// the same pass as `gu`'s gradient) rather than memory holding them, as large as x and as half
/// of `gu`, from the forward to the backward. The residual is inside the node so that x's
/// gradient (`dy` plus the norm's) is summed in the norm's backward pass.
fn mlp(tape: &Tape, x: &Tensor, [g, w_gu, w_down]: [&Tensor; 3], eps: f64) -> Result<Tensor> {
    let (n, stats) = x.rms_norm(g, eps)?;
    let gu = n.matmul(w_gu)?;
    let y = x.add(&gu.swiglu()?.matmul(w_down)?)?;
    let saved = [x, g, w_gu, w_down].map(|t| t.clone());
    Ok(tape.record("mlp", &[x, g, w_gu, w_down], y, move |dy, _| {
        let [x, g, w_gu, w_down] = &saved;
        let (dgu, h) = gu.swiglu_backward(&dy.matmul_t(w_down, false, true)?)?;
        let dw_down = h.matmul_t(dy, true, false)?;
        let n = x.rms_norm(g, eps)?.0;
        let dw_gu = n.matmul_t(&dgu, true, false)?;
        let dn = dgu.matmul_t(w_gu, false, true)?;
        let (dx, dg) = x.rms_norm_backward(g, &stats, &dn, Some(dy))?;
        Ok(vec![Some(dx), Some(dg), Some(dw_gu), Some(dw_down)])
    }))
}
