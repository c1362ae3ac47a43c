//! `swax study --jobs N`: the study's runs trained N at a time, each by a process of this program
//! (`swax study STUDY --run NAME`, which trains and evaluates that run and saves what it found),
//! so that the parent then writes the report from the saved results alone. Each process writes
//! its output to `OUT/logs/NAME.log` and runs in a process group of its own: Ctrl-C reaches the
//! parent alone, which passes one SIGTERM to each process, so each saves a checkpoint and stops
//! as `swax train` does; a parent killed outright has the kernel send each that SIGTERM.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Trains the runs `names` of `study` into `out`, `jobs` at a time; `common` are the arguments
/// every process takes beside them. Returns false when a stop interrupted them (each saved),
/// an error naming each run whose process failed.
pub fn train(
    study: &str,
    common: &[String],
    out: &Path,
    names: &[String],
    jobs: usize,
    stop: &AtomicBool,
) -> Result<bool> {
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let exe = std::env::current_exe()?;
    let mut waiting = names.iter();
    let mut running: Vec<(&String, Child)> = Vec::new();
    let (mut failed, mut stopped, mut passed_on) = (Vec::new(), false, false);
    eprintln!(
        "{} runs, {jobs} at a time, each logging to {}",
        names.len(),
        logs.display()
    );
    loop {
        while running.len() < jobs && !stop.load(Ordering::SeqCst) {
            let Some(name) = waiting.next() else { break };
            running.push((name, spawn(&exe, study, common, out, name, &logs)?));
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if stop.load(Ordering::SeqCst) && !passed_on {
            running.iter().for_each(|(_, child)| terminate(child));
            passed_on = true;
        }
        let mut still = Vec::new();
        for (name, mut child) in running {
            match child.try_wait()? {
                None => still.push((name, child)),
                Some(status) if status.success() => eprintln!("{name}: done"),
                Some(status) if matches!(status.code(), Some(130 | 143)) => stopped = true,
                Some(status) => {
                    let log = logs.join(format!("{name}.log"));
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let last = text.lines().last().unwrap_or("").to_string();
                    eprintln!("{name}: failed ({status}): {last}");
                    failed.push(format!("{name} ({}: {last})", log.display()));
                }
            }
        }
        running = still;
    }
    if !failed.is_empty() {
        return Err(format!("study runs failed: {}", failed.join("; ")).into());
    }
    let finished = !(stopped || stop.load(Ordering::SeqCst));
    if !finished {
        eprintln!("stopped: run the same command again to continue the study");
    }
    Ok(finished)
}

/// `swax study STUDY --run NAME` with `common`, its output added to `logs/NAME.log`, in a
/// process group of its own.
fn spawn(
    exe: &Path,
    study: &str,
    common: &[String],
    out: &Path,
    name: &str,
    logs: &Path,
) -> Result<Child> {
    let path = logs.join(format!("{name}.log"));
    // Appended to: a study continued after a stop keeps each run's earlier output.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(["study", study, "--run", name])
        .args(common)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // A parent killed outright (SIGKILL, as a machine's time limit kills) cannot pass the stop
    // on: the child then gets SIGTERM from the kernel, saves and stops, instead of training on
    // unseen and holding its run's lock against the next command.
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the child between fork and exec and makes one system call.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    eprintln!("{name}: training");
    Ok(cmd.spawn()?)
}

/// Asks `child` to stop after its step, with a checkpoint (SIGTERM; where there are no POSIX
/// signals, it is killed).
fn terminate(child: &Child) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    }
    #[cfg(not(unix))]
    let _ = child;
}
