//! Differentiable ops: each computes its forward with `swax_tensor` and records a hand-written
//! backward on the tape. The files mirror `swax_tensor`'s `ops/`.
mod conv;
mod elementwise;
mod index;
mod layout;
mod loss;
mod mask;
mod matmul;
mod norm;
mod reduce;
mod rope;
mod softmax;

/// The gradient list of a backward: `Some(g)` for inputs that need one, computing `g` lazily so
/// nothing is spent on inputs the tape does not track.
pub(crate) fn grads<const N: usize>(
    needs: &[bool],
    makers: [&dyn Fn() -> swax_tensor::Result<swax_tensor::Tensor>; N],
) -> swax_tensor::Result<Vec<Option<swax_tensor::Tensor>>> {
    makers
        .iter()
        .zip(needs)
        .map(|(make, &need)| if need { make().map(Some) } else { Ok(None) })
        .collect()
}

/// A tensor a backward kept only for the gradient of an input that was tracked when the op was
/// recorded; missing when that input was watched only afterwards.
pub(crate) fn saved(
    kept: &Option<swax_tensor::Tensor>,
) -> swax_tensor::Result<&swax_tensor::Tensor> {
    kept.as_ref().ok_or_else(|| swax_tensor::Error::Invalid {
        op: "backward",
        msg: "a tensor was watched after an op had used it: its gradient was not provided for"
            .into(),
    })
}
