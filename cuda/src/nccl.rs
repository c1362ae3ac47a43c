//! Collectives across processes, one GPU each, through NCCL: the sums of buffers over all ranks
//! and a broadcast from one rank, on a stream of their own so they overlap the device's compute
//! stream.
//!
//! Ordering: a collective waits (on the device) for the compute stream's work queued before it,
//! through an event; the compute stream does not wait for it on the device: the host waits for
//! it in [`Comm::wait`], polling its event, NCCL's asynchronous error and a timeout, so a rank
//! that died or stalled turns into an error on the others instead of a hang. The pool assumes
//! one stream per device (a freed block may be reused at once by later compute work), so the
//! caller keeps every buffer a collective reads alive until `wait` has returned.
//!
//! libnccl is loaded at the first call here and nowhere else: a run on one device never needs
//! it. cudarc looks for `libnccl.so` (and `.so.13`, `.so.12`, ...) on the library path, not
//! `libnccl.so.2`, the only name pip's nvidia-nccl wheels ship; [`load`] says so when it fails.
use std::cell::Cell;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{sys as sys_driver, CudaEvent, CudaStream};
use cudarc::nccl::{result, sys};

use crate::guard::guard_loader;
use crate::{Buffer, CudaDevice, CudaError, DType};

/// Why NCCL could not be loaded, and how to make it loadable.
const NOT_FOUND: &str = "libnccl could not be loaded. Training on several GPUs needs NCCL: put \
     the folder holding it on LD_LIBRARY_PATH. cudarc looks for libnccl.so (or libnccl.so.13, \
     .12, ...), not libnccl.so.2, the only name pip's nvidia-nccl-cu13 ships \
     (site-packages/nvidia/nccl/lib): link it once with `ln -s libnccl.so.2 libnccl.so` in that \
     folder";

/// Loads libnccl (once), or says why it cannot be and what to do.
pub fn load() -> Result<i32, CudaError> {
    guard_loader("libnccl", || {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::Nccl {
                call: "load",
                message: NOT_FOUND.into(),
            });
        }
        result::get_nccl_version().map_err(|e| nccl_error("ncclGetVersion", e))
    })
}

fn nccl_error(call: &'static str, e: result::NcclError) -> CudaError {
    CudaError::Nccl {
        call,
        message: describe(e.0),
    }
}

fn describe(r: sys::ncclResult_t) -> String {
    // SAFETY: NCCL returns a static string for every result code.
    let text = unsafe { std::ffi::CStr::from_ptr(sys::ncclGetErrorString(r)) };
    format!("{} ({r:?})", text.to_string_lossy())
}

/// The token rank 0 creates and every rank needs to join one communicator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl UniqueId {
    pub fn new() -> Result<UniqueId, CudaError> {
        load()?;
        let id = result::get_uniqueid().map_err(|e| nccl_error("ncclGetUniqueId", e))?;
        Ok(UniqueId(id.internal.map(|c| c as u8)))
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId(..)")
    }
}

/// A raw communicator handle, moved once from the thread that formed it to its owner.
struct Raw(sys::ncclComm_t);
// SAFETY: a communicator may be used from any thread, one at a time; `Comm` owns it alone.
unsafe impl Send for Raw {}

/// This rank's member of a communicator, on one device, with its own stream.
pub struct Comm {
    raw: sys::ncclComm_t,
    /// Set once aborted: the handle is gone and every later call fails.
    aborted: Cell<bool>,
    device: CudaDevice,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    timeout: Duration,
}

// SAFETY: see `Raw`; the rest is Send.
unsafe impl Send for Comm {}

/// A queued collective: its results, and the event the host waits for.
pub struct Launched {
    pub out: Vec<Buffer>,
    done: CudaEvent,
}

