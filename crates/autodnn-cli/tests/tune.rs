//! End-to-end tests of `autodnn tune`, `autodnn cache` and `autodnn calibrate`: the JSON Lines
//! schema, policies, the cache file shared by concurrent processes, bad cache files, the
//! workspace limit, fault injection, and the environment knobs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use common::{json_lines, keys, sorted, TempDir, BIN};

impl TempDir {
    /// The tuning cache inside the directory (the cost model lives beside it).
    fn cache(&self) -> PathBuf {
        self.path("tuning.json")
    }
}

/// The command with a clean environment: the default cache inside `dir`, no knobs set.
fn cmd(dir: &TempDir, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("AUTODNN_CACHE", dir.cache())
        .env_remove("AUTODNN_ISA")
        .env_remove("AUTODNN_ALGO")
        .env_remove("AUTODNN_FAIL_ALLOC")
        .env_remove("AUTODNN_LOG");
    c
}

fn run(c: &mut Command) -> Output {
    let o = c.output().expect("run autodnn");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "panicked: {err}");
    o
}

fn ok(dir: &TempDir, args: &[&str]) -> (String, String) {
    let o = run(&mut cmd(dir, args));
    let (out, err) = (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    );
    assert_eq!(o.status.code(), Some(0), "autodnn {args:?}: {err}");
    (out, err)
}

