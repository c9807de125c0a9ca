//! Measured selection (cuDNN's `Find`, PyTorch's `cudnn.benchmark`): the candidates run on the
//! real problem, a warm-up first, then repeated timings summarised by the median.
//!
//! [`race`] spends little on clear losers: after the warm-up, anything
//! [`WARMUP_ELIMINATION`] times slower than the fastest is dropped; then the survivors run in
//! interleaved rounds of [`RACE_ROUND_RUNS`] and each round drops those more than
//! [`RACE_MARGIN`] behind the best median and keeps at most the better half (successive
//! halving), until one is left or each has [`RACE_MAX_RUNS`] timings. [`exhaustive`] runs
//! every candidate to the end: one warm-up and [`EXHAUSTIVE_RUNS`] timings each, the yardstick
//! the race is measured against.

use std::time::Instant;

use super::{AlgoPerf, PerfStatus};
use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs};
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::Handle;

/// After the warm-up, a candidate this many times slower than the fastest is eliminated.
pub const WARMUP_ELIMINATION: f64 = 2.0;
/// Timed runs of each surviving candidate per racing round (interleaved across candidates).
pub const RACE_ROUND_RUNS: usize = 3;
/// A candidate whose median trails the best by more than this fraction after a round is
/// eliminated.
pub const RACE_MARGIN: f64 = 0.10;
/// Most timed runs a candidate gets in a race.
pub const RACE_MAX_RUNS: usize = 9;
/// Timed runs per candidate in exhaustive selection (after one warm-up).
pub const EXHAUSTIVE_RUNS: usize = 10;
/// Candidates timed by default in a race (the best-predicted ones); the others are recorded as
/// not timed.
pub const DEFAULT_MAX_TIMED: usize = 8;

/// Deterministic integer-valued data in [−4, 4] (benchdnn style) for timing and calibration.
///
/// # Errors
/// [`Error::OutOfMemory`].
pub(crate) fn test_data(len: usize, seed: u64) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| Error::OutOfMemory {
        bytes: len.saturating_mul(4),
        what: format!("timing data: {e}"),
    })?;
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    v.extend((0..len).map(|_| {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % 9) as f32 - 4.0
    }));
    Ok(v)
}

/// Runs algorithms on one problem's data, into a scratch output (the caller's y, which an
/// epilogue with beta ≠ 0 reads, is never touched).
pub(crate) struct Timer<'a> {
    handle: &'a Handle,
    p: &'a ConvProblem,
    x: &'a [f32],
    w: &'a [f32],
    y: Vec<f32>,
    epi: EpilogueArgs<'a>,
}

impl<'a> Timer<'a> {
    /// A timer for `p` on `x` and `w` with the epilogue values `epi` (checked here).
    ///
    /// # Errors
    /// Bad buffers or epilogue values; no memory for the scratch output.
    pub(crate) fn new(
        handle: &'a Handle,
        p: &'a ConvProblem,
        x: &'a [f32],
        w: &'a [f32],
        epi: &EpilogueArgs<'a>,
    ) -> Result<Timer<'a>> {
        crate::handle::check_call(p, x.len(), w.len(), p.y().span())?;
        let epi = epi.checked(p.epilogue(), p.w().k(), p.y().span())?;
        let mut y = Vec::new();
        let n = p.y().span();
        y.try_reserve_exact(n).map_err(|e| Error::OutOfMemory {
            bytes: n.saturating_mul(4),
            what: format!("a scratch output for timing: {e}"),
        })?;
        y.resize(n, 0.0);
        Ok(Timer {
            handle,
            p,
            x,
            w,
            y,
            epi,
        })
    }

    /// Milliseconds of `runs` consecutive timed runs of `a` (each one entry).
    fn time(&mut self, a: &dyn ConvAlgorithm, runs: usize) -> Result<Vec<f64>> {
        let need = a.workspace_bytes(self.p);
        let mut ws = self.handle.reserve_workspace(need, a.name())?;
        let ctx = self.handle.exec_context();
        let mut out = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            a.run(
                &ctx,
                self.p,
                self.x,
                AlgoWeights::Plain(self.w),
                &mut self.y,
                ws.slice(),
                &self.epi,
            )?;
            out.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(out)
    }

    /// One warm-up, then the median of `runs` timed runs.
    pub(crate) fn median_of(&mut self, a: &dyn ConvAlgorithm, runs: usize) -> Result<f64> {
        let mut t = self.time(a, runs + 1)?;
        t.remove(0);
        Ok(median(&mut t))
    }
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn record(a: &dyn ConvAlgorithm, p: &ConvProblem, status: PerfStatus, ms: Option<f64>) -> AlgoPerf {
    AlgoPerf {
        algo: a.name().to_string(),
        status,
        ms,
        workspace_bytes: a.workspace_bytes(p),
        deterministic: a.deterministic(),
        note: None,
    }
}

