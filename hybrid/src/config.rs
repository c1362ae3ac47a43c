//! Run configuration: TOML with four tables (`[model]`, `[data]`, `[train]`, `[optim]`), every
//! field required in the file and overridable from the command line with `--set key=value`
//! (`--set model.d_model=256`, `--set optim.schedule="wsd"`). The named configs of `configs/` are
//! embedded in the binary, so `--config swax-small` works wherever the binary is.
//!
//! Errors name the key: an unknown key, a value of the wrong type, or one outside its range.
//! A choice among words (`optim.schedule`, `train.dtype`, ...) is an enum, so serde refuses any
//! other word, naming the key and the words allowed.
use serde::{Deserialize, Serialize};
use swax_data::TokenizerKind;
use swax_tensor::{DType, Device};

/// The configs shipped in `configs/`, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("swax-tiny", include_str!("../../configs/swax-tiny.toml")),
    (
        "swax-tiny-gdn",
        include_str!("../../configs/swax-tiny-gdn.toml"),
    ),
    (
        "rattention-tiny",
        include_str!("../../configs/rattention-tiny.toml"),
    ),
    (
        "swa-full-tiny",
        include_str!("../../configs/swa-full-tiny.toml"),
    ),
    (
        "transformer-tiny",
        include_str!("../../configs/transformer-tiny.toml"),
    ),
    ("swax-small", include_str!("../../configs/swax-small.toml")),
    (
        "swax-small-gdn",
        include_str!("../../configs/swax-small-gdn.toml"),
    ),
    (
        "rattention-small",
        include_str!("../../configs/rattention-small.toml"),
    ),
    ("swax-1.4b", include_str!("../../configs/swax-1.4b.toml")),
];

/// The config `swax train` uses when given none.
pub const DEFAULT: &str = "swax-tiny";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub data: DataConfig,
    pub train: TrainConfig,
    pub optim: OptimConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Names the run folder by default.
    pub name: String,
    /// Mixer letters repeated to the depth: S sliding-window attention, F full attention,
    /// M mLSTM, G gated delta rule, R RAttention ("SM" is SWAX).
    pub pattern: String,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Hidden units of the SwiGLU MLP.
    pub d_ff: usize,
    pub vocab_size: usize,
    pub rope_theta: f64,
    pub norm_eps: f64,
    /// Time steps per chunk of the chunkwise recurrent kernels.
    pub chunk: usize,
    /// Rows (tokens) of logits the loss computes at a time: the output projection and the
    /// cross-entropy run together, holding `loss_rows` x `vocab_size` logits and their gradient
    /// at once instead of those of the whole batch. Lower it to save memory, raise it for
    /// fewer, larger products.
    #[serde(default = "default_loss_rows")]
    pub loss_rows: usize,
    /// The layers whose blocks are recomputed in the backward (activation checkpointing:
    /// memory keeps a block's input instead of its activations, for a second forward of it):
    /// "none", "all", "every:K" (layers 0, K, 2K, ...), "first:N" (layers 0 to N - 1), or
    /// 0-based layer indices "0,3,5". Optional (configs written before it mean "none").
    #[serde(default = "default_recompute")]
    pub recompute: String,
    /// "fused" (the fused kernels where the device has them) or "reference" (every mixer and
    /// the short convolution from primitive tape ops, in f32): the spec a fused model's
    /// gradients and learning are checked against. Optional: "fused" when left out.
    #[serde(default)]
    pub mixers: Mixers,
}

/// The form of the mixer layers (`model.mixers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mixers {
    #[default]
    Fused,
    Reference,
}

fn default_loss_rows() -> usize {
    swax_nn::layers::linear_cross_entropy::DEFAULT_ROWS
}

fn default_recompute() -> String {
    "none".into()
}

