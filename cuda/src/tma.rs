//! Tensor maps for Hopper's tensor memory accelerator (TMA; the kernels' side is
//! `kernels/tma.cuh`): what a kernel needs to copy a box of a bf16 tensor from global into shared
//! memory with one instruction. A map describes the tensor (its address, sizes and strides) and
//! the box once, on the host; the kernel takes it by value as a 128-byte parameter.
//!
//! The maps made here read boxes whose rows are 64 bf16 (128 bytes) wide, written into shared
//! memory in the 128-byte swizzle layout that wgmma reads, with zeros wherever a box leaves the
//! tensor (so a tile past the sequence's end needs no care in the kernel).
use crate::kernels::KernelArg;
use crate::{Buffer, CudaError, DType};
use cudarc::driver::sys;
use std::ffi::c_void;

/// Elements of a box row: 128 bytes of bf16, the widest row the 128-byte swizzle takes.
pub const BOX_COLS: usize = 64;

/// An encoded tensor map (`CUtensorMap`), passed to a kernel as a `__grid_constant__` value.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct TensorMap([u64; 16]);

impl KernelArg for TensorMap {
    fn as_param(&self) -> *mut c_void {
        self as *const TensorMap as *mut c_void
    }
}

/// What `cuTensorMapEncodeTiled` takes for a map, innermost dimension first: sizes, byte
/// strides of the dimensions after the innermost (which is contiguous), box sizes.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    sizes: Vec<u64>,
    strides: Vec<u64>,
    boxes: Vec<u32>,
}

/// The layout of a row-major bf16 tensor of `len` elements and sizes `dims` (outermost first,
/// rank 2 to 5), boxes of `box_rows` indices of dimension `row_dim` by `BOX_COLS` elements of
/// the innermost and one index of every other dimension; an error names what does not fit.
fn layout(
    op: &'static str,
    dims: &[usize],
    len: usize,
    row_dim: usize,
    box_rows: usize,
) -> Result<Layout, CudaError> {
    let rank = dims.len();
    let fail = |why: String| CudaError::invalid(op, format!("tensor map of {dims:?}: {why}"));
    if !(2..=5).contains(&rank) || row_dim + 1 >= rank {
        return Err(fail(format!(
            "rank {rank} with rows along dimension {row_dim} (want rank 2 to 5, rows before the innermost)"
        )));
    }
    if dims.iter().product::<usize>() != len {
        return Err(fail(format!("{len} elements in the buffer")));
    }
    if !dims[rank - 1].is_multiple_of(BOX_COLS) || !(1..=256).contains(&box_rows) {
        return Err(fail(format!(
            "rows of {} elements (want a multiple of {BOX_COLS}), boxes of {box_rows} rows (want 1 to 256)",
            dims[rank - 1]
        )));
    }
    let sizes: Vec<u64> = dims.iter().rev().map(|&n| n as u64).collect();
    let strides = sizes[..rank - 1]
        .iter()
        .scan(2u64, |stride, &n| {
            *stride *= n;
            Some(*stride)
        })
        .collect();
    let mut boxes = vec![1u32; rank];
    boxes[0] = BOX_COLS as u32;
    boxes[rank - 1 - row_dim] = box_rows as u32;
    Ok(Layout {
        sizes,
        strides,
        boxes,
    })
}

impl TensorMap {
    /// A map of `buf`, a row-major bf16 tensor of sizes `dims` (outermost first, rank 2 to 5),
    /// whose box is `box_rows` indices of dimension `row_dim` by `BOX_COLS` elements of the
    /// innermost and one index of every other dimension.
    pub fn bf16_rows(
        op: &'static str,
        buf: &Buffer,
        dims: &[usize],
        row_dim: usize,
        box_rows: usize,
    ) -> Result<TensorMap, CudaError> {
        if buf.dtype() != DType::BF16 {
            let why = format!("tensor map of {dims:?}: {} data, want bf16", buf.dtype());
            return Err(CudaError::invalid(op, why));
        }
        let Layout {
            sizes,
            strides,
            boxes,
        } = layout(op, dims, buf.len(), row_dim, box_rows)?;
        let rank = sizes.len();
        let steps = vec![1u32; rank];
        let mut map = TensorMap([0; 16]);
        // SAFETY: map is a 64-byte aligned CUtensorMap-sized value; the arrays hold `rank`
        // entries (strides rank - 1); the address is a live device allocation of `dims`' size,
        // 512-byte aligned by the pool; the strides are multiples of 16 bytes (rows of a
        // multiple of 64 bf16).
        unsafe {
            sys::cuTensorMapEncodeTiled(
                (&mut map as *mut TensorMap).cast(),
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                rank as u32,
                buf.device_ptr() as *mut c_void,
                sizes.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                steps.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
            .result()
        }
        .map_err(|e| CudaError::driver("cuTensorMapEncodeTiled", e))?;
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_innermost_first_in_bytes() {
        // q of attention: [B, T, H, D], boxes of 128 positions of one head.
        let l = layout("t", &[2, 100, 4, 128], 2 * 100 * 4 * 128, 1, 128).unwrap();
        assert_eq!(l.sizes, [128, 4, 100, 2]);
        assert_eq!(l.strides, [256, 4 * 256, 100 * 4 * 256]);
        assert_eq!(l.boxes, [64, 1, 128, 1]);
        let l = layout("t", &[7, 64], 7 * 64, 0, 5).unwrap();
        assert_eq!((l.strides, l.boxes), (vec![128], vec![64, 5]));
    }

    #[test]
    fn layout_names_what_does_not_fit() {
        let err = |dims: &[usize], len, row_dim, rows| {
            layout("op", dims, len, row_dim, rows)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[2, 3, 64], 2 * 3 * 64 - 1, 1, 8).contains("383 elements in the buffer"));
        assert!(err(&[2, 3, 96], 2 * 3 * 96, 1, 8).contains("rows of 96 elements"));
        assert!(err(&[2, 3, 64], 2 * 3 * 64, 1, 257).contains("boxes of 257 rows"));
        assert!(err(&[2, 3, 64], 2 * 3 * 64, 2, 8).contains("rows along dimension 2"));
        assert!(err(&[64], 64, 0, 8).contains("rank 1"));
        assert!(err(&[1, 1, 1, 1, 1, 64], 64, 0, 8).contains("rank 6"));
    }
}
