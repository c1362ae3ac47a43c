//! Tokenizers: byte round trips (NUL and invalid UTF-8 kept) and the end-of-text byte, GPT-2's known ids from the
//! embedded ranks (no download: these tests run offline), names, and out-of-vocabulary ids.

use swax_data::tokenizer::{BytesTokenizer, Gpt2Tokenizer, EOT_TEXT};
use swax_data::{DataError, DatasetMeta, SplitCounts, Tokenizer, TokenizerKind};

#[test]
fn bytes_round_trip_and_keep_every_byte() {
    let tok = BytesTokenizer;
    assert_eq!((tok.vocab_size(), tok.eot()), (256, 0));
    let text = "The code of the blue door is 48213. Ünïcödé ✓";
    let ids = tok.encode(text);
    assert_eq!(ids.len(), text.len());
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert_eq!(tok.encode("a\0b"), [97, 0, 98]);
    let raw = [0x61, 0xff, 0x00, 0xc3, 0x28, 0x80];
    let ids = tok.encode_bytes(&raw);
    assert_eq!(ids, raw.map(u32::from));
    assert_eq!(
        tok.decode(&[104, 105, 0, 33]).unwrap(),
        format!("hi{EOT_TEXT}!")
    );
}

#[test]
fn gpt2_matches_known_ids_offline() {
    let tok = Gpt2Tokenizer::new().unwrap();
    assert_eq!((tok.vocab_size(), tok.eot()), (50257, 50256));
    assert_eq!(tok.encode("Hello world"), [15496, 995]);
    let text = " The code of the blue door is 48213.";
    assert_eq!(tok.decode(&tok.encode(text)).unwrap(), text);
    // Text that spells the marker is ordinary text; only inserted separators are 50256.
    assert!(!tok.encode(EOT_TEXT).contains(&50256));
    assert_eq!(
        tok.decode(&[15496, 50256]).unwrap(),
        format!("Hello{EOT_TEXT}")
    );
}

#[test]
fn ids_outside_the_vocabulary_are_errors() {
    let gpt2 = Gpt2Tokenizer::new().unwrap();
    let tokenizers: [&dyn Tokenizer; 2] = [&BytesTokenizer, &gpt2];
    for tok in tokenizers {
        let v = tok.vocab_size();
        let err = tok.decode(&[1, 2, v, 3]).unwrap_err();
        match err {
            DataError::OutOfVocab {
                token,
                vocab,
                location,
            } => {
                assert_eq!((token, vocab), (v, v));
                assert_eq!(location, "index 2");
            }
            other => panic!("{other:?}"),
        }
        assert!(tok.decode(&[u32::MAX]).is_err());
    }
}

#[test]
fn kinds_by_name() {
    for kind in TokenizerKind::BUILTIN {
        assert_eq!(kind.name().parse::<TokenizerKind>().unwrap(), kind);
        assert_eq!(kind.build().unwrap().kind(), kind);
        assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{kind}\""));
    }
    assert_eq!(TokenizerKind::default(), TokenizerKind::Bytes);
    assert!(matches!(
        "gpt-4".parse::<TokenizerKind>(),
        Err(DataError::UnknownTokenizer(_))
    ));
}

#[test]
fn a_model_vocabulary_smaller_than_the_data_is_refused() {
    let meta = DatasetMeta {
        tokenizer: TokenizerKind::Gpt2,
        vocab_size: 50257,
        eot: 50256,
        train: SplitCounts::default(),
        val: SplitCounts::default(),
    };
    assert!(matches!(
        meta.check_model_vocab(256),
        Err(DataError::VocabMismatch {
            needed: 50257,
            model: 256,
            ..
        })
    ));
    // Padded vocabularies (GPT-2's 50304) are fine.
    meta.check_model_vocab(50304).unwrap();
}
