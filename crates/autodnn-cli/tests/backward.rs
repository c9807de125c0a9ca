//! End-to-end tests of the backward directions: `conv --dir bwd_d|bwd_w|bwd_wb|all` on
//! generated data (every registered algorithm, checked), on `.npy` files (compared exactly
//! with the library's oracles on integer data), bad input, and `tune --dir`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use autodnn::op::{ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, Registered};
use autodnn::{ConvProblem, Layout, OpKind, ProblemSpec};
use serde_json::Value;

use common::{json_lines, keys, sorted, TempDir, BIN};

/// Small problems: padded, strided and grouped.
const PROBLEMS: [&str; 2] = ["mb2ic4ih7oc6kh3ph1", "mb1g2ic4ih9oc6kh3sh2ph1"];

fn autodnn(args: &[&str]) -> Output {
    let o = Command::new(BIN)
        .args(args)
        .env_remove("AUTODNN_ALGO")
        .env_remove("AUTODNN_FAIL_ALLOC")
        .env_remove("AUTODNN_ISA")
        .output()
        .expect("run autodnn");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "panicked: {err}");
    o
}

fn ok(args: &[&str]) -> String {
    let o = autodnn(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "autodnn {args:?}: {err}");
    String::from_utf8(o.stdout).unwrap()
}

/// Exit 2, nothing on stdout, one line on stderr.
fn bad(args: &[&str]) -> String {
    let o = autodnn(args);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(2), "autodnn {args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

fn names_of(dir: &str) -> Vec<&'static str> {
    match dir {
        "bwd_d" => <ConvBackwardData as Registered>::algorithms()
            .iter()
            .map(|a| a.name())
            .collect(),
        "bwd_w" | "bwd_wb" => <ConvBackwardFilter as Registered>::algorithms()
            .iter()
            .map(|a| a.name())
            .collect(),
        "bwd_b" => <ConvBackwardBias as Registered>::algorithms()
            .iter()
            .map(|a| a.name())
            .collect(),
        _ => autodnn::conv::names(),
    }
}

/// Every algorithm of `results` is the registry's, in order; each ran correctly or declined.
fn check_results(dir: &str, results: &Value, line: &Value) {
    let results = results.as_array().expect("results");
    let algos: Vec<&str> = results
        .iter()
        .map(|r| r["algo"].as_str().unwrap())
        .collect();
    assert_eq!(algos, names_of(dir), "{line}");
    let mut ran = 0;
    for r in results {
        match r["status"].as_str().unwrap() {
            "ok" => {
                ran += 1;
                let e = r["max_rel_err"].as_f64().expect("checked");
                assert!(e <= 1e-3, "{r}");
                assert!(r["ms"].as_f64().unwrap() >= 0.0);
            }
            "declined" => assert!(r["reason"].is_string()),
            s => panic!("status {s}: {r}"),
        }
    }
    assert!(ran >= 1, "nothing ran: {line}");
}

#[test]
fn conv_backward_directions_check_every_algorithm() {
    for dir in ["bwd_d", "bwd_w", "bwd_wb"] {
        let mut args = vec!["conv", "--dir", dir, "--check", "--json", "--reps", "2"];
        args.extend_from_slice(&PROBLEMS);
        // alpha and beta apply: out = alpha · gradient + beta · prior out.
        for scale in [&[][..], &["--alpha", "2", "--beta", "-0.5"][..]] {
            let mut args = args.clone();
            args.extend_from_slice(scale);
            let lines = json_lines(&ok(&args));
            assert_eq!(lines.len(), PROBLEMS.len() + 1, "{lines:?}");
            for (l, p) in lines.iter().zip(PROBLEMS) {
                let spec = ProblemSpec::parse(p).unwrap();
                assert_eq!(l["problem"], spec.to_string());
                assert_eq!(l["dir"], dir, "{l}");
                let mut expect = vec!["problem", "dir", "types", "count", "flops", "results"];
                if dir == "bwd_wb" {
                    expect.push("bias");
                }
                assert_eq!(keys(l), sorted(&expect), "{l}");
                // The forward FLOP count.
                let fwd = spec.to_problem(Layout::Nchw).unwrap().flops();
                assert_eq!(l["flops"].as_f64(), Some(fwd));
                check_results(dir, &l["results"], l);
                if dir == "bwd_wb" {
                    let b = &l["bias"];
                    check_results("bwd_b", &b["results"], l);
                    let bias_ms = b["ms"].as_f64().unwrap();
                    assert!(names_of("bwd_b").contains(&b["algo"].as_str().unwrap()));
                    for r in l["results"].as_array().unwrap() {
                        if let Some(ms) = r["ms"].as_f64() {
                            assert!(ms >= bias_ms, "the row includes the bias: {l}");
                        }
                    }
                }
            }
            let t = lines.last().unwrap();
            assert_eq!(keys(t), sorted(&["total", "dir", "ms_weighted", "gflops"]));
            assert_eq!(t["dir"], dir);
        }
    }
}

