//! The default corpus: deterministic by seed, recalls that repeat an earlier fact at the place
//! they say, distances from a few tokens to far beyond a 2048 window, disjoint train and
//! validation streams, exact stream lengths, and probes that are prefixes of held-out documents.

use swax_data::tokenizer::{BytesTokenizer, Gpt2Tokenizer};
use swax_data::{Corpus, CorpusConfig, DataError, Split, Tokenizer};

fn check_recalls(tok: &dyn Tokenizer, cfg: CorpusConfig, docs: u64) -> Vec<usize> {
    let corpus = Corpus::new(tok, cfg).unwrap();
    let mut distances = Vec::new();
    for i in 0..docs {
        let doc = corpus.document(Split::Train, i);
        assert!(doc.tokens.len() >= cfg.min_doc_tokens);
        assert!(doc
            .tokens
            .iter()
            .all(|&t| t < tok.vocab_size() && t != tok.eot()));
        for a in &doc.recalls {
            let n = a.tokens.len();
            assert_eq!(doc.tokens[a.pos..a.pos + n], a.tokens[..]);
            assert_eq!(
                doc.tokens[a.source..a.source + n],
                a.tokens[..],
                "stated earlier"
            );
            assert!(a.distance() >= cfg.min_distance);
            // The recall repeats the statement: the same words lead up to the value.
            let lead = 4.min(a.source);
            assert_eq!(
                doc.tokens[a.pos - lead..a.pos],
                doc.tokens[a.source - lead..a.source]
            );
            distances.push(a.distance());
        }
    }
    distances
}

#[test]
fn recalls_repeat_facts_at_short_and_very_long_distances() {
    let distances = check_recalls(&BytesTokenizer, CorpusConfig::default(), 40);
    assert!(distances.len() > 300, "{} recalls", distances.len());
    assert!(distances.iter().any(|&d| d < 64));
    assert!(distances.iter().filter(|&&d| d > 2048).count() > 20);
    assert!(distances.iter().any(|&d| d > 8192));
}

#[test]
fn gpt2_documents_recall_too() {
    let tok = Gpt2Tokenizer::new().unwrap();
    let cfg = CorpusConfig {
        max_doc_tokens: 4096,
        ..CorpusConfig::default()
    };
    let distances = check_recalls(&tok, cfg, 10);
    assert!(distances.len() > 50);
    let text = tok
        .decode(
            &Corpus::new(&tok, cfg)
                .unwrap()
                .document(Split::Train, 0)
                .tokens,
        )
        .unwrap();
    assert!(
        text.contains(" lives in ") || text.contains(" The code of the "),
        "{text}"
    );
}

#[test]
fn deterministic_by_seed_and_split() {
    let tok = BytesTokenizer;
    let corpus = |seed| {
        Corpus::new(
            &tok,
            CorpusConfig {
                seed,
                ..CorpusConfig::default()
            },
        )
        .unwrap()
    };
    let (a, b) = (corpus(1), corpus(2));
    assert_eq!(
        a.document(Split::Train, 3),
        corpus(1).document(Split::Train, 3)
    );
    assert_ne!(a.document(Split::Train, 3), b.document(Split::Train, 3));
    assert_ne!(a.document(Split::Train, 3), a.document(Split::Val, 3));
    assert_ne!(a.document(Split::Train, 3), a.document(Split::Train, 4));
}

#[test]
fn streams_have_exact_lengths_and_disjoint_splits() {
    let tok = BytesTokenizer;
    let cfg = CorpusConfig {
        max_doc_tokens: 2000,
        ..CorpusConfig::default()
    };
    let corpus = Corpus::new(&tok, cfg).unwrap();
    let train = corpus.stream(Split::Train, 100_000);
    let val = corpus.stream(Split::Val, 20_000);
    assert_eq!((train.len(), val.len()), (100_000, 20_000));
    assert_eq!(train[0], tok.eot());
    let docs = |s: &[u32]| -> Vec<Vec<u32>> {
        s.split(|&t| t == tok.eot())
            .skip(1)
            .map(<[u32]>::to_vec)
            .collect()
    };
    let (train_docs, val_docs) = (docs(&train), docs(&val));
    assert!(train_docs.len() > 10 && val_docs.len() > 2);
    // Whole documents (all but a stream's last) are never shared.
    for v in &val_docs[..val_docs.len() - 1] {
        assert!(!train_docs.contains(v));
    }
    assert_eq!(train_docs[0], corpus.document(Split::Train, 0).tokens);
}

#[test]
fn probes_are_prefixes_of_held_out_documents() {
    let tok = BytesTokenizer;
    let corpus = Corpus::new(&tok, CorpusConfig::default()).unwrap();
    let probes = corpus.probes(20, 1024).unwrap();
    assert_eq!(probes.len(), 20);
    let held_out: Vec<Vec<u32>> = (0..200)
        .map(|i| corpus.document(Split::Val, i).tokens)
        .collect();
    for p in &probes {
        assert!(p.tokens.len() <= 1024);
        assert_eq!(p.tokens[0], tok.eot());
        assert!(held_out.iter().any(|d| d.starts_with(&p.tokens[1..])));
        let last = p.answers.last().unwrap();
        assert_eq!(last.pos + last.tokens.len(), p.tokens.len());
        for a in &p.answers {
            assert_eq!(p.tokens[a.pos..a.pos + a.tokens.len()], a.tokens[..]);
            assert_eq!(p.tokens[a.source..a.source + a.tokens.len()], a.tokens[..]);
        }
    }
    let no_facts = CorpusConfig {
        fact_rate: 0.0,
        ..CorpusConfig::default()
    };
    let none = Corpus::new(&tok, no_facts).unwrap().probes(3, 1024);
    assert!(matches!(none, Err(DataError::Config(_))));
}

#[test]
fn bad_configs_are_errors() {
    let tok = BytesTokenizer;
    for cfg in [
        CorpusConfig {
            min_doc_tokens: 0,
            ..CorpusConfig::default()
        },
        CorpusConfig {
            min_doc_tokens: 10,
            max_doc_tokens: 5,
            ..CorpusConfig::default()
        },
        CorpusConfig {
            fact_rate: 1.5,
            ..CorpusConfig::default()
        },
        CorpusConfig {
            min_distance: 0,
            ..CorpusConfig::default()
        },
    ] {
        assert!(matches!(Corpus::new(&tok, cfg), Err(DataError::Config(_))));
    }
}
