//! `autodnn op`: the operators beside convolution (activations, pooling, softmax,
//! normalization, tensor operations, layout transforms), each problem written as benchdnn's
//! drivers write it, timed (median of `--reps` runs after a warm-up) and reported as ms and
//! GB/s (the bytes the operator must read and write, over the time), with `--check` against
//! the f64 reference (`max_rel_err`: the largest |y − ref| over the largest |ref|), or run once
//! on `.npy` data.
//!
//! Each operator is a [`Case`] built from one problem string by its module's `build`: the
//! framework here times, checks and prints, and knows no operator.

mod act;
mod norm;
mod pool;
mod softmax;
mod tensor;

use std::io::Write;
use std::path::PathBuf;

use autodnn::{Handle, Layout, TensorDesc};
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::conv_cmd::LayoutArg;
use crate::error::{CliError, CliResult};

/// Which operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpKind {
    /// Activations (benchdnn's eltwise): PROBLEM is NxCxHxW, --alg relu, gelu_erf, ...
    Act,
    /// Pooling: PROBLEM is mb8ic64ih112oh56kh3sh2ph1; --alg max, avg_p (padding counted) or
    /// avg_np; --dir fwd or bwd
    Pool,
    /// Softmax: PROBLEM is NxCxHxW (8x1000); --alg softmax or logsoftmax, --mode channel or
    /// instance; --dir fwd or bwd (bwd takes the forward's x and computes y first)
    Softmax,
    /// Batch normalization: PROBLEM is mb8ic64ih56; --dir fwd (training), fwd_i
    /// (inference) or bwd
    Bnorm,
    /// Layer normalization over C·H·W: PROBLEM is NxCxHxW; --dir fwd or bwd
    Lnorm,
    /// Elementwise operations with broadcasting: PROBLEM is A[:B] (8x64x56x56:1x64x1x1);
    /// --alg add, mul, min, max, sqrt, not, or add_tensor (C = alpha·B + beta·C)
    Tensor,
    /// Reductions: PROBLEM is A:C (8x64x56x56:8x64x1x1); --alg sum, mean, max, min, amax,
    /// norm1, norm2, mul
    Reduce,
    /// Layout transforms: PROBLEM is NxCxHxW, from --layout to --to
    Transform,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Act => "act",
            OpKind::Pool => "pool",
            OpKind::Softmax => "softmax",
            OpKind::Bnorm => "bnorm",
            OpKind::Lnorm => "lnorm",
            OpKind::Tensor => "tensor",
            OpKind::Reduce => "reduce",
            OpKind::Transform => "transform",
        }
    }
}

/// Arguments of `autodnn op`.
#[derive(Debug, Args)]
pub struct OpArgs {
    /// The operator
    #[arg(value_enum)]
    pub op: OpKind,
    /// Problems in the format of the operator's benchdnn driver (act and softmax:
    /// 8x64x56x56; pool: mb8ic64ih112oh56kh3sh2ph1; bnorm and lnorm: mb8ic64ih56)
    #[arg(value_name = "PROBLEM", required = true)]
    pub problems: Vec<String>,
    /// The algorithm, as benchdnn names it (act: relu, gelu_erf, gelu_tanh, logistic, tanh,
    /// elu, hardswish, clip, ...; PyTorch's sigmoid, silu, relu6, gelu too)
    #[arg(long, value_name = "NAME")]
    pub alg: Option<String>,
    /// Direction: fwd or bwd (bnorm also fwd_i: inference)
    #[arg(long, value_name = "DIR", default_value = "fwd")]
    pub dir: String,
    /// Memory order of the tensors (and of .npy arrays)
    #[arg(long, value_enum, default_value_t = LayoutArg::Nchw)]
    pub layout: LayoutArg,
    /// Softmax's reduction: channel (over C, for each n, h, w) or instance (over C·H·W)
    #[arg(long, value_name = "MODE", default_value = "channel")]
    pub mode: String,
    /// The output's memory order (transform)
    #[arg(long, value_enum, default_value_t = LayoutArg::Nhwc)]
    pub to: LayoutArg,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Timed runs per problem (after one warm-up run); the median is reported
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub reps: usize,
    /// Scale of the result (y = alpha · op + beta · y)
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub alpha: f32,
    /// Scale of the prior output
    #[arg(
        long,
        value_name = "B",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub beta: f32,
    /// Compare against the f64 reference and report max_rel_err (above 1e-5 counts as failed)
    #[arg(long)]
    pub check: bool,
    /// JSON Lines output, one object per problem
    #[arg(long)]
    pub json: bool,
    /// Input x (.npy, f32, in --layout's order) for one run on real data; needs --output
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// The output gradient dy (.npy) of a bwd run on real data
    #[arg(long, value_name = "FILE")]
    pub dy: Option<PathBuf>,
    /// Where the run on real data writes its output (y, or dx for bwd)
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The operator itself (batch norm: training).
    Fwd,
    /// Batch norm with running statistics (benchdnn's FWD_I).
    FwdInference,
    /// Its gradient with respect to the input.
    Bwd,
}

