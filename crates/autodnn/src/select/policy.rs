//! Policies, and selection by policy: from an operation's registry (or a caller's list) to a
//! [`Plan`].

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::benchmark::{self, Timer};
use super::cache::{CacheEntry, CacheKey};
use super::heuristic;
use super::{log_lines, Declined, Env, PerfStatus, Plan, Ranked, Source};
use crate::error::{Error, Result};
use crate::op::{Algorithm, OpProblem, Operation};

/// How a handle chooses an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The cost model's ranking; never times, never reads the cache.
    Heuristic,
    /// The tuning cache; on a miss, a race among the candidates, whose result is cached.
    #[default]
    Benchmark,
    /// The tuning cache; on a miss, the heuristic (never times: for latency-critical serving
    /// and changing shapes).
    CachedOnly,
    /// Every candidate timed to the end (one warm-up, at least ten timed runs and 5 ms,
    /// median), every time; the result is cached. The yardstick for the others.
    Exhaustive,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 4] = [
        Policy::Heuristic,
        Policy::Benchmark,
        Policy::CachedOnly,
        Policy::Exhaustive,
    ];

    /// The policy's name: `heuristic`, `benchmark`, `cached_only`, `exhaustive`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Heuristic => "heuristic",
            Policy::Benchmark => "benchmark",
            Policy::CachedOnly => "cached_only",
            Policy::Exhaustive => "exhaustive",
        }
    }

    /// Parses a policy's name (`cached-only` is accepted too).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `policy`.
    pub fn parse(s: &str) -> Result<Policy> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == t)
            .ok_or_else(|| {
                Error::bad(
                    "policy",
                    s,
                    "expected heuristic, benchmark, cached_only or exhaustive",
                )
            })
    }
}

