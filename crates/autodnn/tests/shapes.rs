//! Every algorithm that accepts a problem must be exact (or within its documented bound) on every layer of oneDNN's benchdnn
//! lists (batch cut to 1, spatial size capped so the suite stays fast), on integer data.

mod common;

use autodnn::cpu::Isa;
use autodnn::{conv, parse_problem_list, reference, Handle, Layout, ProblemSpec};
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
    }
    assert!(checked > 0, "{file}: nothing checked");
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