fn bad(dir: &TempDir, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = cmd(dir, args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run(&mut c);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(2), "autodnn {args:?}: {err}");
    assert!(o.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

const A: &str = r#"mb1ic4ih8oc8kh3ph1n"a*2""#;
const B: &str = r#"mb2ic8ih6oc4kh1n"b""#;
const C: &str = r#"mb1g4ic4ih9oc4kh3ph1sh2n"c*3""#;

const LAYER_KEYS: [&str; 8] = [
    "problem",
    "dir",
    "count",
    "algo",
    "source",
    "ms",
    "workspace_bytes",
    "fallbacks",
];
const TOTAL_KEYS: [&str; 8] = [
    "total",
    "dir",
    "total_ms",
    "tuning_ms",
    "cache_hits",
    "layers",
    "instances",
    "fallbacks",
];

fn tune_json(dir: &TempDir, extra: &[&str]) -> (Vec<Value>, Value) {
    let mut args = vec!["tune", A, B, C, "--json", "--reps", "2", "--threads", "1"];
    args.extend_from_slice(extra);
    let (out, _) = ok(dir, &args);
    let mut v = json_lines(&out);
    let total = v.pop().unwrap();
    (v, total)
}

fn check_schema(layers: &[Value], total: &Value) {
    for l in layers {
        assert_eq!(keys(l), sorted(&LAYER_KEYS), "{l}");
        assert_eq!(l["dir"], "fwd");
        assert!(l["ms"].as_f64().unwrap() >= 0.0);
        assert!(l["workspace_bytes"].is_u64());
        let algo = l["algo"].as_str().unwrap();
        assert!(autodnn::conv::names().contains(&algo), "{algo}");
        let source = l["source"].as_str().unwrap();
        assert!(
            ["cache", "heuristic", "benchmark", "exhaustive", "forced"].contains(&source),
            "{source}"
        );
    }
    assert_eq!(keys(total), sorted(&TOTAL_KEYS), "{total}");
    assert_eq!(total["total"], true);
    assert_eq!(total["dir"], "fwd");
    let sum: f64 = layers
        .iter()
        .map(|l| l["ms"].as_f64().unwrap() * l["count"].as_f64().unwrap())
        .sum();
    let t = total["total_ms"].as_f64().unwrap();
    assert!((sum - t).abs() <= 1e-9 * t.max(1.0), "{sum} vs {t}");
    assert_eq!(total["layers"], layers.len());
    let instances: u64 = layers.iter().map(|l| l["count"].as_u64().unwrap()).sum();
    assert_eq!(total["instances"], instances);
    let fallbacks: u64 = layers
        .iter()
        .map(|l| l["fallbacks"].as_u64().unwrap())
        .sum();
    assert_eq!(total["fallbacks"], fallbacks);
}

#[test]
fn tune_json_schema_then_a_second_run_hits_the_cache() {
    let dir = TempDir::new("schema");
    let (layers, total) = tune_json(&dir, &[]);
    check_schema(&layers, &total);
    assert_eq!(layers.len(), 3);
    assert_eq!(
        layers
            .iter()
            .map(|l| l["count"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [2, 1, 3]
    );
    assert!(layers[0]["problem"]
        .as_str()
        .unwrap()
        .starts_with("mb1g1ic4ih8iw8oc8"));
    assert!(
        layers[1]["problem"].as_str().unwrap().starts_with("mb2"),
        "own batch kept"
    );
    assert!(layers.iter().all(|l| l["source"] == "benchmark"));
    assert_eq!(total["cache_hits"], 0);
    assert!(dir.cache().exists(), "the cache is written");
    // Second run: every layer from the cache, nothing timed.
    let (layers, total) = tune_json(&dir, &[]);
    check_schema(&layers, &total);
    assert!(layers.iter().all(|l| l["source"] == "cache"));
    assert_eq!(total["cache_hits"], 3);
    // An explicit --cache file elsewhere starts empty.
    let other = dir.path("other.json");
    let (layers, _) = tune_json(&dir, &["--cache", other.to_str().unwrap()]);
    assert!(layers.iter().all(|l| l["source"] == "benchmark"));
    assert!(other.exists());
}

/// `tune --prepared`: selection for calls with prepared weights. Each layer reports its
/// preparation's ms and bytes beside a prepared call's ms; the rankings go to the cache under
/// keys of their own (a plain tune after it still times, then hits its own entries); with a
/// backward direction it is refused.
#[test]
fn tune_prepared_selects_for_prepared_weights() {
    let dir = TempDir::new("prepared");
    let (layers, total) = tune_json(&dir, &["--prepared"]);
    let mut keys_prepared = LAYER_KEYS.to_vec();
    keys_prepared.extend(["prepare_ms", "prepared_bytes"]);
    for l in &layers {
        assert_eq!(keys(l), sorted(&keys_prepared), "{l}");
        assert!(l["prepare_ms"].as_f64().unwrap() >= 0.0, "{l}");
        assert!(l["prepared_bytes"].as_u64().unwrap() > 0, "{l}");
        assert_eq!(l["source"], "benchmark", "{l}");
    }
    let strip = |v: &[Value]| -> Vec<Value> {
        v.iter()
            .map(|l| {
                let mut l = l.clone();
                let o = l.as_object_mut().unwrap();
                o.remove("prepare_ms");
                o.remove("prepared_bytes");
                l
            })
            .collect()
    };
    check_schema(&strip(&layers), &total);
    let cache: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.cache()).unwrap()).unwrap();
    let text = cache.to_string();
    assert!(text.contains(r#""prepared":true"#), "{text}");
    // The plain intent has no entries yet; then both are cached.
    let (plain, _) = tune_json(&dir, &[]);
    assert!(
        plain.iter().all(|l| l["source"] == "benchmark"),
        "{plain:?}"
    );
    let (again, t) = tune_json(&dir, &["--prepared"]);
    assert!(again.iter().all(|l| l["source"] == "cache"), "{again:?}");
    assert_eq!(t["cache_hits"], 3);
    let err = bad(&dir, &["tune", A, "--prepared", "--dir", "bwd_d"], &[]);
    assert!(err.contains("--prepared"), "{err}");
}

/// `tune --budget-ms`: a budget of 0 times nothing (every layer the heuristic's pick), an
/// ample one times every layer with something to choose between; the total line says how
/// many were timed; a bad budget or one with a backward direction is refused.
#[test]
fn tune_budget_times_only_what_fits() {
    let dir = TempDir::new("budget");
    let (layers, total) = tune_json(&dir, &["--budget-ms", "0"]);
    assert!(
        layers.iter().all(|l| l["source"] == "heuristic"),
        "{layers:?}"
    );
    assert_eq!(total["timed_layers"], 0);
    assert_eq!(total["budget_ms"], 0.0);
    // Selection's own time is reported (not bounded here: under valgrind the heuristic
    // alone took 73 ms); that nothing was timed is what the sources and the count say.
    assert!(
        total["tuning_ms"].as_f64().is_some_and(|t| t >= 0.0),
        "{total}"
    );
    // Nothing measured: nothing cached.
    let (layers, total) = tune_json(&dir, &["--budget-ms", "1e9"]);
    let timed = layers.iter().filter(|l| l["source"] == "benchmark").count();
    assert!(timed >= 2, "{layers:?}");
    assert_eq!(total["timed_layers"], timed, "{total}");
    assert!(layers
        .iter()
        .all(|l| l["source"] == "benchmark" || l["source"] == "heuristic"));
    // Without a budget the layers measured then come from the cache.
    let (layers, _) = tune_json(&dir, &[]);
    assert_eq!(
        layers.iter().filter(|l| l["source"] == "cache").count(),
        timed,
        "{layers:?}"
    );
    for bad_budget in ["--budget-ms=-1", "--budget-ms=nan", "--budget-ms=inf"] {
        let err = bad(&dir, &["tune", A, bad_budget], &[]);
        assert!(err.contains("--budget-ms"), "{err}");
    }
    let err = bad(
        &dir,
        &["tune", A, "--budget-ms", "5", "--dir", "bwd_w"],
        &[],
    );
    assert!(err.contains("--budget-ms"), "{err}");
}

/// `tune --prepared --save-plans DIR` writes one plan per distinct layer; `tune --load-plans
/// DIR` runs every layer from its plan (source "plan", nothing timed or selected) with the
/// reference's output and reports each first call; a missing plan, a corrupt one and a
/// folder that does not exist are refused.
#[test]
fn tune_saves_and_loads_plans() {
    let dir = TempDir::new("plans");
    let plans = dir.path("plans");
    std::fs::create_dir(&plans).unwrap();
    let pdir = plans.to_str().unwrap();
    let (layers, _) = tune_json(&dir, &["--prepared", "--save-plans", pdir]);
    let files: Vec<_> = std::fs::read_dir(&plans).unwrap().flatten().collect();
    assert_eq!(files.len(), layers.len());
    let (loaded, total) = tune_json(&dir, &["--load-plans", pdir, "--check"]);
    assert_eq!(loaded.len(), layers.len());
    for (l, m) in loaded.iter().zip(&layers) {
        assert_eq!(l["source"], "plan", "{l}");
        assert_eq!(l["algo"], m["algo"], "{l} {m}");
        assert!(l["first_ms"].as_f64().unwrap() > 0.0, "{l}");
        assert!(
            l.get("max_rel_err").is_some() && l.get("error").is_none(),
            "{l}"
        );
    }
    assert_eq!(total["tuning_ms"], 0.0);
    assert!(total["first_calls_ms"].as_f64().unwrap() > 0.0, "{total}");
    // A corrupt plan is refused naming it.
    let victim = std::fs::read_dir(&plans)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let mut b = std::fs::read(&victim).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    std::fs::write(&victim, &b).unwrap();
    let err = bad(&dir, &["tune", A, B, C, "--load-plans", pdir], &[]);
    assert!(err.contains("plan"), "{err}");
    std::fs::remove_file(&victim).unwrap();
    let err = bad(&dir, &["tune", A, B, C, "--load-plans", pdir], &[]);
    assert!(err.contains("--load-plans"), "{err}");
    let err = bad(
        &dir,
        &[
            "tune",
            A,
            "--load-plans",
            dir.path("none").to_str().unwrap(),
        ],
        &[],
    );
    assert!(err.contains("not a folder"), "{err}");
    let err = bad(&dir, &["tune", A, "--save-plans", pdir], &[]);
    assert!(err.contains("--prepared"), "{err}");
}

#[test]
fn tune_policies_and_repeated_layers() {
    let dir = TempDir::new("policies");
    let (layers, total) = tune_json(&dir, &["--policy", "heuristic"]);
    check_schema(&layers, &total);
    assert!(layers.iter().all(|l| l["source"] == "heuristic"));
    assert!(
        !dir.cache().exists(),
        "the heuristic measures and stores nothing"
    );
    let (layers, _) = tune_json(&dir, &["--policy", "cached_only"]);
    assert!(layers.iter().all(|l| l["source"] == "heuristic"));
    let (layers, total) = tune_json(&dir, &["--policy", "exhaustive"]);
    check_schema(&layers, &total);
    assert!(layers.iter().all(|l| l["source"] == "exhaustive"));
    let (layers, total) = tune_json(&dir, &["--policy", "cached-only", "--deterministic"]);
    assert!(layers.iter().all(|l| l["source"] == "cache"));
    assert_eq!(total["cache_hits"], 3);
    // The same problem twice is one layer with the counts summed.
    let (out, _) = ok(
        &dir,
        &[
            "tune",
            A,
            A,
            "--json",
            "--reps",
            "1",
            "--policy",
            "heuristic",
        ],
    );
    let v = json_lines(&out);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["count"], 4);
    assert_eq!(v[1]["instances"], 4);
    assert_eq!(v[1]["layers"], 1);
}

#[test]
fn tune_a_model_at_batch_1_by_default() {
    let dir = TempDir::new("model");
    let (out, _) = ok(
        &dir,
        &[
            "tune",
            "--model",
            "mobilenet_v1",
            "--json",
            "--reps",
            "1",
            "--policy",
            "heuristic",
        ],
    );
    let mut v = json_lines(&out);
    let total = v.pop().unwrap();
    check_schema(&v, &total);
    assert!(v
        .iter()
        .all(|l| l["problem"].as_str().unwrap().starts_with("mb1")));
    // The text form: a header, one row per layer, a total line.
    let (out, _) = ok(&dir, &["tune", A, "--reps", "1", "--policy", "heuristic"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().last().unwrap().starts_with("total:"), "{out}");
}

#[test]
fn tune_with_a_zero_workspace_limit() {
    let dir = TempDir::new("limit0");
    for policy in ["benchmark", "exhaustive", "heuristic"] {
        let (layers, total) = tune_json(&dir, &["--workspace-limit", "0", "--policy", policy]);
        check_schema(&layers, &total);
        assert!(
            layers.iter().all(|l| l["workspace_bytes"] == 0),
            "{layers:?}"
        );
        assert_eq!(total["fallbacks"], 0);
    }
}

#[test]
fn tune_under_fault_injection_of_the_first_choice() {
    let dir = TempDir::new("faults");
    let (layers, _) = tune_json(&dir, &["--policy", "heuristic"]);
    let first = layers[0]["algo"].as_str().unwrap().to_string();
    let mut c = cmd(
        &dir,
        &[
            "tune",
            A,
            "--json",
            "--reps",
            "1",
            "--policy",
            "heuristic",
            "--check",
            // The thread count of the first run: the heuristic's choice depends on it.
            "--threads",
            "1",
        ],
    );
    c.env("AUTODNN_FAIL_ALLOC", &first)
        .env("AUTODNN_LOG", "dispatch");
    let o = run(&mut c);
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    let v = json_lines(&out);
    assert_eq!(v.len(), 2, "{out}");
    assert!(v[0]["fallbacks"].as_u64().unwrap() >= 1, "{out}");
    assert!(err.contains(&format!("fallback: {first} failed")), "{err}");
    let p = autodnn::ProblemSpec::parse(A)
        .unwrap()
        .to_problem(autodnn::Layout::Nchw)
        .unwrap();
    let others = autodnn::conv::algorithms()
        .iter()
        .filter(|a| a.name() != first && a.check(&p).is_ok())
        .count();
    if others > 0 {
        // Another algorithm ran, and its output is right (--check).
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert_ne!(v[0]["algo"], first.as_str());
        assert!(v[0]["max_rel_err"].as_f64().unwrap() <= 1e-3);
    } else {
        // Nothing left to fall back to: the layer fails, reported, exit 1.
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            v[0]["error"].as_str().unwrap().contains("injected"),
            "{out}"
        );
        assert_eq!(v[0]["fallbacks"], 1);
        assert_eq!(v[1]["fallbacks"], 1);
        assert!(err.contains("1 of 1 layers failed"), "{err}");
    }
    // >BYTES: nothing needing more runs.
    let mut c = cmd(&dir, &["tune", A, B, C, "--json", "--reps", "1", "--check"]);
    c.env("AUTODNN_FAIL_ALLOC", ">0");
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0));
    let v = json_lines(&String::from_utf8(o.stdout).unwrap());
    assert!(v[..3].iter().all(|l| l["workspace_bytes"] == 0));
}

#[test]
fn tune_refuses_bad_input() {
    let dir = TempDir::new("bad");
    let e = bad(&dir, &["tune", A, "--policy", "fastest"], &[]);
    assert!(e.contains("policy") && e.contains("fastest"), "{e}");
    bad(&dir, &["tune", "--model", "nosuch"], &[]);
    bad(&dir, &["tune"], &[]);
    bad(&dir, &["tune", A, "--mb", "0"], &[]);
    bad(&dir, &["tune", A, "--threads", "0"], &[]);
    bad(&dir, &["tune", A, "--reps", "0"], &[]);
    let e = bad(&dir, &["tune", A], &[("AUTODNN_FAIL_ALLOC", ">lots")]);
    assert!(e.contains("AUTODNN_FAIL_ALLOC"), "{e}");
    let e = bad(&dir, &["tune", A], &[("AUTODNN_ALGO", "nosuch")]);
    assert!(e.contains("nosuch"), "{e}");
}

#[test]
fn forced_algorithm_and_dispatch_log() {
    let dir = TempDir::new("forced");
    let name = *autodnn::conv::names().last().unwrap();
    let mut c = cmd(&dir, &["tune", A, "--json", "--reps", "1"]);
    c.env("AUTODNN_ALGO", name).env("AUTODNN_LOG", "dispatch");
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0));
    let v = json_lines(&String::from_utf8(o.stdout).unwrap());
    assert_eq!(v[0]["source"], "forced");
    assert_eq!(v[0]["algo"], name);
    let err = String::from_utf8(o.stderr).unwrap();
    for needle in [
        "autodnn dispatch: problem mb1",
        "candidate",
        "chose",
        "forced",
    ] {
        assert!(err.contains(needle), "{needle} in {err}");
    }
    assert!(
        err.lines().all(|l| l.starts_with("autodnn dispatch:")),
        "{err}"
    );
}

