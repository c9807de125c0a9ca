//! End-to-end tests of the `autodnn` command: run the built binary, check stdout, stderr and
//! the exit status.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use common::{json_lines, keys, sorted, TempDir, BIN};

/// Runs the command; whatever happens, stderr must not hold a panic.
fn autodnn(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("AUTODNN_ISA")
        .output()
        .expect("run autodnn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "autodnn {args:?} panicked: {stderr}"
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// Runs a command expected to succeed, returning its stdout.
fn ok(args: &[&str]) -> String {
    let o = autodnn(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "autodnn {args:?}: stderr {}",
        stderr(&o)
    );
    stdout(&o)
}

/// Runs a command expected to succeed and print `n` JSON lines, returning them.
fn ok_json(args: &[&str], n: usize) -> Vec<Value> {
    let out = ok(args);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), n, "{out}");
    lines
}

/// Runs a command expected to be refused as bad input: exit 2, nothing on stdout, one line on
/// stderr, which is returned.
fn bad(args: &[&str]) -> String {
    let o = autodnn(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "autodnn {args:?}: stderr {err}");
    assert!(o.stdout.is_empty(), "autodnn {args:?} wrote {}", stdout(&o));
    assert_eq!(err.lines().count(), 1, "autodnn {args:?}: stderr {err:?}");
    assert!(err.starts_with("autodnn: "), "{err}");
    err
}

/// Runs a command expected to be refused by the argument parser: exit 2, no stdout.
fn usage_error(args: &[&str]) -> String {
    let o = autodnn(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "autodnn {args:?}: stderr {err}");
    assert!(o.stdout.is_empty());
    err
}

/// The strings of the array `v[key]`.
fn strings<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("{key} holds a non-string {s}"))
        })
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// ---------------------------------------------------------------------------------------------
// info

#[test]
fn info_json_has_every_key() {
    let out = ok(&["info", "--json"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    let v: Value = serde_json::from_str(&out).expect("info --json is JSON");
    assert_eq!(
        keys(&v),
        sorted(&[
            "version",
            "threads",
            "cpu_features",
            "isa",
            "cache_path",
            "cost_model_path",
            "calibrated",
            "cpu_model",
            "algorithms",
            "reduced_precision"
        ])
    );
    let rp = &v["reduced_precision"];
    assert_eq!(
        keys(rp),
        sorted(&[
            "avx512_bf16",
            "avx512_fp16",
            "amx",
            "bf16_gemm_kernel",
            "bf16_unit_speedup"
        ])
    );
    let detected = autodnn::cpu::Features::detected();
    use autodnn::cpu::Feature;
    assert_eq!(
        rp["avx512_bf16"].as_bool(),
        Some(detected.contains(Feature::Avx512Bf16))
    );
    assert_eq!(
        rp["avx512_fp16"].as_bool(),
        Some(detected.contains(Feature::Avx512Fp16))
    );
    assert_eq!(
        rp["amx"].as_str(),
        Some(autodnn::cpu::AmxState::detected().name())
    );
    // The default choice of units: the bf16 kernels only where measured faster.
    let kernel = rp["bf16_gemm_kernel"].as_str().unwrap();
    let speedup = autodnn::gemm::bf16_unit_speedup();
    assert_eq!(
        rp["bf16_unit_speedup"].is_f64(),
        detected.contains(Feature::Avx512Bf16)
    );
    assert_eq!(
        kernel.contains("bf16"),
        speedup.is_some_and(|s| s >= autodnn::gemm::BF16_UNITS_MIN_SPEEDUP),
        "{kernel}, bf16 units at {speedup:?}"
    );
    assert_eq!(v["version"], autodnn::VERSION);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let threads = v["threads"].as_u64().expect("threads is a number");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(threads, cores as u64);
    let features = strings(&v, "cpu_features");
    assert_eq!(features, autodnn::cpu::features());
    assert_eq!(v["isa"], autodnn::cpu::Isa::best_available().name());
    assert!(!v["cache_path"].as_str().expect("cache_path").is_empty());
    let algos = strings(&v, "algorithms");
    assert_eq!(algos, autodnn::conv::names());
    assert!(algos.contains(&"direct"));
}

#[test]
fn info_respects_the_isa_cap_and_refuses_a_bad_one() {
    let o = Command::new(BIN)
        .args(["info", "--json"])
        .env("AUTODNN_ISA", "scalar")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["isa"], "scalar");

    let o = Command::new(BIN)
        .args(["info"])
        .env("AUTODNN_ISA", "sse9")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("AUTODNN_ISA") && err.contains("sse9"), "{err}");
}

#[test]
fn info_text_names_version_and_algorithms() {
    let out = ok(&["info"]);
    assert!(out.contains(autodnn::VERSION), "{out}");
    for a in autodnn::conv::names() {
        assert!(out.contains(a), "{out}");
    }
}

#[test]
fn version_flag() {
    let out = ok(&["--version"]);
    assert!(out.contains(autodnn::VERSION), "{out}");
}

// ---------------------------------------------------------------------------------------------
// conv on generated data

const TINY: &str = r#"mb2ic4ih6oc8kh3ph1n"tiny*3""#;
const TINY_CANONICAL: &str = r#"mb2g1ic4ih6iw6oc8oh6ow6kh3kw3sh1sw1ph1pw1dh0dw0n"tiny*3""#;
const TINY_FLOPS: f64 = 2.0 * 2.0 * 8.0 * 6.0 * 6.0 * 4.0 * 9.0;

