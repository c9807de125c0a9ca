//! The C programs of tests/c, compiled with the C compiler (`$CC`, else `cc`) against
//! include/autodnn.h and the library this `cargo test` built, then run: a ResNet-50 layer
//! checked against naive loops (linked with the static library) and the statuses of bad
//! input (linked with the shared one). A missing C compiler fails these tests.
//!
//! `cargo test` builds the library's static and shared forms with its rlib (they are one
//! compilation) into the folder of this test's executable, so the C programs link against
//! the code under test, whichever profile and target folder are in use.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding libautodnn.a and libautodnn.so: beside this executable (`deps`), or
/// one up when the library was built on its own.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe
        .parent()
        .expect("the test executable's folder")
        .to_path_buf();
    let candidates = [deps.clone(), deps.parent().unwrap_or(&deps).to_path_buf()];
    for dir in &candidates {
        if dir.join("libautodnn.a").is_file() && dir.join("libautodnn.so").is_file() {
            return dir.clone();
        }
    }
    panic!(
        "libautodnn.a and libautodnn.so not found in {candidates:?}: \
         build them with `cargo build -p autodnn-capi`"
    );
}

/// The C compiler and its leading arguments (`CC` may hold flags, as in `CC="gcc -m64"`).
fn cc() -> Vec<String> {
    let cc = std::env::var("CC").unwrap_or_default();
    let words: Vec<String> = cc.split_whitespace().map(String::from).collect();
    if words.is_empty() {
        vec!["cc".into()]
    } else {
        words
    }
}

enum Link {
    Static,
    Shared,
}

/// Compiles tests/c/`name`.c into the test's scratch folder.
fn build(name: &str, link: Link) -> PathBuf {
    let lib = library_dir();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_api");
    std::fs::create_dir_all(&out_dir).expect("creating the scratch folder");
    let exe = out_dir.join(match link {
        Link::Static => format!("{name}-static"),
        Link::Shared => format!("{name}-shared"),
    });
    let cc = cc();
    let mut cmd = Command::new(&cc[0]);
    cmd.args(&cc[1..])
        .args([
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
        ])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(
            crate_dir()
                .join("tests")
                .join("c")
                .join(format!("{name}.c")),
        )
        .arg("-o")
        .arg(&exe);
    match link {
        Link::Static => {
            cmd.arg(lib.join("libautodnn.a"))
                .args(["-lpthread", "-ldl", "-lm"]);
        }
        Link::Shared => {
            cmd.arg("-L")
                .arg(&lib)
                .arg("-lautodnn")
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-lm");
        }
    }
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run the C compiler {:?} ({e}): a C compiler is required (set CC)",
            cc.join(" ")
        )
    });
    assert!(
        output.status.success(),
        "compiling {name}.c failed: {:?}\n{}{}",
        cmd,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

fn run(exe: &Path) -> String {
    // cargo's library path may hold another libautodnn.so (one built on its own, in the
    // profile's folder): the program must load the one it was linked with (its rpath).
    let output = Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}{}",
        exe.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    print!("{stdout}");
    stdout
}

#[test]
fn resnet_layer_matches_naive_loops() {
    let out = run(&build("resnet_layer", Link::Static));
    assert!(out.contains("checks passed"), "{out}");
}

#[test]
fn bad_input_gets_statuses() {
    let out = run(&build("bad_input", Link::Shared));
    assert!(out.contains("statuses checked"), "{out}");
}
