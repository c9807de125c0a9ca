//! Descriptor validation: every bad descriptor gives a typed error naming its field; good
//! ones (padded strides, views) are accepted with the right sizes.

use autodnn::{
    ConvDesc, ConvMode, ConvProblem, DataType, Error, FilterDesc, FilterLayout, Handle, Layout,
    Padding, Result, TensorDesc,
};

const F32: DataType = DataType::F32;
const CC: ConvMode = ConvMode::CrossCorrelation;

/// What an error must be.
#[derive(Debug)]
enum Want {
    Bad(&'static str),
    Overflow(&'static str),
    Unsupported,
    TooSmall(&'static str),
}

fn check<T: std::fmt::Debug>(what: &str, r: Result<T>, want: Want) {
    match (&r, &want) {
        (Err(Error::BadParam { field, .. }), Want::Bad(f)) if field == f => {}
        (Err(Error::Overflow { field, .. }), Want::Overflow(f)) if field.starts_with(f) => {}
        (Err(Error::Unsupported { .. }), Want::Unsupported) => {}
        (Err(Error::BufferTooSmall { field, .. }), Want::TooSmall(f)) if field == f => {}
        _ => panic!("{what}: expected {want:?}, got {r:?}"),
    }
    // Every error is one self-contained line.
    let msg = r.unwrap_err().to_string();
    assert!(!msg.is_empty() && !msg.contains('\n'), "{what}: {msg:?}");
}

fn x(dims: [usize; 4]) -> TensorDesc {
    TensorDesc::new(F32, Layout::Nchw, dims).unwrap()
}
fn w(dims: [usize; 4]) -> FilterDesc {
    FilterDesc::new(F32, FilterLayout::Kcrs, dims).unwrap()
}
fn conv(pad: Padding, stride: [usize; 2], dilation: [usize; 2], groups: usize) -> ConvDesc {
    ConvDesc::new(pad, stride, dilation, groups, CC).unwrap()
}
fn dense() -> ConvDesc {
    ConvDesc::default()
}
fn pad(top: i64, bottom: i64, left: i64, right: i64) -> Padding {
    Padding {
        top,
        bottom,
        left,
        right,
    }
}

#[test]
fn bad_tensors() {
    let m = usize::MAX;
    let cases: Vec<(&str, Result<TensorDesc>, Want)> = vec![
        (
            "zero n",
            TensorDesc::new(F32, Layout::Nchw, [0, 3, 4, 4]),
            Want::Bad("tensor.n"),
        ),
        (
            "zero c",
            TensorDesc::new(F32, Layout::Nhwc, [1, 0, 4, 4]),
            Want::Bad("tensor.c"),
        ),
        (
            "zero h",
            TensorDesc::new(F32, Layout::Nchw, [1, 3, 0, 4]),
            Want::Bad("tensor.h"),
        ),
        (
            "zero w",
            TensorDesc::new(F32, Layout::Nhwc, [1, 3, 4, 0]),
            Want::Bad("tensor.w"),
        ),
        (
            "zero dim, explicit strides",
            TensorDesc::with_strides(F32, [1, 3, 0, 4], [12, 4, 4, 1]),
            Want::Bad("tensor.h"),
        ),
        (
            "zero stride n",
            TensorDesc::with_strides(F32, [2, 3, 4, 5], [0, 20, 5, 1]),
            Want::Bad("tensor.stride_n"),
        ),
        (
            "zero stride w",
            TensorDesc::with_strides(F32, [2, 3, 4, 5], [60, 20, 5, 0]),
            Want::Bad("tensor.stride_w"),
        ),
        (
            "zero stride on an extent-1 dimension",
            TensorDesc::with_strides(F32, [1, 3, 4, 5], [0, 20, 5, 1]),
            Want::Bad("tensor.stride_n"),
        ),
        (
            "rows overlap: h stride 5 < w extent 5*2",
            TensorDesc::with_strides(F32, [1, 3, 4, 5], [60, 20, 5, 2]),
            Want::Bad("tensor.stride_h"),
        ),
        (
            "channels share the row stride",
            TensorDesc::with_strides(F32, [1, 3, 4, 1], [12, 1, 1, 1]),
            Want::Bad("tensor.stride_h"),
        ),
        (
            "channels overlap the image",
            TensorDesc::with_strides(F32, [2, 3, 4, 5], [60, 19, 5, 1]),
            Want::Bad("tensor.stride_c"),
        ),
        (
            "batches overlap",
            TensorDesc::with_strides(F32, [2, 3, 4, 5], [59, 20, 5, 1]),
            Want::Bad("tensor.stride_n"),
        ),
        (
            "NHWC-like, c stride too big for w",
            TensorDesc::with_strides(F32, [1, 8, 4, 4], [128, 1, 32, 4]),
            Want::Bad("tensor.stride_w"),
        ),
        (
            "elements overflow usize",
            TensorDesc::new(F32, Layout::Nchw, [m / 2, 3, 1, 1]),
            Want::Overflow("tensor"),
        ),
        (
            "elements overflow usize, nhwc",
            TensorDesc::new(F32, Layout::Nhwc, [1, m / 2, 3, 1]),
            Want::Overflow("tensor"),
        ),
        (
            "strides overflow",
            TensorDesc::new(F32, Layout::Nchw, [1, 1 << 40, 1 << 40, 1]),
            Want::Overflow("tensor"),
        ),
        (
            "span overflows",
            TensorDesc::with_strides(F32, [2, 1, 1, 1], [m, 1, 1, 1]),
            Want::Overflow("tensor"),
        ),
        (
            "bytes over isize::MAX",
            TensorDesc::new(F32, Layout::Nchw, [1, 1, 1, (isize::MAX as usize) / 2]),
            Want::Overflow("tensor bytes"),
        ),
        (
            "f16 bytes over isize::MAX",
            TensorDesc::new(
                DataType::F16,
                Layout::Nchw,
                [1, 1, 1, (isize::MAX as usize) / 2 + 1],
            ),
            Want::Overflow("tensor bytes"),
        ),
    ];
    for (what, r, want) in cases {
        check(what, r, want);
    }
}

#[test]
fn bad_filters() {
    let m = usize::MAX;
    let cases: Vec<(&str, Result<FilterDesc>, Want)> = vec![
        (
            "zero k",
            FilterDesc::new(F32, FilterLayout::Kcrs, [0, 3, 3, 3]),
            Want::Bad("w.k"),
        ),
        (
            "zero c",
            FilterDesc::new(F32, FilterLayout::Krsc, [8, 0, 3, 3]),
            Want::Bad("w.c"),
        ),
        (
            "zero r",
            FilterDesc::new(F32, FilterLayout::Kcrs, [8, 3, 0, 3]),
            Want::Bad("w.r"),
        ),
        (
            "zero s",
            FilterDesc::new(F32, FilterLayout::Krsc, [8, 3, 3, 0]),
            Want::Bad("w.s"),
        ),
        (
            "elements overflow",
            FilterDesc::new(F32, FilterLayout::Kcrs, [m / 2, 3, 1, 1]),
            Want::Overflow("w"),
        ),
        (
            "bytes overflow",
            FilterDesc::new(
                F32,
                FilterLayout::Krsc,
                [(isize::MAX as usize) / 2, 1, 1, 1],
            ),
            Want::Overflow("w"),
        ),
    ];
    for (what, r, want) in cases {
        check(what, r, want);
    }
}

#[test]
fn bad_convolutions() {
    let p0 = Padding::default();
    let big = 1usize << 31;
    let cases: Vec<(&str, Result<ConvDesc>, Want)> = vec![
        (
            "stride h 0",
            ConvDesc::new(p0, [0, 1], [1, 1], 1, CC),
            Want::Bad("conv.stride_h"),
        ),
        (
            "stride w 0",
            ConvDesc::new(p0, [1, 0], [1, 1], 1, CC),
            Want::Bad("conv.stride_w"),
        ),
        (
            "dilation h 0",
            ConvDesc::new(p0, [1, 1], [0, 1], 1, CC),
            Want::Bad("conv.dilation_h"),
        ),
        (
            "dilation w 0",
            ConvDesc::new(p0, [1, 1], [1, 0], 1, CC),
            Want::Bad("conv.dilation_w"),
        ),
        (
            "groups 0",
            ConvDesc::new(p0, [1, 1], [1, 1], 0, CC),
            Want::Bad("conv.groups"),
        ),
        (
            "negative top",
            ConvDesc::new(pad(-1, 0, 0, 0), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_top"),
        ),
        (
            "negative left",
            ConvDesc::new(pad(0, 0, -1, 0), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_left"),
        ),
        (
            "most negative top",
            ConvDesc::new(pad(i64::MIN, 0, 0, 0), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_top"),
        ),
        (
            "most negative bottom",
            ConvDesc::new(pad(0, i64::MIN, 0, 0), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_bottom"),
        ),
        (
            "most negative right",
            ConvDesc::new(pad(0, 0, 0, i64::MIN), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_right"),
        ),
        (
            "huge bottom",
            ConvDesc::new(pad(0, 1 << 31, 0, 0), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_bottom"),
        ),
        (
            "very negative right",
            ConvDesc::new(pad(0, 0, 0, -(1 << 31)), [1, 1], [1, 1], 1, CC),
            Want::Bad("conv.pad_right"),
        ),
        (
            "huge stride",
            ConvDesc::new(p0, [big, 1], [1, 1], 1, CC),
            Want::Bad("conv.stride_h"),
        ),
        (
            "huge dilation",
            ConvDesc::new(p0, [1, 1], [1, usize::MAX], 1, CC),
            Want::Bad("conv.dilation_w"),
        ),
        (
            "huge groups",
            ConvDesc::new(p0, [1, 1], [1, 1], big, CC),
            Want::Bad("conv.groups"),
        ),
    ];
    for (what, r, want) in cases {
        check(what, r, want);
    }
}

#[test]
fn bad_problems() {
    let f16x = TensorDesc::new(DataType::F16, Layout::Nchw, [1, 4, 8, 8]).unwrap();
    let f16w = FilterDesc::new(DataType::F16, FilterLayout::Kcrs, [8, 4, 3, 3]).unwrap();
    let f16y = TensorDesc::new(DataType::F16, Layout::Nchw, [1, 8, 6, 6]).unwrap();
    let cases: Vec<(&str, Result<ConvProblem>, Want)> = vec![
        (
            "groups do not divide input channels",
            ConvProblem::forward_packed(
                x([1, 3, 8, 8]),
                w([8, 1, 3, 3]),
                conv(Padding::default(), [1, 1], [1, 1], 2),
                Layout::Nchw,
            ),
            Want::Bad("conv.groups"),
        ),
        (
            "groups do not divide output channels",
            ConvProblem::forward_packed(
                x([1, 4, 8, 8]),
                w([3, 2, 3, 3]),
                conv(Padding::default(), [1, 1], [1, 1], 2),
                Layout::Nchw,
            ),
            Want::Bad("conv.groups"),
        ),
        (
            "w.c is not c / groups",
            ConvProblem::forward_packed(
                x([1, 4, 8, 8]),
                w([8, 4, 3, 3]),
                conv(Padding::default(), [1, 1], [1, 1], 2),
                Layout::Nchw,
            ),
            Want::Bad("w.c"),
        ),
        (
            "w.c differs from x.c",
            ConvProblem::forward_packed(x([1, 4, 8, 8]), w([8, 3, 3, 3]), dense(), Layout::Nhwc),
            Want::Bad("w.c"),
        ),
        (
            "empty output height",
            ConvProblem::forward_packed(x([1, 4, 2, 8]), w([8, 4, 3, 3]), dense(), Layout::Nchw),
            Want::Bad("y.h"),
        ),
        (
            "empty output width (dilated kernel)",
            ConvProblem::forward_packed(
                x([1, 4, 8, 8]),
                w([8, 4, 3, 3]),
                conv(Padding::default(), [1, 1], [1, 4], 1),
                Layout::Nchw,
            ),
            Want::Bad("y.w"),
        ),
        (
            "empty output from negative bottom padding",
            ConvProblem::forward_packed(
                x([1, 4, 3, 3]),
                w([8, 4, 3, 3]),
                conv(pad(0, -1, 0, 0), [1, 1], [1, 1], 1),
                Layout::Nchw,
            ),
            Want::Bad("y.h"),
        ),
        (
            "y height wrong",
            ConvProblem::forward(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), x([1, 8, 8, 6])),
            Want::Bad("y.h"),
        ),
        (
            "y width wrong",
            ConvProblem::forward(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), x([1, 8, 6, 8])),
            Want::Bad("y.w"),
        ),
        (
            "y channels wrong",
            ConvProblem::forward(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), x([1, 4, 6, 6])),
            Want::Bad("y.c"),
        ),
        (
            "y batch wrong",
            ConvProblem::forward(x([2, 4, 8, 8]), w([8, 4, 3, 3]), dense(), x([1, 8, 6, 6])),
            Want::Bad("y.n"),
        ),
        (
            "w element type differs",
            ConvProblem::forward_packed(x([1, 4, 8, 8]), f16w, dense(), Layout::Nchw),
            Want::Bad("w.dtype"),
        ),
        (
            "y element type differs",
            ConvProblem::forward(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), f16y),
            Want::Bad("y.dtype"),
        ),
        (
            "x element type differs (w checked against x)",
            ConvProblem::forward(f16x, w([8, 4, 3, 3]), dense(), x([1, 8, 6, 6])),
            Want::Bad("w.dtype"),
        ),
        (
            "output too large",
            ConvProblem::forward_packed(
                x([1, 1, 1, 1]),
                w([1 << 20, 1, 1, 1]),
                conv(pad(1 << 30, 1 << 30, 1 << 30, 1 << 30), [1, 1], [1, 1], 1),
                Layout::Nchw,
            ),
            Want::Overflow("y"),
        ),
    ];
    for (what, r, want) in cases {
        check(what, r, want);
    }
    check(
        "with_batch(0)",
        ConvProblem::forward_packed(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), Layout::Nchw)
            .unwrap()
            .with_batch(0),
        Want::Bad("x.n"),
    );
}

#[test]
fn bad_calls() {
    let handle = Handle::with_threads(1).unwrap();
    let f16 = ConvProblem::forward_packed(
        TensorDesc::new(DataType::F16, Layout::Nchw, [1, 4, 8, 8]).unwrap(),
        FilterDesc::new(DataType::F16, FilterLayout::Kcrs, [8, 4, 3, 3]).unwrap(),
        dense(),
        Layout::Nchw,
    )
    .unwrap();
    let (xs, ws, ys) = (f16.x().span(), f16.w().elements(), f16.y().span());
    let mut y = vec![0.0f32; ys];
    // f32 buffers for a problem of f16 tensors: the call names the tensor of the wrong type
    // (tests/conv_reduced.rs runs them with buffers of their types).
    check(
        "f16 run",
        handle.conv_forward(&f16, "direct", &vec![0.0; xs], &vec![0.0; ws], &mut y),
        Want::Bad("x.dtype"),
    );
    let bf16 = ConvProblem::forward_packed(
        TensorDesc::new(DataType::Bf16, Layout::Nhwc, [1, 4, 8, 8]).unwrap(),
        FilterDesc::new(DataType::Bf16, FilterLayout::Krsc, [8, 4, 3, 3]).unwrap(),
        dense(),
        Layout::Nhwc,
    )
    .unwrap();
    check(
        "bf16 run",
        handle.conv_forward(&bf16, "direct", &vec![0.0; xs], &vec![0.0; ws], &mut y),
        Want::Bad("x.dtype"),
    );
    // The backward operations compute f32 tensors only.
    let dy = vec![0.0f32; ys];
    let mut dx = vec![0.0f32; xs];
    check(
        "bf16 backward data",
        handle.conv_backward_data(
            &bf16.for_op(autodnn::OpKind::ConvBackwardData).unwrap(),
            "direct",
            &dy,
            &vec![0.0; ws],
            &mut dx,
            1.0,
            0.0,
        ),
        Want::Unsupported,
    );

    let p = ConvProblem::forward_packed(x([1, 4, 8, 8]), w([8, 4, 3, 3]), dense(), Layout::Nchw)
        .unwrap();
    let (xs, ws, ys) = (p.x().span(), p.w().elements(), p.y().span());
    let (xv, wv) = (vec![1.0f32; xs], vec![1.0f32; ws]);
    let mut yv = vec![0.0f32; ys];
    let mut short_y = vec![0.0f32; ys - 1];
    check(
        "short x",
        handle.conv_forward(&p, "direct", &xv[..xs - 1], &wv, &mut yv),
        Want::TooSmall("x"),
    );
    check(
        "short w",
        handle.conv_forward(&p, "direct", &xv, &wv[..ws - 1], &mut yv),
        Want::TooSmall("w"),
    );
    check(
        "short y",
        handle.conv_forward(&p, "direct", &xv, &wv, &mut short_y),
        Want::TooSmall("y"),
    );
    check(
        "empty buffers",
        handle.conv_forward(&p, "direct", &[], &[], &mut []),
        Want::TooSmall("x"),
    );
    match handle.conv_forward(&p, "direct", &xv[..10], &wv, &mut yv) {
        Err(Error::BufferTooSmall { needed, got, .. }) => assert_eq!((needed, got), (xs, 10)),
        other => panic!("{other:?}"),
    }
    // The correct lengths run.
    handle
        .conv_forward(&p, "direct", &xv, &wv, &mut yv)
        .unwrap();
    assert!(yv.iter().all(|&v| v == 36.0));
}

#[test]
fn good_descriptors() {
    // Rows padded to 8 elements and channels to 40: accepted, span counts the padding.
    let t = TensorDesc::with_strides(F32, [2, 3, 4, 5], [3 * 40, 40, 8, 1]).unwrap();
    assert_eq!(t.span(), 120 + 2 * 40 + 3 * 8 + 4 + 1);
    assert_eq!(t.elements(), 120);
    assert_eq!(t.layout(), None);
    assert_eq!(t.offset(1, 2, 3, 4), 120 + 80 + 24 + 4);
    // NHWC with padded pixels (c stride 1, pixel stride 5 for 3 channels).
    let t = TensorDesc::with_strides(F32, [1, 3, 2, 2], [20, 1, 10, 5]).unwrap();
    assert_eq!(t.span(), 2 + 10 + 5 + 1);
    assert_eq!(t.layout(), None);
    // Extent-1 dimensions may have any stride, even one that coincides with another's.
    let t = TensorDesc::with_strides(F32, [1, 1, 4, 5], [7, 7, 5, 1]).unwrap();
    assert_eq!(t.span(), 20);
    // Packed layouts.
    let t = TensorDesc::new(F32, Layout::Nchw, [2, 3, 4, 5]).unwrap();
    assert_eq!(t.strides(), [60, 20, 5, 1]);
    assert_eq!(t.span(), 120);
    assert_eq!(t.layout(), Some(Layout::Nchw));
    let t = TensorDesc::new(F32, Layout::Nhwc, [2, 3, 4, 5]).unwrap();
    assert_eq!(t.strides(), [60, 1, 15, 3]);
    assert_eq!(t.span(), 120);
    assert_eq!(t.layout(), Some(Layout::Nhwc));
    let t = TensorDesc::with_strides(F32, [2, 3, 4, 5], [60, 1, 15, 3]).unwrap();
    assert_eq!(t.layout(), Some(Layout::Nhwc));
    let t = TensorDesc::with_strides(F32, [2, 3, 4, 5], [60, 20, 5, 1]).unwrap();
    assert_eq!(t.layout(), Some(Layout::Nchw));
    let t = TensorDesc::new(F32, Layout::Nhwc, [1, 1, 1, 1]).unwrap();
    assert_eq!((t.span(), t.elements()), (1, 1));
    // A batch change keeps packed tensors packed and padded ones padded.
    let t = TensorDesc::with_strides(F32, [2, 3, 4, 5], [3 * 40, 40, 8, 1]).unwrap();
    let t3 = t.with_batch(3).unwrap();
    assert_eq!(t3.strides(), t.strides());
    assert_eq!(t3.span(), 2 * 120 + 2 * 40 + 3 * 8 + 4 + 1);

    // Filters.
    let f = FilterDesc::new(F32, FilterLayout::Krsc, [8, 3, 3, 2]).unwrap();
    assert_eq!(f.strides(), [18, 1, 6, 3]);
    assert_eq!(f.elements(), 144);
    assert_eq!(f.offset(1, 2, 2, 1), 18 + 2 + 12 + 3);

    // A problem writing into a padded y, with groups, stride, dilation and negative bottom
    // padding; it runs and matches the reference.
    let xd = TensorDesc::new(F32, Layout::Nhwc, [2, 4, 9, 7]).unwrap();
    let wd = FilterDesc::new(F32, FilterLayout::Krsc, [6, 2, 3, 2]).unwrap();
    let cd = conv(pad(1, -1, 0, 2), [2, 1], [2, 1], 2);
    let dims = ConvProblem::output_dims(&xd, &wd, &cd).unwrap();
    // h: (9 + 1 - 1 - 5) / 2 + 1 = 3; w: (7 + 0 + 2 - 2) / 1 + 1 = 8.
    assert_eq!(dims, [2, 6, 3, 8]);
    let yd = TensorDesc::with_strides(F32, dims, [6 * 3 * 10, 3 * 10, 10, 1]).unwrap();
    let p = ConvProblem::forward(xd, wd, cd, yd).unwrap();
    assert_eq!(p.c_per_group(), 2);
    assert_eq!(p.k_per_group(), 3);
    assert_eq!(p.flops(), 2.0 * (2 * 6 * 3 * 8 * 2 * 3 * 2) as f64);
    let handle = Handle::with_threads(2).unwrap();
    let xv: Vec<f32> = (0..p.x().span()).map(|i| (i % 7) as f32 - 3.0).collect();
    let wv: Vec<f32> = (0..p.w().elements())
        .map(|i| (i % 5) as f32 - 2.0)
        .collect();
    let mut yv = vec![f32::NAN; p.y().span()];
    handle
        .conv_forward(&p, "direct", &xv, &wv, &mut yv)
        .unwrap();
    let r = autodnn::reference::conv_forward(&p, &xv, &wv).unwrap();
    for n in 0..2 {
        for k in 0..6 {
            for i in 0..3 {
                for j in 0..8 {
                    let o = p.y().offset(n, k, i, j);
                    assert!((yv[o] as f64 - r[o]).abs() < 1e-4, "({n},{k},{i},{j})");
                }
            }
        }
    }
    // Descriptor that is valid at the limits of the geometry.
    conv(
        pad((1 << 31) - 1, -((1 << 31) - 1), 0, 0),
        [1, 1],
        [1, 1],
        1,
    );
}

#[test]
fn offsets_list_every_element_in_logical_order() {
    let dims = [2, 3, 2, 4];
    let tensors = [
        TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap(),
        TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap(),
        TensorDesc::with_strides(DataType::F32, dims, [100, 1, 40, 5]).unwrap(),
    ];
    for t in &tensors {
        let mut want = Vec::new();
        for n in 0..2 {
            for c in 0..3 {
                for h in 0..2 {
                    for w in 0..4 {
                        want.push(t.offset(n, c, h, w));
                    }
                }
            }
        }
        assert_eq!(t.offsets().collect::<Vec<_>>(), want, "{t:?}");
    }
    for layout in [FilterLayout::Kcrs, FilterLayout::Krsc] {
        let f = FilterDesc::new(DataType::F32, layout, dims).unwrap();
        let mut want = Vec::new();
        for k in 0..2 {
            for c in 0..3 {
                for r in 0..2 {
                    for s in 0..4 {
                        want.push(f.offset(k, c, r, s));
                    }
                }
            }
        }
        assert_eq!(f.offsets().collect::<Vec<_>>(), want, "{layout:?}");
    }
}