impl Comm {
    /// Joins the communicator of `world` ranks that `id` names, as `rank`, on `device`. Every
    /// rank must call it; one that has not within `timeout` makes it an error naming the wait.
    pub fn new(
        device: &CudaDevice,
        rank: usize,
        world: usize,
        id: &UniqueId,
        timeout: Duration,
    ) -> Result<Comm, CudaError> {
        load()?;
        let stream = device
            .context()
            .new_stream()
            .map_err(|e| CudaError::driver("cuStreamCreate", e))?;
        let (tx, rx) = mpsc::channel();
        let (dev, side, id) = (device.clone(), stream.clone(), *id);
        // In a thread of its own: ncclCommInitRank blocks until every rank has joined, and the
        // first collective until every rank's connections are made (done here, on one value).
        std::thread::spawn(move || {
            let formed = dev.bind().and_then(|()| {
                let mut raw = std::ptr::null_mut();
                let id = sys::ncclUniqueId {
                    internal: id.0.map(|b| b as std::ffi::c_char),
                };
                // SAFETY: `raw` receives the new handle; the id is what rank 0 created.
                unsafe { result::comm_init_rank(&mut raw, world as i32, id, rank as i32) }
                    .map_err(|e| nccl_error("ncclCommInitRank", e))?;
                let one = dev.alloc(DType::F32, 1)?;
                // SAFETY: a live one-element buffer (its value unused), summed in place on the
                // communicator's stream.
                unsafe {
                    result::all_reduce(
                        one.device_ptr() as _,
                        one.device_ptr() as _,
                        1,
                        sys::ncclDataType_t::ncclFloat32,
                        sys::ncclRedOp_t::ncclSum,
                        raw,
                        side.cu_stream() as _,
                    )
                }
                .map_err(|e| nccl_error("ncclAllReduce", e))?;
                side.synchronize()
                    .map_err(|e| CudaError::driver("cuStreamSynchronize", e))?;
                Ok(Raw(raw))
            });
            // The receiver is gone only if the caller timed out; the process is stopping then.
            let _ = tx.send(formed);
        });
        let raw = match rx.recv_timeout(timeout) {
            Ok(formed) => formed?.0,
            Err(_) => {
                return Err(CudaError::Nccl {
                    call: "ncclCommInitRank",
                    message: format!(
                        "rank {rank} of {world}: the ranks did not all join within {} s; is \
                         every rank started, and do they share the rendezvous address?",
                        timeout.as_secs()
                    ),
                })
            }
        };
        Ok(Comm {
            raw,
            aborted: Cell::new(false),
            device: device.clone(),
            stream,
            rank,
            world,
            timeout,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Queues, on the communication stream after the compute stream's work so far, the sum over
    /// the ranks of each buffer (f32, bf16 or u32) into a new buffer, all in one NCCL group.
    /// Keep `bufs` alive until [`Comm::wait`] has returned for it.
    pub fn all_reduce_sum(&self, bufs: &[&Buffer]) -> Result<Launched, CudaError> {
        self.collective(bufs, |raw, src, dst, len, dtype, stream| {
            // SAFETY: `src` and `dst` are live buffers of `len` elements on this device.
            unsafe {
                result::all_reduce(
                    src as _,
                    dst as _,
                    len,
                    dtype,
                    sys::ncclRedOp_t::ncclSum,
                    raw,
                    stream,
                )
            }
            .map_err(|e| nccl_error("ncclAllReduce", e))
            .map(drop)
        })
    }

    /// Queues a copy of rank 0's `bufs` into new buffers on every rank (the others' `bufs` give
    /// the sizes). Keep `bufs` alive until [`Comm::wait`] has returned for it.
    pub fn broadcast(&self, bufs: &[&Buffer]) -> Result<Launched, CudaError> {
        self.collective(bufs, |raw, src, dst, len, dtype, stream| {
            // SAFETY: as in `all_reduce_sum`.
            unsafe { result::broadcast(src as _, dst as _, len, dtype, 0, raw, stream) }
                .map_err(|e| nccl_error("ncclBroadcast", e))
                .map(drop)
        })
    }

    /// The sums over the ranks of a few host values (a step's loss, its stop flag), in f64,
    /// waited for.
    pub fn sum_host(&self, values: &[f64]) -> Result<Vec<f64>, CudaError> {
        // f64 through u32 pairs: the pool has no f64 buffers; NCCL reads them as f64.
        let words: Vec<u32> = values
            .iter()
            .flat_map(|v| {
                let b = v.to_bits();
                [b as u32, (b >> 32) as u32]
            })
            .collect();
        let buf = self.device.htod(&words)?;
        let launched = self.collective(&[&buf], |raw, src, dst, len, _, stream| {
            // SAFETY: `len` u32 words hold `len / 2` f64 values.
            unsafe {
                result::all_reduce(
                    src as _,
                    dst as _,
                    len / 2,
                    sys::ncclDataType_t::ncclFloat64,
                    sys::ncclRedOp_t::ncclSum,
                    raw,
                    stream,
                )
            }
            .map_err(|e| nccl_error("ncclAllReduce", e))
            .map(drop)
        })?;
        self.wait(&launched)?;
        let words: Vec<u32> = self.device.dtoh(&launched.out[0])?;
        Ok(words
            .chunks(2)
            .map(|w| f64::from_bits(u64::from(w[0]) | (u64::from(w[1]) << 32)))
            .collect())
    }

    fn collective(
        &self,
        bufs: &[&Buffer],
        op: impl Fn(
            sys::ncclComm_t,
            u64,
            u64,
            usize,
            sys::ncclDataType_t,
            sys::cudaStream_t,
        ) -> Result<(), CudaError>,
    ) -> Result<Launched, CudaError> {
        self.check_alive("collective")?;
        let out = bufs
            .iter()
            .map(|b| {
                self.device.check_owner("nccl", b)?;
                self.device.alloc(b.dtype(), b.len())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ready = self
            .device
            .stream()
            .record_event(None)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        self.stream
            .wait(&ready)
            .map_err(|e| CudaError::driver("cuStreamWaitEvent", e))?;
        let stream = self.stream.cu_stream() as sys::cudaStream_t;
        result::group_start().map_err(|e| nccl_error("ncclGroupStart", e))?;
        let queued = bufs.iter().zip(&out).try_for_each(|(b, o)| {
            op(
                self.raw,
                b.device_ptr(),
                o.device_ptr(),
                b.len(),
                nccl_dtype(b.dtype())?,
                stream,
            )
        });
        let ended = result::group_end().map_err(|e| nccl_error("ncclGroupEnd", e));
        queued?;
        ended?;
        let done = self
            .stream
            .record_event(Some(sys_driver::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        Ok(Launched { out, done })
    }

    /// Waits for every one of `launched` (see [`Comm::wait`]) and returns the seconds the last
    /// ran past the compute stream's work queued before this call: the collectives' time not
    /// hidden behind the compute (0 when they finished first).
    pub fn wait_all(&self, launched: &[&Launched]) -> Result<f64, CudaError> {
        let mark = self
            .device
            .stream()
            .record_event(Some(sys_driver::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        for l in launched {
            self.wait(l)?;
        }
        let Some(last) = launched.last() else {
            return Ok(0.0);
        };
        let ms = mark
            .elapsed_ms(&last.done)
            .map_err(|e| CudaError::driver("cuEventElapsedTime", e))?;
        Ok(f64::from(ms.max(0.0)) / 1e3)
    }

    /// Waits (on the host) until `launched` has completed. NCCL's asynchronous error (a peer
    /// gone) or no completion within the timeout aborts the communicator and is an error: the
    /// caller stops instead of hanging.
    pub fn wait(&self, launched: &Launched) -> Result<(), CudaError> {
        let start = Instant::now();
        loop {
            self.check_alive("wait")?;
            match launched.done.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(CudaError::driver("cuEventQuery", e)),
            }
            let mut state = sys::ncclResult_t::ncclSuccess;
            // SAFETY: a live communicator; `state` receives its asynchronous error.
            unsafe { sys::ncclCommGetAsyncError(self.raw, &mut state) }
                .result()
                .map_err(|e| nccl_error("ncclCommGetAsyncError", e))?;
            if !matches!(
                state,
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
            ) {
                return Err(self.abort(format!(
                    "rank {} of {}: a collective failed: {} (did another rank stop?)",
                    self.rank,
                    self.world,
                    describe(state)
                )));
            }
            if start.elapsed() > self.timeout {
                return Err(self.abort(format!(
                    "rank {} of {}: a collective did not complete within {} s: another rank \
                     stopped or stalled",
                    self.rank,
                    self.world,
                    self.timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Aborts the communicator (its queued work is cancelled, the other ranks' collectives
    /// fail), returning `why` as the error.
    pub fn abort(&self, why: String) -> CudaError {
        if !self.aborted.replace(true) {
            // SAFETY: a live handle, aborted once; `Drop` and later calls see `aborted`.
            let _ = unsafe { result::comm_abort(self.raw) };
        }
        CudaError::Nccl {
            call: "wait",
            message: why,
        }
    }

    fn check_alive(&self, call: &'static str) -> Result<(), CudaError> {
        match self.aborted.get() {
            false => Ok(()),
            true => Err(CudaError::Nccl {
                call,
                message: format!("rank {}: the communicator was aborted", self.rank),
            }),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if !self.aborted.get() {
            // SAFETY: the handle is live and no collective on it is pending past `wait`.
            let _ = unsafe { result::comm_destroy(self.raw) };
        }
    }
}

fn nccl_dtype(dtype: DType) -> Result<sys::ncclDataType_t, CudaError> {
    Ok(match dtype {
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
        DType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        DType::U32 => sys::ncclDataType_t::ncclUint32,
        other => {
            return Err(CudaError::invalid(
                "nccl",
                format!("no collective on {other} buffers"),
            ))
        }
    })
}
