//! Compiling the embedded `.cu` kernel sources with NVRTC, and the on-disk cache of the results.
//!
//! Sources are compiled for the device's own architecture (`sm_XY`) straight to CUBIN, so the
//! driver has no PTX to JIT and no PTX-version mismatch with an older driver can occur. Results
//! are cached under `$SWAX_CACHE_DIR`, else `$XDG_CACHE_HOME/swax`, else `~/.cache/swax`, in
//! `kernels/`, keyed by a hash of the source, the shared header, the architecture, the NVRTC
//! version and the options. Failing to write the cache is not an error: it only costs a
//! recompile next time.

use crate::guard::guard_loader;
use crate::CudaError;
use cudarc::nvrtc::{result, sys};
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;

/// One `.cu` file (with the headers it uses before it), embedded in the binary: this crate's
/// kernels and the fused mixers' (in swax-nn).
pub struct KernelSource {
    /// Module name, used in errors and cache file names.
    pub name: &'static str,
    /// The source's parts, compiled as one text in this order: the shared headers it uses
    /// (`kernels::MMA_CUH`, ...), then its own file.
    pub source: &'static [&'static str],
}

/// Included by every kernel file as `#include "common.cuh"`; handed to NVRTC as an in-memory
/// header so no include path is needed. It brings its own bf16 type (see the file), so kernels
/// do not depend on the CUDA headers being installed where the program runs.
const COMMON_HEADER: &str = include_str!("../kernels/common.cuh");
const COMMON_HEADER_NAME: &str = "common.cuh";

/// Hopper (9.0) gets its architecture-specific target, sm_90a, which wgmma needs (such code
/// runs on 9.0 devices only, which is what it is compiled for).
fn options(arch: (u32, u32)) -> Vec<String> {
    let feature = if arch == (9, 0) { "a" } else { "" };
    vec![
        format!("--gpu-architecture=sm_{}{}{feature}", arch.0, arch.1),
        "--std=c++17".into(),
    ]
}

/// CUBIN for `src` on `arch`, from the disk cache when `use_cache` and present, else compiled.
/// The flag says whether it came from the cache (a cache entry the driver rejects is recompiled).
pub(crate) fn cubin(
    src: &KernelSource,
    arch: (u32, u32),
    use_cache: bool,
) -> Result<(Vec<u8>, bool), CudaError> {
    guard_loader("libnvrtc", || {
        // SAFETY: only tries to dlopen the NVRTC library.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::LibraryMissing {
                lib: "libnvrtc",
                reason: "libnvrtc.so could not be loaded (is the CUDA toolkit installed?)".into(),
            });
        }
        let path = cache_path(src, arch, nvrtc_version()?);
        if use_cache {
            if let Some(bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
                return Ok((bytes, true));
            }
        }
        let bytes = compile(src, arch)?;
        if let Some(p) = path {
            write_cache(&p, &bytes);
        }
        Ok((bytes, false))
    })
}

fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::LibraryMissing {
            lib: "libnvrtc",
            reason: format!("nvrtcVersion failed: {e:?}"),
        })?;
    Ok((major, minor))
}

