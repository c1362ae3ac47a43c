//! The mixers' CUDA kernels run on the CPU by the kernel emulator in cuda/emu (a fiber per GPU
//! thread; ldmatrix, mma.sync, shuffles and cp.async emulated, and Hopper's wgmma, TMA and bulk
//! copies, bulk reductions, mbarriers and named barriers; shared memory filled with NaNs before
//! each block), against the CPU fused
//! kernels on values, boundary states and every gradient: the gated delta rule's two families
//! (gated_delta_parallel.cu and gated_delta.cu, in bf16), the mLSTM's kernels (mlstm.cu, in bf16
//! and f32), sliding-window attention's on their mma.sync path (attention.cu, bf16: the path of
//! every GPU but Hopper, which the H200's GPU tests never run) and on Hopper's (wgmma, and
//! hopper_fwd.cu's and hopper_bwd.cu's warp-specialised forward and backward), and RAttention's
//! linear branch (rla.cu, bf16); the decoding steps (decode.cu: the mLSTM's and the gated delta
//! rule's single step with its short convolution, one query attending to a cache, attention's
//! step input split and rotated; bf16 and f32); and the
//! fused SwiGLU
//! (swiglu.cu, both instantiations, in bf16 and f32), the short convolution (short_conv.cu, both
//! variants, in bf16 and f32), RMSNorm's backward (norm.cu, with and without a residual's
//! gradient added into dx), xLSTM's gated head norm (norm.cu, forward and backward, in bf16 and
//! f32) and the summed cross-entropy with its gradient (cross_entropy.cu's ce_summed and
//! ce_sum_into, both instantiations, in bf16 and f32) and the draw of a sampled token
//! (sampling.cu, token for token) against the CPU's. CI has no GPU: this is
//! how it checks the kernels' logic (indexing, fragment layouts, barriers, waits), while the
//! gpu_* tests check them on the hardware. Skips, saying why, where there is no C++ compiler
//! (g++) or no kernel sources (the GPU machine gets test binaries only).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use swax_cuda::kernels::chunk::RecurrentShape;
use swax_nn::layers::output_norm::{
    gated_head_norm, gated_head_norm_backward, GatedHeadNormBackward, GatedHeadNormIn,
};
use swax_nn::mixers::attention::{self, SwaBackward, SwaIn, SwaOut};
use swax_nn::mixers::gated_delta;
use swax_nn::mixers::mlstm;
use swax_nn::mixers::rattention::{self, RlaBackward};
use swax_nn::sampling::{self, Cuts};
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::gated_delta::{self as gdn, Gates};
use swax_tests::mlstm as cases;
use swax_tests::relative_error;

/// bf16 operands and f32 accumulation, as on the GPU: the GPU tests' tolerance.
const TOLERANCE: f64 = 4e-2;

/// bf16 operands and f32 accumulation where the errors seen are about 4e-3 (the mLSTM's, the
/// attention kernels'): tighter than the GPU tests' bound, so that a wrong share of a gradient
/// shows.
const TIGHT: f64 = 1.5e-2;

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

/// An emulator harness: its driver `cuda/emu/<name>.cpp`, over the shared kernel headers and
/// `sources` (paths from the repository's root), in the order of the Rust wrappers'
/// concatenation.
struct Driver {
    name: &'static str,
    sources: &'static [&'static str],
}

const GATED_DELTA: Driver = Driver {
    name: "gated_delta",
    sources: &[
        "nn/src/mixers/gated_delta/gated_delta.cuh",
        "nn/src/mixers/gated_delta/gated_delta.cu",
        "nn/src/mixers/gated_delta/gated_delta_parallel.cu",
    ],
};

const MLSTM: Driver = Driver {
    name: "mlstm",
    sources: &["nn/src/mixers/mlstm/mlstm.cu"],
};

const SWIGLU: Driver = Driver {
    name: "swiglu",
    sources: &["cuda/kernels/swiglu.cu"],
};

const NORM: Driver = Driver {
    name: "norm",
    sources: &["cuda/kernels/norm.cu"],
};

const GATED_HEAD_NORM: Driver = Driver {
    name: "gated_head_norm",
    sources: &["cuda/kernels/norm.cu"],
};

const SHORT_CONV: Driver = Driver {
    name: "short_conv",
    sources: &["cuda/kernels/short_conv.cu"],
};

const ATTENTION: Driver = Driver {
    name: "attention",
    sources: &[
        "cuda/kernels/wgmma.cuh",
        "nn/src/mixers/attention/attention.cu",
    ],
};

/// The same kernels as Hopper runs them (the harness defines `__CUDA_ARCH_FEAT_SM90_ALL`):
/// wgmma products, and at head dim 128 hopper_fwd.cu's and hopper_bwd.cu's warp-specialised
/// forward and backward.
const ATTENTION_HOPPER: Driver = Driver {
    name: "attention_hopper",
    sources: &[
        "cuda/kernels/wgmma.cuh",
        "cuda/kernels/tma.cuh",
        "nn/src/mixers/attention/attention.cu",
        "nn/src/mixers/attention/hopper_fwd.cu",
        "nn/src/mixers/attention/hopper_bwd.cu",
    ],
};

const RATTENTION: Driver = Driver {
    name: "rattention",
    sources: &["cuda/kernels/wgmma.cuh", "nn/src/mixers/rattention/rla.cu"],
};

/// The same kernels as Hopper runs them: the walks on wgmma, their tiles loaded by TMA.
const RATTENTION_HOPPER: Driver = Driver {
    name: "rattention_hopper",
    sources: &[
        "cuda/kernels/wgmma.cuh",
        "cuda/kernels/tma.cuh",
        "nn/src/mixers/rattention/rla.cu",
    ],
};

const DECODE: Driver = Driver {
    name: "decode",
    sources: &["nn/src/mixers/decode/decode.cu"],
};

const SAMPLING: Driver = Driver {
    name: "sampling",
    sources: &["nn/src/sampling/sampling.cu"],
};

const CROSS_ENTROPY: Driver = Driver {
    name: "cross_entropy",
    sources: &["cuda/kernels/cross_entropy.cu"],
};

/// The gated delta rule's harness, built once per test binary; None, with the reason printed,
/// where it cannot be built here.
fn gated_delta_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&GATED_DELTA)).as_deref()
}

/// The mLSTM's harness, likewise.
fn mlstm_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&MLSTM)).as_deref()
}

/// The SwiGLU's harness, likewise.
fn swiglu_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&SWIGLU)).as_deref()
}

/// The norms' harness, likewise.
fn norm_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&NORM)).as_deref()
}

/// The gated head norm's harness, likewise.
fn gated_head_norm_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&GATED_HEAD_NORM)).as_deref()
}

/// The short convolution's harness, likewise.
fn short_conv_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&SHORT_CONV)).as_deref()
}

/// The draw's harness, likewise.
fn sampling_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&SAMPLING)).as_deref()
}

/// The summed cross-entropy's harness, likewise.
fn cross_entropy_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&CROSS_ENTROPY)).as_deref()
}

/// Sliding-window attention's harness, likewise.
fn attention_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&ATTENTION)).as_deref()
}

/// Sliding-window attention's Hopper harness, likewise.
fn attention_hopper_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&ATTENTION_HOPPER)).as_deref()
}

/// RAttention's linear branch's harness, likewise.
fn rattention_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&RATTENTION)).as_deref()
}

/// RAttention's linear branch's Hopper harness, likewise.
fn rattention_hopper_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&RATTENTION_HOPPER)).as_deref()
}

/// The decoding kernels' harness, likewise.
fn decode_harness() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| build(&DECODE)).as_deref()
}

