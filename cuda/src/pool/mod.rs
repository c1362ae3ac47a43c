//! The caching memory pool's bookkeeping: size classes, splitting, merging, free lists, stats.
//!
//! It is pure data: the driver is reached only through [`SegmentDriver`], so the tests below run
//! on the CPU with a fake driver. `driver.rs` holds the real one.
//!
//! Layout (after PyTorch's caching allocator, simplified to one stream):
//! - Every request is rounded up to [`GRANULE`] (512 B), so every block, and therefore every
//!   pointer handed out, is 512-byte aligned: vector loads in kernels never straddle.
//! - Requests up to [`SMALL_LIMIT`] (1 MiB) are *small*: they are carved out of 2 MiB segments
//!   that hold only small blocks, so thousands of tiny tensors cost a handful of driver calls and
//!   never fragment the large segments.
//! - Larger requests get their own segment, rounded up to 2 MiB; a cached large block that is
//!   bigger than needed is split when the remainder (> 1 MiB) could serve another large request.
//! - A freed block is merged with free neighbours of the same segment (never across segments:
//!   each segment is one driver allocation and must be freed whole), then filed in its pool's
//!   free list, ordered by (size, address); allocation takes the best fit.
//! - Stream order: there is one stream per device, so a block freed while kernels that use it are
//!   still queued can be handed to the next request at once: that request's work is queued after
//!   them on the same stream. Only returning memory to the driver needs a wait (`wait_idle`).

mod driver;

pub(crate) use driver::CudaSegments;

use crate::CudaError;
use std::collections::{BTreeMap, BTreeSet};

pub const GRANULE: usize = 512;
pub const SMALL_LIMIT: usize = 1 << 20;
pub const SMALL_SEGMENT: usize = 2 << 20;
pub const LARGE_SEGMENT_ROUND: usize = 2 << 20;

/// Why a segment allocation failed.
#[derive(Debug)]
pub enum SegmentAllocError {
    OutOfMemory,
    Other(CudaError),
}

/// The driver calls the pool needs. Addresses are device pointers (`CUdeviceptr`).
pub trait SegmentDriver {
    fn alloc(&mut self, bytes: usize) -> Result<u64, SegmentAllocError>;
    fn free(&mut self, ptr: u64, bytes: usize) -> Result<(), CudaError>;
    /// Waits until no queued work can still touch memory about to be returned to the driver.
    fn wait_idle(&mut self) -> Result<(), CudaError>;
    /// (free, total) device memory, for the out-of-memory message; `None` if unknown.
    fn mem_info(&self) -> Option<(usize, usize)>;
}

/// Counters of one device's pool. Byte counts are of rounded blocks, as held on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes in blocks currently handed out.
    pub in_use: usize,
    /// Bytes held from the driver (in use + cached).
    pub reserved: usize,
    /// Highest `in_use` seen.
    pub peak_in_use: usize,
    /// Allocations served from a cached block, with no driver call.
    pub cache_hits: u64,
    /// Allocations that needed a new segment from the driver.
    pub driver_allocs: u64,
    /// Segments returned to the driver (by `empty_cache` or out-of-memory recovery).
    pub driver_frees: u64,
    /// Segments currently held.
    pub segments: usize,
}

impl PoolStats {
    /// Bytes reserved from the driver but not in use.
    pub fn cached(&self) -> usize {
        self.reserved - self.in_use
    }
}

#[derive(Debug)]
struct Block {
    size: usize,
    segment: u64,
    free: bool,
}

#[derive(Debug)]
struct Segment {
    size: usize,
    small: bool,
}

pub struct Pool<D: SegmentDriver> {
    driver: D,
    ordinal: usize,
    /// Every block, free or not, by address.
    blocks: BTreeMap<u64, Block>,
    segments: BTreeMap<u64, Segment>,
    free_small: BTreeSet<(usize, u64)>,
    free_large: BTreeSet<(usize, u64)>,
    stats: PoolStats,
}

