//! The decoding kernels on the GPU (decode.cu) against their CPU forms on the same rounded
//! inputs: the mLSTM's and the gated delta rule's single step (with the short convolution and
//! its tail), several steps in a row so the state carries, one query attending to a cache
//! longer than a tile of scores, attention's step input split and rotated in one launch, and
//! RAttention's linear-branch step over several steps, in bf16 and f32; and the draw of a
//! sampled token. Skips without a GPU (see `swax_tests::gpu`).
use swax_nn::mixers::decode::{self, AttendIn, ConvStep, GatedDeltaStep, MlstmStep, RlaStepIn};
use swax_nn::mixers::mlstm::{MlstmState, EPS};
use swax_nn::sampling::{self, Cuts};
use swax_tensor::{DType, Device, Result, Tensor};
use swax_tests::{gpu, worst_element_error};

fn input(dims: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::randn(dims.to_vec(), 1.0, seed, DType::F32, Device::Cpu)
        .and_then(|x| x.to_dtype(dtype))
        .unwrap()
}

/// Worst element within `tol` of the largest: f32 sums in one order on both devices but
/// expf's rounding; bf16 outputs rounded once, the state kept in f32.
fn check(name: &str, got: &Tensor, want: &Tensor, dtype: DType) {
    let tol = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
    let got = got.to_device(Device::Cpu).unwrap();
    let err = worst_element_error(&got, want).unwrap();
    eprintln!("{name}: worst element {err:.2e}");
    assert!(err < tol, "{name}: worst element {err:.3e} > {tol:.0e}");
}

