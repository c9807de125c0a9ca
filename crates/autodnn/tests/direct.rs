//! `direct` must be exact on integer data against the f64 reference, on every ISA path this
//! machine has and on any thread count, with identical bits across thread counts.

mod common;

use autodnn::cpu::Isa;
use autodnn::{reference, ConvProblem, Handle};
use common::{assert_exact, int_data, random_problem, Rng};

fn handles() -> Vec<(Isa, usize, Handle)> {
    let mut out = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2] {
            let mut h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            assert_eq!(h.isa(), isa);
            out.push((isa, threads, h));
        }
    }
    out
}

fn run(h: &Handle, p: &ConvProblem, x: &[f32], w: &[f32]) -> Vec<f32> {
    // NaN in y: every element of the tensor must be written.
    let mut y = vec![f32::NAN; p.y().span()];
    h.conv_forward(p, "direct", x, w, &mut y).unwrap();
    y
}

#[test]
fn direct_is_exact_and_thread_count_invariant_on_random_problems() {
    let handles = handles();
    let mut rng = Rng(0x5eed);
    for case in 0..400 {
        let p = random_problem(&mut rng);
        let x = int_data(p.x().span(), case);
        let w = int_data(p.w().elements(), case + 1000);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let mut by_isa: Vec<(Isa, Vec<f32>)> = Vec::new();
        for (isa, threads, h) in &handles {
            let y = run(h, &p, &x, &w);
            assert_exact(
                &p,
                &y,
                &r,
                &format!("case {case} {isa:?} {threads} threads"),
            );
            if let Some((_, y1)) = by_isa.iter().find(|(i, _)| i == isa) {
                let same = y1
                    .iter()
                    .zip(&y)
                    .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(
                    same,
                    "case {case} {isa:?}: bits differ between thread counts"
                );
            } else {
                by_isa.push((*isa, y));
            }
        }
    }
}

#[test]
fn direct_matches_reference_on_real_data_within_rounding() {
    // Real-valued data in [-1, 1]: not exact, but within a sum-of-magnitudes bound.
    let handles = handles();
    let mut rng = Rng(77);
    for case in 0..60 {
        let p = random_problem(&mut rng);
        let x: Vec<f32> = (0..p.x().span())
            .map(|_| rng.range(-1000, 1000) as f32 / 1000.0)
            .collect();
        let w: Vec<f32> = (0..p.w().elements())
            .map(|_| rng.range(-1000, 1000) as f32 / 1000.0)
            .collect();
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let terms = (p.c_per_group() * p.w().r() * p.w().s()) as f64;
        let bound = 2.0 * terms * f32::EPSILON as f64;
        for (_, _, h) in &handles {
            let y = run(h, &p, &x, &w);
            let [n, k, oh, ow] = p.y().dims();
            for b in 0..n {
                for c in 0..k {
                    for i in 0..oh {
                        for j in 0..ow {
                            let o = p.y().offset(b, c, i, j);
                            assert!(
                                (y[o] as f64 - r[o]).abs() <= bound,
                                "case {case}: {} vs {}",
                                y[o],
                                r[o]
                            );
                        }
                    }
                }
            }
        }
    }
}