/// The functions of the kernel sources that wrap PTX; emu.h has their CPU versions.
const PTX_WRAPPERS: [&str; 35] = [
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
    "fence_proxy_async",
    "wg_arrive",
    "wg_commit",
    "wg_wait",
    "wg_hold",
    "wg_keep",
    "mbar_init",
    "mbar_init_fence",
    "mbar_expect",
    "mbar_arrive",
    "mbar_wait",
    "tma_prefetch",
    "tma_load_4d",
    "bulk_load",
    "bulk_reduce_add",
    "bulk_commit",
    "bulk_wait_read",
    "bulk_wait",
    "bar_sync",
    "bar_arrive",
    "regs_lower",
    "regs_raise",
];

/// The macros that write wgmma's PTX (wgmma.cuh), dropped with their uses; emu.h has
/// `wgmma_ss` and `wgmma_rs`.
const PTX_MACROS: [&str; 6] = [
    "WG_D8",
    "WG_D32",
    "WG_D64",
    "WG_R32",
    "WG_R64",
    "WGMMA_PAIR",
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
        let defined = line.strip_prefix("#define ").map(|d| {
            d.split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap_or("")
        });
        if defined.is_some_and(|m| PTX_MACROS.contains(&m)) {
            // The definition and its continuation lines.
            let mut at = pos;
            loop {
                let next = src[at..].find('\n').map_or(src.len(), |i| at + i + 1);
                let continued = src[at..next].trim_end().ends_with('\\');
                at = next;
                if !continued || at >= src.len() {
                    break;
                }
            }
            pos = at;
            continue;
        }
        if PTX_MACROS
            .iter()
            .any(|m| line.starts_with(&format!("{m}(")))
        {
            pos = end;
            continue;
        }
        if line.contains("__device__ __forceinline__") && PTX_WRAPPERS.contains(&name) {
            pos = definition_end(src, pos);
            continue;
        }
        if let Some(decl) = line.trim_start().strip_prefix("extern __shared__") {
            // `extern __shared__ [__align__(16)] TYPE NAME[];`
            let decl = decl.trim().trim_start_matches("__align__(16)");
            let (ty, var) = decl
                .split('[')
                .next()
                .and_then(|d| d.trim().rsplit_once(' '))
                .expect("extern smem");
            out.push_str(&format!("    {ty}* {var} = ({ty}*)emu_smem;\n"));
        } else if !line.starts_with("#include \"common.cuh\"") && !line.starts_with("#pragma once")
        {
            out.push_str(&line.replace("__shared__", "static"));
        }
        pos = end;
    }
    out
}

fn build(driver: &Driver) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .to_path_buf();
    let emu = root.join("cuda/emu");
    let shared = root.join("cuda/kernels");
    let main = emu.join(format!("{}.cpp", driver.name));
    if !main.exists() {
        eprintln!("skipping: no kernel sources at {}", emu.display());
        return None;
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("emu")
        .join(format!("build_{}", driver.name));
    std::fs::create_dir_all(&out).expect("the emulator's build folder");
    // The order of the Rust wrappers' concatenation, after common.cuh (NVRTC's header).
    let sources = ["common.cuh", "mma.cuh", "chunk.cuh"]
        .iter()
        .map(|f| shared.join(f))
        .chain(driver.sources.iter().map(|f| root.join(f)));
    let mut unit = String::from("#include \"emu.h\"\n");
    for s in sources {
        let text = std::fs::read_to_string(s).expect("a kernel source");
        unit.push_str(&emulated(&text));
    }
    // What wraps PTX is dropped above (emu.h has its emulation); a line left with SM90A_ONLY
    // (wgmma.cuh) compiles to nothing in a build that is no Hopper target.
    let asm = unit.lines().find(|l| {
        l.split("//").next().is_some_and(|code| {
            (code.contains("asm(") || code.contains("asm volatile"))
                && !code.contains("SM90A_ONLY(")
        })
    });
    assert!(
        asm.is_none(),
        "PTX left for the emulator: {asm:?} (add its wrapper to PTX_WRAPPERS and emu.h)"
    );
    std::fs::write(out.join("kernels.cpp"), unit).expect("the emulated kernels' source");
    let exe = out.join(driver.name);
    let cc = Command::new("g++")
        .args(["-std=c++17", "-O1", "-I"])
        .arg(&emu)
        .arg("-I")
        .arg(&out)
        .arg(&main)
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

/// Each output the harness wrote into `dir` (`emu_<label>.f32`) against its CPU value, within
/// `tolerance` relative error and its worst element within twice that of the tensor's largest
/// (both printed, so that a run shows the margins).
fn check_outputs(
    dir: &Path,
    name: &str,
    outputs: &[(&str, &Tensor)],
    tolerance: f64,
) -> Result<()> {
    for &(label, want) in outputs {
        let got = read(&dir.join(format!("emu_{label}.f32")), want)?;
        let err = relative_error(&got, want).unwrap_or_else(|e| panic!("{name} {label}: {e}"));
        let (g, w) = (got.to_f64_vec()?, want.to_f64_vec()?);
        let scale = w.iter().fold(0.0f64, |a, b| a.max(b.abs()));
        // The worst element against the tensor's largest (absolute for a zero tensor): an
        // error confined to a few elements hides in the tensor's norm but not here.
        let (worst, at) = g
            .iter()
            .zip(&w)
            .enumerate()
            .fold((0.0f64, 0), |(m, i), (j, (a, b))| {
                if (a - b).abs() > m {
                    ((a - b).abs(), j)
                } else {
                    (m, i)
                }
            });
        let element = if scale > 0.0 { worst / scale } else { worst };
        eprintln!(
            "{name} {label}: relative error {err:.2e}, worst element {:.2e} of the largest \
             (element {at}: want {:.3e}, got {:.3e})",
            element, w[at], g[at]
        );
        assert!(
            element < 2.0 * tolerance,
            "{name} {label}: worst element {element:.3e} of the largest > {:.0e}",
            2.0 * tolerance
        );
        assert!(
            err < tolerance,
            "{name} {label}: relative error {err:.3e} > {tolerance:.0e}"
        );
    }
    Ok(())
}

/// Writes a case's sizes (`file`: its name and contents) into its folder, then runs the harness
/// `exe` there with `arg` (a dtype or a kernel family); a failed run fails the case.
fn emulate(exe: &Path, dir: &Path, name: &str, file: (&str, &str), arg: &str) -> Result<()> {
    let path = dir.join(file.0);
    std::fs::write(&path, file.1).map_err(|e| io(&path, e))?;
    let status = Command::new(exe)
        .arg(dir)
        .arg(arg)
        .status()
        .map_err(|e| io(exe, e))?;
    assert!(
        status.success(),
        "{name}: the emulated kernels failed ({status})"
    );
    Ok(())
}

/// The harnesses' name of a float dtype.
fn dtype_arg(dtype: DType) -> &'static str {
    if dtype == DType::BF16 {
        "bf16"
    } else {
        "f32"
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
    let Some(exe) = gated_delta_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
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
            z.bv,
            z.prep_threads,
            z.prep_bytes,
            z.scan_threads,
            z.scan_fwd_bytes,
            z.scan_bwd_bytes,
            z.grads_threads,
            z.grads_bytes
        )
    } else {
        let (threads, fwd, bwd) =
            gated_delta::one_tile_sizes(s, swax_cuda::DType::BF16).expect("valid sizes");
        format!("{threads} {fwd} {bwd}")
    };
    let want = gdn::run(&x, &g, chunk)?;
    emulate(exe, &dir, name, ("launch", &(sizes + "\n")), family)?;
    let outputs: Vec<_> = gdn::OUTPUTS.iter().copied().zip(&want).collect();
    check_outputs(&dir, name, &outputs, TOLERANCE)
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

/// Six value tiles of 32 columns in gdn_grads, two scan blocks of 64 per head.
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

/// The mLSTM's gates: forget gates about sigmoid(2); a long memory, forget gates near 1, so that
/// the stabilizer's carried side wins its max for long runs of steps and the final state's
/// share of its gradient flows back far; and a strong decay: forget preactivations about -10,
/// so that the state all but vanishes each step and the stabilizer follows the input gate.
const MLSTM_GATES: cases::Gates = cases::Gates {
    gate_std: 1.0,
    forget_mean: 2.0,
};
const LONG_MEMORY: cases::Gates = cases::Gates {
    gate_std: 1.0,
    forget_mean: 6.0,
};
const STRONG_DECAY: cases::Gates = cases::Gates {
    gate_std: 1.0,
    forget_mean: -10.0,
};