#[test]
fn bad_cache_files_warn_and_are_rebuilt() {
    let dir = TempDir::new("badfile");
    tune_json(&dir, &[]);
    let good = std::fs::read_to_string(dir.cache()).unwrap();
    for (round, content) in [
        "garbage{".to_string(),
        good[..good.len() / 3].to_string(),
        {
            let now = format!(
                "\"version\": {}",
                autodnn::select::cache::CACHE_FORMAT_VERSION
            );
            assert!(good.contains(&now), "the written file names its version");
            good.replacen(&now, "\"version\": 999", 1)
        },
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(dir.cache(), &content).unwrap();
        let (layers, total) = {
            let (out, err) = ok(&dir, &["tune", A, B, C, "--json", "--reps", "1"]);
            assert!(
                err.contains("warning") && err.contains("set aside"),
                "{err}"
            );
            let mut v = json_lines(&out);
            let t = v.pop().unwrap();
            (v, t)
        };
        check_schema(&layers, &total);
        assert!(layers.iter().all(|l| l["source"] == "benchmark"));
        // Each bad file is kept: FILE.bak, then FILE.bak.1, ...
        let suffix = if round == 0 {
            String::new()
        } else {
            format!(".{round}")
        };
        let bak = PathBuf::from(format!("{}.bak{suffix}", dir.cache().display()));
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), content);
        // Rebuilt: valid again, with the three entries.
        let (out, err) = ok(&dir, &["cache", "show", "--json"]);
        assert!(err.is_empty(), "{err}");
        assert_eq!(out.lines().count(), 3);
    }
}

