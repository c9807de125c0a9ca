//! The Winograd algorithms (`winograd_2x2`, `winograd_4x4`, `winograd_6x6`): the problems they
//! must accept, the ones they decline and why, the measured normwise error bound, integer
//! accuracy on real layer shapes, prepared weights and the workspace.

mod common;

use autodnn::conv::Accuracy;
use autodnn::cpu::Isa;
use autodnn::{reference, ConvProblem, Error, Handle, Layout};
use common::{
    algo, assert_integer_bound, errors, int_data, prepared_err, problem, real_data, run_plain,
    run_prepared, Rng,
};

const ALGOS: [&str; 3] = ["winograd_2x2", "winograd_4x4", "winograd_6x6"];

fn max_abs(v: &[f32]) -> f64 {
    v.iter().fold(0.0f64, |m, &x| m.max(x.abs() as f64))
}

/// The measured normwise constant: max|y − ref| / (ε · C·R·S · max|x| · max|w|).
fn measured_c(p: &ConvProblem, y: &[f32], r: &[f64], x: &[f32], w: &[f32]) -> f64 {
    let (diff, _) = errors(p, y, r);
    let terms = (p.c_per_group() * 9) as f64;
    diff / (f32::EPSILON as f64 * terms * max_abs(x) * max_abs(w))
}

fn normwise_c(name: &str) -> f64 {
    match algo(name).accuracy() {
        Accuracy::Normwise { c, .. } => c,
        Accuracy::Exact => panic!("{name} claims exactness"),
    }
}

/// Problems every Winograd algorithm must accept (an over-strict `check` fails here), each
/// run on both layouts and checked on integer data.
#[test]
fn accepts_every_dense_3x3_stride_1_problem() {
    let cases = [
        "mb1ic64ih56oc64oh56kh3ph1n\"res2a_branch2b\"",
        "mb1ic128ih28oc128oh28kh3ph1",
        "mb1ic256ih14oc256oh14kh3ph1",
        "mb1ic512ih7oc512oh7kh3ph1",
        "mb2ic3ih13oc5oh11kh3ph0",
        "g2mb1ic8ih9oc6kh3ph1",
        "g16mb1ic32ih10oc32kh3ph1",
        "mb1ic1ih1oc1kh3ph1",
        "mb1ic17ih5iw23oc33kh3ph2",
        "mb1ic20ih3iw40oc40oh1ow38kh3ph0",
        "mb1ic16ih2iw2oc16oh4ow4kh3ph2",
    ];
    let h = Handle::with_threads(2).unwrap();
    for s in cases {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let mut p = problem(s, layout);
            if s.starts_with("mb1ic17") {
                p = ConvProblem::forward(
                    *p.x(),
                    *p.w(),
                    p.conv().with_mode(autodnn::ConvMode::Convolution),
                    *p.y(),
                )
                .unwrap();
            }
            let x = int_data(p.x().span(), 1);
            let w = int_data(p.w().elements(), 2);
            let r = reference::conv_forward(&p, &x, &w).unwrap();
            for name in ALGOS {
                assert_eq!(algo(name).check(&p), Ok(()), "{name} declined {s}");
                assert_integer_bound(&h, name, &p, &x, &w, &r, &format!("{s} {layout:?}"));
            }
        }
    }
}

#[test]
fn declines_other_windows_with_reasons() {
    let cases = [
        ("mb1ic8ih9oc8kh5ph2", "needs a 3x3 kernel, got 5x5"),
        ("mb1ic8ih9oc8kh1ph0", "needs a 3x3 kernel, got 1x1"),
        ("mb1ic8ih9iw9oc8kh1kw3ph0pw1", "needs a 3x3 kernel, got 1x3"),
        ("mb1ic8ih9oc8kh3sh2ph1", "needs stride 1"),
        (
            "mb1ic8ih9oc8kh3dh1ph2",
            "needs a dense kernel (dilation 1), got dilation 2x2",
        ),
        ("g32mb1ic32ih10oc32kh3ph1", "a depthwise convolution"),
        (
            "g16mb1ic16ih10oc32kh3ph1",
            "one channel per group on one side",
        ),
        (
            "g16mb1ic32ih10oc16kh3ph1",
            "one channel per group on one side",
        ),
    ];
    for (s, why) in cases {
        let p = problem(s, Layout::Nchw);
        for name in ALGOS {
            let e = algo(name).check(&p).unwrap_err();
            assert!(e.contains(why), "{name} on {s}: {e}");
            // The handle reports it as a decline naming the algorithm.
            let h = Handle::with_threads(1).unwrap();
            match h.conv_workspace_size(&p, name) {
                Err(Error::Declined { algo, reason }) => {
                    assert_eq!(algo, name);
                    assert!(reason.contains(why));
                }
                other => panic!("{name} on {s}: {other:?}"),
            }
        }
    }
}

