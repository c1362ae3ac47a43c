//! RMSNorm and LayerNorm over the last axis, forward and backward, and xLSTM's gated head norm
//! (`kernels/norm.cu`).

use super::reduce::{reduce, AxisDims, ReduceOp};
use super::{
    check_device, check_dtype, check_len, check_like, launch, ptr_or_null, row_kernel, rows_of,
    to_u32, vector_rows, Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "norm",
    source: &[include_str!("../../kernels/norm.cu")],
};

/// Blocks per SM of the backward: each walks many rows, summing dw (and db) for the host to
/// reduce, so a few waves' worth fill the GPU without multiplying the partial sums.
const BWD_BLOCKS_PER_SM: u32 = 4;

/// The normalisation's parameters and saved statistics. `w` (and `b`) are of length n, f32 (in
/// a forward also the data's dtype, [`weights_dtype`]); `mean` and `rstd` are f32, one per row.
struct Params<'a> {
    w: &'a Buffer,
    b: Option<&'a Buffer>,
    eps: f32,
    center: bool,
}

/// Whether a forward over data `x` reads weights `w` as they are: f32, or bf16 for bf16 data
/// (norm.cu's `_wt_` kernels).
fn reads_as_is(x: &Buffer, w: &Buffer) -> bool {
    w.dtype() == DType::F32 || (w.dtype() == x.dtype() && x.dtype() == DType::BF16)
}

/// The dtype a forward reads `w` in, or the error naming weights it does not read.
fn weights_dtype(op: &'static str, x: &Buffer, w: &Buffer) -> Result<DType, CudaError> {
    match reads_as_is(x, w) {
        true => Ok(w.dtype()),
        false => Err(CudaError::invalid(
            op,
            format!(
                "weights of {} for {} data: f32, or bf16 for bf16 data",
                w.dtype(),
                x.dtype()
            ),
        )),
    }
}

/// Weights `w` as a norm's forward over `x` takes them: None where it reads them as they are,
/// else a copy cast to f32 (a launch the caller saves by holding them so).
pub fn forward_weights(
    dev: &CudaDevice,
    x: &Buffer,
    w: &Buffer,
) -> Result<Option<Buffer>, CudaError> {
    if reads_as_is(x, w) {
        return Ok(None);
    }
    let mut y = dev.alloc(DType::F32, w.len())?;
    super::cast::cast(dev, w, &mut y)?;
    Ok(Some(y))
}

fn check_params(
    op: &'static str,
    dev: &CudaDevice,
    p: &Params<'_>,
    n: usize,
    dtype: DType,
) -> Result<(), CudaError> {
    check_device(op, dev, &[p.w])?;
    check_dtype(op, "weight", p.w, dtype)?;
    check_len(op, "weight", p.w, n)?;
    if let Some(b) = p.b {
        check_device(op, dev, &[b])?;
        check_dtype(op, "bias", b, dtype)?;
        check_len(op, "bias", b, n)?;
    }
    Ok(())
}

fn check_stat(
    op: &'static str,
    dev: &CudaDevice,
    name: &str,
    s: &Buffer,
    rows: u32,
) -> Result<(), CudaError> {
    check_device(op, dev, &[s])?;
    check_dtype(op, name, s, DType::F32)?;
    check_len(op, name, s, rows as usize)
}

fn forward(
    op: &'static str,
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    p: Params<'_>,
    res: Option<&Buffer>,
    y: &mut Buffer,
    mean: Option<&mut Buffer>,
    rstd: &mut Buffer,
) -> Result<(), CudaError> {
    check_device(op, dev, &[x, y])?;
    check_like(op, "y", y, x)?;
    if let Some(r) = res {
        check_device(op, dev, &[r])?;
        check_like(op, "res", r, x)?;
    }
    let wt = weights_dtype(op, x, p.w)?;
    check_params(op, dev, &p, n, wt)?;
    let rows = rows_of(op, x, n)?;
    check_stat(op, dev, "rstd", rstd, rows)?;
    if let Some(m) = mean.as_deref() {
        check_stat(op, dev, "mean", m, rows)?;
    }
    let n = to_u32(op, "n", n)?;
    let (b, res_ptr, mean_ptr, center) = (
        ptr_or_null(p.b),
        ptr_or_null(res),
        ptr_or_null(mean.as_deref()),
        i32::from(p.center),
    );
    let vec = vector_rows(
        n,
        x.dtype(),
        &[x.device_ptr(), y.device_ptr(), p.w.device_ptr(), b, res_ptr],
    );
    let name = match wt {
        DType::F32 => row_kernel!(op, "norm_fwd", x.dtype(), vec)?,
        _ => row_kernel!(op, "norm_fwd_wt", x.dtype(), vec)?,
    };
    if rows == 0 {
        return Ok(());
    }
    // SAFETY: norm_fwd[_wt]_T(const T* x, const W* w, const W* b, const T* res, T* y, float*
    // mean_out, float* rstd_out, u32 rows, u32 n, float eps, int center), W f32 or (_wt) T as
    // checked; x, res (or null) and y hold rows * n, w and b (or null) n, mean (or null) and
    // rstd rows; the vectorised instantiation only where vector_rows holds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::rows(rows, n, x.dtype()),
            &[
                x, p.w, &b, &res_ptr, y, &mean_ptr, rstd, &rows, &n, &p.eps, &center,
            ],
        )
    }
}

