//! The heuristic (cuDNN's `Get`): every algorithm that accepts a problem, ranked by the time a
//! linear cost model predicts, without running anything.
//!
//! An algorithm's predicted time is Σ coef\[i\] · feature\[i\] over its
//! [`Algorithm::cost_features`]; the coefficients are fitted per (operation, element types,
//! algorithm) by non-negative least squares on relative error, from measurements of a fixed
//! calibration set (`crate::calibrate`, which shares no layer with the built-in models).
//! Coefficients are data keyed by [`fit_key`]: a [`CostModel`] file beside the tuning cache
//! written by `autodnn calibrate`, or the defaults shipped in the library (fitted on the
//! development machine) when the machine is uncalibrated. An algorithm without coefficients of
//! its own gets the fit's `"*"` entry (the element-wise median of the fitted algorithms).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpu::Isa;
use crate::error::{Error, Result};
use crate::op::{Algorithm, OpProblem, Operation, COST_FEATURES};

/// The `format` field of a cost-model file.
pub const COST_MODEL_FORMAT: &str = "autodnn-cost-model";
/// The version of the cost-model file format this build reads and writes.
pub const COST_MODEL_VERSION: u32 = 3;
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
    pub(crate) fn predict(&self, f: &[f64; COST_FEATURES]) -> f64 {
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
    /// Coefficients by [`fit_key`] (and [`ANY_ALGORITHM`]).
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
    pub fn predict_ms<O: Operation>(
        &self,
        algo: &O::Algo<'_>,
        p: &O::Problem,
        cfg: &Machine,
    ) -> f64 {
        self.predict_ms_for::<O>(algo, p, cfg, false)
    }

    /// [`CostModel::predict_ms`] for calls with prepared weights (`prepared`): the features
    /// less what preparation takes out of a call ([`Operation::prepared_features`]).
    pub fn predict_ms_for<O: Operation>(
        &self,
        algo: &O::Algo<'_>,
        p: &O::Problem,
        cfg: &Machine,
        prepared: bool,
    ) -> f64 {
        self.predict_from::<O>(algo.name(), p, algo.cost_features(p), cfg, prepared)
    }

    /// [`CostModel::predict_ms_for`] from the features `f` of algorithm `algo` on `p` (as
    /// [`crate::op::Algorithm::cost_features_under`] gives them for a call's context).
    pub(crate) fn predict_from<O: Operation>(
        &self,
        algo: &str,
        p: &O::Problem,
        f: [f64; COST_FEATURES],
        cfg: &Machine,
        prepared: bool,
    ) -> f64 {
        let types = p.types();
        let mut key = fit_key(p.op_tag(), &types, algo);
        if types != "f32" && !self.has_fit(&key, cfg) {
            // Reduced-precision tensors without a fit of their own run the f32 kernels on
            // widened copies: the f32 fit predicts them.
            key = fit_key(p.op_tag(), "f32", algo);
        }
        let f = if prepared { O::prepared_features(f) } else { f };
        self.predict_features(&key, &f, cfg)
    }

    /// True when the fit for `cfg` has coefficients under `key`.
    fn has_fit(&self, key: &str, cfg: &Machine) -> bool {
        self.fit_for(&cfg.cpu, cfg.isa, cfg.threads)
            .is_some_and(|(fit, _)| fit.algorithms.contains_key(key))
    }

    /// Predicted milliseconds of the fit under `key` ([`fit_key`]) for `f`.
    pub fn predict_features(&self, key: &str, f: &[f64; COST_FEATURES], cfg: &Machine) -> f64 {
        match self.fit_for(&cfg.cpu, cfg.isa, cfg.threads) {
            Some((fit, scale)) => {
                let a = fit
                    .algorithms
                    .get(key)
                    .or_else(|| fit.algorithms.get(ANY_ALGORITHM));
                match a {
                    Some(a) => {
                        let fixed = a.coef[0] * f[0];
                        fixed + (a.predict(f) - fixed) * scale
                    }
                    None => fallback_predict(f, cfg.threads),
                }
            }
            None => fallback_predict(f, cfg.threads),
        }
    }
}

/// The key of an algorithm's coefficients in a [`Fit`]: `op/types/algo`, except for the
/// forward convolution in f32, whose keys are the bare algorithm names (as cost-model files
/// before other operations held them), so that a forward and a backward `gemm` never share a
/// fit.
pub fn fit_key(op: &str, types: &str, algo: &str) -> String {
    if op == crate::op::ConvForward::NAME && types == "f32" {
        algo.to_string()
    } else {
        format!("{op}/{types}/{algo}")
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

pub(crate) fn median(sorted: &[f64]) -> f64 {
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
    fn bad_model_files_are_errors() {
        assert!(CostModel::parse("{").is_err());
        let mut m = CostModel::new(Vec::new());
        m.version = 99;
        assert!(CostModel::parse(&serde_json::to_string(&m).unwrap()).is_err());
    }
}