/// Eight steps of `kind` ("gdn" or "mlstm") on both devices, each device carrying its own
/// state and tail.
fn steps(kind: &str, dev: Device, [b, h, dk, dv]: [usize; 4], dtype: DType) -> Result<()> {
    let (c, k) = (h * (2 * dk + dv), 4);
    let w = input(&[c, k], 1, dtype);
    let sd = decode::state_dtype(dtype);
    let zeros = |dims: &[usize], dt| Tensor::zeros(dims.to_vec(), dt, Device::Cpu);
    let mut cpu = (
        zeros(&[b, k - 1, c], dtype)?,
        MlstmState::zeros(b, h, dk, dv, sd, Device::Cpu)?,
    );
    let mut gpu = (cpu.0.to_device(dev)?, cpu.1.try_map(|t| t.to_device(dev))?);
    let wg = w.to_device(dev)?;
    for step in 0..8u64 {
        let x = input(&[b, c], 10 + step, dtype);
        let (ga, gb) = (
            input(&[b, h], 20 + step, dtype),
            input(&[b, h], 30 + step, dtype),
        );
        let (ga, gb) = match kind {
            "gdn" => (ga.sigmoid()?, gb.neg()?.exp()?.neg()?),
            _ => (ga, gb),
        };
        let on = |d: Device| -> Result<[Tensor; 3]> {
            Ok([x.to_device(d)?, ga.to_device(d)?, gb.to_device(d)?])
        };
        let run =
            |at: Device, weight: &Tensor, (tail, s): &mut (Tensor, MlstmState)| -> Result<Tensor> {
                let [x, ga, gb] = on(at)?;
                let conv = ConvStep {
                    x: &x,
                    weight,
                    tail: &*tail,
                };
                let out = if kind == "gdn" {
                    let y = decode::gated_delta_step(&GatedDeltaStep {
                        conv,
                        beta: &ga,
                        g: &gb,
                        state: &s.c,
                    })?;
                    (*tail, s.c) = (y.tail, y.state);
                    y.out
                } else {
                    let y = decode::mlstm_step(
                        &MlstmStep {
                            conv,
                            i: &ga,
                            f: &gb,
                            state: s.try_map(Ok)?,
                        },
                        EPS,
                    )?;
                    (*tail, *s) = (y.tail, y.state);
                    y.out
                };
                Ok(out)
            };
        let want = run(Device::Cpu, &w, &mut cpu)?;
        let got = run(dev, &wg, &mut gpu)?;
        check(&format!("{kind} {dtype} out[{step}]"), &got, &want, dtype);
    }
    check(&format!("{kind} {dtype} tail"), &gpu.0, &cpu.0, dtype);
    check(&format!("{kind} {dtype} state"), &gpu.1.c, &cpu.1.c, dtype);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn recurrent_steps_match_the_cpu() -> Result<()> {
    let Some(dev) = gpu() else {
        return Ok(());
    };
    for dtype in [DType::BF16, DType::F32] {
        steps("gdn", dev, [3, 4, 128, 128], dtype)?;
        steps("gdn", dev, [2, 3, 64, 96], dtype)?;
        steps("mlstm", dev, [3, 4, 64, 128], dtype)?;
        steps("mlstm", dev, [2, 3, 32, 48], dtype)?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn attend_matches_the_cpu() -> Result<()> {
    let Some(dev) = gpu() else {
        return Ok(());
    };
    for dtype in [DType::BF16, DType::F32] {
        for [b, h, hkv, d, slots, n] in [
            [4, 8, 2, 128, 4096, 3000],
            [2, 4, 4, 64, 33, 33],
            [1, 2, 1, 256, 8, 5],
        ] {
            let q = input(&[b, h, d], 1, dtype);
            let k = input(&[b, slots, hkv, d], 2, dtype);
            let v = input(&[b, slots, hkv, d], 3, dtype);
            let want = decode::attend(
                &AttendIn {
                    q: &q,
                    k: &k,
                    v: &v,
                },
                n,
                None,
            )?;
            let (q, k, v) = (q.to_device(dev)?, k.to_device(dev)?, v.to_device(dev)?);
            let got = decode::attend(
                &AttendIn {
                    q: &q,
                    k: &k,
                    v: &v,
                },
                n,
                None,
            )?;
            check(&format!("attend {dtype} {slots} slots"), &got, &want, dtype);
        }
    }
    Ok(())
}

/// Attention's step input split and rotated in one launch, against the CPU (which runs the split
/// and RoPE it fuses) and against those ops on the GPU, at positions where an f32 angle would be
/// off (131071) and with grouped kv heads.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn split_rope_matches_the_split_and_rope_it_fuses() -> Result<()> {
    let Some(dev) = gpu() else {
        return Ok(());
    };
    for dtype in [DType::BF16, DType::F32] {
        for ([b, h, hkv, d], pos) in [
            ([3, 12, 12, 64], 4100),
            ([2, 8, 2, 128], 131071),
            ([1, 2, 1, 32], 1),
        ] {
            let qkv = input(&[b, 1, (h + 2 * hkv) * d], 7, dtype);
            let want = decode::split_rope(&qkv, [h, hkv, d], pos, 10000.0)?;
            let on_gpu = qkv.to_device(dev)?;
            let got = decode::split_rope(&on_gpu, [h, hkv, d], pos, 10000.0)?;
            // The ops it fuses, on the GPU: narrow each part, then rope's table and rotation.
            let part =
                |at: usize, n: usize| on_gpu.narrow(-1, at * d, n * d)?.reshape(vec![b, 1, n, d]);
            let ops = [
                part(0, h)?.rope(pos, 10000.0)?.reshape(vec![b, h, d])?,
                part(h, hkv)?.rope(pos, 10000.0)?,
                part(h + hkv, hkv)?,
            ];
            for (i, name) in ["q", "k", "v"].iter().enumerate() {
                let at = format!("split_rope {dtype} {name} at {pos}");
                assert_eq!(got[i].dims(), want[i].dims(), "{at}");
                check(&at, &got[i], &want[i], dtype);
                check(
                    &format!("{at}, against the GPU's ops"),
                    &got[i],
                    &ops[i].to_device(Device::Cpu)?,
                    dtype,
                );
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn rla_steps_match_the_cpu() -> Result<()> {
    let Some(dev) = gpu() else {
        return Ok(());
    };
    for dtype in [DType::BF16, DType::F32] {
        for [b, h, hkv, d, slots] in [[4, 8, 2, 128, 16], [2, 3, 3, 64, 5], [1, 4, 1, 32, 3]] {
            let k = input(&[b, slots, hkv, d], 2, dtype);
            let v = input(&[b, slots, hkv, d], 3, dtype);
            let (kg, vg) = (k.to_device(dev)?, v.to_device(dev)?);
            let mut cpu = Tensor::zeros(vec![b, hkv, 2 * d, d], DType::F32, Device::Cpu)?;
            let mut on_gpu = cpu.to_device(dev)?;
            // Every slot in turn, each device carrying its own state.
            for step in 0..2 * slots {
                let q = input(&[b, h, d], 10 + step as u64, dtype);
                let (want, s) = decode::rla_step(
                    &RlaStepIn {
                        q: &q,
                        k: &k,
                        v: &v,
                        state: &cpu,
                    },
                    step % slots,
                )?;
                let (got, sg) = decode::rla_step(
                    &RlaStepIn {
                        q: &q.to_device(dev)?,
                        k: &kg,
                        v: &vg,
                        state: &on_gpu,
                    },
                    step % slots,
                )?;
                (cpu, on_gpu) = (s, sg);
                check(
                    &format!("rla {dtype} d {d} out[{step}]"),
                    &got,
                    &want,
                    dtype,
                );
            }
            check(&format!("rla {dtype} d {d} state"), &on_gpu, &cpu, dtype);
        }
    }
    Ok(())
}

/// The draw of a sampled token on the GPU against its CPU form, at swax-small's vocabulary for
/// 64 rows (bf16 and f32 logits), every cut alone and together, top-k up to 1024 (the kept tokens
/// ranked in shared memory) and none (radix selects over the row). The device's `expf` may give a
/// weight other last bits than the CPU's and move a boundary past a row's r (about one draw in a
/// million): at most one row of the 640 may differ.
#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn sampling_draws_the_cpu_token() -> Result<()> {
    let Some(dev) = gpu() else {
        return Ok(());
    };
    let (b, v) = (64, 50304);
    let mut differ = 0;
    for dtype in [DType::BF16, DType::F32] {
        let logits = Tensor::randn(vec![b, v], 3.0, 7, DType::F32, Device::Cpu)?.to_dtype(dtype)?;
        let rows = logits.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let r: Vec<u32> = (0..b as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let (gl, gr) = (
            logits.to_device(dev)?,
            Tensor::from_vec(r.clone(), vec![b], dev)?,
        );
        for (temperature, top_k, top_p) in [
            (1.0, 0, 1.0),
            (0.7, 50, 1.0),
            (1.2, 0, 0.9),
            (2.0, 40, 0.5),
            (1.0, 1024, 0.95),
        ] {
            let cuts = Cuts {
                temperature,
                top_k,
                top_p,
            };
            let got = sampling::sample(&gl, &gr, &cuts)?.to_vec::<u32>()?;
            for (row, (&g, &r)) in rows.chunks(v).zip(got.iter().zip(&r)) {
                let want = sampling::pick_row(row, r, &cuts);
                if g != want {
                    differ += 1;
                    eprintln!("{dtype} {cuts:?}: the GPU drew {g}, the CPU {want}");
                }
            }
        }
    }
    assert!(differ <= 1, "{differ} rows of 640 drew another token");
    Ok(())
}
