//! The gated delta rule's CUDA kernels, both families (gated_delta_parallel.cu and gated_delta.cu
//! in bf16), run on the CPU by the kernel emulator in cuda/emu (a fiber per GPU thread; ldmatrix,
//! mma.sync, shuffles and cp.async emulated; shared memory filled with NaNs before each block),
//! against the CPU fused kernels on values, boundary states and every gradient. CI has no GPU:
//! this is how it checks the kernels' logic (indexing, fragment layouts, barriers, waits), while
//! gpu_recurrent.rs checks them on the hardware. Skips, saying why, where there is no C++
//! compiler (g++) or no kernel sources (the GPU machine gets test binaries only).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_nn::mixers::gated_delta;
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::gated_delta::{self as gdn, Gates};
use swax_tests::relative_error;

/// bf16 operands and f32 accumulation, as on the GPU: the GPU tests' tolerance.
const TOLERANCE: f64 = 4e-2;

/// A block's opt-in shared-memory limit on the H200, which the kernels are sized for (227 KiB).
const SHARED_LIMIT: usize = 227 * 1024;

const GATES: Gates = Gates {
    gate_std: 1.0,
    decay_mean: -2.0,
    beta_mean: 0.0,
};

/// Beta near 0 and 1, decays from about 1 to exp(G) underflowing within a chunk.
const EXTREME: Gates = Gates {
    gate_std: 30.0,
    decay_mean: 0.0,
    beta_mean: 0.0,
};

/// The harness (cuda/emu/gated_delta.cpp over the kernel sources), built once per test binary;
/// None, with the reason printed, where it cannot be built here.
fn harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(build).as_deref()
}

/// The functions of the kernel sources that wrap PTX; emu.h has their CPU versions.
const PTX_WRAPPERS: [&str; 13] = [
    "bf16_bits",
    "bf16x2_bits",
    "row_exp",
    "smem_addr",
    "cp_async16",
    "cp_async_commit",
    "cp_async_wait",
    "ldsm_x4",
    "mma",
    "red_add2",
    "fast_exp2",
    "tf32_bits",
    "mma_tf32",
];

/// The byte range of the definition starting at line offset `at`, through its closing brace.
fn definition_end(src: &str, at: usize) -> usize {
    let open = at + src[at..].find('{').expect("a function body");
    let mut depth = 0;
    for (i, ch) in src[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces after offset {at}")
}

/// A kernel source as C++ over emu.h: its PTX wrappers dropped, `extern __shared__` arrays made
/// pointers to the emulated block's shared memory, other `__shared__` arrays static (blocks run
/// one at a time), the include of common.cuh (prepended once) removed.
fn emulated(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut pos = 0;
    while pos < src.len() {
        let end = src[pos..].find('\n').map_or(src.len(), |i| pos + i + 1);
        let line = &src[pos..end];
        let head = line.split('(').next().unwrap_or("");
        let name = head
            .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        if line.contains("__device__ __forceinline__") && PTX_WRAPPERS.contains(&name) {
            pos = definition_end(src, pos);
            continue;
        }
        if line.trim_start().starts_with("extern __shared__") {
            let var = line
                .split("unsigned char")
                .nth(1)
                .and_then(|v| v.split('[').next())
                .expect("extern smem");
            out.push_str(&format!("    unsigned char* {} = emu_smem;\n", var.trim()));
        } else if !line.starts_with("#include \"common.cuh\"") && !line.starts_with("#pragma once")
        {
            out.push_str(&line.replace("__shared__", "static"));
        }
        pos = end;
    }
    out
}

fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .to_path_buf();
    let emu = root.join("cuda/emu");
    let (shared, mixer) = (
        root.join("cuda/kernels"),
        root.join("nn/src/mixers/gated_delta"),
    );
    if !emu.join("gated_delta.cpp").exists() {
        eprintln!("skipping: no kernel sources at {}", emu.display());
        return None;
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emu");
    std::fs::create_dir_all(&out).expect("the emulator's build folder");
    // The order of the Rust wrappers' concatenation, after common.cuh (NVRTC's header).
    let sources = [
        shared.join("common.cuh"),
        shared.join("mma.cuh"),
        shared.join("chunk.cuh"),
        mixer.join("gated_delta.cuh"),
        mixer.join("gated_delta.cu"),
        mixer.join("gated_delta_parallel.cu"),
    ];
    let mut unit = String::from("#include \"emu.h\"\n");
    for s in sources {
        let text = std::fs::read_to_string(s).expect("a kernel source");
        unit.push_str(&emulated(&text));
    }
    let asm = unit.lines().find(|l| {
        l.split("//")
            .next()
            .is_some_and(|code| code.contains("asm(") || code.contains("asm volatile"))
    });
    assert!(
        asm.is_none(),
        "PTX left for the emulator: {asm:?} (add its wrapper to PTX_WRAPPERS and emu.h)"
    );
    std::fs::write(out.join("kernels.cpp"), unit).expect("the emulated kernels' source");
    let exe = out.join("gated_delta");
    let cc = Command::new("g++")
        .args(["-std=c++17", "-O1", "-I"])
        .arg(&emu)
        .arg("-I")
        .arg(&out)
        .arg(emu.join("gated_delta.cpp"))
        .arg(emu.join("emu.cpp"))
        .arg("-o")
        .arg(&exe)
        .status();
    match cc {
        Err(e) => {
            eprintln!("skipping: no C++ compiler (g++: {e}); the kernels' emulation needs one");
            None
        }
        Ok(s) => {
            assert!(s.success(), "g++ failed on the emulated kernels");
            Some(exe)
        }
    }
}

fn write(path: &Path, t: &Tensor) -> Result<()> {
    let bytes: Vec<u8> = t
        .to_f64_vec()?
        .iter()
        .flat_map(|&x| (x as f32).to_le_bytes())
        .collect();
    std::fs::write(path, bytes).map_err(|e| io(path, e))
}

fn read(path: &Path, like: &Tensor) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    let v: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect();
    Tensor::from_f64s(&v, like.dims().to_vec(), DType::F32, Device::Cpu)
}

