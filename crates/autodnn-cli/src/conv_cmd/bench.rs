//! Timing on generated data: each algorithm on each problem (a warm-up run, timed runs, their
//! median and, with `--check`, the accuracy), each result written as it comes, then the total.

use std::io::Write;
use std::time::Instant;

use autodnn::conv::Epilogue;
use autodnn::conv::{ConvAlgorithm, Weights};
use autodnn::op::{Algorithm, ConvForward, ConvFwdInputs, TensorBuf};
use autodnn::{ConvProblem, DataType, Error, Handle, OpKind};

use super::args::ConvArgs;
use super::backward::{bench_bwd_one, BwdInputs, OutBuf};
use super::check::CHECK_TOLERANCE;
use super::dir::{registry, AnyAlgo, Dir};
use super::inputs::ProblemData;
use super::output::{
    display_name, to_json, AlgoResult, BiasReport, ProblemReport, Status, Table, TotalLine,
};
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

pub(super) fn gflops(flops: f64, ms: f64) -> Option<f64> {
    (ms > 0.0).then(|| flops / (ms / 1e3) / 1e9)
}

pub(super) fn declined(algo: &'static str, reason: String) -> AlgoResult {
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

pub(super) fn failed(algo: &'static str, reason: String, workspace: usize) -> AlgoResult {
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
    // The operation's check and workspace: its element types and, for bf16 or f16 tensors,
    // the f32 copies the kernels compute on.
    if let Err(reason) = Algorithm::<ConvForward>::check(a, p) {
        return Ok(declined(name, reason));
    }
    // Weights prepared once, before (and outside) the timed runs (for bf16 or f16 tensors,
    // rounded to their type).
    let prepared = if args.prepared {
        match handle.prepare_weights(p, name, &d.w) {
            Ok(pw) => Some(pw),
            Err(e) => return Ok(failed(name, format!("preparing weights: {e}"), 0)),
        }
    } else {
        None
    };
    let ws = Algorithm::<ConvForward>::workspace_bytes(a, p);
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
    // Tensors of the problem's element types (the generated small integers are exact in
    // each); y read back widened for the check.
    let mut typed = TypedData::new(p, d)?;
    let mut times = Vec::with_capacity(reps);
    for i in 0..=reps {
        let t = Instant::now();
        let epi = ProblemData::epilogue(&d.z, d.alpha, d.beta);
        let r = match (typed.as_mut(), &prepared) {
            (None, Some(pw)) => handle.conv_forward_ex(
                p,
                name,
                &d.x,
                Weights::Prepared(pw),
                &mut d.y,
                &epi,
                Some(&mut workspace),
            ),
            (None, None) => handle.conv_forward_ex(
                p,
                name,
                &d.x,
                Weights::Plain(&d.w),
                &mut d.y,
                &epi,
                Some(&mut workspace),
            ),
            (Some(t), pw) => {
                let inputs = ConvFwdInputs {
                    x: t.x.view(),
                    w: match pw {
                        Some(pw) => Weights::Prepared(pw),
                        None => Weights::Tensor(t.w.view()),
                    },
                    epilogue: epi,
                };
                handle.run_algorithm::<ConvForward>(
                    p,
                    name,
                    &inputs,
                    &mut t.y.as_mut(),
                    Some(&mut workspace),
                )
            }
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(()) if i > 0 => times.push(ms),
            Ok(()) => {}
            Err(Error::Declined { reason, .. }) => return Ok(declined(name, reason)),
            Err(e) => return Ok(failed(name, e.to_string(), ws)),
        }
    }
    if let Some(t) = &typed {
        t.y.widen_into(&mut d.y);
    }
    let max_rel_err = if check {
        let err = d.max_rel_err(p)?;
        // One rounding of y to its type moves each element by up to half an ulp.
        let tolerance = CHECK_TOLERANCE + half_ulp(p.y().dtype());
        if err.is_nan() || err > tolerance {
            return Ok(failed(
                name,
                format!("wrong result: max_rel_err = {err:e} exceeds {tolerance:e}"),
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

/// Half an ulp of `dt`, relative: what one rounding to it may move a value by.
fn half_ulp(dt: DataType) -> f64 {
    match dt {
        DataType::F32 => 0.0,
        DataType::Bf16 => 2f64.powi(-8),
        DataType::F16 => 2f64.powi(-11),
    }
}

/// The generated data in a reduced-precision problem's element types; `None` for an f32
/// problem (which runs on the f32 data itself).
struct TypedData {
    x: TensorBuf,
    w: TensorBuf,
    y: TensorBuf,
}

impl TypedData {
    fn new(p: &ConvProblem, d: &ProblemData) -> CliResult<Option<TypedData>> {
        if p.is_f32() {
            return Ok(None);
        }
        Ok(Some(TypedData {
            x: TensorBuf::from_f32(&d.x, p.x().dtype(), "x")?,
            w: TensorBuf::from_f32(&d.w, p.w().dtype(), "w")?,
            y: TensorBuf::from_f32(&d.y, p.y().dtype(), "y")?,
        }))
    }
}

/// The message a panic carried.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Running totals of one direction: the fastest ok algorithm per problem, weighted by count.
#[derive(Default, Clone, Copy)]
struct Acc {
    ms: f64,
    flops: f64,
    covered: usize,
}

/// One algorithm run under `catch_unwind`: an error is a `failed` row, and so is a panic (a
/// bug, reported on stderr by the panic hook as well).
fn guarded(name: &'static str, f: impl FnOnce() -> CliResult<AlgoResult>) -> CliResult<AlgoResult> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Ok(failed(
            name,
            format!("internal error: {}", panic_message(payload.as_ref())),
            0,
        )),
    }
}

/// The results of one direction on one problem: the rows and, for bwd_wb, the bias report.
fn run_dir(
    args: &ConvArgs,
    handle: &Handle,
    job: &Job,
    dir: Dir,
    algos: &[AnyAlgo],
) -> CliResult<(Vec<AlgoResult>, Option<BiasReport>)> {
    let mut results = Vec::with_capacity(algos.len());
    if dir == Dir::Fwd {
        let p = &job.problem;
        let mut d = ProblemData::new(p, args.alpha, args.beta)?;
        for &a in algos {
            let AnyAlgo::Fwd(fa) = a else { continue };
            results.push(guarded(a.name(), || {
                bench_one(handle, p, fa, &mut d, args)
            })?);
        }
        return Ok((results, None));
    }
    let p = job
        .problem
        .with_epilogue(Epilogue::default())
        .for_op(dir.op())
        .map_err(|e| CliError::from(e).context(format!("problem {}", job.spec)))?;
    let inp = BwdInputs::new(&p, args.alpha, args.beta)?;
    let mut buf = OutBuf::new(&p, dir.op(), args.beta)?;
    for &a in algos {
        results.push(guarded(a.name(), || {
            bench_bwd_one(handle, &p, a, &inp, &mut buf, args.reps, args.check)
        })?);
    }
    if dir != Dir::BwdWb {
        return Ok((results, None));
    }
    // The bias gradient: every backward-bias algorithm; the fastest ok one's time is added
    // to each filter row (and its max_rel_err folded in).
    let pb = job
        .problem
        .with_epilogue(Epilogue::default())
        .for_op(OpKind::ConvBackwardBias)
        .map_err(|e| CliError::from(e).context(format!("problem {}", job.spec)))?;
    let mut bbuf = OutBuf::new(&pb, OpKind::ConvBackwardBias, args.beta)?;
    let mut bias_results = Vec::new();
    for a in registry(OpKind::ConvBackwardBias) {
        bias_results.push(guarded(a.name(), || {
            bench_bwd_one(handle, &pb, a, &inp, &mut bbuf, args.reps, args.check)
        })?);
    }
    let best = bias_results
        .iter()
        .filter(|r| r.ms.is_some())
        .min_by(|a, b| a.ms.unwrap_or(0.0).total_cmp(&b.ms.unwrap_or(0.0)))
        .cloned();
    for r in &mut results {
        if r.status != Status::Ok {
            continue;
        }
        match &best {
            Some(b) => {
                let ms = r.ms.unwrap_or(0.0) + b.ms.unwrap_or(0.0);
                r.ms = Some(ms);
                r.gflops = gflops(p.flops(), ms);
                r.workspace_bytes = Some(
                    r.workspace_bytes
                        .unwrap_or(0)
                        .max(b.workspace_bytes.unwrap_or(0)),
                );
                if let (Some(e), Some(be)) = (r.max_rel_err, b.max_rel_err) {
                    r.max_rel_err = Some(e.max(be));
                }
            }
            None => {
                *r = failed(
                    r.algo,
                    "no backward-bias algorithm succeeded".into(),
                    r.workspace_bytes.unwrap_or(0),
                );
            }
        }
    }
    let bias = BiasReport {
        algo: best.as_ref().map(|b| b.algo),
        ms: best.as_ref().and_then(|b| b.ms),
        results: bias_results,
    };
    Ok((results, Some(bias)))
}

pub(super) fn bench(
    args: &ConvArgs,
    handle: &Handle,
    jobs: &[Job],
    dirs: &[Dir],
    algos: &[Vec<AnyAlgo>],
    out: &mut impl Write,
) -> CliResult {
    let backward = dirs != [Dir::Fwd];
    // bwd_wb's rows name the filter and the bias algorithm: FILTER+BIAS.
    let bias_width = if dirs.contains(&Dir::BwdWb) {
        1 + registry(OpKind::ConvBackwardBias)
            .iter()
            .map(|a| a.name().len())
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let table = Table {
        problem: jobs
            .iter()
            .map(|j| display_name(&j.spec).len())
            .max()
            .unwrap_or(0)
            .max("problem".len()),
        algo: algos
            .iter()
            .flatten()
            .map(|a| a.name().len() + bias_width)
            .max()
            .unwrap_or(0)
            .max("algo".len()),
        check: args.check,
        dir: backward,
    };
    if !args.json {
        table.header(out)?;
    }
    let mut acc = vec![Acc::default(); dirs.len()];
    let (mut runs, mut failures) = (0usize, Vec::new());
    for job in jobs {
        let count = job.spec.count();
        let flops = job.problem.flops();
        for (di, &dir) in dirs.iter().enumerate() {
            let (results, bias) = run_dir(args, handle, job, dir, &algos[di])?;
            let tag = if backward {
                format!(" ({})", dir.name())
            } else {
                String::new()
            };
            for r in results
                .iter()
                .chain(bias.iter().flat_map(|b| b.results.iter()))
            {
                runs += 1;
                if r.status == Status::Failed {
                    failures.push(format!("{} on {}{tag}", r.algo, job.spec));
                }
            }
            if !args.json {
                for r in &results {
                    let algo = match bias.as_ref().and_then(|b| b.algo) {
                        Some(b) => format!("{}+{b}", r.algo),
                        None => r.algo.to_string(),
                    };
                    table.result(out, &display_name(&job.spec), dir.name(), &algo, r)?;
                }
                out.flush()?;
            }
            let best = results
                .iter()
                .filter_map(|r| r.ms)
                .min_by(|a, b| a.total_cmp(b));
            if let Some(ms) = best {
                acc[di].ms += ms * count as f64;
                acc[di].flops += flops * count as f64;
                acc[di].covered += 1;
            }
            if args.json {
                let report = ProblemReport {
                    problem: job.spec.to_string(),
                    dir: dir.name(),
                    types: autodnn::op::OpProblem::types(&job.problem),
                    count,
                    flops,
                    results,
                    bias,
                };
                writeln!(out, "{}", to_json(&report)?)?;
                out.flush()?;
            }
        }
    }
    for (di, &dir) in dirs.iter().enumerate() {
        let a = acc[di];
        let total_gflops = gflops(a.flops, a.ms);
        if args.json {
            let total = TotalLine {
                total: true,
                dir: dir.name(),
                ms_weighted: a.ms,
                gflops: total_gflops,
            };
            writeln!(out, "{}", to_json(&total)?)?;
        } else {
            let label = if backward {
                format!("total {}", dir.name())
            } else {
                "total".to_string()
            };
            writeln!(
                out,
                "{label}: {:.3} ms, {} GFLOP/s (fastest ok algorithm per problem, weighted by \
                 count; {} of {} problems)",
                a.ms,
                total_gflops.map_or("-".into(), |g| format!("{g:.2}")),
                a.covered,
                jobs.len()
            )?;
        }
    }
    if dirs.len() > 1 {
        let ms: f64 = acc.iter().map(|a| a.ms).sum();
        let flops: f64 = acc.iter().map(|a| a.flops).sum();
        let total_gflops = gflops(flops, ms);
        let names: Vec<&str> = dirs.iter().map(|d| d.name()).collect();
        if args.json {
            let total = TotalLine {
                total: true,
                dir: "all",
                ms_weighted: ms,
                gflops: total_gflops,
            };
            writeln!(out, "{}", to_json(&total)?)?;
        } else {
            writeln!(
                out,
                "total all: {ms:.3} ms, {} GFLOP/s ({}: one training step's convolutions)",
                total_gflops.map_or("-".into(), |g| format!("{g:.2}")),
                names.join(" + ")
            )?;
        }
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
