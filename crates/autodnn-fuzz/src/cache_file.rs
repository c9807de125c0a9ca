//! Tuning-cache files: the strict parser, the lenient loader, the round trip, and selection
//! from a cache whose entries came from the file.

use std::path::PathBuf;
use std::sync::OnceLock;

use autodnn::conv::EpilogueArgs;
use autodnn::select::cache::{CacheKey, TuningCache};
use autodnn::select::{PerfStatus, Policy};
use autodnn::{reference, Error, Handle};

use crate::conv_checks::{check_problem, handle, is_small};
use crate::input::int_data;

/// A file that is not a tuning cache: a bad-input error naming `cache.file`.
fn assert_not_a_cache(e: &Error) {
    assert!(
        matches!(e, Error::BadParam { field, .. } if field == "cache.file"),
        "a cache error of another kind: {e:?}"
    );
}

/// Entries of one file whose problems are checked.
const MAX_CHECKED: usize = 8;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("autodnn-fuzz-cache-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch directory");
        d
    })
}

/// A handle selecting from the tuning cache alone (never timing).
fn cached_only() -> &'static Handle {
    static H: OnceLock<Handle> = OnceLock::new();
    H.get_or_init(|| {
        let h = Handle::with_threads(1).expect("a handle starts");
        h.set_policy(Policy::CachedOnly);
        h
    })
}

/// Reads `data` as a tuning-cache file, strictly and leniently.
pub fn cache_file(data: &[u8]) {
    let strict = TuningCache::parse(data);
    if let Err(e) = &strict {
        assert_not_a_cache(e);
    }

    // The loaders, on the same bytes in a file: the writer's never fails on a readable file
    // (a bad one reads as empty, invalid entries are dropped) and leaves the file as it is;
    // the read-only one refuses a file that is not a cache, and agrees with the writer's
    // otherwise.
    let path = scratch().join(format!("tuning-{:?}.json", std::thread::current().id()));
    std::fs::write(&path, data).expect("the scratch file is written");
    let loaded = TuningCache::load(&path).expect("loading a readable file succeeds");
    let read_only = TuningCache::load_read_only(&path);
    assert_eq!(
        std::fs::read(&path).ok().as_deref(),
        Some(data),
        "loading leaves the file as it is"
    );
    let _ = std::fs::remove_file(&path);
    match &read_only {
        Ok(c) => assert_eq!(
            c.entries(),
            loaded.entries(),
            "both loaders keep the valid entries"
        ),
        Err(e) => {
            assert_not_a_cache(e);
            assert!(
                loaded.is_empty() && !loaded.warnings().is_empty(),
                "a bad file reads as empty, with a warning"
            );
        }
    }
    if let Ok(c) = &strict {
        assert_eq!(
            loaded.entries(),
            c.entries(),
            "load and parse agree on a valid file"
        );
        assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    }

    let Ok(cache) = strict else { return };
    // What is written reads back the same.
    let text = cache.to_json().expect("a cache encodes");
    let again = TuningCache::parse(text.as_bytes())
        .unwrap_or_else(|e| panic!("a written cache does not read back: {e}\n{text}"));
    assert_eq!(again.entries(), cache.entries(), "round trip");

    for (key, entry) in cache.entries().into_iter().take(MAX_CHECKED) {
        assert!(key.is_valid());
        if key.op != "conv_forward" {
            // An operation this build does not know: kept as it is, never read.
            continue;
        }
        let p: autodnn::ConvProblem = key
            .problem_as()
            .expect("a valid forward key holds a convolution problem");
        check_problem(&p, handle(0), 1);
        select_from(&p, entry);
    }
}

/// Selection with `entry` as this machine's measurement of `p`: the chain holds each
/// eligible algorithm once, led by the cached choice when the entry covers them all, and
/// running it gives the convolution.
fn select_from(p: &autodnn::ConvProblem, entry: &autodnn::select::CacheEntry) {
    if !is_small(p) || p.x().dtype() != autodnn::DataType::F32 {
        return;
    }
    let h = cached_only();
    let mut cache = TuningCache::new();
    cache.insert(CacheKey::new(p, h.threads(), h.isa()), entry.clone());
    h.set_tuning_cache(cache);
    let x = int_data(p.x().span(), 3);
    let w = int_data(p.w().elements(), 4);
    let bias = int_data(p.w().k(), 5);
    let z = int_data(p.y().span(), 6);
    let mut args = EpilogueArgs::default();
    if p.epilogue().bias {
        args = args.with_bias(&bias);
    }
    if p.epilogue().residual {
        args = args.with_residual(&z);
    }
    let plan = h
        .plan_conv(p, &x, &w, &args)
        .expect("a plan from the cache");
    let ranked = h.get_conv_algorithms(p).expect("ranked");
    let mut eligible: Vec<&str> = ranked
        .iter()
        .filter(|r| r.eligible)
        .map(|r| r.algo)
        .collect();
    let mut chain = plan.chain().to_vec();
    eligible.sort_unstable();
    chain.sort_unstable();
    assert_eq!(
        chain, eligible,
        "the chain holds each eligible algorithm once"
    );
    let covers = eligible.iter().all(|a| {
        entry
            .records
            .iter()
            .any(|r| r.algo == *a && r.status != PerfStatus::Failed)
    });
    assert_eq!(
        plan.cache_hit, covers,
        "a hit exactly when the entry covers every candidate"
    );
    if covers {
        let first = entry
            .records
            .iter()
            .find(|r| r.status != PerfStatus::Failed && eligible.contains(&r.algo.as_str()))
            .map(|r| r.algo.as_str());
        assert_eq!(Some(plan.algo()), first, "the cached choice leads");
    }
    let mut y = vec![0.0f32; p.y().span()];
    let report = h
        .conv_forward_plan(
            &plan,
            &x,
            autodnn::conv::Weights::Plain(&w),
            &mut y,
            &args,
            None,
        )
        .unwrap_or_else(|e| panic!("the cached plan does not run: {e}"));
    if p.epilogue().is_none() {
        let r = reference::conv_forward(p, &x, &w).expect("the reference runs");
        let a = autodnn::conv::find(report.algo).expect("registered");
        let max = r.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        // Integer data in [-4, 4] (`int_data`).
        let depth = p.c_per_group() * p.w().r() * p.w().s();
        let tol = a.accuracy().tolerance(depth, 4.0, 4.0, max);
        let [n, k, oh, ow] = p.y().dims();
        for b in 0..n {
            for c in 0..k {
                for i in 0..oh {
                    for j in 0..ow {
                        let o = p.y().offset(b, c, i, j);
                        let d = (f64::from(y[o]) - r[o]).abs();
                        assert!(d <= tol, "{}: y[{o}] = {} vs {}", report.algo, y[o], r[o]);
                    }
                }
            }
        }
    }
}