const RESULT_KEYS: [&str; 7] = [
    "algo",
    "status",
    "reason",
    "ms",
    "gflops",
    "workspace_bytes",
    "max_rel_err",
];

fn check_result_schema(r: &Value) {
    assert_eq!(keys(r), sorted(&RESULT_KEYS), "{r}");
    match r["status"].as_str().expect("status is a string") {
        "ok" => {
            assert!(r["reason"].is_null(), "{r}");
            assert!(r["ms"].as_f64().expect("ms") >= 0.0, "{r}");
            assert!(r["gflops"].is_number() || r["ms"] == 0.0, "{r}");
            assert!(r["workspace_bytes"].is_u64(), "{r}");
        }
        "declined" => {
            assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
            for k in ["ms", "gflops", "max_rel_err", "workspace_bytes"] {
                assert!(r[k].is_null(), "{k} in {r}");
            }
        }
        "failed" => {
            assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
            for k in ["ms", "gflops", "max_rel_err"] {
                assert!(r[k].is_null(), "{k} in {r}");
            }
        }
        other => panic!("unknown status {other} in {r}"),
    }
}

#[test]
fn conv_json_schema_with_check() {
    let lines = ok_json(
        &[
            "conv",
            TINY,
            "--json",
            "--check",
            "--reps",
            "3",
            "--threads",
            "1",
        ],
        2,
    );
    let p = &lines[0];
    assert_eq!(
        keys(p),
        sorted(&["problem", "dir", "types", "count", "flops", "results"])
    );
    assert_eq!(p["dir"], "fwd");
    assert_eq!(p["types"], "f32");
    assert_eq!(p["problem"], TINY_CANONICAL);
    assert_eq!(p["count"], 3);
    assert_eq!(p["flops"].as_f64(), Some(TINY_FLOPS));
    let results = p["results"].as_array().expect("results is an array");
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["algo"].as_str().unwrap())
        .collect();
    assert_eq!(names, autodnn::conv::names(), "registry order");
    for r in results {
        check_result_schema(r);
    }
    let direct = results.iter().find(|r| r["algo"] == "direct").unwrap();
    assert_eq!(direct["status"], "ok");
    assert_eq!(direct["max_rel_err"].as_f64(), Some(0.0), "{direct}");
    assert_eq!(direct["workspace_bytes"], 0);
    let ms = direct["ms"].as_f64().unwrap();
    let gf = direct["gflops"].as_f64().unwrap();
    assert!((gf - TINY_FLOPS / (ms / 1e3) / 1e9).abs() <= 1e-9 * gf.max(1.0));

    let t = &lines[1];
    assert_eq!(keys(t), sorted(&["total", "dir", "ms_weighted", "gflops"]));
    assert_eq!(t["total"], true);
    assert_eq!(t["dir"], "fwd");
    let best = results
        .iter()
        .filter_map(|r| r["ms"].as_f64())
        .fold(f64::INFINITY, f64::min);
    let tm = t["ms_weighted"].as_f64().unwrap();
    assert!((tm - 3.0 * best).abs() <= 1e-9 * tm, "{t} vs best {best}");
    let tg = t["gflops"].as_f64().unwrap();
    let expect = 3.0 * TINY_FLOPS / (tm / 1e3) / 1e9;
    assert!((tg - expect).abs() <= 1e-9 * expect, "{t}");
}

/// `conv --math allow_bf16` (the bf16 units forced where the CPU has them) in every
/// direction: the command's integer data are exact in bf16, so every algorithm still matches
/// the f64 reference exactly or within its own bound; bad values are refused naming the option.
#[test]
fn conv_under_allow_bf16_stays_exact_on_integer_data() {
    for dir in ["fwd", "bwd_d", "bwd_w"] {
        let lines = ok_json(
            &[
                "conv",
                "mb2ic32ih9oc24oh9kh3ph1",
                "--dir",
                dir,
                "--json",
                "--check",
                "--reps",
                "1",
                "--threads",
                "1",
                "--math",
                "allow_bf16",
                "--bf16-units",
                "always",
            ],
            2,
        );
        let results = lines[0]["results"].as_array().expect("results");
        for r in results.iter().filter(|r| r["status"] != "declined") {
            assert_eq!(r["status"], "ok", "{dir}: {r}");
            let name = r["algo"].as_str().unwrap();
            let err = r["max_rel_err"].as_f64().unwrap();
            if name.starts_with("gemm") || name.starts_with("implicit_gemm") || name == "direct" {
                assert_eq!(err, 0.0, "{dir} {name}: {r}");
            } else {
                assert!(err <= 1e-3, "{dir} {name}: {r}");
            }
        }
        assert!(
            results
                .iter()
                .any(|r| r["algo"] == "gemm" && r["status"] == "ok"),
            "{dir}"
        );
    }
    for (opt, value) in [("--math", "fast"), ("--bf16-units", "sometimes")] {
        let err = bad(&["conv", TINY, opt, value]);
        assert!(err.contains(opt), "{err}");
    }
}

