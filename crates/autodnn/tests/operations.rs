//! Selection is generic over operations: a second operation, defined here outside the
//! library with algorithms of its own, goes through the heuristic, the race, the tuning cache
//! (in memory and through a file), the workspace budget and the fallback chain (with the
//! snapshot of an output the call reads) with nothing in `select` knowing it. And a tuning
//! cache written before operations were generic still reads.

use std::path::PathBuf;
use std::time::Duration;

use autodnn::op::{Accuracy, Algorithm, OpProblem, Operation, COST_FEATURES};
use autodnn::runtime::{Carve, ExecContext};
use autodnn::select::cache::{CacheKey, TuningCache, CACHE_FORMAT_VERSION};
use autodnn::select::{FailAlloc, PerfStatus, Policy, Source};
use autodnn::{ConvProblem, Error, Handle};
use serde::{Deserialize, Serialize};

/// y = scale · x + (accumulate ? y : 0), over `n` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct Scale {
    n: usize,
    scale: i32,
}

impl OpProblem for Scale {
    fn op_tag(&self) -> &'static str {
        ScaleOp::NAME
    }
    fn types(&self) -> String {
        "f32".into()
    }
    fn describe(&self) -> String {
        format!("scale n{} by {}", self.n, self.scale)
    }
}

#[derive(Debug, Clone, Copy)]
struct ScaleInputs<'a> {
    x: &'a [f32],
    accumulate: bool,
}

#[derive(Debug)]
struct ScaleOp;

impl Operation for ScaleOp {
    const NAME: &'static str = "test_scale";
    type Problem = Scale;
    type Algo<'a> = dyn Algorithm<ScaleOp> + 'a;
    type Inputs<'a> = ScaleInputs<'a>;
    type Output<'a> = &'a mut [f32];
    type Buffer = Vec<f32>;
    // Nothing to prepare: selection for prepared weights times its calls as they are.
    type Prepared = ();

    fn with_prepared<'a: 'b, 'b>(inputs: &ScaleInputs<'a>, _: &'b ()) -> ScaleInputs<'b> {
        *inputs
    }

    fn check_call<'a>(
        p: &Scale,
        inputs: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> autodnn::Result<Self::Inputs<'a>> {
        for (field, got) in [("x", inputs.x.len()), ("y", output_len.unwrap_or(p.n))] {
            if got < p.n {
                return Err(Error::BufferTooSmall {
                    field: field.into(),
                    needed: p.n,
                    got,
                });
            }
        }
        Ok(*inputs)
    }
    fn output_len(out: &&mut [f32]) -> usize {
        out.len()
    }
    fn scratch(p: &Scale) -> autodnn::Result<Vec<f32>> {
        Ok(vec![0.0; p.n])
    }
    fn output(b: &mut Vec<f32>) -> &mut [f32] {
        b
    }
    fn snapshot(
        _p: &Scale,
        inputs: &ScaleInputs<'_>,
        out: &&mut [f32],
    ) -> autodnn::Result<Option<Vec<f32>>> {
        Ok(inputs.accumulate.then(|| out.to_vec()))
    }
    fn restore(out: &mut &mut [f32], s: &Vec<f32>) {
        out[..s.len()].copy_from_slice(s);
    }
}

/// A test algorithm: `ws_per_element` workspace bytes per element (used as scratch), a delay
/// per run, and optionally a failure after scribbling over y.
struct Fake {
    name: &'static str,
    ws_per_element: usize,
    delay: Duration,
    scribble_and_fail: bool,
    flops: f64,
}

impl Algorithm<ScaleOp> for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, p: &Scale) -> Result<(), String> {
        if p.n == 0 {
            Err("needs elements".into())
        } else {
            Ok(())
        }
    }
    fn workspace_bytes(&self, p: &Scale) -> usize {
        p.n * self.ws_per_element
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn accuracy(&self) -> Accuracy {
        Accuracy::Exact
    }
    fn cost_features(&self, p: &Scale) -> [f64; COST_FEATURES] {
        let mut f = [0.0; COST_FEATURES];
        f[0] = 1.0;
        f[1] = self.flops * p.n as f64 / 1e9;
        f
    }
    fn run(
        &self,
        _ctx: &ExecContext<'_>,
        p: &Scale,
        inputs: &ScaleInputs<'_>,
        out: &mut &mut [f32],
        workspace: &mut [u8],
    ) -> autodnn::Result<()> {
        std::thread::sleep(self.delay);
        if self.scribble_and_fail {
            out.iter_mut().for_each(|v| *v = f32::NAN);
            return Err(Error::OutOfMemory {
                bytes: 1,
                what: format!("{} gives up on purpose", self.name),
            });
        }
        let scratch: &mut [f32] = if self.ws_per_element >= 4 {
            Carve::new(workspace).take::<f32>(p.n)?
        } else {
            &mut []
        };
        for i in 0..p.n {
            let v = p.scale as f32 * inputs.x[i];
            if let Some(s) = scratch.get_mut(i) {
                *s = v;
            }
            out[i] = if inputs.accumulate { out[i] + v } else { v };
        }
        Ok(())
    }
}

