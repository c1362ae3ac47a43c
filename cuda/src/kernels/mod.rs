//! Rust wrappers of the NVRTC-compiled kernels, one file per family, and what they share:
//! the launch call, kernel arguments, launch shapes and argument checks (public: the fused
//! mixers' wrappers in swax-nn launch their kernels with them).
//!
//! Every wrapper takes the device, input buffers by `&Buffer` and outputs by `&mut Buffer`,
//! checks dtypes and sizes (an error names the operation and the sizes), picks the launch shape
//! and queues the kernel on the device's stream; nothing waits. Float kernels read and write
//! f32 or bf16 storage and compute in f32.

pub mod attention;
pub mod binary;
pub mod cast;
pub mod chunk;
pub mod copy;
pub mod cross_entropy;
pub mod embedding;
mod layout;
pub mod mask;
pub mod norm;
pub mod optim;
pub mod reduce;
pub mod rope;
pub mod scatter;
pub mod short_conv;
pub mod softmax;
pub mod swiglu;
pub mod unary;

/// The tensor-core tile helpers (`kernels/mma.cuh`), which a fused mixer's source puts first.
pub const MMA_CUH: &str = include_str!("../../kernels/mma.cuh");
/// Hopper's warpgroup products (`kernels/wgmma.cuh`), after `MMA_CUH` (sliding-window attention).
pub const WGMMA_CUH: &str = include_str!("../../kernels/wgmma.cuh");
/// Hopper's TMA copies and shared-memory barriers (`kernels/tma.cuh`), after `WGMMA_CUH`.
pub const TMA_CUH: &str = include_str!("../../kernels/tma.cuh");
/// What the chunkwise recurrent kernels share (`kernels/chunk.cuh`), after `MMA_CUH`.
pub const CHUNK_CUH: &str = include_str!("../../kernels/chunk.cuh");

use crate::nvrtc::KernelSource;
use crate::{Buffer, CudaDevice, CudaError, DType};
use cudarc::driver::result;
use std::ffi::c_void;

/// Most launch parameters any kernel here takes.
const MAX_ARGS: usize = 24;
/// Threads per block of the grid-stride elementwise kernels.
const ELEMENTWISE_BLOCK: u32 = 256;
/// Elements per grid-stride step of the elementwise kernels (`EW_VEC` in common.cuh): their
/// launches size the grid by `n.div_ceil(ELEMENTWISE_VEC)`.
const ELEMENTWISE_VEC: u64 = 8;
/// 16-byte vectors of a row tile per thread, and the most threads a row gets (`ROW_VECS`,
/// `ROW_BLOCK` in common.cuh).
const ROW_VECS: u32 = 4;
pub(crate) const ROW_BLOCK: u32 = 512;
/// Threads in a block of shorter rows, which then holds several of them.
const ROW_BLOCK_MIN: u32 = 256;

/// A value that can be passed to a kernel by pointer to its bytes, as `cuLaunchKernel` wants.
pub trait KernelArg {
    fn as_param(&self) -> *mut c_void;
}

macro_rules! plain_kernel_args {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            fn as_param(&self) -> *mut c_void {
                self as *const $t as *mut c_void
            }
        }
    )*};
}
plain_kernel_args!(u32, i32, u64, i64, f32, f64);

/// A buffer is passed as its device pointer.
impl KernelArg for Buffer {
    fn as_param(&self) -> *mut c_void {
        self.ptr_field() as *const u64 as *mut c_void
    }
}

/// Device pointer of an optional buffer, 0 (a null pointer in the kernel) for `None`.
pub(crate) fn ptr_or_null(b: Option<&Buffer>) -> u64 {
    b.map_or(0, Buffer::device_ptr)
}

#[derive(Debug, Clone, Copy)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared: u32,
}

impl Launch {
    /// Grid-stride kernels over `work` items: enough blocks to fill the GPU several times over,
    /// no more (each thread then loops).
    pub fn elementwise(dev: &CudaDevice, work: u64) -> Launch {
        let blocks = work.div_ceil(ELEMENTWISE_BLOCK as u64);
        let cap = dev.sm_count().max(1) as u64 * 16;
        Launch {
            grid: (blocks.clamp(1, cap) as u32, 1, 1),
            block: (ELEMENTWISE_BLOCK, 1, 1),
            shared: 0,
        }
    }

    /// Row kernels (common.cuh's `Tile`): a row of n elements gets the fewest power-of-two
    /// threads that hold it in one register tile (ROW_VECS 16-byte vectors a thread: 32 bf16 or
    /// 16 f32 elements), at most ROW_BLOCK; blocks hold ROW_BLOCK_MIN / threads rows when that is
    /// more than one. Rows up to 16384 bf16 or 8192 f32 elements are then read from memory once;
    /// longer ones are walked in tiles. The kernel's row is `blockIdx.x * blockDim.y +
    /// threadIdx.y`.
    pub fn rows(rows: u32, n: u32, dtype: DType) -> Launch {
        let (x, y) = row_shape(n, dtype);
        Launch {
            grid: (rows.div_ceil(y).max(1), 1, 1),
            block: (x, y, 1),
            shared: 0,
        }
    }

