//! Matrix multiplication through cuBLAS: row-major, optionally transposed, strided-batched.

use crate::guard::{guard_loader, lock};
use crate::{Buffer, CudaDevice, CudaError, DType};
use cudarc::cublas::{result, sys};
use std::sync::{Arc, Mutex};

/// cuBLAS's workspace, from our pool: 32 MiB is what NVIDIA recommends on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle bound to the device's stream, created on the first `gemm`.
struct BlasHandle {
    handle: sys::cublasHandle_t,
}

// SAFETY: the handle is only used under its mutex in `HANDLES`, one thread at a time, with the
// device's context made current first.
unsafe impl Send for BlasHandle {}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: created by cublasCreate and destroyed only here.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

impl BlasHandle {
    fn new(dev: &CudaDevice) -> Result<BlasHandle, CudaError> {
        let err = |call: &'static str| {
            move |e: result::CublasError| CudaError::Blas {
                call,
                message: format!("{e:?}"),
            }
        };
        dev.bind()?;
        let handle = guard_loader("libcublas", || {
            // SAFETY: only tries to dlopen the cuBLAS library.
            if !unsafe { sys::is_culib_present() } {
                return Err(CudaError::LibraryMissing {
                    lib: "libcublas",
                    reason: "libcublas.so could not be loaded".into(),
                });
            }
            result::create_handle().map_err(err("cublasCreate"))
        })?;
        let blas = BlasHandle { handle };
        // The workspace block is held for the device's lifetime, outside any Buffer: like the
        // handle, it is never given back.
        let workspace = dev.alloc_raw(WORKSPACE_BYTES)?;
        // SAFETY: the handle is live; the stream belongs to the current context and outlives
        // the handle (both live as long as the device); the workspace is a live block of
        // WORKSPACE_BYTES that nothing else uses.
        unsafe {
            result::set_stream(blas.handle, dev.stream().cu_stream() as sys::cudaStream_t)
                .map_err(err("cublasSetStream"))?;
            sys::cublasSetWorkspace_v2(
                blas.handle,
                workspace as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
            )
            .result()
            .map_err(err("cublasSetWorkspace"))?;
        }
        Ok(blas)
    }
}

/// Each device's handle, by ordinal, created at its first `gemm` and kept, like the device
/// itself, until the process exits. Kept here, not in the device, so that the device knows
/// nothing of cuBLAS. A handle serves one thread at a time; devices each have their own.
static HANDLES: Mutex<Vec<(usize, Arc<Mutex<BlasHandle>>)>> = Mutex::new(Vec::new());

fn handle(dev: &CudaDevice) -> Result<Arc<Mutex<BlasHandle>>, CudaError> {
    let mut handles = lock(&HANDLES);
    if let Some((_, h)) = handles
        .iter()
        .find(|(ordinal, _)| *ordinal == dev.ordinal())
    {
        return Ok(h.clone());
    }
    let h = Arc::new(Mutex::new(BlasHandle::new(dev)?));
    handles.push((dev.ordinal(), h.clone()));
    Ok(h)
}

/// A batch of row-major products `C[b] = op(A[b]) · op(B[b])`, `C[b]` of `m × n`, inner size `k`.
/// A transposed operand is stored as its transpose (`A` as `k × m`). Matrix `b` of an operand
/// starts at `b * stride` elements; a batch stride of 0 broadcasts that operand over the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulLayout {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lhs_transposed: bool,
    pub rhs_transposed: bool,
    pub lhs_batch_stride: usize,
    pub rhs_batch_stride: usize,
}

/// `c[i] = alpha * op(a[i]) @ op(b[i]) + beta * c[i]` for `i` in `0..batch`, all row-major, the
/// products laid out by `layout`; matrix `i` of `c` starts at `i * c_stride` elements.
///
/// Dtypes come from the buffers: `a` and `b` both f32 (`c` f32; f32 arithmetic, TF32 tensor
/// cores only when `allow_tf32`) or both bf16 (`c` bf16 or f32; f32 accumulation).
#[derive(Debug)]
pub struct GemmArgs<'a> {
    pub layout: MatmulLayout,
    pub a: &'a Buffer,
    pub b: &'a Buffer,
    pub c: &'a mut Buffer,
    pub c_stride: usize,
    pub alpha: f32,
    pub beta: f32,
    pub allow_tf32: bool,
}

