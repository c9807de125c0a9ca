//! The heuristic (cuDNN's `Get`): every algorithm that accepts a problem, ranked by the time a
//! linear cost model predicts, without running anything.
//!
//! An algorithm's predicted time is Σ coef\[i\] · feature\[i\] over its
//! [`ConvAlgorithm::cost_features`]; the coefficients are fitted per algorithm, by
//! non-negative least squares on relative error, from measurements of a fixed calibration set
//! ([`calibration_problems`], which shares no layer with the built-in models). Coefficients are
//! data keyed by algorithm name: a [`CostModel`] file beside the tuning cache written by
//! `autodnn calibrate`, or the defaults shipped in the library (fitted on the development
//! machine) when the machine is uncalibrated. An algorithm without coefficients of its own gets
//! the fit's `"*"` entry (the element-wise median of the fitted algorithms).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::conv::{ConvAlgorithm, COST_FEATURES};
use crate::cpu::Isa;
use crate::desc::{ConvProblem, Layout};
use crate::error::{Error, Result};
use crate::problem_string::ProblemSpec;

/// The `format` field of a cost-model file.
pub const COST_MODEL_FORMAT: &str = "autodnn-cost-model";
/// The version of the cost-model file format this build reads and writes.
pub const COST_MODEL_VERSION: u32 = 3;
/// Timed runs per problem and algorithm when calibrating (after one warm-up); the median is
/// fitted.
pub const CALIBRATION_RUNS: usize = 7;
/// Predictions within this fraction of each other count as a tie, which the ranking breaks in
/// favour of the candidate with less workspace.
pub const PREDICTION_TIE: f64 = 0.03;
/// The name of the entry used for algorithms without coefficients of their own.
pub const ANY_ALGORITHM: &str = "*";

const SHIPPED: &str = include_str!("../../data/cost_model.json");

/// Coefficients of one algorithm and how well they fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlgoFit {
    /// One coefficient per cost feature, in ms per unit.
    pub coef: Vec<f64>,
    /// Measurements fitted.
    pub samples: usize,
    /// Median of |predicted − measured| / measured over the samples.
    pub median_rel_err: f64,
    /// Largest such error.
    pub max_rel_err: f64,
}

impl AlgoFit {
    fn predict(&self, f: &[f64; COST_FEATURES]) -> f64 {
        self.coef.iter().zip(f).map(|(c, v)| c * v).sum()
    }
}

/// Coefficients fitted on one machine, at one thread count and instruction set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The CPU's model string.
    pub cpu: String,
    /// The instruction set the kernels used.
    pub isa: Isa,
    /// Worker threads.
    pub threads: usize,
    /// The library version that measured.
    pub library_version: String,
    /// Coefficients by algorithm name (and [`ANY_ALGORITHM`]).
    pub algorithms: BTreeMap<String, AlgoFit>,
}

/// The cost model: fits for one or more machine configurations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    format: String,
    version: u32,
    /// The fits, one per (cpu, isa, threads).
    pub fits: Vec<Fit>,
    /// Where it was read from (`shipped` for the built-in defaults).
    #[serde(skip)]
    pub origin: String,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel::shipped()
    }
}

impl CostModel {
    /// A model holding `fits`.
    pub fn new(fits: Vec<Fit>) -> CostModel {
        CostModel {
            format: COST_MODEL_FORMAT.into(),
            version: COST_MODEL_VERSION,
            fits,
            origin: "memory".into(),
        }
    }

    /// The defaults shipped with the library.
    pub fn shipped() -> CostModel {
        let mut m = CostModel::parse(SHIPPED).unwrap_or_else(|_| CostModel::new(Vec::new()));
        m.origin = "shipped".into();
        m
    }

