//! Measured selection (cuDNN's `Find`, PyTorch's `cudnn.benchmark`): the candidates run on the
//! real problem, a warm-up first, then repeated timings summarised by the median.
//!
//! [`race`] spends little on clear losers: after the warm-up, anything
//! [`WARMUP_ELIMINATION`] times slower than the fastest (on its faster of two runs) is
//! dropped; then the survivors run in
//! interleaved rounds of [`RACE_ROUND_RUNS`] and each round drops those more than
//! [`RACE_MARGIN`] behind the best median and keeps at most the better half (successive
//! halving), until one is left or each has [`RACE_MAX_RUNS`] timings. [`exhaustive`] runs
//! every candidate to the end, in [`EXHAUSTIVE_TURNS`] turns of a warm-up and back-to-back
//! runs, until it has [`EXHAUSTIVE_RUNS`] timings and [`EXHAUSTIVE_MIN_MS`] of timed runs (at
//! most [`EXHAUSTIVE_MAX_RUNS`]): the yardstick the race is measured against. The time floor
//! gives layers of a tenth of a millisecond enough runs for a median that holds to a few
//! percent.
//!
//! Timing starts with every worker thread busy for [`WAKE_UP`] after an idle spell
//! ([`wake_cores`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{AlgoPerf, Env, PerfStatus};
use crate::error::{Error, Result};
use crate::op::{Algorithm, Operation};
use crate::runtime::ExecContext;

