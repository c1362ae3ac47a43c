//! SIGINT (Ctrl-C) and SIGTERM (what a scheduler sends before it kills a job) during `swax
//! train`: the first asks the trainer to stop after the current step with a checkpoint; a second
//! ends the process at once. Either way the exit status is 128 + the signal's number (130, 143),
//! so a script can tell an interrupted run from a finished one.
//!
//! The signals are blocked in every thread and taken by one thread waiting for them (`sigwait`),
//! so no code runs in a signal handler.
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The number of the signal that asked to stop; 0 while none has.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Sets `stop` at the first SIGINT or SIGTERM. Call it before any other thread starts: threads
/// inherit the blocked signals from the one that starts them.
#[cfg(unix)]
pub fn install(stop: &'static AtomicBool) -> Result<(), Box<dyn std::error::Error>> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()?;
    std::thread::spawn(move || loop {
        // `wait` fails only on an invalid set; there is nothing to do but wait again.
        let Ok(signal) = set.wait() else {
            continue;
        };
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(128 + signal as i32);
        }
        SIGNAL.store(signal as i32, Ordering::SeqCst);
        eprintln!(
            "\n{signal}: stopping after this step (saving a checkpoint); send it again to quit now"
        );
    });
    Ok(())
}

/// Ctrl-C alone where there are no POSIX signals.
#[cfg(not(unix))]
pub fn install(stop: &'static AtomicBool) -> Result<(), Box<dyn std::error::Error>> {
    const SIGINT: i32 = 2;
    ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(128 + SIGINT);
        }
        SIGNAL.store(SIGINT, Ordering::SeqCst);
        eprintln!("\nstopping after this step (saving a checkpoint); Ctrl-C again to quit now");
    })?;
    Ok(())
}

/// The exit status for a run a signal stopped: 128 + its number; None when none did.
pub fn exit_status() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(128 + signal),
    }
}
