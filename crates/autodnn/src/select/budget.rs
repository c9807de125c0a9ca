//! A tuning budget for a network: which layers to time when timing every one costs too much.
//!
//! Each layer's heuristic ranking ([`crate::Handle::get_conv_algorithms`] or
//! [`crate::Handle::get`]) says what a race on it would time (the eligible candidates
//! predicted within [`RACE_PREDICTED_CUTOFF`] of the best, at most `max_timed`) and so what it
//! would cost (a warm-up and up to [`RACE_MAX_RUNS`] runs of each), and how much the
//! measurement can gain: nothing with a single candidate, else a share of the layer's
//! predicted time times its count in the network. Layers are timed in order of gain per
//! millisecond of tuning until the budget is spent; the others take the heuristic's pick.

use super::benchmark::{RACE_MAX_RUNS, RACE_PREDICTED_CUTOFF};
use super::Ranked;

/// One layer's case for timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingCase {
    /// What a race on the layer is predicted to cost, in milliseconds.
    pub cost_ms: f64,
    /// The network time a measurement may save, in milliseconds (0: one candidate).
    pub gain_ms: f64,
}

impl TimingCase {
    /// The case of a layer occurring `count` times whose heuristic ranking is `ranked`,
    /// for races of at most `max_timed` candidates.
    pub fn new(ranked: &[Ranked], count: usize, max_timed: usize) -> TimingCase {
        let eligible: Vec<f64> = ranked
            .iter()
            .filter(|r| r.eligible)
            .map(|r| r.predicted_ms.max(0.0))
            .collect();
        let best = eligible.iter().copied().fold(f64::INFINITY, f64::min);
        let timed: Vec<f64> = eligible
            .iter()
            .copied()
            .filter(|&p| p <= best * RACE_PREDICTED_CUTOFF)
            .take(max_timed.max(1))
            .collect();
        let cost_ms = timed.iter().sum::<f64>() * (1 + RACE_MAX_RUNS) as f64;
        // The cost model's errors are tens of percent: a race can win back that share of the
        // layer's time, when there is something to choose between.
        let gain_ms = if timed.len() >= 2 {
            best * count as f64
        } else {
            0.0
        };
        TimingCase { cost_ms, gain_ms }
    }
}

/// Which layers to time within `budget_ms` (true at a layer's index): the largest gain per
/// millisecond first, as long as the predicted costs fit; layers with nothing to gain are
/// never timed. The order is fixed by the cases alone (ties to the earlier layer).
///
/// ```
/// use autodnn::select::budget::{choose_timed, TimingCase};
/// let cases = [
///     TimingCase { cost_ms: 10.0, gain_ms: 5.0 },
///     TimingCase { cost_ms: 2.0, gain_ms: 4.0 },
///     TimingCase { cost_ms: 1.0, gain_ms: 0.0 },
/// ];
/// assert_eq!(choose_timed(&cases, 5.0), [false, true, false]);
/// assert_eq!(choose_timed(&cases, 100.0), [true, true, false]);
/// ```
pub fn choose_timed(cases: &[TimingCase], budget_ms: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..cases.len())
        .filter(|&i| cases[i].gain_ms > 0.0)
        .collect();
    let rate = |c: &TimingCase| c.gain_ms / c.cost_ms.max(1e-9);
    order.sort_by(|&a, &b| rate(&cases[b]).total_cmp(&rate(&cases[a])).then(a.cmp(&b)));
    let mut chosen = vec![false; cases.len()];
    let mut spent = 0.0;
    for i in order {
        if spent + cases[i].cost_ms <= budget_ms {
            spent += cases[i].cost_ms;
            chosen[i] = true;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Accuracy;

    fn r(algo: &'static str, ms: f64, eligible: bool) -> Ranked {
        Ranked {
            algo,
            predicted_ms: ms,
            workspace_bytes: 0,
            deterministic: true,
            accuracy: Accuracy::Exact,
            eligible,
        }
    }

    #[test]
    fn a_case_counts_what_a_race_would_time() {
        // c is past the cutoff (RACE_PREDICTED_CUTOFF times the best), d not eligible: a and
        // b timed.
        let ranked = [
            r("a", 1.0, true),
            r("b", 2.0, true),
            r("c", RACE_PREDICTED_CUTOFF + 1.0, true),
            r("d", 0.5, false),
        ];
        let c = TimingCase::new(&ranked, 3, 8);
        assert_eq!(c.cost_ms, 3.0 * (1 + RACE_MAX_RUNS) as f64);
        assert_eq!(c.gain_ms, 3.0);
        // One candidate: nothing to gain; at most max_timed candidates cost.
        assert_eq!(TimingCase::new(&ranked[..1], 3, 8).gain_ms, 0.0);
        assert_eq!(
            TimingCase::new(&ranked, 1, 1).cost_ms,
            1.0 * (1 + RACE_MAX_RUNS) as f64
        );
        assert_eq!(TimingCase::new(&ranked, 1, 1).gain_ms, 0.0);
    }

    #[test]
    fn the_budget_goes_to_the_best_gain_per_millisecond() {
        let cases = [
            TimingCase {
                cost_ms: 4.0,
                gain_ms: 4.0,
            },
            TimingCase {
                cost_ms: 1.0,
                gain_ms: 3.0,
            },
            TimingCase {
                cost_ms: 3.0,
                gain_ms: 6.0,
            },
            TimingCase {
                cost_ms: 0.5,
                gain_ms: 0.0,
            },
        ];
        assert_eq!(choose_timed(&cases, 0.0), [false; 4]);
        assert_eq!(choose_timed(&cases, 1.0), [false, true, false, false]);
        assert_eq!(choose_timed(&cases, 4.0), [false, true, true, false]);
        // What does not fit is skipped; a cheaper one later still fits.
        assert_eq!(choose_timed(&cases, 7.0), [false, true, true, false]);
        assert_eq!(choose_timed(&cases, 8.0), [true, true, true, false]);
    }
}