    /// Row kernels that split each row into `grid.1` chunks of at most one tile (cross-entropy):
    /// the block shape of [`Launch::rows`], the fewest chunks, each a multiple of 8 elements so
    /// that the chunks of a vectorised row start on 16-byte boundaries. Returns the launch and
    /// the chunk length.
    pub fn row_chunks(rows: u32, n: u32, dtype: DType) -> (Launch, u32) {
        let (x, y) = row_shape(n, dtype);
        let tile = x * row_elements_per_thread(dtype);
        let chunk = n.div_ceil(n.div_ceil(tile).max(1)).next_multiple_of(8);
        let launch = Launch {
            grid: (rows.div_ceil(y).max(1), n.div_ceil(chunk).max(1), 1),
            block: (x, y, 1),
            shared: 0,
        };
        (launch, chunk)
    }
}

fn row_elements_per_thread(dtype: DType) -> u32 {
    ROW_VECS * (16 / dtype.size_bytes() as u32)
}

/// (threads per row, rows per block) of [`Launch::rows`].
fn row_shape(n: u32, dtype: DType) -> (u32, u32) {
    let x = n
        .div_ceil(row_elements_per_thread(dtype))
        .next_power_of_two()
        .min(ROW_BLOCK);
    (x, (ROW_BLOCK_MIN / x).max(1))
}

/// Whether a row kernel can take its vectorised instantiation for rows of `n` elements of
/// `dtype`: n a whole number of 16-byte vectors and every pointer 16-byte aligned (pool blocks
/// are 512-byte aligned; checked anyway, as a misaligned vector access faults). A null pointer
/// (an absent optional buffer) passes.
pub(crate) fn vector_rows(n: u32, dtype: DType, ptrs: &[u64]) -> bool {
    (n as usize * dtype.size_bytes()).is_multiple_of(16) && ptrs.iter().all(|p| p % 16 == 0)
}

/// Queues kernel `name` of `src` with `args`.
///
/// # Safety
/// `args` must match the kernel's parameter list in number, order and type, and every pointer
/// among them must be valid for all the accesses the kernel makes given the other arguments
/// (the wrappers check buffer sizes before calling this).
pub unsafe fn launch(
    dev: &CudaDevice,
    src: &KernelSource,
    name: &'static str,
    cfg: Launch,
    args: &[&dyn KernelArg],
) -> Result<(), CudaError> {
    assert!(args.len() <= MAX_ARGS, "kernel {name}: too many arguments");
    let f = dev.function(src, name, cfg.shared)?;
    dev.bind()?;
    crate::counters::launch();
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
    for (p, a) in params.iter_mut().zip(args) {
        *p = a.as_param();
    }
    // SAFETY: the caller vouches for the arguments; each param pointer points at a value that
    // lives until this call returns, and cuLaunchKernel copies the values before returning.
    unsafe {
        result::launch_kernel(
            f,
            cfg.grid,
            cfg.block,
            cfg.shared,
            dev.stream().cu_stream(),
            &mut params[..args.len()],
        )
    }
    .map_err(|e| CudaError::Driver {
        call: "cuLaunchKernel",
        message: format!("kernel {name} ({cfg:?}): {e:?}"),
    })?;
    crate::timeline::mark(dev, || {
        format!("{name} grid {:?} block {:?}", cfg.grid, cfg.block)
    })
}

/// The `<base>_f32` / `<base>_bf16` instantiation of a float kernel for a dtype.
#[macro_export]
macro_rules! float_kernel {
    ($op:expr, $base:literal, $dtype:expr) => {
        match $dtype {
            $crate::DType::F32 => Ok(concat!($base, "_f32")),
            $crate::DType::BF16 => Ok(concat!($base, "_bf16")),
            other => Err($crate::CudaError::invalid(
                $op,
                format!("needs f32 or bf16 data, got {other}"),
            )),
        }
    };
}
pub use crate::float_kernel;

/// The instantiation of a row kernel (common.cuh's `Tile`) for a dtype: `<base>_<dtype>` reads
/// rows in 16-byte vectors, `<base>_<dtype>_scalar` element by element (see [`vector_rows`]).
macro_rules! row_kernel {
    ($op:expr, $base:literal, $dtype:expr, $vec:expr) => {
        match ($dtype, $vec) {
            ($crate::DType::F32, true) => Ok(concat!($base, "_f32")),
            ($crate::DType::F32, false) => Ok(concat!($base, "_f32_scalar")),
            ($crate::DType::BF16, true) => Ok(concat!($base, "_bf16")),
            ($crate::DType::BF16, false) => Ok(concat!($base, "_bf16_scalar")),
            (other, _) => Err($crate::CudaError::invalid(
                $op,
                format!("needs f32 or bf16 data, got {other}"),
            )),
        }
    };
}
pub(crate) use row_kernel;

