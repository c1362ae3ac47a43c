//! The figures of the kernel benchmarks' PyTorch peers, as bench/peers/attention_peers.py and
//! recurrent_peers.py write them: one JSON line per case, shape and peer, with `case`, `shape`
//! (`Shape::label`), `peer` (its name) and `peer_ms` (its forward + backward median), or, where
//! the peer refused the shape or failed, `peer_ms` null and the reason in `refused`.
use std::path::Path;

use serde_json::Value;

use crate::record;

/// One peer's figure for a case: its forward + backward median in ms, or why it has none.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerFigure {
    pub peer: String,
    pub ms: Result<f64, String>,
}

/// The lines of a peers file (none where no file was given).
#[derive(Clone, Debug, Default)]
pub struct Peers {
    lines: Vec<Value>,
}

impl Peers {
    /// The peers' lines in `path`; an unreadable file is an error naming it.
    pub fn read(path: &Path) -> Result<Peers, String> {
        Ok(Peers {
            lines: record::read(path)?,
        })
    }

    /// Each peer's figure for `case` at `shape`, in the order the peers first appear; of a peer
    /// with several lines the last one, so that a later run supersedes an earlier one.
    pub fn of(&self, case: &str, shape: &str) -> Vec<PeerFigure> {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        let mut figures: Vec<PeerFigure> = Vec::new();
        let lines = self.lines.iter().filter(|v| {
            text(v, "case").as_deref() == Some(case) && text(v, "shape").as_deref() == Some(shape)
        });
        for v in lines {
            let Some(peer) = text(v, "peer") else {
                continue;
            };
            let ms = match v.get("peer_ms").and_then(Value::as_f64) {
                Some(ms) => Ok(ms),
                None => Err(text(v, "refused").unwrap_or_else(|| "no peer_ms given".into())),
            };
            match figures.iter_mut().find(|f| f.peer == peer) {
                Some(f) => f.ms = ms,
                None => figures.push(PeerFigure { peer, ms }),
            }
        }
        figures
    }
}

/// The fastest of `figures` that have a time: its name and ms.
pub fn best(figures: &[PeerFigure]) -> Option<(&str, f64)> {
    figures
        .iter()
        .filter_map(|f| f.ms.as_ref().ok().map(|&ms| (f.peer.as_str(), ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}
