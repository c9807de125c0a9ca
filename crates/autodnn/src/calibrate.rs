//! Calibration of the cost model: every registered algorithm of every operation (forward,
//! backward data, backward filter, backward bias) timed on a fixed set of problems (none of
//! them a layer of a built-in model), and its coefficients fitted per (operation, types,
//! algorithm) ([`crate::select::heuristic`]). `autodnn calibrate` runs it and saves the fit beside the
//! tuning cache.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use crate::desc::{ConvProblem, Layout, OpKind};
use crate::error::Result;
use crate::op::epilogue::EpilogueArgs;
use crate::op::prepared::Weights;
use crate::op::{
    Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, ConvForward, ConvFwdInputs, OpProblem, Registered,
    COST_FEATURES,
};
use crate::problem_string::ProblemSpec;
use crate::select::benchmark::{self, Timer};
use crate::select::cache;
use crate::select::heuristic::{fit_key, fit_relative, median, AlgoFit, Fit, ANY_ALGORITHM};

/// Timed runs per problem and algorithm when calibrating (after one warm-up); the median is
/// fitted.
pub const CALIBRATION_RUNS: usize = 7;

/// Milliseconds from which one timed run (after the warm-up) is taken as the measurement.
pub const SLOW_MS: f64 = 20.0;

/// The calibration problems: varied channels, sizes, kernels 1/3/5/7, strides 1 and 2,
/// grouped, depthwise and dilated, at batch 1 (every other one on a small image at batch 4,
/// and eight mid-sized and small images at batch 8), none of them a layer of a built-in model.
pub fn calibration_problems() -> Vec<ProblemSpec> {
    // (ic, oc, size, kernel, stride, groups, dilation from 0)
    const SET: [(usize, usize, usize, usize, usize, usize, usize); 85] = [
        (16, 32, 47, 1, 1, 1, 0),
        (64, 48, 33, 1, 1, 1, 0),
        (96, 200, 17, 1, 1, 1, 0),
        (320, 160, 9, 1, 1, 1, 0),
        (40, 80, 23, 1, 2, 1, 0),
        (520, 260, 9, 1, 1, 1, 0),
        (200, 400, 19, 1, 1, 1, 0),
        (8, 24, 47, 3, 1, 1, 0),
        (24, 40, 33, 3, 1, 1, 0),
        (48, 96, 23, 3, 1, 1, 0),
        (120, 136, 17, 3, 1, 1, 0),
        (200, 264, 9, 3, 1, 1, 0),
        (40, 72, 33, 3, 2, 1, 0),
        (96, 96, 17, 3, 2, 1, 0),
        (3, 24, 95, 3, 2, 1, 0),
        (160, 192, 19, 3, 2, 1, 0),
        (64, 64, 47, 3, 1, 1, 0),
        (128, 128, 33, 3, 1, 1, 0),
        (256, 256, 17, 3, 1, 1, 0),
        (24, 32, 95, 3, 1, 1, 0),
        (16, 24, 33, 5, 1, 1, 0),
        (48, 64, 17, 5, 1, 1, 0),
        (96, 128, 9, 5, 1, 1, 0),
        (24, 48, 47, 5, 2, 1, 0),
        (64, 96, 19, 5, 2, 1, 0),
        (3, 40, 95, 7, 2, 1, 0),
        (16, 32, 23, 7, 1, 1, 0),
        (64, 64, 9, 7, 1, 1, 0),
        (3, 48, 150, 7, 2, 1, 0),
        (40, 40, 47, 3, 1, 40, 0),
        (72, 72, 33, 3, 2, 72, 0),
        (200, 200, 17, 3, 1, 200, 0),
        (520, 520, 9, 3, 1, 520, 0),
        (96, 96, 23, 5, 1, 96, 0),
        (240, 240, 9, 5, 2, 240, 0),
        (48, 48, 95, 3, 1, 48, 0),
        (144, 144, 47, 3, 2, 144, 0),
        (800, 800, 5, 3, 1, 800, 0),
        (640, 640, 13, 3, 1, 640, 0),
        (960, 960, 7, 3, 1, 960, 0),
        (384, 384, 15, 3, 2, 384, 0),
        (32, 32, 111, 3, 1, 32, 0),
        (320, 320, 21, 3, 1, 320, 0),
        (64, 64, 23, 3, 1, 4, 0),
        (128, 256, 17, 3, 1, 8, 0),
        (48, 48, 23, 3, 1, 1, 1),
        (2048, 40, 3, 1, 1, 1, 0),
        (1000, 24, 1, 1, 1, 1, 0),
        (24, 1000, 1, 1, 1, 1, 0),
        // Deep layers on small images, where per-call filter work weighs most.
        (384, 384, 7, 3, 1, 1, 0),
        (320, 448, 11, 3, 1, 1, 0),
        (768, 512, 5, 3, 1, 1, 0),
        (160, 224, 13, 3, 1, 1, 0),
        (96, 80, 61, 3, 1, 1, 0),
        (48, 64, 71, 3, 1, 1, 0),
        (768, 384, 7, 1, 1, 1, 0),
        (384, 1536, 7, 1, 1, 1, 0),
        (1280, 320, 11, 1, 1, 1, 0),
        (160, 640, 27, 1, 1, 1, 0),
        (96, 384, 41, 1, 1, 1, 0),
        // Strided 1x1 projections and a strided 3x3 on a mid-sized image.
        (256, 512, 29, 1, 2, 1, 0),
        (704, 1408, 13, 1, 2, 1, 0),
        (128, 320, 57, 1, 2, 1, 0),
        (448, 448, 15, 3, 2, 1, 0),
        (32, 96, 119, 3, 2, 1, 0),
        // Few input channels at stride 1 (a network's first layer).
        (3, 32, 127, 3, 1, 1, 0),
        (4, 16, 191, 3, 1, 1, 0),
        // Pointwise layers on large images.
        (48, 192, 57, 1, 1, 1, 0),
        (192, 96, 53, 1, 1, 1, 0),
        (128, 384, 37, 1, 1, 1, 0),
        // Small layers, where fixed costs weigh: narrow projections, small 5x5 and 3x3.
        (528, 24, 13, 1, 1, 1, 0),
        (832, 40, 7, 1, 1, 1, 0),
        (480, 12, 15, 1, 1, 1, 0),
        (24, 56, 13, 5, 1, 1, 0),
        (40, 112, 7, 5, 1, 1, 0),
        (176, 352, 7, 3, 1, 1, 0),
        // Deep 3x3 layers whose transformed filters do not fit the caches.
        (640, 768, 17, 3, 1, 1, 0),
        (448, 896, 23, 3, 1, 1, 0),
        // Atrous 3x3 layers (dilations 2 to 18, "same" padding): the share of products with
        // padding and the sub-images' sizes decide between kn2row and space-to-batch.
        (256, 128, 33, 3, 1, 1, 5),
        (512, 128, 33, 3, 1, 1, 11),
        (256, 256, 33, 3, 1, 1, 17),
        (128, 128, 65, 3, 1, 1, 1),
        (256, 256, 17, 3, 1, 1, 7),
        (128, 128, 65, 3, 1, 1, 15),
        (192, 192, 33, 3, 1, 1, 3),
    ];
    // Training-sized batches: without them the batch-split algorithms
    // (`*_batch`) had a handful of small images each, and a fit of six samples predicted
    // `winograd_6x6_batch` on a 28x28 batch of 8 at a third of its time.
    // (ic, oc, size, kernel, stride) at batch 8.
    const BATCHED: [(usize, usize, usize, usize, usize); 8] = [
        (64, 96, 29, 3, 1),
        (96, 96, 15, 3, 1),
        (48, 48, 57, 3, 1),
        (384, 448, 7, 3, 1),
        (128, 160, 29, 1, 1),
        (256, 320, 15, 1, 1),
        (48, 160, 57, 1, 1),
        (64, 128, 57, 1, 2),
    ];
    let batched = BATCHED
        .iter()
        .map(|&(ic, oc, hw, k, s)| (8, ic, oc, hw, k, s, 1, 0));
    SET.iter()
        .enumerate()
        .map(|(i, &(ic, oc, hw, k, s, g, d))| {
            // Every other small image at batch 4, where the batch-split algorithms run.
            let mb = if hw <= 17 && i % 2 == 0 { 4 } else { 1 };
            (mb, ic, oc, hw, k, s, g, d)
        })
        .chain(batched)
        .enumerate()
        .map(|(i, (mb, ic, oc, hw, k, s, g, d))| {
            let pad = (k - 1) * (d + 1) / 2;
            let text =
                format!("mb{mb}g{g}ic{ic}ih{hw}oc{oc}kh{k}sh{s}ph{pad}dh{d}n\"calibration:{i}\"");
            ProblemSpec::parse(&text).expect("calibration problems are valid")
        })
        .collect()
}

