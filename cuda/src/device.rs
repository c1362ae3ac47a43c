//! `CudaDevice`: one CUDA context, one stream, one memory pool and the loaded kernels, per ordinal.
//!
//! Devices are process-wide: `CudaDevice::new(i)` hands out clones of one handle per ordinal, so
//! every part of the program (and every test thread) shares the pool, the compiled kernels and
//! the stream ordering. A device is never torn down before the process exits, which also spares
//! us CUDA's teardown-order hazards at exit.

use crate::guard::{guard_loader, lock};
use crate::nvrtc::{self, KernelSource};
use crate::pool::{CudaSegments, Pool, PoolStats};
use crate::{Buffer, CudaError, DType, DeviceScalar};
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Bits of the device-side error word that kernels set on bad input (see `take_kernel_errors`).
pub(crate) const FLAG_INDEX_OUT_OF_RANGE: u32 = 1;
pub(crate) const FLAG_TARGET_OUT_OF_RANGE: u32 = 2;

/// A cheap-to-clone handle to one GPU. Work is queued on the device's single stream and runs
/// asynchronously; `dtoh`, `synchronize` and `take_kernel_errors` wait for it.
#[derive(Clone)]
pub struct CudaDevice {
    inner: Arc<Inner>,
}

struct LoadedModule {
    module: Arc<CudaModule>,
    /// Each loaded function, and whether its dynamic shared-memory limit was raised.
    functions: HashMap<&'static str, (CudaFunction, bool)>,
}

/// Dynamic shared memory a block gets without opting in.
const DEFAULT_SHARED: u32 = 48 * 1024;

/// Field order is drop order: the pool releases device memory before the modules, stream and
/// context go.
struct Inner {
    pool: Mutex<Pool<CudaSegments>>,
    /// Address of the u32 error word kernels OR flags into; allocated on first use.
    error_word: Mutex<Option<u64>>,
    modules: Mutex<HashMap<&'static str, LoadedModule>>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    ordinal: usize,
    name: String,
    compute_capability: (u32, u32),
    sm_count: u32,
    max_shared_optin: u32,
}

static DEVICES: Mutex<Vec<CudaDevice>> = Mutex::new(Vec::new());

impl CudaDevice {
    /// The device with this ordinal; an error (never a panic) when there is no driver, no GPU,
    /// or no such ordinal.
    pub fn new(ordinal: usize) -> Result<CudaDevice, CudaError> {
        let mut devices = lock(&DEVICES);
        if let Some(d) = devices.iter().find(|d| d.inner.ordinal == ordinal) {
            return Ok(d.clone());
        }
        let inner = guard_loader("libcuda", || create(ordinal)).map_err(|e| match e {
            CudaError::LibraryMissing { reason, .. } => CudaError::NoDriver(reason),
            e => e,
        })?;
        let dev = CudaDevice {
            inner: Arc::new(inner),
        };
        devices.push(dev.clone());
        Ok(dev)
    }

    /// Whether device 0 can be opened.
    pub fn is_available() -> bool {
        CudaDevice::new(0).is_ok()
    }

