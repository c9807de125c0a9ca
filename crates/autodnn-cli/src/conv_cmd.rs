//! `autodnn conv`: run problems with the registered algorithms on generated data (timing and,
//! with `--check`, accuracy against the f64 reference), or once on data from `.npy` files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use autodnn::conv::{Activation, ConvAlgorithm, Epilogue, EpilogueArgs, Weights};
use autodnn::{ConvProblem, Error, Handle, Layout, ProblemSpec};
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::data;
use crate::error::{CliError, CliResult};
use crate::npy;

/// With `--check`, a result whose max_rel_err exceeds this is reported as failed. Generated
/// data is integer-valued, so exact algorithms give 0; transform-based ones (Winograd, FFT)
/// stay orders of magnitude below this.
pub const CHECK_TOLERANCE: f64 = 1e-3;

/// Memory order of x and y (the filter follows: KCRS with NCHW, KRSC with NHWC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// x [N,C,H,W], w [K,C/g,R,S], y [N,K,OH,OW].
    Nchw,
    /// x [N,H,W,C], w [K,R,S,C/g], y [N,OH,OW,K].
    Nhwc,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Layout {
        match l {
            LayoutArg::Nchw => Layout::Nchw,
            LayoutArg::Nhwc => Layout::Nhwc,
        }
    }
}

/// Arguments of `autodnn conv`.
#[derive(Debug, Args)]
pub struct ConvArgs {
    /// Problem strings (benchdnn style, e.g. mb1ic16ih14oc32oh14kh3ph1) or files of them, one
    /// per line
    #[arg(value_name = "PROBLEM")]
    pub problems: Vec<String>,
    /// A built-in model's layers instead of PROBLEMs
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Algorithm name, comma-separated names, or `all` (every registered one, in registry
    /// order)
    #[arg(long, value_name = "NAME|all", default_value = "all")]
    pub algo: String,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory order of x and y (filters: KCRS with nchw, KRSC with nhwc)
    #[arg(long, value_enum, default_value_t = LayoutArg::Nchw)]
    pub layout: LayoutArg,
    /// Batch size [default: each problem's own; 1 with --model]
    #[arg(long, value_name = "N")]
    pub mb: Option<usize>,
    /// Timed runs per problem and algorithm (after one warm-up run); the median is reported
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub reps: usize,
    /// Compare against the f64 reference and report max_rel_err (a result above 1e-3 counts as
    /// failed)
    #[arg(long)]
    pub check: bool,
    /// JSON Lines output: one object per problem, then a total
    #[arg(long)]
    pub json: bool,
    /// Input tensor (.npy, f32) for one run on real data; needs --weights and --output
    #[arg(long, value_name = "X.npy")]
    pub input: Option<PathBuf>,
    /// Filter (.npy, f32) for one run on real data
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Where to write the output (.npy, f32) of a run on real data
    #[arg(long, value_name = "Y.npy")]
    pub output: Option<PathBuf>,
    /// Per-output-channel bias (.npy, f32, shape [K]) added before the activation; real data
    /// only
    #[arg(long, value_name = "B.npy")]
    pub bias: Option<PathBuf>,
    /// Residual tensor z (.npy, f32, shaped like the output) added as beta·z; real data only.
    /// Without it, beta·z uses y's prior contents (zeros for a new output) with real data, and
    /// a generated integer tensor with generated data
    #[arg(long, value_name = "Z.npy")]
    pub residual: Option<PathBuf>,
    /// Activation applied last: none, relu, relu6, clip:LO:HI, sigmoid, tanh, gelu, silu
    #[arg(long, value_name = "NAME", default_value = "none")]
    pub act: String,
    /// Scale of the convolution: y = act(alpha·conv(x, w) + bias + beta·z)
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub alpha: f32,
    /// Scale of the residual z
    #[arg(
        long,
        value_name = "B",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub beta: f32,
    /// Time calls with weights prepared beforehand for each algorithm (the preparation is not
    /// timed; algorithms with nothing to prepare run plain)
    #[arg(long)]
    pub prepared: bool,
}

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
    fn name(self) -> &'static str {
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
    algo: &'static str,
    status: Status,
    reason: Option<String>,
    ms: Option<f64>,
    gflops: Option<f64>,
    workspace_bytes: Option<usize>,
    max_rel_err: Option<f64>,
}

