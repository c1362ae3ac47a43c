//! Configs: every built-in one resolves, overrides apply, and a bad key or value is an error
//! that names the key.
use swax_hybrid::config::{Config, ScheduleKind, BUILTIN};

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
    assert_eq!(cfg.optim.schedule, ScheduleKind::Wsd);
    assert_eq!(Config::parse(&cfg.to_toml(), "round trip").unwrap(), cfg);
}

/// `model.loss_rows` came after configs (and run folders' `config.toml`) were written without
/// it: those load with the default, and it can be set like any key.
#[test]
fn configs_without_loss_rows_load_with_the_default() {
    let (_, text) = BUILTIN.iter().find(|(n, _)| *n == "swax-small").unwrap();
    assert!(!text.contains("loss_rows"));
    let cfg = Config::parse(text, "swax-small").unwrap();
    assert_eq!(
        cfg.model.loss_rows,
        swax_nn::layers::linear_cross_entropy::DEFAULT_ROWS
    );
    let set = Config::resolve(Some("swax-small"), &["model.loss_rows=512".into()]).unwrap();
    assert_eq!(set.model.loss_rows, 512);
}

#[test]
fn a_bad_key_or_value_names_the_key() {
    for (sets, key) in [
        (&["model.d_mdoel=3"][..], "model.d_mdoel"),
        (&["modle.d_model=3"][..], "modle.d_model"),
        (&["model.d_model=abc"][..], "model.d_model"),
        (&["model.d_model=0"][..], "model.d_model"),
        (&["model.loss_rows=0"][..], "model.loss_rows"),
        (&["train.p_short=1.5"][..], "train.p_short"),
        (&["model.pattern=SX"][..], "model.pattern"),
        (&["model.n_heads=3"][..], "model.n_heads"),
        (&["train.w_short=512"][..], "train.w_short"),
        (&["optim.schedule=linear"][..], "optim.schedule"),
        (&["data.tokenizer=sentencepiece"][..], "data.tokenizer"),
        (&["train.dtype=bf61"][..], "train.dtype"),
        (&["train.reduce_dtype=f16"][..], "train.reduce_dtype"),
        (&["train.steps"][..], "train.steps"),
    ] {
        let e = err(sets);
        assert!(e.contains(key), "{sets:?}: {e}");
    }
    // A word outside a choice is refused with the words it could be.
    let e = err(&["optim.schedule=\"cosin\""]);
    assert!(e.contains("`cosine`") && e.contains("`wsd`"), "{e}");
    let text = Config::resolve(None, &[]).unwrap().to_toml();
    let bad = text.replace("d_ff =", "d_fff =");
    let e = Config::parse(&bad, "x.toml").unwrap_err().to_string();
    assert!(e.contains("d_fff"), "{e}");
}

#[test]
fn values_that_can_only_end_in_nan_are_refused() {
    for (set, key) in [
        ("optim.beta1=1", "optim.beta1"),
        ("optim.beta2=1.0", "optim.beta2"),
        ("model.rope_theta=0", "model.rope_theta"),
        ("optim.eps=0", "optim.eps"),
        ("optim.lr=nan", "optim.lr"),
        ("optim.lr=inf", "optim.lr"),
        ("model.rope_theta=-inf", "model.rope_theta"),
    ] {
        let e = err(&[set]);
        assert!(e.contains(key), "{set}: {e}");
    }
}

#[test]
fn numbers_out_of_their_range_name_the_key() {
    for (set, key) in [
        ("model.d_model=-5", "model.d_model"),
        ("train.steps=-1", "train.steps"),
        ("model.d_model=99999999999999999999", "model.d_model"),
        ("train.steps=1e30", "train.steps"),
        ("data.batch_size=2.5", "data.batch_size"),
        ("optim.lr=1e400", "optim.lr"),
    ] {
        let e = err(&[set]);
        assert!(e.contains(key), "{set}: {e}");
    }
    // A number too large for TOML is said to be one, not taken for a string.
    let e = err(&["model.d_model=99999999999999999999"]);
    assert!(e.contains("not a number a config can hold"), "{e}");
}

#[test]
fn a_model_name_cannot_lead_out_of_the_runs_folder() {
    for name in ["../escape", "a/b", "..", ".", "", "c:\\\\x", "tab\\there"] {
        let e = err(&[&format!("model.name=\"{name}\"")]);
        assert!(e.contains("model.name"), "{name}: {e}");
    }
    let ok = Config::resolve(None, &["model.name=\"my-run.v2\"".to_string()]).unwrap();
    assert_eq!(ok.model.name, "my-run.v2");
}

#[test]
fn recompute_names_layers_and_refuses_what_it_cannot_read() {
    let small =
        |spec: &str| Config::resolve(Some("swax-small"), &[format!("model.recompute={spec}")]);
    let layers = |spec: &str| -> Vec<usize> {
        let flags = small(spec).unwrap().model.recompute_layers().unwrap();
        (0..flags.len()).filter(|&i| flags[i]).collect()
    };
    // Configs written before the key have none.
    assert_eq!(
        Config::resolve(Some("swax-small"), &[])
            .unwrap()
            .model
            .recompute,
        "none"
    );
    assert_eq!(layers("none"), Vec::<usize>::new());
    assert_eq!(layers("all"), (0..12).collect::<Vec<_>>());
    assert_eq!(layers("every:4"), [0, 4, 8]);
    assert_eq!(layers("first:3"), [0, 1, 2]);
    assert_eq!(layers("\"0, 3,5\""), [0, 3, 5]);
    assert_eq!(layers("'11'"), [11]);
    for bad in [
        "some", "every:0", "first:13", "0,12", "1,1", "a,b", "every:x",
    ] {
        let e = small(bad).unwrap_err().to_string();
        assert!(
            e.contains("model.recompute") && e.contains("every:K"),
            "{bad}: {e}"
        );
    }
}