    /// Number of CUDA devices; an error when there is no driver.
    pub fn count() -> Result<usize, CudaError> {
        guard_loader("libcuda", || {
            init_driver()?;
            let n = result::device::get_count()
                .map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
            Ok(n.max(0) as usize)
        })
    }

    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// (major, minor), e.g. (9, 0) on H100/H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.inner.compute_capability
    }

    pub fn sm_count(&self) -> u32 {
        self.inner.sm_count
    }

    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub fn max_shared_optin(&self) -> u32 {
        self.inner.max_shared_optin
    }

    /// (free, total) device memory in bytes, as the driver sees it (the pool's cache counts as
    /// used).
    pub fn mem_info(&self) -> Result<(usize, usize), CudaError> {
        self.inner
            .ctx
            .mem_get_info()
            .map_err(|e| CudaError::driver("cuMemGetInfo", e))
    }

    /// Waits until all queued work on the device's stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.bind()?;
        crate::counters::sync();
        self.inner
            .stream
            .synchronize()
            .map_err(|e| CudaError::driver("cuStreamSynchronize", e))
    }

    /// Whether two handles are the same device.
    pub fn same(&self, other: &CudaDevice) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The stream all work of this device is queued on, for interop (e.g. raw cuBLAS in the
    /// benchmark). Work queued on it is ordered with everything this crate does.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    pub fn pool_stats(&self) -> PoolStats {
        lock(&self.inner.pool).stats()
    }

    /// See [`crate::pool::Pool::reset_peak`].
    pub fn reset_peak(&self) {
        lock(&self.inner.pool).reset_peak()
    }

    /// Returns every cached segment with nothing in use to the driver (waits for the stream
    /// first); returns the bytes released.
    pub fn empty_cache(&self) -> Result<usize, CudaError> {
        lock(&self.inner.pool).empty_cache()
    }

    /// An uninitialised buffer of `len` elements; any dtype but f64, which no kernel takes (f64
    /// is for gradient checks on the CPU).
    pub fn alloc(&self, dtype: DType, len: usize) -> Result<Buffer, CudaError> {
        if dtype == DType::F64 {
            return Err(CudaError::invalid("alloc", "the GPU holds no f64 data"));
        }
        let bytes = len
            .checked_mul(dtype.size_bytes())
            .ok_or_else(|| CudaError::invalid("alloc", format!("{len} x {dtype} overflows")))?;
        let ptr = if bytes == 0 {
            0
        } else {
            lock(&self.inner.pool).alloc(bytes)?.0
        };
        Ok(Buffer::from_parts(ptr, len, dtype, self.clone()))
    }

    /// A buffer of `len` elements, all bits zero (0.0 for the float types).
    pub fn alloc_zeros(&self, dtype: DType, len: usize) -> Result<Buffer, CudaError> {
        let mut b = self.alloc(dtype, len)?;
        self.memset_zero(&mut b)?;
        Ok(b)
    }

    /// Sets every byte of `buf` to zero (asynchronously).
    pub fn memset_zero(&self, buf: &mut Buffer) -> Result<(), CudaError> {
        self.check_owner("memset_zero", buf)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the range is exactly the buffer's allocation, queued on the device's stream.
        unsafe {
            result::memset_d8_async(
                buf.device_ptr(),
                0,
                buf.size_bytes(),
                self.inner.stream.cu_stream(),
            )
        }
        .map_err(|e| CudaError::driver("cuMemsetD8Async", e))
    }

    /// Copies host data into a new device buffer.
    pub fn htod<T: DeviceScalar>(&self, data: &[T]) -> Result<Buffer, CudaError> {
        let buf = self.alloc(T::DTYPE, data.len())?;
        if data.is_empty() {
            return Ok(buf);
        }
        self.bind()?;
        crate::counters::upload(std::mem::size_of_val(data));
        // SAFETY: the buffer holds exactly `data.len()` elements of T. `data` is pageable Rust
        // memory, which the driver stages before cuMemcpyHtoDAsync returns, so it may be dropped
        // or changed as soon as this returns.
        unsafe { result::memcpy_htod_async(buf.device_ptr(), data, self.inner.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("cuMemcpyHtoDAsync", e))?;
        Ok(buf)
    }

    /// Copies a device buffer back to the host, after all queued work on it has finished.
    pub fn dtoh<T: DeviceScalar>(&self, buf: &Buffer) -> Result<Vec<T>, CudaError> {
        self.check_owner("dtoh", buf)?;
        if buf.dtype() != T::DTYPE {
            return Err(CudaError::invalid(
                "dtoh",
                format!("buffer holds {}, asked for {}", buf.dtype(), T::DTYPE),
            ));
        }
        let mut out = vec![T::default(); buf.len()];
        if out.is_empty() {
            return Ok(out);
        }
        self.bind()?;
        // SAFETY: `out` has exactly the buffer's size; the stream is synchronized below before
        // `out` is read or moved.
        unsafe {
            result::memcpy_dtoh_async(&mut out, buf.device_ptr(), self.inner.stream.cu_stream())
        }
        .map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))?;
        self.synchronize()?;
        Ok(out)
    }

    /// Copies `src` into `dst` (same dtype and length), queued on the stream.
    pub fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<(), CudaError> {
        self.check_owner("copy", src)?;
        self.check_owner("copy", dst)?;
        if src.dtype() != dst.dtype() || src.len() != dst.len() {
            return Err(CudaError::invalid(
                "copy",
                format!(
                    "source is {} x {}, destination {} x {}",
                    src.len(),
                    src.dtype(),
                    dst.len(),
                    dst.dtype()
                ),
            ));
        }
        self.copy_bytes(src.device_ptr(), dst.device_ptr(), src.size_bytes())
    }

    /// Device-to-device copy of `bytes` bytes between raw addresses of this device's pool.
    pub(crate) fn copy_bytes(&self, src: u64, dst: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: callers pass ranges inside live buffers of this device.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.inner.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("cuMemcpyDtoDAsync", e))
    }

    /// Reads and clears the flags kernels raised on bad input (an embedding id or
    /// cross-entropy target out of range). Synchronizes; call it where the host waits anyway.
    pub fn take_kernel_errors(&self) -> Result<(), CudaError> {
        let Some(word) = *lock(&self.inner.error_word) else {
            return Ok(());
        };
        self.bind()?;
        let mut flags = [0u32];
        // SAFETY: `word` is a live 4-byte pool block owned by this device for its lifetime; the
        // synchronize below completes the copy before `flags` is read.
        unsafe {
            result::memcpy_dtoh_async(&mut flags, word, self.inner.stream.cu_stream())
                .map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))?;
            result::memset_d8_async(word, 0, 4, self.inner.stream.cu_stream())
                .map_err(|e| CudaError::driver("cuMemsetD8Async", e))?;
        }
        self.synchronize()?;
        let flags = flags[0];
        if flags == 0 {
            return Ok(());
        }
        let mut what = Vec::new();
        if flags & FLAG_INDEX_OUT_OF_RANGE != 0 {
            what.push("an embedding / index_select id was out of range (its row was zeroed)");
        }
        if flags & FLAG_TARGET_OUT_OF_RANGE != 0 {
            what.push("a cross-entropy target was >= vocab and not ignore_index (its loss is NaN)");
        }
        Err(CudaError::KernelFlags(what.join("; ")))
    }

    /// Address of the device's error word, allocated and zeroed on first use.
    pub(crate) fn error_word(&self) -> Result<u64, CudaError> {
        let mut word = lock(&self.inner.error_word);
        if let Some(w) = *word {
            return Ok(w);
        }
        let w = self.alloc_raw(4)?;
        self.bind()?;
        // SAFETY: a fresh 4-byte block of this device.
        unsafe { result::memset_d8_async(w, 0, 4, self.inner.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("cuMemsetD8Async", e))?;
        *word = Some(w);
        Ok(w)
    }

    /// A pool block held for the device's lifetime, outside any Buffer (a Buffer inside the
    /// device would keep the device alive through itself).
    pub(crate) fn alloc_raw(&self, bytes: usize) -> Result<u64, CudaError> {
        Ok(lock(&self.inner.pool).alloc(bytes)?.0)
    }

    pub(crate) fn release(&self, ptr: u64) {
        lock(&self.inner.pool).free(ptr);
    }

    /// Makes this device's context current on the calling thread (every raw driver call needs it).
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
    }

    pub(crate) fn check_owner(&self, op: &'static str, buf: &Buffer) -> Result<(), CudaError> {
        if buf.device().same(self) {
            Ok(())
        } else {
            Err(CudaError::invalid(
                op,
                format!(
                    "buffer lives on device {}, the call is on device {}",
                    buf.device().ordinal(),
                    self.ordinal()
                ),
            ))
        }
    }

    /// The raw handle of kernel `name` from `src`, compiling and loading the module on first use.
    /// Function `name` of `src` (its module compiled and loaded at first use), ready for a launch
    /// with `shared` bytes of dynamic shared memory. Past the default 48 KiB the function's limit
    /// is raised once, under the module lock, to all it may have (the device's opt-in limit less
    /// its static shared memory), not to one launch's size: a function is shared by every thread
    /// launching it, and a limit set per launch could be lowered by another thread between its
    /// setting and the launch (seen with tests running in parallel).
    pub(crate) fn function(
        &self,
        src: &KernelSource,
        name: &'static str,
        shared: u32,
    ) -> Result<sys::CUfunction, CudaError> {
        let mut modules = lock(&self.inner.modules);
        if !modules.contains_key(src.name) {
            let module = self.load_module(src)?;
            modules.insert(
                src.name,
                LoadedModule {
                    module,
                    functions: HashMap::new(),
                },
            );
        }
        let loaded = modules.get_mut(src.name).expect("inserted above");
        if !loaded.functions.contains_key(name) {
            let f = loaded
                .module
                .load_function(name)
                .map_err(|e| CudaError::Driver {
                    call: "cuModuleGetFunction",
                    message: format!("kernel {name} in module {}: {e:?}", src.name),
                })?;
            loaded.functions.insert(name, (f, false));
        }
        let (f, raised) = loaded.functions.get_mut(name).expect("inserted above");
        let raw = f.cu_function();
        if shared > DEFAULT_SHARED && !*raised {
            // SAFETY: `raw` is a live function of a loaded module.
            let fixed = unsafe {
                result::function::get_function_attribute(
                    raw,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                )
            }
            .map_err(|e| CudaError::driver("cuFuncGetAttribute", e))?;
            let most = self.max_shared_optin() as i32 - fixed;
            // SAFETY: as above.
            unsafe {
                result::function::set_function_attribute(
                    raw,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    most,
                )
            }
            .map_err(|e| CudaError::driver("cuFuncSetAttribute", e))?;
            *raised = true;
        }
        Ok(raw)
    }

    fn load_module(&self, src: &KernelSource) -> Result<Arc<CudaModule>, CudaError> {
        let arch = self.inner.compute_capability;
        let (cubin, from_cache) = nvrtc::cubin(src, arch, true)?;
        match self.inner.ctx.load_module(Ptx::from_binary(cubin)) {
            Ok(m) => Ok(m),
            // A stale or truncated cache entry: compile afresh (which rewrites the entry).
            Err(_) if from_cache => {
                let (cubin, _) = nvrtc::cubin(src, arch, false)?;
                self.inner
                    .ctx
                    .load_module(Ptx::from_binary(cubin))
                    .map_err(|e| CudaError::driver("cuModuleLoadData", e))
            }
            Err(e) => Err(CudaError::driver("cuModuleLoadData", e)),
        }
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice(cuda:{} {} sm_{}{})",
            self.inner.ordinal,
            self.inner.name,
            self.inner.compute_capability.0,
            self.inner.compute_capability.1
        )
    }
}