/// A case's own folder for the files the harness reads and writes, created.
fn case_dir(name: &str) -> Result<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("emu")
        .join(name);
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    Ok(dir)
}

/// Which output gradients a case has: all, or only the final state's (dh zero), where the
/// stabilizer's own path carries a large share of the gates' gradients.
#[derive(Clone, Copy, PartialEq)]
enum Grads {
    All,
    FinalState,
}

/// One forward and backward of the mLSTM's kernels in the emulator at `dims` = [B, T, H, Dk,
/// Dv] in `dtype` (bf16 or f32), launched as the wrapper launches them under `shared_limit`
/// bytes a block (then changed by `adjust`), against the CPU fused kernel on the same (rounded)
/// inputs, drawn from `seed`.
struct MlstmCase {
    name: &'static str,
    dims: [usize; 5],
    chunk: usize,
    gates: cases::Gates,
    grads: Grads,
    dtype: DType,
    shared_limit: usize,
    adjust: fn(&mut mlstm::LaunchSizes),
    seed: u64,
    /// As a training step starts and ends: a zero initial state (m0 = 0), no gradient of the
    /// final state, and the input gates' preactivations shifted by this much.
    fresh: Option<f64>,
}

impl MlstmCase {
    /// A case in bf16 with every output gradient, at the device's shared memory and the
    /// wrapper's launch sizes.
    fn new(
        name: &'static str,
        dims: [usize; 5],
        chunk: usize,
        gates: cases::Gates,
        seed: u64,
    ) -> Self {
        MlstmCase {
            name,
            dims,
            chunk,
            gates,
            grads: Grads::All,
            dtype: DType::BF16,
            shared_limit: SHARED_LIMIT,
            adjust: |_| {},
            seed,
            fresh: None,
        }
    }

    /// The same case with f32 operands (the kernels' scalar f32 path).
    fn in_f32(self) -> Self {
        MlstmCase {
            dtype: DType::F32,
            ..self
        }
    }

    /// Runs the case; returns the forward's and backward's value tiles.
    fn run(self) -> Result<(usize, usize)> {
        let MlstmCase {
            name,
            dims,
            chunk,
            gates,
            grads,
            dtype,
            shared_limit,
            adjust,
            seed,
            fresh,
        } = self;
        let Some(exe) = mlstm_harness() else {
            return Ok((0, 0));
        };
        let dir = case_dir(name)?;
        let rounded = |xs: Vec<Tensor>| -> Result<Vec<Tensor>> {
            xs.iter()
                .map(|x| x.to_dtype(dtype)?.to_dtype(DType::F32))
                .collect()
        };
        let mut x = rounded(cases::inputs(dims, gates, seed)?)?;
        let mut g = rounded(cases::output_grads(dims, seed)?)?;
        if grads == Grads::FinalState {
            g[0] = g[0].zeros_like()?;
        }
        if let Some(shift) = fresh {
            for t in x[5..8].iter_mut().chain(g[1..4].iter_mut()) {
                *t = t.zeros_like()?;
            }
            x[3] = rounded(vec![x[3].add_scalar(shift)?])?.remove(0);
        }
        let files = [
            "q", "k", "v", "i", "f", "c0", "n0", "m0", "dh", "dc", "dn", "dm",
        ];
        for (file, t) in files.iter().zip(x.iter().chain(&g)) {
            write(&dir.join(format!("{file}.f32")), t)?;
        }
        let [b, t, h, dk, dv] = dims;
        let shape = dir.join("dims");
        std::fs::write(&shape, format!("{b} {t} {h} {dk} {dv} {chunk}\n"))
            .map_err(|e| io(&shape, e))?;
        let s = RecurrentShape {
            b,
            t,
            h,
            dk,
            dv,
            chunk,
        };
        let (kind, dt) = match dtype {
            DType::BF16 => ("bf16", swax_cuda::DType::BF16),
            _ => ("f32", swax_cuda::DType::F32),
        };
        let mut z = mlstm::launch_sizes(s, dt, shared_limit).expect("valid sizes");
        adjust(&mut z);
        let sizes = format!(
            "{} {} {} {} {} {} {} {} {}\n",
            z.threads,
            z.gate_threads,
            z.forward_bv,
            z.scan_fwd,
            z.chunk_fwd,
            z.backward_bv,
            z.scan_bwd,
            z.grads,
            u8::from(z.lean_grads)
        );
        // The reference in f64 from the same rounded inputs: the kernels are held to the exact
        // chunkwise result, not to the CPU kernel's own f32 rounding.
        let f64s = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            xs.iter().map(|x| x.to_dtype(DType::F64)).collect()
        };
        let want = cases::run(&f64s(&x)?, &f64s(&g)?, chunk)?
            .iter()
            .map(|w| w.to_dtype(DType::F32))
            .collect::<Result<Vec<_>>>()?;
        emulate(exe, &dir, name, ("launch", &sizes), kind)?;
        let tolerance = if dtype == DType::BF16 { TIGHT } else { 1e-4 };
        let outputs: Vec<_> = cases::OUTPUTS.iter().copied().zip(&want).collect();
        check_outputs(&dir, name, &outputs, tolerance)?;
        Ok((z.forward_bv, z.backward_bv))
    }
}

/// The M layer's head sizes (Dk = Dv / 2), T not a multiple of the chunk, an initial state, a
/// long memory.
#[test]
fn mlstm_odd_t_layer_heads() -> Result<()> {
    let dims = [2, 150, 2, 32, 64];
    MlstmCase::new("mlstm_t150", dims, 64, LONG_MEMORY, 200)
        .run()
        .map(|_| ())
}

/// As a training step runs it: a zero initial state (m0 = 0: the stabilizer starts at the
/// first input gates), no gradient of the final state, input gates pushed up to where a trained
/// layer writes its keys (preactivations about 10, below the cap of 15), the M layer's heads at
/// T of four chunks.
#[test]
fn mlstm_training_step_from_a_zero_state() -> Result<()> {
    let dims = [2, 256, 2, 32, 64];
    MlstmCase {
        fresh: Some(10.0),
        ..MlstmCase::new("mlstm_fresh", dims, 64, LONG_MEMORY, 300)
    }
    .run()
    .map(|_| ())
}

/// One chunk, shorter than the chunk size, at a chunk of 32.
#[test]
fn mlstm_shorter_than_a_chunk() -> Result<()> {
    let dims = [1, 20, 2, 64, 32];
    MlstmCase::new("mlstm_t20", dims, 32, MLSTM_GATES, 210)
        .run()
        .map(|_| ())
}

/// Only the final state's gradient, over a long memory: the gates' gradients are mostly the
/// stabilizer's own, sent back along its recurrence across many steps.
#[test]
fn mlstm_final_state_gradient() -> Result<()> {
    let dims = [1, 150, 2, 32, 64];
    let grads = Grads::FinalState;
    MlstmCase {
        grads,
        ..MlstmCase::new("mlstm_final", dims, 64, LONG_MEMORY, 260)
    }
    .run()
    .map(|_| ())
}

/// mlstm_gates with two warps a block: 300 steps in two pieces of 4 x 64, the carry of the
/// stabilizers' gradient handed from warp to warp and from one piece to the next (at the
/// wrapper's block size one piece holds every step). Input gates far under the carried
/// stabilizer, which then wins every max: the final m's gradient crosses every step to m0.
#[test]
fn mlstm_gates_in_pieces() -> Result<()> {
    let dims = [1, 300, 4, 32, 64];
    let steady = cases::Gates {
        gate_std: 0.05,
        forget_mean: 8.0,
    };
    MlstmCase {
        grads: Grads::FinalState,
        adjust: |z| z.gate_threads = 64,
        ..MlstmCase::new("mlstm_gate_pieces", dims, 64, steady, 270)
    }
    .run()
    .map(|_| ())
}