const FAST_BIG: Fake = Fake {
    name: "fast_big",
    ws_per_element: 4,
    delay: Duration::ZERO,
    scribble_and_fail: false,
    flops: 1.0,
};
const SLOW_SMALL: Fake = Fake {
    name: "slow_small",
    ws_per_element: 0,
    delay: Duration::from_millis(3),
    scribble_and_fail: false,
    flops: 50.0,
};
const SCRIBBLER: Fake = Fake {
    name: "scribbler",
    ws_per_element: 0,
    delay: Duration::ZERO,
    scribble_and_fail: true,
    flops: 0.1,
};

fn algos() -> Vec<&'static dyn Algorithm<ScaleOp>> {
    vec![&FAST_BIG, &SLOW_SMALL]
}

fn expected(p: &Scale, x: &[f32], prior: Option<&[f32]>) -> Vec<f32> {
    (0..p.n)
        .map(|i| p.scale as f32 * x[i] + prior.map_or(0.0, |y| y[i]))
        .collect()
}

fn temp_file(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("autodnn-ops-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tuning.json")
}

#[test]
fn a_second_operation_runs_through_the_generic_machinery() {
    let h = Handle::with_threads(1).unwrap();
    h.set_policy(Policy::Benchmark);
    let algos = algos();
    let p = Scale { n: 257, scale: 3 };
    let x: Vec<f32> = (0..p.n).map(|i| (i % 9) as f32 - 4.0).collect();
    let inputs = ScaleInputs {
        x: &x,
        accumulate: false,
    };

    // Heuristic: both ranked, with their workspaces; nothing timed.
    let ranked = h.get_among::<ScaleOp>(&algos, &p).unwrap();
    let mut names: Vec<_> = ranked.iter().map(|r| r.algo).collect();
    names.sort();
    assert_eq!(names, ["fast_big", "slow_small"]);
    let big = ranked.iter().find(|r| r.algo == "fast_big").unwrap();
    assert_eq!(big.workspace_bytes, 4 * p.n);
    assert!(ranked.iter().all(|r| r.eligible && r.predicted_ms > 0.0));
    // An empty problem: both decline, so nothing is eligible.
    let e = h
        .plan_among::<ScaleOp>(&algos, &Scale { n: 0, scale: 1 }, &inputs)
        .unwrap_err();
    assert!(matches!(e, Error::Declined { .. }), "{e:?}");

    // Race: the fast one wins; the ranking is cached under the operation's own key.
    let records = h.find_among::<ScaleOp>(&algos, &p, &inputs).unwrap();
    assert_eq!(records[0].algo, "fast_big");
    assert_eq!(records[0].status, PerfStatus::Ok);
    assert!(records.iter().any(|r| r.algo == "slow_small"));
    let key = CacheKey::new(&p, h.threads(), h.isa());
    assert_eq!(key.op, "test_scale");
    assert!(h.tuning_cache().get(&key).is_some(), "stored under its key");
    let plan = h.plan_among::<ScaleOp>(&algos, &p, &inputs).unwrap();
    assert_eq!((plan.source, plan.algo()), (Source::Cache, "fast_big"));

    // Run: the plan's first choice computes y.
    let mut y = vec![f32::NAN; p.n];
    let report = h
        .run_plan_among::<ScaleOp>(&algos, &plan, &inputs, &mut &mut y[..], None)
        .unwrap();
    assert_eq!(report.algo, "fast_big");
    assert!(report.events.is_empty());
    assert_eq!(y, expected(&p, &x, None));

    // The cache file: saved, loaded by another handle, the entry found again.
    let path = temp_file("roundtrip");
    h.load_tuning_cache(&path).unwrap();
    h.set_tuning_cache({
        let mut c = TuningCache::new();
        c.insert(key.clone(), h_entry(&records));
        c
    });
    h.save_tuning_cache().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"op\": \"test_scale\""), "{text}");
    let other = Handle::with_threads(1).unwrap();
    other.set_policy(Policy::CachedOnly);
    other.load_tuning_cache_read_only(&path).unwrap();
    let again = other.plan_among::<ScaleOp>(&algos, &p, &inputs).unwrap();
    assert!(again.cache_hit, "{:?}", again.source);
    assert_eq!(again.algo(), "fast_big");
    assert_eq!(
        other.tuning_cache().get(&key).unwrap().records[0].algo,
        "fast_big"
    );

    // Budget: with no workspace allowed, only the small one is eligible.
    h.set_workspace_limit(Some(0));
    let plan = h.plan_among::<ScaleOp>(&algos, &p, &inputs).unwrap();
    assert_eq!(plan.chain(), ["slow_small"]);
    assert!(plan
        .declined
        .iter()
        .any(|d| d.algo == "fast_big" && d.reason.contains("budget")));
    h.set_workspace_limit(None);

    // Fallback: the first choice's workspace fails; the next one computes y.
    h.set_fail_alloc(FailAlloc::Algorithms(vec!["fast_big".into()]));
    let mut y = vec![f32::NAN; p.n];
    let report = h
        .run_among::<ScaleOp>(&algos, &p, &inputs, &mut &mut y[..])
        .unwrap();
    assert_eq!(report.algo, "slow_small");
    assert_eq!(report.events.len(), 1);
    assert_eq!(report.events[0].algo, "fast_big");
    assert_eq!(y, expected(&p, &x, None));
    h.set_fail_alloc(FailAlloc::Never);
}