impl Dir {
    fn parse(s: &str) -> CliResult<Dir> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fwd" | "fwd_d" | "forward" => Ok(Dir::Fwd),
            "fwd_i" | "inference" => Ok(Dir::FwdInference),
            "bwd" | "bwd_d" | "bwd_dw" | "backward" => Ok(Dir::Bwd),
            _ => Err(CliError::bad(format!(
                "bad --dir = {s}: expected fwd, fwd_i or bwd"
            ))),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Dir::Fwd => "fwd",
            Dir::FwdInference => "fwd_i",
            Dir::Bwd => "bwd",
        }
    }
}

/// What an operator's `build` is given besides its problem string.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The algorithm named by --alg, if any.
    pub alg: Option<String>,
    /// The direction.
    pub dir: Dir,
    /// The tensors' layout.
    pub layout: Layout,
    /// alpha and beta.
    pub blend: autodnn::layers::Blend,
    /// The output's layout (transform).
    pub to: Layout,
    /// Softmax's mode.
    pub mode: String,
}

/// One operator call on one problem, with its data.
pub trait Case {
    /// The algorithm's name as reported.
    fn alg(&self) -> String;
    /// Bytes the call must read and write at least (for GB/s).
    fn bytes(&self) -> usize;
    /// Runs the call once (the output is overwritten or blended as the setup says).
    fn run(&mut self, h: &Handle) -> autodnn::Result<()>;
    /// Runs the call once from the case's initial output (its prior, which beta scales) and
    /// returns the largest |output − reference| over the largest |reference|.
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64>;
    /// The tensors a run on real data reads (`x`, `dy`, ...), in order: name and descriptor.
    fn inputs(&self) -> Vec<(&'static str, TensorDesc)>;
    /// Replaces an input's data (laid out as its descriptor, packed).
    fn set_input(&mut self, name: &str, data: Vec<f32>) -> CliResult;
    /// The output's descriptor and data, after a run.
    fn output(&self) -> (TensorDesc, &[f32]);
}

/// Largest |got − want| over the largest |want| at the descriptor's elements.
pub fn max_rel_err(desc: &TensorDesc, got: &[f32], want: &[f64]) -> f64 {
    let (mut err, mut scale) = (0.0f64, 0.0f64);
    for o in desc.offsets() {
        let d = (got[o] as f64 - want[o]).abs();
        err = if d.is_nan() {
            f64::INFINITY
        } else {
            err.max(d)
        };
        scale = scale.max(want[o].abs());
    }
    if err == 0.0 {
        0.0
    } else {
        err / scale.max(f64::MIN_POSITIVE)
    }
}

/// The dimensions of a packed tensor as a .npy array in `layout`'s order.
pub fn npy_shape(desc: &TensorDesc, layout: Layout) -> Vec<usize> {
    let [n, c, h, w] = desc.dims();
    match layout {
        Layout::Nchw => vec![n, c, h, w],
        Layout::Nhwc => vec![n, h, w, c],
    }
}

fn put(out: &mut impl Write, text: std::fmt::Arguments<'_>) -> CliResult {
    out.write_fmt(text)?;
    Ok(())
}

/// A check counts as failed above this.
const CHECK_FAILS_ABOVE: f64 = 1e-5;

#[derive(Debug, Serialize)]
struct Row<'a> {
    op: &'a str,
    problem: &'a str,
    alg: String,
    dir: &'a str,
    layout: &'a str,
    threads: usize,
    ms: f64,
    gbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_rel_err: Option<f64>,
}

/// Builds the case of `op` for one problem.
fn build(op: OpKind, problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let one_way = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(CliError::bad(format!(
                "--dir {}: {} has fwd only",
                setup.dir.name(),
                op.name()
            )))
        }
    };
    let r = match op {
        OpKind::Act if setup.dir == Dir::FwdInference => {
            Err(CliError::bad("--dir fwd_i: act has fwd and bwd"))
        }
        OpKind::Act => act::build(problem, setup),
        OpKind::Pool => pool::build(problem, setup),
        OpKind::Softmax if setup.dir == Dir::FwdInference => {
            Err(CliError::bad("--dir fwd_i: softmax has fwd and bwd"))
        }
        OpKind::Softmax => softmax::build(problem, setup, &setup.mode),
        OpKind::Bnorm => norm::build_bnorm(problem, setup),
        OpKind::Lnorm => norm::build_lnorm(problem, setup),
        OpKind::Tensor => {
            one_way(setup.dir == Dir::Fwd).and_then(|_| tensor::build_tensor(problem, setup))
        }
        OpKind::Reduce => {
            one_way(setup.dir == Dir::Fwd).and_then(|_| tensor::build_reduce(problem, setup))
        }
        OpKind::Transform => one_way(setup.dir == Dir::Fwd)
            .and_then(|_| tensor::build_transform(problem, setup, setup.to)),
    };
    r.map_err(|e| e.context(problem))
}

