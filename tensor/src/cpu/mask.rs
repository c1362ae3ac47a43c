//! The sliding-window (band) mask, applied in place of a mask tensor.
use super::softmax::for_rows;
use super::Real;

/// Query row `r` of a `[rows, cols]` block sits at absolute position `r + cols - rows` (queries
/// are the last `rows` of the keys, as in decoding with a cache); it sees keys
/// `pos - window < s <= pos`.
pub(crate) fn fill_band<T: Real>(
    x: &[T],
    rows: usize,
    cols: usize,
    window: usize,
    value: f64,
) -> Vec<T> {
    let fill = T::of(value);
    for_rows(x.len(), cols, |r, out| {
        let pos = r % rows + cols - rows;
        let row = &x[r * cols..(r + 1) * cols];
        for (s, o) in out.iter_mut().enumerate() {
            let visible = s <= pos && pos - s < window;
            *o = if visible { row[s] } else { fill };
        }
    })
}