/// The backward kernels' weight sums: each row of a block (`shape.block.1` of them) adds into
/// its own slice of `slice` floats of dynamic shared memory, whose bytes are returned (checked
/// against the device's limit), and each of `blocks` blocks leaves its sums as a row of `width`
/// floats in the buffer returned, for `reduce` over the axis returned. With no rows the kernel
/// does not run and the sums must come out zero: the buffer is zeroed then.
fn partial_sums(
    op: &'static str,
    dev: &CudaDevice,
    shape: &Launch,
    slice: usize,
    blocks: u32,
    width: usize,
    rows: u32,
) -> Result<(u32, Buffer, AxisDims), CudaError> {
    let shared = shape.block.1 as usize * slice * 4;
    if shared > dev.max_shared_optin() as usize {
        return Err(CudaError::invalid(
            op,
            format!(
                "{} rows of {slice} f32 sums need {shared} bytes of shared memory, the device allows {}",
                shape.block.1,
                dev.max_shared_optin()
            ),
        ));
    }
    let len = blocks as usize * width;
    let partial = if rows == 0 {
        dev.alloc_zeros(DType::F32, len)?
    } else {
        dev.alloc(DType::F32, len)?
    };
    let axis = AxisDims {
        outer: 1,
        n: blocks as usize,
        inner: width,
    };
    Ok((shared as u32, partial, axis))
}

/// Queues the backward; returns the per-block partial sums of dw (and db after them), laid
/// out [blocks, width] with width = n (2n with center).
fn backward(
    op: &'static str,
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    p: Params<'_>,
    mean: Option<&Buffer>,
    rstd: &Buffer,
    dy: &Buffer,
    dres: Option<&Buffer>,
    dx: &mut Buffer,
) -> Result<(Buffer, AxisDims), CudaError> {
    check_device(op, dev, &[x, dy, dx])?;
    check_like(op, "dy", dy, x)?;
    check_like(op, "dx", dx, x)?;
    if let Some(r) = dres {
        check_device(op, dev, &[r])?;
        check_like(op, "dres", r, x)?;
    }
    check_params(op, dev, &p, n, DType::F32)?;
    let rows = rows_of(op, x, n)?;
    check_stat(op, dev, "rstd", rstd, rows)?;
    if let Some(m) = mean {
        check_stat(op, dev, "mean", m, rows)?;
    }
    let n = to_u32(op, "n", n)?;
    let vec = vector_rows(
        n,
        x.dtype(),
        &[
            x.device_ptr(),
            dy.device_ptr(),
            dx.device_ptr(),
            p.w.device_ptr(),
            ptr_or_null(dres),
        ],
    );
    let name = row_kernel!(op, "norm_bwd", x.dtype(), vec)?;
    let shape = Launch::rows(rows, n, x.dtype());
    let width = if p.center { 2 * n as usize } else { n as usize };
    let blocks = shape.grid.0.min(dev.sm_count().max(1) * BWD_BLOCKS_PER_SM);
    let (shared, partial, axis) = partial_sums(op, dev, &shape, width, blocks, width, rows)?;
    if rows == 0 {
        return Ok((partial, axis));
    }
    let (mean_ptr, dres_ptr, center) = (ptr_or_null(mean), ptr_or_null(dres), i32::from(p.center));
    let cfg = Launch {
        grid: (blocks, 1, 1),
        shared,
        ..shape
    };
    // SAFETY: norm_bwd_T(const T* x, const float* w, const float* mean, const float* rstd,
    // const T* dy, const T* dres, T* dx, float* partial, u32 rows, u32 n, int center); x, dy,
    // dx (and dres, or null) hold rows * n, w n, mean (or null, only read with center) and rstd rows, partial
    // blocks * width; dynamic shared memory is blockDim.y * width floats; the vectorised
    // instantiation only where vector_rows holds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            cfg,
            &[
                x, p.w, &mean_ptr, rstd, dy, &dres_ptr, dx, &partial, &rows, &n, &center,
            ],
        )?;
    }
    Ok((partial, axis))
}

