//! CPU benchmark of the sequence mixers: each fused form against its reference, forward alone
//! and forward + backward (through a weighted-sum loss), f32, median wall time in ms. One
//! function per mixer family prints its rows of the shared table; `main` runs them all.
//!
//!     cargo run --release -p swax-bench --bin bench-mixers-cpu
use std::time::Instant;
use swax_autograd::Tape;
use swax_nn::mixers::{attention, gated_delta, mlstm, rattention};
use swax_tensor::{DType, Device, Result, Tensor};

/// A mixer over its inputs, on a tape.
type Mixer<'a> = &'a dyn Fn(&Tape, &[Tensor]) -> Result<Tensor>;
type SwaForm = fn(&Tape, &Tensor, &Tensor, &Tensor, usize, Option<f64>) -> Result<Tensor>;
type RAttentionForm =
    fn(&Tape, &Tensor, &Tensor, &Tensor, &Tensor, &Tensor, &rattention::Config) -> Result<Tensor>;

/// Median wall time in ms of `reps` runs after one warm-up.
fn median_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[reps / 2])
}

/// Forward without a tape, and forward + backward of a weighted sum of the output.
fn time_mixer(f: Mixer, inputs: &[Tensor], reps: usize) -> Result<(f64, f64)> {
    let forward = median_ms(reps, || f(&Tape::new(), inputs).map(drop))?;
    let weights = Tensor::randn(
        f(&Tape::new(), inputs)?.shape().clone(),
        1.0,
        99,
        DType::F32,
        Device::Cpu,
    )?;
    let both = median_ms(reps, || {
        let tape = Tape::new();
        inputs.iter().for_each(|x| tape.watch(x));
        let loss = tape.sum_all(&tape.mul(&f(&tape, inputs)?, &weights)?)?;
        tape.backward(&loss).map(drop)
    })?;
    Ok((forward, both))
}

fn row(name: &str, shape: &str, fused: Mixer, reference: Mixer, inputs: &[Tensor]) -> Result<()> {
    let (ff, fb) = time_mixer(fused, inputs, 5)?;
    let (rf, rb) = time_mixer(reference, inputs, 3)?;
    println!(
        "| {name} | {shape} | {ff:.1} | {fb:.1} | {rf:.1} | {rb:.1} | {:.1}x |",
        rb / fb
    );
    Ok(())
}

fn randn(dims: [usize; 4], seed: u64) -> Result<Tensor> {
    Tensor::randn(dims, 1.0, seed, DType::F32, Device::Cpu)
}

/// SWA and RAttention at B=1, T=2048, D=64, windows 128 and 512, with and without grouped
/// queries.
fn attention_rows() -> Result<()> {
    let (b, t, d) = (1, 2048, 64);
    for (h, hkv) in [(4, 4), (8, 2)] {
        let x = [
            randn([b, t, h, d], 1)?,
            randn([b, t, hkv, d], 2)?,
            randn([b, t, hkv, d], 3)?,
        ];
        let norms = [
            Tensor::ones([d], DType::F32, Device::Cpu)?,
            Tensor::ones([d], DType::F32, Device::Cpu)?,
        ];
        let all = [
            x[0].clone(),
            x[1].clone(),
            x[2].clone(),
            norms[0].clone(),
            norms[1].clone(),
        ];
        for window in [128, 512] {
            let shape = format!("B{b} T{t} H{h} Hkv{hkv} D{d} W{window}");
            let swa = |f: SwaForm| {
                move |tape: &Tape, x: &[Tensor]| f(tape, &x[0], &x[1], &x[2], window, None)
            };
            row(
                "swa",
                &shape,
                &swa(attention::node::swa),
                &swa(attention::reference::swa),
                &x,
            )?;
            let cfg = rattention::Config::new(window);
            let rat = |f: RAttentionForm| {
                move |tape: &Tape, x: &[Tensor]| f(tape, &x[0], &x[1], &x[2], &x[3], &x[4], &cfg)
            };
            row(
                "rattention",
                &shape,
                &rat(rattention::node::rattention),
                &rat(rattention::reference::rattention),
                &all,
            )?;
        }
    }
    Ok(())
}

/// mLSTM (chunk 64) against its recurrent and parallel references, and the gated delta rule
/// (chunk 64) against its recurrent reference, at B=1, T=2048, H=4, D=64, from zero states.
fn recurrent_rows() -> Result<()> {
    let (b, t, h, d) = (1, 2048, 4, 64);
    let shape = format!("B{b} T{t} H{h} D{d} chunk64");
    let gate = |lo: f64, hi: f64, seed: u64| {
        Tensor::rand_uniform([b, t, h], lo, hi, seed, DType::F32, Device::Cpu)
    };
    let qkv = [
        randn([b, t, h, d], 1)?,
        randn([b, t, h, d], 2)?,
        randn([b, t, h, d], 3)?,
    ];
    let with_gates = |g0: Tensor, g1: Tensor| {
        let mut x = qkv.to_vec();
        x.extend([g0, g1]);
        x
    };
    type MlstmForm = fn(
        &Tape,
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        Option<&mlstm::MlstmState>,
        f64,
    ) -> Result<(Tensor, mlstm::MlstmState)>;
    let mlstm_ref = |f: MlstmForm| {
        move |tape: &Tape, x: &[Tensor]| {
            Ok(f(tape, &x[0], &x[1], &x[2], &x[3], &x[4], None, mlstm::EPS)?.0)
        }
    };
    let mlstm_fused = |tape: &Tape, x: &[Tensor]| {
        Ok(mlstm::chunkwise(
            tape,
            &x[0],
            &x[1],
            &x[2],
            &x[3],
            &x[4],
            None,
            64,
            mlstm::EPS,
        )?
        .0)
    };
    let x = with_gates(gate(-3.0, 3.0, 4)?, gate(0.0, 6.0, 5)?);
    row(
        "mlstm vs recurrent",
        &shape,
        &mlstm_fused,
        &mlstm_ref(mlstm::recurrent),
        &x,
    )?;
    row(
        "mlstm vs parallel",
        &shape,
        &mlstm_fused,
        &mlstm_ref(mlstm::parallel),
        &x,
    )?;
    let x = with_gates(gate(0.05, 0.95, 6)?, gate(-1.0, 0.0, 7)?);
    row(
        "gated_delta vs recurrent",
        &shape,
        &|tape: &Tape, x: &[Tensor]| {
            Ok(gated_delta::chunkwise(tape, &x[0], &x[1], &x[2], &x[3], &x[4], None, 64)?.0)
        },
        &|tape: &Tape, x: &[Tensor]| {
            Ok(gated_delta::recurrent(tape, &x[0], &x[1], &x[2], &x[3], &x[4], None)?.0)
        },
        &x,
    )
}

fn main() -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("swax mixers, CPU, f32, {threads} cores, times in ms (median)\n");
    println!(
        "| mixer | shape | fused fwd | fused fwd+bwd | ref fwd | ref fwd+bwd | speedup fwd+bwd |"
    );
    println!("|---|---|---|---|---|---|---|");
    attention_rows()?;
    recurrent_rows()
}
