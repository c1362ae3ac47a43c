//! Long-context tasks: exact lengths, answers where the samples say, needles at their depths,
//! MQAR's layout, determinism by seed, and errors for impossible settings.

use swax_data::tokenizer::{BytesTokenizer, Gpt2Tokenizer};
use swax_data::{
    mqar, niah, passkey, DataError, MqarConfig, NiahConfig, NiahKind, PasskeyConfig, TaskSample,
    Tokenizer,
};

/// Every answer sits at its position and repeats the tokens at its source, earlier.
fn check_answers(sample: &TaskSample, len: usize) {
    assert_eq!(sample.tokens.len(), len);
    assert!(!sample.answers.is_empty());
    for a in &sample.answers {
        let n = a.tokens.len();
        assert!(n > 0 && a.pos + n <= len);
        assert_eq!(sample.tokens[a.pos..a.pos + n], a.tokens[..]);
        assert_eq!(sample.tokens[a.source..a.source + n], a.tokens[..]);
        assert!(a.source + n <= a.pos);
    }
    assert!(sample.answers.windows(2).all(|w| w[0].pos < w[1].pos));
}

fn gpt2() -> Gpt2Tokenizer {
    Gpt2Tokenizer::new().unwrap()
}

const KINDS: [NiahKind; 4] = [
    NiahKind::Single,
    NiahKind::MultiKey(4),
    NiahKind::MultiValue(3),
    NiahKind::MultiQuery(2),
];

#[test]
fn niah_has_the_exact_length_and_answers_where_it_says() {
    let g = gpt2();
    let tokenizers: [&dyn Tokenizer; 2] = [&BytesTokenizer, &g];
    for tok in tokenizers {
        for kind in KINDS {
            for (seed, len) in [(0, 700), (1, 1001), (2, 4096), (3, 20_000)] {
                let cfg = NiahConfig {
                    kind,
                    len,
                    depths: None,
                };
                let sample = niah(tok, &cfg, seed).unwrap();
                check_answers(&sample, len);
                let asked = match kind {
                    NiahKind::Single | NiahKind::MultiKey(_) => 1,
                    _ => needle_count(kind),
                };
                assert_eq!(sample.answers.len(), asked, "{kind:?}");
                let text = tok.decode(&sample.tokens).unwrap();
                let needles = text
                    .matches("One of the special magic numbers for ")
                    .count();
                assert_eq!(needles, needle_count(kind), "{kind:?}");
            }
        }
    }
}

/// Needle count per kind, as the generator documents it.
fn needle_count(kind: NiahKind) -> usize {
    match kind {
        NiahKind::Single => 1,
        NiahKind::MultiKey(n) | NiahKind::MultiValue(n) | NiahKind::MultiQuery(n) => n,
    }
}

#[test]
fn needles_sit_at_their_depths() {
    let len = 20_000;
    let depths = vec![0.0, 0.25, 0.5, 0.9];
    let sample = niah(
        &BytesTokenizer,
        &NiahConfig {
            kind: NiahKind::MultiQuery(4),
            len,
            depths: Some(depths.clone()),
        },
        5,
    )
    .unwrap();
    check_answers(&sample, len);
    // Multi-query answers follow the needles in the order asked, which is the order given.
    for (a, depth) in sample.answers.iter().zip(&depths) {
        let at = a.source as f64 / len as f64;
        assert!(
            (at - depth).abs() < 0.05,
            "needle at {at}, asked for {depth}"
        );
    }
    let text = BytesTokenizer.decode(&sample.tokens[..400]).unwrap();
    let intro_end = text.find("afterwards.").unwrap() + "afterwards.".len();
    assert!(
        text[intro_end..].starts_with(" One of the special magic numbers for "),
        "{text}"
    );
}

#[test]
fn multi_value_answers_come_in_text_order() {
    let sample = niah(
        &BytesTokenizer,
        &NiahConfig {
            kind: NiahKind::MultiValue(4),
            len: 5000,
            depths: Some(vec![0.9, 0.1, 0.5, 0.3]),
        },
        9,
    )
    .unwrap();
    check_answers(&sample, 5000);
    assert!(sample.answers.windows(2).all(|w| w[0].source < w[1].source));
}

