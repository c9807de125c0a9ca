//! Feeds every committed input of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`
//! to its harness: the campaigns' findings stay fixed, on the stable toolchain.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn replay(target: &str) -> usize {
    let harness = autodnn_fuzz::HARNESSES
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .expect("a harness of that name");
    let mut n = 0;
    for kind in ["corpus", "regressions"] {
        for path in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&path).expect("a committed input reads");
            let run = std::panic::catch_unwind(|| harness(&data));
            assert!(run.is_ok(), "{} fails its harness", path.display());
            n += 1;
        }
    }
    n
}

/// Every target has a committed seed corpus, and every file of it passes.
fn replay_nonempty(target: &str) {
    let n = replay(target);
    assert!(n > 0, "no committed inputs for {target}");
}

#[test]
fn problem_string_corpus() {
    replay_nonempty("problem_string");
}

#[test]
fn descriptors_corpus() {
    replay_nonempty("descriptors");
}

#[test]
fn cache_file_corpus() {
    replay_nonempty("cache_file");
}

#[test]
fn cost_model_file_corpus() {
    replay_nonempty("cost_model_file");
}

#[test]
fn gemm_corpus() {
    replay_nonempty("gemm");
}

#[test]
fn npy_corpus() {
    replay_nonempty("npy");
}

#[test]
fn plans_corpus() {
    replay_nonempty("plans");
}

#[test]
fn capi_corpus() {
    replay_nonempty("capi");
}

#[test]
fn ops_corpus() {
    replay_nonempty("ops");
}

#[test]
fn plan_file_corpus() {
    replay_nonempty("plan_file");
}

/// The corpora of the Python harnesses (`fuzz/python/`), replayed by
/// `python/tests/test_fuzz_corpus.py`.
const PYTHON_HARNESSES: [&str; 1] = ["python_functional"];

/// Every corpus folder belongs to a harness (a renamed target leaves none behind).
#[test]
fn every_corpus_folder_has_a_harness() {
    for kind in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                autodnn_fuzz::HARNESSES.iter().any(|(h, _)| *h == name)
                    || PYTHON_HARNESSES.contains(&name.as_str()),
                "fuzz/{kind}/{name} has no harness"
            );
        }
    }
}