impl ModelConfig {
    /// `recompute` as one flag a layer, or an error naming what is wrong with it.
    pub fn recompute_layers(&self) -> Result<Vec<bool>, ConfigError> {
        let (n, spec) = (self.n_layers, self.recompute.trim());
        let bad = |why: String| {
            err(format!(
                "model.recompute {spec:?}: {why}; expected \"none\", \"all\", \"every:K\", \
                 \"first:N\" or 0-based layer indices such as \"0,3,5\" (of {n} layers)"
            ))
        };
        let number = |s: &str| s.trim().parse::<usize>().map_err(|_| s.trim().to_string());
        match spec {
            "none" => return Ok(vec![false; n]),
            "all" => return Ok(vec![true; n]),
            _ => {}
        }
        if let Some(k) = spec.strip_prefix("every:") {
            return match number(k) {
                Ok(k) if k > 0 => Ok((0..n).map(|i| i % k == 0).collect()),
                _ => bad(format!("every:K needs a positive K, got {k:?}")),
            };
        }
        if let Some(first) = spec.strip_prefix("first:") {
            return match number(first) {
                Ok(f) if f <= n => Ok((0..n).map(|i| i < f).collect()),
                _ => bad(format!("first:N needs N from 0 to {n}, got {first:?}")),
            };
        }
        let mut layers = vec![false; n];
        for part in spec.split(',') {
            match number(part) {
                Ok(i) if i < n && !layers[i] => layers[i] = true,
                Ok(i) if i < n => return bad(format!("layer {i} is named twice")),
                Ok(i) => return bad(format!("there is no layer {i}")),
                Err(word) => return bad(format!("{word:?} is not a layer index")),
            }
        }
        Ok(layers)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// What to train on: `corpus` (the embedded recall corpus), `mqar`, `passkey` or
    /// `recall-mix` (generated recall-training rows), or a folder of shards from `swax prepare`
    /// (`./mqar` for a folder named like a built-in source). `--data` sets it.
    #[serde(default = "default_source")]
    pub source: String,
    /// `bytes` or `gpt2`: the generated data's tokenizer. Shards bring their own (their
    /// `meta.json`'s), which a run records here: a tokenizer file as
    /// `{ file = { sha256 = "...", eot_token = "..." } }`, its copy in the run folder.
    pub tokenizer: TokenizerKind,
    /// T: tokens per sequence.
    pub seq_len: usize,
    /// B: sequences per micro-batch.
    pub batch_size: usize,
    /// Tokens of the embedded corpus generated for training and for validation.
    pub corpus_train_tokens: usize,
    pub corpus_val_tokens: usize,
    /// The longest corpus document, in tokens.
    pub corpus_max_doc_tokens: usize,
    /// Key-value pairs per `mqar` row (0: seq_len / 16, as the evaluation's MQAR).
    #[serde(default)]
    pub mqar_pairs: usize,
}

fn default_source() -> String {
    "corpus".into()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub steps: u64,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// The stochastic window: each step uses `w_short` with probability `p_short`, else
    /// `w_long`; the last `anneal_fraction` of the steps use `w_long` only. A fixed window is
    /// `p_short` = 0 or 1.
    pub w_short: usize,
    pub w_long: usize,
    pub p_short: f64,
    pub anneal_fraction: f64,
    /// Validation loss every this many steps (0: only at the end), over `eval_batches` batches.
    pub eval_every: u64,
    pub eval_batches: usize,
    /// Checkpoint every this many steps (0: only at the end).
    pub save_every: u64,
    /// Write checkpoints at all (false: none, not at the end nor on a stop). For benchmarks,
    /// which time steps: swax-1.4b's checkpoint with its optimizer state is about 17 GB.
    #[serde(default = "yes")]
    pub checkpoints: bool,
    /// Held-out recall probes, scored at every validation and before and after training: enough
    /// of them that this many answers lie within `w_long` and as many beyond it (0: none).
    pub recall_probes: usize,
    /// Print (and log) a short greedy sample at every validation whose step is a multiple of
    /// this (0: never).
    #[serde(default)]
    pub sample_every: u64,
    /// `auto` (bf16 activations on the GPU, f32 on the CPU), `f32` or `bf16`.
    pub dtype: ComputeDType,
    /// With several ranks, the dtype gradients are summed in across them: `f32`, or `bf16`
    /// (half the bytes sent, bf16's rounding on each rank's sum).
    #[serde(default)]
    pub reduce_dtype: ReduceDType,
    pub seed: u64,
}

fn yes() -> bool {
    true
}

/// The dtype of the activations (`train.dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDType {
    /// bf16 on the GPU, f32 on the CPU (whose kernels are fastest in f32).
    Auto,
    F32,
    Bf16,
}

