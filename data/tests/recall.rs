//! The recall-training rows: exact lengths, answers that repeat what was stated earlier at the
//! distances they claim, from a few tokens to the row's length, deterministic by (seed, split,
//! index), MQAR supervised on its answers only, and held out from the evaluation tasks (other
//! random streams, other wordings); the row loader resumes exactly and deals rows to ranks.
use std::collections::HashSet;

use swax_data::tokenizer::BytesTokenizer;
use swax_data::{
    mqar, Corpus, CorpusConfig, FactMix, LoaderState, MqarConfig, RecallConfig, RecallData,
    RecallKind, RowLoader, Split, TaskSample, Tokenizer, TokenizerKind, IGNORE,
};

fn data(kind: RecallKind, len: usize, seed: u64) -> RecallData {
    RecallData::new(
        TokenizerKind::Bytes.build().unwrap(),
        RecallConfig {
            kind,
            len,
            seed,
            mqar_pairs: 0,
        },
    )
    .unwrap()
}

/// Every answer sits where it says, repeats the tokens stated at its source, and comes after it.
fn check_answers(s: &TaskSample) {
    for a in &s.answers {
        let n = a.tokens.len();
        assert!(a.source + n <= a.pos, "the fact comes first: {a:?}");
        assert_eq!(s.tokens[a.pos..a.pos + n], a.tokens[..]);
        assert_eq!(s.tokens[a.source..a.source + n], a.tokens[..]);
    }
}

#[test]
fn text_rows_have_exact_lengths_and_answers_at_all_distances() {
    for kind in [RecallKind::Passkey, RecallKind::Mix] {
        let d = data(kind, 1025, 3);
        let mut distances = Vec::new();
        for i in 0..100 {
            let row = d.row(Split::Train, i).unwrap();
            assert!(!row.answers_only);
            let s = &row.sample;
            assert_eq!(s.tokens.len(), 1025);
            assert_eq!(s.tokens[0], BytesTokenizer.eot());
            assert!(!s.tokens[1..].contains(&BytesTokenizer.eot()));
            check_answers(s);
            distances.extend(s.answers.iter().map(|a| a.distance()));
        }
        assert!(
            distances.len() > 200,
            "{kind:?}: {} answers",
            distances.len()
        );
        let share = |f: &dyn Fn(usize) -> bool| {
            distances.iter().filter(|&&x| f(x)).count() as f64 / distances.len() as f64
        };
        // Log-uniform from the shortest a recall sentence allows (its lead-in: some 40 bytes)
        // to the row: every octave gets its share.
        assert!(share(&|x| x < 128) > 0.1, "{kind:?}: short recalls");
        assert!(
            share(&|x| x >= 512) > 0.05,
            "{kind:?}: recalls across half the row"
        );
        assert!(distances.iter().all(|&x| x < 1025));
    }
}

#[test]
fn rows_are_deterministic_by_seed_split_and_index() {
    for kind in RecallKind::ALL {
        let (a, b) = (data(kind, 257, 7), data(kind, 257, 7));
        let row = |d: &RecallData, split, i| d.row(split, i).unwrap().sample;
        assert_eq!(row(&a, Split::Train, 5), row(&b, Split::Train, 5));
        assert_ne!(row(&a, Split::Train, 5), row(&a, Split::Train, 6));
        assert_ne!(row(&a, Split::Train, 5), row(&a, Split::Val, 5));
        assert_ne!(
            row(&a, Split::Train, 5),
            row(&data(kind, 257, 8), Split::Train, 5)
        );
    }
}

#[test]
fn mqar_rows_supervise_their_answers_only() {
    let d = data(RecallKind::Mqar, 257, 1);
    let row = d.row(Split::Train, 0).unwrap();
    assert!(row.answers_only);
    check_answers(&row.sample);
    assert_eq!(row.sample.answers.len(), 16, "T / 16 pairs");
    let (inputs, targets) = row.inputs_targets();
    assert_eq!((inputs.len(), targets.len()), (256, 256));
    let scored: Vec<usize> = (0..256).filter(|&i| targets[i] != IGNORE).collect();
    let answers: Vec<usize> = row.sample.answers.iter().map(|a| a.pos - 1).collect();
    assert_eq!(scored, answers);
    for a in &row.sample.answers {
        assert_eq!(targets[a.pos - 1], a.tokens[0]);
    }
}