/// The layer's heads in blocks of 4 warps: the tiled
/// kernels take any whole number of warps.
#[test]
fn mlstm_four_warp_blocks() -> Result<()> {
    let dims = [1, 150, 2, 32, 64];
    MlstmCase {
        adjust: |z| z.threads = 128,
        ..MlstmCase::new("mlstm_4_warps", dims, 64, MLSTM_GATES, 280)
    }
    .run()
    .map(|_| ())
}

/// Dk = 128, Dv = 64: the wrapper's 16-warp blocks (8 at the smaller heads above).
#[test]
fn mlstm_large_heads() -> Result<()> {
    let dims = [1, 100, 2, 128, 64];
    MlstmCase {
        adjust: |z| assert_eq!(z.threads, 512, "blocks at Dk 128, Dv 64"),
        ..MlstmCase::new("mlstm_large", dims, 64, MLSTM_GATES, 290)
    }
    .run()
    .map(|_| ())
}

#[test]
fn mlstm_single_step() -> Result<()> {
    let dims = [1, 1, 1, 32, 64];
    MlstmCase::new("mlstm_t1", dims, 64, MLSTM_GATES, 220)
        .run()
        .map(|_| ())
}

#[test]
fn mlstm_strong_decay() -> Result<()> {
    let dims = [1, 130, 2, 32, 64];
    MlstmCase::new("mlstm_decay", dims, 64, STRONG_DECAY, 230)
        .run()
        .map(|_| ())
}

/// Strong decay in f32, held to the f64 result: the gate gradients' terms that cancel exactly
/// (the diagonal of dP ⊙ P, the last step's share of the end state) are left out of dF; summed
/// and subtracted in f32 they put the CPU kernel's df 4.3e-4 from its f64 one, left out 3.1e-5
/// (nn/tests/mlstm.rs).
#[test]
fn mlstm_f32_strong_decay() -> Result<()> {
    let dims = [1, 130, 2, 32, 64];
    MlstmCase::new("mlstm_f32_decay", dims, 64, STRONG_DECAY, 235)
        .in_f32()
        .run()
        .map(|_| ())
}

/// A shared-memory limit one byte under what one value tile needs: Dv in several tiles, whose
/// shares of dq, dk and the gates are summed.
#[test]
fn mlstm_value_tiles() -> Result<()> {
    let (dims, chunk) = ([1, 100, 2, 32, 64], 32);
    let [b, t, h, dk, dv] = dims;
    let s = RecurrentShape {
        b,
        t,
        h,
        dk,
        dv,
        chunk,
    };
    let one = mlstm::launch_sizes(s, swax_cuda::DType::BF16, usize::MAX).expect("valid sizes");
    let limit = one
        .scan_fwd
        .max(one.chunk_fwd)
        .min(one.scan_bwd.max(one.grads))
        - 1;
    let (fwd, bwd) = MlstmCase {
        shared_limit: limit,
        ..MlstmCase::new("mlstm_tiles", dims, chunk, MLSTM_GATES, 240)
    }
    .run()?;
    if mlstm_harness().is_some() {
        assert!(fwd < dv && bwd < dv, "one value tile: {fwd}, {bwd} of {dv}");
    }
    Ok(())
}

/// f32 data (products in f32, no tensor cores) at sizes no tile divides.
#[test]
fn mlstm_f32_odd_sizes() -> Result<()> {
    let dims = [1, 45, 2, 12, 20];
    MlstmCase::new("mlstm_f32", dims, 16, MLSTM_GATES, 250)
        .in_f32()
        .run()
        .map(|_| ())
}

/// The SwiGLU kernels in the emulator at `[n, 2f]`, in `dtype`, launched as the wrapper launches
/// them on a GPU of one SM (so that with more than 16 rows blocks walk several), against the
/// CPU's `swiglu` and `swiglu_backward` on the same rounded inputs.
fn swiglu_case(n: usize, f: usize, dtype: DType) -> Result<()> {
    let Some(exe) = swiglu_harness() else {
        return Ok(());
    };
    let name = format!("swiglu_{n}x{f}_{dtype:?}");
    let dir = case_dir(&name)?;
    let randn = |dims: Vec<usize>, seed| {
        Tensor::randn(dims, 3.0, seed, DType::F32, Device::Cpu)?.to_dtype(dtype)
    };
    let (gu, dh) = (randn(vec![n, 2 * f], 40)?, randn(vec![n, f], 41)?);
    write(&dir.join("gu.f32"), &gu)?;
    write(&dir.join("dh.f32"), &dh)?;
    // The wrapper's choice where the buffers are aligned (pool blocks are): rows of whole
    // 16-byte vectors.
    let vec = (f * dtype.size_bytes()).is_multiple_of(16);
    let l = swax_cuda::kernels::swiglu::launch_shape(1, n as u64, f, dtype, vec);
    let sizes = format!("{n} {f} {} {} {}\n", l.grid.0, l.block.0, vec as u32);
    emulate(exe, &dir, &name, ("launch", &sizes), dtype_arg(dtype))?;
    let h = gu.swiglu()?;
    let (dgu, _) = gu.swiglu_backward(&dh)?;
    // bf16: the same f32 arithmetic, outputs rounded alike but for the last bit where the
    // emulator's expf and Rust's exp differ across a rounding boundary.
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    check_outputs(
        &dir,
        &name,
        &[("h", &h), ("dgu", &dgu), ("h_again", &h)],
        tolerance,
    )
}

/// F odd or 1 (element rows), a whole number of f32 vectors but not of bf16 ones, of both, and
/// the model's 2048 (in f32 a thread takes two vectors of a row); more rows than blocks.
#[test]
fn swiglu_kernels() -> Result<()> {
    for (n, f) in [(40, 7), (3, 1), (17, 36), (20, 24), (3, 2048)] {
        for dtype in [DType::F32, DType::BF16] {
            swiglu_case(n, f, dtype)?;
        }
    }
    Ok(())
}

/// RMSNorm's backward kernel in the emulator on `rows` rows of `n`, over `blocks` blocks (each
/// then walks several row groups, as on the GPU), with a residual's gradient added into dx and
/// without, against the CPU's: dx both ways, and dw from the per-block partial sums.
fn rms_norm_backward_case(rows: usize, n: usize, blocks: u32, dtype: DType) -> Result<()> {
    let Some(exe) = norm_harness() else {
        return Ok(());
    };
    let name = format!("rms_norm_backward_{rows}x{n}_{dtype:?}");
    let dir = case_dir(&name)?;
    let randn = |dims: Vec<usize>, std, seed| {
        Tensor::randn(dims, std, seed, DType::F32, Device::Cpu)?.to_dtype(dtype)
    };
    let (x, dy, dres) = (
        randn(vec![rows, n], 1.0, 50)?,
        randn(vec![rows, n], 1.0, 51)?,
        randn(vec![rows, n], 1.0, 52)?,
    );
    let w = randn(vec![n], 0.3, 53)?.add_scalar(1.0)?;
    let (_, stats) = x.rms_norm(&w, 1e-6)?;
    for (file, t) in [("x", &x), ("dy", &dy), ("dres", &dres), ("w", &w)] {
        write(&dir.join(format!("{file}.f32")), t)?;
    }
    write(&dir.join("rstd.f32"), &stats.rstd)?;
    // The wrapper's choice where the buffers are aligned (pool blocks are).
    let vec = (n * dtype.size_bytes()).is_multiple_of(16);
    let l = swax_cuda::kernels::Launch::rows(rows as u32, n as u32, dtype);
    let blocks = blocks.min(l.grid.0);
    let sizes = format!(
        "{rows} {n} {blocks} {} {} {}\n",
        l.block.0, l.block.1, vec as u32
    );
    emulate(exe, &dir, &name, ("launch", &sizes), dtype_arg(dtype))?;
    let (dx, dw) = x.rms_norm_backward(&w, &stats, &dy, Some(&dres))?;
    let (dx_plain, _) = x.rms_norm_backward(&w, &stats, &dy, None)?;
    let partial = read(
        &dir.join("emu_partial.f32"),
        &Tensor::zeros(vec![blocks as usize, n], DType::F32, Device::Cpu)?,
    )?;
    let dw_emu = partial.sum(0, false)?;
    // bf16: the same f32 arithmetic but for the order of the row sums, outputs rounded alike.
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    for (got, want) in [
        (read(&dir.join("emu_dx.f32"), &dx)?, &dx),
        (read(&dir.join("emu_dx_plain.f32"), &dx_plain)?, &dx_plain),
        (dw_emu, &dw),
    ] {
        let err = relative_error(&got, want).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(err < tolerance, "{name}: relative error {err:.3e}");
    }
    Ok(())
}

