//! The config a model benchmark builds (bench-train, bench-memory, bench-generate): a name or
//! file and `swax train --set` overrides, as one set of command-line arguments.
use swax_hybrid::config::{Config, ConfigError};

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// A config name (configs/) or file.
    #[arg(long, default_value = "swax-small")]
    pub config: String,
    /// Config overrides, as `swax train --set`; after a benchmark's own settings, so they win.
    #[arg(long = "set")]
    pub sets: Vec<String>,
}

impl ConfigArgs {
    /// The config with the overrides applied.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        Config::resolve(Some(&self.config), &self.sets)
    }
}
