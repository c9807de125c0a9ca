//! `fft` and `fft_tiling`: the problems they must accept and decline, the normwise error bound
//! measured on random real data across channel counts, the integer bound on large problems,
//! exact workspace refusal, prepared weights, several passes (batches and tiles beyond one
//! pass) and every ISA path.

mod common;

use autodnn::conv::{self, Accuracy, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::{reference, ConvProblem, Error, Handle, Layout};
use common::{
    algo, assert_integer_bound, errors, int_data, prepared_err, problem, real_data, run_plain,
    run_prepared,
};

const ALGOS: [&str; 2] = ["fft", "fft_tiling"];

#[test]
fn accepts_what_it_should() {
    let cases = [
        "mb1ic64ih56oc64kh9ph4",
        "mb1ic64ih56oc64kh5ph2",
        "mb1ic128ih28oc128kh11ph5",
        "mb1ic3ih224oc64kh7ph3",
        "mb2g2ic32ih20oc16kh3ph1",
        "mb1ic8ih30oc8kh3ph2dh1",
        "mb1ic8ih13iw40oc4kh1kw7pw3",
        "mb1ic8ih13iw40oc4kh5kw1ph2",
        "mb1ic4ih9oc4kh9ph0",
        "mb1g8ic8ih16oc8kh3ph1",
    ];
    for name in ALGOS {
        for s in cases {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let p = problem(s, layout);
                assert_eq!(algo(name).check(&p), Ok(()), "{name} on {s}");
                let mode = autodnn::ConvMode::Convolution;
                let pc =
                    ConvProblem::forward(*p.x(), *p.w(), p.conv().with_mode(mode), *p.y()).unwrap();
                assert_eq!(algo(name).check(&pc), Ok(()), "{name} on {s} {mode:?}");
            }
        }
    }
    // The whole-image transform takes any kernel extent.
    let p = problem("mb1ic2ih64oc2kh21ph10dh1", Layout::Nchw);
    assert_eq!(algo("fft").check(&p), Ok(()));
}

#[test]
fn declines_with_reasons() {
    for name in ALGOS {
        let strided = problem("mb1ic16ih28oc16kh3sh2ph1", Layout::Nchw);
        let e = algo(name).check(&strided).unwrap_err();
        assert!(e.contains("stride 1"), "{name}: {e}");
        let pointwise = problem("mb1ic16ih28oc16kh1ph0", Layout::Nchw);
        let e = algo(name).check(&pointwise).unwrap_err();
        assert!(e.contains("1x1"), "{name}: {e}");
    }
    let wide = problem("mb1ic2ih64oc2kh21ph10dh1", Layout::Nchw);
    let e = algo("fft_tiling").check(&wide).unwrap_err();
    assert!(e.contains("extent"), "{e}");
}