#[test]
fn concurrent_processes_share_one_cache_file() {
    let dir = TempDir::new("procs");
    let sets: [Vec<String>; 2] = [
        (5..11).map(|i| format!("mb1ic3ih{i}oc5kh3ph1")).collect(),
        (5..11).map(|i| format!("mb1ic5ih{i}oc3kh1")).collect(),
    ];
    for _round in 0..2 {
        let children: Vec<_> = sets
            .iter()
            .map(|set| {
                let mut args = vec!["tune", "--json", "--reps", "1", "--threads", "1"];
                args.extend(set.iter().map(String::as_str));
                cmd(&dir, &args)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{err}");
            assert!(!err.contains("warning"), "{err}");
        }
        let (out, _) = ok(&dir, &["cache", "show", "--json"]);
        assert_eq!(out.lines().count(), 12, "both processes' entries are kept");
    }
}

#[test]
fn cache_show_clear_merge() {
    let dir = TempDir::new("cachecmd");
    let other = dir.path("shipped.json");
    ok(&dir, &["tune", A, "--reps", "1", "--threads", "1"]);
    ok(
        &dir,
        &[
            "tune",
            "--threads",
            "1",
            B,
            C,
            "--reps",
            "1",
            "--cache",
            other.to_str().unwrap(),
        ],
    );
    let (out, _) = ok(&dir, &["cache", "show"]);
    assert!(
        out.starts_with(&format!("cache: {}", dir.cache().display())),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    let (out, _) = ok(&dir, &["cache", "merge", other.to_str().unwrap()]);
    assert!(out.contains("merged 2 of 2 entries"), "{out}");
    let (out, _) = ok(&dir, &["cache", "show", "--json"]);
    let v = json_lines(&out);
    assert_eq!(v.len(), 3);
    for e in &v {
        for k in [
            "op",
            "problem",
            "threads",
            "cpu",
            "isa",
            "version",
            "this_machine",
            "records",
        ] {
            assert!(e.get(k).is_some(), "{k} in {e}");
        }
        assert_eq!(e["this_machine"], true);
        assert_eq!(e["op"], "conv_forward");
        let r = &e["records"][0];
        for k in ["algo", "status", "ms", "workspace_bytes", "deterministic"] {
            assert!(r.get(k).is_some(), "{k} in {r}");
        }
    }
    // A merged file lets a run time nothing.
    let (layers, total) = tune_json(&dir, &[]);
    assert!(layers.iter().all(|l| l["source"] == "cache"));
    assert_eq!(total["cache_hits"], 3);
    // Merging a file that is not a cache is bad input and changes nothing.
    let junk = dir.path("junk.json");
    std::fs::write(&junk, "nope").unwrap();
    let e = bad(&dir, &["cache", "merge", junk.to_str().unwrap()], &[]);
    assert!(e.contains("junk.json"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&junk).unwrap(),
        "nope",
        "left where it is"
    );
    let (out, _) = ok(&dir, &["cache", "clear"]);
    assert!(out.contains("3 entries removed"), "{out}");
    let (out, _) = ok(&dir, &["cache", "show", "--json"]);
    assert!(out.is_empty());
}

#[test]
fn info_shows_the_cache_path_in_use() {
    let dir = TempDir::new("info");
    let (out, _) = ok(&dir, &["info", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cache_path"], dir.cache().to_str().unwrap());
    assert_eq!(
        v["cost_model_path"],
        dir.path("cost_model.json").to_str().unwrap()
    );
    assert_eq!(v["calibrated"], false);
}

/// `autodnn calibrate --quick`: every algorithm measured on the cheapest problems that run it
/// (the full set takes minutes, hours under valgrind; it differs only in its problem list and
/// timed runs).
fn calibrate(dir: &TempDir, out: &Path) -> Vec<Value> {
    let (text, _) = ok(
        dir,
        &[
            "calibrate",
            "--quick",
            "--json",
            "--threads",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    json_lines(&text)
}

#[test]
fn calibrate_fits_every_algorithm_and_reports_the_error() {
    let dir = TempDir::new("calibrate");
    let out = dir.path("cost_model.json");
    let v = calibrate(&dir, &out);
    let (total, algos) = v.split_last().unwrap();
    assert_eq!(total["total"], true);
    let quick = autodnn::calibrate::CalibrationSet::quick().unwrap();
    assert_eq!(total["problems"], quick.problems.len());
    assert!(quick.problems.len() < autodnn::calibrate::calibration_problems().len());
    let names: Vec<&str> = algos.iter().map(|a| a["algo"].as_str().unwrap()).collect();
    // Every algorithm of every operation has its fit (the forward's under its bare name).
    use autodnn::op::{
        Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvForward, Registered,
    };
    fn keys<O: Registered>() -> Vec<String> {
        O::algorithms()
            .iter()
            .map(|a| autodnn::select::heuristic::fit_key(O::NAME, "f32", Algorithm::<O>::name(*a)))
            .collect()
    }
    let mut want = keys::<ConvForward>();
    want.extend(keys::<ConvBackwardData>());
    want.extend(keys::<ConvBackwardFilter>());
    want.extend(keys::<ConvBackwardBias>());
    for w in &want {
        assert!(names.contains(&w.as_str()), "no fit for {w}: {names:?}");
    }
    assert_eq!(names.len(), want.len(), "{names:?}");
    for a in algos {
        assert!(a["samples"].as_u64().unwrap() > 0);
        let coef = a["coef"].as_array().unwrap();
        assert_eq!(coef.len(), autodnn::conv::COST_FEATURES);
        assert!(coef.iter().all(|c| c.as_f64().unwrap() >= 0.0));
        let med = a["median_rel_err"].as_f64().unwrap();
        let max = a["max_rel_err"].as_f64().unwrap();
        assert!(med >= 0.0 && med <= max, "{a}");
    }
    let model = autodnn::select::CostModel::load(&out).unwrap();
    assert_eq!(model.fits.len(), 1);
    assert_eq!(model.fits[0].threads, 2);
    // The default location is beside the cache, and `info` sees it.
    let (_, _) = ok(&dir, &["calibrate", "--quick", "--threads", "2"]);
    let (info, _) = ok(&dir, &["info", "--json"]);
    let v: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["calibrated"], true);
}

/// `--math` and `--bf16-units` on `tune`: entries tuned under allow_bf16 are keyed apart from
/// the strict ones (a strict run after an allow_bf16 one hits nothing), the cache file names
/// both modes, and a bad value is refused naming its option.
#[test]
fn tune_keys_the_cache_by_the_math_mode() {
    let dir = TempDir::new("math");
    let allow = ["--math", "allow_bf16", "--bf16-units", "always"];
    let (layers, total) = tune_json(&dir, &allow);
    check_schema(&layers, &total);
    assert_eq!(total["cache_hits"], 0);
    let (_, again) = tune_json(&dir, &allow);
    assert_eq!(again["cache_hits"], 3, "{again}");
    let (_, strict) = tune_json(&dir, &[]);
    assert_eq!(
        strict["cache_hits"], 0,
        "the strict run reused allow_bf16 entries: {strict}"
    );
    let text = std::fs::read_to_string(dir.cache()).unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    let mut maths: Vec<String> = file["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["key"]["math"].as_str().unwrap().to_string())
        .collect();
    maths.sort();
    maths.dedup();
    assert_eq!(maths, ["allow_bf16+always", "strict"], "{text}");
    for (opt, value) in [("--math", "fast"), ("--bf16-units", "sometimes")] {
        let err = bad(&dir, &["tune", A, opt, value], &[]);
        assert!(err.contains(opt), "{err}");
    }
}