/// RMSNorm over rows of `n`: `y = x * rstd * w` with `rstd = 1 / sqrt(mean(x^2) + eps)`,
/// saved per row in `rstd` (f32). `x`, `y` f32 or bf16; `w` f32 of length n. With `res` (like
/// `x`), y is `res` plus the norm's, in the same pass.
pub fn rms_norm(
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    w: &Buffer,
    eps: f32,
    res: Option<&Buffer>,
    y: &mut Buffer,
    rstd: &mut Buffer,
) -> Result<(), CudaError> {
    let p = Params {
        w,
        b: None,
        eps,
        center: false,
    };
    forward("rms_norm", dev, x, n, p, res, y, None, rstd)
}

/// Backward of [`rms_norm`]: `dx` (like `x`) and `dw` (f32, length n, overwritten: the sum
/// over rows of `dy * x * rstd`, reduced deterministically in f32). With `dres` (like `x`: the
/// gradient reaching x by another path, a residual stream's), dx is that plus the norm's.
pub fn rms_norm_backward(
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    w: &Buffer,
    rstd: &Buffer,
    dy: &Buffer,
    dres: Option<&Buffer>,
    dx: &mut Buffer,
    dw: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "rms_norm_backward";
    check_device(OP, dev, &[dw])?;
    check_like(OP, "dw", dw, w)?;
    let p = Params {
        w,
        b: None,
        eps: 0.0,
        center: false,
    };
    let (partial, axis) = backward(OP, dev, x, n, p, None, rstd, dy, dres, dx)?;
    reduce(dev, ReduceOp::Sum, &partial, axis, dw, None)
}

/// LayerNorm over rows of `n`: `y = (x - mean) * rstd * w + b`, `rstd = 1 / sqrt(var + eps)`
/// (biased variance), saving `mean` and `rstd` per row (f32). `x`, `y` f32 or bf16; `w`, `b`
/// f32 of length n.
pub fn layer_norm(
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    w: &Buffer,
    b: &Buffer,
    eps: f32,
    y: &mut Buffer,
    mean: &mut Buffer,
    rstd: &mut Buffer,
) -> Result<(), CudaError> {
    let p = Params {
        w,
        b: Some(b),
        eps,
        center: true,
    };
    forward("layer_norm", dev, x, n, p, None, y, Some(mean), rstd)
}

/// Backward of [`layer_norm`]: `dx` (like `x`), and `dw`, `db` (f32, length n, overwritten:
/// sums over rows of `dy * xhat` and `dy`).
pub fn layer_norm_backward(
    dev: &CudaDevice,
    x: &Buffer,
    n: usize,
    w: &Buffer,
    mean: &Buffer,
    rstd: &Buffer,
    dy: &Buffer,
    dx: &mut Buffer,
    dw: &mut Buffer,
    db: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "layer_norm_backward";
    check_device(OP, dev, &[dw, db])?;
    check_like(OP, "dw", dw, w)?;
    check_like(OP, "db", db, w)?;
    let p = Params {
        w,
        b: None,
        eps: 0.0,
        center: true,
    };
    let (partial, axis) = backward(OP, dev, x, n, p, Some(mean), rstd, dy, None, dx)?;
    let mut sums = dev.alloc(DType::F32, 2 * n)?;
    reduce(dev, ReduceOp::Sum, &partial, axis, &mut sums, None)?;
    let bytes = n * 4;
    dev.copy_bytes(sums.device_ptr(), dw.device_ptr(), bytes)?;
    dev.copy_bytes(sums.device_ptr() + bytes as u64, db.device_ptr(), bytes)
}

/// Checks the gated head norm's buffers: x, o (and the others in `like`) alike, rows of n in
/// `heads` heads, w f32 `[heads, n]`. Returns (rows, n, heads) as u32.
fn check_gated(
    op: &'static str,
    dev: &CudaDevice,
    x: &Buffer,
    o: &Buffer,
    w: &Buffer,
    like: &[(&str, &Buffer)],
    heads: usize,
    n: usize,
    weights: DType,
) -> Result<(u32, u32, u32), CudaError> {
    check_device(op, dev, &[x, o, w])?;
    check_like(op, "o", o, x)?;
    for (name, b) in like {
        check_device(op, dev, &[b])?;
        check_like(op, name, b, x)?;
    }
    check_dtype(op, "weight", w, weights)?;
    check_len(op, "weight", w, heads * n)?;
    let rows = rows_of(op, x, n)?;
    if heads == 0 || !(rows as usize).is_multiple_of(heads) {
        return Err(CudaError::invalid(
            op,
            format!("{rows} rows do not split into {heads} heads"),
        ));
    }
    Ok((rows, to_u32(op, "n", n)?, to_u32(op, "heads", heads)?))
}