fn io(path: &Path, e: std::io::Error) -> swax_tensor::Error {
    swax_tensor::Error::Invalid {
        op: "emulated_kernels",
        msg: format!("{}: {e}", path.display()),
    }
}

/// One forward and backward of kernel `family` ("parallel" or "walk") in the emulator at
/// `dims` = [B, T, H, Dk, Dv], against the CPU fused kernels on the same bf16-rounded inputs.
fn case(
    name: &str,
    family: &str,
    dims: [usize; 5],
    chunk: usize,
    gates: Gates,
    seed: u64,
) -> Result<()> {
    let Some(exe) = harness() else { return Ok(()) };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("emu")
        .join(name);
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let bf16 = |xs: Vec<Tensor>| -> Result<Vec<Tensor>> {
        xs.iter()
            .map(|x| x.to_dtype(DType::BF16)?.to_dtype(DType::F32))
            .collect()
    };
    let x = bf16(gdn::inputs(dims, gates, seed)?)?;
    let g = bf16(gdn::output_grads(dims, seed)?)?;
    for (file, t) in ["q", "k", "v", "beta", "g", "s0", "do", "ds"]
        .iter()
        .zip(x.iter().chain(&g))
    {
        write(&dir.join(format!("{file}.f32")), t)?;
    }
    let [b, t, h, dk, dv] = dims;
    let shape = dir.join("dims");
    std::fs::write(&shape, format!("{b} {t} {h} {dk} {dv} {chunk}\n"))
        .map_err(|e| io(&shape, e))?;
    // The launch sizes the Rust wrappers compute, so that their shared-memory arithmetic is
    // checked against what the kernels carve (the emulator bounds-checks shared memory).
    let s = RecurrentShape {
        b,
        t,
        h,
        dk,
        dv,
        chunk,
    };
    let sizes = if family == "parallel" {
        let z = gated_delta::parallel_sizes(s, swax_cuda::DType::BF16, SHARED_LIMIT)
            .unwrap_or_else(|| panic!("{name}: the chunk-parallel kernels do not take {s:?}"));
        format!(
            "{} {} {} {} {} {} {} {}",
            z.be,
            z.bv,
            z.prep_threads,
            z.prep_bytes,
            z.scan_threads,
            z.scan_bytes,
            z.grads_threads,
            z.grads_bytes
        )
    } else {
        let (threads, fwd, bwd) =
            gated_delta::one_tile_sizes(s, swax_cuda::DType::BF16).expect("valid sizes");
        format!("{threads} {fwd} {bwd}")
    };
    let launch = dir.join("launch");
    std::fs::write(&launch, sizes + "\n").map_err(|e| io(&launch, e))?;
    let want = gdn::run(&x, &g, chunk)?;
    let status = Command::new(exe)
        .arg(&dir)
        .arg(family)
        .status()
        .map_err(|e| io(exe, e))?;
    assert!(
        status.success(),
        "{name}: the emulated kernels failed ({status})"
    );
    for (out, w) in gdn::OUTPUTS.iter().zip(&want) {
        let got = read(&dir.join(format!("emu_{out}.f32")), w)?;
        let err = relative_error(&got, w).unwrap_or_else(|e| panic!("{name} {out}: {e}"));
        eprintln!("{name} {out}: relative error {err:.2e}");
        assert!(
            err < TOLERANCE,
            "{name} {out}: relative error {err:.3e} > {TOLERANCE:.0e}"
        );
    }
    Ok(())
}

#[test]
fn parallel_t_not_a_multiple_of_the_chunk() -> Result<()> {
    case(
        "parallel_t150",
        "parallel",
        [2, 150, 3, 64, 128],
        64,
        GATES,
        110,
    )
}

#[test]
fn parallel_single_step() -> Result<()> {
    case(
        "parallel_t1",
        "parallel",
        [1, 1, 1, 128, 64],
        64,
        GATES,
        120,
    )
}

#[test]
fn parallel_extreme_gates() -> Result<()> {
    case(
        "parallel_extreme",
        "parallel",
        [1, 300, 2, 128, 128],
        64,
        EXTREME,
        150,
    )
}

#[test]
fn parallel_long_sequence() -> Result<()> {
    case(
        "parallel_t4096",
        "parallel",
        [1, 4096, 1, 128, 128],
        64,
        GATES,
        140,
    )
}

/// Head dim 32, and value tiles of 32 columns.
#[test]
fn parallel_small_heads() -> Result<()> {
    case(
        "parallel_d32",
        "parallel",
        [2, 150, 3, 32, 96],
        64,
        GATES,
        180,
    )
}

/// Three value tiles of 64 columns in the chunk kernels, two scan blocks of 64 per head.
#[test]
fn parallel_wide_values() -> Result<()> {
    case(
        "parallel_dv192",
        "parallel",
        [1, 100, 2, 128, 192],
        64,
        GATES,
        13,
    )
}

#[test]
fn walk_other_chunk() -> Result<()> {
    case("walk_chunk32", "walk", [2, 150, 3, 64, 128], 32, GATES, 170)
}

#[test]
fn walk_extreme_gates() -> Result<()> {
    case(
        "walk_extreme",
        "walk",
        [1, 300, 2, 64, 128],
        64,
        EXTREME,
        150,
    )
}
