//! Hybrid models, the stochastic-window trainer, evaluation and the swax CLI.
