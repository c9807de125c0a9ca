//! No command moves, rewrites or creates anything beside a user's cache file unless it writes
//! the cache: read-only commands (`cache show`, `info`, `conv`, `tune` with a policy that
//! does not measure) refuse a file that is not a tuning cache with exit status 2 and leave it
//! byte-identical; writers (`tune` with a measuring policy, `cache clear`, `cache merge`) set
//! it aside as `FILE.bak` and say so; a cache path whose folder does not exist is an error
//! for every command (except the per-user default's folder, autodnn's own).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TempDir, BIN};

const A: &str = "mb1ic4ih8oc8kh3ph1";
const EMPTY_CACHE: &str = r#"{"format": "autodnn-tuning-cache", "version": 1, "entries": []}"#;

/// Every file under `dir` (recursively) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                out.insert(p, b"<dir>".to_vec());
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(p, bytes);
            }
        }
    }
    out
}

fn names(s: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    s.keys().map(|p| p.display().to_string()).collect()
}

/// Fails naming the files made, removed or changed between two snapshots.
fn assert_same(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
    what: &str,
) {
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        changed.is_empty(),
        "{what} made, removed or changed {changed:?}"
    );
}

/// The command with `AUTODNN_CACHE` at `cache`, the per-user default inside `home`, no knobs.
fn cmd(home: &Path, cache: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("xdg"))
        .env_remove("AUTODNN_ISA")
        .env_remove("AUTODNN_ALGO")
        .env_remove("AUTODNN_FAIL_ALLOC")
        .env_remove("AUTODNN_LOG");
    match cache {
        Some(p) => c.env("AUTODNN_CACHE", p),
        None => c.env_remove("AUTODNN_CACHE"),
    };
    c
}

fn run(mut c: Command) -> (Option<i32>, String, String) {
    let o: Output = c.output().expect("run autodnn");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "panicked: {err}");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        err,
    )
}

/// Runs a command that must fail with status 2, one line on stderr naming `name`, and
/// nothing on stdout.
fn refused(c: Command, name: &Path, what: &str) {
    let (code, out, err) = run(c);
    assert_eq!(code, Some(2), "{what}: {err}");
    assert!(out.is_empty(), "{what}: {out}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.contains(&name.display().to_string()), "{what}: {err}");
}

fn succeeds(c: Command, what: &str) -> (String, String) {
    let (code, out, err) = run(c);
    assert_eq!(code, Some(0), "{what}: {err}");
    (out, err)
}

/// Files that are not a tuning cache this build reads.
fn bad_contents() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", b"garbage{".to_vec()),
        ("empty", Vec::new()),
        (
            "truncated",
            br#"{"format": "autodnn-tuning-cache", "version": 1, "entries": [{"key"#.to_vec(),
        ),
        (
            "other version",
            br#"{"format": "autodnn-tuning-cache", "version": 999, "entries": []}"#.to_vec(),
        ),
        (
            "other format",
            br#"{"name": "my settings", "version": 1}"#.to_vec(),
        ),
        ("binary", vec![0x89, b'P', b'N', b'G', 0, 0xff, 0xfe]),
    ]
}

/// The read-only commands, with the cache given by `--cache` where the command takes it.
fn read_only_commands(home: &Path, file: &Path) -> Vec<(&'static str, Command, bool)> {
    let f = file.to_str().unwrap();
    // (name, command, whether it reads the cache at all)
    vec![
        (
            "cache show --cache",
            cmd(home, None, &["cache", "show", "--cache", f]),
            true,
        ),
        (
            "cache show (AUTODNN_CACHE)",
            cmd(home, Some(file), &["cache", "show", "--json"]),
            true,
        ),
        (
            "tune cached_only",
            cmd(
                home,
                None,
                &[
                    "tune",
                    A,
                    "--policy",
                    "cached_only",
                    "--cache",
                    f,
                    "--reps",
                    "1",
                ],
            ),
            true,
        ),
        (
            "tune heuristic",
            cmd(
                home,
                Some(file),
                &["tune", A, "--policy", "heuristic", "--reps", "1"],
            ),
            true,
        ),
        ("info", cmd(home, Some(file), &["info", "--json"]), false),
        (
            "conv",
            cmd(
                home,
                Some(file),
                &["conv", A, "--algo", "direct", "--reps", "1", "--check"],
            ),
            false,
        ),
    ]
}

#[test]
fn read_only_commands_refuse_a_bad_cache_and_leave_it_byte_identical() {
    for (tag, content) in bad_contents() {
        let dir = TempDir::new("readonly");
        let file = dir.path("tuning.json");
        std::fs::write(&file, &content).unwrap();
        let before = snapshot(&dir.0);
        for (what, c, reads) in read_only_commands(&dir.0, &file) {
            if reads {
                refused(c, &file, &format!("{tag}: {what}"));
            } else {
                succeeds(c, &format!("{tag}: {what}"));
            }
            assert_same(&before, &snapshot(&dir.0), &format!("{tag}: {what}"));
        }
    }
}

#[test]
fn read_only_commands_on_a_good_or_missing_cache_create_nothing() {
    // A good cache, written by a measuring run elsewhere and copied in (no lock file beside).
    let src = TempDir::new("goodsrc");
    let good = src.path("tuning.json");
    succeeds(
        cmd(
            &src.0,
            Some(&good),
            &["tune", A, "--reps", "1", "--threads", "1"],
        ),
        "tune",
    );
    let dir = TempDir::new("good");
    let file = dir.path("tuning.json");
    std::fs::copy(&good, &file).unwrap();
    let before = snapshot(&dir.0);
    for (what, c, _) in read_only_commands(&dir.0, &file) {
        let (out, _) = succeeds(c, what);
        if what == "cache show --cache" {
            assert!(out.contains("(1 entries)"), "{out}");
        }
        assert_same(&before, &snapshot(&dir.0), what);
    }
    // A missing file in an existing folder is an empty cache, and stays missing.
    let missing = dir.path("none.json");
    for (what, c, _) in read_only_commands(&dir.0, &missing) {
        succeeds(c, what);
        assert_same(
            &before,
            &snapshot(&dir.0),
            &format!("{what} on a missing file"),
        );
    }
}

