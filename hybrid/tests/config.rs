//! Configs: every built-in one resolves, overrides apply, and a bad key or value is an error
//! that names the key.
use swax_hybrid::config::{Config, BUILTIN};

fn err(sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Config::resolve(None, &sets).unwrap_err().to_string()
}

#[test]
fn builtin_configs_resolve() {
    for (name, _) in BUILTIN {
        let cfg = Config::resolve(Some(name), &[]).unwrap();
        assert_eq!(&cfg.model.name, name);
    }
    let small = Config::resolve(Some("swax-small"), &[]).unwrap();
    assert_eq!(
        (
            small.model.d_model,
            small.model.n_layers,
            small.model.n_heads
        ),
        (768, 12, 12)
    );
    assert_eq!((small.model.d_ff, small.model.vocab_size), (2048, 50304));
}

#[test]
fn overrides_apply_and_round_trip() {
    let sets = [
        "model.d_model=64",
        "optim.lr=1",
        "model.pattern=SG",
        "optim.schedule=\"wsd\"",
    ];
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let cfg = Config::resolve(None, &sets).unwrap();
    assert_eq!(cfg.model.d_model, 64);
    assert_eq!(cfg.optim.lr, 1.0);
    assert_eq!(cfg.model.pattern, "SG");
    assert_eq!(cfg.optim.schedule, "wsd");
    assert_eq!(Config::parse(&cfg.to_toml(), "round trip").unwrap(), cfg);
}

#[test]
fn a_bad_key_or_value_names_the_key() {
    for (sets, key) in [
        (&["model.d_mdoel=3"][..], "model.d_mdoel"),
        (&["modle.d_model=3"][..], "modle.d_model"),
        (&["model.d_model=abc"][..], "model.d_model"),
        (&["model.d_model=0"][..], "model.d_model"),
        (&["train.p_short=1.5"][..], "train.p_short"),
        (&["model.pattern=SX"][..], "model.pattern"),
        (&["model.n_heads=3"][..], "model.n_heads"),
        (&["train.w_short=512"][..], "train.w_short"),
        (&["optim.schedule=linear"][..], "optim.schedule"),
        (&["data.tokenizer=sentencepiece"][..], "data.tokenizer"),
        (&["train.steps"][..], "train.steps"),
    ] {
        let e = err(sets);
        assert!(e.contains(key), "{sets:?}: {e}");
    }
    let text = Config::resolve(None, &[]).unwrap().to_toml();
    let bad = text.replace("d_ff =", "d_fff =");
    let e = Config::parse(&bad, "x.toml").unwrap_err().to_string();
    assert!(e.contains("d_fff"), "{e}");
}
