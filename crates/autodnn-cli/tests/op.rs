//! `autodnn op` end to end: every operator and direction checked against the f64 reference
//! through the command, a run on .npy data, bad input (exit 2, one line naming what is wrong),
//! and `peak --memory`.

mod common;

use std::process::Command;

use common::{json_lines, TempDir, BIN};

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).output().expect("autodnn runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_operator_passes_its_check() {
    let cases: &[&[&str]] = &[
        &["act", "2x5x6x7", "--alg", "gelu_erf"],
        &[
            "act", "2x5x6x7", "--alg", "relu", "--dir", "bwd", "--beta", "0.5",
        ],
        &[
            "act", "3x17", "--alg", "elu:0.5", "--layout", "nhwc", "--alpha", "2",
        ],
        &["pool", "mb2ic3ih13oh7kh3sh2ph1", "--alg", "max"],
        &["pool", "mb2ic3ih13oh7kh3sh2ph1", "--dir", "fwd_i"],
        &[
            "pool",
            "mb2ic9ih13oh7kh3sh2ph1",
            "--dir",
            "bwd",
            "--layout",
            "nhwc",
            "--beta",
            "1",
        ],
        &["pool", "mb2ic3ih13oh7kh3sh2ph1", "--dir", "bwd"],
        &[
            "pool",
            "mb2ic3ih13oh7kh3sh2ph1",
            "--alg",
            "avg_p",
            "--dir",
            "bwd",
        ],
        &[
            "pool",
            "mb1ic8ih7kh7",
            "--alg",
            "avg_np",
            "--layout",
            "nhwc",
        ],
        &["softmax", "3x17", "--alg", "logsoftmax"],
        &["softmax", "2x5x6x7", "--dir", "bwd", "--layout", "nhwc"],
        &["softmax", "2x5x6x7", "--mode", "instance", "--beta", "1"],
        &["bnorm", "mb2ic5ih6iw7"],
        &["bnorm", "mb2ic5ih6", "--dir", "fwd_i", "--layout", "nhwc"],
        &["bnorm", "mb2ic5ih6", "--dir", "bwd"],
        &["lnorm", "2x5x6x7"],
        &["lnorm", "2x5x6x7", "--dir", "bwd"],
        &["tensor", "2x5x6x7:1x5x1x1", "--alg", "mul"],
        &[
            "tensor",
            "2x5x6x7:2x1x6x7",
            "--alg",
            "add_tensor",
            "--beta",
            "1",
        ],
        &["reduce", "2x5x6x7:1x5x1x1", "--alg", "norm2"],
        &["transform", "2x5x6x7", "--to", "nhwc"],
        &[
            "transform",
            "2x5x6x7",
            "--layout",
            "nhwc",
            "--to",
            "nchw",
            "--beta",
            "2",
        ],
    ];
    for c in cases {
        let mut args = vec!["op"];
        args.extend_from_slice(c);
        args.extend_from_slice(&["--check", "--json", "--reps", "2", "--threads", "2"]);
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{c:?}: {err}");
        let rows = json_lines(&out);
        assert_eq!(rows.len(), 1, "{c:?}");
        let r = &rows[0];
        assert_eq!(r["op"], c[0], "{c:?}");
        let e = r["max_rel_err"].as_f64().expect("max_rel_err");
        assert!(e <= 1e-5, "{c:?}: max_rel_err {e}");
        assert!(r["ms"].as_f64().unwrap() > 0.0 && r["gbps"].as_f64().unwrap() > 0.0);
    }
    // The table form has one row per problem.
    let (code, out, _) = run(&["op", "act", "4x4", "1x2x3x4", "--reps", "1"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 3, "{out}");
}

#[test]
fn a_run_on_npy_data_writes_the_output() {
    let dir = TempDir::new("op-npy");
    let (x, y) = (dir.path("x.npy"), dir.path("y.npy"));
    let data: Vec<f32> = (0..24).map(|v| v as f32 - 12.0).collect();
    autodnn::npy::write_f32(&x, &[1, 2, 3, 4], &data).unwrap();
    let xs = x.to_str().unwrap();
    let ys = y.to_str().unwrap();
    let (code, _, err) = run(&[
        "op", "act", "1x2x3x4", "--alg", "relu", "--input", xs, "--output", ys,
    ]);
    assert_eq!(code, 0, "{err}");
    let got = autodnn::npy::read_f32(&y).unwrap();
    assert_eq!(got.shape, vec![1, 2, 3, 4]);
    let want: Vec<f32> = data.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(got.data, want);
    // NHWC: the arrays are (N, H, W, C); max pooling 2x2 of the 4x4 single-channel image.
    let (p, q) = (dir.path("p.npy"), dir.path("q.npy"));
    let img: Vec<f32> = (0..16).map(|v| v as f32).collect();
    autodnn::npy::write_f32(&p, &[1, 4, 4, 1], &img).unwrap();
    let (code, _, err) = run(&[
        "op",
        "pool",
        "mb1ic1ih4oh2kh2sh2",
        "--layout",
        "nhwc",
        "--input",
        p.to_str().unwrap(),
        "--output",
        q.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let got = autodnn::npy::read_f32(&q).unwrap();
    assert_eq!(got.shape, vec![1, 2, 2, 1]);
    assert_eq!(got.data, vec![5.0, 7.0, 13.0, 15.0]);
    // A wrong shape is bad input naming the file.
    let (code, _, err) = run(&["op", "act", "1x2x3x5", "--input", xs, "--output", ys]);
    assert_eq!(code, 2);
    assert!(
        err.contains("x.npy") && err.contains("expected shape"),
        "{err}"
    );
    // Backward needs dy.
    let (code, _, err) = run(&[
        "op", "act", "1x2x3x4", "--dir", "bwd", "--input", xs, "--output", ys,
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--dy"), "{err}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["act", "4x0"], "4x0"),
        (&["act", "4x4", "--alg", "bogus"], "--alg"),
        (&["act", "4x4", "--dir", "fwd_i"], "fwd_i"),
        (&["act", "4x4", "--dir", "sideways"], "--dir"),
        (&["pool", "mb1ic1ih4kh9"], "kernel"),
        (&["pool", "mb1ic1ih4kh2", "--alg", "median"], "--alg"),
        (&["softmax", "4x4", "--mode", "rows"], "--mode"),
        (&["bnorm", "mb1ih4"], "ic"),
        (&["bnorm", "mb1ic2ih4", "--alg", "x"], "--alg"),
        (&["tensor", "2x3:2x4", "--alg", "add"], "b"),
        (&["reduce", "2x3x4x5:2x3x4x2"], "c"),
        (&["transform", "2x3", "--dir", "bwd"], "fwd only"),
        (&["act", "4x4", "--alpha", "inf"], "alpha"),
    ];
    for (c, needle) in cases {
        let mut args = vec!["op"];
        args.extend_from_slice(c);
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{c:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{c:?}: {err}");
        assert!(err.contains(needle), "{c:?}: {err} lacks {needle}");
    }
}

#[test]
fn peak_memory_reports_a_bandwidth() {
    let (code, out, err) = run(&["peak", "--memory", "--threads", "1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r = &json_lines(&out)[0];
    assert_eq!(r["memory"], true);
    assert!(r["gbps"].as_f64().unwrap() > 0.1, "{r}");
}
