//! What every benchmark's JSON line carries besides its figures: the date, the commit it
//! measured and the device it ran on; appending lines to a results file, reading them back, and
//! finding a case's line in one (a peer's results, read by the benchmark it is set beside).
use std::io::Write;
use std::path::Path;

use swax_tensor::Device;

/// Today's date (UTC) as YYYY-MM-DD, from the system clock (days to a civil date, after Howard
/// Hinnant's algorithm).
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date(secs / 86_400)
}

/// The civil date of day `days` since 1970-01-01.
pub fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The short hash of the checked-out commit, or "unknown" outside a git checkout (as on a GPU
/// machine the binaries were carried to: set SWAX_COMMIT there).
pub fn commit() -> String {
    if let Ok(c) = std::env::var("SWAX_COMMIT") {
        return c;
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

/// The device a figure was measured on, naming the GPU ("cuda:0 (NVIDIA H200)"): timings of
/// one binary differ between kinds of GPU, so a line must say which it ran on.
pub fn device(d: Device) -> String {
    match d {
        Device::Cuda(i) => match swax_tensor::cuda::device(i) {
            Ok(gpu) => format!("{d} ({})", gpu.name()),
            Err(_) => d.to_string(),
        },
        Device::Cpu => d.to_string(),
    }
}

/// Appends `lines` (JSON values, one a line) to `path`, creating its folder.
pub fn append(path: &Path, lines: &[serde_json::Value]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The JSON lines of `path`, in order. Lines that are not JSON are skipped; a file that cannot
/// be read is an error naming it.
pub fn read(path: &Path) -> Result<Vec<serde_json::Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// The last line of the JSON-lines file `path` whose `case` is `case` (None: no such line).
pub fn find_case(path: &Path, case: &str) -> Result<Option<serde_json::Value>, String> {
    Ok(read(path)?
        .into_iter()
        .rev()
        .find(|v| v.get("case").and_then(|c| c.as_str()) == Some(case)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_case_is_found_as_last_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peer.jsonl");
        append(
            &path,
            &[json!({"case": "a", "v": 1}), json!({"case": "b", "v": 2})],
        )
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "not json"))
            .unwrap();
        append(&path, &[json!({"case": "a", "v": 3})]).unwrap();
        assert_eq!(find_case(&path, "a").unwrap().unwrap()["v"], 3);
        assert_eq!(find_case(&path, "b").unwrap().unwrap()["v"], 2);
        assert_eq!(find_case(&path, "c").unwrap(), None);
        let missing = dir.path().join("none.jsonl");
        assert!(find_case(&missing, "a").unwrap_err().contains("none.jsonl"));
    }
}