#[test]
fn conv_backward_human_table_and_bad_algo() {
    let out = ok(&["conv", PROBLEMS[0], "--dir", "bwd_wb", "--reps", "1"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("dir"), "{out}");
    assert!(
        lines[1].contains("bwd_wb") && lines[1].contains('+'),
        "{out}"
    );
    assert!(lines.last().unwrap().starts_with("total bwd_wb:"), "{out}");

    let err = bad(&["conv", PROBLEMS[0], "--dir", "bwd_d", "--algo", "nosuch"]);
    assert!(err.contains("nosuch") && err.contains("direct"), "{err}");
    for flag in [&["--act", "relu"][..], &["--prepared"][..]] {
        let mut args = vec!["conv", PROBLEMS[0], "--dir", "bwd_w"];
        args.extend_from_slice(flag);
        let err = bad(&args);
        assert!(err.contains(flag[0]), "{err}");
    }
}

/// The total lines of a `--dir all` run: per direction, then "all".
fn totals(lines: &[Value], key: &str) -> Vec<(String, f64)> {
    lines
        .iter()
        .filter(|l| l["total"] == true)
        .map(|l| {
            (
                l["dir"].as_str().unwrap().to_string(),
                l[key].as_f64().unwrap(),
            )
        })
        .collect()
}

fn check_all_totals(t: &[(String, f64)]) {
    let dirs: Vec<&str> = t.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(dirs, ["fwd", "bwd_d", "bwd_w", "all"]);
    let sum: f64 = t[..3].iter().map(|(_, ms)| ms).sum();
    assert!(t[3].1 > 0.0);
    assert!((t[3].1 - sum).abs() <= 1e-9 * sum, "{t:?}");
}

/// Each direction's total is the fastest algorithm per problem weighted by its count, and
/// "all" their sum.
fn check_weighted_totals(lines: &[Value]) {
    let t = totals(lines, "ms_weighted");
    check_all_totals(&t);
    let problems = &lines[..lines.len() - 4];
    for (di, dir) in ["fwd", "bwd_d", "bwd_w"].iter().enumerate() {
        let expect: f64 = problems
            .iter()
            .filter(|l| l["dir"] == *dir)
            .map(|l| {
                let best = l["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["ms"].as_f64())
                    .fold(f64::INFINITY, f64::min);
                best * l["count"].as_f64().unwrap()
            })
            .sum();
        assert!((t[di].1 - expect).abs() <= 1e-9 * expect, "{dir}: {t:?}");
    }
}

#[test]
fn conv_model_all_directions_totals() {
    let model = "mobilenet_dw";
    let n = autodnn::models::layers(model).unwrap().len();
    let out = ok(&[
        "conv", "--model", model, "--dir", "all", "--algo", "direct", "--reps", "1", "--json",
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3 * n + 4, "{out}");
    for (i, l) in lines[..3 * n].iter().enumerate() {
        assert_eq!(l["dir"], ["fwd", "bwd_d", "bwd_w"][i % 3], "{l}");
    }
    check_weighted_totals(&lines);

    // Problems that occur several times count as often.
    let out = ok(&[
        "conv",
        r#"mb2ic4ih7oc6kh3ph1n"a*3""#,
        PROBLEMS[1],
        "--dir",
        "all",
        "--reps",
        "1",
        "--json",
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines[0]["count"], 3, "{out}");
    check_weighted_totals(&lines);

    // The table ends with the same totals.
    let out = ok(&[
        "conv", "--model", model, "--dir", "all", "--algo", "direct", "--reps", "1",
    ]);
    let last: Vec<&str> = out.lines().rev().take(4).collect();
    assert!(last[0].starts_with("total all:"), "{out}");
    assert!(last[1].starts_with("total bwd_w:"), "{out}");
    assert!(last[2].starts_with("total bwd_d:"), "{out}");
    assert!(last[3].starts_with("total fwd:"), "{out}");
}

#[test]
fn tune_all_directions_heuristic() {
    let dir = TempDir::new("tunebwd");
    let cache = dir.path("tuning.json");
    let mut args = vec![
        "tune",
        "--dir",
        "all",
        "--policy",
        "heuristic",
        "--check",
        "--reps",
        "1",
        "--json",
        "--cache",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(&PROBLEMS);
    let lines = json_lines(&ok(&args));
    assert_eq!(lines.len(), 3 * PROBLEMS.len() + 4, "{lines:?}");
    for (i, l) in lines[..3 * PROBLEMS.len()].iter().enumerate() {
        let d = ["fwd", "bwd_d", "bwd_w"][i % 3];
        assert_eq!(l["dir"], d, "{l}");
        assert_eq!(l["source"], "heuristic", "{l}");
        assert!(names_of(d).contains(&l["algo"].as_str().unwrap()), "{l}");
        assert!(l["max_rel_err"].as_f64().unwrap() <= 1e-3, "{l}");
        assert!(l.get("error").is_none(), "{l}");
    }
    check_all_totals(&totals(&lines, "total_ms"));

    // bwd_wb: the bias gradient is selected as well, and its time is part of the layer's.
    let mut args = vec![
        "tune",
        "--dir",
        "bwd_wb",
        "--policy",
        "heuristic",
        "--reps",
        "1",
        "--json",
        "--cache",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(&PROBLEMS);
    let lines = json_lines(&ok(&args));
    for l in &lines[..PROBLEMS.len()] {
        assert_eq!(l["dir"], "bwd_wb");
        assert!(names_of("bwd_b").contains(&l["bias_algo"].as_str().unwrap()));
        assert!(l["ms"].as_f64().unwrap() >= l["bias_ms"].as_f64().unwrap());
    }
    assert_eq!(lines.last().unwrap()["dir"], "bwd_wb");

    // The table prints the same totals.
    args.retain(|a| *a != "--json");
    args[2] = "all";
    let out = ok(&args);
    assert!(
        out.lines().last().unwrap().starts_with("total all"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// .npy files

fn problem(p: &str, layout: Layout) -> ConvProblem {
    ProblemSpec::parse(p).unwrap().to_problem(layout).unwrap()
}

/// Shapes of x, w and y in files of `layout`.
fn shapes(p: &ConvProblem, layout: Layout) -> [Vec<usize>; 3] {
    let [n, c, h, w] = p.x().dims();
    let [k, cg, r, s] = p.w().dims();
    let [_, _, oh, ow] = p.y().dims();
    match layout {
        Layout::Nchw => [vec![n, c, h, w], vec![k, cg, r, s], vec![n, k, oh, ow]],
        _ => [vec![n, h, w, c], vec![k, r, s, cg], vec![n, oh, ow, k]],
    }
}

fn ints(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 9) as f32 - 4.0
        })
        .collect()
}

fn write(path: &Path, shape: &[usize], data: &[f32]) {
    autodnn::npy::write_f32(path, shape, data).unwrap();
}

fn read(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let a = autodnn::npy::read_f32(path).unwrap();
    (a.shape, a.data)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn exact(got: &[f32], oracle: &[f64]) {
    assert_eq!(got.len(), oracle.len());
    for (i, (&g, &r)) in got.iter().zip(oracle).enumerate() {
        assert_eq!(g as f64, r, "element {i}");
    }
}

#[test]
fn npy_backward_data_and_filter_equal_the_oracle() {
    for (p_str, layout, flag) in [
        (PROBLEMS[0], Layout::Nchw, "nchw"),
        (PROBLEMS[1], Layout::Nchw, "nchw"),
        (PROBLEMS[1], Layout::Nhwc, "nhwc"),
    ] {
        let dir = TempDir::new("npybwd");
        let p = problem(p_str, layout);
        let [xs, ws, ys] = shapes(&p, layout);
        let (x, w, dy) = (
            ints(p.x().span(), 1),
            ints(p.w().elements(), 2),
            ints(p.y().span(), 3),
        );
        let (xp, wp, dyp) = (dir.path("x.npy"), dir.path("w.npy"), dir.path("dy.npy"));
        write(&xp, &xs, &x);
        write(&wp, &ws, &w);
        write(&dyp, &ys, &dy);

        // bwd_d: dx from dy and w.
        let dxp = dir.path("dx.npy");
        let out = ok(&[
            "conv",
            p_str,
            "--dir",
            "bwd_d",
            "--algo",
            "direct",
            "--layout",
            flag,
            "--weights",
            s(&wp),
            "--dy",
            s(&dyp),
            "--output",
            s(&dxp),
            "--json",
            "--check",
        ]);
        let v = json_lines(&out);
        assert_eq!(v[0]["dir"], "bwd_d");
        assert_eq!(v[0]["max_rel_err"].as_f64(), Some(0.0), "{out}");
        let (shape, dx) = read(&dxp);
        assert_eq!(shape, xs);
        let pd = p.for_op(OpKind::ConvBackwardData).unwrap();
        exact(
            &dx,
            &autodnn::reference::conv_backward_data(&pd, &dy, &w).unwrap(),
        );

        // bwd_w: dw from x and dy.
        let dwp = dir.path("dw.npy");
        let out = ok(&[
            "conv",
            p_str,
            "--dir",
            "bwd_w",
            "--algo",
            "direct",
            "--layout",
            flag,
            "--input",
            s(&xp),
            "--dy",
            s(&dyp),
            "--output",
            s(&dwp),
            "--json",
        ]);
        assert_eq!(json_lines(&out)[0]["dir"], "bwd_w");
        let (shape, dw) = read(&dwp);
        assert_eq!(shape, ws);
        let pw = p.for_op(OpKind::ConvBackwardFilter).unwrap();
        let dw_ref = autodnn::reference::conv_backward_filter(&pw, &x, &dy).unwrap();
        exact(&dw, &dw_ref);

        // bwd_wb: dw and db; alpha scales both (beta scales the zeros of a new output).
        let dbp = dir.path("db.npy");
        let out = ok(&[
            "conv",
            p_str,
            "--dir",
            "bwd_wb",
            "--algo",
            "direct",
            "--layout",
            flag,
            "--input",
            s(&xp),
            "--dy",
            s(&dyp),
            "--output",
            s(&dwp),
            "--output-bias",
            s(&dbp),
            "--alpha",
            "2",
            "--beta",
            "1",
            "--json",
        ]);
        let v = json_lines(&out);
        assert_eq!(v[0]["dir"], "bwd_wb");
        assert!(v[0]["bias"]["algo"].is_string(), "{out}");
        let (_, dw) = read(&dwp);
        let twice: Vec<f64> = dw_ref.iter().map(|v| 2.0 * v).collect();
        exact(&dw, &twice);
        let (shape, db) = read(&dbp);
        assert_eq!(shape, [p.w().k()]);
        let pb = p.for_op(OpKind::ConvBackwardBias).unwrap();
        let db_ref: Vec<f64> = autodnn::reference::conv_backward_bias(&pb, &dy)
            .unwrap()
            .iter()
            .map(|v| 2.0 * v)
            .collect();
        exact(&db, &db_ref);
    }
}

/// A version 1.0 .npy file of float64 zeros of `shape`.
fn f8_npy(shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + 8 * shape.iter().product::<usize>(), 0);
    b
}

#[test]
fn npy_backward_bad_input_exits_2() {
    let dir = TempDir::new("npybwdbad");
    let p_str = PROBLEMS[0];
    let p = problem(p_str, Layout::Nchw);
    let [xs, ws, ys] = shapes(&p, Layout::Nchw);
    let (xp, wp, gp) = (dir.path("x.npy"), dir.path("w.npy"), dir.path("g.npy"));
    write(&xp, &xs, &ints(p.x().span(), 1));
    write(&wp, &ws, &ints(p.w().elements(), 2));
    // A dy of the wrong shape (x's): the error names dy and the file.
    write(&gp, &xs, &ints(p.x().span(), 3));
    let out = dir.path("out.npy");
    let bwd_d = |w: &Path, dy: &Path| {
        bad(&[
            "conv",
            p_str,
            "--dir",
            "bwd_d",
            "--algo",
            "direct",
            "--weights",
            s(w),
            "--dy",
            s(dy),
            "--output",
            s(&out),
        ])
    };
    let err = bwd_d(&wp, &gp);
    assert!(err.contains("dy") && err.contains("g.npy"), "{err}");
    assert!(err.contains(&format!("{ys:?}")), "{err}");
    let err = bad(&[
        "conv",
        p_str,
        "--dir",
        "bwd_w",
        "--algo",
        "direct",
        "--input",
        s(&xp),
        "--dy",
        s(&gp),
        "--output",
        s(&out),
    ]);
    assert!(err.contains("dy") && err.contains("g.npy"), "{err}");
    // A missing dy file.
    let err = bwd_d(&wp, &dir.path("missing.npy"));
    assert!(err.contains("missing.npy"), "{err}");
    // A dy of another dtype (float64), and a file that is no .npy at all.
    let dy64 = dir.path("dy64.npy");
    std::fs::write(&dy64, f8_npy(&ys)).unwrap();
    let err = bwd_d(&wp, &dy64);
    assert!(err.contains("dy64.npy") && err.contains("f8"), "{err}");
    let junk = dir.path("junk.npy");
    std::fs::write(&junk, b"not a numpy file").unwrap();
    let err = bwd_d(&junk, &gp);
    assert!(err.contains("junk.npy"), "{err}");
    assert!(!out.exists(), "nothing written on bad input");

    // Flags the direction does not take, or lacks.
    let err = bad(&[
        "conv",
        p_str,
        "--dir",
        "bwd_d",
        "--algo",
        "direct",
        "--weights",
        s(&wp),
        "--output",
        s(&out),
    ]);
    assert!(err.contains("--dy"), "{err}");
    let err = bad(&[
        "conv",
        p_str,
        "--dir",
        "bwd_d",
        "--algo",
        "direct",
        "--input",
        s(&xp),
        "--weights",
        s(&wp),
        "--dy",
        s(&gp),
        "--output",
        s(&out),
    ]);
    assert!(err.contains("--input"), "{err}");
    let err = bad(&[
        "conv",
        p_str,
        "--algo",
        "direct",
        "--input",
        s(&xp),
        "--weights",
        s(&wp),
        "--dy",
        s(&gp),
        "--output",
        s(&out),
    ]);
    assert!(err.contains("--dy"), "{err}");
    let err = bad(&[
        "conv",
        p_str,
        "--dir",
        "bwd_wb",
        "--algo",
        "direct",
        "--input",
        s(&xp),
        "--dy",
        s(&gp),
        "--output",
        s(&out),
    ]);
    assert!(err.contains("--output-bias"), "{err}");
    let err = bad(&[
        "conv",
        p_str,
        "--dir",
        "bwd_w",
        "--algo",
        "direct",
        "--input",
        s(&xp),
        "--dy",
        s(&gp),
        "--output",
        s(&out),
        "--bias",
        s(&wp),
    ]);
    assert!(err.contains("--bias"), "{err}");
}