/// Measures c in max|y − ref| ≤ c · ε · C·R·S · max|x| · max|w| on random real data in
/// [−1, 1] across channel counts and checks it against the documented constant. Run with
/// `--nocapture` to see the table.
#[test]
fn normwise_bound_holds_across_channel_counts() {
    let h = Handle::with_threads(2).unwrap();
    let channels = [1usize, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512];
    println!(
        "{:>5} {:>14} {:>14} {:>14}",
        "C", ALGOS[0], ALGOS[1], ALGOS[2]
    );
    let mut worst = [0.0f64; 3];
    for (ci, &c) in channels.iter().enumerate() {
        let mut row = [0.0f64; 3];
        // Small channel counts (the worst case for the constant) get more trials, on random
        // image sizes and paddings (edge tiles).
        let trials = if c <= 4 { 40u64 } else { 3 };
        for seed in 0..trials {
            let mut rng = Rng(1000 * ci as u64 + seed);
            let (ih, iw) = (rng.range(3, 20), rng.range(3, 20));
            let (ph, pw) = (rng.range(0, 2), rng.range(0, 2));
            let s = format!("mb1ic{c}ih{ih}iw{iw}oc8kh3ph{ph}pw{pw}");
            let layout = if seed % 2 == 0 {
                Layout::Nchw
            } else {
                Layout::Nhwc
            };
            let p = problem(&s, layout);
            let x = real_data(p.x().span(), 100 * ci as u64 + seed, 1_000_000);
            let w = real_data(p.w().elements(), 7 + 100 * ci as u64 + seed, 1_000_000);
            let r = reference::conv_forward(&p, &x, &w).unwrap();
            for (i, name) in ALGOS.iter().enumerate() {
                let y = run_plain(&h, name, &p, &x, &w);
                row[i] = row[i].max(measured_c(&p, &y, &r, &x, &w));
            }
        }
        println!("{c:>5} {:>14.3} {:>14.3} {:>14.3}", row[0], row[1], row[2]);
        for i in 0..3 {
            worst[i] = worst[i].max(row[i]);
        }
    }
    for (i, name) in ALGOS.iter().enumerate() {
        let c = normwise_c(name);
        println!("{name}: measured c up to {:.3}, documented {c}", worst[i]);
        assert!(
            worst[i] <= c,
            "{name}: measured c {} > documented {c}",
            worst[i]
        );
        // The documented constant is not wildly loose either.
        assert!(
            worst[i] >= c / 8.0,
            "{name}: measured c {} ≪ documented {c}",
            worst[i]
        );
    }
}

/// Integer data in [−4, 4] on ResNet-50's 3x3 layers (spatial size cut to keep the test fast)
/// and wide-channel problems: max|y − ref| ≤ int_rel · max|ref|.
#[test]
fn integer_tolerance_on_layer_shapes() {
    let h = Handle::with_threads(2).unwrap();
    let cases = [
        "mb1ic64ih20oc64kh3ph1",
        "mb1ic128ih14oc128kh3ph1",
        "mb1ic256ih14oc256kh3ph1",
        "mb1ic512ih7oc512kh3ph1",
        "mb1ic1024ih5oc40kh3ph1",
    ];
    for (i, s) in cases.iter().enumerate() {
        let layout = if i % 2 == 0 {
            Layout::Nchw
        } else {
            Layout::Nhwc
        };
        let p = problem(s, layout);
        let x = int_data(p.x().span(), i as u64);
        let w = int_data(p.w().elements(), 10 + i as u64);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for name in ALGOS {
            let (diff, max) = assert_integer_bound(&h, name, &p, &x, &w, &r, s);
            println!("{name} {s}: max|y − ref| / max|ref| = {:.3e}", diff / max);
        }
    }
}