/// The algorithms of `algos` that accept `p`, ranked by predicted time (ties keep list order),
/// each marked eligible or not under the handle's budget and determinism setting; and those
/// that declined or are not eligible, with why.
pub(crate) fn rank<O: Operation>(
    env: &Env<'_>,
    algos: &[&O::Algo<'_>],
    p: &O::Problem,
) -> (Vec<Ranked>, Vec<Declined>) {
    let model = &env.model;
    let machine = &env.machine;
    let mut ranked = Vec::new();
    let mut declined = Vec::new();
    for &a in algos {
        if let Err(reason) = a.check(p) {
            declined.push(Declined {
                algo: a.name(),
                reason,
            });
            continue;
        }
        let ws = a.workspace_bytes(p);
        let mut eligible = true;
        if let Some(limit) = env.limit {
            if ws > limit {
                eligible = false;
                declined.push(Declined {
                    algo: a.name(),
                    reason: format!("needs {ws} workspace bytes, over the budget of {limit}"),
                });
            }
        }
        if env.settings.deterministic && !a.deterministic() {
            eligible = false;
            declined.push(Declined {
                algo: a.name(),
                reason: "not deterministic, and the handle asks for determinism".into(),
            });
        }
        ranked.push(Ranked {
            algo: a.name(),
            predicted_ms: model.predict_from::<O>(
                a.name(),
                p,
                a.cost_features_under(p, &env.ctx),
                machine,
                env.settings.prepared,
            ),
            workspace_bytes: ws,
            deterministic: a.deterministic(),
            accuracy: a.accuracy_under(p, env.ctx.math),
            eligible,
        });
    }
    ranked.sort_by(|a, b| a.predicted_ms.total_cmp(&b.predicted_ms));
    prefer_less_workspace_on_ties(&mut ranked);
    (ranked, declined)
}

/// Among candidates whose predictions differ by at most [`heuristic::PREDICTION_TIE`], moves
/// the one needing less workspace first: the model cannot tell them apart, and less workspace
/// is the safer choice.
fn prefer_less_workspace_on_ties(ranked: &mut [Ranked]) {
    for i in 1..ranked.len() {
        let mut j = i;
        while j > 0 {
            let (a, b) = (&ranked[j - 1], &ranked[j]);
            let tie = b.predicted_ms <= a.predicted_ms * (1.0 + heuristic::PREDICTION_TIE);
            if !(tie && b.workspace_bytes < a.workspace_bytes) {
                break;
            }
            ranked.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// How selection is asked for: by the handle's policy, or as a measurement (`find`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Policy,
    Find,
}

/// Selects for `p` among `algos` by the settings; `data` is what the candidates are timed
/// on when the policy times (checked inputs, see [`Operation::check_call`]).
pub(crate) fn plan<O: Operation>(
    env: &Env<'_>,
    algos: &[&O::Algo<'_>],
    p: &O::Problem,
    data: Option<&O::Inputs<'_>>,
    mode: Mode,
) -> Result<Plan<O>> {
    let t0 = Instant::now();
    let settings = &env.settings;
    let mut log = Vec::new();
    let (ranked, declined) = rank::<O>(env, algos, p);
    if settings.log {
        let math = env.ctx.math_key();
        let mut notes = Vec::new();
        if math != crate::select::cache::STRICT_MATH {
            notes.push(format!("math {math}"));
        }
        if settings.prepared {
            notes.push("for prepared weights".to_string());
        }
        if notes.is_empty() {
            log.push(format!("problem {}", p.describe()));
        } else {
            log.push(format!("problem {} ({})", p.describe(), notes.join(", ")));
        }
        for d in &declined {
            log.push(format!("  declined {}: {}", d.algo, d.reason));
        }
        for r in &ranked {
            log.push(format!(
                "  candidate {}: predicted {:.4} ms, workspace {} bytes{}",
                r.algo,
                r.predicted_ms,
                r.workspace_bytes,
                if r.eligible { "" } else { " (not eligible)" }
            ));
        }
    }
    let find = |name: &str| algos.iter().copied().find(|a| a.name() == name);
    // The eligible algorithms in heuristic order, with their predicted times.
    let predicted: Vec<(&O::Algo<'_>, f64)> = ranked
        .iter()
        .filter(|r| r.eligible)
        .filter_map(|r| find(r.algo).map(|a| (a, r.predicted_ms)))
        .collect();
    let eligible: Vec<&O::Algo<'_>> = predicted.iter().map(|c| c.0).collect();
    if eligible.is_empty() {
        let why: Vec<String> = declined
            .iter()
            .map(|d| format!("{}: {}", d.algo, d.reason))
            .collect();
        if settings.log {
            log.push("  no algorithm can run this problem".into());
            log_lines(&log);
        }
        return Err(Error::Declined {
            algo: "every algorithm".into(),
            reason: why.join("; "),
        });
    }
    let heuristic_chain: Vec<&'static str> = eligible.iter().map(|a| a.name()).collect();
    let mut out = Plan::<O> {
        problem: p.clone(),
        chain: heuristic_chain.clone(),
        source: Source::Heuristic,
        selection_ms: 0.0,
        cache_hit: false,
        records: Vec::new(),
        timed: 0,
        declined,
    };

    let forced = match (&settings.forced, mode) {
        (Some(name), Mode::Policy) => Some(name.as_str()),
        _ => None,
    };
    let mut decided = false;
    if let Some(name) = forced {
        if let Some(i) = out.chain.iter().position(|a| *a == name) {
            let a = out.chain.remove(i);
            out.chain.insert(0, a);
            out.source = Source::Forced;
            decided = true;
        } else if find(name).is_none() {
            return Err(Error::UnknownAlgorithm {
                name: name.into(),
                known: algos
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        } else if settings.log {
            let why = out
                .declined
                .iter()
                .find(|d| d.algo == name)
                .map_or("not eligible".to_string(), |d| d.reason.clone());
            log.push(format!(
                "  {} = {name} does not apply ({why}); selecting by policy",
                super::ALGO_ENV
            ));
        }
    }

    if !decided {
        let policy = match mode {
            Mode::Find if settings.policy == super::Policy::Exhaustive => super::Policy::Exhaustive,
            Mode::Find => super::Policy::Benchmark,
            Mode::Policy => settings.policy,
        };
        let key = CacheKey::new(p, env.ctx.threads(), env.ctx.isa())
            .with_math(env.ctx.math_key())
            .with_prepared(settings.prepared);
        let use_cache = matches!(policy, super::Policy::Benchmark | super::Policy::CachedOnly)
            && mode == Mode::Policy;
        let cached = if use_cache {
            env.cache_lookup(&key, &heuristic_chain)
        } else {
            None
        };
        if let Some(entry) = cached {
            out.chain = chain_from_records(&entry, &heuristic_chain);
            out.records = entry.records;
            out.source = Source::Cache;
            out.cache_hit = true;
        } else if let (super::Policy::Benchmark | super::Policy::Exhaustive, Some(d)) =
            (policy, data)
        {
            let exhaustive = policy == super::Policy::Exhaustive;
            let t = Instant::now();
            let records = if !exhaustive && eligible.len() == 1 {
                // Nothing to choose between: nothing to time.
                vec![super::AlgoPerf {
                    algo: eligible[0].name().into(),
                    status: PerfStatus::Ok,
                    ms: None,
                    workspace_bytes: eligible[0].workspace_bytes(p),
                    deterministic: eligible[0].deterministic(),
                    note: Some("the only candidate".into()),
                    prepare_ms: None,
                    prepared_bytes: None,
                }]
            } else {
                let mut timer = Timer::<O>::new(env, p, d)?;
                let mut records = if exhaustive {
                    benchmark::exhaustive(&mut timer, &eligible)
                } else {
                    benchmark::race(&mut timer, &predicted, settings.max_timed)
                };
                timer.annotate(&mut records);
                records
            };
            out.timed = records
                .iter()
                .filter(|r| matches!(r.status, PerfStatus::Ok | PerfStatus::Eliminated))
                .filter(|r| r.ms.is_some())
                .count();
            let entry = CacheEntry {
                source: if exhaustive {
                    Source::Exhaustive
                } else {
                    Source::Benchmark
                },
                records,
                tuning_ms: t.elapsed().as_secs_f64() * 1e3,
            };
            let stored = env.cache_store(key, entry);
            out.chain = chain_from_records(&stored, &heuristic_chain);
            out.records = stored.records;
            out.source = if exhaustive {
                Source::Exhaustive
            } else {
                Source::Benchmark
            };
            if settings.log {
                for r in &out.records {
                    log.push(format!(
                        "  timed {}: {:?}{}{}",
                        r.algo,
                        r.status,
                        r.ms.map_or(String::new(), |m| format!(" {m:.4} ms")),
                        r.note.as_ref().map_or(String::new(), |n| format!(" ({n})"))
                    ));
                }
            }
        }
    }
    out.selection_ms = t0.elapsed().as_secs_f64() * 1e3;
    if settings.log {
        log.push(format!(
            "  chose {} (source: {}; chain: {}) in {:.3} ms",
            out.algo(),
            out.source.name(),
            out.chain.join(" > "),
            out.selection_ms
        ));
        log_lines(&log);
    }
    Ok(out)
}

/// The chain a cached or measured ranking gives: its records in order, failed ones last, then
/// any eligible algorithm it lacks in heuristic order; only eligible algorithms.
fn chain_from_records(entry: &CacheEntry, heuristic: &[&'static str]) -> Vec<&'static str> {
    let mut chain: Vec<&'static str> = Vec::new();
    let ok = entry
        .records
        .iter()
        .filter(|r| r.status != PerfStatus::Failed);
    let failed = entry
        .records
        .iter()
        .filter(|r| r.status == PerfStatus::Failed);
    for r in ok.chain(failed) {
        if let Some(&a) = heuristic.iter().find(|a| **a == r.algo) {
            if !chain.contains(&a) {
                chain.push(a);
            }
        }
    }
    for &a in heuristic {
        if !chain.contains(&a) {
            chain.push(a);
        }
    }
    chain
}

/// True when a cached entry covers every eligible algorithm: a new or newly eligible one, or
/// one whose measurement failed (memory may have been short, or a fault injected, at the
/// time), means the ranking must be measured again.
pub(crate) fn entry_covers(entry: &CacheEntry, eligible: &[&'static str]) -> bool {
    eligible.iter().all(|a| {
        entry
            .records
            .iter()
            .any(|r| r.algo == *a && r.status != PerfStatus::Failed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Accuracy;

    fn r(algo: &'static str, ms: f64, ws: usize) -> Ranked {
        Ranked {
            algo,
            predicted_ms: ms,
            workspace_bytes: ws,
            deterministic: true,
            accuracy: Accuracy::Exact,
            eligible: true,
        }
    }

    #[test]
    fn ties_go_to_less_workspace() {
        let mut v = vec![
            r("a", 1.0, 100),
            r("b", 1.02, 0),
            r("c", 1.029, 50),
            r("d", 1.2, 0),
        ];
        prefer_less_workspace_on_ties(&mut v);
        let order: Vec<_> = v.iter().map(|x| x.algo).collect();
        assert_eq!(order, ["b", "c", "a", "d"]);
        // Outside the tie, prediction order stands.
        let mut v = vec![r("a", 1.0, 100), r("b", 1.05, 0)];
        prefer_less_workspace_on_ties(&mut v);
        assert_eq!(v[0].algo, "a");
    }
}
