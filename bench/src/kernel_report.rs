//! How the kernel benchmarks (bench-attention-gpu, bench-recurrent-gpu) report a case: swax's
//! medians of one mixer at one shape set beside the fastest of its peers' figures for the same
//! case and shape (`peers`), printed as a table row as it is measured and kept as a JSON line
//! for the results file. Every line has `case`, `shape`, `swax_ms` (forward + backward), `peer`
//! and `peer_ms` (the fastest peer; null where none has a figure), `ratio` (peer_ms / swax_ms:
//! above 1, swax is faster), `date`, `commit` and `device` (the GPU); besides them `fwd_ms`,
//! `bwd_ms` where the backward alone is timed, every peer's figure or refusal (`peers`), and the
//! case's own fields.
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use swax_tensor::Device;

use crate::peers::{best, PeerFigure, Peers};
use crate::record;
use crate::shape::Shape;

/// swax's figures of one case at one shape.
#[derive(Clone, Debug)]
pub struct Measured {
    /// e.g. `swa-w128`, `full-causal`, `rattention-w512`, `mlstm`, `gated-delta`.
    pub case: String,
    /// `Shape::label` of the operands it ran on.
    pub shape: String,
    pub fwd_ms: f64,
    /// The backward alone, where the benchmark times it.
    pub bwd_ms: Option<f64>,
    /// Forward + backward: what the case is compared on.
    pub swax_ms: f64,
    /// The case's own fields (its window, the kernel that ran, TFLOP/s, a part's times).
    pub extra: Map<String, Value>,
}

impl Measured {
    /// A case without fields of its own.
    pub fn new(
        case: String,
        shape: String,
        fwd_ms: f64,
        bwd_ms: Option<f64>,
        swax_ms: f64,
    ) -> Self {
        Measured {
            case,
            shape,
            fwd_ms,
            bwd_ms,
            swax_ms,
            extra: Map::new(),
        }
    }

    /// The case with field `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

/// A benchmark's cases so far, with the peers' figures they are set beside.
pub struct Report {
    bench: &'static str,
    peers: Option<Peers>,
    date: String,
    commit: String,
    device: String,
    lines: Vec<Value>,
}

/// The table's head, for `Report::add`'s rows.
pub const HEADER: &str = "| case | shape | fwd ms | bwd ms | fwd+bwd ms | peer | peer ms | peer / swax |\n|---|---|---|---|---|---|---|---|";

impl Report {
    /// A report of benchmark `bench` (the lines' `bench` field), its peers read from `peer`.
    pub fn new(bench: &'static str, peer: Option<&Path>) -> Result<Report, String> {
        Ok(Report {
            bench,
            peers: peer.map(Peers::read).transpose()?,
            date: record::today(),
            commit: record::commit(),
            // The kernel benchmarks time the first GPU.
            device: record::device(Device::Cuda(0)),
            lines: Vec::new(),
        })
    }

    /// Sets `m` beside its peers: prints its row (and, below it, each peer that refused the case
    /// or the absence of any peer line) and keeps its line, which it returns.
    pub fn add(&mut self, m: Measured) -> &Value {
        let figures = match &self.peers {
            Some(p) => p.of(&m.case, &m.shape),
            None => Vec::new(),
        };
        let fastest = best(&figures);
        let ratio = fastest.map(|(_, ms)| ms / m.swax_ms);
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
        println!(
            "| {} | {} | {:.3} | {} | {:.3} | {} | {} | {} |",
            m.case,
            m.shape,
            m.fwd_ms,
            ms(m.bwd_ms),
            m.swax_ms,
            fastest.map_or("-", |(name, _)| name),
            ms(fastest.map(|(_, ms)| ms)),
            ratio.map_or("-".into(), |r| format!("{r:.2}x")),
        );
        if self.peers.is_some() && figures.is_empty() {
            println!(
                "  (the peers' results have no line for {} at {})",
                m.case, m.shape
            );
        }
        for f in &figures {
            if let Err(why) = &f.ms {
                println!(
                    "  (peer {} refused {} at {}: {why})",
                    f.peer, m.case, m.shape
                );
            }
        }
        let mut line = json!({
            "bench": self.bench,
            "case": m.case,
            "shape": m.shape,
            "swax_ms": m.swax_ms,
            "peer": fastest.map(|(name, _)| name),
            "peer_ms": fastest.map(|(_, ms)| ms),
            "ratio": ratio,
            "date": self.date,
            "commit": self.commit,
            "device": self.device,
            "fwd_ms": m.fwd_ms,
            "bwd_ms": m.bwd_ms,
            "peers": figures.iter().map(peer_json).collect::<Vec<_>>(),
        });
        if let Value::Object(fields) = &mut line {
            fields.extend(m.extra);
        }
        self.lines.push(line);
        self.lines.last().expect("a line was just kept")
    }

    /// Appends the kept lines to `results` (nothing where there are none), saying so.
    pub fn write(&self, results: &Path) -> std::io::Result<()> {
        if self.lines.is_empty() {
            println!(
                "no case was measured: nothing appended to {}",
                results.display()
            );
            return Ok(());
        }
        record::append(results, &self.lines)?;
        println!(
            "appended {} lines to {}",
            self.lines.len(),
            results.display()
        );
        Ok(())
    }
}

fn peer_json(f: &PeerFigure) -> Value {
    match &f.ms {
        Ok(ms) => json!({"peer": f.peer, "peer_ms": ms}),
        Err(why) => json!({"peer": f.peer, "peer_ms": null, "refused": why}),
    }
}

/// The command-line arguments both kernel benchmarks take.
#[derive(Debug, clap::Args)]
pub struct KernelArgs {
    /// The shapes, by name: paper (B8 T8192 H16 D128), swax-small (B16 T4096 H12 D64).
    #[arg(long, value_delimiter = ',', default_value = "paper,swax-small", value_parser = Shape::by_name)]
    pub shapes: Vec<Shape>,
    /// The peers' results (the JSON lines bench/peers/*_peers.py --results writes).
    #[arg(long)]
    pub peer: Option<PathBuf>,
    /// Where the cases' JSON lines are appended (default: the benchmark's file in bench/results).
    #[arg(long)]
    pub results: Option<PathBuf>,
}