#[test]
fn conv_on_bf16_and_f16_tensors_checks_every_algorithm() {
    // Integer data exact in both types: the exact algorithms are off by y's one rounding
    // only (0 with an f32 y), which --check allows for.
    for (dtype, y_dtype, types, rounding) in [
        ("bf16", None, "bf16", 2f64.powi(-8)),
        ("f16", None, "f16", 2f64.powi(-11)),
        ("bf16", Some("f32"), "bf16>f32", 0.0),
    ] {
        let mut args = vec![
            "conv",
            "mb2ic16ih9oc24oh9kh3ph1",
            "--json",
            "--check",
            "--reps",
            "1",
            "--threads",
            "1",
            "--dtype",
            dtype,
        ];
        if let Some(y) = y_dtype {
            args.extend(["--y-dtype", y]);
        }
        let lines = ok_json(&args, 2);
        assert_eq!(lines[0]["types"], types);
        let results = lines[0]["results"].as_array().expect("results");
        let mut ok = 0;
        for r in results.iter().filter(|r| r["status"] != "declined") {
            assert_eq!(r["status"], "ok", "{types}: {r}");
            let name = r["algo"].as_str().unwrap();
            let err = r["max_rel_err"].as_f64().unwrap();
            if name.starts_with("gemm") || name.starts_with("implicit_gemm") || name == "direct" {
                assert!(err <= rounding, "{types} {name}: {r}");
            } else {
                assert!(err <= 1e-3 + rounding, "{types} {name}: {r}");
            }
            ok += 1;
        }
        assert!(ok >= 6, "{types}: {results:?}");
    }
    for (args, flag) in [
        (vec!["conv", TINY, "--dtype", "f64"], "--dtype"),
        (
            vec!["conv", TINY, "--dtype", "bf16", "--y-dtype", "f16"],
            "--y-dtype",
        ),
        (
            vec!["conv", TINY, "--dtype", "bf16", "--dir", "bwd_d"],
            "--dtype",
        ),
    ] {
        let err = bad(&args);
        assert!(err.contains(flag), "{err}");
    }
}

#[test]
fn conv_json_without_check_has_null_error_and_named_algo() {
    let lines = ok_json(
        &["conv", TINY, "--json", "--algo", "direct", "--reps", "1"],
        2,
    );
    let results = lines[0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["algo"], "direct");
    assert_eq!(results[0]["status"], "ok");
    assert!(results[0]["max_rel_err"].is_null());
    assert_eq!(lines[1]["total"], true);
}

#[test]
fn conv_file_of_problems_keeps_input_order_and_mb_overrides() {
    let dir = TempDir::new("list");
    let list = dir.path("problems.txt");
    std::fs::write(
        &list,
        "# two layers\nmb4ic2ih5oc3kh3 # first\n\nmb3ic3ih4oc2kh1n\"second*2\"\n",
    )
    .unwrap();
    let lines = ok_json(
        &[
            "conv",
            s(&list),
            "mb1ic1ih3oc1kh3ph1",
            "--json",
            "--algo",
            "direct",
            "--reps",
            "1",
            "--mb",
            "1",
            "--layout",
            "nhwc",
            "--check",
        ],
        4,
    );
    let problems: Vec<&str> = lines[..3]
        .iter()
        .map(|l| l["problem"].as_str().unwrap())
        .collect();
    assert_eq!(
        problems,
        [
            "mb1g1ic2ih5iw5oc3oh3ow3kh3kw3sh1sw1ph0pw0dh0dw0",
            "mb1g1ic3ih4iw4oc2oh4ow4kh1kw1sh1sw1ph0pw0dh0dw0n\"second*2\"",
            "mb1g1ic1ih3iw3oc1oh3ow3kh3kw3sh1sw1ph1pw1dh0dw0",
        ]
    );
    let counts: Vec<u64> = lines[..3]
        .iter()
        .map(|l| l["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 1]);
    for l in &lines[..3] {
        assert_eq!(l["results"][0]["max_rel_err"].as_f64(), Some(0.0), "{l}");
    }
    assert_eq!(lines[3]["total"], true);
}

#[test]
fn conv_human_table_and_total() {
    let out = ok(&["conv", TINY, "--reps", "2", "--check"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("problem") && lines[0].contains("GFLOP/s"),
        "{out}"
    );
    assert!(lines[0].contains("max_rel_err"), "{out}");
    let direct = lines
        .iter()
        .find(|l| l.contains("direct"))
        .unwrap_or_else(|| panic!("no direct row in {out}"));
    assert!(direct.starts_with("tiny*3"), "{direct}");
    assert!(direct.contains(" ok "), "{direct}");
    assert!(lines.last().unwrap().starts_with("total:"), "{out}");
    assert_eq!(lines.len(), 2 + autodnn::conv::names().len(), "{out}");
}

#[test]
fn conv_bad_arguments_exit_2_with_one_line() {
    let err = bad(&["conv", TINY, "--algo", "nosuch"]);
    assert!(err.contains("nosuch") && err.contains("direct"), "{err}");

    let err = bad(&["conv", "mb1ic4ih8oc8kh3foo7"]);
    assert!(err.contains("mb1ic4ih8oc8kh3foo7"), "{err}");

    let err = bad(&["conv", "mb1ic0ih8oc8kh3"]);
    assert!(
        err.contains("mb1ic0ih8oc8kh3") || err.contains("ic"),
        "{err}"
    );

    let err = bad(&["conv", TINY, "--mb", "0"]);
    assert!(err.contains("--mb") && err.contains('0'), "{err}");

    let err = bad(&["conv", TINY, "--reps", "0"]);
    assert!(err.contains("--reps"), "{err}");

    let err = bad(&["conv", TINY, "--threads", "0"]);
    assert!(err.contains("threads"), "{err}");

    let err = bad(&["conv", TINY, "--model", "resnet50"]);
    assert!(err.contains("--model"), "{err}");

    let err = bad(&["conv"]);
    assert!(err.contains("PROBLEM") && err.contains("--model"), "{err}");

    let err = bad(&["conv", TINY, "--input", "x.npy"]);
    assert!(
        err.contains("--weights") && err.contains("--output"),
        "{err}"
    );

    usage_error(&["conv", TINY, "--layout", "nchw16c"]);
    usage_error(&["conv", TINY, "--reps", "many"]);
    usage_error(&["frobnicate"]);
}

#[test]
fn conv_unknown_model_lists_known_ones() {
    let err = bad(&["conv", "--model", "nosuch"]);
    assert!(err.contains("nosuch"), "{err}");
    let known = autodnn::models::names();
    assert!(!known.is_empty(), "the library has no built-in models");
    for m in known {
        assert!(err.contains(m), "{m} missing from {err}");
    }
}

#[test]
fn conv_model_is_read() {
    // Cheap: the model's layers are looked up and then refused for real data, which takes
    // exactly one problem; nothing runs.
    let n = autodnn::models::layers("resnet50").unwrap().len();
    let err = bad(&[
        "conv",
        "--model",
        "resnet50",
        "--algo",
        "direct",
        "--input",
        "x.npy",
        "--weights",
        "w.npy",
        "--output",
        "y.npy",
    ]);
    assert!(err.contains(&format!("got {n}")), "{err}");
}

// ---------------------------------------------------------------------------------------------
// conv on .npy data

/// The bytes of a version 1.0 .npy file.
fn npy_bytes(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let fortran = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn write_f32_npy(path: &Path, shape: &[usize], data: &[f32]) {
    assert_eq!(shape.iter().product::<usize>(), data.len());
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, npy_bytes("<f4", false, shape, &bytes)).unwrap();
}

/// Reads a file the command wrote: it must hold exactly the header NumPy writes for a C-order
/// little-endian f32 array.
fn read_f32_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "data aligned to 64 bytes");
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    assert!(header.ends_with('\n'), "{header:?}");
    let dims = header
        .trim_end()
        .strip_prefix("{'descr': '<f4', 'fortran_order': False, 'shape': (")
        .and_then(|h| h.strip_suffix("), }"))
        .unwrap_or_else(|| panic!("not NumPy's header: {header:?}"));
    let shape: Vec<u64> = dims
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().unwrap())
        .collect();
    let data: Vec<f32> = bytes[10 + hlen..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(data.len() as u64, shape.iter().product::<u64>());
    (shape, data)
}

/// Integer test data in -3..=3 from a small linear congruential generator.
fn ints(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % 7) as f32 - 3.0
        })
        .collect()
}

