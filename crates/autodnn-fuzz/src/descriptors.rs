//! Descriptors built from arbitrary integers through the public constructors.

use std::collections::HashSet;

use autodnn::{
    ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, Padding,
    ProblemSpec, TensorDesc,
};

use crate::conv_checks::{assert_named_error, check_problem, handle};
use crate::input::Bytes;

/// Tensors this small have every offset enumerated.
const ENUMERATE_MAX: usize = 4096;

pub(crate) fn dtype(b: &mut Bytes<'_>) -> DataType {
    // Mostly f32: the others only have descriptors.
    match b.below(8) {
        0 => DataType::F16,
        1 => DataType::Bf16,
        _ => DataType::F32,
    }
}

pub(crate) fn dims(b: &mut Bytes<'_>, small: usize) -> [usize; 4] {
    [b.size(small), b.size(small), b.size(small), b.size(small)]
}

/// A tensor: packed in a layout, or with explicit strides (packed ones with gaps, or raw).
pub(crate) fn tensor(
    b: &mut Bytes<'_>,
    dt: DataType,
    d: [usize; 4],
) -> autodnn::Result<TensorDesc> {
    let layout = b.pick(&[Layout::Nchw, Layout::Nhwc]);
    match b.below(4) {
        0 | 1 => TensorDesc::new(dt, layout, d),
        2 => {
            // Packed with a gap after each row (or pixel).
            let gap = b.below(4);
            let [_, c, h, w] = d;
            let s = match layout {
                Layout::Nchw => {
                    let sh = w.saturating_add(gap);
                    let sc = sh.saturating_mul(h).saturating_add(gap);
                    [sc.saturating_mul(c), sc, sh, 1]
                }
                Layout::Nhwc => {
                    let sw = c.saturating_add(gap);
                    let sh = sw.saturating_mul(w).saturating_add(gap);
                    [sh.saturating_mul(h), 1, sh, sw]
                }
            };
            TensorDesc::with_strides(dt, d, s)
        }
        _ => {
            let s = [b.size(64), b.size(64), b.size(64), b.size(64)];
            TensorDesc::with_strides(dt, d, s)
        }
    }
}

/// What a tensor that exists promises: its span covers every element, no two elements share
/// an offset, its byte size fits in `isize`, and its layout is the one its strides describe.
pub(crate) fn tensor_invariants(t: &TensorDesc) {
    let dims = t.dims();
    let strides = t.strides();
    let last: usize = (0..4).map(|i| (dims[i] - 1) * strides[i]).sum();
    assert_eq!(t.span(), last + 1, "span of {t:?}");
    assert!(t.elements() <= t.span());
    assert!(t
        .span()
        .checked_mul(t.dtype().size())
        .is_some_and(|b| b <= isize::MAX as usize));
    if let Some(l) = t.layout() {
        assert_eq!(
            TensorDesc::new(t.dtype(), l, dims).map(|p| p.strides()),
            Ok(strides)
        );
        assert_eq!(t.span(), t.elements(), "a packed tensor spans its elements");
    }
    if t.elements() <= ENUMERATE_MAX {
        let mut seen = HashSet::new();
        let [n, c, h, w] = dims;
        for a in 0..n {
            for b in 0..c {
                for i in 0..h {
                    for j in 0..w {
                        let o = t.offset(a, b, i, j);
                        assert!(o < t.span(), "offset {o} past the span of {t:?}");
                        assert!(seen.insert(o), "two elements at offset {o} in {t:?}");
                    }
                }
            }
        }
    }
}

fn filter_invariants(f: &FilterDesc) {
    let [k, c, r, s] = f.dims();
    assert!(f
        .elements()
        .checked_mul(f.dtype().size())
        .is_some_and(|b| b <= isize::MAX as usize));
    assert_eq!(
        f.offset(k - 1, c - 1, r - 1, s - 1) + 1,
        f.elements(),
        "a packed filter's last element ends it"
    );
    if f.elements() <= ENUMERATE_MAX {
        let mut seen = vec![false; f.elements()];
        for a in 0..k {
            for b in 0..c {
                for i in 0..r {
                    for j in 0..s {
                        let o = f.offset(a, b, i, j);
                        assert!(!seen[o], "two filter elements at offset {o}");
                        seen[o] = true;
                    }
                }
            }
        }
        assert!(
            seen.iter().all(|&v| v),
            "a packed filter covers its elements"
        );
    }
}