/// What a calibration measures: its problems and the timed runs of each (after one warm-up).
#[derive(Debug, Clone)]
pub struct CalibrationSet {
    /// The problems, in the order they are measured.
    pub problems: Vec<ProblemSpec>,
    /// Timed runs per problem and algorithm (a run of [`SLOW_MS`] or more is measured once).
    pub runs: usize,
}

impl CalibrationSet {
    /// Every [`calibration_problems`] problem, [`CALIBRATION_RUNS`] timed runs: the fit the
    /// heuristic is meant to use.
    pub fn full() -> Self {
        Self {
            problems: calibration_problems(),
            runs: CALIBRATION_RUNS,
        }
    }

    /// A check of calibration from end to end in a small fraction of its time (tests, memory
    /// checkers): the cheapest calibration problems (by FLOPs) on which every registered
    /// algorithm of every operation runs at least once, one timed run each. Its fit has a
    /// sample or two per algorithm: coarse, not the one to select with.
    ///
    /// # Errors
    /// None in practice: the calibration problems are valid.
    pub fn quick() -> Result<Self> {
        let mut all = calibration_problems()
            .into_iter()
            .map(|spec| {
                let p = spec.to_problem(Layout::Nchw)?;
                Ok((p.flops(), spec, accepting(&p)?))
            })
            .collect::<Result<Vec<_>>>()?;
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut covered = std::collections::BTreeSet::new();
        let mut problems = Vec::new();
        for (_, spec, keys) in all {
            if keys.iter().any(|k| !covered.contains(k)) {
                covered.extend(keys);
                problems.push(spec);
            }
        }
        Ok(Self { problems, runs: 1 })
    }
}