/// A convolution geometry for the .npy tests.
#[derive(Clone, Copy)]
struct Geom {
    n: usize,
    g: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    r: usize,
    s: usize,
    stride: [usize; 2],
    pad: [usize; 2],
}

impl Geom {
    fn problem(&self) -> String {
        format!(
            "mb{}g{}ic{}ih{}iw{}oc{}kh{}kw{}sh{}sw{}ph{}pw{}",
            self.n,
            self.g,
            self.c,
            self.h,
            self.w,
            self.k,
            self.r,
            self.s,
            self.stride[0],
            self.stride[1],
            self.pad[0],
            self.pad[1]
        )
    }
    fn out(&self) -> [usize; 2] {
        [
            (self.h + 2 * self.pad[0] - self.r) / self.stride[0] + 1,
            (self.w + 2 * self.pad[1] - self.s) / self.stride[1] + 1,
        ]
    }
    fn shapes(&self, nhwc: bool) -> [Vec<usize>; 3] {
        let (cg, [oh, ow]) = (self.c / self.g, self.out());
        if nhwc {
            [
                vec![self.n, self.h, self.w, self.c],
                vec![self.k, self.r, self.s, cg],
                vec![self.n, oh, ow, self.k],
            ]
        } else {
            [
                vec![self.n, self.c, self.h, self.w],
                vec![self.k, cg, self.r, self.s],
                vec![self.n, self.k, oh, ow],
            ]
        }
    }
    /// The convolution by its definition, in f64, laid out as `nhwc` says.
    fn naive(&self, nhwc: bool, x: &[f32], wt: &[f32]) -> Vec<f64> {
        let (cg, kg, [oh, ow]) = (self.c / self.g, self.k / self.g, self.out());
        let (c, h, w, k, r, s) = (self.c, self.h, self.w, self.k, self.r, self.s);
        let xi = |b: usize, ch: usize, i: usize, j: usize| {
            if nhwc {
                ((b * h + i) * w + j) * c + ch
            } else {
                ((b * c + ch) * h + i) * w + j
            }
        };
        let wi = |ko: usize, ch: usize, u: usize, v: usize| {
            if nhwc {
                ((ko * r + u) * s + v) * cg + ch
            } else {
                ((ko * cg + ch) * r + u) * s + v
            }
        };
        let yi = |b: usize, ko: usize, i: usize, j: usize| {
            if nhwc {
                ((b * oh + i) * ow + j) * k + ko
            } else {
                ((b * k + ko) * oh + i) * ow + j
            }
        };
        let mut y = vec![0.0; self.n * k * oh * ow];
        for b in 0..self.n {
            for ko in 0..k {
                let grp = ko / kg;
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = 0.0f64;
                        for ch in 0..cg {
                            for u in 0..r {
                                for v in 0..s {
                                    let ii =
                                        (i * self.stride[0] + u) as isize - self.pad[0] as isize;
                                    let jj =
                                        (j * self.stride[1] + v) as isize - self.pad[1] as isize;
                                    if ii < 0 || jj < 0 || ii >= h as isize || jj >= w as isize {
                                        continue;
                                    }
                                    let xv = x[xi(b, grp * cg + ch, ii as usize, jj as usize)];
                                    acc += xv as f64 * wt[wi(ko, ch, u, v)] as f64;
                                }
                            }
                        }
                        y[yi(b, ko, i, j)] = acc;
                    }
                }
            }
        }
        y
    }
}

