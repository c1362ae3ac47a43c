//! Reductions over the middle axis of an [outer, n, inner] view, cumsum, and the sum over
//! broadcast dimensions that broadcasting's backward needs (`kernels/reduce.cu`).

use super::{
    check_device, check_dtype, check_len, float_kernel, launch, ptr_or_null, row_kernel, to_u32,
    vector_rows, Launch,
};
use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};

pub(crate) const SOURCE: KernelSource = KernelSource {
    name: "reduce",
    source: &[include_str!("../../kernels/reduce.cu")],
};

/// Block shape of `reduce_cols` (`COLS_X`, `COLS_Y` in reduce.cu).
const COLS_X: u32 = 32;
const COLS_Y: u32 = 8;
/// Bytes of the kernel's `RState` (f32 m, f32 s, u32 i).
const STATE_BYTES: usize = 12;
/// Block size of the cumsum row kernel.
const SCAN_BLOCK: u32 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    /// Maximum; NaN wins; argmax (optional) takes the first maximal index.
    Max,
    /// log(sum(exp(x))), computed stably (online max).
    LogSumExp,
}

impl ReduceOp {
    fn code(self) -> i32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Mean => 1,
            ReduceOp::Max => 2,
            ReduceOp::LogSumExp => 3,
        }
    }
}

/// A contiguous buffer seen as `[outer, n, inner]` around the axis an op works along (reduces,
/// scans, scatters or selects along).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisDims {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl AxisDims {
    fn len(self) -> Option<usize> {
        self.outer.checked_mul(self.n)?.checked_mul(self.inner)
    }

    fn checked(self, op: &'static str, x: &Buffer) -> Result<(u32, u32, u32), CudaError> {
        if self.len() != Some(x.len()) {
            return Err(CudaError::invalid(
                op,
                format!("{self:?} does not match the input's {} elements", x.len()),
            ));
        }
        Ok((
            to_u32(op, "outer", self.outer)?,
            to_u32(op, "n", self.n)?,
            to_u32(op, "inner", self.inner)?,
        ))
    }
}