/// One tile a row (vector and scalar: 64 and 63 wide, as the mLSTM's heads), several tiles a
/// row, and more row groups than blocks.
#[test]
fn rms_norm_backward_kernel() -> Result<()> {
    for (rows, n, blocks) in [(37, 64, 2), (5, 63, 8), (3, 20000, 2), (70, 768, 3)] {
        for dtype in [DType::F32, DType::BF16] {
            rms_norm_backward_case(rows, n, blocks, dtype)?;
        }
    }
    Ok(())
}

/// xLSTM's gated head norm's kernels in the emulator on `rows` rows of `n` in `heads` heads, the
/// backward over `blocks` blocks per head (each then walks several row groups, as on the GPU),
/// against the CPU kernel of its op (`swax_nn::layers::output_norm`): y, dx, do, and dw from
/// the per-block partial sums.
fn gated_head_norm_case(
    rows: usize,
    heads: usize,
    n: usize,
    blocks: u32,
    dtype: DType,
) -> Result<()> {
    let Some(exe) = gated_head_norm_harness() else {
        return Ok(());
    };
    let name = format!("gated_head_norm_{rows}x{heads}x{n}_{dtype:?}");
    let dir = case_dir(&name)?;
    let randn = |dims: Vec<usize>, std, seed| {
        Tensor::randn(dims, std, seed, DType::F32, Device::Cpu)?.to_dtype(dtype)
    };
    let dims = vec![rows / heads, heads, n];
    let (x, o, dy) = (
        randn(dims.clone(), 2.0, 60)?.add_scalar(1.0)?,
        randn(dims.clone(), 2.0, 61)?,
        randn(dims, 1.0, 62)?,
    );
    let w = randn(vec![heads, n], 0.3, 63)?.add_scalar(1.0)?;
    for (file, t) in [("x", &x), ("o", &o), ("dy", &dy), ("w", &w)] {
        write(&dir.join(format!("{file}.f32")), t)?;
    }
    // The wrapper's choice where the buffers are aligned (pool blocks are).
    let vec = (n * dtype.size_bytes()).is_multiple_of(16);
    let l = swax_cuda::kernels::Launch::rows(rows as u32, n as u32, dtype);
    let blocks = blocks
        .min(((rows / heads) as u32).div_ceil(l.block.1))
        .max(1);
    let sizes = format!(
        "{rows} {heads} {n} {blocks} {} {} {}\n",
        l.block.0, l.block.1, vec as u32
    );
    emulate(exe, &dir, &name, ("launch", &sizes), dtype_arg(dtype))?;
    let input = GatedHeadNormIn {
        x: &x,
        o: &o,
        weight: &w,
    };
    let y = gated_head_norm(&input, 1e-5)?;
    let g = gated_head_norm_backward(&GatedHeadNormBackward { input, dy: &dy }, 1e-5)?;
    let (dx, d_o, dw) = (g.x, g.o, g.weight);
    let partial = read(
        &dir.join("emu_partial.f32"),
        &Tensor::zeros(vec![blocks as usize, heads, n], DType::F32, Device::Cpu)?,
    )?;
    let dw_emu = partial.sum(0, false)?;
    // bf16: the same f32 arithmetic but for the order of the sums, outputs rounded alike.
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    for (what, got, want) in [
        ("y", read(&dir.join("emu_y.f32"), &y)?, &y),
        ("dx", read(&dir.join("emu_dx.f32"), &dx)?, &dx),
        ("do", read(&dir.join("emu_do.f32"), &d_o)?, &d_o),
        ("dw", dw_emu, &dw),
    ] {
        let err = relative_error(&got, want).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
        assert!(err < tolerance, "{name} {what}: relative error {err:.3e}");
    }
    Ok(())
}

/// One tile a row (vector and scalar: 64 and 63 wide, as the mLSTM's heads), several tiles a
/// row, one head and several, and more row groups than blocks.
#[test]
fn gated_head_norm_kernels() -> Result<()> {
    for (rows, heads, n, blocks) in [
        (96, 3, 64, 1),
        (20, 4, 63, 8),
        (2, 1, 20000, 2),
        (36, 12, 64, 2),
    ] {
        for dtype in [DType::F32, DType::BF16] {
            gated_head_norm_case(rows, heads, n, blocks, dtype)?;
        }
    }
    Ok(())
}

/// The short convolution's kernels in the emulator at [B, T, C] with K taps, in the vector or
/// scalar variant on `splits` rows of blocks, against the CPU convolution on the same (rounded)
/// inputs: y, dx, dw and dbias.
fn short_conv_case(
    name: &str,
    [b, t, c, k]: [usize; 4],
    vec: bool,
    splits: usize,
    dtype: DType,
) -> Result<()> {
    let Some(exe) = short_conv_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
    let shapes: [&[usize]; 4] = [&[b, t, c], &[c, k], &[c], &[b, t, c]];
    let mut x = Vec::new();
    for (seed, dims) in shapes.iter().enumerate() {
        let r = Tensor::randn(dims.to_vec(), 1.0, seed as u64 + 1, DType::F32, Device::Cpu)?;
        x.push(r.to_dtype(dtype)?.to_dtype(DType::F32)?);
    }
    for (file, t) in ["x", "w", "bias", "dy"].iter().zip(&x) {
        write(&dir.join(format!("{file}.f32")), t)?;
    }
    let variant = u8::from(vec);
    let y = x[0].short_conv(&x[1], Some(&x[2]))?;
    let (dx, dw, db) = x[0].short_conv_backward(&x[1], &x[3])?;
    emulate(
        exe,
        &dir,
        name,
        ("dims", &format!("{b} {t} {c} {k} {variant} {splits}\n")),
        dtype_arg(dtype),
    )?;
    // Outputs rounded to bf16, or f32 sums in another order.
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    check_outputs(
        &dir,
        name,
        &[("y", &y), ("dx", &dx), ("dw", &dw), ("db", &db)],
        tolerance,
    )
}

/// 16-byte channel groups (C = 264: two blocks across, the second mostly idle), T not a whole
/// number of runs, 4 and 8 taps, several rows of blocks (threads take more than one run).
#[test]
fn short_conv_vector() -> Result<()> {
    short_conv_case("conv_vec_k4", [2, 37, 264, 4], true, 2, DType::BF16)?;
    short_conv_case("conv_vec_k8", [3, 21, 64, 8], true, 1, DType::BF16)?;
    short_conv_case("conv_vec_f32", [2, 37, 68, 3], true, 3, DType::F32)
}

/// Single channels (odd C), a sequence shorter than the taps, one tap.
#[test]
fn short_conv_scalar() -> Result<()> {
    short_conv_case("conv_scalar_k4", [2, 37, 67, 4], false, 2, DType::BF16)?;
    short_conv_case("conv_scalar_short", [1, 3, 7, 5], false, 1, DType::F32)?;
    short_conv_case("conv_scalar_k1", [3, 9, 8, 1], false, 5, DType::BF16)
}

