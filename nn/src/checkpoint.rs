//! Named tensors in safetensors files, written atomically. A model's weights are saved under
//! their parameter names as f32 (bf16 tensors as bf16; token ids as u32), so
//! `safetensors.torch.load_file` reads them as they are; a Linear's weight is stored `[in, out]` (`y = x W`), the transpose of
//! PyTorch's `nn.Linear.weight`.
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use swax_tensor::{DType, Device, Error, Result, Tensor};

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Invalid {
        op: "checkpoint",
        msg: format!("{}: {e}", path.display()),
    }
}

/// What a temporary file of [`write_atomic`] has in its name after the final file's name.
const TMP_MARK: &str = ".tmp-";

/// Writes `bytes` to `path` so that it appears whole or not at all: a temporary file beside it
/// (`.NAME.tmp-PID`), synced, then renamed over it. A failed write removes its temporary file;
/// one left by a killed process is found by [`is_temporary`]. Errors name `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}{TMP_MARK}{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        // Best effort: the error that matters is the write's.
        let _ = std::fs::remove_file(&tmp);
        std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    })
}

/// Whether `name` is that of a temporary file [`write_atomic`] leaves when its process dies
/// mid-write.
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.')
        && name
            .rsplit_once(TMP_MARK)
            .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Saves `tensors` (any device; F32, BF16 or U32) with string `metadata` to `path`, atomically.
pub fn save(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<()> {
    let mut blobs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let (dtype, bytes) = match t.dtype() {
            DType::F32 => (
                Dtype::F32,
                t.to_vec::<f32>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            DType::BF16 => (
                Dtype::BF16,
                t.to_vec::<half::bf16>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            DType::U32 => (
                Dtype::U32,
                t.to_vec::<u32>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            other => {
                return Err(Error::UnsupportedDType {
                    op: "checkpoint::save",
                    dtype: other,
                })
            }
        };
        blobs.push((name.clone(), dtype, t.dims().to_vec(), bytes));
    }
    let views = blobs
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes).map(|v| (name.as_str(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| io(path, e))?;
    let bytes = safetensors::serialize(views, Some(metadata)).map_err(|e| io(path, e))?;
    write_atomic(path, &bytes).map_err(|e| Error::Invalid {
        op: "checkpoint",
        msg: e.to_string(),
    })
}

/// The tensors of a safetensors file (on the CPU, in the file's dtype) and its metadata.
pub fn load(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| io(path, e))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| io(path, e))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let data = view.data();
        let shape = view.shape().to_vec();
        let t = match view.dtype() {
            Dtype::F32 => Tensor::from_vec(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<_>>(),
                shape,
                Device::Cpu,
            )?,
            Dtype::BF16 => Tensor::from_vec(
                data.chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
                    .collect::<Vec<_>>(),
                shape,
                Device::Cpu,
            )?,
            Dtype::U32 => Tensor::from_vec(
                data.chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<_>>(),
                shape,
                Device::Cpu,
            )?,
            other => {
                return Err(io(
                    path,
                    format!("tensor {name}: unsupported dtype {other:?}"),
                ))
            }
        };
        out.insert(name, t);
    }
    Ok((out, meta.metadata().clone().unwrap_or_default()))
}
