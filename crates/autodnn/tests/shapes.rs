//! Every algorithm that accepts a problem, forward, backward data and backward filter, must be
//! exact (or within its documented bound) on every layer of oneDNN's benchdnn
//! lists (batch cut to 1, spatial size capped so the suite stays fast), on integer data.

mod common;

use autodnn::conv::Accuracy;
use autodnn::cpu::Isa;
use autodnn::op::{ConvBackwardData, ConvBackwardFilter, Registered};
use autodnn::{
    conv, parse_problem_list, reference, ConvProblem, Handle, Layout, OpKind, ProblemSpec,
    TensorDesc,
};
use common::{assert_accurate, int_data};

/// Largest input height/width kept; larger images are cut to this, keeping kernel, stride,
/// padding and dilation (the output size follows).
const SPATIAL_CAP: usize = 13;

fn capped(spec: &ProblemSpec) -> Option<ProblemSpec> {
    let mut s = spec.with_mb(1);
    let cap = |i: usize, o: &mut usize, k: usize, st: usize, p: i64, d: usize| -> Option<usize> {
        if i <= SPATIAL_CAP {
            return Some(i);
        }
        let ek = ((k - 1) * (d + 1) + 1) as i64;
        let i2 = SPATIAL_CAP as i64;
        let span = i2 + 2 * p - ek;
        if span < 0 {
            return None;
        }
        *o = (span / st as i64 + 1) as usize;
        Some(SPATIAL_CAP)
    };
    let mut oh = s.oh;
    let mut ow = s.ow;
    s.ih = cap(s.ih, &mut oh, s.kh, s.sh, s.ph, s.dh)?;
    s.iw = cap(s.iw, &mut ow, s.kw, s.sw, s.pw, s.dw)?;
    s.oh = oh;
    s.ow = ow;
    // Re-parse the printed form: it must be a valid problem string.
    ProblemSpec::parse(&s.to_string()).ok()
}

fn list(file: &str) -> Vec<ProblemSpec> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/shapes")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let specs = parse_problem_list(&text).unwrap();
    assert!(!specs.is_empty(), "{file} is empty");
    specs
}

/// Runs every accepting algorithm on every (capped, de-duplicated) layer of one list, on the
/// widest ISA, alternating layouts and thread counts.
fn check_list(file: &str) {
    let best = Isa::best_available();
    let handles: Vec<Handle> = [1, 2]
        .into_iter()
        .map(|threads| {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(best);
            h
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut checked = 0usize;
    for (i, spec) in list(file).iter().enumerate() {
        let Some(s) = capped(spec) else { continue };
        // Alternate layouts so both are covered across each list.
        let layout = if i % 2 == 0 {
            Layout::Nchw
        } else {
            Layout::Nhwc
        };
        if !seen.insert((s.with_name(""), layout)) {
            continue;
        }
        let p = s.to_problem(layout).unwrap();
        let x = int_data(p.x().span(), i as u64);
        let w = int_data(p.w().elements(), i as u64 + 7);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for a in conv::algorithms() {
            if a.check(&p).is_err() {
                continue;
            }
            let h = &handles[i % 2];
            let mut y = vec![f32::NAN; p.y().span()];
            h.conv_forward(&p, a.name(), &x, &w, &mut y).unwrap();
            assert_accurate(
                &p,
                &y,
                &r,
                a.accuracy(),
                &format!("{file}: {s} ({}, {layout:?})", a.name()),
            );
            checked += 1;
        }
        checked += backward(
            &handles[i % 2],
            &p,
            &x,
            &w,
            &format!("{file}: {s} ({layout:?})"),
        );
    }
    assert!(checked > 0, "{file}: nothing checked");
}

/// Every accepting backward-data and backward-filter algorithm on `p` (x and w as the
/// forward's, dy integer data too) against the oracle; returns the runs checked.
fn backward(h: &Handle, p: &ConvProblem, x: &[f32], w: &[f32], what: &str) -> usize {
    let dy = int_data(p.y().span(), 99);
    let mut checked = 0;
    let pd = p.for_op(OpKind::ConvBackwardData).unwrap();
    let rd = reference::conv_backward_data(p, &dy, w).unwrap();
    for a in ConvBackwardData::algorithms()
        .iter()
        .filter(|a| a.check(&pd).is_ok())
    {
        let mut dx = vec![f32::NAN; p.x().span()];
        h.conv_backward_data(p, a.name(), &dy, w, &mut dx, 1.0, 0.0)
            .unwrap();
        assert_close(
            p.x(),
            &dx,
            &rd,
            a.accuracy(),
            &format!("{what} bwd_d {}", a.name()),
        );
        checked += 1;
    }
    let pf = p.for_op(OpKind::ConvBackwardFilter).unwrap();
    let rf = reference::conv_backward_filter(p, x, &dy).unwrap();
    for a in ConvBackwardFilter::algorithms()
        .iter()
        .filter(|a| a.check(&pf).is_ok())
    {
        let mut dw = vec![f32::NAN; p.w().elements()];
        h.conv_backward_filter(p, a.name(), x, &dy, &mut dw, 1.0, 0.0)
            .unwrap();
        // The filter is packed: its elements are the whole buffer. Exact, or within the
        // algorithm's integer bound.
        let tol = a.accuracy().integer_tolerance() * rf.iter().fold(1.0f64, |m, r| m.max(r.abs()));
        for (i, (&g, &r)) in dw.iter().zip(&rf).enumerate() {
            let ok = match a.accuracy() {
                Accuracy::Exact => g == r as f32,
                _ => (g as f64 - r).abs() <= tol,
            };
            assert!(ok, "{what} bwd_w {}: dw[{i}] = {g}, oracle {r}", a.name());
        }
        checked += 1;
    }
    checked
}

/// dx against the oracle over x's elements: exact, or within the algorithm's integer bound.
fn assert_close(xd: &TensorDesc, got: &[f32], want: &[f64], acc: Accuracy, what: &str) {
    let [n, c, h, w] = xd.dims();
    let offs =
        (0..n * c * h * w).map(|i| xd.offset(i / (c * h * w), i / (h * w) % c, i / w % h, i % w));
    let max = offs.clone().map(|o| want[o].abs()).fold(1.0, f64::max);
    for o in offs {
        let d = (got[o] as f64 - want[o]).abs();
        assert!(!d.is_nan(), "{what}: dx[{o}] = {}", got[o]);
        if acc == Accuracy::Exact {
            assert!(
                got[o] == want[o] as f32,
                "{what}: dx[{o}] = {}, oracle {}",
                got[o],
                want[o]
            );
        } else {
            assert!(
                d <= acc.integer_tolerance() * max,
                "{what}: |error| {d} at dx[{o}]"
            );
        }
    }
}

macro_rules! list_tests {
    ($($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                check_list(stringify!($name));
            }
        )*
    };
}

list_tests!(
    shapes_1x1
    shapes_alexnet
    shapes_dilated_2d_strided_padding
    shapes_dw_2d_strided_padding
    shapes_googlenet_v1
    shapes_mobilenet
    shapes_mobilenet_dw
    shapes_mobilenet_v1
    shapes_regression_padding
    shapes_regression_small_spatial
    shapes_resnet_50
    shapes_tails
    shapes_vgg_11
    shapes_yolov2
);

#[test]
fn every_list_in_the_data_folder_is_tested() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/shapes");
    let src = include_str!("shapes.rs");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("shapes_") {
            assert!(src.contains(&format!("    {name}\n")), "{name} has no test");
        }
    }
}