/// One problem's results (a JSON line).
#[derive(Debug, Clone, Serialize)]
pub struct ProblemReport {
    problem: String,
    count: usize,
    flops: f64,
    results: Vec<AlgoResult>,
}

#[derive(Debug, Serialize)]
struct TotalLine {
    total: bool,
    ms_weighted: f64,
    gflops: Option<f64>,
}

/// A problem to run: its description (with the batch actually used) and its descriptors.
struct Job {
    spec: ProblemSpec,
    problem: ConvProblem,
}

/// Runs `autodnn conv`.
///
/// # Errors
/// Bad input for wrong arguments, problems, algorithm names or `.npy` files; a failure when a
/// run fails (after all results are written) or output cannot be written.
pub fn run(args: &ConvArgs, out: &mut impl Write) -> CliResult {
    if args.reps == 0 {
        return Err(CliError::bad("bad --reps = 0: must be at least 1"));
    }
    if args.mb == Some(0) {
        return Err(CliError::bad("bad --mb = 0: must be at least 1"));
    }
    let real = real_data_paths(args)?;
    let algos = select_algorithms(&args.algo)?;
    let layout = Layout::from(args.layout);
    let epilogue = epilogue_of(args, real.is_some())?;
    let jobs = collect_specs(args)?
        .into_iter()
        .map(|spec| {
            let problem = spec
                .to_problem(layout)
                .map_err(|e| CliError::from(e).context(format!("problem {spec}")))?
                .with_epilogue(epilogue);
            Ok(Job { spec, problem })
        })
        .collect::<CliResult<Vec<Job>>>()?;
    if let Some((x, w, y)) = real {
        if jobs.len() != 1 {
            return Err(CliError::bad(format!(
                "bad arguments: --input/--weights/--output take exactly one problem, got {}",
                jobs.len()
            )));
        }
        if algos.len() != 1 || args.algo.trim() == "all" {
            return Err(CliError::bad(format!(
                "bad --algo = {}: --input/--weights/--output need a single algorithm name",
                args.algo
            )));
        }
        let handle = make_handle(args.threads)?;
        return run_real_data(args, &handle, &jobs[0], algos[0], [&x, &w, &y], out);
    }
    let handle = make_handle(args.threads)?;
    // Cores at full speed before the first problem is timed.
    autodnn::select::benchmark::wake_cores(&handle);
    bench(args, &handle, &jobs, &algos, out)
}

/// The epilogue the flags ask for. With generated data, beta ≠ 0 adds a generated residual so
/// that repeated runs compute the same thing.
fn epilogue_of(args: &ConvArgs, real: bool) -> CliResult<Epilogue> {
    let act = Activation::parse(&args.act)?;
    for (flag, v) in [("--alpha", args.alpha), ("--beta", args.beta)] {
        if !v.is_finite() {
            return Err(CliError::bad(format!("bad {flag} = {v}: must be finite")));
        }
    }
    if !real {
        for (flag, given) in [
            ("--bias", args.bias.is_some()),
            ("--residual", args.residual.is_some()),
        ] {
            if given {
                return Err(CliError::bad(format!(
                    "bad arguments: {flag} takes a .npy file and needs --input/--weights/--output"
                )));
            }
        }
        return Ok(Epilogue {
            bias: false,
            residual: args.beta != 0.0,
            act,
        });
    }
    Ok(Epilogue {
        bias: args.bias.is_some(),
        residual: args.residual.is_some(),
        act,
    })
}

pub fn make_handle(threads: Option<usize>) -> CliResult<Handle> {
    Ok(Handle::with_threads(
        threads.unwrap_or_else(crate::default_threads),
    )?)
}

/// `Some((x, w, y))` when the three paths are given, `None` when none is; bad input otherwise.
fn real_data_paths(args: &ConvArgs) -> CliResult<Option<(PathBuf, PathBuf, PathBuf)>> {
    match (&args.input, &args.weights, &args.output) {
        (Some(x), Some(w), Some(y)) => Ok(Some((x.clone(), w.clone(), y.clone()))),
        (None, None, None) => Ok(None),
        (x, w, y) => {
            let missing: Vec<&str> = [("--input", x), ("--weights", w), ("--output", y)]
                .iter()
                .filter(|(_, p)| p.is_none())
                .map(|(n, _)| *n)
                .collect();
            Err(CliError::bad(format!(
                "bad arguments: --input, --weights and --output go together (missing {})",
                missing.join(", ")
            )))
        }
    }
}