/// Destroys the NVRTC program however compilation ends.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn compile(src: &KernelSource, arch: (u32, u32)) -> Result<Vec<u8>, CudaError> {
    let fail = |log: String| CudaError::Compile {
        module: src.name,
        arch: format!("sm_{}{}", arch.0, arch.1),
        log,
    };
    let nul = |s: &str| CString::new(s).map_err(|_| fail("source contains a NUL byte".into()));
    let source = nul(&src.source.concat())?;
    let file_name = nul(&format!("{}.cu", src.name))?;
    let header = nul(COMMON_HEADER)?;
    let header_name = nul(COMMON_HEADER_NAME)?;
    let headers = [header.as_ptr()];
    let header_names = [header_name.as_ptr()];
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a NUL-terminated string declared before `prog`, so it outlives the
    // program whether or not NVRTC copies it, and the arrays hold exactly one header.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            source.as_ptr(),
            file_name.as_ptr(),
            1,
            headers.as_ptr(),
            header_names.as_ptr(),
        )
    }
    .result()
    .map_err(|e| fail(format!("nvrtcCreateProgram: {e:?}")))?;
    let prog = Program(prog);

    let opts = options(arch);
    // SAFETY: `prog` is a live program.
    if let Err(e) = unsafe { result::compile_program(prog.0, &opts) } {
        // SAFETY: as above; the log is a NUL-terminated string.
        let log = unsafe { result::get_program_log(prog.0) }
            .map(|raw| {
                // SAFETY: NVRTC NUL-terminates the log it wrote into `raw`.
                unsafe { CStr::from_ptr(raw.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_else(|e| format!("(no log: {e:?})"));
        return Err(fail(format!("{e:?} with options {opts:?}\n{log}")));
    }

    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully for a real architecture, so it has a CUBIN.
    unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| fail(format!("nvrtcGetCUBINSize: {e:?}")))?;
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` has the size NVRTC just reported.
    unsafe { sys::nvrtcGetCUBIN(prog.0, bytes.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| fail(format!("nvrtcGetCUBIN: {e:?}")))?;
    Ok(bytes)
}

fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = var("SWAX_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("swax")))
        .or_else(|| var("HOME").map(|p| p.join(".cache").join("swax")))?;
    Some(root.join("kernels"))
}

fn cache_path(src: &KernelSource, arch: (u32, u32), nvrtc: (i32, i32)) -> Option<PathBuf> {
    Some(cache_dir()?.join(cache_file(src, arch, nvrtc)))
}

/// The cache entry's file name: the module, the architecture and a hash of everything that
/// changes the CUBIN, so a stale entry is never found.
fn cache_file(src: &KernelSource, arch: (u32, u32), nvrtc: (i32, i32)) -> String {
    let mut h = Fnv1a::default();
    for part in src.source {
        h.write(part.as_bytes());
    }
    h.write(COMMON_HEADER.as_bytes());
    h.write(format!("{arch:?}{nvrtc:?}{:?}", options(arch)).as_bytes());
    format!("{}-sm{}{}-{:016x}.cubin", src.name, arch.0, arch.1, h.0)
}

/// Writes through a temporary file and a rename, so a concurrent reader never sees half a file.
fn write_cache(path: &std::path::Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// FNV-1a, 64-bit: stable across Rust versions and platforms (std's hashers promise neither),
/// and plenty for telling cache entries apart.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_values() {
        let hash = |s: &str| {
            let mut h = Fnv1a::default();
            h.write(s.as_bytes());
            h.0
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }

    /// The key is a pure function of its inputs, so it is checked on every machine: whether a
    /// cache folder exists (HOME may be unset) has nothing to do with it.
    #[test]
    fn cache_key_depends_on_source_arch_and_version() {
        let src = KernelSource {
            name: "t",
            source: &["x"],
        };
        let other = KernelSource {
            name: "t",
            source: &["y"],
        };
        let a = cache_file(&src, (9, 0), (13, 0));
        assert_eq!(a, cache_file(&src, (9, 0), (13, 0)));
        assert_ne!(a, cache_file(&src, (8, 0), (13, 0)));
        assert_ne!(a, cache_file(&src, (9, 0), (13, 1)));
        assert_ne!(a, cache_file(&other, (9, 0), (13, 0)));
    }

    /// Needs only libnvrtc, no GPU: skips where it is missing (CI), fails there under
    /// SWAX_REQUIRE_CUDA=1 like every GPU test.
    #[test]
    fn a_compile_error_returns_nvrtcs_log() {
        let broken = KernelSource {
            name: "broken",
            source: &["extern \"C\" __global__ void k(float* y) { y[0] = not_declared_anywhere; }"],
        };
        match cubin(&broken, (9, 0), false) {
            Err(CudaError::Compile { module, log, .. }) => {
                assert_eq!(module, "broken");
                assert!(log.contains("not_declared_anywhere"), "{log}");
            }
            Err(CudaError::LibraryMissing { reason, .. })
                if std::env::var("SWAX_REQUIRE_CUDA").as_deref() != Ok("1") =>
            {
                eprintln!("skipping: {reason}")
            }
            other => panic!("expected a compile error with NVRTC's log, got {other:?}"),
        }
    }
}
