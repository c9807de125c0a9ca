//! Algorithm selection: which registered algorithm runs a problem, and what happens when it
//! cannot.
//!
//! The machinery is written once, generic over the operation ([`crate::op::Operation`]): it
//! works over an operation's ordered list of algorithms (for the forward convolution,
//! [the registry](crate::conv::algorithms)) and never names an algorithm or an operation;
//! adding an algorithm is a file and a registry line, adding an operation is its types and
//! its registry, and selection picks them up. It never sees the handle either: the handle
//! hands it an `Env` (execution context, settings, workspace pool, tuning cache, cost
//! model).
//!
//! - **Heuristic** ([`heuristic`], cuDNN's `Get`): [`Handle::get_conv_algorithms`] ranks every
//!   algorithm that accepts a problem by the time a calibrated linear cost model predicts,
//!   without running anything. `autodnn calibrate` fits the model on this machine; shipped
//!   defaults serve until then.
//! - **Measured** ([`benchmark`], cuDNN's `Find`): [`Handle::find_conv_algorithms`] times the
//!   candidates on the real problem, racing them so that clear losers stop early.
//! - **Cache** ([`cache`]): measured rankings keyed by problem, threads, CPU, instruction set
//!   and library version, persisted in a JSON file ([`crate::default_cache_path`]).
//! - **Policies** ([`Policy`]): `heuristic`, `benchmark` (the default), `cached_only`,
//!   `exhaustive`; the deterministic option excludes algorithms whose bits depend on
//!   scheduling; a limit on how many candidates are timed.
//! - **Execution** ([`Handle::conv_forward_auto`]): the choice runs with a fallback chain: on
//!   out-of-memory, a too-small workspace or an algorithm failure, a [`FallbackEvent`] is
//!   recorded, cached workspace is released, and the next ranked algorithm that fits the
//!   memory left is tried, down to the registry's last entry, which needs no workspace. Bad
//!   input is returned at once. The workspace budget ([`Handle::set_workspace_limit`]) is
//!   enforced by the handle's allocator ([`workspace`]), with fault injection for rehearsals.
//! - **Visibility**: `AUTODNN_LOG=dispatch` prints each decision on stderr;
//!   `AUTODNN_ALGO=name` forces an algorithm wherever it accepts the problem.
//!
//! ```
//! use autodnn::{Handle, Layout, ProblemSpec};
//! use autodnn::conv::{EpilogueArgs, Weights};
//! use autodnn::select::Policy;
//! let p = ProblemSpec::parse("mb1ic8ih10oc8kh3ph1")?.to_problem(Layout::Nchw)?;
//! let mut handle = Handle::with_threads(1)?;
//! handle.set_policy(Policy::Benchmark);
//! let ranking = handle.get_conv_algorithms(&p)?;
//! assert!(!ranking.is_empty());
//! let x = vec![1.0f32; p.x().span()];
//! let w = vec![1.0f32; p.w().elements()];
//! let mut y = vec![0.0f32; p.y().span()];
//! let report = handle.conv_forward_auto(&p, &x, Weights::Plain(&w), &mut y, &EpilogueArgs::default())?;
//! assert!(report.events.is_empty());
//! // The second call finds the measured choice in the tuning cache.
//! let again = handle.conv_forward_auto(&p, &x, Weights::Plain(&w), &mut y, &EpilogueArgs::default())?;
//! assert_eq!(again.source, autodnn::select::Source::Cache);
//! # Ok::<(), autodnn::Error>(())
//! ```
//!
//! [`Handle::get_conv_algorithms`]: crate::Handle::get_conv_algorithms
//! [`Handle::find_conv_algorithms`]: crate::Handle::find_conv_algorithms
//! [`Handle::conv_forward_auto`]: crate::Handle::conv_forward_auto
//! [`Handle::set_workspace_limit`]: crate::Handle::set_workspace_limit

pub mod benchmark;
pub mod budget;
pub mod cache;
pub mod deploy;
mod fallback;
pub mod heuristic;
mod policy;
pub use crate::runtime::workspace;

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

pub use cache::{CacheEntry, CacheKey, TuningCache};
pub use heuristic::{CostModel, Machine};
pub use policy::Policy;
pub use workspace::FailAlloc;

pub(crate) use fallback::execute;
pub(crate) use policy::{plan, rank, Mode};

use crate::error::{Error, Result};
use crate::op::{Accuracy, OpProblem, Operation};
use crate::runtime::workspace::{Workspace, WorkspacePool};
use crate::runtime::ExecContext;

