//! One run on real data: x and w read from `.npy` files, y written to one, with the optional
//! bias and residual files.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use autodnn::conv::Epilogue;
use autodnn::conv::{ConvAlgorithm, EpilogueArgs, Weights};
use autodnn::{ConvProblem, Error, Handle, Layout, OpKind};
use serde::Serialize;

use super::args::{ConvArgs, RealPaths};
use super::backward::{output_len, run_once, BwdInputs};
use super::check::{max_rel_err, max_rel_err_flat, max_rel_err_in};
use super::dir::{AnyAlgo, Dir};
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

#[derive(Debug, Serialize)]
struct RealDataBwdReport<'a> {
    problem: String,
    dir: &'static str,
    algo: &'static str,
    ms: f64,
    output: String,
    shape: &'a [usize],
    max_rel_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bias: Option<RealDataBias>,
}

/// bwd_wb's bias gradient: the algorithm the handle's policy selected, its time and file.
#[derive(Debug, Serialize)]
struct RealDataBias {
    algo: &'static str,
    ms: f64,
    output: String,
    shape: [usize; 1],
    max_rel_err: Option<f64>,
}

/// One backward run on real data: dx from dy and w (bwd_d), or dw from x and dy (bwd_w),
/// with db (bwd_wb, its algorithm selected by the handle's policy). The output's prior
/// contents, which beta scales, are zeros.
pub(super) fn run_real_data_bwd(
    args: &ConvArgs,
    handle: &Handle,
    job: &Job,
    algo: AnyAlgo,
    paths: &RealPaths,
    out: &mut impl Write,
) -> CliResult {
    let layout = Layout::from(args.layout);
    let (xs, ws, ys) = file_shapes(&job.problem, layout);
    let (xdesc, wdesc) = match layout {
        Layout::Nchw => ("NCHW", "KCRS: K, C/groups, R, S"),
        Layout::Nhwc => ("NHWC", "KRSC: K, R, S, C/groups"),
    };
    let (dir, op) = match paths {
        RealPaths::BwdD { .. } => (Dir::BwdD, OpKind::ConvBackwardData),
        RealPaths::BwdW { db: None, .. } => (Dir::BwdW, OpKind::ConvBackwardFilter),
        RealPaths::BwdW { .. } => (Dir::BwdWb, OpKind::ConvBackwardFilter),
        RealPaths::Fwd { .. } => {
            return Err(CliError::fail(
                "internal error: a forward run on the backward path",
            ))
        }
    };
    let p = job
        .problem
        .with_epilogue(Epilogue::default())
        .for_op(op)
        .map_err(|e| CliError::from(e).context(format!("problem {}", job.spec)))?;
    let read_dy = |path: &Path| npy::read_f32(path, &ys, &format!("dy, {xdesc} like y"));
    let (inp, out_path, out_shape) = match paths {
        RealPaths::BwdD { w, dy, dx } => {
            let w = npy::read_f32(w, &ws, wdesc)?;
            let dy = read_dy(dy)?;
            (
                BwdInputs {
                    x: Vec::new(),
                    w,
                    dy,
                    alpha: args.alpha,
                    beta: args.beta,
                },
                dx,
                xs,
            )
        }
        RealPaths::BwdW { x, dy, dw, .. } => {
            let x = npy::read_f32(x, &xs, xdesc)?;
            let dy = read_dy(dy)?;
            (
                BwdInputs {
                    x,
                    w: Vec::new(),
                    dy,
                    alpha: args.alpha,
                    beta: args.beta,
                },
                dw,
                ws,
            )
        }
        RealPaths::Fwd { .. } => unreachable!("refused above"),
    };
    let packed = match op {
        OpKind::ConvBackwardData => inp.w.len() == p.w().elements(),
        _ => inp.x.len() == p.x().span(),
    };
    if !packed || inp.dy.len() != p.y().span() {
        return Err(CliError::fail(format!(
            "problem {}: tensors are not packed",
            job.spec
        )));
    }
    let context =
        |e: autodnn::Error| CliError::from(e).context(format!("{} on {}", algo.name(), job.spec));
    let mut o = data::filled(output_len(&p, op), 0.0, "the output")?;
    let t = Instant::now();
    run_once(handle, &p, algo, &inp, &mut o, None).map_err(context)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    npy::write_f32(out_path, &out_shape, &o)?;
    // With zeros as the prior contents, the reference is alpha · the oracle.
    let scaled =
        |r: Vec<f64>| -> Vec<f64> { r.into_iter().map(|v| args.alpha as f64 * v).collect() };
    let max_rel_err = if args.check {
        Some(match op {
            OpKind::ConvBackwardData => max_rel_err_in(
                p.x(),
                &o,
                &scaled(autodnn::reference::conv_backward_data(&p, &inp.dy, &inp.w)?),
            ),
            _ => max_rel_err_flat(
                &o,
                &scaled(autodnn::reference::conv_backward_filter(
                    &p, &inp.x, &inp.dy,
                )?),
            ),
        })
    } else {
        None
    };
    let bias = match paths {
        RealPaths::BwdW {
            db: Some(db_path), ..
        } => {
            let k = p.w().k();
            let mut db = data::filled(k, 0.0, "db")?;
            let t = Instant::now();
            let report = handle
                .conv_backward_bias_auto(&job.problem, &inp.dy, &mut db, args.alpha, args.beta)
                .map_err(|e| CliError::from(e).context(format!("bias gradient on {}", job.spec)))?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            npy::write_f32(db_path, &[k], &db)?;
            let max_rel_err = if args.check {
                let pb = job
                    .problem
                    .with_epilogue(Epilogue::default())
                    .for_op(OpKind::ConvBackwardBias)
                    .map_err(CliError::from)?;
                Some(max_rel_err_flat(
                    &db,
                    &scaled(autodnn::reference::conv_backward_bias(&pb, &inp.dy)?),
                ))
            } else {
                None
            };
            Some(RealDataBias {
                algo: report.algo,
                ms,
                output: db_path.display().to_string(),
                shape: [k],
                max_rel_err,
            })
        }
        _ => None,
    };
    if args.json {
        let report = RealDataBwdReport {
            problem: job.spec.to_string(),
            dir: dir.name(),
            algo: algo.name(),
            ms,
            output: out_path.display().to_string(),
            shape: &out_shape,
            max_rel_err,
            bias,
        };
        writeln!(out, "{}", to_json(&report)?)?;
    } else {
        writeln!(out, "problem:     {}", job.spec)?;
        writeln!(out, "dir:         {}", dir.name())?;
        writeln!(out, "algo:        {}", algo.name())?;
        writeln!(out, "ms:          {ms:.3}")?;
        writeln!(out, "output:      {} {:?}", out_path.display(), out_shape)?;
        if let Some(e) = max_rel_err {
            writeln!(out, "max_rel_err: {e:e}")?;
        }
        if let Some(b) = &bias {
            writeln!(out, "bias algo:   {}", b.algo)?;
            writeln!(out, "bias ms:     {:.3}", b.ms)?;
            writeln!(out, "bias output: {} {:?}", b.output, b.shape)?;
            if let Some(e) = b.max_rel_err {
                writeln!(out, "bias max_rel_err: {e:e}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