#[test]
fn training_rows_are_held_out_from_the_evaluation_tasks() {
    // MQAR: no training row is one of the evaluation's samples.
    let tok = BytesTokenizer;
    let cfg = MqarConfig {
        len: 129,
        num_kv_pairs: 8,
        power_a: 0.01,
    };
    let eval: HashSet<Vec<u32>> = (0..2000)
        .map(|s| mqar(&tok, &cfg, s).unwrap().tokens)
        .collect();
    let train = data(RecallKind::Mqar, 129, 0);
    for i in 0..2000 {
        assert!(!eval.contains(&train.row(Split::Train, i).unwrap().sample.tokens));
    }
    // Text: none of the evaluation's wording (passkey's question and filler, the needle's).
    let held_out = [
        "What is the pass key? The pass key is",
        "The grass is green.",
        "special magic number",
        "There is an important info hidden",
    ];
    for kind in [RecallKind::Passkey, RecallKind::Mix] {
        let d = data(kind, 2049, 0);
        for i in 0..20 {
            let text = tok
                .decode(&d.row(Split::Train, i).unwrap().sample.tokens)
                .unwrap();
            for words in held_out {
                assert!(!text.contains(words), "{kind:?} row {i} says {words:?}");
            }
        }
    }
}

#[test]
fn recall_mix_states_every_kind_of_fact() {
    let tok = BytesTokenizer;
    let d = data(RecallKind::Mix, 4097, 0);
    let text: String = (0..4)
        .map(|i| {
            tok.decode(&d.row(Split::Train, i).unwrap().sample.tokens)
                .unwrap()
        })
        .collect();
    for words in [" The code of the ", " lives in ", "number", " the "] {
        assert!(text.contains(words), "{words:?}");
    }
    let passkey: String = (0..4)
        .map(|i| {
            let d = data(RecallKind::Passkey, 2049, 0);
            tok.decode(&d.row(Split::Train, i).unwrap().sample.tokens)
                .unwrap()
        })
        .collect();
    assert!(!passkey.contains(" lives in ") && !passkey.contains(" The code of the "));
}

#[test]
fn probes_are_validation_rows_cut_after_their_last_answer() {
    let d = data(RecallKind::Mix, 513, 2);
    let probes = d.probes(10).unwrap();
    assert_eq!(probes.len(), 10);
    for p in &probes {
        check_answers(p);
        let last = p.answers.last().unwrap();
        assert_eq!(p.tokens.len(), last.pos + last.tokens.len());
    }
    let first_val = d.row(Split::Val, 0).unwrap().sample;
    assert_eq!(
        probes[0].tokens[..],
        first_val.tokens[..probes[0].tokens.len()]
    );
}

#[test]
fn corpus_recalls_stay_within_max_distance() {
    let tok = BytesTokenizer;
    let corpus = Corpus::new(
        &tok,
        CorpusConfig {
            max_distance: 300,
            facts: FactMix::Corpus,
            ..CorpusConfig::default()
        },
    )
    .unwrap();
    let mut n = 0;
    for i in 0..20 {
        let doc = corpus.document(Split::Train, i);
        for a in &doc.recalls {
            // Planned at most 300; a recall starts at the next sentence boundary after it is due.
            assert!(a.distance() <= 300 + 64, "{}", a.distance());
            n += 1;
        }
    }
    assert!(n > 100);
}

#[test]
fn the_row_loader_resumes_exactly_and_deals_rows_to_ranks() {
    let loader = |rank, world| RowLoader::new(data(RecallKind::Mix, 65, 4), 2, rank, world);
    let mut whole = loader(0, 1).unwrap();
    let batches: Vec<_> = (0..4).map(|_| whole.next_batch().unwrap()).collect();
    let mut first = loader(0, 1).unwrap();
    first.next_batch().unwrap();
    let state: LoaderState = first.state();
    let mut resumed = RowLoader::resume(data(RecallKind::Mix, 65, 4), 2, 0, 1, state).unwrap();
    assert_eq!(resumed.next_batch().unwrap(), batches[1]);
    // Two ranks of one row each see the rows one rank of two sees.
    let (mut r0, mut r1) = (
        RowLoader::new(data(RecallKind::Mix, 65, 4), 1, 0, 2).unwrap(),
        RowLoader::new(data(RecallKind::Mix, 65, 4), 1, 1, 2).unwrap(),
    );
    let (b0, b1) = (r0.next_batch().unwrap(), r1.next_batch().unwrap());
    assert_eq!([b0.inputs, b1.inputs].concat(), batches[0].inputs);
    // Another seed's state is refused.
    let other = RowLoader::resume(data(RecallKind::Mix, 65, 5), 2, 0, 1, state);
    assert!(other.is_err());
}