/// The output size the definition gives, in exact arithmetic.
fn expected_out(i: usize, lo: i64, hi: i64, k: usize, s: usize, d: usize) -> Option<usize> {
    let ek = (k as i128 - 1) * d as i128 + 1;
    let padded = i as i128 + lo as i128 + hi as i128;
    if padded < ek {
        return None;
    }
    usize::try_from((padded - ek) / s as i128 + 1).ok()
}

/// Builds a tensor, a filter, a convolution and a problem from `data`.
pub fn descriptors(data: &[u8]) {
    let mut b = Bytes::new(data);
    let seed = b.u64();
    let h = handle(b.u8().into());
    let dt = dtype(&mut b);
    // The problem's shape: groups, channels per group, image, kernel.
    let g = b.size(4);
    let cg = b.size(6);
    let kg = b.size(6);
    let n = b.size(3);
    let ih = b.size(24);
    let iw = b.size(24);
    let r = b.size(5);
    let s = b.size(5);
    let x = match tensor(&mut b, dt, [n, g.saturating_mul(cg), ih, iw]) {
        Ok(x) => {
            tensor_invariants(&x);
            x
        }
        Err(e) => return assert_named_error(&e),
    };
    let wl = b.pick(&[FilterLayout::Kcrs, FilterLayout::Krsc]);
    // Mostly a filter that fits the tensor; sometimes other channels or another type.
    let wdt = if b.below(16) == 0 { dtype(&mut b) } else { dt };
    let wc = if b.below(16) == 0 { b.size(8) } else { cg };
    let w = match FilterDesc::new(wdt, wl, [g.saturating_mul(kg), wc, r, s]) {
        Ok(w) => {
            filter_invariants(&w);
            w
        }
        Err(e) => return assert_named_error(&e),
    };
    let pad = Padding {
        top: b.signed(6),
        bottom: b.signed(6),
        left: b.signed(6),
        right: b.signed(6),
    };
    let stride = [b.size(3), b.size(3)];
    let dilation = [b.size(3), b.size(3)];
    let groups = if b.below(16) == 0 { b.size(8) } else { g };
    let mode = b.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
    let conv = match ConvDesc::new(pad, stride, dilation, groups, mode) {
        Ok(c) => c,
        Err(e) => return assert_named_error(&e),
    };
    assert_eq!(conv.padding(), pad);
    assert_eq!(
        (conv.stride(), conv.dilation(), conv.groups()),
        (stride, dilation, groups)
    );
    let dims = match ConvProblem::output_dims(&x, &w, &conv) {
        Ok(d) => d,
        Err(e) => return assert_named_error(&e),
    };
    let oh = expected_out(ih, pad.top, pad.bottom, r, stride[0], dilation[0]);
    let ow = expected_out(iw, pad.left, pad.right, s, stride[1], dilation[1]);
    assert_eq!(Some(dims[2]), oh, "output height");
    assert_eq!(Some(dims[3]), ow, "output width");
    assert_eq!([dims[0], dims[1]], [n, w.k()]);
    // y: packed, or strided, or (rarely) with wrong dimensions or type, which must be refused.
    let wrong = b.below(16) == 0;
    let ydims = if wrong { self::dims(&mut b, 8) } else { dims };
    let ydt = if b.below(16) == 0 { dtype(&mut b) } else { dt };
    let y = match tensor(&mut b, ydt, ydims) {
        Ok(y) => {
            tensor_invariants(&y);
            y
        }
        Err(e) => return assert_named_error(&e),
    };
    let p = match ConvProblem::forward(x, w, conv, y) {
        Ok(p) => p,
        Err(e) => {
            assert!(ydims != dims || ydt != dt, "a fitting y was refused: {e}");
            return assert_named_error(&e);
        }
    };
    assert_eq!(p.y().dims(), dims);
    // A batch change keeps the rest.
    let nb = b.size(4);
    match p.with_batch(nb) {
        Ok(q) => {
            assert_eq!(q.x().n(), nb);
            assert_eq!(q.y().n(), nb);
            assert_eq!((q.w(), q.conv()), (p.w(), p.conv()));
            tensor_invariants(q.x());
            tensor_invariants(q.y());
        }
        Err(e) => assert_named_error(&e),
    }
    // The benchdnn description of a problem re-parses to the same shapes when it parses.
    let spec = ProblemSpec::from_problem(&p, "");
    if let Ok(again) = ProblemSpec::parse(&spec.to_string()) {
        assert_eq!(again, spec);
        if let Ok(q) = again.to_problem(Layout::Nchw) {
            assert_eq!(
                (q.x().dims(), q.w().dims(), q.y().dims()),
                (p.x().dims(), p.w().dims(), p.y().dims())
            );
        }
    }
    check_problem(&p, h, seed);
}
