//! `autodnn calibrate`: measure the calibration problems, fit the heuristic's cost model and
//! store it beside the tuning cache.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use autodnn::calibrate::CalibrationSet;
use autodnn::select::heuristic::{self, CostModel};
use clap::Args;
use serde::Serialize;

use crate::conv_cmd;
use crate::error::{CliError, CliResult};

/// Arguments of `autodnn calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Where to store the cost model [default: cost_model.json beside the tuning cache]
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,
    /// Also list every measurement with the fitted model's prediction
    #[arg(long)]
    pub samples: bool,
    /// JSON Lines: one object per algorithm, then a total
    #[arg(long)]
    pub json: bool,
    /// The fewest cheap problems that run every algorithm once, one timed run each: a check
    /// of the command in seconds; its fit is coarse (a sample or two per algorithm)
    #[arg(long)]
    pub quick: bool,
}

#[derive(Debug, Serialize)]
struct AlgoLine<'a> {
    algo: &'a str,
    samples: usize,
    coef: &'a [f64],
    median_rel_err: f64,
    max_rel_err: f64,
}

#[derive(Debug, Serialize)]
struct TotalLine {
    total: bool,
    path: String,
    problems: usize,
    threads: usize,
    isa: &'static str,
    wall_ms: f64,
}

/// Runs `autodnn calibrate`.
///
/// # Errors
/// Bad input for a bad thread count; a failure when measuring or writing fails.
pub fn run(args: &CalibrateArgs, out: &mut impl Write) -> CliResult {
    let handle = conv_cmd::make_handle(args.threads)?;
    let path = args
        .out
        .clone()
        .unwrap_or_else(heuristic::default_cost_model_path);
    let terminal = std::io::stderr().is_terminal();
    let set = if args.quick {
        CalibrationSet::quick()?
    } else {
        CalibrationSet::full()
    };
    let cal = autodnn::calibrate::calibrate_on(&handle, &set, |done, total| {
        if terminal {
            eprint!("\rcalibrating: {done}/{total} problems");
            if done == total {
                eprintln!();
            }
        }
    })?;
    let mut model = if path.exists() {
        CostModel::load(&path).unwrap_or_else(|e| {
            eprintln!("autodnn: warning: {e}; starting a new cost model");
            CostModel::new(Vec::new())
        })
    } else {
        CostModel::new(Vec::new())
    };
    model.insert(cal.fit.clone());
    model
        .save(&path)
        .map_err(|e| CliError::fail(format!("saving the cost model: {e}")))?;
    let fitted: Vec<_> = cal
        .fit
        .algorithms
        .iter()
        .filter(|(n, _)| n.as_str() != heuristic::ANY_ALGORITHM)
        .collect();
    if !args.json {
        writeln!(
            out,
            "{:<16}  {:>7}  {:>14}  {:>14}  coefficients (ms per unit of the default \
             features: call, GFLOP, MB moved, MB workspace, short-reduction GFLOP, strided \
             GFLOP, 1000 output planes, narrow-output GFLOP, filter MB, lowered MB; an \
             algorithm may define its own, see ConvAlgorithm::cost_features)",
            "algo", "samples", "median rel err", "max rel err"
        )?;
    }
    for (name, f) in &fitted {
        if args.json {
            let line = AlgoLine {
                algo: name,
                samples: f.samples,
                coef: &f.coef,
                median_rel_err: f.median_rel_err,
                max_rel_err: f.max_rel_err,
            };
            writeln!(out, "{}", conv_cmd::to_json(&line)?)?;
        } else {
            let coef: Vec<String> = f.coef.iter().map(|c| format!("{c:.4e}")).collect();
            writeln!(
                out,
                "{name:<16}  {:>7}  {:>13.1}%  {:>13.1}%  [{}]",
                f.samples,
                f.median_rel_err * 100.0,
                f.max_rel_err * 100.0,
                coef.join(", ")
            )?;
        }
    }
    if args.samples {
        for s in &cal.samples {
            if args.json {
                writeln!(out, "{}", conv_cmd::to_json(s)?)?;
            } else {
                writeln!(
                    out,
                    "  {:<14} {:>10.4} ms measured {:>10.4} ms predicted  {}",
                    s.algo, s.ms, s.predicted_ms, s.problem
                )?;
            }
        }
    }
    let problems = set.problems.len();
    if args.json {
        let total = TotalLine {
            total: true,
            path: path.display().to_string(),
            problems,
            threads: handle.threads(),
            isa: handle.isa().name(),
            wall_ms: cal.wall_ms,
        };
        writeln!(out, "{}", conv_cmd::to_json(&total)?)?;
    } else {
        writeln!(
            out,
            "calibrated on {problems} problems, {} threads, {} in {:.1} s; stored in {}",
            handle.threads(),
            handle.isa().name(),
            cal.wall_ms / 1e3,
            path.display()
        )?;
    }
    out.flush()?;
    Ok(())
}
