//! The draw of a sampled token (`swax_nn::sampling`), its CPU form: the random u32 maps onto the
//! kept tokens in proportion to their softmax weights, ties rank the lower index first, the
//! top-k and top-p cuts keep what they say, and the op checks its operands.
use swax_nn::sampling::{pick_row, sample, Cuts};
use swax_tensor::{DType, Device, Tensor};

fn cuts(temperature: f32, top_k: usize, top_p: f32) -> Cuts {
    Cuts {
        temperature,
        top_k,
        top_p,
    }
}

/// How often each token is drawn for r on an even grid of n values over the u32s.
fn counts(logits: &[f32], c: &Cuts, n: u64) -> Vec<u64> {
    let mut counts = vec![0; logits.len()];
    for i in 0..n {
        let r = ((i << 32) / n) as u32;
        counts[pick_row(logits, r, c) as usize] += 1;
    }
    counts
}

#[test]
fn the_draw_follows_the_softmax_at_the_temperature() {
    let logits = [0.5f32, 2.0, -1.0, 1.0];
    let n = 1 << 16;
    for t in [0.5f32, 1.0, 3.0] {
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| (f64::from(l - 2.0) / f64::from(t)).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let got = counts(&logits, &cuts(t, 0, 1.0), n);
        for (i, (&g, &w)) in got.iter().zip(&w).enumerate() {
            let want = w / total * n as f64;
            // An exact inverse of the cumulative weight: off by the grid's step at each end.
            assert!(
                (g as f64 - want).abs() <= 2.0,
                "t {t}: token {i} drawn {g} times, want {want:.1}"
            );
        }
    }
}

#[test]
fn ties_rank_the_lower_index_first() {
    let logits = [1.0f32, 3.0, 3.0, 3.0, 0.0];
    let one = counts(&logits, &cuts(1.0, 1, 1.0), 64);
    assert_eq!(one, [0, 64, 0, 0, 0]);
    let two = counts(&logits, &cuts(1.0, 2, 1.0), 64);
    assert_eq!(two, [0, 32, 32, 0, 0]);
}

#[test]
fn the_cuts_keep_what_they_say() {
    let logits = [4.0f32, 3.9, 0.0, -1.0, -2.0];
    let drawn =
        |c: Cuts| -> Vec<bool> { counts(&logits, &c, 4096).iter().map(|&n| n > 0).collect() };
    assert_eq!(
        drawn(cuts(1.0, 0, 1.0)),
        [true; 5],
        "every token can be drawn"
    );
    assert_eq!(drawn(cuts(1.0, 3, 1.0)), [true, true, true, false, false]);
    // The two best hold 0.96 of the weight: p 0.5 keeps the best alone, 0.9 both.
    assert_eq!(drawn(cuts(1.0, 0, 0.5)), [true, false, false, false, false]);
    assert_eq!(drawn(cuts(1.0, 0, 0.9)), [true, true, false, false, false]);
    // Both cuts: the nucleus is taken of the top k's weight.
    assert_eq!(drawn(cuts(1.0, 3, 0.999)), [true, true, true, false, false]);
    assert_eq!(drawn(cuts(1.0, 3, 0.99)), [true, true, false, false, false]);
    // r's two ends land on the first and the last kept token.
    let c = cuts(1.0, 3, 1.0);
    assert_eq!(
        (pick_row(&logits, 0, &c), pick_row(&logits, u32::MAX, &c)),
        (0, 2)
    );
}

#[test]
fn the_op_draws_each_row_as_the_cpu_form_and_checks_its_operands() {
    let (b, v) = (3, 37);
    let logits = Tensor::randn(vec![b, v], 2.0, 5, DType::F32, Device::Cpu).unwrap();
    let r = Tensor::from_vec(vec![0u32, 1 << 31, u32::MAX], vec![b], Device::Cpu).unwrap();
    let c = cuts(0.8, 10, 0.9);
    for dtype in [DType::F32, DType::BF16] {
        let x = logits.to_dtype(dtype).unwrap();
        let rows = x.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<u32> = rows
            .chunks(v)
            .zip([0u32, 1 << 31, u32::MAX])
            .map(|(row, r)| pick_row(row, r, &c))
            .collect();
        assert_eq!(
            sample(&x, &r, &c).unwrap().to_vec::<u32>().unwrap(),
            want,
            "{dtype}"
        );
    }
    let err = |x: &Tensor, r: &Tensor, c: Cuts| sample(x, r, &c).unwrap_err().to_string();
    assert!(err(&logits.reshape(vec![b * v]).unwrap(), &r, c).contains("[B, V]"));
    let short = Tensor::from_vec(vec![0u32; 2], vec![2], Device::Cpu).unwrap();
    assert!(err(&logits, &short, c).contains("one u32 per row"));
    assert!(err(&logits, &r, cuts(0.0, 0, 1.0)).contains("temperature > 0"));
    assert!(err(&logits, &r, cuts(1.0, 0, 0.0)).contains("top_p in (0, 1]"));
}
