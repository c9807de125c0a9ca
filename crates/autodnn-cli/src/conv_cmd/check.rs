//! Accuracy: how far a result is from the f64 reference, and the tolerance of `--check`.

use autodnn::{ConvProblem, TensorDesc};

/// With `--check`, a result whose max_rel_err exceeds this is reported as failed. Generated
/// data is integer-valued, so exact algorithms give 0; transform-based ones (Winograd, FFT)
/// stay orders of magnitude below this.
pub const CHECK_TOLERANCE: f64 = 1e-3;

/// Largest |y - ref| over the elements of y, relative to max(max |ref|, 1e-30). NaN when y holds
/// a NaN where it should not.
pub fn max_rel_err(p: &ConvProblem, y: &[f32], reference: &[f64]) -> f64 {
    max_rel_err_in(p.y(), y, reference)
}

/// [`max_rel_err`] over the elements of a tensor described by `yd` (y, or x for dx).
pub fn max_rel_err_in(yd: &TensorDesc, y: &[f32], reference: &[f64]) -> f64 {
    let [n, k, oh, ow] = yd.dims();
    let (mut max_diff, mut max_ref) = (0.0f64, 0.0f64);
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = yd.offset(b, c, i, j);
                    let diff = (y[o] as f64 - reference[o]).abs();
                    if diff.is_nan() {
                        return f64::NAN;
                    }
                    max_diff = max_diff.max(diff);
                    max_ref = max_ref.max(reference[o].abs());
                }
            }
        }
    }
    max_diff / max_ref.max(1e-30)
}

/// [`max_rel_err`] over packed buffers (dw, db): every element of `reference`.
pub fn max_rel_err_flat(y: &[f32], reference: &[f64]) -> f64 {
    let (mut max_diff, mut max_ref) = (0.0f64, 0.0f64);
    for (&v, &r) in y.iter().zip(reference) {
        let diff = (v as f64 - r).abs();
        if diff.is_nan() || y.len() < reference.len() {
            return f64::NAN;
        }
        max_diff = max_diff.max(diff);
        max_ref = max_ref.max(r.abs());
    }
    max_diff / max_ref.max(1e-30)
}

#[cfg(test)]
mod tests {
    use super::*;
    use autodnn::{Layout, ProblemSpec};

    #[test]
    fn max_rel_err_is_relative_to_the_largest_reference_value() {
        let p = ProblemSpec::parse("mb1ic1ih3oc1kh1")
            .unwrap()
            .to_problem(Layout::Nchw)
            .unwrap();
        let reference: Vec<f64> = (1..=9).map(f64::from).collect();
        let mut y: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        assert_eq!(max_rel_err(&p, &y, &reference), 0.0);
        y[4] = 3.0; // off by 2; max |ref| is 9
        assert_eq!(max_rel_err(&p, &y, &reference), 2.0 / 9.0);
        y[7] = f32::NAN;
        assert!(max_rel_err(&p, &y, &reference).is_nan());
        let zeros = vec![0.0f64; 9];
        let y = vec![0.0f32; 9];
        assert_eq!(max_rel_err(&p, &y, &zeros), 0.0);
    }
}
