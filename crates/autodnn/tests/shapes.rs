//! Every algorithm that accepts a problem must be exact on every layer of oneDNN's benchdnn
//! lists (batch cut to 1, spatial size capped so the suite stays fast), on integer data.

mod common;

use autodnn::cpu::Isa;
use autodnn::{conv, parse_problem_list, reference, Handle, Layout, ProblemSpec};
use common::{assert_exact, int_data};

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

fn lists() -> Vec<(String, Vec<ProblemSpec>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/shapes");
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("shapes_"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap();
        let specs = parse_problem_list(&text).unwrap();
        out.push((path.file_name().unwrap().to_string_lossy().into_owned(), specs));
    }
    assert!(out.len() >= 10, "expected the benchdnn lists in {}", dir.display());
    out
}

#[test]
fn every_algorithm_is_exact_on_every_benchdnn_layer() {
    let best = Isa::best_available();
    let mut handles = Vec::new();
    for threads in [1, 2] {
        let mut h = Handle::with_threads(threads).unwrap();
        h.set_isa_cap(best);
        handles.push(h);
    }
    let mut checked = 0usize;
    for (file, specs) in lists() {
        for (i, spec) in specs.iter().enumerate() {
            let Some(s) = capped(spec) else { continue };
            // Alternate layouts so both are covered across the lists.
            let layout = if i % 2 == 0 { Layout::Nchw } else { Layout::Nhwc };
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
                assert_exact(&p, &y, &r, &format!("{file}: {s} ({}, {layout:?})", a.name()));
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "only {checked} problem/algorithm pairs checked");
}