/// `y[o, i] = op over j of x[o, j, i]`, for `x` viewed as `axis`; `y` has outer * inner
/// elements of `x`'s dtype (f32 or bf16); the arithmetic is f32. With `argmax` (u32,
/// outer * inner, only for `Max`), also the index j of the maximum. n must be at least 1.
pub fn reduce(
    dev: &CudaDevice,
    op: ReduceOp,
    x: &Buffer,
    axis: AxisDims,
    y: &mut Buffer,
    argmax: Option<&mut Buffer>,
) -> Result<(), CudaError> {
    const OP: &str = "reduce";
    check_device(OP, dev, &[x, y])?;
    let (outer, n, inner) = axis.checked(OP, x)?;
    if n == 0 {
        return Err(CudaError::invalid(OP, "cannot reduce an empty axis"));
    }
    check_dtype(OP, "y", y, x.dtype())?;
    let outputs = axis.outer * axis.inner;
    check_len(OP, "y", y, outputs)?;
    if let Some(a) = argmax.as_deref() {
        if op != ReduceOp::Max {
            return Err(CudaError::invalid(OP, format!("argmax asked of {op:?}")));
        }
        check_device(OP, dev, &[a])?;
        check_dtype(OP, "argmax", a, DType::U32)?;
        check_len(OP, "argmax", a, outputs)?;
    }
    if outputs == 0 {
        return Ok(());
    }
    let code = op.code();
    let arg = ptr_or_null(argmax.as_deref());
    if inner == 1 {
        let vec = vector_rows(n, x.dtype(), &[x.device_ptr()]);
        let name = row_kernel!(OP, "reduce_rows", x.dtype(), vec)?;
        // SAFETY: reduce_rows_T(const T* x, T* y, u32* arg, u32 rows, u32 n, int op); x holds
        // rows * n, y and arg (or null) rows elements; the vectorised instantiation only where
        // vector_rows holds.
        return unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch::rows(outer, n, x.dtype()),
                &[x, y, &arg, &outer, &n, &code],
            )
        };
    }

    // Split n into chunks until the grid has a few blocks per SM, keeping chunks of at least
    // 64 rows so each thread still loops a few times.
    let tiles = inner.div_ceil(COLS_X);
    let blocks = tiles as u64 * outer as u64;
    let want = dev.sm_count().max(1) as u64 * 4;
    let chunks = want
        .div_ceil(blocks)
        .min((n as u64).div_ceil(64))
        .clamp(1, 65535) as u32;
    let chunk = n.div_ceil(chunks);
    let chunks = n.div_ceil(chunk);
    let grid_x = u32::try_from(blocks)
        .map_err(|_| CudaError::invalid(OP, format!("{axis:?} needs too many blocks")))?;
    let partial = if chunks > 1 {
        Some(dev.alloc(DType::U8, STATE_BYTES * outputs * chunks as usize)?)
    } else {
        None
    };
    let partial_ptr = ptr_or_null(partial.as_ref());
    let name = float_kernel!(OP, "reduce_cols", x.dtype())?;
    // SAFETY: reduce_cols_T(const T* x, T* y, u32* arg, RState* partial, u32 outer, u32 n,
    // u32 inner, u32 chunk, int op); x holds outer * n * inner, y and arg outer * inner, and
    // partial (used only when chunks > 1) chunks * outer * inner states.
    unsafe {
        launch(
            dev,
            &SOURCE,
            name,
            Launch {
                grid: (grid_x, chunks, 1),
                block: (COLS_X, COLS_Y, 1),
                shared: 0,
            },
            &[x, y, &arg, &partial_ptr, &outer, &n, &inner, &chunk, &code],
        )?;
    }
    if chunks > 1 {
        let name = float_kernel!(OP, "reduce_finish", x.dtype())?;
        let outputs = outputs as u64;
        // SAFETY: reduce_finish_T(const RState* partial, T* y, u32* arg, u64 outputs,
        // u32 chunks, u32 n, int op); sizes as above. The partial buffer is dropped after
        // queuing: later users of its memory are queued behind this kernel on the same stream.
        unsafe {
            launch(
                dev,
                &SOURCE,
                name,
                Launch::elementwise(dev, outputs),
                &[&partial_ptr, y, &arg, &outputs, &chunks, &n, &code],
            )?;
        }
    }
    Ok(())
}

/// Inclusive cumulative sum along the middle axis: `y[o, j, i] = sum over k <= j of x[o, k, i]`,
/// f32 accumulation; `x` and `y` the same dtype (f32 or bf16) and length.
///
/// Rows (inner == 1) are scanned in parallel; with inner > 1 each (outer, inner) column is one
/// thread walking n, which is slow for long n with few columns (transpose first there).
pub fn cumsum(
    dev: &CudaDevice,
    x: &Buffer,
    axis: AxisDims,
    y: &mut Buffer,
) -> Result<(), CudaError> {
    const OP: &str = "cumsum";
    check_device(OP, dev, &[x, y])?;
    let (outer, n, inner) = axis.checked(OP, x)?;
    check_dtype(OP, "y", y, x.dtype())?;
    check_len(OP, "y", y, x.len())?;
    if x.is_empty() {
        return Ok(());
    }
    if inner == 1 {
        let name = float_kernel!(OP, "cumsum_rows", x.dtype())?;
        let cfg = Launch {
            grid: (outer, 1, 1),
            block: (SCAN_BLOCK, 1, 1),
            shared: 0,
        };
        // SAFETY: cumsum_rows_T(const T* x, T* y, u32 n), one block per row of n; both hold
        // outer * n elements.
        unsafe { launch(dev, &SOURCE, name, cfg, &[x, y, &n]) }
    } else {
        let name = float_kernel!(OP, "cumsum_cols", x.dtype())?;
        let cfg = Launch::elementwise(dev, outer as u64 * inner as u64);
        // SAFETY: cumsum_cols_T(const T* x, T* y, u32 outer, u32 n, u32 inner); both hold
        // outer * n * inner elements.
        unsafe { launch(dev, &SOURCE, name, cfg, &[x, y, &outer, &n, &inner]) }
    }
}