fn init_driver() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoDriver(
            "libcuda.so could not be loaded (is an NVIDIA driver installed?)".into(),
        ));
    }
    result::init().map_err(|e| CudaError::NoDriver(format!("cuInit failed: {e:?}")))
}

fn create(ordinal: usize) -> Result<Inner, CudaError> {
    init_driver()?;
    let count =
        result::device::get_count().map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
    let count = count.max(0) as usize;
    if ordinal >= count {
        return Err(CudaError::BadOrdinal { ordinal, count });
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::driver("cuCtxCreate", e))?;
    // SAFETY: this crate never creates cudarc-managed slices (buffers are raw pool pointers on
    // the one stream), so there is nothing for cudarc's per-buffer events to order (issue #386:
    // they cost host time on every launch).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx
        .new_stream()
        .map_err(|e| CudaError::driver("cuStreamCreate", e))?;
    let attr = |a: sys::CUdevice_attribute, call: &'static str| {
        ctx.attribute(a)
            .map(|v| v.max(0) as u32)
            .map_err(|e| CudaError::driver(call, e))
    };
    use sys::CUdevice_attribute as A;
    let compute_capability = (
        attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute",
        )?,
        attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute",
        )?,
    );
    let sm_count = attr(
        A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        "cuDeviceGetAttribute",
    )?;
    let max_shared_optin = attr(
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        "cuDeviceGetAttribute",
    )?;
    let name = ctx
        .name()
        .map_err(|e| CudaError::driver("cuDeviceGetName", e))?;
    let pool = Pool::new(
        CudaSegments {
            ctx: ctx.clone(),
            stream: stream.clone(),
        },
        ordinal,
    );
    Ok(Inner {
        pool: Mutex::new(pool),
        error_word: Mutex::new(None),
        modules: Mutex::new(HashMap::new()),
        stream,
        ctx,
        ordinal,
        name,
        compute_capability,
        sm_count,
        max_shared_optin,
    })
}
