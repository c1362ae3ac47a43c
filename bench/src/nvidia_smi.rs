//! The card's memory as nvidia-smi reports it, sampled in the background while a benchmark runs:
//! every allocation on the card (the CUDA context, the pool's cached blocks, other processes)
//! counts, which the pool's own statistics cannot see. Where nvidia-smi cannot be started, the
//! sampler says why and no figure is given.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// nvidia-smi printing the memory used every `period_ms` until it is stopped.
pub struct MemorySampler {
    child: Child,
    reader: JoinHandle<Option<u64>>,
}

impl MemorySampler {
    /// Starts sampling the memory of CUDA device `ordinal` every `period_ms`; the error says why
    /// nvidia-smi could not be started.
    pub fn start(ordinal: usize, period_ms: u64) -> Result<MemorySampler, String> {
        let gpu = nvidia_smi_id(
            ordinal,
            std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
        );
        let mut child = Command::new("nvidia-smi")
            .args([
                "--query-gpu=memory.used",
                "--format=csv,noheader,nounits",
                "-i",
                &gpu,
                "-lms",
                &period_ms.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nvidia-smi could not be started: {e}"))?;
        let out = child.stdout.take().expect("stdout was piped");
        let reader = std::thread::spawn(move || peak_mib(BufReader::new(out)));
        Ok(MemorySampler { child, reader })
    }

    /// Stops nvidia-smi and returns the most memory it reported in use, in MiB (None: it
    /// reported nothing, e.g. it failed on this GPU).
    pub fn stop(mut self) -> Option<u64> {
        // It runs until killed; an error here means it had already exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader.join().ok().flatten()
    }
}

/// What `-i` names for CUDA device `ordinal`: its entry in CUDA_VISIBLE_DEVICES (an index or a
/// UUID, both of which nvidia-smi takes), else the ordinal itself.
fn nvidia_smi_id(ordinal: usize, visible: Option<&str>) -> String {
    visible
        .and_then(|v| v.split(',').nth(ordinal))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ordinal.to_string())
}

/// The largest of the numbers, one a line, that `lines` holds; lines that are not a number
/// (nvidia-smi's "[N/A]", an error) are skipped.
fn peak_mib(lines: impl BufRead) -> Option<u64> {
    lines
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_largest_sample_and_other_lines_are_skipped() {
        let out = "1024\n 50559 \n[N/A]\nNo devices were found\n512\n";
        assert_eq!(peak_mib(out.as_bytes()), Some(50559));
        assert_eq!(peak_mib("[N/A]\n".as_bytes()), None);
        assert_eq!(peak_mib("".as_bytes()), None);
    }

    #[test]
    fn the_device_is_named_as_cuda_visible_devices_names_it() {
        assert_eq!(nvidia_smi_id(0, None), "0");
        assert_eq!(nvidia_smi_id(1, Some("3,5")), "5");
        assert_eq!(nvidia_smi_id(0, Some("GPU-1a2b, 2")), "GPU-1a2b");
        assert_eq!(nvidia_smi_id(0, Some("")), "0");
    }
}