const GEOM: Geom = Geom {
    n: 2,
    g: 1,
    c: 3,
    h: 7,
    w: 6,
    k: 4,
    r: 3,
    s: 2,
    stride: [2, 1],
    pad: [1, 0],
};

const GROUPED: Geom = Geom {
    n: 1,
    g: 2,
    c: 4,
    h: 5,
    w: 5,
    k: 6,
    r: 3,
    s: 3,
    stride: [1, 1],
    pad: [1, 1],
};

/// x and w of a geometry written as integer .npy files (seeds `seed` and `seed + 1`) in a
/// fresh temporary directory, with the path y is to be written to.
struct Npy {
    dir: TempDir,
    xp: PathBuf,
    wp: PathBuf,
    yp: PathBuf,
    /// x's, w's and y's shapes.
    shapes: [Vec<usize>; 3],
    x: Vec<f32>,
    w: Vec<f32>,
}

impl Npy {
    fn new(tag: &str, geom: Geom, nhwc: bool, seed: u64) -> Npy {
        let dir = TempDir::new(tag);
        let (xp, wp, yp) = (dir.path("x.npy"), dir.path("w.npy"), dir.path("y.npy"));
        let shapes = geom.shapes(nhwc);
        let x = ints(shapes[0].iter().product(), seed);
        let w = ints(shapes[1].iter().product(), seed + 1);
        write_f32_npy(&xp, &shapes[0], &x);
        write_f32_npy(&wp, &shapes[1], &w);
        Npy {
            dir,
            xp,
            wp,
            yp,
            shapes,
            x,
            w,
        }
    }
}

/// `conv PROBLEM --algo direct --input X --weights W --output Y`, then `extra`.
fn npy_conv_args<'a>(
    problem: &'a str,
    [x, w, y]: [&'a Path; 3],
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "conv",
        problem,
        "--algo",
        "direct",
        "--input",
        s(x),
        "--weights",
        s(w),
        "--output",
        s(y),
    ];
    args.extend_from_slice(extra);
    args
}

fn npy_round_trip(geom: Geom, layout: &str) {
    let nhwc = layout == "nhwc";
    let Npy {
        dir: _dir,
        xp,
        wp,
        yp,
        shapes: [_, _, ys],
        x,
        w,
    } = Npy::new(layout, geom, nhwc, 1);
    let problem = geom.problem();
    let out = ok(&npy_conv_args(
        &problem,
        [&xp, &wp, &yp],
        &["--layout", layout, "--check"],
    ));
    assert!(out.contains("max_rel_err"), "{out}");
    let (shape, y) = read_f32_npy(&yp);
    let want: Vec<u64> = ys.iter().map(|&d| d as u64).collect();
    assert_eq!(shape, want);
    let expect = geom.naive(nhwc, &x, &w);
    assert_eq!(y.len(), expect.len());
    for (i, (a, b)) in y.iter().zip(&expect).enumerate() {
        assert_eq!(*a as f64, *b, "y[{i}] of {problem} ({layout})");
    }
    // The expected output is not trivial.
    assert!(expect.iter().any(|v| *v != 0.0));
}

#[test]
fn npy_nchw_matches_naive_convolution() {
    npy_round_trip(GEOM, "nchw");
}

#[test]
fn npy_nhwc_matches_naive_convolution() {
    npy_round_trip(GEOM, "nhwc");
}

#[test]
fn npy_grouped_both_layouts() {
    npy_round_trip(GROUPED, "nchw");
    npy_round_trip(GROUPED, "nhwc");
}

#[test]
fn npy_json_report() {
    let Npy {
        dir: _dir,
        xp,
        wp,
        yp,
        shapes: [_, _, ys],
        ..
    } = Npy::new("json", GEOM, false, 3);
    let lines = ok_json(
        &npy_conv_args(&GEOM.problem(), [&xp, &wp, &yp], &["--json", "--check"]),
        1,
    );
    assert_eq!(lines[0]["algo"], "direct");
    assert_eq!(lines[0]["max_rel_err"].as_f64(), Some(0.0));
    let shape: Vec<usize> = lines[0]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(shape, ys);
}

