//! Generation: greedy decoding with the carried states gives, at every step, the argmax of one
//! pass over the whole sequence, for every mixer; sampling is reproducible from its seed and
//! top-k 1 is greedy; the decoding state stays the same size step after step for the bounded
//! mixers (S, M, G, R) and grows only for full attention; the printed text is valid UTF-8
//! whatever bytes the tokens stand for; a greedy step reads back token ids, not logits.
mod common;

use common::micro;
use swax_data::Rng;
use swax_hybrid::eval::run::{all_logits, OneShot};
use swax_hybrid::generate::{generate, generate_profiled, Decoder, Request, Sampling, Utf8Stream};
use swax_hybrid::model::{Model, SequenceState};
use swax_nn::layers::pieces::Decode;
use swax_tensor::{DType, Device};

fn model(pattern: &str, seed: u64) -> Model {
    let cfg = micro(pattern, 1, &["model.n_layers=2"]);
    Model::new(&cfg.model, seed, Device::Cpu).unwrap()
}

fn request(sampling: Sampling, batch: usize) -> Request {
    Request {
        max_tokens: 24,
        sampling,
        batch,
        window: 8,
        piece: 4,
        stop: None,
    }
}

const PROMPT: [u32; 10] = [255, 72, 101, 108, 108, 111, 32, 119, 111, 114];

#[test]
fn greedy_generation_is_the_argmax_of_one_pass_for_every_mixer() {
    for pattern in ["S", "F", "M", "G", "R", "MS"] {
        let m = model(pattern, 3);
        let req = request(Sampling::GREEDY, 1);
        let out = generate(&m, &PROMPT, &req, DType::F32, Device::Cpu, &mut |_, _| {}).unwrap();
        let tokens: Vec<u32> = PROMPT.iter().chain(&out[0]).copied().collect();
        assert_eq!(out[0].len(), 24);
        let one = OneShot {
            model: &m,
            window: req.window,
            dtype: DType::F32,
            device: Device::Cpu,
        };
        let logits = all_logits(&one, &tokens[..tokens.len() - 1]).unwrap();
        let v = logits.dims()[1];
        let rows = logits.to_vec::<f32>().unwrap();
        for (j, &t) in out[0].iter().enumerate() {
            let row = &rows[(PROMPT.len() - 1 + j) * v..(PROMPT.len() + j) * v];
            let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // Equal up to the rounding that separates the two paths: a near-tie may go either
            // way, a real difference may not.
            assert!(
                row[t as usize] >= best - 1e-5 * best.abs().max(1.0),
                "{pattern}: step {j} chose {t} ({}), the full pass's best is {best}",
                row[t as usize]
            );
        }
    }
}

#[test]
fn sampling_is_reproducible_and_top_k_1_is_greedy() {
    let m = model("MS", 4);
    let run = |s: Sampling, batch| {
        generate(
            &m,
            &PROMPT,
            &request(s, batch),
            DType::F32,
            Device::Cpu,
            &mut |_, _| {},
        )
        .unwrap()
    };
    let hot = Sampling {
        temperature: 1.5,
        top_k: 0,
        top_p: 1.0,
        seed: 9,
    };
    let a = run(hot, 3);
    assert_eq!(a, run(hot, 3), "the same seed gives the same text");
    assert_ne!(a, run(Sampling { seed: 10, ..hot }, 3));
    assert_ne!(a[0], a[1], "each row draws from its own stream");
    let greedy = run(Sampling::GREEDY, 1);
    assert_eq!(run(Sampling { top_k: 1, ..hot }, 1), greedy);
    // Rows of a greedy batch are the same text.
    let batch = run(Sampling::GREEDY, 2);
    assert_eq!(batch[0], greedy[0]);
    assert_eq!(batch[1], greedy[0]);
}

#[test]
fn the_nucleus_and_the_top_k_bound_what_is_drawn() {
    let logits = [4.0f32, 3.9, 0.0, -1.0, -2.0];
    let mut rng = Rng::new(1);
    let s = |top_k, top_p| Sampling {
        temperature: 1.0,
        top_k,
        top_p,
        seed: 0,
    };
    let draws = |s: Sampling, rng: &mut Rng| -> Vec<u32> {
        (0..2000).map(|_| s.pick(&logits, rng)).collect()
    };
    let all = draws(s(0, 1.0), &mut rng);
    assert!((0..5).all(|t| all.contains(&t)), "every token can be drawn");
    let two = draws(s(2, 1.0), &mut rng);
    assert!(two.iter().all(|&t| t < 2) && two.contains(&0) && two.contains(&1));
    // The two best hold 0.96 of the mass: p 0.5 keeps the best alone, 0.9 both.
    assert!(draws(s(0, 0.5), &mut rng).iter().all(|&t| t == 0));
    let nucleus = draws(s(0, 0.9), &mut rng);
    assert!(nucleus.iter().all(|&t| t < 2) && nucleus.contains(&1));
    assert!(Sampling {
        temperature: -1.0,
        ..s(0, 1.0)
    }
    .check()
    .is_err());
    assert!(s(0, 0.0).check().is_err());
}

