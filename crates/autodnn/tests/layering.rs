//! The library's modules form layers: each imports only modules of layers below its own, so
//! there is no import cycle and no module reaches up (selection never sees the handle, the
//! GEMM engine and the descriptors never see the convolution algorithms).
//!
//! The check reads every source file of `src/`, takes the `crate::NAME` paths of its code
//! (comments and the unit tests at the end of a file, after `#[cfg(test)]`, left out; names
//! the crate root re-exports resolved to the module they come from) and requires NAME's layer
//! to be below the file's own module's layer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Modules from the bottom up; a module may import those of lower layers only.
const LAYERS: &[(&str, usize)] = &[
    ("error", 0),
    ("cpu", 1),
    ("alloc", 1),
    ("activation", 1),
    ("npy", 1),
    ("vmath", 0),
    ("simd", 2),
    ("runtime", 2),
    ("desc", 3),
    ("problem_string", 4),
    ("gemm", 4),
    ("models", 5),
    ("op", 5),
    ("layers", 5),
    ("reference", 6),
    ("conv", 6),
    ("select", 6),
    ("handle", 7),
    ("calibrate", 8),
];

/// Items defined in the crate root itself that any module may name (constants).
const ROOT_CONSTANTS: &[&str] = &["VERSION"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src reads") {
        let p = e.expect("an entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top module a file belongs to (`select` for src/select/policy.rs, `root` for lib.rs).
fn module_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("under src");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    let name = name.trim_end_matches(".rs");
    if name == "lib" {
        "root".into()
    } else {
        name.to_string()
    }
}

/// The code of a file: comment lines dropped, and everything from `#[cfg(test)]` on.
fn code(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push((i + 1, line.to_string()));
    }
    out
}

/// `crate::NAME` occurrences of a line, and `use crate::{A, B}` groups.
fn crate_names(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name = part.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    names.push(name.to_string());
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// What the crate root re-exports (`pub use desc::{ConvProblem, ...}`): name → module.
fn root_reexports() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs reads");
    let mut map = BTreeMap::new();
    let mut stmt = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("pub use ") || !stmt.is_empty() {
            stmt.push_str(t);
            stmt.push(' ');
            if !t.ends_with(';') {
                continue;
            }
            let body = stmt
                .trim_start_matches("pub use ")
                .trim_end_matches([';', ' ']);
            let (module, items) = body.split_once("::").expect("a path");
            let items = items.trim_matches(|c| c == '{' || c == '}' || c == ' ');
            for item in items.split(',') {
                let name = item.trim().rsplit("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    map.insert(name.to_string(), module.trim().to_string());
                }
            }
            stmt.clear();
        }
    }
    map
}

/// Every upward or sideways import: (file, line, importing module, imported module).
fn violations() -> Vec<String> {
    let layer: BTreeMap<&str, usize> = LAYERS.iter().copied().collect();
    let reexports = root_reexports();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in &files {
        let module = module_of(f);
        if module == "root" {
            continue;
        }
        let Some(&own) = layer.get(module.as_str()) else {
            out.push(format!(
                "{}: module `{module}` has no layer in LAYERS",
                f.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).expect("a source file reads");
        for (n, line) in code(&text) {
            for name in crate_names(&line) {
                if name == module || name == "self" || ROOT_CONSTANTS.contains(&name.as_str()) {
                    continue;
                }
                let target = if layer.contains_key(name.as_str()) {
                    name.clone()
                } else if let Some(m) = reexports.get(&name) {
                    if !layer.contains_key(m.as_str()) {
                        continue; // a re-exported dependency (half)
                    }
                    m.clone()
                } else {
                    out.push(format!(
                        "{}:{n}: `crate::{name}` is neither a module nor a root re-export",
                        f.display()
                    ));
                    continue;
                };
                if target == module {
                    continue;
                }
                let theirs = layer[target.as_str()];
                if theirs >= own {
                    out.push(format!(
                        "{}:{n}: `{module}` (layer {own}) imports `{target}` (layer {theirs})",
                        f.display()
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let v = violations();
    assert!(v.is_empty(), "layering violations:\n{}", v.join("\n"));
}

#[test]
fn every_module_has_a_layer() {
    let text = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs reads");
    let layer: BTreeMap<&str, usize> = LAYERS.iter().copied().collect();
    for line in text.lines() {
        let t = line.trim();
        let decl = t
            .strip_prefix("pub mod ")
            .or_else(|| t.strip_prefix("mod "))
            .and_then(|r| r.strip_suffix(';'));
        if let Some(m) = decl {
            assert!(layer.contains_key(m), "module {m} is missing from LAYERS");
        }
    }
}

/// The check finds what it is for: these lines, were they code of the named modules, would
/// each be a violation (and the same-module and lower-layer ones would not).
#[test]
fn the_check_sees_upward_imports() {
    assert_eq!(crate_names("use crate::Handle;"), ["Handle"]);
    assert_eq!(
        crate_names("use crate::{conv::X, desc::Y};"),
        ["conv", "desc"]
    );
    assert_eq!(crate_names("    crate::handle::check_call(p)"), ["handle"]);
    let code = code("use crate::a;\n// use crate::b;\nx // crate::c\n#[cfg(test)]\nuse crate::d;");
    let names: Vec<String> = code.iter().flat_map(|(_, l)| crate_names(l)).collect();
    assert_eq!(names, ["a"]);
    let re = root_reexports();
    assert_eq!(re.get("Handle").map(String::as_str), Some("handle"));
    assert_eq!(re.get("ConvProblem").map(String::as_str), Some("desc"));
}