#[test]
fn npy_bad_files_exit_2_naming_the_file() {
    let Npy {
        dir,
        xp,
        wp,
        yp,
        shapes: [xs, _, _],
        ..
    } = Npy::new("badnpy", GEOM, false, 5);
    let problem = GEOM.problem();
    let run =
        |x: &Path, w: &Path, extra: &[&str]| bad(&npy_conv_args(&problem, [x, w, &yp], extra));

    // Shapes of the other layout.
    let err = run(&xp, &wp, &["--layout", "nhwc"]);
    assert!(
        err.contains("x.npy") && err.contains("expected shape"),
        "{err}"
    );
    assert!(
        err.contains("[2, 7, 6, 3]") && err.contains("[2, 3, 7, 6]"),
        "{err}"
    );

    // A wrong filter shape.
    let w2 = dir.path("w2.npy");
    write_f32_npy(&w2, &[4, 3, 3, 3], &ints(108, 7));
    let err = run(&xp, &w2, &[]);
    assert!(
        err.contains("w2.npy") && err.contains("[4, 3, 3, 2]"),
        "{err}"
    );

    // float64.
    let x64 = dir.path("x64.npy");
    let n: usize = xs.iter().product();
    std::fs::write(&x64, npy_bytes("<f8", false, &xs, &vec![0u8; 8 * n])).unwrap();
    let err = run(&x64, &wp, &[]);
    assert!(err.contains("x64.npy") && err.contains("f8"), "{err}");

    // Fortran order.
    let xf = dir.path("xf.npy");
    std::fs::write(&xf, npy_bytes("<f4", true, &xs, &vec![0u8; 4 * n])).unwrap();
    let err = run(&xf, &wp, &[]);
    assert!(err.contains("xf.npy") && err.contains("Fortran"), "{err}");

    // Truncated data.
    let xt = dir.path("xt.npy");
    std::fs::write(&xt, npy_bytes("<f4", false, &xs, &vec![0u8; 4 * n - 4])).unwrap();
    let err = run(&xt, &wp, &[]);
    assert!(err.contains("xt.npy"), "{err}");

    // A header a backtracking parser takes exponential time on: refused at once.
    let xb = dir.path("xbraces.npy");
    let mut braces = b"\x93NUMPY\x01\x00".to_vec();
    braces.extend(9_999u16.to_le_bytes());
    braces.extend(std::iter::repeat_n(b'{', 9_998));
    braces.push(b'\n');
    std::fs::write(&xb, braces).unwrap();
    let err = run(&xb, &wp, &[]);
    assert!(
        err.contains("xbraces.npy") && err.contains("npy.header"),
        "{err}"
    );

    // Not a .npy file, and a missing one.
    let junk = dir.path("junk.npy");
    std::fs::write(&junk, b"hello").unwrap();
    let err = run(&junk, &wp, &[]);
    assert!(err.contains("junk.npy"), "{err}");
    let err = run(&dir.path("missing.npy"), &wp, &[]);
    assert!(err.contains("missing.npy"), "{err}");

    assert!(!yp.exists(), "no output is written for bad input");
}

#[test]
fn npy_needs_one_problem_and_one_algorithm() {
    let dir = TempDir::new("npyargs");
    let (xp, wp, yp) = (dir.path("x.npy"), dir.path("w.npy"), dir.path("y.npy"));
    let files = ["--input", s(&xp), "--weights", s(&wp), "--output", s(&yp)];
    let problem = GEOM.problem();

    let mut args = vec!["conv", problem.as_str(), "--algo", "all"];
    args.extend_from_slice(&files);
    let err = bad(&args);
    assert!(err.contains("--algo"), "{err}");

    let mut args = vec!["conv", problem.as_str()];
    args.extend_from_slice(&files);
    let err = bad(&args);
    assert!(err.contains("--algo"), "{err}");

    let mut args = vec![
        "conv",
        problem.as_str(),
        problem.as_str(),
        "--algo",
        "direct",
    ];
    args.extend_from_slice(&files);
    let err = bad(&args);
    assert!(err.contains("one problem"), "{err}");
}

/// --bias, --residual, --act, --alpha, --beta and --prepared with real data: y = relu(alpha ·
/// conv + bias + beta · z), compared exactly with the naive convolution on integer data.
fn npy_fused(layout: &str, prepared: bool) {
    let nhwc = layout == "nhwc";
    let geom = GEOM;
    let Npy {
        dir,
        xp,
        wp,
        yp,
        shapes: [_, _, ys],
        x,
        w,
    } = Npy::new(&format!("fused-{layout}-{prepared}"), geom, nhwc, 1);
    let (bp, zp) = (dir.path("b.npy"), dir.path("z.npy"));
    let b = ints(geom.k, 3);
    let z = ints(ys.iter().product(), 4);
    write_f32_npy(&bp, &[geom.k], &b);
    write_f32_npy(&zp, &ys, &z);
    let problem = geom.problem();
    let mut args = npy_conv_args(
        &problem,
        [&xp, &wp, &yp],
        &[
            "--layout",
            layout,
            "--bias",
            s(&bp),
            "--residual",
            s(&zp),
            "--act",
            "relu",
            "--alpha",
            "2",
            "--beta",
            "-1",
            "--check",
        ],
    );
    if prepared {
        args.push("--prepared");
    }
    ok(&args);
    let (_, y) = read_f32_npy(&yp);
    let conv = geom.naive(nhwc, &x, &w);
    let k_of = |i: usize| {
        if nhwc {
            i % geom.k
        } else {
            (i / (ys[2] * ys[3])) % geom.k
        }
    };
    let mut clipped = 0;
    for (i, (got, c)) in y.iter().zip(&conv).enumerate() {
        let v = 2.0 * c + b[k_of(i)] as f64 - z[i] as f64;
        clipped += usize::from(v < 0.0);
        assert_eq!(
            *got as f64,
            v.max(0.0),
            "y[{i}] ({layout}, prepared {prepared})"
        );
    }
    assert!(
        clipped > 0 && clipped < y.len(),
        "relu should clip some values, not all"
    );
}