fn failed(a: &dyn ConvAlgorithm, p: &ConvProblem, e: &Error) -> AlgoPerf {
    AlgoPerf {
        note: Some(e.to_string()),
        ..record(a, p, PerfStatus::Failed, None)
    }
}

/// Sorts records: fastest ok first, then eliminated by time, failed, not timed.
pub(crate) fn sort_records(r: &mut [AlgoPerf]) {
    let rank = |s: PerfStatus| match s {
        PerfStatus::Ok => 0,
        PerfStatus::Eliminated => 1,
        PerfStatus::Failed => 2,
        PerfStatus::NotTimed => 3,
    };
    r.sort_by(|a, b| {
        rank(a.status).cmp(&rank(b.status)).then(
            a.ms.unwrap_or(f64::INFINITY)
                .total_cmp(&b.ms.unwrap_or(f64::INFINITY)),
        )
    });
}

/// Every candidate to the end: one warm-up and [`EXHAUSTIVE_RUNS`] timed runs, median.
/// Returns the sorted records and the number of timed runs.
pub(crate) fn exhaustive(timer: &mut Timer<'_>, cands: &[&dyn ConvAlgorithm]) -> Vec<AlgoPerf> {
    let p = timer.p;
    let mut out: Vec<AlgoPerf> = cands
        .iter()
        .map(|&a| match timer.median_of(a, EXHAUSTIVE_RUNS) {
            Ok(ms) => record(a, p, PerfStatus::Ok, Some(ms)),
            Err(e) => failed(a, p, &e),
        })
        .collect();
    sort_records(&mut out);
    out
}

/// A race among `cands` (in predicted order), timing at most `max_timed` of them.
pub(crate) fn race(
    timer: &mut Timer<'_>,
    cands: &[&dyn ConvAlgorithm],
    max_timed: usize,
) -> Vec<AlgoPerf> {
    let p = timer.p;
    let max_timed = max_timed.max(1);
    let mut out = Vec::new();
    for &a in cands.iter().skip(max_timed) {
        out.push(AlgoPerf {
            note: Some(format!("beyond the limit of {max_timed} timed candidates")),
            ..record(a, p, PerfStatus::NotTimed, None)
        });
    }
    // Warm-up: one run each.
    let mut alive: Vec<(&dyn ConvAlgorithm, f64, Vec<f64>)> = Vec::new();
    for &a in cands.iter().take(max_timed) {
        match timer.time(a, 1) {
            Ok(t) => alive.push((a, t[0], Vec::new())),
            Err(e) => out.push(failed(a, p, &e)),
        }
    }
    let best_warm = alive.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    alive.retain(|(a, w, _)| {
        let keep = *w <= best_warm * WARMUP_ELIMINATION;
        if !keep {
            out.push(record(*a, p, PerfStatus::Eliminated, Some(*w)));
        }
        keep
    });
    let mut runs = 0;
    while alive.len() > 1 && runs < RACE_MAX_RUNS {
        for _ in 0..RACE_ROUND_RUNS {
            let mut i = 0;
            while i < alive.len() {
                match timer.time(alive[i].0, 1) {
                    Ok(t) => {
                        alive[i].2.push(t[0]);
                        i += 1;
                    }
                    Err(e) => {
                        out.push(failed(alive[i].0, p, &e));
                        alive.remove(i);
                    }
                }
            }
        }
        runs += RACE_ROUND_RUNS;
        let mut meds: Vec<(usize, f64)> = alive
            .iter_mut()
            .enumerate()
            .map(|(i, c)| (i, median(&mut c.2.clone())))
            .collect();
        meds.sort_by(|a, b| a.1.total_cmp(&b.1));
        let Some(&(_, best)) = meds.first() else {
            break;
        };
        let keep_n = if alive.len() > 2 {
            alive.len().div_ceil(2)
        } else {
            alive.len()
        };
        let keep: Vec<usize> = meds
            .iter()
            .take(keep_n)
            .filter(|(_, m)| *m <= best * (1.0 + RACE_MARGIN))
            .map(|(i, _)| *i)
            .collect();
        let mut next = Vec::new();
        for (i, c) in alive.into_iter().enumerate() {
            if keep.contains(&i) {
                next.push(c);
            } else {
                let m = median(&mut c.2.clone());
                out.push(record(c.0, p, PerfStatus::Eliminated, Some(m)));
            }
        }
        alive = next;
    }
    for (a, warm, mut times) in alive {
        if times.is_empty() {
            // The winner after the warm-up alone: a round for a time worth caching.
            times = timer
                .time(a, RACE_ROUND_RUNS)
                .unwrap_or_else(|_| vec![warm]);
        }
        out.push(record(a, p, PerfStatus::Ok, Some(median(&mut times))));
    }
    sort_records(&mut out);
    out
}