impl ComputeDType {
    /// The compute dtype on `device`.
    pub fn on(self, device: Device) -> DType {
        match (self, device) {
            (ComputeDType::Bf16, _) | (ComputeDType::Auto, Device::Cuda(_)) => DType::BF16,
            (ComputeDType::F32, _) | (ComputeDType::Auto, Device::Cpu) => DType::F32,
        }
    }
}

/// The dtype gradients are summed in across ranks (`train.reduce_dtype`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceDType {
    #[default]
    F32,
    Bf16,
}

impl ReduceDType {
    pub fn dtype(self) -> DType {
        match self {
            ReduceDType::F32 => DType::F32,
            ReduceDType::Bf16 => DType::BF16,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// `cosine` (warmup then cosine) or `wsd` (warmup, stable, linear decay).
    pub schedule: ScheduleKind,
    pub warmup_steps: u64,
    /// The final learning rate as a fraction of the peak.
    pub min_lr_ratio: f64,
    /// `wsd`: the share of steps spent decaying.
    pub decay_fraction: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global gradient-norm clip (0: none).
    pub grad_clip: f64,
}

/// The shape of the learning rate over the steps (`optim.schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// Warmup, then a cosine down to the minimum.
    Cosine,
    /// Warmup, stable, then a linear decay over the last `decay_fraction` of the steps.
    Wsd,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

impl Config {
    /// `source` (a file, or the name of a built-in config; the default when None) with the
    /// `key=value` overrides applied in order, then checked.
    pub fn resolve(source: Option<&str>, sets: &[String]) -> Result<Config, ConfigError> {
        let source = source.unwrap_or(DEFAULT);
        let text = match BUILTIN.iter().find(|(name, _)| *name == source) {
            Some((_, text)) => text.to_string(),
            None => std::fs::read_to_string(source).map_err(|e| {
                let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                ConfigError(format!(
                    "config {source}: {e} (not a file, nor a built-in config: {})",
                    names.join(", ")
                ))
            })?,
        };
        Config::parse(&text, source)?.with_overrides(sets)
    }

    /// A config from TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(format!("config {origin}: {e}")))
    }

    /// The config in the file `path`, checked; errors name the file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{origin}: {e}")))?;
        let cfg = Config::parse(&text, &origin)?;
        cfg.check()
            .map_err(|e| ConfigError(format!("config {origin}: {e}")))?;
        Ok(cfg)
    }

