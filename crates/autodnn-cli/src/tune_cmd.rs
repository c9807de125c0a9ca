//! `autodnn tune`: select (and, by policy, time) an algorithm for every distinct layer of a
//! model or problem list, run each choice with the fallback chain, and report per layer the
//! choice, where it came from and its time, then the network's totals.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use autodnn::conv::{Accuracy, EpilogueArgs, Weights};
use autodnn::select::{ConvPlan, Policy, Source};
use autodnn::{ConvProblem, Handle, Layout, ProblemSpec};
use clap::Args;
use serde::Serialize;

use crate::conv_cmd::{self, LayoutArg};
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
}

/// One distinct layer's result (a JSON line).
#[derive(Debug, Serialize)]
struct LayerLine {
    problem: String,
    count: usize,
    algo: Option<&'static str>,
    source: Option<&'static str>,
    ms: Option<f64>,
    workspace_bytes: Option<usize>,
    fallbacks: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_rel_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The last JSON line.
#[derive(Debug, Serialize)]
struct TotalLine {
    total: bool,
    total_ms: f64,
    tuning_ms: f64,
    cache_hits: usize,
    layers: usize,
    instances: usize,
    fallbacks: usize,
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
    let progress = progress_bar(layers.len());
    let (mut total_ms, mut tuning_ms) = (0.0f64, 0.0f64);
    let (mut hits, mut fallbacks, mut measured) = (0usize, 0usize, false);
    let mut failures = Vec::new();
    if !args.json {
        writeln!(
            out,
            "{:<40}  {:>5}  {:<14}  {:<10}  {:>10}  {:>12}  {:>9}",
            "layer", "count", "algo", "source", "ms", "workspace", "fallbacks"
        )?;
    }
    for layer in &layers {
        if let Some(pb) = &progress {
            pb.set_message(display_name(&layer.spec));
        }
        let line = tune_layer(&handle, layer, args);
        if let Some(pb) = &progress {
            pb.inc(1);
        }
        let (line, plan) = line?;
        if let Some(plan) = &plan {
            tuning_ms += plan.selection_ms;
            hits += plan.cache_hit as usize;
            measured |= matches!(plan.source, Source::Benchmark | Source::Exhaustive);
        }
        fallbacks += line.fallbacks;
        if let Some(ms) = line.ms {
            total_ms += ms * layer.count as f64;
        }
        if let Some(e) = &line.error {
            failures.push(format!("{}: {e}", display_name(&layer.spec)));
        }
        if args.json {
            writeln!(out, "{}", conv_cmd::to_json(&line)?)?;
        } else {
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            writeln!(
                out,
                "{:<40}  {:>5}  {:<14}  {:<10}  {:>10}  {:>12}  {:>9}{}",
                display_name(&layer.spec),
                layer.count,
                line.algo.unwrap_or("-"),
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
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    let instances: usize = layers.iter().map(|l| l.count).sum();
    if args.json {
        let total = TotalLine {
            total: true,
            total_ms,
            tuning_ms,
            cache_hits: hits,
            layers: layers.len(),
            instances,
            fallbacks,
        };
        writeln!(out, "{}", conv_cmd::to_json(&total)?)?;
    } else {
        writeln!(
            out,
            "total: network convolution time {total_ms:.3} ms ({} layers, {instances} \
             instances); tuning {tuning_ms:.3} ms; cache hits {hits} of {}; fallback events \
             {fallbacks}; policy {}",
            layers.len(),
            layers.len(),
            policy.name()
        )?;
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
            layers.len(),
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
        count: layer.count,
        algo: None,
        source: None,
        ms: None,
        workspace_bytes: None,
        fallbacks: 0,
        max_rel_err: None,
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
        let reference = autodnn::reference::conv_forward(p, &x, &w)?;
        let err = conv_cmd::max_rel_err(p, &y, &reference);
        line.max_rel_err = Some(err);
        let tolerance = autodnn::conv::find(report.algo)
            .map(|a| a.accuracy())
            .unwrap_or(Accuracy::Exact)
            .integer_tolerance();
        if err.is_nan() || err > tolerance {
            line.error = Some(format!(
                "wrong result from {}: max_rel_err {err:e} exceeds {tolerance:e}",
                report.algo
            ));
        }
    }
    // Fresh timed runs of what ran, the algorithms that failed before it left out.
    let pinned = plan.starting_at(report.algo);
    let mut times = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t = std::time::Instant::now();
        if let Err(e) =
            handle.conv_forward_plan(&pinned, &x, Weights::Plain(&w), &mut y, &epi, None)
        {
            line.error = Some(e.to_string());
            fail(e)?;
            return Ok((line, Some(plan)));
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    line.ms = Some(conv_cmd::median_ms(&mut times));
    Ok((line, Some(plan)))
}