/// Queues the product described by `args` on the device's stream.
///
/// cuBLAS is column-major. A row-major `r x c` matrix, read column-major, is its `c x r`
/// transpose, so we ask cuBLAS for `C^T = op(B)^T op(A)^T`: operands swapped (`b` first), the
/// same transpose flags, `m` and `n` swapped. Each leading dimension is the row length of the
/// stored row-major matrix.
pub fn gemm(dev: &CudaDevice, args: GemmArgs<'_>) -> Result<(), CudaError> {
    const OP: &str = "gemm";
    let GemmArgs {
        layout:
            MatmulLayout {
                batch,
                m,
                n,
                k,
                lhs_transposed: ta,
                rhs_transposed: tb,
                lhs_batch_stride: a_stride,
                rhs_batch_stride: b_stride,
            },
        a,
        b,
        c,
        c_stride,
        alpha,
        beta,
        allow_tf32,
    } = args;
    for buf in [a, b, &*c] {
        dev.check_owner(OP, buf)?;
    }
    let (in_type, compute) = match (a.dtype(), b.dtype(), c.dtype()) {
        (DType::F32, DType::F32, DType::F32) if allow_tf32 => (
            sys::cudaDataType::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        ),
        (DType::F32, DType::F32, DType::F32) => (
            sys::cudaDataType::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        (DType::BF16, DType::BF16, DType::BF16 | DType::F32) => (
            sys::cudaDataType::CUDA_R_16BF,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        (x, y, z) => {
            return Err(CudaError::invalid(
                OP,
                format!("unsupported dtypes a={x} b={y} c={z} (f32,f32,f32 or bf16,bf16,bf16|f32)"),
            ))
        }
    };
    let out_type = if c.dtype() == DType::F32 {
        sys::cudaDataType::CUDA_R_32F
    } else {
        sys::cudaDataType::CUDA_R_16BF
    };
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    let span = |stride: usize, size: usize| (batch - 1).checked_mul(stride)?.checked_add(size);
    for (name, buf, stride, rows, cols) in [
        ("a", a, a_stride, m, k),
        ("b", b, b_stride, k, n),
        ("c", &*c, c_stride, m, n),
    ] {
        let need = rows.checked_mul(cols).and_then(|size| span(stride, size));
        if need.is_none_or(|need| need > buf.len()) {
            return Err(CudaError::invalid(
                OP,
                format!(
                    "{name} needs {batch} matrices of {rows}x{cols} at stride {stride}, buffer \
                     has {} elements (m={m} n={n} k={k} ta={ta} tb={tb})",
                    buf.len()
                ),
            ));
        }
    }
    if batch > 1 && c_stride < m * n {
        return Err(CudaError::invalid(
            OP,
            format!(
                "c_stride {c_stride} < m*n = {} makes outputs overlap",
                m * n
            ),
        ));
    }
    let int = |what: &str, v: usize| {
        i32::try_from(v.max(1))
            .map_err(|_| CudaError::invalid(OP, format!("{what} = {v} exceeds cuBLAS's int range")))
    };
    let long = |v: usize| v as i64;
    let op = |t: bool| {
        if t {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (mi, ni, ki, bi) = (
        int("m", m)?,
        int("n", n)?,
        int("k", k)?,
        int("batch", batch)?,
    );
    let lda = int("lda", if tb { k } else { n })?;
    let ldb = int("ldb", if ta { m } else { k })?;
    let ldc = int("ldc", n)?;

    let shared = handle(dev)?;
    let blas = lock(&shared);
    dev.bind()?;
    crate::counters::blas_call();
    // SAFETY: the sizes checked above keep every matrix of every batch entry inside its buffer;
    // alpha and beta are host f32 (the handle's default pointer mode), matching the f32 compute
    // type; the handle is used under its mutex with the device's context current.
    unsafe {
        result::gemm_strided_batched_ex(
            blas.handle,
            op(tb),
            op(ta),
            ni,
            mi,
            ki,
            &alpha as *const f32 as *const _,
            b.device_ptr() as *const _,
            in_type,
            lda,
            long(b_stride),
            a.device_ptr() as *const _,
            in_type,
            ldb,
            long(a_stride),
            &beta as *const f32 as *const _,
            c.device_ptr() as *mut _,
            out_type,
            ldc,
            long(c_stride),
            bi,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| CudaError::Blas {
        call: "cublasGemmStridedBatchedEx",
        message: format!("{e:?} (m={m} n={n} k={k} batch={batch} ta={ta} tb={tb})"),
    })?;
    drop(blas);
    crate::timeline::mark(dev, || format!("gemm {m}x{n}x{k} batch {batch}"))
}