    /// This config with `key=value` overrides applied, then checked.
    pub fn with_overrides(&self, sets: &[String]) -> Result<Config, ConfigError> {
        let mut table = toml::Table::try_from(self).map_err(|e| ConfigError(e.to_string()))?;
        for set in sets {
            let Some((key, value)) = set.split_once('=') else {
                return err(format!("--set {set}: expected key=value"));
            };
            set_key(&mut table, key.trim(), value.trim())?;
        }
        let cfg: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(e.to_string()))?;
        cfg.check()?;
        Ok(cfg)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config serializes")
    }

    /// The ranges and relations serde cannot check, each error naming its key.
    pub fn check(&self) -> Result<(), ConfigError> {
        let (m, d, t, o) = (&self.model, &self.data, &self.train, &self.optim);
        let positive = [
            ("model.n_layers", m.n_layers),
            ("model.d_model", m.d_model),
            ("model.n_heads", m.n_heads),
            ("model.n_kv_heads", m.n_kv_heads),
            ("model.d_ff", m.d_ff),
            ("model.vocab_size", m.vocab_size),
            ("model.chunk", m.chunk),
            ("model.loss_rows", m.loss_rows),
            ("data.seq_len", d.seq_len),
            ("data.batch_size", d.batch_size),
            ("train.grad_accum", t.grad_accum),
            ("train.w_short", t.w_short),
            ("train.w_long", t.w_long),
        ];
        m.recompute_layers()?;
        for (key, v) in positive {
            if v == 0 {
                return err(format!("{key} must be positive, got 0"));
            }
        }
        if t.steps == 0 {
            return err("train.steps must be positive, got 0");
        }
        if m.pattern.is_empty() {
            return err("model.pattern is empty: use letters S, F, M, G, R (e.g. \"SM\")");
        }
        if let Some(c) = m.pattern.chars().find(|c| !"SFMGR".contains(*c)) {
            return err(format!(
                "model.pattern {:?}: unknown mixer {c:?} (S sliding-window attention, F full \
                 attention, M mLSTM, G gated delta rule, R RAttention)",
                m.pattern
            ));
        }
        if m.d_model % m.n_heads != 0 {
            return err(format!(
                "model.n_heads {} must divide model.d_model {}",
                m.n_heads, m.d_model
            ));
        }
        if m.n_heads % m.n_kv_heads != 0 {
            return err(format!(
                "model.n_kv_heads {} must divide model.n_heads {}",
                m.n_kv_heads, m.n_heads
            ));
        }
        if m.pattern.contains('M') && (m.d_model / m.n_heads) % 2 != 0 {
            return err(format!(
                "model.n_heads {}: an mLSTM needs an even head dim, got {}",
                m.n_heads,
                m.d_model / m.n_heads
            ));
        }
        if t.w_short > t.w_long {
            return err(format!(
                "train.w_short {} must not exceed train.w_long {}",
                t.w_short, t.w_long
            ));
        }
        let unit = [
            ("train.p_short", t.p_short),
            ("train.anneal_fraction", t.anneal_fraction),
            ("optim.min_lr_ratio", o.min_lr_ratio),
            ("optim.decay_fraction", o.decay_fraction),
        ];
        for (key, v) in unit {
            if !(0.0..=1.0).contains(&v) {
                return err(format!("{key} must be in [0, 1], got {v}"));
            }
        }
        // AdamW divides by 1 - beta^t: a beta of 1 makes every update 0 / 0.
        for (key, v) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return err(format!("{key} must be in [0, 1), got {v}"));
            }
        }
        let nonneg = [
            ("optim.lr", o.lr),
            ("optim.weight_decay", o.weight_decay),
            ("optim.grad_clip", o.grad_clip),
            ("model.norm_eps", m.norm_eps),
        ];
        for (key, v) in nonneg {
            if !(v >= 0.0 && v.is_finite()) {
                return err(format!("{key} must be finite and >= 0, got {v}"));
            }
        }
        // RoPE divides positions by powers of theta; AdamW divides by sqrt(v) + eps, and v is
        // 0 for a parameter no token has reached yet (an unseen embedding row).
        for (key, v) in [("model.rope_theta", m.rope_theta), ("optim.eps", o.eps)] {
            if !(v > 0.0 && v.is_finite()) {
                return err(format!("{key} must be finite and > 0, got {v}"));
            }
        }
        check_name(&m.name)
    }
}

/// `model.name` names the run folder (`runs/NAME`): one plain folder name, which cannot lead
/// out of `runs/`.
fn check_name(name: &str) -> Result<(), ConfigError> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control);
    match plain {
        true => Ok(()),
        false => err(format!(
            "model.name {name:?}: it names the run folder (runs/NAME), so it must be one plain \
             folder name: not empty, . or .., without / or \\"
        )),
    }
}

/// Sets `key` (dotted) to `value` (a TOML value; a bare word is taken as a string), refusing a
/// key the config lacks or a value of another type than the one there.
fn set_key(table: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let (section, field) = key.split_once('.').unwrap_or(("", key));
    let Some(toml::Value::Table(sec)) = table.get_mut(section) else {
        let names: Vec<&String> = table.keys().collect();
        return err(format!(
            "unknown config key {key:?}: keys are section.field with section one of {names:?}"
        ));
    };
    let Some(old) = sec.get(field) else {
        let fields: Vec<&String> = sec.keys().collect();
        return err(format!(
            "unknown config key {key:?}: [{section}] has {fields:?}"
        ));
    };
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"));
    if parsed.is_none() && (old.is_integer() || old.is_float()) {
        return err(format!(
            "config key {key}: {value} is not a number a config can hold (a whole number from \
             -2^63 to 2^63 - 1, or a finite decimal)"
        ));
    }
    let parsed = parsed.unwrap_or_else(|| toml::Value::String(value.to_string()));
    let new = match (old, parsed) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (old, new) if old.same_type(&new) => new,
        (old, new) => {
            return err(format!(
                "config key {key}: expected {}, got {new} ({})",
                old.type_str(),
                new.type_str()
            ))
        }
    };
    sec.insert(field.to_string(), new);
    Ok(())
}