impl<D: SegmentDriver> Pool<D> {
    pub fn new(driver: D, ordinal: usize) -> Self {
        Pool {
            driver,
            ordinal,
            blocks: BTreeMap::new(),
            segments: BTreeMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            stats: PoolStats::default(),
        }
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Starts `peak_in_use` again from what is in use now, so a program can measure the peak
    /// of each phase it runs.
    pub fn reset_peak(&mut self) {
        self.stats.peak_in_use = self.stats.in_use;
    }

    /// Returns (address, block size) of a block of at least `bytes` bytes.
    pub fn alloc(&mut self, bytes: usize) -> Result<(u64, usize), CudaError> {
        let size = bytes
            .max(1)
            .checked_next_multiple_of(GRANULE)
            .ok_or_else(|| CudaError::invalid("alloc", format!("{bytes} bytes is too large")))?;
        let small = size <= SMALL_LIMIT;
        let addr = match self.take_free(size, small) {
            Some(addr) => {
                self.stats.cache_hits += 1;
                addr
            }
            None => self.new_segment(bytes, size, small)?,
        };
        self.split(addr, size, small);
        let block = self
            .blocks
            .get_mut(&addr)
            .expect("allocated block is registered");
        block.free = false;
        let block_size = block.size;
        self.stats.in_use += block_size;
        self.stats.peak_in_use = self.stats.peak_in_use.max(self.stats.in_use);
        Ok((addr, block_size))
    }

    /// Returns the block at `addr` (from [`Pool::alloc`]) to its free list.
    pub fn free(&mut self, addr: u64) {
        let Some(block) = self.blocks.get_mut(&addr) else {
            debug_assert!(false, "free of unknown block {addr:#x}");
            return;
        };
        if block.free {
            debug_assert!(false, "double free of block {addr:#x}");
            return;
        }
        block.free = true;
        let (mut start, mut size, segment) = (addr, block.size, block.segment);
        self.stats.in_use -= size;

        let next = addr + size as u64;
        if let Some(nb) = self.blocks.get(&next) {
            if nb.free && nb.segment == segment {
                let nsize = nb.size;
                self.unlist(next, nsize, segment);
                self.blocks.remove(&next);
                size += nsize;
            }
        }
        if let Some((&paddr, pb)) = self.blocks.range(..addr).next_back() {
            if pb.free && pb.segment == segment && paddr + pb.size as u64 == addr {
                let psize = pb.size;
                self.unlist(paddr, psize, segment);
                self.blocks.remove(&addr);
                start = paddr;
                size += psize;
            }
        }
        self.blocks.get_mut(&start).expect("merged block").size = size;
        self.list(start, size, segment);
    }

    /// Returns every segment with nothing in use to the driver; returns the bytes released.
    pub fn empty_cache(&mut self) -> Result<usize, CudaError> {
        let idle: Vec<(u64, usize)> = self
            .segments
            .iter()
            .filter(|(base, seg)| {
                self.blocks
                    .get(base)
                    .is_some_and(|b| b.free && b.size == seg.size)
            })
            .map(|(&base, seg)| (base, seg.size))
            .collect();
        if idle.is_empty() {
            return Ok(0);
        }
        self.driver.wait_idle()?;
        let mut released = 0;
        for (base, size) in idle {
            self.unlist(base, size, base);
            self.blocks.remove(&base);
            self.segments.remove(&base);
            self.stats.reserved -= size;
            self.stats.segments -= 1;
            self.stats.driver_frees += 1;
            released += size;
            self.driver.free(base, size)?;
        }
        Ok(released)
    }

    fn free_list(&mut self, small: bool) -> &mut BTreeSet<(usize, u64)> {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
        }
    }

    fn take_free(&mut self, size: usize, small: bool) -> Option<u64> {
        let list = self.free_list(small);
        let &(bsize, addr) = list.range((size, 0)..).next()?;
        list.remove(&(bsize, addr));
        Some(addr)
    }

    fn list(&mut self, addr: u64, size: usize, segment: u64) {
        let small = self.segments[&segment].small;
        self.free_list(small).insert((size, addr));
    }

    fn unlist(&mut self, addr: u64, size: usize, segment: u64) {
        let small = self.segments[&segment].small;
        self.free_list(small).remove(&(size, addr));
    }

    /// Gets a segment from the driver for a `size`-byte block; on out of memory, releases the
    /// cache and retries once.
    fn new_segment(&mut self, bytes: usize, size: usize, small: bool) -> Result<u64, CudaError> {
        let seg_size = if small {
            SMALL_SEGMENT
        } else {
            size.checked_next_multiple_of(LARGE_SEGMENT_ROUND)
                .ok_or_else(|| CudaError::invalid("alloc", format!("{bytes} bytes is too large")))?
        };
        let base = match self.driver.alloc(seg_size) {
            Ok(base) => base,
            Err(SegmentAllocError::Other(e)) => return Err(e),
            Err(SegmentAllocError::OutOfMemory) => {
                self.empty_cache()?;
                match self.driver.alloc(seg_size) {
                    Ok(base) => base,
                    Err(SegmentAllocError::Other(e)) => return Err(e),
                    Err(SegmentAllocError::OutOfMemory) => return Err(self.oom_error(bytes)),
                }
            }
        };
        self.segments.insert(
            base,
            Segment {
                size: seg_size,
                small,
            },
        );
        self.blocks.insert(
            base,
            Block {
                size: seg_size,
                segment: base,
                free: true,
            },
        );
        self.stats.reserved += seg_size;
        self.stats.segments += 1;
        self.stats.driver_allocs += 1;
        Ok(base)
    }

