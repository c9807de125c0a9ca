//! `autodnn tune`: select (and, by policy, time) an algorithm for every distinct layer of a
//! model or problem list, run each choice with the fallback chain, and report per layer the
//! choice, where it came from and its time, then the network's totals.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use autodnn::conv::{Accuracy, EpilogueArgs, Weights};
use autodnn::select::budget::{choose_timed, TimingCase};
use autodnn::select::deploy::DeployedPlan;
use autodnn::select::{ConvPlan, Plan, Policy, Source};
use autodnn::{ConvProblem, Handle, Layout, ProblemSpec};
use clap::Args;
use serde::Serialize;

use autodnn::op::{
    Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, Operation, Registered, TensorMut,
};
use autodnn::OpKind;

use crate::conv_cmd::{self, Dir, DirArg, LayoutArg};
use crate::data;
use crate::error::{CliError, CliResult};

/// Arguments of `autodnn tune`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Problem strings (benchdnn style) or files of them, one per line
    #[arg(value_name = "PROBLEM")]
    pub problems: Vec<String>,
    /// A built-in model's layers instead of PROBLEMs
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Batch size [default: 1 with --model, each problem's own otherwise]
    #[arg(long, value_name = "N")]
    pub mb: Option<usize>,
    /// Selection policy: heuristic, benchmark, cached_only, exhaustive
    #[arg(long, value_name = "P", default_value = "benchmark")]
    pub policy: String,
    /// Tuning-cache file [default: the per-user cache, see `autodnn info`]
    #[arg(long, value_name = "FILE")]
    pub cache: Option<PathBuf>,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,
    /// Most workspace bytes one call may use
    #[arg(long, value_name = "BYTES")]
    pub workspace_limit: Option<usize>,
    /// Select only algorithms whose results do not depend on thread scheduling
    #[arg(long)]
    pub deterministic: bool,
    #[command(flatten)]
    pub precision: crate::math_args::MathArgs,
    /// Memory order of x and y
    #[arg(long, value_enum, default_value_t = LayoutArg::Nchw)]
    pub layout: LayoutArg,
    /// Timed runs of each layer's choice after selection (after one warm-up); the median is
    /// reported
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub reps: usize,
    /// Compare every layer's output with the f64 reference (to the tolerance of the algorithm
    /// that ran)
    #[arg(long)]
    pub check: bool,
    /// JSON Lines: one object per distinct layer, then a total
    #[arg(long)]
    pub json: bool,
    /// Direction: fwd, bwd_d (backward data), bwd_w (backward filter), bwd_wb (backward
    /// filter plus the bias gradient, its algorithm selected too: a layer's ms is the sum) or
    /// all (fwd, bwd_d and bwd_w per layer, then a total per direction and their sum)
    #[arg(long, value_enum, value_name = "DIR", default_value_t = DirArg::Fwd)]
    pub dir: DirArg,
    /// Select and time for calls with prepared weights (the filter packed or transformed
    /// once, as an inference deployment runs): each candidate is timed on its own prepared
    /// weights, the tuning cache keeps these rankings apart from plain calls', and a layer's
    /// ms is a call with the chosen algorithm's prepared weights (its preparation's ms and
    /// bytes reported beside). Forward only
    #[arg(long)]
    pub prepared: bool,
    /// Most milliseconds of timing for the whole network (benchmark and exhaustive
    /// policies): the layers whose measurement the cost model expects to gain most per
    /// millisecond of tuning are timed while the predicted costs fit, the others take the
    /// heuristic's pick or a measurement already cached (their source says which). Forward
    /// only
    #[arg(long, value_name = "MS")]
    pub budget_ms: Option<f64>,
    /// With --prepared: write each layer's deployable plan (the choice, its ranking and the
    /// prepared filter) into DIR, one file per distinct problem
    #[arg(long, value_name = "DIR")]
    pub save_plans: Option<PathBuf>,
    /// Run each layer from its plan in DIR (written by --save-plans): no selection, no
    /// timing, no filter transformation (unless the plan was made under another instruction
    /// set: then prepared again); the handle is warmed up for the plans (workspace and packing
    /// buffers), then the first inference (each distinct layer once, in order) is reported
    /// beside the steady ones
    #[arg(long, value_name = "DIR")]
    pub load_plans: Option<PathBuf>,
}

