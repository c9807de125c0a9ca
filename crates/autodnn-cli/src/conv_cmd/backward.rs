//! The backward directions on generated data: x, w and dy, one output buffer per operation
//! (with its prior contents when beta ≠ 0), each algorithm's timing and its accuracy against
//! the operation's f64 oracle.

use std::time::Instant;

use autodnn::op::{
    ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs, ConvBwdDataInputs,
    ConvBwdFilterInputs, TensorMut,
};
use autodnn::{ConvProblem, Error, Handle, OpKind};

use super::bench::{declined, failed, gflops, median_ms};
use super::check::{max_rel_err_flat, max_rel_err_in, CHECK_TOLERANCE};
use super::dir::AnyAlgo;
use super::output::{AlgoResult, Status};
use crate::data;
use crate::error::CliResult;

/// The inputs of the backward operations.
pub(super) struct BwdInputs {
    pub(super) x: Vec<f32>,
    pub(super) w: Vec<f32>,
    pub(super) dy: Vec<f32>,
    pub(super) alpha: f32,
    pub(super) beta: f32,
}

impl BwdInputs {
    pub(super) fn new(p: &ConvProblem, alpha: f32, beta: f32) -> CliResult<BwdInputs> {
        Ok(BwdInputs {
            x: data::small_ints(p.x().span(), data::X_SEED, "x")?,
            w: data::small_ints(p.w().elements(), data::W_SEED, "w")?,
            dy: data::small_ints(p.y().span(), data::DY_SEED, "dy")?,
            alpha,
            beta,
        })
    }
}

/// Length of the output of `op` on `p`: dx like x, dw like w, db one per output channel.
pub fn output_len(p: &ConvProblem, op: OpKind) -> usize {
    match op {
        OpKind::ConvBackwardData => p.x().span(),
        OpKind::ConvBackwardFilter => p.w().elements(),
        OpKind::ConvBackwardBias => p.w().k(),
        _ => p.y().span(),
    }
}

/// One backward operation's output, its prior contents (beta ≠ 0) and its reference.
pub(super) struct OutBuf {
    op: OpKind,
    pub(super) out: Vec<f32>,
    prior: Option<Vec<f32>>,
    reference: Option<Vec<f64>>,
}

impl OutBuf {
    pub(super) fn new(p: &ConvProblem, op: OpKind, beta: f32) -> CliResult<OutBuf> {
        let len = output_len(p, op);
        let prior = if beta != 0.0 {
            Some(data::small_ints(len, data::PRIOR_SEED, "the prior output")?)
        } else {
            None
        };
        Ok(OutBuf {
            op,
            out: data::filled(len, f32::NAN, "the output")?,
            prior,
            reference: None,
        })
    }

    /// max_rel_err of the output against alpha · oracle + beta · prior.
    fn max_rel_err(&mut self, p: &ConvProblem, inp: &BwdInputs) -> CliResult<f64> {
        if self.reference.is_none() {
            let mut r = match self.op {
                OpKind::ConvBackwardData => {
                    autodnn::reference::conv_backward_data(p, &inp.dy, &inp.w)?
                }
                OpKind::ConvBackwardFilter => {
                    autodnn::reference::conv_backward_filter(p, &inp.x, &inp.dy)?
                }
                OpKind::ConvBackwardBias => autodnn::reference::conv_backward_bias(p, &inp.dy)?,
                _ => autodnn::reference::conv_forward(p, &inp.x, &inp.w)?,
            };
            let (alpha, beta) = (inp.alpha as f64, inp.beta as f64);
            for (i, v) in r.iter_mut().enumerate() {
                let old = self.prior.as_ref().map_or(0.0, |z| z[i] as f64);
                *v = alpha * *v + beta * old;
            }
            self.reference = Some(r);
        }
        let reference = self.reference.as_deref().unwrap_or(&[]);
        Ok(match self.op {
            OpKind::ConvBackwardData => max_rel_err_in(p.x(), &self.out, reference),
            _ => max_rel_err_flat(&self.out, reference),
        })
    }
}

/// Runs the backward algorithm `a` once on `p` (a problem of its operation).
pub(super) fn run_once(
    handle: &Handle,
    p: &ConvProblem,
    a: AnyAlgo,
    inp: &BwdInputs,
    out: &mut [f32],
    workspace: Option<&mut [u8]>,
) -> autodnn::Result<()> {
    let (alpha, beta) = (inp.alpha, inp.beta);
    let mut out = TensorMut::F32(out);
    match a {
        AnyAlgo::Data(a) => handle.run_algorithm::<ConvBackwardData>(
            p,
            a.name(),
            &ConvBwdDataInputs::new(&inp.dy, &inp.w).scaled(alpha, beta),
            &mut out,
            workspace,
        ),
        AnyAlgo::Filter(a) => handle.run_algorithm::<ConvBackwardFilter>(
            p,
            a.name(),
            &ConvBwdFilterInputs::new(&inp.x, &inp.dy).scaled(alpha, beta),
            &mut out,
            workspace,
        ),
        AnyAlgo::Bias(a) => handle.run_algorithm::<ConvBackwardBias>(
            p,
            a.name(),
            &ConvBwdBiasInputs::new(&inp.dy).scaled(alpha, beta),
            &mut out,
            workspace,
        ),
        AnyAlgo::Fwd(a) => Err(Error::Unsupported {
            what: format!("{} is a forward algorithm", a.name()),
        }),
    }
}

/// Times one backward algorithm: a warm-up run, `reps` timed runs (the prior output restored
/// before each, outside the timed region) and, with `check`, the accuracy.
pub(super) fn bench_bwd_one(
    handle: &Handle,
    p: &ConvProblem,
    a: AnyAlgo,
    inp: &BwdInputs,
    buf: &mut OutBuf,
    reps: usize,
    check: bool,
) -> CliResult<AlgoResult> {
    let name = a.name();
    if let Err(reason) = a.check(p) {
        return Ok(declined(name, reason));
    }
    let ws = a.workspace_bytes(p);
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
    buf.out.fill(f32::NAN);
    let mut times = Vec::with_capacity(reps);
    for i in 0..=reps {
        if let Some(prior) = &buf.prior {
            buf.out.copy_from_slice(prior);
        }
        let t = Instant::now();
        let r = run_once(handle, p, a, inp, &mut buf.out, Some(&mut workspace));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(()) if i > 0 => times.push(ms),
            Ok(()) => {}
            Err(Error::Declined { reason, .. }) => return Ok(declined(name, reason)),
            Err(e) => return Ok(failed(name, e.to_string(), ws)),
        }
    }
    let max_rel_err = if check {
        let err = buf.max_rel_err(p, inp)?;
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
