//! Deployable plans (`select::deploy`): every algorithm's plan round-trips through bytes with
//! the same prepared values and the same output, bit for bit, in both layouts; truncated,
//! corrupt, foreign-version, other-library and other-problem bytes are refused naming the
//! part; a plan made under one instruction set and loaded under a lower one is prepared again
//! from the plain filter (and refused without it), and computes the reference's output; after
//! `warm_up_plans`, the plans' first calls find the workspace they need.

mod common;

use autodnn::conv::{self, EpilogueArgs};
use autodnn::cpu::Isa;
use autodnn::select::deploy::{checksum, DeployedPlan, PLAN_MAGIC};
use autodnn::{reference, ConvProblem, Error, Handle, Layout};
use common::{assert_accurate, assert_exact, int_data, problem};

const PROBLEMS: [&str; 5] = [
    "mb1ic8ih10oc8kh3ph1",
    "mb2ic16ih7oc8kh1",
    "mb1g8ic8ih9oc8kh3ph1",
    "mb1ic4ih20oc4kh5ph2",
    // Dilated: kn2row's and the space-to-batch algorithms' plans.
    "mb1ic8ih12oc8kh3ph2dh1",
];

/// The bytes with their checksum made right again (after an edit).
fn resealed(mut b: Vec<u8>) -> Vec<u8> {
    let n = b.len() - 8;
    let sum = checksum(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    b
}

fn field(e: &Error) -> String {
    match e {
        Error::BadParam { field, .. } => field.clone(),
        other => panic!("not a named error: {other:?}"),
    }
}

fn run(h: &Handle, plan: &DeployedPlan, x: &[f32], p: &ConvProblem) -> Vec<f32> {
    let mut y = vec![0.0; p.y().span()];
    h.conv_forward_deployed(plan, x, &mut y, &EpilogueArgs::default())
        .unwrap();
    y
}

#[test]
fn every_algorithms_plan_round_trips_bit_for_bit() {
    let h = Handle::with_threads(2).unwrap();
    let mut checked = 0;
    for spec in PROBLEMS {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = problem(spec, layout);
            let x = int_data(p.x().span(), 3);
            let w = int_data(p.w().elements(), 4);
            for a in conv::algorithms() {
                if a.check(&p).is_err() {
                    continue;
                }
                let d = h.deploy_conv_with(&p, a.name(), &w).unwrap();
                let bytes = d.to_bytes().unwrap();
                assert_eq!(&bytes[..8], PLAN_MAGIC);
                let back = h.load_plan(&bytes, &p, None).unwrap();
                assert_eq!(back.weights().algo(), a.name());
                assert_eq!(back.plan().chain(), d.plan().chain());
                assert_eq!(back.isa(), h.isa());
                assert_eq!(
                    back.to_bytes().unwrap(),
                    bytes,
                    "{spec} {layout:?} {}",
                    a.name()
                );
                let (y0, y1) = (run(&h, &d, &x, &p), run(&h, &back, &x, &p));
                let same = y0.iter().zip(&y1).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{spec} {layout:?} {}: outputs differ", a.name());
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn bad_bytes_are_refused_naming_the_part() {
    let h = Handle::with_threads(1).unwrap();
    let p = problem(PROBLEMS[0], Layout::Nchw);
    let x = int_data(p.x().span(), 3);
    let w = int_data(p.w().elements(), 4);
    let d = h.deploy_conv(&p, &x, &w, &EpilogueArgs::default()).unwrap();
    let bytes = d.to_bytes().unwrap();
    // Every truncation.
    for cut in 0..bytes.len() {
        let e = h.load_plan(&bytes[..cut], &p, None).unwrap_err();
        let f = field(&e);
        assert!(
            ["plan.magic", "plan.length", "plan.checksum"].contains(&f.as_str()),
            "cut {cut}: {f}"
        );
    }
    // Any flipped bit past the magic and version breaks the checksum.
    for at in (12..bytes.len()).step_by(7) {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        assert_eq!(
            field(&h.load_plan(&b, &p, None).unwrap_err()),
            "plan.checksum",
            "{at}"
        );
    }
    let mut b = bytes.clone();
    b[0] = b'X';
    assert_eq!(field(&h.load_plan(&b, &p, None).unwrap_err()), "plan.magic");
    let mut b = bytes.clone();
    b[8] = 9;
    assert_eq!(
        field(&h.load_plan(&resealed(b), &p, None).unwrap_err()),
        "plan.format_version"
    );
    // Another library version, an unknown algorithm: the header edited, resealed.
    let find = |needle: &str| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .unwrap_or_else(|| panic!("{needle} not in the header"))
    };
    let version = format!("\"library_version\":\"{}\"", autodnn::VERSION);
    let other: String = version.replace(autodnn::VERSION, &"9".repeat(autodnn::VERSION.len()));
    let swapped = |from: &str, to: &str| -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let i = find(from);
        let mut b = bytes.clone();
        b[i..i + to.len()].copy_from_slice(to.as_bytes());
        resealed(b)
    };
    assert_eq!(
        field(
            &h.load_plan(&swapped(&version, &other), &p, None)
                .unwrap_err()
        ),
        "plan.library_version"
    );
    let algo = format!("\"algo\":\"{}\"", d.weights().algo());
    let unknown = format!("\"algo\":\"{}\"", "z".repeat(d.weights().algo().len()));
    assert_eq!(
        field(
            &h.load_plan(&swapped(&algo, &unknown), &p, None)
                .unwrap_err()
        ),
        "plan.algo"
    );
    // A plain filter (an algorithm with nothing to prepare) cut short, the header made to
    // agree and the bytes resealed: refused, never read past its end.
    let direct = h.deploy_conv_with(&p, "direct", &w).unwrap();
    let db = direct.to_bytes().unwrap();
    let n = p.w().elements();
    let hlen = u64::from_le_bytes(db[12..20].try_into().unwrap()) as usize;
    let header = String::from_utf8(db[20..20 + hlen].to_vec()).unwrap();
    let short = header.replace(&format!("\"values\":{n}"), &format!("\"values\":{}", n - 1));
    assert_ne!(short, header);
    let mut cut = db[..12].to_vec();
    cut.extend_from_slice(&(short.len() as u64).to_le_bytes());
    cut.extend_from_slice(short.as_bytes());
    cut.extend_from_slice(&db[20 + hlen..20 + hlen + 4 * (n - 1)]);
    cut.extend_from_slice(&[0; 8]);
    assert_eq!(
        field(&h.load_plan(&resealed(cut), &p, None).unwrap_err()),
        "plan.length"
    );
    // Another problem.
    let q = problem("mb1ic8ih12oc8kh3ph1", Layout::Nchw);
    assert_eq!(
        field(&h.load_plan(&bytes, &q, None).unwrap_err()),
        "plan.problem"
    );
    assert_eq!(
        field(
            &h.load_plan(&bytes, &problem(PROBLEMS[0], Layout::Nhwc), None)
                .unwrap_err()
        ),
        "plan.problem"
    );
    // Not a plan at all.
    assert_eq!(
        field(&h.load_plan(b"{}", &p, None).unwrap_err()),
        "plan.magic"
    );
}

#[test]
fn a_plan_from_another_instruction_set_is_prepared_again() {
    let best = Isa::best_available();
    if best == Isa::Scalar {
        return;
    }
    let made = Handle::with_threads(1).unwrap();
    let low = Handle::with_threads(1).unwrap();
    low.set_isa_cap(Isa::Scalar);
    for spec in PROBLEMS {
        let p = problem(spec, Layout::Nchw);
        let x = int_data(p.x().span(), 5);
        let w = int_data(p.w().elements(), 6);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for a in conv::algorithms().iter().filter(|a| a.check(&p).is_ok()) {
            let bytes = made
                .deploy_conv_with(&p, a.name(), &w)
                .unwrap()
                .to_bytes()
                .unwrap();
            let e = low.load_plan(&bytes, &p, None).unwrap_err();
            assert_eq!(field(&e), "plan.isa");
            let d = low.load_plan(&bytes, &p, Some(&w)).unwrap();
            assert_eq!(d.isa(), Isa::Scalar);
            assert_eq!(d.weights().algo(), a.name());
            let y = run(&low, &d, &x, &p);
            if a.accuracy() == conv::Accuracy::Exact {
                assert_exact(&p, &y, &r, &format!("{spec} {}", a.name()));
            }
        }
    }
}

/// After `warm_up_plans`, a fresh handle holds the largest workspace its loaded plans need,
/// and their first calls (each right) do not grow it.
#[test]
fn warming_up_reserves_the_plans_largest_workspace() {
    let maker = Handle::with_threads(2).unwrap();
    let h = Handle::with_threads(2).unwrap();
    let mut loaded = Vec::new();
    for (spec, algo) in [
        ("mb1ic8ih10oc8kh3ph1", "winograd_4x4"),
        ("mb1ic4ih20oc4kh5ph2", "fft_tiling"),
        ("mb1ic8ih12oc8kh3ph2dh1", "kn2row"),
        ("mb2ic16ih7oc8kh3ph1", "gemm"),
    ] {
        let p = problem(spec, Layout::Nchw);
        let w = int_data(p.w().elements(), 6);
        let bytes = maker
            .deploy_conv_with(&p, algo, &w)
            .unwrap()
            .to_bytes()
            .unwrap();
        loaded.push((p, w, h.load_plan(&bytes, &p, None).unwrap()));
    }
    let most = loaded
        .iter()
        .map(|(p, _, d)| h.conv_workspace_size(p, d.weights().algo()).unwrap())
        .max()
        .unwrap();
    assert!(most > 0);
    assert_eq!(h.cached_workspace_bytes(), 0);
    let refs: Vec<&DeployedPlan> = loaded.iter().map(|(_, _, d)| d).collect();
    assert_eq!(h.warm_up_plans(&refs).unwrap(), most);
    let cached = h.cached_workspace_bytes();
    assert!(cached >= most, "{cached} < {most}");
    for (p, w, d) in &loaded {
        let x = int_data(p.x().span(), 7);
        let y = run(&h, d, &x, p);
        let r = reference::conv_forward(p, &x, w).unwrap();
        let acc = conv::find(d.weights().algo()).unwrap().accuracy();
        assert_accurate(p, &y, &r, acc, "warmed up");
        assert_eq!(h.cached_workspace_bytes(), cached, "{}", d.weights().algo());
    }
}