#[test]
fn passkey_has_the_exact_length_and_the_key_at_its_depth() {
    let g = gpt2();
    let tokenizers: [&dyn Tokenizer; 2] = [&BytesTokenizer, &g];
    for tok in tokenizers {
        for (seed, len, depth) in [(0, 300, None), (1, 2048, Some(0.0)), (2, 16_384, Some(0.5))] {
            let sample = passkey(tok, &PasskeyConfig { len, depth }, seed).unwrap();
            check_answers(&sample, len);
            let answer = &sample.answers[0];
            let key = tok.decode(&answer.tokens).unwrap();
            assert_eq!(key.trim().len(), 5, "{key}");
            let text = tok.decode(&sample.tokens).unwrap();
            assert!(text.contains(&format!("The pass key is{key}. Remember it.")));
            assert!(text.ends_with(&format!("The pass key is{key}.")));
            match depth {
                // Right after the intro.
                Some(0.0) => assert!(text.contains("information there. The pass key is")),
                Some(d) => assert!((answer.source as f64 / len as f64 - d).abs() < 0.05),
                None => {}
            }
        }
    }
}

#[test]
fn mqar_follows_zoologys_layout() {
    let g = gpt2();
    let tokenizers: [&dyn Tokenizer; 2] = [&BytesTokenizer, &g];
    for tok in tokenizers {
        for (seed, len, pairs) in [(0, 64, 8), (1, 257, 16), (2, 4096, 64)] {
            let cfg = MqarConfig {
                len,
                num_kv_pairs: pairs,
                power_a: 0.01,
            };
            let sample = mqar(tok, &cfg, seed).unwrap();
            check_answers(&sample, len);
            assert_eq!(sample.answers.len(), pairs);
            assert!(sample
                .tokens
                .iter()
                .all(|&t| t < tok.vocab_size() && t != tok.eot()));
            let keys: Vec<u32> = (0..pairs).map(|j| sample.tokens[2 * j]).collect();
            let mut distinct = keys.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), pairs);
            // Keys from the lower half of the vocabulary, values from the upper half.
            let values = (0..pairs).map(|j| sample.tokens[2 * j + 1]);
            assert!(keys.iter().max() < values.min().as_ref());
            for a in &sample.answers {
                let query = a.pos - 1;
                assert!(query >= 2 * pairs && (query - 2 * pairs) % 2 == 0);
                // The query repeats the key of the pair whose value answers it.
                assert_eq!(sample.tokens[query], sample.tokens[a.source - 1]);
                assert_eq!(a.source % 2, 1);
            }
        }
    }
}

#[test]
fn tasks_are_deterministic_by_seed() {
    let tok = BytesTokenizer;
    let n = |seed| {
        niah(
            &tok,
            &NiahConfig {
                kind: NiahKind::MultiKey(3),
                len: 3000,
                depths: None,
            },
            seed,
        )
        .unwrap()
    };
    assert_eq!(n(4), n(4));
    assert_ne!(n(4), n(5));
    let p = |seed| {
        passkey(
            &tok,
            &PasskeyConfig {
                len: 999,
                depth: None,
            },
            seed,
        )
        .unwrap()
    };
    assert_eq!(p(1), p(1));
    assert_ne!(p(1), p(2));
    let m = |seed| {
        let cfg = MqarConfig {
            len: 512,
            num_kv_pairs: 32,
            power_a: 0.01,
        };
        mqar(&tok, &cfg, seed).unwrap()
    };
    assert_eq!(m(3), m(3));
    assert_ne!(m(3), m(4));
}

#[test]
fn impossible_settings_are_errors() {
    let tok = BytesTokenizer;
    let config_error = |r: Result<TaskSample, DataError>| matches!(r, Err(DataError::Config(_)));
    let n = |kind, len, depths| niah(&tok, &NiahConfig { kind, len, depths }, 0);
    assert!(config_error(n(NiahKind::Single, 50, None)));
    assert!(config_error(n(NiahKind::MultiKey(0), 5000, None)));
    assert!(config_error(n(
        NiahKind::MultiKey(2),
        5000,
        Some(vec![0.5])
    )));
    assert!(config_error(n(NiahKind::Single, 5000, Some(vec![1.5]))));
    assert!(config_error(n(
        NiahKind::Single,
        5000,
        Some(vec![f64::NAN])
    )));
    let p = |len, depth| passkey(&tok, &PasskeyConfig { len, depth }, 0);
    assert!(config_error(p(10, None)));
    assert!(config_error(p(5000, Some(-0.1))));
    let m = |len, num_kv_pairs, power_a| {
        mqar(
            &tok,
            &MqarConfig {
                len,
                num_kv_pairs,
                power_a,
            },
            0,
        )
    };
    assert!(config_error(m(64, 17, 0.01)));
    assert!(config_error(m(64, 0, 0.01)));
    assert!(
        config_error(m(4096, 200, 0.01)),
        "more keys than half the byte vocabulary"
    );
    assert!(config_error(m(64, 8, 0.0)));
    assert!(config_error(m(64, 8, f64::NAN)));
}
