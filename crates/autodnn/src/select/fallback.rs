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

use super::{log_lines, Env, FallbackEvent, Plan, RunReport};
use crate::error::{Error, ErrorKind, Result};
use crate::op::{Algorithm, Operation};

/// Runs `plan` on the data with the fallback chain, in the caller's workspace when one is
/// given (algorithms needing more are stepped past with a too-small-workspace event) or in the
/// handle's. When every algorithm fails, the error is [`Error::AllFailed`], listing each
/// failure; when the copy of an output the call reads (see [`Operation::snapshot`]) cannot be
/// allocated, it is that [`Error::OutOfMemory`], before any algorithm runs.
pub(crate) fn execute<O: Operation>(
    env: &Env<'_>,
    algos: &[&O::Algo<'_>],
    plan: &Plan<O>,
    inputs: &O::Inputs<'_>,
    y: &mut O::Output<'_>,
    mut caller_ws: Option<&mut [u8]>,
) -> Result<RunReport> {
    let p = &plan.problem;
    let inputs = O::check_call(p, inputs, Some(O::output_len(y)))?;
    let chain: Vec<&O::Algo<'_>> = plan
        .chain
        .iter()
        .filter_map(|n| algos.iter().copied().find(|a| a.name() == *n))
        .collect();
    // An output the call also reads (y's prior contents as the residual): keep a copy so
    // that a failed attempt cannot change what the next one reads. Without one no attempt
    // may start (a failed one would leave y half-written), so its failure ends the call.
    let snapshot = if chain.len() > 1 {
        O::snapshot(p, &inputs, y)?
    } else {
        None
    };
    let log = env.settings.log;
    let ctx = env.ctx;
    let mut events: Vec<FallbackEvent> = Vec::new();
    let mut ceiling: Option<usize> = None;
    let fits = |a: &O::Algo<'_>, ceiling: Option<usize>| {
        let need = a.workspace_bytes(p);
        ceiling.is_none_or(|c| need == 0 || need < c)
    };
    let mut last_error = None;
    for (i, &a) in chain.iter().enumerate() {
        if !fits(a, ceiling) {
            continue;
        }
        let need = a.workspace_bytes(p);
        let result = match caller_ws.as_deref_mut() {
            Some(ws) if ws.len() < need => Err(Error::WorkspaceTooSmall {
                algo: a.name().into(),
                needed: need,
                got: ws.len(),
            }),
            Some(ws) => a.run(&ctx, p, &inputs, y, &mut ws[..need]),
            None => env
                .reserve(need, a.name())
                .and_then(|mut ws| a.run(&ctx, p, &inputs, y, ws.slice())),
        };
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
                env.release();
                if let Some(s) = &snapshot {
                    O::restore(y, s);
                }
                let next = chain[i + 1..]
                    .iter()
                    .find(|b| fits(b, ceiling))
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