/// The fit keys of every algorithm, of every operation, that accepts the forward problem `p`
/// (or the backward problem made from it).
fn accepting(p: &ConvProblem) -> Result<Vec<String>> {
    fn of<O: Registered<Problem = ConvProblem>>(p: &ConvProblem, keys: &mut Vec<String>) {
        for &a in O::algorithms() {
            if Algorithm::<O>::check(a, p).is_ok() {
                keys.push(fit_key(p.op_tag(), &p.types(), a.name()));
            }
        }
    }
    let mut keys = Vec::new();
    of::<ConvForward>(p, &mut keys);
    of::<ConvBackwardData>(&p.for_op(OpKind::ConvBackwardData)?, &mut keys);
    of::<ConvBackwardFilter>(&p.for_op(OpKind::ConvBackwardFilter)?, &mut keys);
    of::<ConvBackwardBias>(&p.for_op(OpKind::ConvBackwardBias)?, &mut keys);
    Ok(keys)
}

/// One measurement of a calibration run.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationSample {
    /// The problem (benchdnn string).
    pub problem: String,
    /// The algorithm.
    pub algo: String,
    /// Median measured milliseconds.
    pub ms: f64,
    /// What the fitted model predicts.
    pub predicted_ms: f64,
}

/// The result of [`calibrate`]: the fit and the measurements behind it.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The fitted coefficients.
    pub fit: Fit,
    /// Every measurement, with its prediction.
    pub samples: Vec<CalibrationSample>,
    /// Wall time of the calibration, in milliseconds.
    pub wall_ms: f64,
}

/// One measurement: the cost features, the median ms and the problem string.
type Row = ([f64; COST_FEATURES], f64, String);

/// Times every registered algorithm of `O` that accepts `p` and adds a row under its fit key.
fn measure<O: Registered<Problem = ConvProblem>>(
    env: &crate::select::Env<'_>,
    p: &ConvProblem,
    inputs: &O::Inputs<'_>,
    name: &str,
    runs: usize,
    rows: &mut BTreeMap<String, Vec<Row>>,
) -> Result<()> {
    let mut timer = Timer::<O>::new(env, p, inputs)?;
    for &a in O::algorithms() {
        if Algorithm::<O>::check(a, p).is_err() {
            continue;
        }
        // A slow run is measured once more only: its median would move the fit little and
        // cost seconds (the direct backward algorithms on the larger problems).
        let ms = timer.median_of(a, 1).and_then(|first| {
            if first >= SLOW_MS || runs <= 1 {
                Ok(first)
            } else {
                timer.median_of(a, runs)
            }
        });
        if let Ok(ms) = ms {
            let key = fit_key(p.op_tag(), &p.types(), a.name());
            rows.entry(key).or_default().push((
                Algorithm::<O>::cost_features(a, p),
                ms,
                name.to_string(),
            ));
        }
    }
    Ok(())
}

/// Measures every registered algorithm on every calibration problem it accepts (one warm-up,
/// then [`CALIBRATION_RUNS`] timed runs, median) with `handle`'s threads and instruction set,
/// and fits each algorithm's coefficients. `progress` is called after each problem with
/// (done, total).
///
/// # Errors
/// Allocation failures for the test data.
pub fn calibrate(
    handle: &crate::Handle,
    progress: impl FnMut(usize, usize),
) -> Result<Calibration> {
    calibrate_on(handle, &CalibrationSet::full(), progress)
}