/// What selection works with, lent by the handle for one call: the execution context, the
/// selection settings, the workspace pool and budget, the tuning cache and the cost model.
#[derive(Debug, Clone)]
pub(crate) struct Env<'h> {
    pub(crate) ctx: ExecContext<'h>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) limit: Option<usize>,
    pub(crate) workspace: &'h WorkspacePool,
    pub(crate) cache: &'h RwLock<TuningCache>,
    pub(crate) model: Arc<CostModel>,
    pub(crate) machine: Machine,
}

impl Env<'_> {
    /// A workspace of exactly `bytes` for `algo`: within the budget, subject to fault
    /// injection, allocated fallibly, reusing the cached buffer.
    pub(crate) fn reserve(&self, bytes: usize, algo: &str) -> Result<Workspace<'_>> {
        self.workspace
            .reserve(bytes, algo, self.limit, &self.settings.fail_alloc)
    }

    /// Frees the cached workspace buffer.
    pub(crate) fn release(&self) {
        self.workspace.release();
    }

    /// The cached entry for `key` when it covers every eligible algorithm.
    pub(crate) fn cache_lookup(
        &self,
        key: &CacheKey,
        eligible: &[&'static str],
    ) -> Option<CacheEntry> {
        let c = self.cache.read().unwrap_or_else(|e| e.into_inner());
        c.get(key)
            .filter(|e| policy::entry_covers(e, eligible))
            .cloned()
    }

    /// Stores a measurement (through the noise guard) and returns the entry kept.
    pub(crate) fn cache_store(&self, key: CacheKey, entry: CacheEntry) -> CacheEntry {
        let mut c = self.cache.write().unwrap_or_else(|e| e.into_inner());
        c.insert(key.clone(), entry.clone());
        c.get(&key).cloned().unwrap_or(entry)
    }
}

/// Environment variable read when a handle is made: `dispatch` prints each selection decision
/// on stderr.
pub const LOG_ENV: &str = "AUTODNN_LOG";
/// Environment variable read when a handle is made: the name of an algorithm to run wherever it
/// accepts the problem.
pub const ALGO_ENV: &str = "AUTODNN_ALGO";

/// Where a choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A measured ranking from the tuning cache.
    Cache,
    /// The cost model's ranking.
    Heuristic,
    /// A race among the candidates, just now.
    Benchmark,
    /// Every candidate timed to the end, just now.
    Exhaustive,
    /// `AUTODNN_ALGO` or [`crate::Handle::set_forced_algo`].
    Forced,
    /// The algorithm prepared weights were made for.
    Prepared,
}

impl Source {
    /// The name used in reports (`cache`, `heuristic`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Source::Cache => "cache",
            Source::Heuristic => "heuristic",
            Source::Benchmark => "benchmark",
            Source::Exhaustive => "exhaustive",
            Source::Forced => "forced",
            Source::Prepared => "prepared",
        }
    }
}

/// How a candidate fared in a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfStatus {
    /// Timed to the end of the measurement.
    Ok,
    /// Stopped early: clearly slower than the best (its time so far is kept).
    Eliminated,
    /// Its workspace could not be had, or it failed.
    Failed,
    /// Not timed: beyond the limit on timed candidates.
    NotTimed,
}

/// One algorithm's measurement on one problem: the record of measured selection and of the
/// tuning cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlgoPerf {
    /// The algorithm's name.
    pub algo: String,
    /// How it fared.
    pub status: PerfStatus,
    /// Median milliseconds (for eliminated ones, over the runs it got); none when not timed.
    pub ms: Option<f64>,
    /// Workspace bytes it needs.
    pub workspace_bytes: usize,
    /// Whether its bits are independent of scheduling.
    pub deterministic: bool,
    /// Why it failed or was not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// With the prepared-weights intent: milliseconds its preparation took (once, untimed
    /// in `ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_ms: Option<f64>,
    /// With the prepared-weights intent: bytes its prepared weights hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_bytes: Option<usize>,
}

/// One entry of the heuristic ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// The algorithm's name.
    pub algo: &'static str,
    /// Predicted milliseconds.
    pub predicted_ms: f64,
    /// Workspace bytes it needs.
    pub workspace_bytes: usize,
    /// Whether its bits are independent of scheduling.
    pub deterministic: bool,
    /// Its documented error bound.
    pub accuracy: Accuracy,
    /// Whether the handle would run it: within the workspace budget, and deterministic when
    /// the handle asks for that.
    pub eligible: bool,
}

/// An algorithm left out of a selection, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declined {
    /// The algorithm's name.
    pub algo: &'static str,
    /// Why (its own reason for declining, or the handle's: budget, determinism).
    pub reason: String,
}