/// After the warm-up, a candidate this many times slower than the fastest is eliminated.
pub const WARMUP_ELIMINATION: f64 = 2.0;
/// Timed runs of each surviving candidate per racing round (interleaved across candidates).
pub const RACE_ROUND_RUNS: usize = 3;
/// A candidate whose median trails the best by more than this fraction after a round is
/// eliminated.
pub const RACE_MARGIN: f64 = 0.10;
/// Most timed runs a candidate gets in a race.
pub const RACE_MAX_RUNS: usize = 9;
/// A candidate whose predicted time is more than this many times the best prediction is not
/// timed in a race. The cost model's errors stay under this factor: the largest seen was on
/// calls with prepared weights, predicted from fits of plain calls less the filter's transform
/// (ResNet-50's 512-channel 3x3 layer on 7x7: `winograd_2x2` predicted 3.2 times the best
/// prediction, measured 0.7 times the best other). ResNet-50's FFT candidates on 3x3 layers,
/// 2 to 5 times slower, cost a sixth of its race.
pub const RACE_PREDICTED_CUTOFF: f64 = 5.0;
/// Least timed runs per candidate in exhaustive selection (after one warm-up).
pub const EXHAUSTIVE_RUNS: usize = 10;
/// Least milliseconds of timed runs per candidate in exhaustive selection, runs permitting.
pub const EXHAUSTIVE_MIN_MS: f64 = 5.0;
/// [`EXHAUSTIVE_MIN_MS`], or the milliseconds of `AUTODNN_EXHAUSTIVE_MIN_MS` (read once; 0
/// leaves only [`EXHAUSTIVE_RUNS`], for quick tuning sweeps and for fuzzing, where a Find of
/// ten candidates would otherwise take 50 ms or more; a value that is not a number of
/// milliseconds up to 10 000 is ignored).
pub fn exhaustive_min_ms() -> f64 {
    static MS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *MS.get_or_init(|| {
        std::env::var("AUTODNN_EXHAUSTIVE_MIN_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms <= 10_000)
            .map_or(EXHAUSTIVE_MIN_MS, |ms| ms as f64)
    })
}
/// Most timed runs per candidate in exhaustive selection.
pub const EXHAUSTIVE_MAX_RUNS: usize = 100;
/// Exhaustive selection times the candidates in this many turns (each turn a warm-up and back
/// to back runs per candidate), so that a burst of load from elsewhere lands on part of one
/// candidate's runs rather than on all of them: with one turn, a layer's exhaustive times
/// moved by up to 40% between runs.
pub const EXHAUSTIVE_TURNS: usize = 3;
/// Candidates timed by default in a race (the best-predicted ones); the others are recorded as
/// not timed.
pub const DEFAULT_MAX_TIMED: usize = 8;

/// How long every worker thread of a handle is kept busy before timing starts after an idle
/// spell. An idle core comes back to full speed slowly (on a virtual machine especially): the
/// first problems a calibration measured right after the process started ran at half speed.
pub const WAKE_UP: Duration = Duration::from_millis(150);
/// How long [`wake_cores`] keeps the workers busy: [`WAKE_UP`], or the milliseconds of
/// `AUTODNN_WAKE_UP_MS` (read once; 0 skips the wake-up, for machines whose cores do not slow
/// down when idle, and for fuzzing, where timed selections come many a second; a value that
/// is not a number of milliseconds up to 10 000 is ignored).
pub fn wake_up() -> Duration {
    static SPELL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPELL.get_or_init(|| {
        std::env::var("AUTODNN_WAKE_UP_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms <= 10_000)
            .map_or(WAKE_UP, Duration::from_millis)
    })
}

/// A spell without timed runs longer than this counts as idle.
pub const IDLE_AFTER: Duration = Duration::from_millis(500);

/// When this process last timed a run.
static LAST_TIMED: Mutex<Option<Instant>> = Mutex::new(None);

fn note_timed() {
    if let Ok(mut t) = LAST_TIMED.lock() {
        *t = Some(Instant::now());
    }
}

/// Keeps every worker thread of `ctx` busy with arithmetic for [`WAKE_UP`], so that the
/// timings that follow see the cores at full speed. Measured selection and calibration do
/// this by themselves after an idle spell; benchmarks outside them may call it first
/// ([`crate::Handle::wake_cores`]).
pub fn wake_cores(ctx: &ExecContext<'_>) {
    let spell = wake_up();
    if spell.is_zero() {
        note_timed();
        return;
    }
    ctx.pool.each_thread(&|_| {
        let start = Instant::now();
        let mut x = 1.0f64;
        while start.elapsed() < spell {
            for _ in 0..1000 {
                x = std::hint::black_box(x * 1.000_000_1 + 1e-9);
            }
        }
    });
    note_timed();
}

/// [`wake_cores`] unless this process timed something within [`IDLE_AFTER`].
pub(crate) fn wake_if_idle(ctx: &ExecContext<'_>) {
    let idle = LAST_TIMED
        .lock()
        .map(|t| t.is_none_or(|t| t.elapsed() > IDLE_AFTER))
        .unwrap_or(true);
    if idle {
        wake_cores(ctx);
    }
}

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

/// Runs algorithms on one problem's data, into a scratch output (the caller's output, which
/// the call may read, is never touched).
pub(crate) struct Timer<'a, 'i, O: Operation> {
    env: &'a Env<'a>,
    p: &'a O::Problem,
    inputs: O::Inputs<'i>,
    out: O::Buffer,
    /// With the prepared-weights intent: each algorithm's prepared weights, made before its
    /// first run and outside every timing.
    prepared: Vec<Preparation<O>>,
}

/// One algorithm's preparation for timing.
struct Preparation<O: Operation> {
    algo: &'static str,
    weights: Option<O::Prepared>,
    ms: f64,
    bytes: usize,
}

impl<'a, 'i, O: Operation> Timer<'a, 'i, O> {
    /// A timer for `p` on `inputs` (checked here).
    ///
    /// # Errors
    /// Bad inputs; no memory for the scratch output.
    pub(crate) fn new(
        env: &'a Env<'a>,
        p: &'a O::Problem,
        inputs: &O::Inputs<'i>,
    ) -> Result<Timer<'a, 'i, O>> {
        let inputs = O::check_call(p, inputs, None)?;
        let out = O::scratch(p)?;
        wake_if_idle(&env.ctx);
        Ok(Timer {
            env,
            p,
            inputs,
            out,
            prepared: Vec::new(),
        })
    }

    /// Prepares `a`'s weights once, when the selection is for prepared calls.
    fn prepare(&mut self, a: &O::Algo<'_>) -> Result<()> {
        if !self.env.settings.prepared || self.prepared.iter().any(|q| q.algo == a.name()) {
            return Ok(());
        }
        let t = Instant::now();
        let weights = O::prepare(a, &self.env.ctx, self.p, &self.inputs)?;
        self.prepared.push(Preparation {
            algo: a.name(),
            bytes: weights.as_ref().map_or(0, O::prepared_bytes),
            weights,
            ms: t.elapsed().as_secs_f64() * 1e3,
        });
        Ok(())
    }

    /// Adds each record's preparation (milliseconds, bytes) when its algorithm was prepared.
    pub(crate) fn annotate(&self, records: &mut [AlgoPerf]) {
        for r in records {
            if let Some(q) = self.prepared.iter().find(|q| q.algo == r.algo) {
                r.prepare_ms = Some(q.ms);
                r.prepared_bytes = Some(q.bytes);
            }
        }
    }

    /// Milliseconds of `runs` consecutive timed runs of `a` (each one entry).
    fn time(&mut self, a: &O::Algo<'_>, runs: usize) -> Result<Vec<f64>> {
        self.prepare(a)?;
        let need = a.workspace_bytes(self.p);
        let mut ws = self.env.reserve(need, a.name())?;
        let ctx = self.env.ctx;
        let prepared = self.prepared.iter().find(|q| q.algo == a.name());
        let mut y = O::output(&mut self.out);
        let out = match prepared.and_then(|q| q.weights.as_ref()) {
            Some(w) => {
                let inputs = O::with_prepared(&self.inputs, w);
                timed_runs::<O>(a, &ctx, self.p, &inputs, &mut y, ws.slice(), runs)?
            }
            None => timed_runs::<O>(a, &ctx, self.p, &self.inputs, &mut y, ws.slice(), runs)?,
        };
        note_timed();
        Ok(out)
    }

    /// One turn of exhaustive timing: one warm-up, then timed runs (appended to `t`) until
    /// `t` holds `runs` of them taking `min_ms` in all, or `max` runs.
    fn turn(
        &mut self,
        a: &O::Algo<'_>,
        t: &mut Vec<f64>,
        [runs, max]: [usize; 2],
        min_ms: f64,
    ) -> Result<()> {
        self.time(a, 1)?;
        let mut sum: f64 = t.iter().sum();
        while t.len() < max && (t.len() < runs || sum < min_ms) {
            let ms = self.time(a, 1)?[0];
            sum += ms;
            t.push(ms);
        }
        Ok(())
    }

    /// One warm-up, then the median of `runs` timed runs.
    pub(crate) fn median_of(&mut self, a: &O::Algo<'_>, runs: usize) -> Result<f64> {
        let mut t = self.time(a, runs + 1)?;
        t.remove(0);
        Ok(median(&mut t))
    }
}

/// Milliseconds of `runs` consecutive runs of `a` on `inputs`.
fn timed_runs<O: Operation>(
    a: &O::Algo<'_>,
    ctx: &ExecContext<'_>,
    p: &O::Problem,
    inputs: &O::Inputs<'_>,
    y: &mut O::Output<'_>,
    ws: &mut [u8],
    runs: usize,
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        a.run(ctx, p, inputs, y, ws)?;
        out.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(out)
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn record<O: Operation>(
    a: &O::Algo<'_>,
    p: &O::Problem,
    status: PerfStatus,
    ms: Option<f64>,
) -> AlgoPerf {
    AlgoPerf {
        algo: a.name().to_string(),
        status,
        ms,
        workspace_bytes: a.workspace_bytes(p),
        deterministic: a.deterministic(),
        note: None,
        prepare_ms: None,
        prepared_bytes: None,
    }
}

fn failed<O: Operation>(a: &O::Algo<'_>, p: &O::Problem, e: &Error) -> AlgoPerf {
    AlgoPerf {
        note: Some(e.to_string()),
        ..record::<O>(a, p, PerfStatus::Failed, None)
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

/// Every candidate to the end, in [`EXHAUSTIVE_TURNS`] turns: in each, every candidate in
/// turn gets one warm-up and then timed runs back to back, until after the last turn it has
/// [`EXHAUSTIVE_RUNS`] of them and [`exhaustive_min_ms`] of timed runs (at most
/// [`EXHAUSTIVE_MAX_RUNS`]); the median. Returns the sorted records.
pub(crate) fn exhaustive<O: Operation>(
    timer: &mut Timer<'_, '_, O>,
    cands: &[&O::Algo<'_>],
) -> Vec<AlgoPerf> {
    let p = timer.p;
    let mut out = Vec::new();
    let mut alive: Vec<(&O::Algo<'_>, Vec<f64>)> = cands.iter().map(|&a| (a, vec![])).collect();
    for turn in 1..=EXHAUSTIVE_TURNS {
        let runs = [EXHAUSTIVE_RUNS, EXHAUSTIVE_MAX_RUNS].map(|r| r * turn / EXHAUSTIVE_TURNS);
        let min_ms = exhaustive_min_ms() * turn as f64 / EXHAUSTIVE_TURNS as f64;
        let mut i = 0;
        while i < alive.len() {
            let (a, t) = &mut alive[i];
            match timer.turn(*a, t, runs, min_ms) {
                Ok(()) => i += 1,
                Err(e) => {
                    out.push(failed::<O>(*a, p, &e));
                    alive.remove(i);
                }
            }
        }
    }
    for (a, mut t) in alive {
        out.push(record::<O>(a, p, PerfStatus::Ok, Some(median(&mut t))));
    }
    sort_records(&mut out);
    out
}

/// A race among `cands` (in predicted order, with their predicted times in ms), timing at
/// most `max_timed` of them and none predicted beyond [`RACE_PREDICTED_CUTOFF`] times the
/// best.
pub(crate) fn race<O: Operation>(
    timer: &mut Timer<'_, '_, O>,
    cands: &[(&O::Algo<'_>, f64)],
    max_timed: usize,
) -> Vec<AlgoPerf> {
    let p = timer.p;
    let max_timed = max_timed.max(1);
    let best = cands.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    // A model that predicts nothing (0) rules nothing out.
    let cutoff = if best > 0.0 && best.is_finite() {
        best * RACE_PREDICTED_CUTOFF
    } else {
        f64::INFINITY
    };
    let mut out = Vec::new();
    let mut timed = Vec::new();
    for (i, &(a, predicted)) in cands.iter().enumerate() {
        let note = if i >= max_timed {
            format!("beyond the limit of {max_timed} timed candidates")
        } else if i > 0 && predicted > cutoff {
            format!(
                "predicted {:.1}x the best prediction (over {RACE_PREDICTED_CUTOFF}x)",
                predicted / best
            )
        } else {
            timed.push(a);
            continue;
        };
        out.push(AlgoPerf {
            note: Some(note),
            ..record::<O>(a, p, PerfStatus::NotTimed, None)
        });
    }
    // Warm-up: one run each.
    let mut alive: Vec<(&O::Algo<'_>, f64, Vec<f64>)> = Vec::new();
    for a in timed {
        match timer.time(a, 1) {
            Ok(t) => alive.push((a, t[0], Vec::new())),
            Err(e) => out.push(failed::<O>(a, p, &e)),
        }
    }
    // A warm-up that would eliminate its candidate gets a second look: a first run may carry
    // one-time costs (a ResNet-50 1x1 layer's GEMMs, 0.42 ms a call with prepared weights,
    // took 4.7 ms on their first run and lost to `direct`'s 0.84 ms).
    let best_warm = alive.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    let mut i = 0;
    while i < alive.len() {
        if alive[i].1 > best_warm * WARMUP_ELIMINATION {
            match timer.time(alive[i].0, 1) {
                Ok(t) => alive[i].1 = alive[i].1.min(t[0]),
                Err(e) => {
                    out.push(failed::<O>(alive[i].0, p, &e));
                    alive.remove(i);
                    continue;
                }
            }
        }
        i += 1;
    }
    let best_warm = alive.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    alive.retain(|(a, w, _)| {
        let keep = *w <= best_warm * WARMUP_ELIMINATION;
        if !keep {
            out.push(record::<O>(*a, p, PerfStatus::Eliminated, Some(*w)));
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
                        out.push(failed::<O>(alive[i].0, p, &e));
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
                out.push(record::<O>(c.0, p, PerfStatus::Eliminated, Some(m)));
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
        out.push(record::<O>(a, p, PerfStatus::Ok, Some(median(&mut times))));
    }
    sort_records(&mut out);
    out
}