/// Runs `autodnn op`.
///
/// # Errors
/// Bad input (exit 2) for bad problems, flags or files; failures (exit 1) for runs that fail
/// or checks above the bound.
pub fn run(args: &OpArgs, out: &mut impl Write) -> CliResult {
    let threads = args.threads.unwrap_or_else(crate::default_threads);
    let h = Handle::with_threads(threads)?;
    if args.reps == 0 {
        return Err(CliError::bad("bad --reps = 0: must be at least 1"));
    }
    let layout = Layout::from(args.layout);
    let setup = Setup {
        alg: args.alg.clone(),
        dir: Dir::parse(&args.dir)?,
        layout,
        blend: autodnn::layers::Blend::new(args.alpha, args.beta),
        to: Layout::from(args.to),
        mode: args.mode.clone(),
    };
    setup.blend.check()?;
    if args.input.is_some() || args.dy.is_some() || args.output.is_some() {
        return real_data(args, &h, &setup);
    }
    if !args.json {
        put(
            out,
            format_args!(
                "{:<9} {:<34} {:<12} {:<4} {:>10} {:>9}{}\n",
                "op",
                "problem",
                "alg",
                "dir",
                "ms",
                "GB/s",
                if args.check { "  max_rel_err" } else { "" }
            ),
        )?;
    }
    let mut failed = Vec::new();
    for p in &args.problems {
        let mut case = build(args.op, p, &setup)?;
        case.run(&h).map_err(|e| CliError::from(e).context(p))?;
        let mut times = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            let t = std::time::Instant::now();
            case.run(&h).map_err(|e| CliError::from(e).context(p))?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        let err = if args.check {
            let e = case.check(&h).map_err(|e| CliError::from(e).context(p))?;
            if e.is_nan() || e > CHECK_FAILS_ABOVE {
                failed.push(p.clone());
            }
            Some(e)
        } else {
            None
        };
        let row = Row {
            op: args.op.name(),
            problem: p,
            alg: case.alg(),
            dir: setup.dir.name(),
            layout: layout.name(),
            threads,
            ms,
            gbps: case.bytes() as f64 / (ms * 1e6),
            max_rel_err: err,
        };
        if args.json {
            let line = crate::conv_cmd::to_json(&row)?;
            put(out, format_args!("{line}\n"))?;
        } else {
            put(
                out,
                format_args!(
                    "{:<9} {:<34} {:<12} {:<4} {:>10.4} {:>9.2}{}\n",
                    row.op,
                    row.problem,
                    row.alg,
                    row.dir,
                    row.ms,
                    row.gbps,
                    err.map_or(String::new(), |e| format!("  {e:.3e}"))
                ),
            )?;
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::fail(format!(
            "check failed (max_rel_err above {CHECK_FAILS_ABOVE:e}): {}",
            failed.join(", ")
        )))
    }
}

/// One run on .npy data: every input the case reads from its file, the output written (a
/// beta other than 0 blends into the case's generated prior output).
fn real_data(args: &OpArgs, h: &Handle, setup: &Setup) -> CliResult {
    let [p] = args.problems.as_slice() else {
        return Err(CliError::bad(
            "a run on .npy data (--input, --dy, --output) takes exactly one PROBLEM",
        ));
    };
    let out_path = args
        .output
        .as_ref()
        .ok_or_else(|| CliError::bad("a run on .npy data needs --output"))?;
    let mut case = build(args.op, p, setup)?;
    for (name, desc) in case.inputs() {
        let path = match name {
            "x" => args.input.as_ref(),
            "dy" => args.dy.as_ref(),
            _ => None,
        }
        .ok_or_else(|| {
            CliError::bad(format!(
                "{p}: this run reads {name}: give it with --{}",
                if name == "x" { "input" } else { name }
            ))
        })?;
        let shape = npy_shape(&desc, setup.layout);
        let data = crate::npy::read_f32(path, &shape, &setup.layout.name().to_uppercase())?;
        case.set_input(name, data)?;
    }
    case.run(h).map_err(|e| CliError::from(e).context(p))?;
    let (desc, y) = case.output();
    crate::npy::write_f32(out_path, &npy_shape(&desc, setup.layout), &y[..desc.span()])
}