/// F(2×2) has only 0, ±1, ±½ in its transforms: on small integers it is exact.
#[test]
fn winograd_2x2_is_exact_on_small_integers() {
    let h = Handle::with_threads(1).unwrap();
    let p = problem("mb1ic32ih15oc24kh3ph1", Layout::Nchw);
    let x = int_data(p.x().span(), 3);
    let w = int_data(p.w().elements(), 4);
    let r = reference::conv_forward(&p, &x, &w).unwrap();
    let y = run_plain(&h, "winograd_2x2", &p, &x, &w);
    common::assert_exact(&p, &y, &r, "winograd_2x2");
}

/// Prepared weights: the transformed filter's size, results as plain calls' (within the
/// bound), bound to their problem and algorithm.
#[test]
fn prepared_weights_transform_the_filter_once() {
    let h = Handle::with_threads(2).unwrap();
    let p = problem("g2mb1ic40ih11oc72kh3ph1", Layout::Nhwc);
    let x = real_data(p.x().span(), 5, 1_000_000);
    let w = real_data(p.w().elements(), 6, 1_000_000);
    let r = reference::conv_forward(&p, &x, &w).unwrap();
    for (name, tile) in ALGOS.iter().zip([4usize, 6, 8]) {
        let prepared = h.prepare_weights(&p, name, &w).unwrap();
        assert!(prepared.is_transformed());
        // Per group: K padded to 32, C to 16, tile² positions; a 16-float header.
        let floats = 2 * 64 * 32 * tile * tile + 16;
        assert_eq!(prepared.bytes(), floats * 4, "{name}");
        let y = run_prepared(&h, name, &p, &x, &prepared);
        let plain = run_plain(&h, name, &p, &x, &w);
        let bound = normwise_c(name) * f32::EPSILON as f64 * 20.0 * 9.0;
        for (name, y) in [("prepared", &y), ("plain", &plain)] {
            let (diff, _) = errors(&p, y, &r);
            assert!(diff <= bound, "{name}: {diff} > {bound}");
        }
        // Made for another algorithm: refused.
        let other = if *name == "winograd_2x2" {
            "winograd_4x4"
        } else {
            "winograd_2x2"
        };
        let e = prepared_err(&h, other, &p, &x, &prepared);
        assert!(matches!(e, Error::BadParam { ref field, .. } if field == "prepared.algo"));
    }
}

/// Several blocks of tiles and panels of output channels: the same bits on 1 and 2 threads,
/// under every instruction set; an exact workspace, and one byte less is refused.
#[test]
fn blocks_threads_and_workspace() {
    let p = problem("mb2ic48ih40iw37oc70kh3ph1", Layout::Nchw);
    let x = real_data(p.x().span(), 8, 1_000_000);
    let w = real_data(p.w().elements(), 9, 1_000_000);
    for name in ALGOS {
        let a = algo(name);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            let mut outs = Vec::new();
            for threads in [1, 2] {
                let h = Handle::with_threads(threads).unwrap();
                h.set_isa_cap(isa);
                let need = a.workspace_bytes(&p);
                let mut ws = vec![0x5Au8; need + 16];
                let mut y = vec![f32::NAN; p.y().span()];
                h.conv_forward_with_workspace(&p, name, &x, &w, &mut y, &mut ws)
                    .unwrap();
                assert!(ws[need..].iter().all(|&b| b == 0x5A), "{name} wrote past");
                let e = h
                    .conv_forward_with_workspace(&p, name, &x, &w, &mut y, &mut ws[..need - 1])
                    .unwrap_err();
                assert!(matches!(e, Error::WorkspaceTooSmall { .. }), "{e:?}");
                outs.push(y);
            }
            let same = outs[0]
                .iter()
                .zip(&outs[1])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{name} {isa:?}: bits differ between 1 and 2 threads");
        }
    }
}