/// xLSTM's gated head norm over rows of `n`, row r in head `r % heads`: `y = (x - mean) * rstd
/// * w[head] * sigmoid(o)`, LayerNorm without an affine map of its own (biased variance, eps).
/// `x`, `o`, `y` f32 or bf16 alike; `w` `[heads, n]` f32, or bf16 for bf16 data.
pub fn gated_head_norm(
    dev: &CudaDevice,
    x: &Buffer,
    o: &Buffer,
    w: &Buffer,
    heads: usize,
    n: usize,
    eps: f32,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "gated_head_norm";
    let wt = weights_dtype(OP, x, w)?;
    let (rows, n, heads) = check_gated(OP, dev, x, o, w, &[("y", y)], heads, n, wt)?;
    let vec = vector_rows(n, x.dtype(), &[x, o, y, w].map(Buffer::device_ptr));
    let name = match wt {
        DType::F32 => row_kernel!(OP, "gated_head_norm_fwd", x.dtype(), vec)?,
        _ => row_kernel!(OP, "gated_head_norm_fwd_wt", x.dtype(), vec)?,
    };
    if rows == 0 {
        return Ok(());
    }
    // SAFETY: gated_head_norm_fwd[_wt]_T(const T* x, const T* o, const W* w, T* y, u32 rows,
    // u32 heads, u32 n, float eps), W f32 or (_wt) T as checked; x, o and y hold rows * n, w
    // heads * n, rows a multiple of heads; the vectorised instantiation only where vector_rows
    // holds.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch::rows(rows, n, x.dtype()),
            &[x, o, w, y, &rows, &heads, &n, &eps],
        )
    }
}

/// Backward of [`gated_head_norm`], the row statistics recomputed from x: `dx`, `do` (like
/// x) and `dw` (f32 `[heads, n]`, overwritten: the sum over each head's rows of
/// `dy * sigmoid(o) * xhat`, reduced deterministically in f32).
pub fn gated_head_norm_backward(
    dev: &CudaDevice,
    x: &Buffer,
    o: &Buffer,
    w: &Buffer,
    dy: &Buffer,
    heads: usize,
    n: usize,
    eps: f32,
    dx: &mut Buffer,
    d_o: &mut Buffer,
    dw: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "gated_head_norm_backward";
    let like = [("dy", dy), ("dx", &*dx), ("do", &*d_o)];
    let (rows, n, heads) = check_gated(OP, dev, x, o, w, &like, heads, n, DType::F32)?;
    check_device(OP, dev, &[dw])?;
    check_like(OP, "dw", dw, w)?;
    let ptrs = [x, o, w, dy, &*dx, &*d_o].map(Buffer::device_ptr);
    let name = row_kernel!(
        OP,
        "gated_head_norm_bwd",
        x.dtype(),
        vector_rows(n, x.dtype(), &ptrs)
    )?;
    let shape = Launch::rows(rows, n, x.dtype());
    // Blocks per head: as many as the head's rows fill, the whole grid a few waves.
    let blocks = (rows / heads)
        .div_ceil(shape.block.1)
        .min((dev.sm_count().max(1) * BWD_BLOCKS_PER_SM).div_ceil(heads))
        .max(1);
    let width = (heads * n) as usize;
    let (shared, partial, axis) = partial_sums(OP, dev, &shape, n as usize, blocks, width, rows)?;
    if rows > 0 {
        let cfg = Launch {
            grid: (blocks, heads, 1),
            shared,
            ..shape
        };
        // SAFETY: gated_head_norm_bwd_T(const T* x, const T* o, const float* w, const T* dy,
        // T* dx, T* d_o, float* partial, u32 rows, u32 heads, u32 n, float eps); x, o, dy, dx
        // and d_o hold rows * n (rows a multiple of heads, gridDim.y = heads), w heads * n,
        // partial blocks * heads * n; dynamic shared memory is blockDim.y * n floats; the
        // vectorised instantiation only where vector_rows holds.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                cfg,
                &[x, o, w, dy, dx, d_o, &partial, &rows, &heads, &n, &eps],
            )?;
        }
    }
    reduce(dev, ReduceOp::Sum, &partial, axis, dw, None)
}
