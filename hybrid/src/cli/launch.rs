//! `swax train --gpus N`: starts N copies of this command, one rank per GPU of this node, with
//! the environment an external launcher would give them (`swax_hybrid::train::nccl::Place`),
//! and watches them: when one fails, the others are stopped (SIGTERM, then SIGKILL after a
//! grace period) and the failure is named; a SIGINT or SIGTERM to the launcher is passed on.
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::CliResult;

/// How long ranks may take to stop on their own after one failed, before they are killed.
const GRACE: Duration = Duration::from_secs(10);

/// This program's arguments for the ranks: the launcher's, without `--gpus`, with `--out`.
pub fn rank_args(args: &[String], out: &Path) -> Vec<String> {
    let mut kept = Vec::new();
    let mut it = args.iter();
    let mut has_out = false;
    while let Some(a) = it.next() {
        if a == "--gpus" {
            it.next();
            continue;
        }
        if a.starts_with("--gpus=") {
            continue;
        }
        has_out |= a == "--out" || a.starts_with("--out=");
        kept.push(a.clone());
    }
    if !has_out {
        kept.push("--out".into());
        kept.push(out.display().to_string());
    }
    kept
}

/// Runs `args` (this program's, after its name) as `gpus` ranks and waits for them all.
pub fn launch(gpus: usize, args: &[String], stop: &'static AtomicBool) -> CliResult {
    let exe = std::env::current_exe()?;
    // A free port for rank 0's rendezvous, released just before the ranks start.
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut ranks: Vec<Option<Child>> = Vec::new();
    for rank in 0..gpus {
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", gpus.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string());
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // NVLink multicast (NVLS) stays off unless asked for.
            cmd.env("NCCL_NVLS_ENABLE", "0");
        }
        match cmd.spawn() {
            Ok(child) => ranks.push(Some(child)),
            Err(e) => {
                stop_all(&mut ranks);
                return Err(format!("starting rank {rank} ({}): {e}", exe.display()).into());
            }
        }
    }
    let mut failed: Option<(usize, ExitStatus)> = None;
    let mut interrupted: Option<ExitStatus> = None;
    let mut forwarded = false;
    let mut since: Option<Instant> = None;
    while ranks.iter().any(Option::is_some) {
        for (rank, slot) in ranks.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            let Some(status) = child.try_wait()? else {
                continue;
            };
            *slot = None;
            match status.code() {
                Some(0) => {}
                Some(130 | 143) if failed.is_none() => interrupted = Some(status),
                _ => {
                    failed.get_or_insert((rank, status));
                }
            }
        }
        if let (Some((rank, status)), None) = (failed, since) {
            eprintln!("rank {rank} of {gpus} failed ({status}): stopping the other ranks");
            signal_all(&ranks, nix_term());
            since = Some(Instant::now());
        }
        if since.is_some_and(|t| t.elapsed() > GRACE) {
            stop_all(&mut ranks);
        }
        if stop.load(Ordering::SeqCst) && !forwarded {
            signal_all(&ranks, nix_term());
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some((rank, status)) = failed {
        return Err(format!(
            "rank {rank} of {gpus} failed ({status}); every rank was stopped, and the last \
             checkpoint rank 0 wrote is kept"
        )
        .into());
    }
    if let Some(code) = interrupted.and_then(|s| s.code()) {
        std::process::exit(code);
    }
    Ok(())
}

#[cfg(unix)]
fn nix_term() -> nix::sys::signal::Signal {
    nix::sys::signal::Signal::SIGTERM
}

#[cfg(unix)]
fn signal_all(ranks: &[Option<Child>], signal: nix::sys::signal::Signal) {
    for child in ranks.iter().flatten() {
        // A rank that has just exited is not an error here.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
    }
}

#[cfg(not(unix))]
fn nix_term() {}

#[cfg(not(unix))]
fn signal_all(_ranks: &[Option<Child>], _signal: ()) {}

/// Kills every rank still running and reaps it.
fn stop_all(ranks: &mut [Option<Child>]) {
    for child in ranks
        .iter_mut()
        .filter_map(Option::take)
        .collect::<Vec<_>>()
        .iter_mut()
    {
        let _ = child.kill();
        let _ = child.wait();
    }
}