/// The instantiation of a kernel that only moves elements, by element size: `<base>_b32` for
/// f32/u32, `_b16` for bf16, `_b8` for u8.
macro_rules! bits_kernel {
    ($op:expr, $base:literal, $dtype:expr) => {
        match $dtype {
            $crate::DType::F32 | $crate::DType::U32 => Ok(concat!($base, "_b32")),
            $crate::DType::BF16 => Ok(concat!($base, "_b16")),
            $crate::DType::U8 => Ok(concat!($base, "_b8")),
            $crate::DType::F64 => Err($crate::CudaError::invalid($op, "no kernel moves f64 data")),
        }
    };
}
pub(crate) use bits_kernel;

/// Checks that every buffer lives on `dev`.
pub fn check_device(op: &'static str, dev: &CudaDevice, bufs: &[&Buffer]) -> Result<(), CudaError> {
    bufs.iter().try_for_each(|b| dev.check_owner(op, b))
}

/// Checks a buffer's dtype.
pub fn check_dtype(
    op: &'static str,
    name: &str,
    buf: &Buffer,
    want: DType,
) -> Result<(), CudaError> {
    if buf.dtype() == want {
        Ok(())
    } else {
        Err(CudaError::invalid(
            op,
            format!("{name} must be {want}, got {}", buf.dtype()),
        ))
    }
}

/// Checks a buffer's length.
pub fn check_len(op: &'static str, name: &str, buf: &Buffer, want: usize) -> Result<(), CudaError> {
    if buf.len() == want {
        Ok(())
    } else {
        Err(CudaError::invalid(
            op,
            format!("{name} has {} elements, expected {want}", buf.len()),
        ))
    }
}

/// Checks that `b` has the same dtype and length as `a`.
pub(crate) fn check_like(
    op: &'static str,
    name: &str,
    b: &Buffer,
    a: &Buffer,
) -> Result<(), CudaError> {
    check_dtype(op, name, b, a.dtype())?;
    check_len(op, name, b, a.len())
}

/// Number of rows of a buffer read as rows of `n` elements.
pub(crate) fn rows_of(op: &'static str, buf: &Buffer, n: usize) -> Result<u32, CudaError> {
    if n == 0 || !buf.len().is_multiple_of(n) {
        return Err(CudaError::invalid(
            op,
            format!("{} elements do not split into rows of {n}", buf.len()),
        ));
    }
    to_u32(op, "rows", buf.len() / n)
}

pub fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32, CudaError> {
    u32::try_from(v).map_err(|_| CudaError::invalid(op, format!("{what} = {v} exceeds u32")))
}

/// Compiles every source of `sources` for one architecture of each code path the kernels have
/// (Ampere and Ada: mma.sync with scalar atomics; Hopper: wgmma, sm_90a; Blackwell: mma.sync
/// with vector atomics), side by side (NVRTC compiles one program on one thread). Needs only
/// libnvrtc, no GPU: a `LibraryMissing` error where it is absent. The kernel tests call it, so
/// that a user on another GPU than the one the GPU tests ran on gets the kernels, not a compile
/// error.
pub fn compile_for_every_architecture(sources: &[&KernelSource]) -> Result<(), CudaError> {
    let results: Vec<_> = std::thread::scope(|scope| {
        let jobs: Vec<_> = [(8, 0), (9, 0), (12, 0)]
            .into_iter()
            .flat_map(|arch| sources.iter().map(move |&src| (arch, src)))
            .map(|(arch, src)| {
                let job = scope.spawn(move || crate::nvrtc::cubin(src, arch, false));
                (arch, src.name, job)
            })
            .collect();
        jobs.into_iter()
            .map(|(arch, name, job)| (arch, name, job.join().expect("compile thread")))
            .collect()
    });
    for (arch, name, result) in results {
        match result {
            Ok(_) => {}
            Err(e @ CudaError::LibraryMissing { .. }) => return Err(e),
            Err(e) => {
                let msg = format!("compiling for sm_{}{}: {e}", arch.0, arch.1);
                return Err(CudaError::invalid(name, msg));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skips where libnvrtc is missing (`.ci/run` installs it), fails there under
    /// SWAX_REQUIRE_CUDA=1 like every GPU test.
    #[test]
    fn every_kernel_compiles_for_every_architecture() {
        let sources = [
            &binary::SOURCE,
            &cast::SOURCE,
            &copy::SOURCE,
            &cross_entropy::SOURCE,
            &embedding::SOURCE,
            &mask::SOURCE,
            &norm::SOURCE,
            &optim::SOURCE,
            &reduce::SOURCE,
            &rope::SOURCE,
            &scatter::SOURCE,
            &short_conv::SOURCE,
            &softmax::SOURCE,
            &swiglu::SOURCE,
            &unary::SOURCE,
        ];
        match compile_for_every_architecture(&sources) {
            Err(CudaError::LibraryMissing { reason, .. })
                if std::env::var("SWAX_REQUIRE_CUDA").as_deref() != Ok("1") =>
            {
                eprintln!("skipping: {reason}");
            }
            result => result.expect("every kernel compiles"),
        }
    }
}