#[test]
fn npy_fused_epilogue_matches_naive() {
    npy_fused("nchw", false);
    npy_fused("nhwc", true);
}

#[test]
fn epilogue_flags_are_checked() {
    let e = bad(&["conv", "mb1ic2ih4oc2kh1", "--act", "relu7"]);
    assert!(e.contains("act"), "{e}");
    let e = bad(&["conv", "mb1ic2ih4oc2kh1", "--bias", "b.npy"]);
    assert!(e.contains("--bias"), "{e}");
    // Generated data with beta uses a generated residual: still exact with --check.
    let out = ok(&[
        "conv",
        "mb1ic4ih6oc4kh3ph1",
        "--act",
        "relu",
        "--beta",
        "1",
        "--alpha",
        "2",
        "--prepared",
        "--check",
        "--json",
        "--reps",
        "1",
    ]);
    let lines = json_lines(&out);
    let results = lines[0]["results"].as_array().unwrap();
    let direct = results.iter().find(|r| r["algo"] == "direct").unwrap();
    assert_eq!(direct["max_rel_err"], 0.0, "{out}");
    // Every algorithm that accepts the problem passes the check (transformed-domain ones
    // within their bound); none fails.
    assert!(results.iter().all(|r| r["status"] != "failed"), "{out}");
    assert!(
        results.iter().filter(|r| r["status"] == "ok").count() > 1,
        "{out}"
    );
    // Exact algorithms exactly; transform-domain ones within their documented bound.
    for r in results.iter().filter(|r| r["status"] == "ok") {
        let a = autodnn::conv::find(r["algo"].as_str().unwrap()).unwrap();
        let err = r["max_rel_err"].as_f64().unwrap();
        assert!(err <= a.accuracy().integer_tolerance(), "{out}");
    }
}

#[test]
fn gemm_json_reports_the_call() {
    for extra in [
        &[][..],
        &["--transa", "--transb"],
        &["--batch", "3", "--isa", "scalar"],
        &["--dtype", "bf16"],
        &["--dtype", "f16", "--transa"],
        &["--math", "allow_bf16"],
        &["--math", "allow_bf16", "--bf16-units", "always"],
        &["--dtype", "bf16", "--bf16-units", "never"],
    ] {
        let mut args = vec!["gemm", "--m", "7", "--n", "5", "--k", "3", "--threads", "2"];
        args.extend_from_slice(&["--reps", "3", "--json"]);
        args.extend_from_slice(extra);
        let lines = ok_json(&args, 1);
        let v = &lines[0];
        assert_eq!(
            keys(v),
            sorted(&[
                "m",
                "n",
                "k",
                "batch",
                "threads",
                "isa",
                "dtype",
                "math",
                "bf16_units",
                "kernel",
                "ms",
                "gflops"
            ])
        );
        let dtype = ["bf16", "f16"]
            .into_iter()
            .find(|t| extra.contains(t))
            .unwrap_or("f32");
        assert_eq!(v["dtype"].as_str(), Some(dtype));
        let math = if extra.contains(&"allow_bf16") {
            "allow_bf16"
        } else {
            "strict"
        };
        assert_eq!(v["math"].as_str(), Some(math));
        let units = ["always", "never"]
            .into_iter()
            .find(|u| extra.contains(u))
            .unwrap_or("auto");
        assert_eq!(v["bf16_units"].as_str(), Some(units));
        let kernel = v["kernel"].as_str().unwrap();
        let has = autodnn::cpu::Features::detected().contains(autodnn::cpu::Feature::Avx512Bf16)
            && !extra.contains(&"scalar");
        // k = 3: below the AMX tiles' least depth, so the AVX512-BF16 family's speed-up.
        let faster = autodnn::gemm::bf16_unit_speedup_for(autodnn::cpu::Isa::best_available(), 3)
            .is_some_and(|s| s >= autodnn::gemm::BF16_UNITS_MIN_SPEEDUP);
        assert!(
            !kernel.starts_with("amx"),
            "k = 3 runs no AMX tiles: {kernel}"
        );
        let bf16_unit = match units {
            "always" => has,
            "never" => false,
            _ => has && faster,
        };
        assert_eq!(
            kernel.contains("bf16"),
            bf16_unit && (dtype == "bf16" || math == "allow_bf16"),
            "{extra:?}: {kernel}"
        );
        assert_eq!(
            (v["m"].as_u64(), v["n"].as_u64(), v["k"].as_u64()),
            (Some(7), Some(5), Some(3))
        );
        assert_eq!(v["threads"].as_u64(), Some(2));
        assert!(v["ms"].as_f64().unwrap() >= 0.0 && v["gflops"].as_f64().unwrap() >= 0.0);
        if extra.contains(&"--batch") {
            assert_eq!(v["batch"].as_u64(), Some(3));
            assert_eq!(v["isa"].as_str(), Some("scalar"));
        }
    }
    let text = ok(&["gemm", "--m", "4", "--n", "4", "--k", "4", "--reps", "1"]);
    assert!(text.contains("GFLOP/s"), "{text}");
    for wrong in [
        ["--dtype", "f64"],
        ["--math", "fast"],
        ["--bf16-units", "some"],
    ] {
        let mut args = vec!["gemm", "--m", "4", "--n", "4", "--k", "4"];
        args.extend_from_slice(&wrong);
        let err = bad(&args);
        assert!(err.contains(wrong[0]), "{err}");
    }
}