    /// Cuts the (unlisted) block at `addr` down to `size` when the rest is worth keeping: any
    /// remainder in a small segment, and in a large one only a remainder that could itself serve
    /// a large request (a smaller sliver stays inside the block as slack).
    fn split(&mut self, addr: u64, size: usize, small: bool) {
        let block = self.blocks.get_mut(&addr).expect("block to split");
        let rest = block.size - size;
        let worth = if small { rest > 0 } else { rest > SMALL_LIMIT };
        if !worth {
            return;
        }
        block.size = size;
        let segment = block.segment;
        let raddr = addr + size as u64;
        self.blocks.insert(
            raddr,
            Block {
                size: rest,
                segment,
                free: true,
            },
        );
        self.list(raddr, rest, segment);
    }

    fn oom_error(&self, requested: usize) -> CudaError {
        let (device_free, device_total) = self.driver.mem_info().unwrap_or((0, 0));
        CudaError::OutOfMemory {
            ordinal: self.ordinal,
            requested,
            in_use: self.stats.in_use,
            cached: self.stats.cached(),
            device_free,
            device_total,
        }
    }
}

impl<D: SegmentDriver> Drop for Pool<D> {
    /// Buffers hold their device (and so this pool) alive, so by now nothing is in use.
    fn drop(&mut self) {
        let _ = self.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Default)]
    struct Log {
        allocs: usize,
        frees: usize,
        waits: usize,
        held: usize,
    }

    /// Hands out contiguous addresses (so neighbouring segments touch, which must not merge)
    /// up to a capacity.
    struct FakeDriver {
        next: u64,
        capacity: usize,
        log: Rc<RefCell<Log>>,
    }

    impl SegmentDriver for FakeDriver {
        fn alloc(&mut self, bytes: usize) -> Result<u64, SegmentAllocError> {
            let mut log = self.log.borrow_mut();
            if log.held + bytes > self.capacity {
                return Err(SegmentAllocError::OutOfMemory);
            }
            log.allocs += 1;
            log.held += bytes;
            let p = self.next;
            self.next += bytes as u64;
            Ok(p)
        }
        fn free(&mut self, _ptr: u64, bytes: usize) -> Result<(), CudaError> {
            let mut log = self.log.borrow_mut();
            log.frees += 1;
            log.held -= bytes;
            Ok(())
        }
        fn wait_idle(&mut self) -> Result<(), CudaError> {
            self.log.borrow_mut().waits += 1;
            Ok(())
        }
        fn mem_info(&self) -> Option<(usize, usize)> {
            Some((self.capacity - self.log.borrow().held, self.capacity))
        }
    }

    const MIB: usize = 1 << 20;

    fn pool(capacity: usize) -> (Pool<FakeDriver>, Rc<RefCell<Log>>) {
        let log = Rc::new(RefCell::new(Log::default()));
        let driver = FakeDriver {
            next: 1 << 40,
            capacity,
            log: log.clone(),
        };
        (Pool::new(driver, 3), log)
    }

    #[test]
    fn freed_block_is_reused_without_driver_calls() {
        let (mut p, log) = pool(64 * MIB);
        let (a, size) = p.alloc(1000).unwrap();
        assert_eq!(size, 1024);
        assert_eq!(a % GRANULE as u64, 0);
        p.free(a);
        let (b, _) = p.alloc(900).unwrap();
        assert_eq!(a, b);
        assert_eq!(log.borrow().allocs, 1);
        let s = p.stats();
        assert_eq!((s.driver_allocs, s.cache_hits), (1, 1));

        let (c, _) = p.alloc(5 * MIB).unwrap();
        p.free(c);
        let (d, _) = p.alloc(5 * MIB).unwrap();
        assert_eq!(c, d);
        assert_eq!(log.borrow().allocs, 2);
    }

    #[test]
    fn small_segment_is_split_and_merged_back() {
        let (mut p, log) = pool(64 * MIB);
        let (a, _) = p.alloc(512).unwrap();
        let (b, _) = p.alloc(512).unwrap();
        let (c, _) = p.alloc(1024).unwrap();
        assert_eq!(log.borrow().allocs, 1, "one 2 MiB segment serves all three");
        assert_eq!(b, a + 512);
        assert_eq!(c, b + 512);
        assert_eq!(p.stats().reserved, SMALL_SEGMENT);
        p.free(b);
        p.free(a);
        // a and b merged into one 1 KiB block, the best fit for 1 KiB.
        let (d, size) = p.alloc(1024).unwrap();
        assert_eq!((d, size), (a, 1024));
        p.free(d);
        p.free(c);
        assert_eq!(
            p.free_small.len(),
            1,
            "everything merged back into the segment"
        );
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn large_blocks_split_only_when_the_rest_is_usable() {
        let (mut p, log) = pool(64 * MIB);
        let (a, size) = p.alloc(3 * MIB).unwrap();
        assert_eq!(
            size,
            4 * MIB,
            "a 1 MiB remainder is too small for the large pool"
        );
        let (b, _) = p.alloc(5 * MIB).unwrap();
        assert_eq!(p.stats().reserved, 10 * MIB);
        p.free(b);
        let (c, size) = p.alloc(2 * MIB).unwrap();
        assert_eq!((c, size), (b, 2 * MIB), "6 MiB segment split into 2 + 4");
        let (d, size) = p.alloc(4 * MIB).unwrap();
        assert_eq!((d, size), (b + 2 * MIB as u64, 4 * MIB));
        assert_eq!(log.borrow().allocs, 2);
        p.free(a);
        p.free(c);
        p.free(d);
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn adjacent_segments_never_merge() {
        let (mut p, _) = pool(64 * MIB);
        let (a, _) = p.alloc(2 * MIB).unwrap();
        let (b, _) = p.alloc(2 * MIB).unwrap();
        assert_eq!(
            b,
            a + 2 * MIB as u64,
            "the fake driver hands out touching segments"
        );
        p.free(a);
        p.free(b);
        assert_eq!(p.free_large.len(), 2);
        assert_eq!(p.empty_cache().unwrap(), 4 * MIB);
        assert_eq!(p.stats().segments, 0);
    }

    #[test]
    fn stats_track_use_peak_and_reservation() {
        let (mut p, _) = pool(64 * MIB);
        let (a, _) = p.alloc(4 * MIB).unwrap();
        let (b, _) = p.alloc(100).unwrap();
        let s = p.stats();
        assert_eq!(s.in_use, 4 * MIB + 512);
        assert_eq!(s.reserved, 4 * MIB + SMALL_SEGMENT);
        assert_eq!(s.segments, 2);
        p.free(a);
        let s = p.stats();
        assert_eq!((s.in_use, s.peak_in_use), (512, 4 * MIB + 512));
        assert_eq!(s.cached(), 4 * MIB + SMALL_SEGMENT - 512);
        p.reset_peak();
        assert_eq!(p.stats().peak_in_use, 512);
        p.free(b);
    }

    #[test]
    fn empty_cache_releases_only_idle_segments() {
        let (mut p, log) = pool(64 * MIB);
        let (a, _) = p.alloc(4 * MIB).unwrap();
        let (b, _) = p.alloc(8 * MIB).unwrap();
        let (c, _) = p.alloc(1000).unwrap();
        p.free(b);
        assert_eq!(p.empty_cache().unwrap(), 8 * MIB);
        assert_eq!(log.borrow().frees, 1);
        assert_eq!(log.borrow().waits, 1, "waits for the stream before freeing");
        assert_eq!(p.stats().reserved, 4 * MIB + SMALL_SEGMENT);
        assert_eq!(p.stats().driver_frees, 1);
        p.free(a);
        p.free(c);
        assert_eq!(p.empty_cache().unwrap(), 4 * MIB + SMALL_SEGMENT);
        assert_eq!(log.borrow().held, 0);
    }

    #[test]
    fn out_of_memory_releases_cache_and_retries_once() {
        let (mut p, log) = pool(16 * MIB);
        let (a, _) = p.alloc(10 * MIB).unwrap();
        p.free(a);
        // 10 MiB cached + 12 MiB > 16 MiB: the first driver call fails, the cache is released,
        // the retry succeeds.
        let (b, _) = p.alloc(12 * MIB).unwrap();
        assert_eq!(log.borrow().frees, 1);
        assert_eq!(p.stats().reserved, 12 * MIB);
        let (c, _) = p.alloc(1000).unwrap();

        let err = p.alloc(6 * MIB).unwrap_err();
        let msg = err.to_string();
        let in_use = 12 * MIB + 1024;
        let cached = SMALL_SEGMENT - 1024;
        for part in [
            format!("requested {} bytes", 6 * MIB),
            format!("{in_use} bytes in use"),
            format!("{cached} bytes cached"),
            format!("{} bytes free of {}", 2 * MIB, 16 * MIB),
            "device 3".to_string(),
        ] {
            assert!(msg.contains(&part), "{msg:?} lacks {part:?}");
        }
        // Nothing already allocated was touched.
        let s = p.stats();
        assert_eq!((s.in_use, s.reserved), (in_use, 12 * MIB + SMALL_SEGMENT));
        p.free(b);
        p.free(c);
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn absurd_sizes_are_errors() {
        let (mut p, _) = pool(16 * MIB);
        assert!(p.alloc(usize::MAX - 10).is_err());
    }
}
