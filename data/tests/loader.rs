//! The loader: inputs/targets shifted by one, determinism by seed, exact resume from a
//! serialized state (across epochs), epochs that cover each window once at a fresh alignment,
//! rank splits that partition the global batch, and errors (never panics) on bad settings and
//! out-of-vocabulary tokens.

use std::collections::HashSet;

use swax_data::{
    write_shard, Batch, DataError, Loader, LoaderConfig, LoaderState, Shard, ShardFormat,
};

/// Shards whose every token is distinct and encodes its place: shard s, position i -> s * 1e6 + i.
fn numbered_shards(lens: &[usize]) -> Vec<Shard> {
    lens.iter()
        .enumerate()
        .map(|(s, &len)| {
            let tokens = (0..len as u32).map(|i| s as u32 * 1_000_000 + i).collect();
            Shard::from_tokens(format!("shard{s}"), tokens)
        })
        .collect()
}

fn cfg(b: usize, t: usize, seed: u64) -> LoaderConfig {
    LoaderConfig::new(b, t, seed, u32::MAX)
}

fn batches(loader: &mut Loader, n: usize) -> Vec<Batch> {
    (0..n).map(|_| loader.next_batch().unwrap()).collect()
}

const LENS: [usize; 4] = [1000, 37, 513, 2048];

#[test]
fn targets_are_inputs_shifted_by_one() {
    let mut loader = Loader::new(numbered_shards(&LENS), cfg(4, 16, 1)).unwrap();
    for batch in batches(&mut loader, 50) {
        assert_eq!((batch.b, batch.t), (4, 16));
        assert_eq!(batch.inputs.len(), 4 * 16);
        assert_eq!(batch.targets.len(), 4 * 16);
        for (x, y) in batch.inputs.iter().zip(&batch.targets) {
            assert_eq!(x + 1, *y, "consecutive tokens of one shard");
        }
    }
}

