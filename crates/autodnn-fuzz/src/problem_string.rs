//! benchdnn problem strings: parse, print, re-parse; every accepted problem through the
//! convolution checks.

use autodnn::{parse_problem_list, ConvProblem, Error, Layout, ProblemSpec};

use crate::conv_checks::{check_problem, handle};

/// Parses `data` (invalid UTF-8 replaced) as one problem string and as a problem list.
pub fn problem_string(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let seed = data
        .iter()
        .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b));
    let h = handle(seed as usize);
    match ProblemSpec::parse(&text) {
        Ok(spec) => accepted(&spec, h, seed),
        Err(e) => assert!(
            matches!(e, Error::Parse { .. } | Error::Unsupported { .. }),
            "a parse error of another kind: {e:?}"
        ),
    }
    // The list form: lines, comments. Parsed lines print and re-parse alike; the problems
    // themselves were checked above when the text is one line.
    match parse_problem_list(&text) {
        Ok(specs) => {
            for spec in specs {
                round_trip(&spec);
            }
        }
        Err(e) => assert!(
            matches!(e, Error::Parse { .. } | Error::Unsupported { .. }),
            "a list error of another kind: {e:?}"
        ),
    }
}

fn round_trip(spec: &ProblemSpec) {
    let printed = spec.to_string();
    let again = ProblemSpec::parse(&printed)
        .unwrap_or_else(|e| panic!("{printed:?} printed from {spec:?} does not parse: {e}"));
    assert_eq!(&again, spec, "{printed:?} re-parses differently");
    assert!(spec.count() >= 1);
}

fn accepted(spec: &ProblemSpec, h: &autodnn::Handle, seed: u64) {
    round_trip(spec);
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let p: ConvProblem = spec
            .to_problem(layout)
            .unwrap_or_else(|e| panic!("{spec} parses but does not convert ({layout:?}): {e}"));
        assert_eq!(p.x().dims(), [spec.mb, spec.ic, spec.ih, spec.iw]);
        assert_eq!(p.y().dims(), [spec.mb, spec.oc, spec.oh, spec.ow]);
        assert_eq!(
            ProblemSpec::from_problem(&p, &spec.name),
            *spec,
            "from_problem gives back the spec"
        );
        check_problem(&p, h, seed);
    }
}
