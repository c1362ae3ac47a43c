//! Writes what a run of a config starts from and sees, for the PyTorch twin's parity check
//! (`swax_bench::twin`, docs/parity.md): the config, the initial weights, the trainer's batches
//! of the first `--steps` steps and each step's window, and step 0's logits, loss and gradients.
//!
//!   twin-dump --config swax-tiny --set 'model.pattern="G"' --set train.dtype="f32" \
//!       --steps 200 --out runs/twin-G
//!   swax train --config runs/twin-G/config.toml --out runs/twin-G/swax    # the same run
//!   twin-dump --weights runs/twin-G/swax --out runs/twin-G/trained      # its trained weights
use std::path::PathBuf;

use clap::Parser;
use swax_bench::config_args::ConfigArgs;
use swax_tensor::Device;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    config: ConfigArgs,
    /// Steps whose batches are written.
    #[arg(long, default_value_t = 1)]
    steps: u64,
    /// The folder to write into.
    #[arg(long)]
    out: PathBuf,
    /// A trained run (its latest checkpoint) or a checkpoint folder: dump its config and
    /// weights instead of `--config`'s initial ones.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// `cpu` or `cuda`; default: the GPU if there is one.
    #[arg(long)]
    device: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let cfg = match &a.weights {
        Some(run) => swax_hybrid::loaded::load(run, swax_tensor::Device::Cpu)?.cfg,
        None => a.config.resolve()?,
    };
    let device = match a.device.as_deref() {
        Some("cpu") => Device::Cpu,
        Some("cuda") => Device::Cuda(0),
        Some(other) => return Err(format!("--device {other:?}: expected cpu or cuda").into()),
        None if swax_tensor::cuda::device(0).is_ok() => Device::Cuda(0),
        None => Device::Cpu,
    };
    let d = match &a.weights {
        Some(run) => swax_bench::twin::dump_trained(run, a.steps, device, &a.out)?,
        None => swax_bench::twin::dump(&cfg, a.steps, device, &a.out)?,
    };
    println!(
        "{} ({} x{} layers) on {device}, {:?}: step 0 loss {:.6}; {} steps of rows in {}",
        cfg.model.name,
        cfg.model.pattern,
        cfg.model.n_layers,
        d.dtype,
        d.loss,
        a.steps,
        a.out.display()
    );
    Ok(())
}