/// The outcome of selection for one problem of operation `O`: the chain of algorithms to
/// try, in order.
#[derive(Debug)]
pub struct Plan<O: Operation> {
    pub(crate) problem: O::Problem,
    pub(crate) chain: Vec<&'static str>,
    /// Where the first choice came from.
    pub source: Source,
    /// Milliseconds spent selecting (cache look-up, the heuristic, candidate timing).
    pub selection_ms: f64,
    /// True when the ranking came from the tuning cache.
    pub cache_hit: bool,
    /// The measurement behind the choice (timed now or cached); empty for the heuristic.
    pub records: Vec<AlgoPerf>,
    /// Candidates timed now.
    pub timed: usize,
    /// Algorithms left out, and why.
    pub declined: Vec<Declined>,
}

/// A plan of the forward convolution.
pub type ConvPlan = Plan<crate::op::ConvForward>;

impl<O: Operation> Clone for Plan<O> {
    fn clone(&self) -> Self {
        Plan {
            problem: self.problem.clone(),
            chain: self.chain.clone(),
            source: self.source,
            selection_ms: self.selection_ms,
            cache_hit: self.cache_hit,
            records: self.records.clone(),
            timed: self.timed,
            declined: self.declined.clone(),
        }
    }
}

impl<O: Operation> Plan<O> {
    /// A plan of one algorithm (for instance the one prepared weights were made for).
    pub(crate) fn single(problem: &O::Problem, algo: &'static str, source: Source) -> Plan<O> {
        Plan {
            problem: problem.clone(),
            chain: vec![algo],
            source,
            selection_ms: 0.0,
            cache_hit: false,
            records: Vec::new(),
            timed: 0,
            declined: Vec::new(),
        }
    }

    /// The first choice.
    pub fn algo(&self) -> &'static str {
        self.chain[0]
    }
    /// Every algorithm to try, in order.
    pub fn chain(&self) -> &[&'static str] {
        &self.chain
    }
    /// The problem it was made for.
    pub fn problem(&self) -> &O::Problem {
        &self.problem
    }
    /// The same plan with the chain starting at `algo` (for instance the algorithm that
    /// finally ran after a fallback), the algorithms before it dropped. Unchanged when `algo`
    /// is not in the chain.
    pub fn starting_at(&self, algo: &str) -> Plan<O> {
        let mut p = self.clone();
        if let Some(i) = p.chain.iter().position(|a| *a == algo) {
            p.chain.drain(..i);
        }
        p
    }
}

/// A failure the fallback chain stepped past.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackEvent {
    /// The algorithm that failed.
    pub algo: &'static str,
    /// Why.
    pub error: Error,
    /// The algorithm tried next (none when the chain was exhausted).
    pub next: Option<&'static str>,
}

/// What one automatic call did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The algorithm that computed the output.
    pub algo: &'static str,
    /// Where the first choice came from.
    pub source: Source,
    /// Workspace bytes the algorithm that ran used.
    pub workspace_bytes: usize,
    /// Milliseconds spent selecting (0 when a plan was given).
    pub selection_ms: f64,
    /// True when the ranking came from the tuning cache.
    pub cache_hit: bool,
    /// Failures stepped past, in order.
    pub events: Vec<FallbackEvent>,
}

/// The handle's selection settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub policy: Policy,
    pub deterministic: bool,
    pub max_timed: usize,
    pub fail_alloc: FailAlloc,
    pub forced: Option<String>,
    pub log: bool,
    /// Select for calls with prepared weights: time them so, predict them so, and keep their
    /// rankings apart in the tuning cache.
    pub prepared: bool,
}

impl Settings {
    /// Defaults, with `AUTODNN_ALGO`, `AUTODNN_FAIL_ALLOC` and `AUTODNN_LOG` applied.
    pub(crate) fn from_env() -> Result<Settings> {
        let forced = std::env::var(ALGO_ENV)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let log = std::env::var(LOG_ENV)
            .map(|v| v.split(',').any(|t| t.trim() == "dispatch"))
            .unwrap_or(false);
        Ok(Settings {
            policy: Policy::default(),
            deterministic: false,
            max_timed: benchmark::DEFAULT_MAX_TIMED,
            fail_alloc: FailAlloc::from_env()?,
            forced,
            log,
            prepared: false,
        })
    }
}

/// One line on stderr per entry, prefixed, written at once so that lines of concurrent calls
/// do not interleave.
pub(crate) fn log_lines(lines: &[String]) {
    use std::io::Write;
    let mut s = String::new();
    for l in lines {
        s.push_str("autodnn dispatch: ");
        s.push_str(l);
        s.push('\n');
    }
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

/// A short description of a problem for logs (its [`OpProblem::describe`]).
pub fn describe<P: OpProblem>(p: &P) -> String {
    p.describe()
}