/// Sums `x` (contiguous, shape `x_dims`) down to `y_dims`, the shape it was broadcast from:
/// numpy rules, `y_dims` right-aligned with `x_dims`, each of its dimensions equal to x's or 1
/// (summed over). This is the backward of broadcasting. Same dtype (f32 or bf16); each pass
/// accumulates in f32 (bf16 intermediates are rounded when several disjoint axis groups are
/// reduced).
pub fn sum_to(
    dev: &CudaDevice,
    x: &Buffer,
    x_dims: &[usize],
    y: &mut Buffer,
    y_dims: &[usize],
) -> Result<(), CudaError> {
    const OP: &str = "sum_to";
    check_device(OP, dev, &[x, y])?;
    check_dtype(OP, "y", y, x.dtype())?;
    let groups = reduction_groups(x_dims, y_dims).ok_or_else(|| {
        CudaError::invalid(OP, format!("{x_dims:?} does not broadcast from {y_dims:?}"))
    })?;
    check_len(OP, "x", x, x_dims.iter().product())?;
    check_len(OP, "y", y, y_dims.iter().product())?;
    if x.is_empty() || y.is_empty() {
        // An empty sum is zero (all-zero bits are 0.0 in f32 and bf16).
        return dev.memset_zero(y);
    }
    // Reduce the innermost reduced group first; every pass but the last writes a temporary.
    let mut dims = groups;
    let mut current: Option<Buffer> = None;
    loop {
        let Some(pos) = dims.iter().rposition(|g| g.1) else {
            // Nothing (left) to reduce: the sizes match.
            return match current {
                Some(t) => dev.copy(&t, y),
                None => dev.copy(x, y),
            };
        };
        let axis = AxisDims {
            outer: dims[..pos].iter().map(|g| g.0).product(),
            n: dims[pos].0,
            inner: dims[pos + 1..].iter().map(|g| g.0).product(),
        };
        dims.remove(pos);
        let input = current.as_ref().unwrap_or(x);
        if !dims.iter().any(|g| g.1) {
            return reduce(dev, ReduceOp::Sum, input, axis, y, None);
        }
        let mut next = dev.alloc(x.dtype(), axis.outer * axis.inner)?;
        reduce(dev, ReduceOp::Sum, input, axis, &mut next, None)?;
        current = Some(next);
    }
}

/// x's dimensions merged into runs of (size, reduced?), dropping size-1 dimensions; `None`
/// when `y_dims` is not a broadcast source of `x_dims`.
fn reduction_groups(x_dims: &[usize], y_dims: &[usize]) -> Option<Vec<(usize, bool)>> {
    if y_dims.len() > x_dims.len() {
        return None;
    }
    let lead = x_dims.len() - y_dims.len();
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (d, &xd) in x_dims.iter().enumerate() {
        let yd = if d < lead { 1 } else { y_dims[d - lead] };
        let reduced = match (xd, yd) {
            (_, _) if xd == yd => false,
            (_, 1) => true,
            _ => return None,
        };
        if xd == 1 {
            continue;
        }
        match groups.last_mut() {
            Some(last) if last.1 == reduced => last.0 *= xd,
            _ => groups.push((xd, reduced)),
        }
    }
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::reduction_groups;

    #[test]
    fn groups() {
        assert_eq!(
            reduction_groups(&[4, 5, 6], &[6]),
            Some(vec![(20, true), (6, false)])
        );
        assert_eq!(
            reduction_groups(&[4, 5, 6], &[4, 1, 6]),
            Some(vec![(4, false), (5, true), (6, false)])
        );
        assert_eq!(
            reduction_groups(&[2, 1, 3, 7], &[1, 1, 3, 1]),
            Some(vec![(2, true), (3, false), (7, true)])
        );
        assert_eq!(reduction_groups(&[4, 5], &[4, 5]), Some(vec![(20, false)]));
        assert_eq!(reduction_groups(&[4, 5], &[3, 5]), None);
        assert_eq!(reduction_groups(&[5], &[2, 5]), None);
    }
}