/// A cache entry made of measured records.
fn h_entry(records: &[autodnn::select::AlgoPerf]) -> autodnn::select::CacheEntry {
    autodnn::select::CacheEntry {
        source: Source::Benchmark,
        records: records.to_vec(),
        tuning_ms: 1.0,
    }
}

#[test]
fn the_fallback_restores_an_output_the_call_reads() {
    // The scribbler leads (forced), writes NaN over y and fails: the next algorithm must see
    // y's prior contents again, since the call accumulates into them.
    let h = Handle::with_threads(1).unwrap();
    h.set_policy(Policy::Heuristic);
    h.set_forced_algo(Some("scribbler"));
    let algos: Vec<&dyn Algorithm<ScaleOp>> = vec![&SCRIBBLER, &SLOW_SMALL];
    let p = Scale { n: 33, scale: -2 };
    let x: Vec<f32> = (0..p.n).map(|i| i as f32).collect();
    let prior: Vec<f32> = (0..p.n).map(|i| 100.0 + i as f32).collect();
    let inputs = ScaleInputs {
        x: &x,
        accumulate: true,
    };
    let mut y = prior.clone();
    let report = h
        .run_among::<ScaleOp>(&algos, &p, &inputs, &mut &mut y[..])
        .unwrap();
    assert_eq!(report.source, Source::Forced);
    assert_eq!(report.algo, "slow_small");
    assert_eq!(report.events[0].algo, "scribbler");
    assert_eq!(y, expected(&p, &x, Some(&prior)));
    // Alone, the scribbler's failure is every algorithm failing.
    let alone: Vec<&dyn Algorithm<ScaleOp>> = vec![&SCRIBBLER];
    let mut y = prior.clone();
    let e = h
        .run_among::<ScaleOp>(&alone, &p, &inputs, &mut &mut y[..])
        .unwrap_err();
    assert!(matches!(e, Error::AllFailed { .. }), "{e:?}");
    // A short output is bad input, before anything runs.
    let mut short = [0.0; 3];
    let e = h
        .run_among::<ScaleOp>(&algos, &p, &inputs, &mut &mut short[..])
        .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
}

#[test]
fn a_cache_written_before_the_generic_keys_still_reads() {
    // Written by the `autodnn tune` of the commit before this change (file format 1).
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tuning_cache_v1.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"version\": 1"));
    let cache = TuningCache::read(&path).unwrap();
    assert_eq!(cache.len(), 2, "every entry kept");
    for (key, entry) in cache.entries() {
        assert_eq!(key.op, "conv_forward");
        assert_eq!((key.types.as_str(), key.math.as_str()), ("f32", "strict"));
        let p: ConvProblem = key.problem_as().expect("a convolution problem");
        // A key built now for the same problem and machine is the same key.
        let mut now = CacheKey::new(&p, key.threads, key.isa);
        now.cpu = key.cpu.clone();
        now.version = key.version.clone();
        assert_eq!(&now, key);
        assert_eq!(cache.get(&now), Some(entry));
        assert!(entry.best().is_some());
    }
    // Saved again, it is a file of the current version with the same entries.
    let copy = temp_file("v1");
    std::fs::copy(&path, &copy).unwrap();
    let mut c = TuningCache::load(&copy).unwrap();
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    c.save(&copy).unwrap();
    let saved = std::fs::read_to_string(&copy).unwrap();
    assert!(saved.contains(&format!("\"version\": {CACHE_FORMAT_VERSION}")));
    let back = TuningCache::read(&copy).unwrap();
    assert_eq!(back.entries(), cache.entries());
}
