//! The tape's own behaviour: what it records, how gradients accumulate, what it refuses.
use swax_autograd::gradcheck::{check, Tolerance};
use swax_autograd::Tape;
use swax_tensor::{DType, Device, Tensor};

fn t(values: &[f64], dims: &[usize]) -> Tensor {
    Tensor::from_f64s(values, dims.to_vec(), DType::F64, Device::Cpu).unwrap()
}

#[test]
fn nothing_is_recorded_without_a_watched_input() {
    let tape = Tape::new();
    let x = t(&[1.0, 2.0], &[2]);
    let y = tape.exp(&x).unwrap();
    let z = tape.sum_all(&y).unwrap();
    assert!(tape.is_empty());
    assert!(
        tape.backward(&z).is_err(),
        "a loss that depends on nothing watched has no gradient"
    );
}

#[test]
fn a_tensor_used_twice_accumulates_both_gradients() {
    let tape = Tape::new();
    let x = t(&[1.5, -2.0, 0.5], &[3]);
    tape.watch(&x);
    // f = sum(x*x + 3x): df/dx = 2x + 3.
    let sq = tape.mul(&x, &x).unwrap();
    let lin = tape.scale(&x, 3.0).unwrap();
    let loss = tape.sum_all(&tape.add(&sq, &lin).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    assert_eq!(
        grads.get(&x).unwrap().to_f64_vec().unwrap(),
        vec![6.0, -1.0, 4.0]
    );
}

#[test]
fn backward_returns_leaves_only_and_consumes_the_nodes() {
    let tape = Tape::new();
    let (x, w) = (t(&[1.0, 2.0], &[1, 2]), t(&[3.0, 4.0], &[2, 1]));
    tape.watch(&x);
    tape.watch(&w);
    let h = tape.matmul(&x, &w).unwrap();
    let loss = tape.sum_all(&h).unwrap();
    assert_eq!(tape.len(), 3);
    let grads = tape.backward(&loss).unwrap();
    assert!(
        tape.is_empty(),
        "every node (and what it saved) is dropped by backward"
    );
    assert_eq!(grads.len(), 2);
    assert!(grads.get(&h).is_none());
    assert_eq!(grads.get(&x).unwrap().to_f64_vec().unwrap(), vec![3.0, 4.0]);
    assert_eq!(grads.get(&w).unwrap().to_f64_vec().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn untracked_inputs_get_no_gradient_work() {
    let tape = Tape::new();
    let (x, w) = (t(&[1.0, 2.0], &[1, 2]), t(&[3.0, 4.0], &[2, 1]));
    tape.watch(&w);
    let loss = tape.sum_all(&tape.matmul(&x, &w).unwrap()).unwrap();
    let grads = tape.backward(&loss).unwrap();
    assert!(grads.get(&x).is_none());
    assert!(grads.get(&w).is_some());
}

#[test]
fn backward_of_a_non_scalar_is_an_error_naming_the_shape() {
    let tape = Tape::new();
    let x = t(&[1.0, 2.0], &[2]);
    tape.watch(&x);
    let y = tape.exp(&x).unwrap();
    let err = tape.backward(&y).unwrap_err().to_string();
    assert!(err.contains("scalar") && err.contains("[2]"), "{err}");
}

#[test]
fn backward_from_an_output_gradient_is_the_weighted_sums_backward() {
    let x = t(&[0.5, -1.0, 2.0, 0.25], &[2, 2]);
    let g = t(&[1.0, -2.0, 0.5, 3.0], &[2, 2]);
    let grad_of = |from_output: bool| {
        let tape = Tape::new();
        tape.watch(&x);
        let y = tape.matmul(&tape.exp(&x).unwrap(), &x).unwrap();
        let grads = match from_output {
            true => tape.backward_from(&y, &g).unwrap(),
            false => {
                let loss = tape.sum_all(&tape.mul(&y, &g).unwrap()).unwrap();
                tape.backward(&loss).unwrap()
            }
        };
        grads.get(&x).unwrap().to_f64_vec().unwrap()
    };
    let (from_output, from_loss) = (grad_of(true), grad_of(false));
    assert_eq!((from_output.len(), from_loss.len()), (4, 4));
    for (a, b) in from_output.iter().zip(&from_loss) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
    }

    let tape = Tape::new();
    tape.watch(&x);
    let y = tape.exp(&x).unwrap();
    let err = tape
        .backward_from(&y, &t(&[1.0, 2.0], &[2]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[2]") && err.contains("[2, 2]"), "{err}");
}

#[test]
fn a_backward_returning_a_wrong_shape_is_caught() {
    let tape = Tape::new();
    let x = t(&[1.0, 2.0], &[2]);
    tape.watch(&x);
    let y = x.exp().unwrap();
    let y = tape.record("bad", &[&x], y, |_, _| {
        Ok(vec![Some(Tensor::zeros([3], DType::F64, Device::Cpu)?)])
    });
    let loss = tape.sum_all(&y).unwrap();
    let err = tape.backward(&loss).unwrap_err().to_string();
    assert!(err.contains("bad") && err.contains("[3]"), "{err}");
}

/// Two layers whose weights are cast first, as `Weights::training` does in bf16: each weight's
/// gradient is reported once, final (equal to what `backward` returns), the later layer's
/// first, as soon as its last reader has run: a trainer can send it while the rest runs.
#[test]
fn backward_with_reports_each_leaf_when_its_gradient_is_final() {
    let tape = Tape::new();
    let (w1, w2) = (t(&[0.5, -1.0], &[2]), t(&[2.0, 3.0], &[2]));
    let x = t(&[1.0, 2.0], &[2]);
    tape.watch(&w1);
    tape.watch(&w2);
    // Cast in the other order than used: in the recorded order w1's cast would run first.
    let c2 = tape.to_dtype(&w2, DType::F32).unwrap();
    let c1 = tape.to_dtype(&w1, DType::F32).unwrap();
    let h = tape.mul(&x.to_dtype(DType::F32).unwrap(), &c1).unwrap();
    let h = tape.exp(&h).unwrap();
    let y = tape.mul(&h, &c2).unwrap();
    let loss = tape.sum_all(&y).unwrap();
    let mut seen = Vec::new();
    let grads = tape
        .backward_with(&loss, &loss.ones_like().unwrap(), &mut |id, g| {
            seen.push((id, g.to_f64_vec()?));
            Ok(())
        })
        .unwrap();
    let order: Vec<_> = seen.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        order,
        vec![w2.id(), w1.id()],
        "w2 is final first, each once"
    );
    for (w, (_, g)) in [&w2, &w1].into_iter().zip(&seen) {
        assert_eq!(&grads.get(w).unwrap().to_f64_vec().unwrap(), g);
    }
    let plain = Tape::new();
    plain.watch(&w1);
    let h = plain.exp(&plain.mul(&x, &w1).unwrap()).unwrap();
    let want = plain
        .backward(&plain.sum_all(&plain.mul(&h, &w2).unwrap()).unwrap())
        .unwrap();
    let (got, want) = (&seen[1].1, want.get(&w1).unwrap().to_f64_vec().unwrap());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{got:?} against {want:?}");
    }
}

/// `[a·b, exp(a)]` as one node with two outputs, its backward written by hand.
fn two_outputs(tape: &Tape, a: &Tensor, b: &Tensor) -> [Tensor; 2] {
    let (prod, e) = (a.mul(b).unwrap(), a.exp().unwrap());
    let (sa, sb, se) = (a.clone(), b.clone(), e.clone());
    let outs = tape.record_many("two_outputs", &[a, b], vec![prod, e], move |d, _| {
        let da = d[0].mul(&sb)?.add(&d[1].mul(&se)?)?;
        Ok(vec![Some(da), Some(d[0].mul(&sa)?)])
    });
    outs.try_into().unwrap()
}

#[test]
fn a_node_with_two_outputs_gets_the_gradient_of_each() {
    let (a, b) = (t(&[0.5, -1.0, 2.0], &[3]), t(&[1.5, 0.25, -2.0], &[3]));
    let both = |tape: &Tape, x: &[Tensor]| {
        let [prod, e] = two_outputs(tape, &x[0], &x[1]);
        tape.add(&prod, &tape.scale(&e, 3.0)?)
    };
    check(both, &[a.clone(), b.clone()], Tolerance::default(), 1).unwrap();
    // One output unused: its gradient is zeros, and the other's still arrives.
    for pick in [0, 1] {
        let one = |tape: &Tape, x: &[Tensor]| {
            let [prod, e] = two_outputs(tape, &x[0], &x[1]);
            Ok([prod, e][pick].clone())
        };
        let tape = Tape::new();
        tape.watch(&a);
        tape.watch(&b);
        let y = one(&tape, &[a.clone(), b.clone()]).unwrap();
        let grads = tape.backward(&tape.sum_all(&y).unwrap()).unwrap();
        let want_db = [vec![0.5, -1.0, 2.0], vec![0.0; 3]][pick].clone();
        assert_eq!(grads.get(&b).unwrap().to_f64_vec().unwrap(), want_db);
        check(one, &[a.clone(), b.clone()], Tolerance::default(), 2).unwrap();
    }
}

#[test]
fn an_op_keeps_an_operand_only_for_a_tracked_input() {
    // mul and matmul keep each operand for the other's gradient only: with b untracked when
    // the op ran, a is not kept, and watching b afterwards is an error, not a wrong gradient.
    type Op = fn(&Tape, &Tensor, &Tensor) -> swax_tensor::Result<Tensor>;
    let ops: [Op; 3] = [
        |tape, a, b| tape.mul(a, b),
        |tape, a, b| tape.div(a, b),
        |tape, a, b| tape.matmul(a, b),
    ];
    for op in ops {
        let (a, b) = (
            t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]),
            t(&[0.5, 1.0, 2.0, 4.0], &[2, 2]),
        );
        let tape = Tape::new();
        tape.watch(&a);
        let y = op(&tape, &a, &b).unwrap();
        tape.watch(&b);
        let loss = tape.sum_all(&y).unwrap();
        let err = tape.backward(&loss).unwrap_err().to_string();
        assert!(err.contains("watched after"), "{err}");
    }
}
