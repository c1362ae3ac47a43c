//! The pool's real driver: segments from `cuMemAlloc`, returned with `cuMemFree`.

use super::{SegmentAllocError, SegmentDriver};
use crate::CudaError;
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::sync::Arc;

pub(crate) struct CudaSegments {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
}

impl SegmentDriver for CudaSegments {
    fn alloc(&mut self, bytes: usize) -> Result<u64, SegmentAllocError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| SegmentAllocError::Other(CudaError::driver("cuCtxSetCurrent", e)))?;
        // SAFETY: a plain allocation in the bound context; the pool owns the pointer from here.
        match unsafe { result::malloc_sync(bytes) } {
            Ok(ptr) => Ok(ptr),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(SegmentAllocError::OutOfMemory)
            }
            Err(e) => Err(SegmentAllocError::Other(CudaError::driver("cuMemAlloc", e))),
        }
    }

    fn free(&mut self, ptr: u64, _bytes: usize) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        // SAFETY: `ptr` came from `alloc` above, is freed once (the pool forgets it first), and
        // `wait_idle` ran before, so no queued kernel still uses it.
        unsafe { result::free_sync(ptr) }.map_err(|e| CudaError::driver("cuMemFree", e))
    }

    fn wait_idle(&mut self) -> Result<(), CudaError> {
        crate::counters::sync();
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("cuStreamSynchronize", e))
    }

    fn mem_info(&self) -> Option<(usize, usize)> {
        self.ctx.mem_get_info().ok()
    }
}