/// The backward-filter tile sizes: max|dw − ref| ≤ c · ε · N·OH·OW · max|x| · max|dy| (the
/// reduction's depth is every output position of the batch) on random real data in [−1, 1],
/// across channel counts, image sizes and batches, checked against the documented constant;
/// and on integer data in [−4, 4] on ResNet-50's 3x3 layers, max|dw − ref| ≤ int_rel ·
/// max|ref|. Run with `--nocapture` to see the table.
#[test]
fn backward_filter_bounds_hold() {
    use autodnn::op::{Algorithm, ConvBackwardFilter, Registered};
    use autodnn::OpKind;
    let h = Handle::with_threads(2).unwrap();
    let names = ["winograd_2x2", "winograd_4x4"];
    let algo = |name: &str| -> &'static dyn Algorithm<ConvBackwardFilter> {
        *ConvBackwardFilter::algorithms()
            .iter()
            .find(|a| a.name() == name)
            .unwrap()
    };
    let run = |name: &str, p: &ConvProblem, x: &[f32], dy: &[f32]| {
        let mut dw = vec![f32::NAN; p.w().elements()];
        h.conv_backward_filter(p, name, x, dy, &mut dw, 1.0, 0.0)
            .unwrap();
        dw
    };
    let err = |dw: &[f32], r: &[f64]| {
        let d = dw
            .iter()
            .zip(r)
            .fold(0.0f64, |m, (&a, &b)| m.max((a as f64 - b).abs()));
        let max = r.iter().fold(0.0f64, |m, &b| m.max(b.abs()));
        (d, max)
    };
    let mut worst = [0.0f64; 2];
    println!("{:>24} {:>14} {:>14}", "problem", names[0], names[1]);
    for (i, c) in [1usize, 3, 8, 32, 128].into_iter().enumerate() {
        for seed in 0..4u64 {
            let mut rng = Rng(500 + 10 * i as u64 + seed);
            let mb = rng.range(1, 3);
            let (ih, iw) = (rng.range(3, 24), rng.range(3, 24));
            let (ph, pw) = (rng.range(0, 2), rng.range(0, 2));
            let s = format!(
                "mb{mb}ic{c}ih{ih}iw{iw}oc{}kh3ph{ph}pw{pw}",
                rng.range(1, 40)
            );
            let layout = if seed % 2 == 0 {
                Layout::Nchw
            } else {
                Layout::Nhwc
            };
            let p = problem(&s, layout)
                .for_op(OpKind::ConvBackwardFilter)
                .unwrap();
            let x = real_data(p.x().span(), 300 + seed, 1_000_000);
            let dy = real_data(p.y().span(), 400 + seed, 1_000_000);
            let r = reference::conv_backward_filter(&p, &x, &dy).unwrap();
            let [n, _, oh, ow] = p.y().dims();
            let scale = f32::EPSILON as f64 * (n * oh * ow) as f64 * max_abs(&x) * max_abs(&dy);
            let mut row = [0.0; 2];
            for (j, name) in names.iter().enumerate() {
                row[j] = err(&run(name, &p, &x, &dy), &r).0 / scale;
                worst[j] = worst[j].max(row[j]);
            }
            println!("{s:>24} {:>14.3} {:>14.3}", row[0], row[1]);
        }
    }
    for (j, name) in names.iter().enumerate() {
        let Accuracy::Normwise { c, .. } = algo(name).accuracy() else {
            panic!("{name} claims exactness");
        };
        println!("{name}: measured c up to {:.3}, documented {c}", worst[j]);
        assert!(
            worst[j] <= c,
            "{name}: measured c {} > documented {c}",
            worst[j]
        );
        assert!(
            worst[j] >= c / 8.0,
            "{name}: measured c {} ≪ documented {c}",
            worst[j]
        );
    }
    for (i, s) in [
        "mb2ic64ih20oc64kh3ph1",
        "mb2ic128ih14oc128kh3ph1",
        "mb1ic256ih14oc256kh3ph1",
        "mb2ic512ih7oc512kh3ph1",
    ]
    .iter()
    .enumerate()
    {
        let layout = if i % 2 == 0 {
            Layout::Nchw
        } else {
            Layout::Nhwc
        };
        let p = problem(s, layout)
            .for_op(OpKind::ConvBackwardFilter)
            .unwrap();
        let x = int_data(p.x().span(), 60 + i as u64);
        let dy = int_data(p.y().span(), 70 + i as u64);
        let r = reference::conv_backward_filter(&p, &x, &dy).unwrap();
        for name in names {
            let (d, max) = err(&run(name, &p, &x, &dy), &r);
            let tol = algo(name).accuracy().integer_tolerance();
            println!("{name} {s}: max|dw − ref| / max|ref| = {:.3e}", d / max);
            assert!(d <= tol * max, "{name} {s}: {d} > {tol} · {max}");
        }
    }
}