/// The normwise constant c, measured: max|y − ref| / (ε · C·R·S · max|x| · max|w|) on random
/// real data in [−1, 1], across channel counts, kernel sizes and image sizes, must stay
/// within the documented c (the measured values are printed with --nocapture).
#[test]
fn normwise_bound_holds_across_channel_counts() {
    let h = Handle::with_threads(2).unwrap();
    let eps = f32::EPSILON as f64;
    for name in ALGOS {
        let Accuracy::Normwise { c, .. } = algo(name).accuracy() else {
            panic!("{name} must document a normwise bound");
        };
        let mut worst = 0.0f64;
        for (i, s) in [
            "mb1ic1ih40oc4kh3ph1",
            "mb1ic1ih8iw500oc2kh1kw2ph0pw0",
            "mb1ic1ih3iw2047oc1kh1kw2ph0pw0",
            "mb1ic1ih200iw200oc1kh2kw2ph0pw0",
            "mb1ic1ih300iw5oc2kh2kw1ph0pw0",
            "mb1ic1ih120oc2kh2ph0",
            "mb2ic2ih64oc2kh3ph1dh2",
            "mb1ic4ih40oc4kh5ph2",
            "mb1ic16ih40oc4kh5ph2",
            "mb1ic64ih28oc4kh9ph4",
            "mb1ic64ih56oc2kh9ph4",
            "mb1ic256ih28oc2kh5ph2",
            "mb1ic128ih20oc2kh11ph5",
            "mb1ic2ih64oc2kh15ph7",
        ]
        .iter()
        .enumerate()
        {
            let p = problem(s, Layout::Nchw);
            if algo(name).check(&p).is_err() {
                continue;
            }
            let x = real_data(p.x().span(), 10 + i as u64, 100_000);
            let w = real_data(p.w().elements(), 20 + i as u64, 100_000);
            let r = reference::conv_forward(&p, &x, &w).unwrap();
            let y = run_plain(&h, name, &p, &x, &w);
            let (diff, _) = errors(&p, &y, &r);
            let mx = x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            let mw = w.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            let terms = (p.c_per_group() * p.w().r() * p.w().s()) as f64;
            let measured = diff / (eps * terms * mx * mw);
            eprintln!("{name} {s}: c = {measured:.4}");
            worst = worst.max(measured);
            assert!(measured <= c, "{name} {s}: measured c = {measured} > {c}");
        }
        eprintln!("{name}: largest measured c = {worst:.4} (documented {c})");
        assert!(worst > 0.0);
    }
}

/// On integer data in [−4, 4] the error stays within 1e-4 · max|ref|, on large problems too
/// (many channels, large kernels, dilation, a large image), on every ISA path.
#[test]
fn integer_bound_holds_on_large_problems() {
    for (i, s) in [
        "mb1ic512ih14oc2kh7ph3",
        "mb1ic64ih56oc2kh9ph4",
        "mb1ic32ih120oc2kh3ph1",
        "mb1ic16ih40oc4kh5ph4dh1",
        "mb1ic4ih33iw70oc3kh13kw13ph6pw6",
    ]
    .iter()
    .enumerate()
    {
        let p = problem(s, Layout::Nhwc);
        let x = int_data(p.x().span(), 100 + i as u64);
        let w = int_data(p.w().elements(), 200 + i as u64);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            let h = Handle::with_threads(2).unwrap();
            h.set_isa_cap(isa);
            for name in ALGOS {
                if algo(name).check(&p).is_err() {
                    continue;
                }
                assert_integer_bound(&h, name, &p, &x, &w, &r, &format!("{s} {isa:?}"));
            }
        }
    }
}

/// Batches beyond one pass of `fft` (8 images) and more tiles than one pass of `fft_tiling`
/// (16), with a bias, a residual and both layouts.
#[test]
fn several_passes_and_epilogues() {
    let h = Handle::with_threads(2).unwrap();
    for (i, s) in ["mb11ic6ih19iw23oc5kh5kw3ph2pw1", "mb2ic5ih90iw70oc3kh3ph1"]
        .iter()
        .enumerate()
    {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = problem(s, layout).with_epilogue(conv::Epilogue {
                bias: true,
                residual: true,
                act: conv::Activation::Relu,
            });
            let x = int_data(p.x().span(), 300 + i as u64);
            let w = int_data(p.w().elements(), 400 + i as u64);
            let bias = int_data(p.w().k(), 7);
            let z = int_data(p.y().span(), 8);
            let r =
                reference::conv_forward_fused(&p, &x, &w, 2.0, 1.0, Some(&bias), Some(&z)).unwrap();
            let conv_ref = reference::conv_forward(&p, &x, &w).unwrap();
            let conv_max = conv_ref.iter().fold(0f64, |m, v| m.max(v.abs()));
            for name in ALGOS {
                let mut y = vec![f32::NAN; p.y().span()];
                let epi = EpilogueArgs::new(2.0, 1.0)
                    .with_bias(&bias)
                    .with_residual(&z);
                h.conv_forward_ex(&p, name, &x, Weights::Plain(&w), &mut y, &epi, None)
                    .unwrap();
                let (diff, _) = errors(&p, &y, &r);
                assert!(
                    diff <= 2.0 * 1e-4 * conv_max,
                    "{name} {s} {layout:?}: {diff}"
                );
            }
        }
    }
}