/// The algorithms `--algo` names: `all`, or one or more comma-separated names.
fn select_algorithms(arg: &str) -> CliResult<Vec<&'static dyn ConvAlgorithm>> {
    let arg = arg.trim();
    if arg == "all" {
        return Ok(autodnn::conv::algorithms().to_vec());
    }
    let mut out: Vec<&'static dyn ConvAlgorithm> = Vec::new();
    for name in arg.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(CliError::bad(format!(
                "bad --algo = {arg:?}: empty algorithm name"
            )));
        }
        let a = autodnn::conv::find(name).map_err(|e| CliError::from(e).context("--algo"))?;
        if !out.iter().any(|b| b.name() == a.name()) {
            out.push(a);
        }
    }
    Ok(out)
}

/// Parses the PROBLEM arguments or looks up `--model`, and applies `--mb`.
fn collect_specs(args: &ConvArgs) -> CliResult<Vec<ProblemSpec>> {
    problem_specs(args.model.as_deref(), &args.problems, args.mb)
}

/// The problems of PROBLEM arguments (strings or files) or of a built-in model, with `mb`
/// applied (a model's default batch is 1, a problem's its own).
///
/// # Errors
/// Bad input for both or neither, an unknown model, a bad string or an unreadable file.
pub fn problem_specs(
    model: Option<&str>,
    problems: &[String],
    mb: Option<usize>,
) -> CliResult<Vec<ProblemSpec>> {
    let specs =
        match (model, problems.is_empty()) {
            (Some(_), false) => {
                return Err(CliError::bad(
                    "bad arguments: give PROBLEMs or --model, not both",
                ))
            }
            (None, true) => return Err(CliError::bad(
                "bad arguments: give at least one PROBLEM (a problem string or a file of them) \
                 or --model NAME",
            )),
            (Some(model), true) => {
                let known = autodnn::models::names();
                if !known.contains(&model) {
                    let list = if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    };
                    return Err(CliError::bad(format!(
                        "bad --model = {model}: unknown model (known: {list})"
                    )));
                }
                let mb = mb.unwrap_or(1);
                autodnn::models::layers(model)?
                    .into_iter()
                    .map(|s| s.with_mb(mb))
                    .collect()
            }
            (None, false) => {
                let mut all = Vec::new();
                for arg in problems {
                    let specs = read_problems(arg)?;
                    if specs.is_empty() {
                        return Err(CliError::bad(format!(
                            "bad PROBLEM = {arg}: the file holds no problems"
                        )));
                    }
                    all.extend(specs);
                }
                match mb {
                    Some(mb) => all.into_iter().map(|s| s.with_mb(mb)).collect(),
                    None => all,
                }
            }
        };
    Ok(specs)
}

/// A PROBLEM argument: a file of problem strings when `arg` names a file, else one string. A
/// file that cannot be read is bad input too: the user named it.
fn read_problems(arg: &str) -> CliResult<Vec<ProblemSpec>> {
    autodnn::read_problems(arg).map_err(|e| match e {
        Error::Io { path, message } => CliError::bad(format!("{path}: cannot read: {message}")),
        e => e.into(),
    })
}

/// Largest |y - ref| over the elements of y, relative to max(max |ref|, 1e-30). NaN when y holds
/// a NaN where it should not.
pub fn max_rel_err(p: &ConvProblem, y: &[f32], reference: &[f64]) -> f64 {
    let yd = p.y();
    let [n, k, oh, ow] = yd.dims();
    let (mut max_diff, mut max_ref) = (0.0f64, 0.0f64);
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = yd.offset(b, c, i, j);
                    let diff = (y[o] as f64 - reference[o]).abs();
                    if diff.is_nan() {
                        return f64::NAN;
                    }
                    max_diff = max_diff.max(diff);
                    max_ref = max_ref.max(reference[o].abs());
                }
            }
        }
    }
    max_diff / max_ref.max(1e-30)
}

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

/// The problem's data and, once computed, its reference output.
struct ProblemData {
    x: Vec<f32>,
    w: Vec<f32>,
    y: Vec<f32>,
    /// The generated residual, when the problem has one.
    z: Option<Vec<f32>>,
    alpha: f32,
    beta: f32,
    reference: Option<Vec<f64>>,
}