    /// Parses a cost-model file's text.
    ///
    /// # Errors
    /// [`Error::Io`] naming `cost model` for bad JSON, another format or version.
    pub fn parse(text: &str) -> Result<CostModel> {
        let bad = |m: String| Error::Io {
            path: "cost model".into(),
            message: m,
        };
        let m: CostModel = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if m.format != COST_MODEL_FORMAT || m.version != COST_MODEL_VERSION {
            return Err(bad(format!(
                "format {:?} version {}, this build reads {COST_MODEL_FORMAT:?} version \
                 {COST_MODEL_VERSION}",
                m.format, m.version
            )));
        }
        for fit in &m.fits {
            for (name, a) in &fit.algorithms {
                if a.coef.len() != COST_FEATURES || a.coef.iter().any(|c| !c.is_finite()) {
                    return Err(bad(format!(
                        "algorithm {name}: expected {COST_FEATURES} finite coefficients"
                    )));
                }
            }
        }
        Ok(m)
    }

    /// Reads a cost-model file.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read or parsed.
    pub fn load(path: &Path) -> Result<CostModel> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let mut m = CostModel::parse(&text).map_err(|e| match e {
            Error::Io { message, .. } => Error::Io {
                path: path.display().to_string(),
                message,
            },
            e => e,
        })?;
        m.origin = path.display().to_string();
        Ok(m)
    }

    /// Writes the model atomically (temporary file and rename), creating the directory.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        super::cache::write_atomically(path, text.as_bytes())
    }

    /// Adds `fit`, replacing one for the same cpu, isa and thread count.
    pub fn insert(&mut self, fit: Fit) {
        self.fits
            .retain(|f| !(f.cpu == fit.cpu && f.isa == fit.isa && f.threads == fit.threads));
        self.fits.push(fit);
    }

    /// The fit that best matches the configuration, and the factor its time-proportional terms
    /// are scaled by (its threads / `threads`, when only another thread count was fitted).
    fn fit_for(&self, cpu: &str, isa: Isa, threads: usize) -> Option<(&Fit, f64)> {
        let score = |f: &Fit| {
            (f.threads == threads) as u8 * 4 + (f.isa == isa) as u8 * 2 + (f.cpu == cpu) as u8
        };
        let best = self.fits.iter().max_by_key(|f| score(f))?;
        Some((best, best.threads as f64 / threads.max(1) as f64))
    }

    /// Predicted milliseconds of `algo` on `p`.
    pub fn predict_ms(&self, algo: &dyn ConvAlgorithm, p: &ConvProblem, cfg: &Machine) -> f64 {
        let f = algo.cost_features(p);
        match self.fit_for(&cfg.cpu, cfg.isa, cfg.threads) {
            Some((fit, scale)) => {
                let a = fit
                    .algorithms
                    .get(algo.name())
                    .or_else(|| fit.algorithms.get(ANY_ALGORITHM));
                match a {
                    Some(a) => {
                        let fixed = a.coef[0] * f[0];
                        fixed + (a.predict(&f) - fixed) * scale
                    }
                    None => fallback_predict(&f, cfg.threads),
                }
            }
            None => fallback_predict(&f, cfg.threads),
        }
    }
}

/// Prediction without any fit: 10 GFLOP/s per thread, 5 GB/s.
fn fallback_predict(f: &[f64; COST_FEATURES], threads: usize) -> f64 {
    let per_thread =
        f[1] * 100.0 + f[2] * 0.2 + f[3] * 0.2 + f[4] * 100.0 + f[5] * 100.0 + f[7] * 100.0;
    0.01 + (per_thread + f[6] * 0.1) / threads.max(1) as f64
}

/// What a prediction or a tuning-cache key depends on besides the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPU model string.
    pub cpu: String,
    /// Instruction set kernels use.
    pub isa: Isa,
    /// Worker threads.
    pub threads: usize,
}

/// The default path of the cost-model file: `cost_model.json` beside the tuning cache at
/// [`crate::default_cache_path`].
pub fn default_cost_model_path() -> PathBuf {
    cost_model_path_beside(&crate::default_cache_path())
}

/// `cost_model.json` in the directory of `cache_path`.
pub fn cost_model_path_beside(cache_path: &Path) -> PathBuf {
    cache_path.with_file_name("cost_model.json")
}