#[test]
fn one_byte_less_workspace_is_refused() {
    let h = Handle::with_threads(1).unwrap();
    let p = problem("mb2ic8ih20oc8kh5ph2", Layout::Nchw);
    let x = int_data(p.x().span(), 1);
    let w = int_data(p.w().elements(), 2);
    for name in ALGOS {
        let need = h.conv_workspace_size(&p, name).unwrap();
        assert!(need > 0);
        let mut y = vec![0.0; p.y().span()];
        let mut ws = vec![0u8; need - 1];
        let e = h
            .conv_forward_with_workspace(&p, name, &x, &w, &mut y, &mut ws)
            .unwrap_err();
        match e {
            Error::WorkspaceTooSmall { needed, got, .. } => {
                assert_eq!((needed, got), (need, need - 1));
            }
            other => panic!("{name}: {other:?}"),
        }
        let mut ws = vec![0u8; need];
        h.conv_forward_with_workspace(&p, name, &x, &w, &mut y, &mut ws)
            .unwrap();
    }
}

/// The tiled algorithm's workspace does not grow with the image (its transform side is at
/// most 64); the whole-image one's does.
#[test]
fn tiling_bounds_the_workspace() {
    let h = Handle::with_threads(1).unwrap();
    let ws = |s: &str, a: &str| h.conv_workspace_size(&problem(s, Layout::Nchw), a).unwrap();
    // Spectra of 16 tiles' 32 channels on a 64×64 grid, and the filter's 16×16 channels.
    let bound = (16 * 32 + 16 * 16) * 64 * 33 * 8;
    for side in [100, 400, 1000] {
        let s = format!("mb1ic16ih{side}oc16kh5ph2");
        assert!(ws(&s, "fft_tiling") <= bound, "{s}");
    }
    assert_eq!(
        ws("mb1ic16ih500oc16kh5ph2", "fft_tiling"),
        ws("mb1ic16ih1000oc16kh5ph2", "fft_tiling")
    );
    assert!(ws("mb1ic16ih1000oc16kh5ph2", "fft") > 8 * bound);
}

/// Prepared weights give the same bits as plain calls, cost the documented spectra, and are
/// refused for another problem.
#[test]
fn prepared_weights_match_plain_calls() {
    let h = Handle::with_threads(2).unwrap();
    for (i, s) in ["mb3g2ic12ih17iw21oc10kh5kw3ph2pw1", "mb1ic24ih30oc20kh7ph3"]
        .iter()
        .enumerate()
    {
        let p = problem(s, Layout::Nchw);
        let x = int_data(p.x().span(), 500 + i as u64);
        let w = int_data(p.w().elements(), 600 + i as u64);
        for name in ALGOS {
            let plain = run_plain(&h, name, &p, &x, &w);
            let prepared = h.prepare_weights(&p, name, &w).unwrap();
            assert!(prepared.is_transformed());
            // At least K·C/g·nh·(nw/2+1) complex values for a grid covering the kernel.
            let (r, c) = (p.w().r(), p.w().s());
            assert!(prepared.bytes() >= p.w().elements() / (r * c) * r * (c / 2 + 1) * 8);
            let y = run_prepared(&h, name, &p, &x, &prepared);
            assert!(
                y.iter()
                    .zip(&plain)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} {s}: prepared and plain calls differ"
            );
            let other = problem("mb1ic24ih31oc20kh7ph3", Layout::Nchw);
            let xo = int_data(other.x().span(), 1);
            let e = prepared_err(&h, name, &other, &xo, &prepared);
            assert!(matches!(e, Error::BadParam { .. }), "{e:?}");
        }
    }
}