impl ProblemData {
    fn new(p: &ConvProblem, alpha: f32, beta: f32) -> CliResult<ProblemData> {
        let z = if p.epilogue().residual {
            Some(data::small_ints(p.y().span(), data::Z_SEED, "z")?)
        } else {
            None
        };
        Ok(ProblemData {
            x: data::small_ints(p.x().span(), data::X_SEED, "x")?,
            w: data::small_ints(p.w().elements(), data::W_SEED, "w")?,
            y: data::filled(p.y().span(), f32::NAN, "y")?,
            z,
            alpha,
            beta,
            reference: None,
        })
    }

    fn epilogue<'a>(z: &'a Option<Vec<f32>>, alpha: f32, beta: f32) -> EpilogueArgs<'a> {
        let mut e = EpilogueArgs::new(alpha, beta);
        if let Some(z) = z {
            e = e.with_residual(z);
        }
        e
    }

    /// max_rel_err of the current y against the reference, computed on first use.
    fn max_rel_err(&mut self, p: &ConvProblem) -> CliResult<f64> {
        if self.reference.is_none() {
            self.reference = Some(autodnn::reference::conv_forward_fused(
                p,
                &self.x,
                &self.w,
                self.alpha as f64,
                self.beta as f64,
                None,
                self.z.as_deref(),
            )?);
        }
        let reference = self.reference.as_deref().unwrap_or(&[]);
        Ok(max_rel_err(p, &self.y, reference))
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

fn display_name(spec: &ProblemSpec) -> String {
    if spec.name.is_empty() {
        spec.to_string()
    } else {
        spec.name.clone()
    }
}

/// The human table's column widths.
struct Table {
    problem: usize,
    algo: usize,
    check: bool,
}

impl Table {
    fn header(&self, out: &mut impl Write) -> CliResult {
        self.row(
            out,
            ["problem", "algo", "status", "ms", "GFLOP/s", "workspace"],
            "max_rel_err",
            "note",
        )
    }

    fn row(&self, out: &mut impl Write, c: [&str; 6], err: &str, note: &str) -> CliResult {
        let (pw, aw) = (self.problem, self.algo);
        let mut line = format!(
            "{:<pw$}  {:<aw$}  {:<8}  {:>10}  {:>9}  {:>12}",
            c[0], c[1], c[2], c[3], c[4], c[5]
        );
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

    fn result(&self, out: &mut impl Write, problem: &str, r: &AlgoResult) -> CliResult {
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
            [problem, r.algo, r.status.name(), &ms, &gf, &ws],
            &err,
            note,
        )
    }
}

fn bench(
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

pub fn to_json<T: Serialize>(v: &T) -> CliResult<String> {
    serde_json::to_string(v).map_err(|e| CliError::fail(format!("encoding JSON: {e}")))
}

#[derive(Debug, Serialize)]
struct RealDataReport<'a> {
    problem: String,
    algo: &'static str,
    ms: f64,
    output: String,
    shape: &'a [usize],
    max_rel_err: Option<f64>,
}

/// Shapes of x, w and y as stored in files of `layout`.
fn file_shapes(p: &ConvProblem, layout: Layout) -> ([usize; 4], [usize; 4], [usize; 4]) {
    let [n, c, h, w] = p.x().dims();
    let [k, cg, r, s] = p.w().dims();
    let [_, _, oh, ow] = p.y().dims();
    match layout {
        Layout::Nchw => ([n, c, h, w], [k, cg, r, s], [n, k, oh, ow]),
        Layout::Nhwc => ([n, h, w, c], [k, r, s, cg], [n, oh, ow, k]),
    }
}

fn run_real_data(
    args: &ConvArgs,
    handle: &Handle,
    job: &Job,
    algo: &'static dyn ConvAlgorithm,
    paths: [&Path; 3],
    out: &mut impl Write,
) -> CliResult {
    let p = &job.problem;
    let layout = Layout::from(args.layout);
    let (xs, ws, ys) = file_shapes(p, layout);
    let (xdesc, wdesc) = match layout {
        Layout::Nchw => ("NCHW", "KCRS: K, C/groups, R, S"),
        Layout::Nhwc => ("NHWC", "KRSC: K, R, S, C/groups"),
    };
    let x = npy::read_f32(paths[0], &xs, xdesc)?;
    let w = npy::read_f32(paths[1], &ws, wdesc)?;
    if x.len() != p.x().span() || w.len() != p.w().elements() {
        return Err(CliError::fail(format!(
            "problem {}: tensors are not packed",
            job.spec
        )));
    }
    let bias = match &args.bias {
        Some(path) => Some(npy::read_f32(
            path,
            &[p.w().k()],
            "K: one value per output channel",
        )?),
        None => None,
    };
    let z = match &args.residual {
        Some(path) => Some(npy::read_f32(path, &ys, xdesc)?),
        None => None,
    };
    let mut y = data::filled(p.y().span(), 0.0, "y")?;
    let mut epi = EpilogueArgs::new(args.alpha, args.beta);
    if let Some(b) = &bias {
        epi = epi.with_bias(b);
    }
    if let Some(z) = &z {
        epi = epi.with_residual(z);
    }
    let context = |e: Error| CliError::from(e).context(format!("{} on {}", algo.name(), job.spec));
    let prepared = if args.prepared {
        Some(
            handle
                .prepare_weights(p, algo.name(), &w)
                .map_err(context)?,
        )
    } else {
        None
    };
    let weights = match &prepared {
        Some(pw) => Weights::Prepared(pw),
        None => Weights::Plain(&w),
    };
    // y's prior contents (zeros) are what beta·z adds when no residual is given.
    let prior = y.clone();
    let t = Instant::now();
    handle
        .conv_forward_ex(p, algo.name(), &x, weights, &mut y, &epi, None)
        .map_err(context)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    npy::write_f32(paths[2], &ys, &y[..p.y().elements()])?;
    let max_rel_err = if args.check {
        let reference = autodnn::reference::conv_forward_fused(
            p,
            &x,
            &w,
            args.alpha as f64,
            args.beta as f64,
            bias.as_deref(),
            Some(z.as_deref().unwrap_or(&prior)),
        )?;
        Some(max_rel_err(p, &y, &reference))
    } else {
        None
    };
    if args.json {
        let report = RealDataReport {
            problem: job.spec.to_string(),
            algo: algo.name(),
            ms,
            output: paths[2].display().to_string(),
            shape: &ys,
            max_rel_err,
        };
        writeln!(out, "{}", to_json(&report)?)?;
    } else {
        writeln!(out, "problem:     {}", job.spec)?;
        writeln!(out, "algo:        {}", algo.name())?;
        writeln!(out, "ms:          {ms:.3}")?;
        writeln!(out, "output:      {} {:?}", paths[2].display(), ys)?;
        if let Some(e) = max_rel_err {
            writeln!(out, "max_rel_err: {e:e}")?;
        }
    }
    out.flush()?;
    Ok(())
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
    fn algorithm_selection() {
        let all = select_algorithms("all").unwrap();
        assert_eq!(all.len(), autodnn::conv::algorithms().len());
        assert_eq!(select_algorithms("direct").unwrap().len(), 1);
        assert_eq!(select_algorithms("direct,direct").unwrap().len(), 1);
        assert!(matches!(select_algorithms("nosuch"), Err(CliError::Bad(_))));
        assert!(matches!(
            select_algorithms("direct,"),
            Err(CliError::Bad(_))
        ));
    }

    #[test]
    fn max_rel_err_is_relative_to_the_largest_reference_value() {
        let p = ProblemSpec::parse("mb1ic1ih3oc1kh1")
            .unwrap()
            .to_problem(Layout::Nchw)
            .unwrap();
        let reference: Vec<f64> = (1..=9).map(f64::from).collect();
        let mut y: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        assert_eq!(max_rel_err(&p, &y, &reference), 0.0);
        y[4] = 3.0; // off by 2; max |ref| is 9
        assert_eq!(max_rel_err(&p, &y, &reference), 2.0 / 9.0);
        y[7] = f32::NAN;
        assert!(max_rel_err(&p, &y, &reference).is_nan());
        let zeros = vec![0.0f64; 9];
        let y = vec![0.0f32; 9];
        assert_eq!(max_rel_err(&p, &y, &zeros), 0.0);
    }

    #[test]
    fn gflops_of_zero_time_is_none() {
        assert_eq!(gflops(1e9, 0.0), None);
        assert_eq!(gflops(2e9, 1000.0), Some(2.0));
    }
}