/// The summed cross-entropy's kernels in the emulator on `[rows, v]` logits in `dtype` (the
/// vector instantiation where rows are whole 16-byte vectors, as the wrapper picks it for pool
/// buffers), every third row ignored, against the CPU's `cross_entropy_summed_into`: the totals
/// (which start at [0.25, 3]) with and without the gradient, and the gradient.
fn cross_entropy_case(rows: usize, v: usize, dtype: DType) -> Result<()> {
    let Some(exe) = cross_entropy_harness() else {
        return Ok(());
    };
    let name = format!("cross_entropy_{rows}x{v}_{dtype:?}");
    let dir = case_dir(&name)?;
    let ignore = u32::MAX;
    let logits = Tensor::randn([rows, v], 3.0, 50, DType::F32, Device::Cpu)?.to_dtype(dtype)?;
    let ids: Vec<u32> = (0..rows)
        .map(|r| match r % 3 {
            1 => ignore,
            _ => ((r * 7919 + 11) % v) as u32,
        })
        .collect();
    write(&dir.join("logits.f32"), &logits)?;
    let text: Vec<String> = ids.iter().map(u32::to_string).collect();
    let targets_file = dir.join("targets");
    std::fs::write(&targets_file, text.join(" ")).map_err(|e| io(&targets_file, e))?;
    let vec = (v * dtype.size_bytes()).is_multiple_of(16);
    let threads = swax_cuda::kernels::cross_entropy::SUMMED_THREADS;
    let sizes = format!("{rows} {v} {} {ignore} {threads}\n", vec as u32);
    emulate(exe, &dir, &name, ("launch", &sizes), dtype_arg(dtype))?;
    let targets = Tensor::from_vec(ids, [rows], Device::Cpu)?;
    let mut totals = Tensor::from_vec(vec![0.25f32, 3.0], [2], Device::Cpu)?;
    let dlogits = logits
        .cross_entropy_summed_into(&targets, Some(ignore), &mut totals, true)?
        .expect("asked for");
    // bf16: the same f32 arithmetic but the kernel's exp2 approximation against Rust's exp,
    // which can round a gradient to the neighbouring bf16 value.
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    check_outputs(
        &dir,
        &name,
        &[
            ("totals", &totals),
            ("totals_alone", &totals),
            ("dlogits", &dlogits),
        ],
        tolerance,
    )
}

/// One tile a row, element by element (v odd) and in vectors; several tiles a row (more than
/// 16384 bf16 or 8192 f32 columns), the last one partial.
#[test]
fn cross_entropy_summed_kernels() -> Result<()> {
    for (rows, v) in [(7, 1001), (5, 1000), (3, 20000)] {
        for dtype in [DType::F32, DType::BF16] {
            cross_entropy_case(rows, v, dtype)?;
        }
    }
    Ok(())
}

/// An attention case's folder and operands at `dims` = [B, T, H, Hkv, D]: q, k, v and the
/// output's gradient dout drawn from `seed` and rounded to bf16 (the kernels' inputs), written
/// there with `dims` and the kernels' `window` (what the harnesses read).
fn attention_operands(
    name: &str,
    dims: [usize; 5],
    window: usize,
    seed: u64,
) -> Result<(PathBuf, [Tensor; 4])> {
    let [b, t, h, hkv, d] = dims;
    let dir = case_dir(name)?;
    let randn = |dims: Vec<usize>, seed| {
        Tensor::randn(dims, 1.0, seed, DType::F32, Device::Cpu)?
            .to_dtype(DType::BF16)?
            .to_dtype(DType::F32)
    };
    let x = [
        randn(vec![b, t, h, d], seed)?,
        randn(vec![b, t, hkv, d], seed + 1)?,
        randn(vec![b, t, hkv, d], seed + 2)?,
        randn(vec![b, t, h, d], seed + 3)?,
    ];
    for (file, x) in ["q", "k", "v", "dout"].iter().zip(&x) {
        write(&dir.join(format!("{file}.f32")), x)?;
    }
    let dims_file = dir.join("dims");
    std::fs::write(&dims_file, format!("{b} {t} {h} {hkv} {d} {window}\n"))
        .map_err(|e| io(&dims_file, e))?;
    Ok((dir, x))
}

/// Sliding-window attention's kernels (forward, swa_bwd_prep, backward) at `dims` = [B, T, H,
/// Hkv, D] and `window`, against the CPU fused kernel on the same bf16-rounded inputs: o, lse and
/// every gradient. Twice: on the mma.sync path, the path of every GPU but Hopper's and so never
/// run by the GPU tests on the H200, and as Hopper runs them (wgmma, and at head dim 128 the
/// warp-specialised forward and backward, each in three persistent blocks so that one walks
/// several tiles where there are more than three; the backward at every window, though the
/// wrapper takes it only from 512).
fn attention_case(name: &str, dims: [usize; 5], window: usize, seed: u64) -> Result<()> {
    let (Some(mma_sync), Some(hopper)) = (attention_harness(), attention_hopper_harness()) else {
        return Ok(());
    };
    // The wrapper's window: at most T (and at least one key).
    let (dir, [q, k, v, dout]) = attention_operands(name, dims, window.min(dims[1].max(1)), seed)?;
    let d = dims[4];
    let z = attention::launch_sizes(d);
    // The emulator checks each kernel's accesses against these sizes; the H200 would refuse a
    // launch past its limit.
    for (kernel, bytes) in [
        ("forward", z.fwd_shared),
        ("backward", z.bwd_shared),
        ("Hopper's forward", z.hopper_fwd_shared),
        ("Hopper's backward", z.hopper_bwd_shared),
    ] {
        assert!(
            bytes <= SHARED_LIMIT,
            "{kernel} at head dim {d}: {bytes} bytes of shared memory, past {SHARED_LIMIT}"
        );
    }
    let sizes = format!(
        "{} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
        z.fwd_rows,
        z.fwd_threads,
        z.fwd_shared,
        z.bwd_rows,
        z.bwd_threads,
        z.bwd_shared,
        z.prep_rows,
        z.hopper_fwd_rows,
        z.hopper_fwd_threads,
        z.hopper_fwd_shared,
        z.hopper_bwd_keys,
        z.hopper_bwd_threads,
        z.hopper_bwd_shared,
        z.prep_threads
    );
    let scale = attention::default_scale(d);
    let x = SwaIn {
        q: &q,
        k: &k,
        v: &v,
    };
    let out = attention::forward(&x, window, scale)?;
    for (path, exe) in [("mma.sync", mma_sync), ("Hopper", hopper)] {
        let label = format!("{name} ({path})");
        emulate(exe, &dir, &label, ("launch", &sizes), "bf16")?;
        // The CPU backward takes the emulated o, as the kernels' backward does (its delta =
        // dout · o from the forward's bf16 o), so the gradients are compared on the same o; o
        // itself is the forward's check.
        let emu_o = read(&dir.join("emu_o.f32"), &out.o)?;
        let grads = attention::backward(
            &SwaBackward {
                input: x.clone(),
                out: SwaOut {
                    o: &emu_o,
                    lse: &out.lse,
                },
                dout: &dout,
            },
            window,
            scale,
        )?;
        check_outputs(
            &dir,
            &label,
            &[
                ("o", &out.o),
                ("lse", &out.lse),
                ("dq", &grads.q),
                ("dk", &grads.k),
                ("dv", &grads.v),
            ],
            TIGHT,
        )?;
    }
    Ok(())
}

/// A window inside the sequence, T not a multiple of a tile; the window's lower edge crossing
/// tiles.
#[test]
fn attention_window_odd_t() -> Result<()> {
    attention_case("attention_window_odd_t", [2, 150, 2, 2, 64], 40, 500)
}

/// Grouped queries (four q heads to a kv head) at head dim 128, the window past T (full causal);
/// T 180 leaves the second warpgroup of Hopper's forward no rows in its last block.
#[test]
fn attention_gqa4_d128_full() -> Result<()> {
    attention_case("attention_gqa4_d128_full", [1, 180, 4, 1, 128], 300, 510)
}

