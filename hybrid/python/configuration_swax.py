"""The transformers config of an exported swax run (`swax export RUN --hf OUT`, docs/export.md):
every field of the run's `[model]` table under its own name, the attention window the model
runs at, the tokenizer's kind, and the rest of the run's config (`swax_run`: its data, train
and optim tables) so that `swax import` gives the run back as it was."""
from transformers import PretrainedConfig


class SwaxConfig(PretrainedConfig):
    model_type = "swax"
    # The names some tools read, for swax's own.
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layers",
                     "num_attention_heads": "n_heads", "num_key_value_heads": "n_kv_heads",
                     "intermediate_size": "d_ff"}

    def __init__(self, name="swax", pattern="MS", n_layers=4, d_model=128, n_heads=2,
                 n_kv_heads=2, d_ff=384, vocab_size=256, rope_theta=10000.0, norm_eps=1e-6,
                 chunk=64, loss_rows=2048, recompute="none", mixers="fused", window=64,
                 tokenizer="bytes", swax_run=None, use_cache=True, **kwargs):
        self.name = name
        self.pattern = pattern
        self.n_layers = n_layers
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_ff = d_ff
        self.vocab_size = vocab_size
        self.rope_theta = rope_theta
        self.norm_eps = norm_eps
        self.chunk = chunk
        self.loss_rows = loss_rows
        self.recompute = recompute
        self.mixers = mixers
        self.window = window
        self.tokenizer = tokenizer
        self.swax_run = swax_run or {}
        # What a forward without `use_cache` does (lm-eval's and most callers' plain call):
        # transformers' base config no longer defines it.
        self.use_cache = use_cache
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)

    def swax_model(self):
        """The `[model]` fields the PyTorch model reads, as modeling_swax.SwaxTwin takes them."""
        return {name: getattr(self, name) for name in (
            "pattern", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size",
            "rope_theta", "norm_eps")}