#[test]
fn writers_set_a_bad_cache_aside_and_say_so() {
    for (tag, content) in bad_contents() {
        let dir = TempDir::new("writers");
        let file = dir.path("tuning.json");
        let other = dir.path("other.json");
        std::fs::write(&other, EMPTY_CACHE).unwrap();
        let f = file.to_str().unwrap();
        let writers = [
            (
                "tune",
                cmd(&dir.0, None, &["tune", A, "--cache", f, "--reps", "1"]),
                1,
            ),
            (
                "cache clear",
                cmd(&dir.0, None, &["cache", "clear", "--cache", f]),
                0,
            ),
            (
                "cache merge",
                cmd(
                    &dir.0,
                    None,
                    &["cache", "merge", "--cache", f, other.to_str().unwrap()],
                ),
                0,
            ),
        ];
        for (i, (what, c, entries)) in writers.into_iter().enumerate() {
            std::fs::write(&file, &content).unwrap();
            let (_, err) = succeeds(c, &format!("{tag}: {what}"));
            let bak = if i == 0 {
                dir.path("tuning.json.bak")
            } else {
                dir.path(&format!("tuning.json.bak.{i}"))
            };
            assert!(
                err.contains(&format!("set aside as {}", bak.display())),
                "{tag}: {what}: {err}"
            );
            assert_eq!(std::fs::read(&bak).unwrap(), content, "{tag}: {what}");
            // The cache is valid again.
            let (out, err) = succeeds(
                cmd(&dir.0, None, &["cache", "show", "--json", "--cache", f]),
                "show",
            );
            assert!(err.is_empty(), "{tag}: {what}: {err}");
            assert_eq!(out.lines().count(), entries, "{tag}: {what}: {out}");
        }
        // Earlier backups are kept, and no temporary file is left.
        let left: Vec<String> = names(&snapshot(&dir.0));
        assert_eq!(left.len(), 6, "{tag}: {left:?}");
        assert!(!left.iter().any(|n| n.contains(".tmp")), "{left:?}");
    }
}

#[test]
fn a_missing_folder_is_an_error_for_every_command() {
    let dir = TempDir::new("nofolder");
    every_command_refuses(&dir, &dir.path("nosuch").join("tuning.json"));
}

#[test]
fn a_cache_path_that_is_a_folder_is_an_error_for_every_command() {
    let dir = TempDir::new("isfolder");
    std::fs::create_dir(dir.path("afolder")).unwrap();
    every_command_refuses(&dir, &dir.path("afolder"));
}

/// Every command that opens the cache refuses `file` (exit 2, naming it) and changes nothing
/// in `dir`.
fn every_command_refuses(dir: &TempDir, file: &Path) {
    let file = file.to_path_buf();
    let other = dir.path("other.json");
    std::fs::write(&other, EMPTY_CACHE).unwrap();
    let f = file.to_str().unwrap();
    let o = other.to_str().unwrap();
    let before = snapshot(&dir.0);
    let commands: Vec<(&str, Command)> = vec![
        (
            "cache show",
            cmd(&dir.0, None, &["cache", "show", "--cache", f]),
        ),
        (
            "cache clear",
            cmd(&dir.0, None, &["cache", "clear", "--cache", f]),
        ),
        (
            "cache merge",
            cmd(&dir.0, None, &["cache", "merge", "--cache", f, o]),
        ),
        (
            "tune benchmark",
            cmd(&dir.0, None, &["tune", A, "--cache", f, "--reps", "1"]),
        ),
        (
            "tune exhaustive",
            cmd(
                &dir.0,
                Some(&file),
                &["tune", A, "--policy", "exhaustive", "--reps", "1"],
            ),
        ),
        (
            "tune cached_only",
            cmd(
                &dir.0,
                None,
                &["tune", A, "--policy", "cached_only", "--cache", f],
            ),
        ),
        (
            "tune heuristic",
            cmd(&dir.0, Some(&file), &["tune", A, "--policy", "heuristic"]),
        ),
    ];
    for (what, c) in commands {
        refused(c, &file, what);
        assert_same(&before, &snapshot(&dir.0), what);
    }
}

#[test]
fn the_per_user_default_folder_is_made_by_the_first_write_only() {
    let dir = TempDir::new("peruser");
    let default = dir.path("xdg").join("autodnn").join("tuning.json");
    let before = snapshot(&dir.0);
    // Readers see an empty cache and make nothing.
    let (out, _) = succeeds(cmd(&dir.0, None, &["cache", "show"]), "show");
    assert!(
        out.contains(&format!("cache: {} (0 entries)", default.display())),
        "{out}"
    );
    succeeds(
        cmd(&dir.0, None, &["tune", A, "--policy", "cached_only"]),
        "cached_only",
    );
    assert_same(
        &before,
        &snapshot(&dir.0),
        "readers of the per-user default",
    );
    // A measuring run makes the folder and the file.
    succeeds(
        cmd(&dir.0, None, &["tune", A, "--reps", "1", "--threads", "1"]),
        "tune",
    );
    let (out, _) = succeeds(cmd(&dir.0, None, &["cache", "show", "--json"]), "show");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(default.exists());
}