/// Under `allow_bf16` (units `always`, so on every CPU: the bf16 units where it has them,
/// f32 arithmetic on the same pairs where not) `winograd_2x2` computes its products on bf16
/// pairs of U and V: the measured normwise constant stays within its documented bound under
/// that mode, and is far above the f32 one (the rounding happened); integer data stay exact;
/// the bits do not depend on the thread count; prepared weights hold half the slots, are
/// refused by strict calls and give the plain calls' results within the bound. `winograd_4x4`
/// and `winograd_6x6` stay in f32 (the same bits as strict).
#[test]
fn winograd_2x2_rounds_to_bf16_pairs_under_allow_bf16() {
    use autodnn::{Bf16Units, MathMode};
    let handle = |threads: usize, isa: Isa, math: MathMode| {
        let h = Handle::with_threads(threads).unwrap();
        h.set_isa_cap(isa);
        h.set_math_mode(math);
        h.set_bf16_units(Bf16Units::Always);
        h
    };
    let bound = |name: &str| match algo(name).accuracy_under(MathMode::AllowBf16) {
        Accuracy::Normwise { c, .. } => c,
        Accuracy::Exact => panic!("{name} claims exactness"),
    };
    assert!(bound("winograd_2x2") > 1000.0 * normwise_c("winograd_2x2"));
    for name in ["winograd_4x4", "winograd_6x6"] {
        assert_eq!(normwise_c(name), bound(name), "{name}");
    }
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let h = handle(1, isa, MathMode::AllowBf16);
        let mut worst = 0.0f64;
        // Beside each channel count, the constant of rounding x and w to bf16 before an exact
        // convolution (what allow_bf16 does to the GEMM engine's operands), for comparison.
        let rounded = |v: &[f32]| -> Vec<f32> {
            v.iter()
                .map(|&x| autodnn::bf16::from_f32(x).to_f32())
                .collect()
        };
        println!("{:>5} {:>14} {:>14}", "C", "bf16 pairs", "rounded x, w");
        for (ci, c) in [1usize, 4, 16, 64, 256, 512].into_iter().enumerate() {
            let (mut row, mut direct) = (0.0f64, 0.0f64);
            for seed in 0..3u64 {
                let mut rng = Rng(77 + 10 * ci as u64 + seed);
                let (ih, iw) = (rng.range(3, 16), rng.range(3, 16));
                let s = format!("mb1ic{c}ih{ih}iw{iw}oc40kh3ph1");
                let layout = [Layout::Nchw, Layout::Nhwc][seed as usize % 2];
                let p = problem(&s, layout);
                let x = real_data(p.x().span(), 300 + seed, 1_000_000);
                let w = real_data(p.w().elements(), 400 + seed, 1_000_000);
                let r = reference::conv_forward(&p, &x, &w).unwrap();
                let y = run_plain(&h, "winograd_2x2", &p, &x, &w);
                row = row.max(measured_c(&p, &y, &r, &x, &w));
                let rr = reference::conv_forward(&p, &rounded(&x), &rounded(&w)).unwrap();
                let yr: Vec<f32> = rr.iter().map(|&v| v as f32).collect();
                direct = direct.max(measured_c(&p, &yr, &r, &x, &w));
            }
            println!("{c:>5} {row:>14.1} {direct:>14.1}");
            worst = worst.max(row);
        }
        let c = bound("winograd_2x2");
        println!("winograd_2x2 {isa:?} allow_bf16: measured c up to {worst:.1}, documented {c}");
        assert!(worst <= c, "{isa:?}: measured c {worst} > documented {c}");
        assert!(
            worst >= c / 8.0,
            "{isa:?}: measured c {worst} ≪ documented {c}"
        );

        // Integer data: exact, plain and prepared; the same bits on 1 and 2 threads.
        let p = problem("mb2ic48ih13iw11oc70kh3ph1", Layout::Nhwc);
        let x = int_data(p.x().span(), 5);
        let w = int_data(p.w().elements(), 6);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let y1 = run_plain(&h, "winograd_2x2", &p, &x, &w);
        common::assert_exact(&p, &y1, &r, "winograd_2x2 allow_bf16");
        let pw = h.prepare_weights(&p, "winograd_2x2", &w).unwrap();
        assert!(pw.is_bf16());
        // K padded to 96, C to 48, 16 positions: half the f32 floats, plus the header.
        assert_eq!(pw.bytes(), (96 * 48 * 16 / 2 + 16) * 4);
        let yp = run_prepared(&h, "winograd_2x2", &p, &x, &pw);
        common::assert_exact(&p, &yp, &r, "winograd_2x2 allow_bf16 prepared");
        let strict = handle(1, isa, MathMode::Strict);
        let e = prepared_err(&strict, "winograd_2x2", &p, &x, &pw);
        assert!(matches!(e, Error::BadParam { ref field, .. } if field == "prepared"));

        // Real data: threads, prepared against plain, and 4x4 and 6x6 unchanged.
        let x = real_data(p.x().span(), 7, 1_000_000);
        let w = real_data(p.w().elements(), 8, 1_000_000);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let y1 = run_plain(&h, "winograd_2x2", &p, &x, &w);
        let y2 = run_plain(
            &handle(2, isa, MathMode::AllowBf16),
            "winograd_2x2",
            &p,
            &x,
            &w,
        );
        assert!(
            y1.iter().zip(&y2).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{isa:?}: bits differ between 1 and 2 threads"
        );
        let pw = h.prepare_weights(&p, "winograd_2x2", &w).unwrap();
        let yp = run_prepared(&h, "winograd_2x2", &p, &x, &pw);
        let tol = c * f32::EPSILON as f64 * 48.0 * 9.0;
        for (what, y) in [("plain", &y1), ("prepared", &yp)] {
            let (diff, _) = errors(&p, y, &r);
            assert!(diff <= tol, "{isa:?} {what}: {diff} > {tol}");
        }
        let strict_y = run_plain(&strict, "winograd_2x2", &p, &x, &w);
        let (d_strict, _) = errors(&p, &strict_y, &r);
        let (d_bf16, _) = errors(&p, &y1, &r);
        assert!(
            d_bf16 > 64.0 * d_strict,
            "{isa:?}: not rounded ({d_bf16} vs {d_strict})"
        );
        for name in ["winograd_4x4", "winograd_6x6"] {
            let a = run_plain(&h, name, &p, &x, &w);
            let b = run_plain(&strict, name, &p, &x, &w);
            assert!(
                a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} {isa:?}: allow_bf16 changed its bits"
            );
        }
    }
}