#[test]
fn same_seed_same_batches_other_seed_other_batches() {
    let run = |seed| {
        batches(
            &mut Loader::new(numbered_shards(&LENS), cfg(2, 32, seed)).unwrap(),
            40,
        )
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn resume_continues_exactly_across_epochs() {
    let shards = || numbered_shards(&[300, 100, 250]);
    let config = cfg(3, 20, 42);
    let mut straight = Loader::new(shards(), config).unwrap();
    let all = batches(&mut straight, 60);
    assert!(
        straight.state().epoch >= 3,
        "the run should span several epochs"
    );
    for cut in [0, 1, 5, 13, 29, 59] {
        let mut first = Loader::new(shards(), config).unwrap();
        batches(&mut first, cut);
        let saved = serde_json::to_string(&first.state()).unwrap();
        let state: LoaderState = serde_json::from_str(&saved).unwrap();
        let mut resumed = Loader::resume(shards(), config, state).unwrap();
        assert_eq!(resumed.state(), first.state());
        assert_eq!(batches(&mut resumed, 60 - cut), all[cut..], "cut at {cut}");
    }
}

#[test]
fn resume_refuses_other_settings_or_data() {
    let config = cfg(2, 16, 3);
    let mut loader = Loader::new(numbered_shards(&LENS), config).unwrap();
    batches(&mut loader, 3);
    let state = loader.state();
    let other_seed = Loader::resume(numbered_shards(&LENS), cfg(2, 16, 4), state);
    assert!(matches!(
        other_seed,
        Err(DataError::StateMismatch { field: "seed", .. })
    ));
    let other_t = Loader::resume(numbered_shards(&LENS), cfg(2, 8, 3), state);
    assert!(matches!(
        other_t,
        Err(DataError::StateMismatch { field: "t", .. })
    ));
    let other_data = Loader::resume(numbered_shards(&[1000, 37]), config, state);
    assert!(matches!(
        other_data,
        Err(DataError::StateMismatch {
            field: "tokens",
            ..
        })
    ));
    let past_end = LoaderState {
        window: 1 << 40,
        ..state
    };
    let err = Loader::resume(numbered_shards(&LENS), config, past_end).unwrap_err();
    assert!(matches!(
        err,
        DataError::StateMismatch {
            field: "window",
            ..
        }
    ));
    let past_shards = LoaderState { shard: 99, ..state };
    let err = Loader::resume(numbered_shards(&LENS), config, past_shards).unwrap_err();
    assert!(matches!(
        err,
        DataError::StateMismatch { field: "shard", .. }
    ));
}

/// The windows of one epoch, as (shard, first token), read with B = 1.
fn epoch_windows(loader: &mut Loader, t: usize) -> Vec<(u32, u32)> {
    let mut windows = Vec::new();
    let mut epoch = None;
    loop {
        let batch = loader.next_batch().unwrap();
        // The cursor moves into a new epoch only when its first window is read.
        let epoch = *epoch.get_or_insert(loader.state().epoch);
        windows.push((batch.inputs[0] / 1_000_000, batch.inputs[0] % 1_000_000));
        assert_eq!(batch.inputs.len(), t);
        let state = loader.state();
        let mut probe = Loader::resume(numbered_shards(&LENS), *loader.config(), state).unwrap();
        probe.next_batch().unwrap();
        if probe.state().epoch != epoch {
            return windows;
        }
    }
}

#[test]
fn an_epoch_reads_each_region_once_and_epochs_shift_the_grid() {
    let t = 64;
    let mut loader = Loader::new(numbered_shards(&LENS), cfg(1, t, 9)).unwrap();
    let mut phases = Vec::new();
    for _ in 0..3 {
        let windows = epoch_windows(&mut loader, t);
        // Windows per shard: one fewer than fit whole, unless only one fits.
        let expected: usize = LENS
            .iter()
            .map(|&len| {
                let full = (len - 1) / t;
                if full >= 2 {
                    full - 1
                } else {
                    full
                }
            })
            .sum();
        assert_eq!(windows.len(), expected);
        let distinct: HashSet<_> = windows.iter().collect();
        assert_eq!(distinct.len(), windows.len());
        for s in 0..LENS.len() as u32 {
            let mut starts: Vec<u32> = windows.iter().filter(|w| w.0 == s).map(|w| w.1).collect();
            starts.sort();
            // Non-overlapping, on one grid of step T.
            for pair in starts.windows(2) {
                assert_eq!((pair[1] - pair[0]) % t as u32, 0);
            }
            if s == 0 {
                phases.push(starts[0] % t as u32);
            }
        }
    }
    assert!(
        phases.iter().collect::<HashSet<_>>().len() > 1,
        "phases {phases:?}"
    );
}

#[test]
fn ranks_partition_the_global_batch() {
    let (b, world) = (2, 3);
    let single = LoaderConfig::new(b * world, 16, 5, u32::MAX);
    let mut whole = Loader::new(numbered_shards(&LENS), single).unwrap();
    let mut ranks: Vec<Loader> = (0..world)
        .map(|rank| {
            let config = LoaderConfig {
                rank,
                world,
                ..cfg(b, 16, 5)
            };
            Loader::new(numbered_shards(&LENS), config).unwrap()
        })
        .collect();
    for _ in 0..30 {
        let global = whole.next_batch().unwrap();
        let parts: Vec<Batch> = ranks.iter_mut().map(|l| l.next_batch().unwrap()).collect();
        let inputs: Vec<u32> = parts.iter().flat_map(|p| p.inputs.clone()).collect();
        let targets: Vec<u32> = parts.iter().flat_map(|p| p.targets.clone()).collect();
        assert_eq!(inputs, global.inputs);
        assert_eq!(targets, global.targets);
        // Every rank stands at the same place, so one saved state resumes them all.
        assert!(ranks.iter().all(|l| l.state() == whole.state()));
    }
}

#[test]
fn bad_settings_are_errors() {
    let bad = |config: LoaderConfig, lens: &[usize]| {
        matches!(
            Loader::new(numbered_shards(lens), config),
            Err(DataError::Config(_))
        )
    };
    assert!(bad(cfg(0, 16, 0), &LENS));
    assert!(bad(cfg(1, 0, 0), &LENS));
    assert!(bad(
        LoaderConfig {
            rank: 2,
            world: 2,
            ..cfg(1, 16, 0)
        },
        &LENS
    ));
    assert!(bad(cfg(1, 16, 0), &[]));
    assert!(bad(cfg(1, 16, 0), &[16, 3, 0]));
    // T + 1 tokens are enough for one window.
    assert!(!bad(cfg(1, 16, 0), &[17]));
}

#[test]
fn out_of_vocabulary_tokens_are_errors_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train_000000.bin");
    let mut tokens = vec![7u32; 101];
    tokens[42] = 300;
    write_shard(&path, ShardFormat::U16, &tokens).unwrap();
    let shard = Shard::open(&path).unwrap();
    let mut loader = Loader::new(vec![shard], LoaderConfig::new(1, 100, 0, 256)).unwrap();
    let err = loader.next_batch().unwrap_err();
    match &err {
        DataError::OutOfVocab {
            token,
            vocab,
            location,
        } => {
            assert_eq!((*token, *vocab), (300, 256));
            assert!(location.contains("train_000000.bin"), "{err}");
            assert!(
                location.ends_with(&format!("byte {}", 1024 + 2 * 42)),
                "{err}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_fingerprint_tells_other_data_of_the_same_size() {
    let fp = |lens: &[usize], change: Option<(usize, usize)>| {
        let mut shards = numbered_shards(lens);
        if let Some((s, at)) = change {
            let mut tokens = shards[s].to_vec();
            tokens[at] += 1;
            shards[s] = Shard::from_tokens("changed", tokens);
        }
        Loader::new(shards, cfg(2, 8, 0)).unwrap().fingerprint()
    };
    let same = fp(&LENS, None);
    assert_eq!(same.len(), 16);
    assert_eq!(fp(&LENS, None), same, "names do not matter, tokens do");
    assert_ne!(fp(&LENS, Some((2, 300))), same);
    assert_ne!(fp(&[1000, 37, 2048, 513], None), same, "shard order");
    // Large shards are sampled: their edges and runs spread between are read.
    let big = [400_000, 1000];
    let base = fp(&big, None);
    for at in [0, 100, 399_999, 65_536 + 10] {
        assert_ne!(fp(&big, Some((0, at))), base, "token {at}");
    }
}