/// The calibration problems: varied channels, sizes, kernels 1/3/5/7, strides 1 and 2,
/// grouped, depthwise and dilated, at batch 1, none of them a layer of a built-in model.
pub fn calibration_problems() -> Vec<ProblemSpec> {
    // (ic, oc, size, kernel, stride, groups, dilation from 0)
    const SET: [(usize, usize, usize, usize, usize, usize, usize); 78] = [
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
    ];
    SET.iter()
        .enumerate()
        .map(|(i, &(ic, oc, hw, k, s, g, d))| {
            let pad = (k - 1) * (d + 1) / 2;
            let text =
                format!("mb1g{g}ic{ic}ih{hw}oc{oc}kh{k}sh{s}ph{pad}dh{d}n\"calibration:{i}\"");
            ProblemSpec::parse(&text).expect("calibration problems are valid")
        })
        .collect()
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

/// Measures every registered algorithm on every calibration problem it accepts (one warm-up,
/// then [`CALIBRATION_RUNS`] timed runs, median) with `handle`'s threads and instruction set,
/// and fits each algorithm's coefficients. `progress` is called after each problem with
/// (done, total).
///
/// # Errors
/// Allocation failures for the test data.
pub fn calibrate(
    handle: &crate::Handle,
    mut progress: impl FnMut(usize, usize),
) -> Result<Calibration> {
    let start = Instant::now();
    let problems = calibration_problems();
    let algos = crate::conv::algorithms();
    let mut rows: BTreeMap<&'static str, Vec<Row>> = BTreeMap::new();
    for (i, spec) in problems.iter().enumerate() {
        let p = spec.to_problem(Layout::Nchw)?;
        let x = super::benchmark::test_data(p.x().span(), 1)?;
        let w = super::benchmark::test_data(p.w().elements(), 2)?;
        let mut timer = super::benchmark::Timer::new(handle, &p, &x, &w, &Default::default())?;
        for &a in algos {
            if a.check(&p).is_err() {
                continue;
            }
            if let Ok(ms) = timer.median_of(a, CALIBRATION_RUNS) {
                rows.entry(a.name()).or_default().push((
                    a.cost_features(&p),
                    ms,
                    spec.with_name("").to_string(),
                ));
            }
        }
        progress(i + 1, problems.len());
    }
    let mut fit = Fit {
        cpu: super::cache::cpu_model(),
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

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Non-negative coefficients minimising Σ ((a·coef − t) / t)²: the relative error, so that
/// small layers count as much as big ones.
pub fn fit_relative(a: &[[f64; COST_FEATURES]], t: &[f64]) -> [f64; COST_FEATURES] {
    let rows: Vec<[f64; COST_FEATURES]> = a
        .iter()
        .zip(t)
        .map(|(r, &ti)| {
            let w = 1.0 / ti.max(1e-9);
            r.map(|v| v * w)
        })
        .collect();
    let ones = vec![1.0; rows.len()];
    nnls(&rows, &ones)
}

/// Non-negative least squares (Lawson and Hanson's active-set method): x ≥ 0 minimising
/// ‖A x − b‖².
pub fn nnls<const N: usize>(a: &[[f64; N]], b: &[f64]) -> [f64; N] {
    // Scale the columns to unit norm so that features of different units condition alike.
    let mut scale = [1.0f64; N];
    for (j, s) in scale.iter_mut().enumerate() {
        let norm = a.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
        if norm > 0.0 && norm.is_finite() {
            *s = norm;
        }
    }
    let a: Vec<[f64; N]> = a
        .iter()
        .map(|r| {
            let mut o = *r;
            for j in 0..N {
                o[j] /= scale[j];
            }
            o
        })
        .collect();
    let gradient = |x: &[f64; N]| {
        let mut w = [0.0f64; N];
        for (r, bi) in a.iter().zip(b) {
            let res = bi - r.iter().zip(x).map(|(p, q)| p * q).sum::<f64>();
            for j in 0..N {
                w[j] += r[j] * res;
            }
        }
        w
    };
    let tol = 1e-12;
    let mut x = [0.0f64; N];
    let mut passive = [false; N];
    for _ in 0..3 * N + 3 {
        let w = gradient(&x);
        let Some(t) = (0..N)
            .filter(|&j| !passive[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]))
        else {
            break;
        };
        passive[t] = true;
        for _ in 0..3 * N + 3 {
            let s = least_squares_on(&a, b, &passive);
            if (0..N).filter(|&j| passive[j]).all(|j| s[j] > tol) {
                x = s;
                break;
            }
            let mut alpha = 1.0f64;
            for j in 0..N {
                if passive[j] && s[j] <= tol {
                    let d = x[j] - s[j];
                    if d > 0.0 {
                        alpha = alpha.min(x[j] / d);
                    }
                }
            }
            for j in 0..N {
                x[j] += alpha * (s[j] - x[j]);
                if passive[j] && x[j] <= tol {
                    passive[j] = false;
                    x[j] = 0.0;
                }
            }
            if !passive.iter().any(|&p| p) {
                break;
            }
        }
    }
    let mut out = [0.0f64; N];
    for j in 0..N {
        out[j] = (x[j] / scale[j]).max(0.0);
    }
    out
}

/// Unconstrained least squares on the passive columns (the others held at 0), by the normal
/// equations with a tiny ridge.
fn least_squares_on<const N: usize>(a: &[[f64; N]], b: &[f64], passive: &[bool; N]) -> [f64; N] {
    let idx: Vec<usize> = (0..N).filter(|&j| passive[j]).collect();
    let n = idx.len();
    let mut m = vec![vec![0.0f64; n + 1]; n];
    for (r, bi) in a.iter().zip(b) {
        for (p, &i) in idx.iter().enumerate() {
            for (q, &j) in idx.iter().enumerate() {
                m[p][q] += r[i] * r[j];
            }
            m[p][n] += r[i] * bi;
        }
    }
    for (p, row) in m.iter_mut().enumerate() {
        row[p] += 1e-12;
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))
            .unwrap_or(col);
        m.swap(col, piv);
        let d = m[col][col];
        if d.abs() < 1e-300 {
            continue;
        }
        for row in col + 1..n {
            let f = m[row][col] / d;
            if f != 0.0 {
                let pivot_row = m[col].clone();
                for (v, pv) in m[row][col..].iter_mut().zip(&pivot_row[col..]) {
                    *v -= f * pv;
                }
            }
        }
    }
    let mut sol = vec![0.0f64; n];
    for row in (0..n).rev() {
        let mut v = m[row][n];
        for k in row + 1..n {
            v -= m[row][k] * sol[k];
        }
        sol[row] = if m[row][row].abs() < 1e-300 {
            0.0
        } else {
            v / m[row][row]
        };
    }
    let mut out = [0.0f64; N];
    for (p, &i) in idx.iter().enumerate() {
        out[i] = sol[p];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_nonnegative_coefficients() {
        // t = 2 + 3·a1, with a2 irrelevant, and a3 anti-correlated (its coefficient would be
        // negative unconstrained).
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..20 {
            let v = i as f64;
            a.push([1.0, v, (i * 7 % 5) as f64, 0.0]);
            b.push(2.0 + 3.0 * v);
        }
        let x = nnls(&a, &b);
        assert!(
            (x[0] - 2.0).abs() < 1e-6 && (x[1] - 3.0).abs() < 1e-6,
            "{x:?}"
        );
        assert!(x[2].abs() < 1e-6 && x[3] == 0.0, "{x:?}");
        // A negative relation is clamped to 0, not fitted negative.
        let a: Vec<[f64; 2]> = (1..10).map(|i| [1.0, i as f64]).collect();
        let b: Vec<f64> = (1..10).map(|i| 10.0 - i as f64).collect();
        let x = nnls(&a, &b);
        assert!(x.iter().all(|&v| v >= 0.0) && x[1] == 0.0, "{x:?}");
    }

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
            assert!(m.predict_ms(*a, &p, &cfg) > 0.0);
        }
    }

    #[test]
    fn bad_model_files_are_errors() {
        assert!(CostModel::parse("{").is_err());
        let mut m = CostModel::new(Vec::new());
        m.version = 99;
        assert!(CostModel::parse(&serde_json::to_string(&m).unwrap()).is_err());
    }
}
