//! One run on real data: x and w read from `.npy` files, y written to one, with the optional
//! bias and residual files.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use autodnn::conv::{ConvAlgorithm, EpilogueArgs, Weights};
use autodnn::{ConvProblem, Error, Handle, Layout};
use serde::Serialize;

use super::args::ConvArgs;
use super::check::max_rel_err;
use super::output::to_json;
use super::problems::Job;
use crate::data;
use crate::error::{CliError, CliResult};
use crate::npy;

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

pub(super) fn run_real_data(
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