/// One step: T = 1.
#[test]
fn attention_single_step() -> Result<()> {
    attention_case("attention_single_step", [1, 1, 2, 1, 64], 16, 520)
}

/// A window of exactly a tile at head dim 128, two kv heads of two q heads each.
#[test]
fn attention_tile_window_d128() -> Result<()> {
    attention_case("attention_tile_window_d128", [1, 200, 4, 2, 128], 64, 530)
}

/// RAttention's linear-branch kernels (the features, the walks for the output, dq, dk and dv, and
/// the sum of dq's and dk's sign halves) at `dims` = [B, T, H, Hkv, D] with keys `window` steps
/// late, against the CPU fused kernel on the same bf16-rounded inputs: o and every gradient.
fn rattention_case(name: &str, dims: [usize; 5], window: usize, seed: u64) -> Result<()> {
    let (Some(mma_sync), Some(hopper)) = (rattention_harness(), rattention_hopper_harness()) else {
        return Ok(());
    };
    let (dir, [q, k, v, dout]) = attention_operands(name, dims, window, seed)?;
    let x = SwaIn {
        q: &q,
        k: &k,
        v: &v,
    };
    // The CPU kernel at a chunk other than the kernels' 64: every chunk gives the same values.
    let o = rattention::forward(&x, window, 48)?;
    let grads = rattention::backward(
        &RlaBackward {
            input: x,
            dout: &dout,
            features: None,
        },
        window,
        48,
    )?;
    for (path, exe, on_hopper) in [("mma.sync", mma_sync, false), ("Hopper", hopper, true)] {
        let z = rattention::launch_sizes(dims[4], on_hopper);
        let sizes = format!(
            "{} {} {} {} {}\n",
            z.chunk, z.threads, z.feature_shared, z.grad_shared, z.phi_rows
        );
        let label = format!("{name} ({path})");
        emulate(exe, &dir, &label, ("launch", &sizes), "bf16")?;
        check_outputs(
            &dir,
            &label,
            &[
                ("o", &o),
                ("dq", &grads.q),
                ("dk", &grads.k),
                ("dv", &grads.v),
            ],
            TIGHT,
        )?;
    }
    Ok(())
}

/// T not a multiple of a chunk, the window not a multiple either (keys arrive mid-chunk).
#[test]
fn rattention_odd_t_and_window() -> Result<()> {
    rattention_case("rattention_odd_t_and_window", [2, 150, 2, 2, 64], 40, 600)
}

/// Grouped queries (two q heads to a kv head) at head dim 128, several chunks of states.
#[test]
fn rattention_gqa_d128() -> Result<()> {
    rattention_case("rattention_gqa_d128", [1, 200, 4, 2, 128], 64, 610)
}

/// One key reaches the last query only: T = window + 1.
#[test]
fn rattention_one_key() -> Result<()> {
    rattention_case("rattention_one_key", [1, 17, 2, 1, 64], 16, 620)
}

/// Four q heads to one kv head at head dim 128, a window of more than two chunks (the forward's
/// walk starts at its third chunk, the ones before it all zeros) and a last chunk of 13 steps.
#[test]
fn rattention_gqa4_long_window_d128() -> Result<()> {
    rattention_case(
        "rattention_gqa4_long_window_d128",
        [1, 333, 4, 1, 128],
        150,
        630,
    )
}

/// Random values of `dims` rounded to `dtype`, held in f32 for the harness, and as `dtype` for
/// the CPU kernel; written to `dir/name.f32`.
fn decode_input(dir: &Path, name: &str, dims: &[usize], seed: u64, dtype: DType) -> Result<Tensor> {
    let x = Tensor::randn(dims.to_vec(), 1.0, seed, DType::F32, Device::Cpu)?.to_dtype(dtype)?;
    write(&dir.join(format!("{name}.f32")), &x)?;
    Ok(x)
}

/// One recurrent step (`kind` "gdn" or "mlstm") in the emulator at `[B, H, Dk, Dv]` from a
/// random state, against the CPU step on the same rounded inputs.
fn decode_step_case(
    name: &str,
    kind: &str,
    [b, h, dk, dv]: [usize; 4],
    dtype: DType,
) -> Result<()> {
    use swax_nn::mixers::decode::{self, ConvStep, GatedDeltaStep, MlstmStep};
    let Some(exe) = decode_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
    let (c, k) = (h * (2 * dk + dv), 4);
    let x = decode_input(&dir, "x", &[b, c], 1, dtype)?;
    let w = decode_input(&dir, "w", &[c, k], 2, dtype)?;
    let tail = decode_input(&dir, "tail", &[b, k - 1, c], 3, dtype)?;
    let ga = decode_input(&dir, "a", &[b, h], 4, dtype)?;
    let gb = decode_input(&dir, "b", &[b, h], 5, dtype)?;
    let state = decode_input(&dir, "c", &[b, h, dk, dv], 6, DType::F32)?;
    let conv = ConvStep {
        x: &x,
        weight: &w,
        tail: &tail,
    };
    let (out, next_tail, states) = if kind == "gdn" {
        // beta in (0, 1) and a log decay <= 0, as the layer gives them.
        let beta = ga.sigmoid()?;
        let g = gb.neg()?.exp()?.neg()?;
        write(&dir.join("a.f32"), &beta)?;
        write(&dir.join("b.f32"), &g)?;
        let y = decode::gated_delta_step(&GatedDeltaStep {
            conv,
            beta: &beta,
            g: &g,
            state: &state,
        })?;
        (y.out, y.tail, vec![("c", y.state)])
    } else {
        let n = decode_input(&dir, "n", &[b, h, dk], 7, DType::F32)?;
        let m = decode_input(&dir, "m", &[b, h], 8, DType::F32)?;
        let s = mlstm::MlstmState {
            c: &state,
            n: &n,
            m: &m,
        };
        let y = decode::mlstm_step(
            &MlstmStep {
                conv,
                i: &ga,
                f: &gb,
                state: s,
            },
            mlstm::EPS,
        )?;
        (
            y.out,
            y.tail,
            vec![("c", y.state.c), ("n", y.state.n), ("m", y.state.m)],
        )
    };
    emulate(
        exe,
        &dir,
        name,
        ("dims", &format!("{kind} {b} {h} {dk} {dv} {k} 0\n")),
        dtype_arg(dtype),
    )?;
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    let mut outputs = vec![("out", &out), ("tail", &next_tail)];
    outputs.extend(states.iter().map(|(label, s)| (*label, s)));
    check_outputs(&dir, name, &outputs, tolerance)
}

/// One query per row and head against `n` of a cache's `slots` in the emulator, against the
/// CPU's.
fn decode_attend_case(
    name: &str,
    [b, h, hkv, d, slots, n]: [usize; 6],
    dtype: DType,
) -> Result<()> {
    use swax_nn::mixers::decode::{self, AttendIn};
    let Some(exe) = decode_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
    let q = decode_input(&dir, "q", &[b, h, d], 1, dtype)?;
    let k = decode_input(&dir, "k", &[b, slots, hkv, d], 2, dtype)?;
    let v = decode_input(&dir, "v", &[b, slots, hkv, d], 3, dtype)?;
    let out = decode::attend(
        &AttendIn {
            q: &q,
            k: &k,
            v: &v,
        },
        n,
        None,
    )?;
    emulate(
        exe,
        &dir,
        name,
        (
            "dims",
            &format!(
                "attend {b} {h} {hkv} {d} {slots} {n} {}\n",
                decode::attend_ranges(n).0
            ),
        ),
        dtype_arg(dtype),
    )?;
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    check_outputs(&dir, name, &[("out", &out)], tolerance)
}

