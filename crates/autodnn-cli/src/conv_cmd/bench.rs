//! Timing on generated data: each algorithm on each problem (a warm-up run, timed runs, their
//! median and, with `--check`, the accuracy), each result written as it comes, then the total.

use std::io::Write;
use std::time::Instant;

use autodnn::conv::{ConvAlgorithm, Weights};
use autodnn::{ConvProblem, Error, Handle};

use super::args::ConvArgs;
use super::check::CHECK_TOLERANCE;
use super::inputs::ProblemData;
use super::output::{display_name, to_json, AlgoResult, ProblemReport, Status, Table, TotalLine};
use super::problems::Job;
use crate::error::{CliError, CliResult};

pub fn median_ms(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    }
}

fn gflops(flops: f64, ms: f64) -> Option<f64> {
    (ms > 0.0).then(|| flops / (ms / 1e3) / 1e9)
}

fn declined(algo: &'static str, reason: String) -> AlgoResult {
    AlgoResult {
        algo,
        status: Status::Declined,
        reason: Some(reason),
        ms: None,
        gflops: None,
        workspace_bytes: None,
        max_rel_err: None,
    }
}

fn failed(algo: &'static str, reason: String, workspace: usize) -> AlgoResult {
    AlgoResult {
        algo,
        status: Status::Failed,
        reason: Some(reason),
        ms: None,
        gflops: None,
        workspace_bytes: Some(workspace),
        max_rel_err: None,
    }
}

fn bench_one(
    handle: &Handle,
    p: &ConvProblem,
    a: &'static dyn ConvAlgorithm,
    d: &mut ProblemData,
    args: &ConvArgs,
) -> CliResult<AlgoResult> {
    let (reps, check) = (args.reps, args.check);
    let name = a.name();
    if let Err(reason) = a.check(p) {
        return Ok(declined(name, reason));
    }
    // Weights prepared once, before (and outside) the timed runs.
    let prepared = if args.prepared {
        match handle.prepare_weights(p, name, &d.w) {
            Ok(pw) => Some(pw),
            Err(e) => return Ok(failed(name, format!("preparing weights: {e}"), 0)),
        }
    } else {
        None
    };
    let ws = a.workspace_bytes(p);
    // The workspace is allocated once, outside the timed region, as cuDNN users do.
    let mut workspace = Vec::new();
    if let Err(e) = workspace.try_reserve_exact(ws) {
        return Ok(failed(
            name,
            format!("out of memory: {ws} bytes for the workspace: {e}"),
            ws,
        ));
    }
    workspace.resize(ws, 0u8);
    // Elements an algorithm forgets to write stay NaN, which --check reports.
    d.y.fill(f32::NAN);
    let mut times = Vec::with_capacity(reps);
    for i in 0..=reps {
        let t = Instant::now();
        let weights = match &prepared {
            Some(pw) => Weights::Prepared(pw),
            None => Weights::Plain(&d.w),
        };
        let epi = ProblemData::epilogue(&d.z, d.alpha, d.beta);
        let r =
            handle.conv_forward_ex(p, name, &d.x, weights, &mut d.y, &epi, Some(&mut workspace));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(()) if i > 0 => times.push(ms),
            Ok(()) => {}
            Err(Error::Declined { reason, .. }) => return Ok(declined(name, reason)),
            Err(e) => return Ok(failed(name, e.to_string(), ws)),
        }
    }
    let max_rel_err = if check {
        let err = d.max_rel_err(p)?;
        if err.is_nan() || err > CHECK_TOLERANCE {
            return Ok(failed(
                name,
                format!("wrong result: max_rel_err = {err:e} exceeds {CHECK_TOLERANCE:e}"),
                ws,
            ));
        }
        Some(err)
    } else {
        None
    };
    let ms = median_ms(&mut times);
    Ok(AlgoResult {
        algo: name,
        status: Status::Ok,
        reason: None,
        ms: Some(ms),
        gflops: gflops(p.flops(), ms),
        workspace_bytes: Some(ws),
        max_rel_err,
    })
}

/// The message a panic carried.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

pub(super) fn bench(
    args: &ConvArgs,
    handle: &Handle,
    jobs: &[Job],
    algos: &[&'static dyn ConvAlgorithm],
    out: &mut impl Write,
) -> CliResult {
    let table = Table {
        problem: jobs
            .iter()
            .map(|j| display_name(&j.spec).len())
            .max()
            .unwrap_or(0)
            .max("problem".len()),
        algo: algos
            .iter()
            .map(|a| a.name().len())
            .max()
            .unwrap_or(0)
            .max("algo".len()),
        check: args.check,
    };
    if !args.json {
        table.header(out)?;
    }
    let (mut total_ms, mut total_flops, mut covered) = (0.0f64, 0.0f64, 0usize);
    let (mut runs, mut failures) = (0usize, Vec::new());
    for job in jobs {
        let p = &job.problem;
        let mut d = ProblemData::new(p, args.alpha, args.beta)?;
        let mut results = Vec::with_capacity(algos.len());
        for &a in algos {
            // One failing algorithm never hides the others: an error is a `failed` row, and
            // so is a panic (a bug, reported on stderr by the panic hook as well).
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                bench_one(handle, p, a, &mut d, args)
            })) {
                Ok(r) => r?,
                Err(payload) => failed(
                    a.name(),
                    format!("internal error: {}", panic_message(payload.as_ref())),
                    0,
                ),
            };
            runs += 1;
            if r.status == Status::Failed {
                failures.push(format!("{} on {}", r.algo, job.spec));
            }
            if !args.json {
                table.result(out, &display_name(&job.spec), &r)?;
                out.flush()?;
            }
            results.push(r);
        }
        let count = job.spec.count();
        let best = results
            .iter()
            .filter_map(|r| r.ms)
            .min_by(|a, b| a.total_cmp(b));
        if let Some(ms) = best {
            total_ms += ms * count as f64;
            total_flops += p.flops() * count as f64;
            covered += 1;
        }
        if args.json {
            let report = ProblemReport {
                problem: job.spec.to_string(),
                count,
                flops: p.flops(),
                results,
            };
            writeln!(out, "{}", to_json(&report)?)?;
            out.flush()?;
        }
    }
    let total_gflops = gflops(total_flops, total_ms);
    if args.json {
        let total = TotalLine {
            total: true,
            ms_weighted: total_ms,
            gflops: total_gflops,
        };
        writeln!(out, "{}", to_json(&total)?)?;
    } else {
        writeln!(
            out,
            "total: {total_ms:.3} ms, {} GFLOP/s (fastest ok algorithm per problem, weighted by \
             count; {covered} of {} problems)",
            total_gflops.map_or("-".into(), |g| format!("{g:.2}")),
            jobs.len()
        )?;
    }
    out.flush()?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::fail(format!(
            "{} of {runs} runs failed: {}",
            failures.len(),
            failures.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median_ms(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_ms(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median_ms(&mut [5.0]), 5.0);
    }

    #[test]
    fn gflops_of_zero_time_is_none() {
        assert_eq!(gflops(1e9, 0.0), None);
        assert_eq!(gflops(2e9, 1000.0), Some(2.0));
    }
}