/// One distinct layer's result (a JSON line).
#[derive(Debug, Serialize)]
struct LayerLine {
    problem: String,
    dir: &'static str,
    count: usize,
    algo: Option<&'static str>,
    source: Option<&'static str>,
    ms: Option<f64>,
    workspace_bytes: Option<usize>,
    fallbacks: usize,
    /// bwd_wb: the bias gradient's algorithm (its time is part of `ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    bias_algo: Option<&'static str>,
    /// bwd_wb: the bias gradient's time, part of `ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    bias_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_rel_err: Option<f64>,
    /// --prepared: milliseconds of preparing the chosen algorithm's weights (once).
    #[serde(skip_serializing_if = "Option::is_none")]
    prepare_ms: Option<f64>,
    /// --prepared: bytes the prepared weights hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    prepared_bytes: Option<usize>,
    /// --load-plans: milliseconds of the first call after loading the plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    first_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The last JSON line.
#[derive(Debug, Serialize)]
struct TotalLine {
    total: bool,
    dir: &'static str,
    total_ms: f64,
    tuning_ms: f64,
    cache_hits: usize,
    layers: usize,
    instances: usize,
    fallbacks: usize,
    /// --budget-ms: the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    budget_ms: Option<f64>,
    /// --budget-ms: how many layers were timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    timed_layers: Option<usize>,
    /// --load-plans: the first inference after loading (each distinct layer once).
    #[serde(skip_serializing_if = "Option::is_none")]
    first_calls_ms: Option<f64>,
    /// --load-plans: the median of the steady inferences (each distinct layer once).
    #[serde(skip_serializing_if = "Option::is_none")]
    steady_calls_ms: Option<f64>,
}

/// One direction's running totals.
#[derive(Debug, Default, Clone, Copy)]
struct Acc {
    total_ms: f64,
    tuning_ms: f64,
    hits: usize,
    fallbacks: usize,
}

/// What selecting cost and where the choice came from.
struct PlanInfo {
    selection_ms: f64,
    cache_hit: bool,
    measured: bool,
}

impl PlanInfo {
    fn of<O: Operation>(plan: &Plan<O>) -> PlanInfo {
        PlanInfo {
            selection_ms: plan.selection_ms,
            cache_hit: plan.cache_hit,
            measured: matches!(plan.source, Source::Benchmark | Source::Exhaustive),
        }
    }
}

struct Layer {
    spec: ProblemSpec,
    problem: ConvProblem,
    count: usize,
}

/// The distinct layers, in input order, each with the sum of its counts.
fn distinct(specs: Vec<ProblemSpec>, layout: Layout) -> CliResult<Vec<Layer>> {
    let mut out: Vec<Layer> = Vec::new();
    let mut index: HashMap<ConvProblem, usize> = HashMap::new();
    for spec in specs {
        let problem = spec
            .to_problem(layout)
            .map_err(|e| CliError::from(e).context(format!("problem {spec}")))?;
        let count = spec.count();
        match index.get(&problem) {
            Some(&i) => out[i].count += count,
            None => {
                index.insert(problem, out.len());
                out.push(Layer {
                    spec,
                    problem,
                    count,
                });
            }
        }
    }
    Ok(out)
}

/// Runs `autodnn tune`.
///
/// # Errors
/// Bad input for bad arguments or problems; a failure when a layer cannot run at all (after
/// every result is written), when an output is wrong under `--check`, or when the cache
/// cannot be written.
pub fn run(args: &TuneArgs, out: &mut impl Write) -> CliResult {
    if args.reps == 0 {
        return Err(CliError::bad("bad --reps = 0: must be at least 1"));
    }
    if args.mb == Some(0) {
        return Err(CliError::bad("bad --mb = 0: must be at least 1"));
    }
    let policy = Policy::parse(&args.policy).map_err(|e| CliError::from(e).context("--policy"))?;
    let layout = Layout::from(args.layout);
    let specs = conv_cmd::problem_specs(args.model.as_deref(), &args.problems, args.mb)?;
    let layers = distinct(specs, layout)?;
    let handle = conv_cmd::make_handle(args.threads)?;
    if let Some(name) = handle.forced_algo() {
        autodnn::conv::find(&name).map_err(|e| CliError::from(e).context("AUTODNN_ALGO"))?;
    }
    handle.set_policy(policy);
    handle.set_deterministic(args.deterministic);
    handle.set_workspace_limit(args.workspace_limit);
    args.precision.apply(&handle)?;
    if args.prepared && args.dir != DirArg::Fwd {
        return Err(CliError::bad(
            "bad --prepared with --dir: prepared weights serve the forward convolution only",
        ));
    }
    handle.set_prepared_selection(args.prepared);
    if args.save_plans.is_some() && !args.prepared {
        return Err(CliError::bad(
            "bad --save-plans without --prepared: a plan holds prepared weights",
        ));
    }
    for (flag, dir) in [
        ("--save-plans", &args.save_plans),
        ("--load-plans", &args.load_plans),
    ] {
        if let Some(d) = dir {
            if !d.is_dir() {
                return Err(CliError::bad(format!(
                    "bad {flag} {}: not a folder that exists",
                    d.display()
                )));
            }
            if args.dir != DirArg::Fwd {
                return Err(CliError::bad(format!(
                    "bad {flag} with --dir: plans serve the forward convolution only"
                )));
            }
        }
    }
    if let Some(b) = args.budget_ms {
        if !(b.is_finite() && b >= 0.0) {
            return Err(CliError::bad(format!(
                "bad --budget-ms = {b}: must be a number of milliseconds, 0 or more"
            )));
        }
        if args.dir != DirArg::Fwd {
            return Err(CliError::bad(
                "bad --budget-ms with --dir: the budget covers the forward convolution only",
            ));
        }
    }
    let cache_path = args
        .cache
        .clone()
        .unwrap_or_else(autodnn::default_cache_path);
    // Only the measuring policies write the cache; the others read it and change nothing.
    if matches!(policy, Policy::Benchmark | Policy::Exhaustive) {
        handle.load_tuning_cache(&cache_path)?;
    } else {
        handle.load_tuning_cache_read_only(&cache_path)?;
    }

    // Cores at full speed before the first layer is selected or timed, under every policy
    // alike (outside the tuning time).
    handle.wake_cores();
    // --budget-ms: the layers to time (the others take the heuristic's pick), from their
    // heuristic rankings.
    let timed: Option<Vec<bool>> = args.budget_ms.map(|b| {
        let cases: Vec<TimingCase> = layers
            .iter()
            .map(|l| match handle.get_conv_algorithms(&l.problem) {
                Ok(ranked) => TimingCase::new(&ranked, l.count, handle.max_timed()),
                Err(_) => TimingCase {
                    cost_ms: 0.0,
                    gain_ms: 0.0,
                },
            })
            .collect();
        choose_timed(&cases, b)
    });
    let mut timed_layers = 0usize;
    let loaded = match &args.load_plans {
        Some(dir) => {
            let plans = load_plans(&handle, &layers, dir)?;
            let refs: Vec<&DeployedPlan> = plans.iter().collect();
            handle.warm_up_plans(&refs)?;
            let times = time_plans(&handle, &layers, &plans, args.reps)?;
            Some((plans, times))
        }
        None => None,
    };
    let (first_calls, steady_calls) = loaded
        .as_ref()
        .map_or((0.0, 0.0), |(_, t)| (t.first_total, t.steady_total));
    let dirs = args.dir.dirs();
    // Without --dir, the output is today's forward one (plus the "dir" field).
    let labelled = args.dir != DirArg::Fwd;
    let progress = progress_bar(layers.len() * dirs.len());
    let mut acc = vec![Acc::default(); dirs.len()];
    let mut measured = false;
    let mut failures = Vec::new();
    if !args.json {
        let dir_col = if labelled {
            format!("  {:<6}", "dir")
        } else {
            String::new()
        };
        writeln!(
            out,
            "{:<40}{dir_col}  {:>5}  {:<14}  {:<10}  {:>10}  {:>12}  {:>9}",
            "layer", "count", "algo", "source", "ms", "workspace", "fallbacks"
        )?;
    }
    for (li, layer) in layers.iter().enumerate() {
        if let (Some(t), Some(b)) = (&timed, args.budget_ms) {
            // Within the budget as spent so far (the costs were predictions).
            let time_it = t[li] && acc[0].tuning_ms < b;
            // The others: a measurement already cached, else the heuristic's pick.
            handle.set_policy(if time_it { policy } else { Policy::CachedOnly });
            timed_layers += time_it as usize;
        }
        for (di, &dir) in dirs.iter().enumerate() {
            if let Some(pb) = &progress {
                pb.set_message(display_name(&layer.spec));
            }
            let line = match (dir, &loaded) {
                (Dir::Fwd, Some((plans, times))) => {
                    let t = (times.first[li], times.steady[li]);
                    load_layer(&handle, layer, args, &plans[li], t).map(|line| (line, Vec::new()))
                }
                (Dir::Fwd, None) => tune_layer(&handle, layer, args).map(|(line, plan)| {
                    let plans = plan.iter().map(PlanInfo::of).collect::<Vec<_>>();
                    (line, plans)
                }),
                _ => tune_layer_bwd(&handle, layer, dir, args),
            };
            if let Some(pb) = &progress {
                pb.inc(1);
            }
            let (line, plans) = line?;
            let a = &mut acc[di];
            for plan in &plans {
                a.tuning_ms += plan.selection_ms;
                a.hits += plan.cache_hit as usize;
                measured |= plan.measured;
            }
            a.fallbacks += line.fallbacks;
            if let Some(ms) = line.ms {
                a.total_ms += ms * layer.count as f64;
            }
            if let Some(e) = &line.error {
                let tag = if labelled {
                    format!(" ({})", dir.name())
                } else {
                    String::new()
                };
                failures.push(format!("{}{tag}: {e}", display_name(&layer.spec)));
            }
            if args.json {
                writeln!(out, "{}", conv_cmd::to_json(&line)?)?;
            } else {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                let dir_col = if labelled {
                    format!("  {:<6}", dir.name())
                } else {
                    String::new()
                };
                let algo = match (line.algo, line.bias_algo) {
                    (Some(a), Some(b)) => format!("{a}+{b}"),
                    (Some(a), None) => a.to_string(),
                    (None, _) => "-".to_string(),
                };
                writeln!(
                    out,
                    "{:<40}{dir_col}  {:>5}  {:<14}  {:<10}  {:>10}  {:>12}  {:>9}{}",
                    display_name(&layer.spec),
                    layer.count,
                    algo,
                    line.source.unwrap_or("-"),
                    opt(line.ms.map(|m| format!("{m:.3}"))),
                    opt(line.workspace_bytes.map(|w| w.to_string())),
                    line.fallbacks,
                    line.error
                        .as_ref()
                        .map_or(String::new(), |e| format!("  failed: {e}"))
                )?;
            }
            out.flush()?;
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    let instances: usize = layers.iter().map(|l| l.count).sum();
    let mut totals: Vec<(&'static str, Acc)> = dirs
        .iter()
        .map(|d| d.name())
        .zip(acc.iter().copied())
        .collect();
    if dirs.len() > 1 {
        let sum = acc.iter().fold(Acc::default(), |s, a| Acc {
            total_ms: s.total_ms + a.total_ms,
            tuning_ms: s.tuning_ms + a.tuning_ms,
            hits: s.hits + a.hits,
            fallbacks: s.fallbacks + a.fallbacks,
        });
        totals.push(("all", sum));
    }
    let names: Vec<&str> = dirs.iter().map(|d| d.name()).collect();
    for (dir, a) in totals {
        // Layers selected: once per direction (bwd_wb: the filter and the bias each).
        let n = if dir == "all" {
            layers.len() * dirs.len()
        } else {
            layers.len()
        };
        let selections = if dir == Dir::BwdWb.name() { 2 * n } else { n };
        if args.json {
            let total = TotalLine {
                total: true,
                dir,
                total_ms: a.total_ms,
                tuning_ms: a.tuning_ms,
                cache_hits: a.hits,
                layers: layers.len(),
                instances,
                fallbacks: a.fallbacks,
                budget_ms: args.budget_ms,
                timed_layers: args.budget_ms.map(|_| timed_layers),
                first_calls_ms: args.load_plans.as_ref().map(|_| first_calls),
                steady_calls_ms: args.load_plans.as_ref().map(|_| steady_calls),
            };
            writeln!(out, "{}", conv_cmd::to_json(&total)?)?;
        } else {
            let label = if !labelled {
                "total".to_string()
            } else if dir == "all" {
                format!("total all ({})", names.join(" + "))
            } else {
                format!("total {dir}")
            };
            writeln!(
                out,
                "{label}: network convolution time {:.3} ms ({} layers, {instances} \
                 instances); tuning {:.3} ms; cache hits {} of {selections}; fallback events \
                 {}; policy {}",
                a.total_ms,
                layers.len(),
                a.tuning_ms,
                a.hits,
                a.fallbacks,
                policy.name()
            )?;
            if args.load_plans.is_some() {
                writeln!(
                    out,
                    "plans loaded: first inference {first_calls:.3} ms against steady \
                     inferences {steady_calls:.3} ms (median; each distinct layer once, in order)"
                )?;
            }
            if let Some(b) = args.budget_ms {
                writeln!(
                    out,
                    "budget {b} ms: {timed_layers} of {} layers timed, the others from the \
                     cache or the heuristic",
                    layers.len()
                )?;
            }
        }
    }
    out.flush()?;
    if measured {
        handle
            .save_tuning_cache()
            .map_err(|e| CliError::fail(format!("saving the tuning cache: {e}")))?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::fail(format!(
            "{} of {} layers failed: {}",
            failures.len(),
            layers.len() * dirs.len(),
            failures.join("; ")
        )))
    }
}

fn display_name(spec: &ProblemSpec) -> String {
    if spec.name.is_empty() {
        spec.to_string()
    } else {
        spec.name.clone()
    }
}

/// A progress bar on stderr when it is a terminal.
fn progress_bar(len: usize) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::with_draw_target(
        Some(len as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("tuning {bar:30} {pos}/{len} layers  {msg}")
    {
        pb.set_style(style);
    }
    Some(pb)
}

/// Selects, runs (warm-up, with the fallback chain) and times one layer. Failures of the layer
/// itself become the line's `error`; bad input is returned.
fn tune_layer(
    handle: &Handle,
    layer: &Layer,
    args: &TuneArgs,
) -> CliResult<(LayerLine, Option<ConvPlan>)> {
    let p = &layer.problem;
    let mut line = LayerLine {
        problem: layer.spec.to_string(),
        dir: Dir::Fwd.name(),
        count: layer.count,
        algo: None,
        source: None,
        ms: None,
        workspace_bytes: None,
        fallbacks: 0,
        bias_algo: None,
        bias_ms: None,
        max_rel_err: None,
        prepare_ms: None,
        prepared_bytes: None,
        first_ms: None,
        error: None,
    };
    let x = data::small_ints(p.x().span(), data::X_SEED, "x")?;
    let w = data::small_ints(p.w().elements(), data::W_SEED, "w")?;
    let mut y = data::filled(p.y().span(), 0.0, "y")?;
    let epi = EpilogueArgs::default();
    let fail = |e: autodnn::Error| -> CliResult<()> {
        if e.is_bad_input() {
            Err(CliError::from(e).context(format!("problem {}", layer.spec)))
        } else {
            Ok(())
        }
    };
    let failed_events = |e: &autodnn::Error| match e {
        autodnn::Error::AllFailed { tried, .. } => tried.len(),
        _ => 0,
    };
    let plan = match handle.plan_conv(p, &x, &w, &epi) {
        Ok(plan) => plan,
        Err(e) => {
            line.error = Some(e.to_string());
            fail(e)?;
            return Ok((line, None));
        }
    };
    line.source = Some(plan.source.name());
    // The warm-up run, with the fallback chain: its events are the layer's fallbacks.
    let report = match handle.conv_forward_plan(&plan, &x, Weights::Plain(&w), &mut y, &epi, None) {
        Ok(r) => r,
        Err(e) => {
            line.error = Some(e.to_string());
            line.fallbacks = failed_events(&e);
            fail(e)?;
            return Ok((line, Some(plan)));
        }
    };
    line.fallbacks = report.events.len();
    line.algo = Some(report.algo);
    line.workspace_bytes = Some(report.workspace_bytes);
    if args.check {
        check_forward(&mut line, p, &x, &w, &y, report.algo)?;
    }
    // --prepared: the weights prepared once for what ran, outside the timing.
    let prepared = if args.prepared {
        let t = std::time::Instant::now();
        match handle.prepare_weights(p, report.algo, &w) {
            Ok(pw) => {
                line.prepare_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                line.prepared_bytes = Some(pw.bytes());
                Some(pw)
            }
            Err(e) => {
                line.error = Some(e.to_string());
                fail(e)?;
                return Ok((line, Some(plan)));
            }
        }
    } else {
        None
    };
    // Fresh timed runs of what ran, the algorithms that failed before it left out.
    let pinned = plan.starting_at(report.algo);
    if let (Some(dir), Some(pw)) = (&args.save_plans, &prepared) {
        let d = DeployedPlan::new(pinned.clone(), pw.clone(), handle.isa())?;
        let path = plan_path(dir, p);
        std::fs::write(&path, d.to_bytes()?)
            .map_err(|e| CliError::fail(format!("writing {}: {e}", path.display())))?;
    }
    let mut times = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t = std::time::Instant::now();
        let run = match &prepared {
            Some(pw) => handle.conv_forward_ex(
                p,
                report.algo,
                &x,
                Weights::Prepared(pw),
                &mut y,
                &epi,
                None,
            ),
            None => handle
                .conv_forward_plan(&pinned, &x, Weights::Plain(&w), &mut y, &epi, None)
                .map(|_| ()),
        };
        if let Err(e) = run {
            line.error = Some(e.to_string());
            fail(e)?;
            return Ok((line, Some(plan)));
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    line.ms = Some(conv_cmd::median_ms(&mut times));
    Ok((line, Some(plan)))
}

/// `--check` of a forward layer: max_rel_err of `y` against the f64 reference, and an error
/// on the line when it exceeds the tolerance of `algo`, the algorithm that computed it.
fn check_forward(
    line: &mut LayerLine,
    p: &ConvProblem,
    x: &[f32],
    w: &[f32],
    y: &[f32],
    algo: &str,
) -> CliResult<()> {
    let reference = autodnn::reference::conv_forward(p, x, w)?;
    let err = conv_cmd::max_rel_err(p, y, &reference);
    line.max_rel_err = Some(err);
    let tolerance = autodnn::conv::find(algo)
        .map(|a| a.accuracy())
        .unwrap_or(Accuracy::Exact)
        .integer_tolerance();
    if err.is_nan() || err > tolerance {
        line.error = Some(format!(
            "wrong result from {algo}: max_rel_err {err:e} exceeds {tolerance:e}"
        ));
    }
    Ok(())
}

/// The plan file of problem `p` in `dir`: its benchdnn string, unnamed, with characters other
/// than letters, digits, `_` and `-` replaced.
fn plan_path(dir: &std::path::Path, p: &ConvProblem) -> PathBuf {
    let s: String = ProblemSpec::from_problem(p, "")
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let layout = p.x().layout().map_or("strided", |l| l.name());
    dir.join(format!("{s}_{layout}.plan"))
}

/// `--load-plans`: every layer's plan read and checked before anything runs (the filter
/// given, to prepare again a plan made under another instruction set).
fn load_plans(
    handle: &Handle,
    layers: &[Layer],
    dir: &std::path::Path,
) -> CliResult<Vec<DeployedPlan>> {
    layers
        .iter()
        .map(|layer| {
            let p = &layer.problem;
            let path = plan_path(dir, p);
            let bytes = std::fs::read(&path).map_err(|e| {
                CliError::bad(format!("--load-plans: reading {}: {e}", path.display()))
            })?;
            let w = data::small_ints(p.w().elements(), data::W_SEED, "w")?;
            handle
                .load_plan(&bytes, p, Some(&w))
                .map_err(|e| CliError::from(e).context(format!("--load-plans {}", path.display())))
        })
        .collect()
}

/// `--load-plans`: the layers' times from their plans, taken a whole inference at a time
/// (each distinct layer once, in order, as a network runs them): the first inference right
/// after loading, then `reps` steady ones.
struct PlanTimes {
    /// Per layer: its first call, and the median of its steady calls.
    first: Vec<f64>,
    steady: Vec<f64>,
    /// The first inference, and the median of the steady ones.
    first_total: f64,
    steady_total: f64,
}

fn time_plans(
    handle: &Handle,
    layers: &[Layer],
    plans: &[DeployedPlan],
    reps: usize,
) -> CliResult<PlanTimes> {
    // Every layer's input and output first, so that an inference only runs convolutions.
    let mut data = layers
        .iter()
        .map(|l| {
            let p = &l.problem;
            Ok((
                data::small_ints(p.x().span(), data::X_SEED, "x")?,
                data::filled(p.y().span(), 0.0, "y")?,
            ))
        })
        .collect::<CliResult<Vec<_>>>()?;
    let epi = EpilogueArgs::default();
    let mut inference = || -> CliResult<Vec<f64>> {
        let mut times = Vec::with_capacity(plans.len());
        for (d, (x, y)) in plans.iter().zip(data.iter_mut()) {
            let t = std::time::Instant::now();
            handle.conv_forward_deployed(d, x, y, &epi)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(times)
    };
    let first = inference()?;
    let mut per_layer = vec![Vec::with_capacity(reps); plans.len()];
    let mut totals = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = inference()?;
        totals.push(t.iter().sum::<f64>());
        for (v, ms) in per_layer.iter_mut().zip(t) {
            v.push(ms);
        }
    }
    Ok(PlanTimes {
        first_total: first.iter().sum(),
        first,
        steady: per_layer
            .iter_mut()
            .map(|v| conv_cmd::median_ms(v))
            .collect(),
        steady_total: conv_cmd::median_ms(&mut totals),
    })
}

/// `--load-plans`: one layer's line from its plan and its times `(first, steady)`; with
/// `--check`, one more call checked against the reference.
fn load_layer(
    handle: &Handle,
    layer: &Layer,
    args: &TuneArgs,
    d: &DeployedPlan,
    (first_ms, steady_ms): (f64, f64),
) -> CliResult<LayerLine> {
    let p = &layer.problem;
    let mut line = LayerLine {
        problem: layer.spec.to_string(),
        dir: Dir::Fwd.name(),
        count: layer.count,
        algo: Some(d.weights().algo()),
        source: Some("plan"),
        ms: Some(steady_ms),
        workspace_bytes: Some(handle.conv_workspace_size(p, d.weights().algo())?),
        fallbacks: 0,
        bias_algo: None,
        bias_ms: None,
        max_rel_err: None,
        prepare_ms: None,
        prepared_bytes: Some(d.weights().bytes()),
        first_ms: Some(first_ms),
        error: None,
    };
    if args.check {
        let x = data::small_ints(p.x().span(), data::X_SEED, "x")?;
        let w = data::small_ints(p.w().elements(), data::W_SEED, "w")?;
        let mut y = data::filled(p.y().span(), 0.0, "y")?;
        handle.conv_forward_deployed(d, &x, &mut y, &EpilogueArgs::default())?;
        check_forward(&mut line, p, &x, &w, &y, d.weights().algo())?;
    }
    Ok(line)
}

/// max_rel_err of an output against its oracle.
type Oracle<'a> = dyn Fn(&[f32]) -> CliResult<f64> + 'a;

/// One backward operation's selection, warm-up run (with the fallback chain) and timed runs
/// on a layer: the algorithm, the plan, the median ms, the workspace, the fallback events and,
/// with `check`, max_rel_err against `reference` (an error beyond the algorithm's tolerance
/// is the result's `error`).
struct OpTuned {
    algo: Option<&'static str>,
    source: Option<&'static str>,
    ms: Option<f64>,
    workspace_bytes: Option<usize>,
    fallbacks: usize,
    max_rel_err: Option<f64>,
    error: Option<String>,
    plan: Option<PlanInfo>,
}

/// Selects through [`Handle::plan`], runs through [`Handle::run_plan`] (the warm-up, whose
/// fallback events count) and times `reps` fresh runs of what ran. Bad input is returned;
/// other failures are the result's `error`.
fn tune_op<O>(
    handle: &Handle,
    p: &ConvProblem,
    inputs: &O::Inputs<'_>,
    out: &mut [f32],
    reps: usize,
    reference: Option<&Oracle>,
) -> CliResult<OpTuned>
where
    O: Registered<Problem = ConvProblem>,
    for<'a> O: Operation<Output<'a> = TensorMut<'a>>,
{
    let mut t = OpTuned {
        algo: None,
        source: None,
        ms: None,
        workspace_bytes: None,
        fallbacks: 0,
        max_rel_err: None,
        error: None,
        plan: None,
    };
    let fail = |e: autodnn::Error, t: &mut OpTuned| -> CliResult<()> {
        t.error = Some(e.to_string());
        if e.is_bad_input() {
            Err(CliError::from(e))
        } else {
            Ok(())
        }
    };
    let plan = match handle.plan::<O>(p, inputs) {
        Ok(plan) => plan,
        Err(e) => {
            fail(e, &mut t)?;
            return Ok(t);
        }
    };
    t.plan = Some(PlanInfo::of(&plan));
    t.source = Some(plan.source.name());
    let report = match handle.run_plan::<O>(&plan, inputs, &mut TensorMut::F32(out), None) {
        Ok(r) => r,
        Err(e) => {
            if let autodnn::Error::AllFailed { tried, .. } = &e {
                t.fallbacks = tried.len();
            }
            fail(e, &mut t)?;
            return Ok(t);
        }
    };
    t.fallbacks = report.events.len();
    t.algo = Some(report.algo);
    t.workspace_bytes = Some(report.workspace_bytes);
    if let Some(reference) = reference {
        let err = reference(out)?;
        t.max_rel_err = Some(err);
        let tolerance = O::algorithms()
            .iter()
            .copied()
            .find(|a| Algorithm::<O>::name(*a) == report.algo)
            .map(|a| Algorithm::<O>::accuracy(a))
            .unwrap_or(Accuracy::Exact)
            .integer_tolerance();
        if err.is_nan() || err > tolerance {
            t.error = Some(format!(
                "wrong result from {}: max_rel_err {err:e} exceeds {tolerance:e}",
                report.algo
            ));
        }
    }
    let pinned = plan.starting_at(report.algo);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = std::time::Instant::now();
        if let Err(e) = handle.run_plan::<O>(&pinned, inputs, &mut TensorMut::F32(out), None) {
            fail(e, &mut t)?;
            return Ok(t);
        }
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    t.ms = Some(conv_cmd::median_ms(&mut times));
    Ok(t)
}

/// [`tune_layer`] for a backward direction (bwd_wb: the filter, then the bias gradient, each
/// selected; the line's ms is their sum).
fn tune_layer_bwd(
    handle: &Handle,
    layer: &Layer,
    dir: Dir,
    args: &TuneArgs,
) -> CliResult<(LayerLine, Vec<PlanInfo>)> {
    let context = |e: CliError| e.context(format!("problem {} ({})", layer.spec, dir.name()));
    let p = layer
        .problem
        .for_op(dir.op())
        .map_err(|e| context(e.into()))?;
    let x = data::small_ints(p.x().span(), data::X_SEED, "x")?;
    let w = data::small_ints(p.w().elements(), data::W_SEED, "w")?;
    let dy = data::small_ints(p.y().span(), data::DY_SEED, "dy")?;
    let mut o = data::filled(conv_cmd::output_len(&p, dir.op()), 0.0, "the output")?;
    let reps = args.reps;
    let t = match dir.op() {
        OpKind::ConvBackwardData => {
            let reference = |o: &[f32]| -> CliResult<f64> {
                let r = autodnn::reference::conv_backward_data(&p, &dy, &w)?;
                Ok(conv_cmd::max_rel_err_in(p.x(), o, &r))
            };
            let check: Option<&Oracle> = if args.check { Some(&reference) } else { None };
            tune_op::<ConvBackwardData>(
                handle,
                &p,
                &ConvBwdDataInputs::new(&dy, &w),
                &mut o,
                reps,
                check,
            )
        }
        _ => {
            let reference = |o: &[f32]| -> CliResult<f64> {
                let r = autodnn::reference::conv_backward_filter(&p, &x, &dy)?;
                Ok(conv_cmd::max_rel_err_flat(o, &r))
            };
            let check: Option<&Oracle> = if args.check { Some(&reference) } else { None };
            tune_op::<ConvBackwardFilter>(
                handle,
                &p,
                &ConvBwdFilterInputs::new(&x, &dy),
                &mut o,
                reps,
                check,
            )
        }
    }
    .map_err(context)?;
    let mut line = LayerLine {
        problem: layer.spec.to_string(),
        dir: dir.name(),
        count: layer.count,
        algo: t.algo,
        source: t.source,
        ms: t.ms,
        workspace_bytes: t.workspace_bytes,
        fallbacks: t.fallbacks,
        bias_algo: None,
        bias_ms: None,
        max_rel_err: t.max_rel_err,
        prepare_ms: None,
        prepared_bytes: None,
        first_ms: None,
        error: t.error,
    };
    let mut plans: Vec<PlanInfo> = t.plan.into_iter().collect();
    if dir == Dir::BwdWb {
        let pb = layer
            .problem
            .for_op(OpKind::ConvBackwardBias)
            .map_err(|e| context(e.into()))?;
        let mut db = data::filled(pb.w().k(), 0.0, "db")?;
        let reference = |o: &[f32]| -> CliResult<f64> {
            let r = autodnn::reference::conv_backward_bias(&pb, &dy)?;
            Ok(conv_cmd::max_rel_err_flat(o, &r))
        };
        let check: Option<&Oracle> = if args.check { Some(&reference) } else { None };
        let b = tune_op::<ConvBackwardBias>(
            handle,
            &pb,
            &ConvBwdBiasInputs::new(&dy),
            &mut db,
            reps,
            check,
        )
        .map_err(context)?;
        plans.extend(b.plan);
        line.bias_algo = b.algo;
        line.bias_ms = b.ms;
        line.fallbacks += b.fallbacks;
        line.ms = match (line.ms, b.ms) {
            (Some(f), Some(b)) => Some(f + b),
            _ => None,
        };
        line.workspace_bytes = match (line.workspace_bytes, b.workspace_bytes) {
            (Some(f), Some(b)) => Some(f.max(b)),
            (f, _) => f,
        };
        if let (Some(e), Some(be)) = (line.max_rel_err, b.max_rel_err) {
            line.max_rel_err = Some(e.max(be));
        }
        if line.error.is_none() {
            line.error = b.error.map(|e| format!("bias gradient: {e}"));
        }
    }
    Ok((line, plans))
}
