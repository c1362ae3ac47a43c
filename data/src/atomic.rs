//! Files that appear whole or not at all: written as a temporary file in the destination folder
//! (same file system, so the final rename is atomic), synced, then renamed over the final name.
//! Dropped before [`persist`], the temporary file is removed.

use std::path::Path;

use tempfile::NamedTempFile;

use crate::error::{DataError, Result};

/// A temporary file beside `path`, readable by others like an ordinarily created file (tempfile's
/// default is owner-only).
pub(crate) fn temp_beside(path: &Path) -> Result<NamedTempFile> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".swax-tmp-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    builder.tempfile_in(dir).map_err(DataError::io(dir))
}

/// Syncs `tmp` and renames it to `path`.
pub(crate) fn persist(tmp: NamedTempFile, path: &Path) -> Result<()> {
    tmp.as_file().sync_all().map_err(DataError::io(path))?;
    tmp.persist(path)
        .map_err(|e| DataError::io(path)(e.error))?;
    Ok(())
}
