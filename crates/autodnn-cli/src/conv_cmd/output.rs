//! What `autodnn conv` reports: the result types (JSON lines with `--json`) and the human table.

use std::io::Write;

use autodnn::ProblemSpec;
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// How one algorithm did on one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran (and, with --check, matched the reference).
    Ok,
    /// The algorithm does not handle the problem.
    Declined,
    /// Running failed, or the result was wrong.
    Failed,
}

impl Status {
    pub(super) fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Declined => "declined",
            Status::Failed => "failed",
        }
    }
}

/// One algorithm's result on one problem (a JSON `results` entry).
#[derive(Debug, Clone, Serialize)]
pub struct AlgoResult {
    pub(super) algo: &'static str,
    pub(super) status: Status,
    pub(super) reason: Option<String>,
    pub(super) ms: Option<f64>,
    pub(super) gflops: Option<f64>,
    pub(super) workspace_bytes: Option<usize>,
    pub(super) max_rel_err: Option<f64>,
}

/// One problem's results (a JSON line).
#[derive(Debug, Clone, Serialize)]
pub struct ProblemReport {
    pub(super) problem: String,
    pub(super) dir: &'static str,
    /// Element types, as cache keys name them (`f32`, `bf16`, `bf16>f32`).
    pub(super) types: String,
    pub(super) count: usize,
    pub(super) flops: f64,
    pub(super) results: Vec<AlgoResult>,
    /// bwd_wb only: the bias gradient's algorithms; the fastest one's time is in every row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bias: Option<BiasReport>,
}

/// The bias gradient of a bwd_wb problem: every backward-bias algorithm's result and the
/// fastest ok one, whose time each filter row includes.
#[derive(Debug, Clone, Serialize)]
pub struct BiasReport {
    pub(super) algo: Option<&'static str>,
    pub(super) ms: Option<f64>,
    pub(super) results: Vec<AlgoResult>,
}

#[derive(Debug, Serialize)]
pub(super) struct TotalLine {
    pub(super) total: bool,
    pub(super) dir: &'static str,
    pub(super) ms_weighted: f64,
    pub(super) gflops: Option<f64>,
}

pub(super) fn display_name(spec: &ProblemSpec) -> String {
    if spec.name.is_empty() {
        spec.to_string()
    } else {
        spec.name.clone()
    }
}

/// The human table's column widths.
pub(super) struct Table {
    pub(super) problem: usize,
    pub(super) algo: usize,
    pub(super) check: bool,
    /// A dir column (when a backward direction is run).
    pub(super) dir: bool,
}

impl Table {
    pub(super) fn header(&self, out: &mut impl Write) -> CliResult {
        self.row(
            out,
            "dir",
            ["problem", "algo", "status", "ms", "GFLOP/s", "workspace"],
            "max_rel_err",
            "note",
        )
    }

    fn row(
        &self,
        out: &mut impl Write,
        dir: &str,
        c: [&str; 6],
        err: &str,
        note: &str,
    ) -> CliResult {
        let (pw, aw) = (self.problem, self.algo);
        let mut line = format!("{:<pw$}  ", c[0]);
        if self.dir {
            line.push_str(&format!("{dir:<6}  "));
        }
        line.push_str(&format!(
            "{:<aw$}  {:<8}  {:>10}  {:>9}  {:>12}",
            c[1], c[2], c[3], c[4], c[5]
        ));
        if self.check {
            line.push_str(&format!("  {err:>11}"));
        }
        if !note.is_empty() {
            line.push_str("  ");
            line.push_str(note);
        }
        writeln!(out, "{}", line.trim_end())?;
        Ok(())
    }

    pub(super) fn result(
        &self,
        out: &mut impl Write,
        problem: &str,
        dir: &str,
        algo: &str,
        r: &AlgoResult,
    ) -> CliResult {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let ms = opt(r.ms.map(|v| format!("{v:.3}")));
        let gf = opt(r.gflops.map(|v| format!("{v:.2}")));
        let ws = opt(r.workspace_bytes.map(|v| v.to_string()));
        let err = opt(r.max_rel_err.map(|v| {
            if v == 0.0 {
                "0".into()
            } else {
                format!("{v:.2e}")
            }
        }));
        let note = r.reason.as_deref().unwrap_or("");
        self.row(
            out,
            dir,
            [problem, algo, r.status.name(), &ms, &gf, &ws],
            &err,
            note,
        )
    }
}

pub fn to_json<T: Serialize>(v: &T) -> CliResult<String> {
    serde_json::to_string(v).map_err(|e| CliError::fail(format!("encoding JSON: {e}")))
}
