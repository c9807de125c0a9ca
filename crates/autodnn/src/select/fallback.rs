//! Execution with the fallback chain.
//!
//! The plan's algorithms are tried in order. When one fails at run time (its workspace is
//! refused by the budget, the system or an injected fault, or the algorithm itself gives up) a
//! [`FallbackEvent`] is recorded, the handle's cached workspace is released, and the next
//! algorithm that fits the memory left is tried: after an allocation of N > 0 bytes failed, only
//! algorithms needing fewer than N bytes are. The registry's last algorithm accepts every
//! problem with no workspace, so the chain ends with one that needs no memory. Errors of the
//! caller's input ([`ErrorKind::BadInput`](crate::ErrorKind::BadInput)) fail for every
//! algorithm and are returned at once.

use super::{log_lines, ConvPlan, FallbackEvent, RunReport};
use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs, Weights};
use crate::desc::ConvProblem;
use crate::error::{Error, ErrorKind, Result};
use crate::Handle;

/// Runs `plan` on the data with the fallback chain, in the caller's workspace when one is
/// given (algorithms needing more are stepped past with a too-small-workspace event) or in the
/// handle's. When every algorithm fails, the error is [`Error::AllFailed`], listing each
/// failure; when the copy of y that a residual read from y needs cannot be allocated, it is
/// that [`Error::OutOfMemory`], before any algorithm runs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    h: &Handle,
    algos: &[&dyn ConvAlgorithm],
    plan: &ConvPlan,
    p: &ConvProblem,
    x: &[f32],
    w: Weights<'_>,
    y: &mut [f32],
    epilogue: &EpilogueArgs<'_>,
    mut caller_ws: Option<&mut [u8]>,
) -> Result<RunReport> {
    if plan.problem != *p {
        return Err(Error::bad(
            "plan",
            "a different problem",
            "the plan was made for another problem",
        ));
    }
    let w_len = match w {
        Weights::Plain(w) => w.len(),
        Weights::Prepared(_) => p.w().elements(),
    };
    crate::handle::check_call(p, x.len(), w_len, y.len())?;
    let epi = epilogue.checked(p.epilogue(), p.w().k(), p.y().span())?;
    let chain: Vec<&dyn ConvAlgorithm> = plan
        .chain
        .iter()
        .filter_map(|n| algos.iter().copied().find(|a| a.name() == *n))
        .collect();
    // y's prior contents are the residual when beta ≠ 0 and none is given: keep a copy so
    // that a failed attempt cannot change what the next one adds. Without one no attempt
    // may start (a failed one would leave y half-written), so its failure ends the call.
    let snapshot = if epi.beta != 0.0 && epi.residual.is_none() && chain.len() > 1 {
        Some(crate::alloc::try_copy(
            y,
            "a copy of y for the fallback chain",
        )?)
    } else {
        None
    };
    let log = h.settings().log;
    let ctx = h.exec_context();
    let mut events: Vec<FallbackEvent> = Vec::new();
    let mut ceiling: Option<usize> = None;
    let fits = |a: &dyn ConvAlgorithm, ceiling: Option<usize>| {
        let need = a.workspace_bytes(p);
        ceiling.is_none_or(|c| need == 0 || need < c)
    };
    let mut last_error = None;
    for (i, &a) in chain.iter().enumerate() {
        if !fits(a, ceiling) {
            continue;
        }
        let need = a.workspace_bytes(p);
        let result = (|| -> Result<()> {
            let weights = match w {
                Weights::Plain(w) => AlgoWeights::Plain(w),
                Weights::Prepared(pw) => pw.for_call(p, a.name())?,
            };
            match caller_ws.as_deref_mut() {
                Some(ws) if ws.len() < need => Err(Error::WorkspaceTooSmall {
                    algo: a.name().into(),
                    needed: need,
                    got: ws.len(),
                }),
                Some(ws) => a.run(&ctx, p, x, weights, y, &mut ws[..need], &epi),
                None => {
                    let mut ws = h.reserve_workspace(need, a.name())?;
                    a.run(&ctx, p, x, weights, y, ws.slice(), &epi)
                }
            }
        })();
        match result {
            Ok(()) => {
                return Ok(RunReport {
                    algo: a.name(),
                    source: plan.source,
                    workspace_bytes: need,
                    selection_ms: 0.0,
                    cache_hit: plan.cache_hit,
                    events,
                });
            }
            Err(e) if e.kind() == ErrorKind::BadInput => return Err(e),
            Err(e) => {
                // Memory is short: later attempts must need less. (A refused zero-byte
                // reservation, an injected fault, says nothing about the memory left.)
                let short = match (&e, caller_ws.as_deref()) {
                    // The caller's workspace holds what it holds: anything up to its size fits.
                    (Error::WorkspaceTooSmall { .. }, Some(ws)) => Some(ws.len() + 1),
                    (Error::OutOfMemory { .. } | Error::WorkspaceTooSmall { .. }, _)
                        if need > 0 =>
                    {
                        Some(need)
                    }
                    _ => None,
                };
                if let Some(n) = short {
                    ceiling = Some(ceiling.map_or(n, |c| c.min(n)));
                }
                h.release_workspace();
                if let Some(s) = &snapshot {
                    y[..s.len()].copy_from_slice(s);
                }
                let next = chain[i + 1..]
                    .iter()
                    .find(|b| fits(**b, ceiling))
                    .map(|b| b.name());
                if log {
                    log_lines(&[format!(
                        "fallback: {} failed ({e}); released cached workspace; {}",
                        a.name(),
                        next.map_or("no algorithm left".to_string(), |n| format!("trying {n}"))
                    )]);
                }
                events.push(FallbackEvent {
                    algo: a.name(),
                    error: e.clone(),
                    next,
                });
                last_error = Some(e);
            }
        }
    }
    Err(match last_error {
        Some(last) => Error::AllFailed {
            tried: events
                .iter()
                .map(|e| format!("{}: {}", e.algo, e.error))
                .collect(),
            last: Box::new(last),
        },
        None => Error::Declined {
            algo: "every algorithm".into(),
            reason: "the plan holds no algorithm that can run".into(),
        },
    })
}