/// The single-step kernels (attention's cache of rotated keys, RAttention's linear state, the
/// recurrent steps) give the logits of reading each token as a piece of one, for every mixer and
/// a pair of them, step after step far past the window (8) and the convolution's taps, on two
/// rows; every attention layer (S, F, R) read its steps from its cache.
#[test]
fn decoding_steps_give_the_logits_of_one_token_pieces() {
    for pattern in ["S", "F", "M", "G", "R", "MS", "GF"] {
        let m = model(pattern, 7);
        let mut rng = Rng::new(11);
        let open = |decode| {
            let mut dec = Decoder::new(&m, 8, DType::F32, Device::Cpu, 2)
                .unwrap()
                .with_decode(decode);
            dec.prefill(&PROMPT, 4).unwrap();
            dec
        };
        let (mut steps, mut pieces) = (open(Decode::Steps), open(Decode::Recompute));
        for step in 0..40 {
            let next = [rng.below(256) as u32, rng.below(256) as u32];
            let got = steps.read(&next).unwrap().to_vec::<f32>().unwrap();
            let want = pieces.read(&next).unwrap().to_vec::<f32>().unwrap();
            let scale = want.iter().fold(0f32, |a, b| a.max(b.abs()));
            let worst = got
                .iter()
                .zip(&want)
                .fold(0f32, |a, (g, w)| a.max((g - w).abs()));
            assert!(
                worst <= 1e-4 * scale,
                "{pattern}: step {step}: worst logit off by {worst:e} of {scale:e}"
            );
        }
        let layers = &steps.state().layers;
        for (l, kind) in layers.iter().zip(pattern.chars().cycle()) {
            assert_eq!(
                l.kv.is_some(),
                "SFR".contains(kind),
                "{pattern}: {kind} stepped"
            );
        }
    }
}

/// A step picks on the device, greedy or sampled, and reads back its B token ids, not the
/// B × V logits. Every step is counted, and the CPU makes no swax-cuda counts.
#[test]
fn a_step_reads_back_token_ids_only() {
    let m = model("MS", 4);
    let batch = 3;
    let hot = Sampling {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        seed: 2,
    };
    for sampling in [Sampling::GREEDY, hot] {
        let req = request(sampling, batch);
        let (out, p) =
            generate_profiled(&m, &PROMPT, &req, DType::F32, Device::Cpu, &mut |_, _| {}).unwrap();
        assert_eq!(out[0].len(), 24);
        assert_eq!(p.steps, 23, "every step after the prompt's is counted");
        assert_eq!(p.read_back_bytes, p.steps * batch as u64 * 4);
        assert_eq!(p.gpu, Default::default());
        assert!(p.backend_calls > 0 && p.seconds > 0.0, "{p:?}");
    }
}

/// Values held by the layers' decoding states.
fn held(state: &SequenceState) -> usize {
    state
        .layers
        .iter()
        .map(|l| {
            let n = |t: &Option<swax_tensor::Tensor>| t.as_ref().map_or(0, |t| t.numel());
            let m = l
                .mlstm
                .as_ref()
                .map_or(0, |s| s.c.numel() + s.n.numel() + s.m.numel());
            let kv = l.kv.as_ref().map_or(0, |c| {
                c.k.numel() + c.v.numel() + c.raw.as_ref().map_or(0, |r| r.numel())
            });
            n(&l.kv_tail) + n(&l.linear) + n(&l.conv_tail) + n(&l.delta) + m + kv
        })
        .sum()
}

#[test]
fn the_decoding_state_is_bounded_except_for_full_attention() {
    for pattern in ["S", "M", "G", "R", "F"] {
        let m = model(pattern, 5);
        let mut dec = Decoder::new(&m, 8, DType::F32, Device::Cpu, 2).unwrap();
        dec.prefill(&PROMPT, 4).unwrap();
        let mut sizes = Vec::new();
        for step in 0..40 {
            dec.read(&[(step % 200) as u32 + 1, 7]).unwrap();
            if step == 9 || step == 39 {
                sizes.push(held(dec.state()));
            }
        }
        assert_eq!(dec.position(), PROMPT.len() + 40);
        match pattern {
            "F" => assert!(sizes[1] > sizes[0], "{pattern}: {sizes:?}"),
            _ => assert_eq!(sizes[0], sizes[1], "{pattern}"),
        }
    }
}

/// Characters split over tokens print whole once complete; bytes that are not UTF-8 (a byte
/// model trained on MQAR's ids emits any byte) print as U+FFFD and are counted.
#[test]
fn streamed_bytes_print_as_valid_text() {
    let mut text = Utf8Stream::default();
    let euro = "€".as_bytes();
    assert_eq!(text.push(b"a"), "a");
    assert_eq!(
        text.push(&euro[..1]),
        "",
        "held until the character is whole"
    );
    assert_eq!(text.push(&euro[1..]), "€");
    assert_eq!(text.push(&[0xff, b'b']), "\u{fffd}b");
    assert_eq!(
        text.push(&[0xe2, 0x82, b'c']),
        "\u{fffd}c",
        "a character cut short"
    );
    assert_eq!(text.push(&euro[..2]), "");
    assert_eq!(text.finish(), "\u{fffd}", "cut short at the end");
    assert_eq!(text.replaced(), 5);
}