/// [`calibrate`] on the problems of `set`, with its number of timed runs.
///
/// ```no_run
/// use autodnn::calibrate::{calibrate_on, CalibrationSet};
/// let handle = autodnn::Handle::new()?;
/// let cal = calibrate_on(&handle, &CalibrationSet::quick()?, |_, _| {})?;
/// assert!(!cal.fit.algorithms.is_empty());
/// # Ok::<(), autodnn::Error>(())
/// ```
///
/// # Errors
/// Allocation failures for the test data.
pub fn calibrate_on(
    handle: &crate::Handle,
    set: &CalibrationSet,
    mut progress: impl FnMut(usize, usize),
) -> Result<Calibration> {
    let start = Instant::now();
    let problems = &set.problems;
    let runs = set.runs;
    let env = handle.env();
    let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (i, spec) in problems.iter().enumerate() {
        let p = spec.to_problem(Layout::Nchw)?;
        let x = benchmark::test_data(p.x().span(), 1)?;
        let w = benchmark::test_data(p.w().elements(), 2)?;
        let dy = benchmark::test_data(p.y().span(), 3)?;
        let name = spec.with_name("").to_string();
        let inputs = ConvFwdInputs::new(&x, Weights::Plain(&w), EpilogueArgs::default());
        measure::<ConvForward>(&env, &p, &inputs, &name, runs, &mut rows)?;
        let pd = p.for_op(OpKind::ConvBackwardData)?;
        measure::<ConvBackwardData>(
            &env,
            &pd,
            &ConvBwdDataInputs::new(&dy, &w),
            &name,
            runs,
            &mut rows,
        )?;
        let pf = p.for_op(OpKind::ConvBackwardFilter)?;
        let fi = ConvBwdFilterInputs::new(&x, &dy);
        measure::<ConvBackwardFilter>(&env, &pf, &fi, &name, runs, &mut rows)?;
        let pb = p.for_op(OpKind::ConvBackwardBias)?;
        measure::<ConvBackwardBias>(
            &env,
            &pb,
            &ConvBwdBiasInputs::new(&dy),
            &name,
            runs,
            &mut rows,
        )?;
        progress(i + 1, problems.len());
    }
    let mut fit = Fit {
        cpu: cache::cpu_model(),
        isa: handle.isa(),
        threads: handle.threads(),
        library_version: crate::VERSION.into(),
        algorithms: BTreeMap::new(),
    };
    let mut samples = Vec::new();
    for (name, rows) in &rows {
        let a: Vec<[f64; COST_FEATURES]> = rows.iter().map(|r| r.0).collect();
        let t: Vec<f64> = rows.iter().map(|r| r.1).collect();
        let coef = fit_relative(&a, &t);
        let mut f = AlgoFit {
            coef: coef.to_vec(),
            samples: rows.len(),
            median_rel_err: 0.0,
            max_rel_err: 0.0,
        };
        let mut errs = Vec::new();
        for (features, ms, problem) in rows {
            let pred = f.predict(features);
            errs.push((pred - ms).abs() / ms.max(1e-9));
            samples.push(CalibrationSample {
                problem: problem.clone(),
                algo: name.to_string(),
                ms: *ms,
                predicted_ms: pred,
            });
        }
        errs.sort_by(f64::total_cmp);
        f.median_rel_err = median(&errs);
        f.max_rel_err = errs.last().copied().unwrap_or(0.0);
        fit.algorithms.insert(name.to_string(), f);
    }
    if !fit.algorithms.is_empty() {
        let any = AlgoFit {
            coef: (0..COST_FEATURES)
                .map(|i| {
                    let mut v: Vec<f64> = fit.algorithms.values().map(|a| a.coef[i]).collect();
                    v.sort_by(f64::total_cmp);
                    median(&v)
                })
                .collect(),
            samples: 0,
            median_rel_err: 0.0,
            max_rel_err: 0.0,
        };
        fit.algorithms.insert(ANY_ALGORITHM.into(), any);
    }
    Ok(Calibration {
        fit,
        samples,
        wall_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Isa;
    use crate::select::heuristic::Machine;
    use crate::select::CostModel;

    #[test]
    fn shipped_model_parses_and_predicts_positive_times() {
        let m = CostModel::shipped();
        assert_eq!(m.origin, "shipped");
        assert!(!m.fits.is_empty(), "the shipped model has a fit");
        let cfg = Machine {
            cpu: "x".into(),
            isa: Isa::Scalar,
            threads: 3,
        };
        let p = calibration_problems()[0].to_problem(Layout::Nchw).unwrap();
        for a in crate::conv::algorithms() {
            assert!(m.predict_ms::<ConvForward>(*a, &p, &cfg) > 0.0);
        }
    }
}