/// The heuristic's prediction for `winograd_2x2` follows its bf16 pairs: under `allow_bf16`
/// with the bf16 units chosen it predicts less time than under strict math (half the
/// products' time and of the transformed bytes), and the other tile sizes' predictions do
/// not move; the ranking reports each algorithm's bound under the handle's mode.
#[test]
fn heuristic_predicts_bf16_pairs_under_allow_bf16() {
    use autodnn::{Bf16Units, MathMode};
    let p = problem("mb8ic256ih14oc256kh3ph1", Layout::Nchw);
    let ranked = |math: MathMode| {
        let h = Handle::with_threads(1).unwrap();
        h.set_math_mode(math);
        h.set_bf16_units(Bf16Units::Always);
        h.get_conv_algorithms(&p).unwrap()
    };
    let (strict, allow) = (ranked(MathMode::Strict), ranked(MathMode::AllowBf16));
    let find = |r: &[autodnn::select::Ranked], name: &str| {
        r.iter().find(|a| a.algo == name).cloned().unwrap()
    };
    let (s2, a2) = (find(&strict, "winograd_2x2"), find(&allow, "winograd_2x2"));
    assert!(
        a2.predicted_ms < 0.9 * s2.predicted_ms,
        "{} vs {}",
        a2.predicted_ms,
        s2.predicted_ms
    );
    assert_eq!(s2.accuracy, algo("winograd_2x2").accuracy());
    assert_eq!(
        a2.accuracy,
        algo("winograd_2x2").accuracy_under(MathMode::AllowBf16)
    );
    for name in ["winograd_4x4", "winograd_6x6"] {
        assert_eq!(
            find(&strict, name).predicted_ms,
            find(&allow, name).predicted_ms,
            "{name}"
        );
    }
}