#[test]
fn gemm_and_peak_refuse_bad_input() {
    let e = bad(&["gemm", "--m", "2", "--n", "2", "--k", "2", "--reps", "0"]);
    assert!(e.contains("--reps"), "{e}");
    let e = bad(&["gemm", "--m", "2", "--n", "2", "--k", "2", "--batch", "0"]);
    assert!(e.contains("--batch"), "{e}");
    let e = bad(&["gemm", "--m", "2", "--n", "2", "--k", "2", "--isa", "sse9"]);
    assert!(e.contains("--isa"), "{e}");
    let e = bad(&["gemm", "--m", "2", "--n", "2", "--k", "2", "--threads", "0"]);
    assert!(e.contains("threads"), "{e}");
    usage_error(&["gemm", "--m", "2", "--n", "2"]);
    let e = bad(&["peak", "--threads", "0"]);
    assert!(e.contains("--threads"), "{e}");
    // A hundred thousand threads would each run the full measurement: refused, not started.
    let e = bad(&["peak", "--threads", "100000"]);
    assert!(e.contains("--threads") && e.contains("4096"), "{e}");
}

#[test]
fn peak_json_reports_gflops() {
    let out = ok(&["peak", "--threads", "1", "--isa", "avx2", "--json"]);
    let v = &json_lines(&out)[0];
    assert_eq!(
        keys(v),
        sorted(&["dtype", "isa", "threads", "family", "gflops"])
    );
    assert_eq!(v["dtype"].as_str(), Some("f32"));
    assert!(v["family"].is_null(), "{v}");
    assert_eq!(v["threads"].as_u64(), Some(1));
    assert!(matches!(v["isa"].as_str(), Some("scalar" | "avx2")), "{v}");
    assert!(v["gflops"].as_f64().unwrap() > 0.0);
    // The bf16 dot-product peak: measured where the CPU has AVX512-BF16, refused naming
    // --dtype elsewhere and under a cap that excludes it.
    let e = bad(&["peak", "--threads", "1", "--isa", "avx2", "--dtype", "bf16"]);
    assert!(e.contains("--dtype") && e.contains("AVX512-BF16"), "{e}");
    let e = bad(&["peak", "--dtype", "f64"]);
    assert!(e.contains("--dtype"), "{e}");
    let args = ["peak", "--threads", "1", "--dtype", "bf16", "--json"];
    if autodnn::cpu::Features::detected().contains(autodnn::cpu::Feature::Avx512Bf16) {
        let v = &json_lines(&ok(&args))[0];
        assert_eq!(v["dtype"].as_str(), Some("bf16"));
        assert!(v["gflops"].as_f64().unwrap() > 0.0);
        // The units measured: AMX tiles where the OS grants them, else AVX512-BF16.
        let family = v["family"].as_str().unwrap();
        let amx = autodnn::cpu::Isa::Amx
            .usable()
            .contains(autodnn::cpu::Feature::AmxBf16);
        assert_eq!(family.starts_with("amx"), amx, "{v}");
        assert_eq!(
            Some(family),
            autodnn::gemm::bf16_peak_family(autodnn::cpu::Isa::Amx)
        );
        let capped = [
            "peak",
            "--threads",
            "1",
            "--dtype",
            "bf16",
            "--isa",
            "avx512",
            "--json",
        ];
        let v = &json_lines(&ok(&capped))[0];
        assert!(
            v["family"].as_str().unwrap().starts_with("avx512bf16"),
            "{v}"
        );
    } else {
        assert!(bad(&args).contains("AVX512-BF16"));
    }
}

/// One failing algorithm never hides the others: with the first of the library's own
/// allocations made to fail (`AUTODNN_FAIL_NTH=1`), the algorithm that made it is a `failed`
/// row with the reason, every other algorithm still runs and is checked, the total is
/// printed, and the command exits 1 naming the failure.
#[test]
fn conv_reports_a_failing_algorithm_as_a_row_and_goes_on() {
    let p = "mb1ic8ih10oc8oh10kh3ph1";
    let o = Command::new(BIN)
        .args([
            "conv",
            p,
            "--json",
            "--check",
            "--reps",
            "1",
            "--threads",
            "1",
        ])
        .env_remove("AUTODNN_ISA")
        .env("AUTODNN_FAIL_NTH", "1")
        .output()
        .expect("run autodnn");
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[1]["total"], true, "{out}");
    let results = lines[0]["results"].as_array().expect("results");
    assert_eq!(results.len(), autodnn::conv::names().len(), "{out}");
    for r in results {
        check_result_schema(r);
    }
    let failed: Vec<&Value> = results.iter().filter(|r| r["status"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{out}");
    let reason = failed[0]["reason"].as_str().unwrap();
    assert!(reason.contains("out of memory"), "{reason}");
    let name = failed[0]["algo"].as_str().unwrap();
    assert!(err.contains(name) && err.lines().count() == 1, "{err}");
    let ok = results.iter().filter(|r| r["status"] == "ok").count();
    assert!(ok >= 5, "{out}");
}

#[test]
fn a_bad_fail_nth_setting_is_bad_input() {
    let o = Command::new(BIN)
        .args(["conv", TINY, "--reps", "1"])
        .env("AUTODNN_FAIL_NTH", "0")
        .output()
        .expect("run autodnn");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("AUTODNN_FAIL_NTH"), "{}", stderr(&o));
}