/// RAttention's linear-branch step in the emulator: slot `slot` of a cache of `slots` added to a
/// random state, read by every q head; against the CPU's.
fn decode_rla_case(
    name: &str,
    [b, h, hkv, d, slots, slot]: [usize; 6],
    dtype: DType,
) -> Result<()> {
    use swax_nn::mixers::decode::{self, RlaStepIn};
    let Some(exe) = decode_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
    let q = decode_input(&dir, "q", &[b, h, d], 1, dtype)?;
    let k = decode_input(&dir, "k", &[b, slots, hkv, d], 2, dtype)?;
    let v = decode_input(&dir, "v", &[b, slots, hkv, d], 3, dtype)?;
    let state = decode_input(&dir, "c", &[b, hkv, 2 * d, d], 4, DType::F32)?;
    let (out, next) = decode::rla_step(
        &RlaStepIn {
            q: &q,
            k: &k,
            v: &v,
            state: &state,
        },
        slot,
    )?;
    emulate(
        exe,
        &dir,
        name,
        ("dims", &format!("rla {b} {h} {hkv} {d} {slots} {slot}\n")),
        dtype_arg(dtype),
    )?;
    let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    check_outputs(&dir, name, &[("out", &out), ("c", &next)], tolerance)
}

/// Attention's step input split and rotated in the emulator, against the CPU's split and RoPE:
/// grouped kv heads, a far position.
#[test]
fn decode_split_rope() -> Result<()> {
    use swax_nn::mixers::decode;
    let Some(exe) = decode_harness() else {
        return Ok(());
    };
    for (name, [b, h, hkv, d, pos], dtype) in [
        ("decode_split_rope_bf16", [2, 8, 2, 64, 70000], DType::BF16),
        ("decode_split_rope_f32", [3, 3, 3, 32, 5], DType::F32),
    ] {
        let dir = case_dir(name)?;
        let qkv = decode_input(&dir, "qkv", &[b, (h + 2 * hkv) * d], 1, dtype)?;
        let [q, k, v] = decode::split_rope(&qkv, [h, hkv, d], pos, 10000.0)?;
        emulate(
            exe,
            &dir,
            name,
            ("dims", &format!("split_rope {b} {h} {hkv} {d} {pos} 0\n")),
            dtype_arg(dtype),
        )?;
        let tolerance = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
        check_outputs(&dir, name, &[("q", &q), ("k", &k), ("v", &v)], tolerance)?;
    }
    Ok(())
}

/// Grouped queries (4 and 1 per kv head), head dims of 64 and 128, the last slot and the first.
#[test]
fn decode_rla_step() -> Result<()> {
    decode_rla_case("decode_rla_bf16", [2, 8, 2, 64, 9, 8], DType::BF16)?;
    decode_rla_case("decode_rla_d128", [1, 2, 2, 128, 4, 0], DType::BF16)?;
    decode_rla_case("decode_rla_f32", [2, 3, 1, 32, 5, 2], DType::F32)
}

/// Value dims unlike the key dims and above a block's threads' share, several rows and heads.
#[test]
fn decode_gated_delta_step() -> Result<()> {
    decode_step_case("decode_gdn_bf16", "gdn", [2, 3, 64, 64], DType::BF16)?;
    decode_step_case("decode_gdn_f32", "gdn", [3, 2, 32, 48], DType::F32)
}

#[test]
fn decode_mlstm_step() -> Result<()> {
    decode_step_case("decode_mlstm_bf16", "mlstm", [2, 3, 32, 64], DType::BF16)?;
    decode_step_case("decode_mlstm_f32", "mlstm", [3, 2, 16, 24], DType::F32)
}

/// Keys split into ranges (2500: 20 of 125), ranges of more than one tile of scores (40000: 32
/// of 1250, the online softmax across tiles), slots beyond n never read, grouped queries, head
/// dims of 32, 64 and 128, a single key.
#[test]
fn decode_attend() -> Result<()> {
    decode_attend_case(
        "decode_attend_ranges",
        [2, 4, 2, 64, 2600, 2500],
        DType::BF16,
    )?;
    decode_attend_case(
        "decode_attend_tiles",
        [1, 2, 1, 32, 40100, 40000],
        DType::F32,
    )?;
    decode_attend_case("decode_attend_one", [1, 2, 1, 128, 8, 1], DType::BF16)?;
    decode_attend_case("decode_attend_f32", [2, 3, 3, 32, 40, 37], DType::F32)
}

/// The draw (sampling.cu) in the emulator against its CPU form, token for token, for `b` rows of
/// `v` logits (rounded to `dtype`; with `ties`, to whole numbers, so that many tokens share a
/// logit and the rank falls to the index) and a random u32 per row, the first row's 0 and the
/// last's u32::MAX (the draw's two ends).
fn sampling_case(
    name: &str,
    [b, v]: [usize; 2],
    cuts: Cuts,
    ties: bool,
    dtype: DType,
) -> Result<()> {
    let Some(exe) = sampling_harness() else {
        return Ok(());
    };
    let dir = case_dir(name)?;
    let mut logits = Tensor::randn(vec![b, v], 3.0, v as u64, DType::F32, Device::Cpu)?;
    if ties {
        logits = Tensor::from_f64s(
            &logits
                .to_f64_vec()?
                .iter()
                .map(|x| x.round())
                .collect::<Vec<_>>(),
            vec![b, v],
            DType::F32,
            Device::Cpu,
        )?;
    }
    let logits = logits.to_dtype(dtype)?.to_dtype(DType::F32)?;
    write(&dir.join("logits.f32"), &logits)?;
    let mut r: Vec<u32> = (0..b as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(7) ^ 0x9e37_79b9)
        .collect();
    r[0] = 0;
    r[b - 1] = u32::MAX;
    let bytes: Vec<u8> = r.iter().flat_map(|x| x.to_le_bytes()).collect();
    let path = dir.join("r.u32");
    std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
    let dims = format!(
        "{b} {v} {} {:e} {:e}\n",
        cuts.top_k, cuts.top_p, cuts.temperature
    );
    emulate(exe, &dir, name, ("dims", &dims), dtype_arg(dtype))?;
    let path = dir.join("emu_ids.u32");
    let got: Vec<u32> = std::fs::read(&path)
        .map_err(|e| io(&path, e))?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let rows = logits.to_vec::<f32>()?;
    let want: Vec<u32> = rows
        .chunks(v)
        .zip(&r)
        .map(|(row, &r)| sampling::pick_row(row, r, &cuts))
        .collect();
    assert_eq!(got, want, "{name}: the emulated draw against the CPU's");
    Ok(())
}

/// Every cut alone and together, V not a whole number of blocks, V below a block's threads,
/// ties, both dtypes; each way to the token: kept tokens ranked in shared memory (top-k up to
/// 1024, or V up to 1024) and radix selects over the whole row (no top-k, or one above 1024).
#[test]
fn sampling_draws_the_cpu_token() -> Result<()> {
    let cuts = |temperature, top_k, top_p| Cuts {
        temperature,
        top_k,
        top_p,
    };
    sampling_case(
        "sample_plain",
        [6, 3001],
        cuts(1.0, 0, 1.0),
        false,
        DType::F32,
    )?;
    sampling_case(
        "sample_top_k",
        [5, 3001],
        cuts(0.7, 50, 1.0),
        true,
        DType::BF16,
    )?;
    sampling_case(
        "sample_nucleus",
        [5, 2050],
        cuts(1.3, 0, 0.9),
        true,
        DType::F32,
    )?;
    sampling_case(
        "sample_both",
        [4, 700],
        cuts(2.0, 30, 0.5),
        false,
        DType::BF16,
    )?;
    sampling_case("sample_tiny", [3, 5], cuts(0.5, 3, 0.95), true, DType::F32)?;
    sampling_case(
        "sample_short_row",
        [3, 1000],
        cuts(1.0, 0, 0.8),
        true,
        DType::BF16,
    )?;
    sampling_case(
        "sample_top_1024",
        [2, 5000],
        cuts(1.0, 1024, 1.0),
        true,
        DType::BF16,
    )?;
    sampling_case(
        "sample_top_1025",
        [2, 5000],
        cuts(1.0, 1025, 0.95),
        false,
        DType::F32,
    )
}
