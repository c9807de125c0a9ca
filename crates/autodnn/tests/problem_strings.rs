//! benchdnn problem strings: every parsing rule, the errors, the canonical form, and a round
//! trip of every list in `data/shapes/`.

use std::path::{Path, PathBuf};

use autodnn::{models, parse_problem_list, read_problems, Error, Layout, ProblemSpec};

fn parse(s: &str) -> ProblemSpec {
    ProblemSpec::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

/// (ih, oh, kh, sh, ph, dh, bottom) and the same for w.
fn geometry(p: &ProblemSpec) -> [(usize, usize, usize, usize, i64, usize, i64); 2] {
    [
        (p.ih, p.oh, p.kh, p.sh, p.ph, p.dh, p.pad_bottom()),
        (p.iw, p.ow, p.kw, p.sw, p.pw, p.dw, p.pad_right()),
    ]
}

#[test]
fn defaults() {
    let p = parse("ic3ih5oc4kh3");
    assert_eq!(
        p,
        ProblemSpec {
            mb: 2,
            g: 1,
            ic: 3,
            ih: 5,
            iw: 5,
            oc: 4,
            oh: 3,
            ow: 3,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            ph: 0,
            pw: 0,
            dh: 0,
            dw: 0,
            name: String::new(),
        }
    );
    assert_eq!(p.count(), 1);
    assert_eq!((p.pad_bottom(), p.pad_right()), (0, 0));
}

#[test]
fn any_order_and_separators() {
    let canonical = parse("mb1g2ic4ih9iw7oc6oh9ow7kh3kw3sh1sw1ph1pw1dh0dw0n\"x\"");
    for s in [
        "n\"x\"kh3oc6g2ih9mb1ic4ph1iw7",
        "mb1_g2_ic4_ih9_iw7_oc6_kh3_ph1_n\"x\"",
        "_mb1__g2ic4_ih9iw7_oc6kh3ph1n\"x\"_",
        "  mb1g2ic4ih9iw7oc6kh3ph1n\"x\"\t\n",
        "iw7ow7pw1ih9oh9ph1kh3oc6ic4g2mb1n\"x\"",
    ] {
        assert_eq!(parse(s), canonical, "{s}");
    }
}

#[test]
fn square_problems_copy_h_into_w() {
    let p = parse("mb1ic16oc16ih16kh3ph1oh15");
    assert_eq!(
        geometry(&p),
        [(16, 15, 3, 1, 1, 0, 0), (16, 15, 3, 1, 1, 0, 0)]
    );
    // Asymmetric: ph deduced as 0 (truncated), bottom 1; the width copies all of it.
    let p = parse("mb1ic16oc16ih16kh3oh15");
    assert_eq!(
        geometry(&p),
        [(16, 15, 3, 1, 0, 0, 1), (16, 15, 3, 1, 0, 0, 1)]
    );
    let p = parse("ic8oc8ih20kh3sh2dh1ph2");
    assert_eq!(p.geometry_w(), (20, 10, 3, 2, 2, 1));
    assert_eq!(geometry(&p)[0], geometry(&p)[1]);
}

trait GeomW {
    fn geometry_w(&self) -> (usize, usize, usize, usize, i64, usize);
}
impl GeomW for ProblemSpec {
    fn geometry_w(&self) -> (usize, usize, usize, usize, i64, usize) {
        (self.iw, self.ow, self.kw, self.sw, self.pw, self.dw)
    }
}

#[test]
fn partial_w_copies_missing_fields() {
    // iw given: kw, sw, dw, pw copy the h values, ow follows.
    let p = parse("ic3oc3ih16iw20kh3ph1");
    assert_eq!(p.geometry_w(), (20, 20, 3, 1, 1, 0));
    // ph deduced from oh (1); pw copies it; ow follows from iw.
    let p = parse("ic3oc3ih16iw20oh16kh3");
    assert_eq!((p.ph, p.oh), (1, 16));
    assert_eq!(p.geometry_w(), (20, 20, 3, 1, 1, 0));
    // kw given: the rest copies h.
    let p = parse("ic3oc3ih16kh3sh2kw1");
    assert_eq!((p.oh, p.ph), (7, 0));
    assert_eq!(p.geometry_w(), (16, 8, 1, 2, 0, 0));
    // Both ow and pw given: nothing deduced from h but the kernel and strides.
    let p = parse("mb1ic16oc16_ih16kh3ph1oh16_iw16kw3pw0ow15");
    assert_eq!(
        geometry(&p),
        [(16, 16, 3, 1, 1, 0, 1), (16, 15, 3, 1, 0, 0, 1)]
    );
}

#[test]
fn one_dimensional_problems() {
    let p = parse("ic19oc32_iw13ow12kw3pw1_n\"tails_conv_1d:1\"");
    assert_eq!(
        geometry(&p),
        [(1, 1, 1, 1, 0, 0, 0), (13, 12, 3, 1, 1, 0, 0)]
    );
    let p = parse("ic228oc126_iw48ow12kw1sw4dw0pw0");
    assert_eq!(
        geometry(&p),
        [(1, 1, 1, 1, 0, 0, 0), (48, 12, 1, 4, 0, 0, -3)]
    );
    let p = parse("ic20oc32_iw13kw1pw0");
    assert_eq!(geometry(&p)[1], (13, 13, 1, 1, 0, 0, 0));
    let y = p.to_problem(Layout::Nchw).unwrap();
    assert_eq!(y.y().dims(), [2, 32, 1, 13]);
}

#[test]
fn output_from_padding() {
    // oh = (224 + 6 - 7) / 2 + 1 = 112; bottom = 111*2 + 7 - 224 - 3 = 2.
    let p = parse("ic3oc64ih224kh7sh2ph3");
    assert_eq!(geometry(&p)[0], (224, 112, 7, 2, 3, 0, 2));
    // Neither given: padding 0.
    let p = parse("ic3oc64ih10kh3sh3");
    assert_eq!(geometry(&p)[0], (10, 3, 3, 3, 0, 0, -1));
    // Padding larger than the kernel.
    let p = parse("ic1oc1ih1kh1ph5");
    assert_eq!(geometry(&p)[0], (1, 11, 1, 1, 5, 0, 5));
}

#[test]
fn padding_from_output() {
    let p = parse("ic64oc64ih56oh56kh3");
    assert_eq!(geometry(&p)[0], (56, 56, 3, 1, 1, 0, 1));
    // (27*2 - 56 + 1) / 2 = -1/2 truncates toward zero to 0 (floor would give -1); the bottom
    // padding is then -1: the last input row is never read.
    let p = parse("ic256oc128ih56oh28kh1sh2");
    assert_eq!(geometry(&p)[0], (56, 28, 1, 2, 0, 0, -1));
    assert_eq!(
        p.to_problem(Layout::Nchw).unwrap().conv().padding().bottom,
        -1
    );
    // Odd total padding: the extra row goes to the bottom. (15 - 16 + 5)/2 = 2, bottom 2.
    let p = parse("ic1oc1ih16oh16kh5");
    assert_eq!(geometry(&p)[0], (16, 16, 5, 1, 2, 0, 2));
    let p = parse("ic1oc1ih16oh17kh5");
    assert_eq!(geometry(&p)[0], (16, 17, 5, 1, 2, 0, 3));
    // -3/2 truncates to -1: refused, naming ph.
    let e = ProblemSpec::parse("ic1oc1ih16oh13kh1").unwrap_err();
    assert_parse_error(&e, &["ph", "-1"]);
}

#[test]
fn dilation_counts_from_zero() {
    let p = parse("ic1oc1ih10kh3dh1");
    assert_eq!(geometry(&p)[0], (10, 6, 3, 1, 0, 1, 0));
    let c = p.to_problem(Layout::Nchw).unwrap();
    assert_eq!(c.conv().dilation(), [2, 2]);
    assert_eq!(c.y().dims(), [2, 1, 6, 6]);
    let p = parse("ic1oc1ih10iw10kh3kw3dh0dw3ph0pw0");
    assert_eq!(
        p.to_problem(Layout::Nhwc).unwrap().conv().dilation(),
        [1, 4]
    );
    assert_eq!((p.oh, p.ow), (8, 2));
    // Padding from output with dilation: ((10-1) - 10 + 5) / 2 = 2.
    let p = parse("ic1oc1ih10oh10kh3dh1");
    assert_eq!(geometry(&p)[0], (10, 10, 3, 1, 2, 1, 2));
}

#[test]
fn depth_one_is_two_dimensional() {
    let base = "mb1ic16oc16ih3kh3iw1kw1oh1ow1ph0pw0dh3dw0";
    let p = parse(base);
    assert_eq!(geometry(&p)[0], (3, 1, 3, 1, 0, 3, 6));
    assert_eq!(
        parse("mb1_ic16oc16_kd1kh3kw1_id1ih3iw1_od1oh1ow1_sd1sh1sw1_pd0ph0pw0_dd0dh3dw0"),
        p
    );
    for depth in [
        "id1",
        "od1",
        "kd1",
        "pd0",
        "kd1sd2dd5",
        "id1od1pd0sd7",
        "id1kd1od1sd1pd0dd0",
    ] {
        assert_eq!(parse(&format!("{base}{depth}")), p, "{depth}");
        assert_eq!(parse(&format!("{depth}_{base}")), p, "{depth}");
    }
}

#[test]
fn three_dimensional_problems_are_refused() {
    for s in [
        "ic3oc4id5ih5kd3kh3",
        "ic32oc13_id13od11kd3pd0_ih13oh12kh3ph0_iw13ow12kw3pw0_n\"tails_conv_3d:1\"",
        "g17mb16ic17id5oc17od5kd3pd1_n\"tails_conv_3d:7\"",
        "ic3oc4ih5kh3id1kd1pd1",
        "ic3oc4ih5kh3id1kd1od1pd1",
        "ic3oc4ih5kh3od2",
        "ic3oc4ih5kh3kd2pd1",
    ] {
        match ProblemSpec::parse(s) {
            Err(Error::Unsupported { what }) => assert!(what.contains("3-D"), "{s}: {what}"),
            other => panic!("{s}: expected Unsupported 3-D, got {other:?}"),
        }
    }
}

#[test]
fn canonical_print() {
    let p = parse("mb1ic64ih56oc64oh56kh3ph1n\"resnet_50:res2a_branch2b*3\"");
    assert_eq!(
        p.to_string(),
        "mb1g1ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1dh0dw0n\"resnet_50:res2a_branch2b*3\""
    );
    let p = parse("mb1_g1ic3oc32_ih224oh112kh3sh2dh0ph1_iw224ow112kw3sw2dw0pw1_n\"x\"");
    assert_eq!(
        p.to_string(),
        "mb1g1ic3ih224iw224oc32oh112ow112kh3kw3sh2sw2ph1pw1dh0dw0n\"x\""
    );
    // No name: n"" left out, and an explicit empty name is the same spec.
    let p = parse("ic3ih5oc4kh3");
    assert_eq!(
        p.to_string(),
        "mb2g1ic3ih5iw5oc4oh3ow3kh3kw3sh1sw1ph0pw0dh0dw0"
    );
    assert_eq!(parse("ic3ih5oc4kh3n\"\""), p);
    assert_eq!(p.to_string().parse::<ProblemSpec>().unwrap(), p);
    // Negative bottom padding round-trips (it is implied, not printed).
    let p = parse("ic256oc128ih56oh28kh1sh2");
    assert_eq!(parse(&p.to_string()), p);
}

#[test]
fn count_suffix() {
    assert_eq!(parse("ic3ih5oc4kh3n\"a:b*3\"").count(), 3);
    assert_eq!(parse("ic3ih5oc4kh3n\"a:b*18\"").count(), 18);
    assert_eq!(parse("ic3ih5oc4kh3n\"a:b\"").count(), 1);
    assert_eq!(parse("ic3ih5oc4kh3").count(), 1);
    assert_eq!(parse("ic3ih5oc4kh3n\"a*b\"").count(), 1);
    assert_eq!(parse("ic3ih5oc4kh3n\"a*\"").count(), 1);
    assert_eq!(parse("ic3ih5oc4kh3n\"a*2*5\"").count(), 5);
    for s in [
        "ic3ih5oc4kh3n\"a*0\"",
        "ic3ih5oc4kh3n\"a*00\"",
        "ic3ih5oc4kh3n\"a*99999999999999999999999\"",
    ] {
        let e = ProblemSpec::parse(s).unwrap_err();
        assert_parse_error(&e, &["n:", "*"]);
    }
    // with_mb keeps everything else.
    let p = parse("mb50ic3ih5oc4kh3n\"a*4\"");
    let q = p.with_mb(1);
    assert_eq!((q.mb, q.count(), q.ih), (1, 4, 5));
}

fn assert_parse_error(e: &Error, needles: &[&str]) {
    match e {
        Error::Parse { reason, .. } => {
            for n in needles {
                assert!(reason.contains(n), "reason {reason:?} should mention {n:?}");
            }
        }
        other => panic!("expected a parse error mentioning {needles:?}, got {other:?}"),
    }
}

#[test]
fn bad_strings() {
    let nines = "9".repeat(60);
    let huge_ic = format!("ic{nines}oc4ih5kh3");
    let cases: Vec<(&str, &[&str])> = vec![
        ("", &["missing ic"]),
        ("   ", &["missing ic"]),
        ("oc4ih5kh3", &["missing ic"]),
        ("ic3ih5kh3", &["missing oc"]),
        ("ic3oc4kh3", &["missing ih"]),
        ("ic3oc4", &["missing ih"]),
        ("ic3oc4sh2iw5kw3", &["missing ih"]),
        ("ic3oc4ih5", &["missing kh"]),
        ("ic3oc4ih5oh5ph1", &["missing kh"]),
        ("ic3oc4iw5", &["missing kw"]),
        ("ic3oc4kw3ow5", &["missing iw"]),
        ("ic3ic3oc4ih5kh3", &["duplicate", "ic"]),
        ("ic3oc4ih5kh3ih5", &["duplicate", "ih"]),
        ("ic3oc4ih5kh3n\"a\"n\"b\"", &["duplicate", "n"]),
        ("ic3oc4ih5kh3xy2", &["unknown field", "xy"]),
        ("ic3oc4ih5kh3q1", &["unknown field", "q"]),
        ("ic3oc4ih5kh3icx2", &["unknown field", "icx"]),
        ("IC3oc4ih5kh3", &["field name", "'I'"]),
        ("ic3oc4ih5kh3!", &["field name", "'!'"]),
        ("ic3oc4ih5kh3 mb1", &["field name", "' '"]),
        ("ic3oc4ih5kh3n\"x\"junk", &["unknown field", "junk"]),
        ("ic3oc4ih5kh3n\"x\"9", &["field name", "'9'"]),
        ("5ic3oc4ih5kh3", &["field name", "'5'"]),
        ("ic3oc4ih5kh3.5", &["field name", "'.'"]),
        ("ic3oc4ih5kh3é", &["field name", "'é'"]),
        ("ic3oc4ih5kh", &["kh", "number"]),
        ("ic3oc4ih5khmb1", &["unknown field", "khmb"]),
        ("ic3oc4ih5kh-", &["kh", "number"]),
        ("ic3oc4ih5kh--1", &["kh", "number"]),
        ("ic3oc4ih5kh3n\"abc", &["unterminated", "n"]),
        ("ic3oc4ih5kh3n\"", &["unterminated", "n"]),
        ("ic3oc4ih5kh3nabc", &["unknown field", "nabc"]),
        ("ic3oc4ih5kh3n5", &["n", "quoted"]),
        ("ic0oc4ih5kh3", &["ic = 0", "at least 1"]),
        ("ic3oc0ih5kh3", &["oc = 0"]),
        ("mb0ic3oc4ih5kh3", &["mb = 0"]),
        ("g0ic3oc4ih5kh3", &["g = 0"]),
        ("ic3oc4ih0kh3", &["ih = 0"]),
        ("ic3oc4ih5iw0kh3", &["iw = 0"]),
        ("ic3oc4ih5kh0", &["kh = 0"]),
        ("ic3oc4ih5kh3kw0", &["kw = 0"]),
        ("ic3oc4ih5kh3oh0", &["oh = 0"]),
        ("ic3oc4ih5kh3ow0", &["ow = 0"]),
        ("ic3oc4ih5kh3sh0", &["sh = 0"]),
        ("ic3oc4ih5kh3sw0", &["sw = 0"]),
        ("ic3oc4ih5kh3id0", &["id = 0"]),
        ("ic3oc4ih5kh3sd0", &["sd = 0"]),
        ("ic3oc4ih5kh3mb-1", &["mb = -1"]),
        ("ic3oc4ih5kh3ph-1", &["ph = -1", "padding"]),
        ("ic3oc4ih5kh3pw-2", &["pw = -2", "padding"]),
        ("ic3oc4ih5kh3dh-1", &["dh = -1", "dilation"]),
        (
            "ic3oc4ih5kh3mb99999999999999999999999",
            &["mb = 9999", "too large"],
        ),
        (huge_ic.as_str(), &["ic = 9999", "too large"]),
        ("ic3oc4ih5kh3ph99999999999999999999", &["ph", "too large"]),
        ("ic3oc4ih5kh3dh18446744073709551616", &["dh", "too large"]),
        ("ic3oc4ih2kh3", &["empty output", "ih"]),
        ("ic3oc4ih5kh3dh2", &["empty output", "dh"]),
        ("ic3oc4ih5iw2kh3", &["empty output", "iw"]),
        ("ic3oc4iw2kw3", &["empty output", "iw"]),
        ("ic3oc4ih16oh5kh3", &["ph", "at least 0"]),
        ("ic3oc4ih16iw16kh3ow5", &["pw", "at least 0"]),
        ("g2ic3oc4ih5kh3", &["ic = 3", "g = 2"]),
        ("g2ic4oc3ih5kh3", &["oc = 3", "g = 2"]),
        ("ic3oc4ih5kh3n\"x*0\"", &["n:", "*0"]),
        ("ic3oc4ih5kh3sh3000000000", &["sh", "stride"]),
        ("ic3oc4ih5kh3ph3000000000", &["ph", "pad"]),
        ("ic3oc4ih5kh3dh3000000000", &["dh"]),
        ("ic3oc4ih5kh3ph0oh3000000000", &["oh", "pad"]),
        ("g3000000000ic3000000000oc3000000000ih5kh3", &["g"]),
        (
            "mb9999999999ic9999999999oc4ih5kh3",
            &["mb/ic/ih/iw", "overflow"],
        ),
        (
            "ic1oc4000000000000ih1kh4000000000oh1",
            &["oc/ic/g/kh/kw", "overflow"],
        ),
        (
            "ic1oc1ih18446744073709551615kh18446744073709551615dh18446744073709551615",
            &["too large"],
        ),
        (
            "ic1oc1ih1kh1oh18446744073709551615sh18446744073709551615",
            &["too large"],
        ),
    ];
    for (s, needles) in cases {
        match ProblemSpec::parse(s) {
            Err(e @ Error::Parse { .. }) => {
                assert_parse_error(&e, needles);
                if let Error::Parse { input, .. } = &e {
                    assert_eq!(input, s);
                }
                // The message is one line that shows the input and the reason.
                assert!(e.to_string().contains("bad problem string"));
            }
            other => panic!("{s:?}: expected a parse error mentioning {needles:?}, got {other:?}"),
        }
    }
}

/// A tiny deterministic generator for the mutation test.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn mutated_strings_never_panic() {
    let seeds = [
        "mb1_g1ic3oc32_ih224oh112kh3sh2dh0ph1_iw224ow112kw3sw2dw0pw1_n\"x*2\"",
        "g2mb256ic96ih27oc256oh27kh5ph2n\"alexnet:conv2\"",
        "mb1ic16oc16_ih16kh3ph1oh15_iw16kw3pw0ow15",
        "ic19oc32_iw13ow12kw3pw1_n\"tails_conv_1d:1\"",
        "mb1_ic16oc16_kd1kh3kw1_id1ih3iw1_od1oh1ow1_sd1sh1sw1_pd0ph0pw0_dd0dh3dw0",
    ];
    let alphabet: &[u8] = b"0123456789_-\"#*nmbgiockhwdspx 9999999999999999999";
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut parsed = 0;
    for _ in 0..20_000 {
        let mut s: Vec<u8> = seeds[rng.below(seeds.len())].as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(s.len() + 1);
            match rng.below(4) {
                0 if at < s.len() => {
                    s.remove(at);
                }
                1 => s.insert(at, alphabet[rng.below(alphabet.len())]),
                2 if at < s.len() => s[at] = alphabet[rng.below(alphabet.len())],
                _ => s.truncate(at),
            }
        }
        let s = String::from_utf8(s).unwrap();
        if let Ok(p) = ProblemSpec::parse(&s) {
            parsed += 1;
            assert_eq!(parse(&p.to_string()), p, "{s}");
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let c = p
                    .to_problem(layout)
                    .unwrap_or_else(|e| panic!("{s}: parsed but does not convert: {e}"));
                assert_eq!(c.y().dims(), [p.mb, p.oc, p.oh, p.ow], "{s}");
            }
        }
    }
    // Most mutations still parse (a digit changed, a separator added): the test exercises both.
    assert!(parsed > 1000, "only {parsed} mutated strings parsed");
}

#[test]
fn lists_skip_comments_and_blank_lines() {
    let text = "# a list\n\
                \n\
                mb1ic3ih5oc4kh3n\"a#b*2\"   # the name holds a '#'\n\
                \t  \n\
                ic3ih5oc4kh3 # trailing comment\r\n\
                #ic3ih5oc4kh3\n\
                ic3ih5oc4kh3n\"q\"#\n";
    let list = parse_problem_list(text).unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0].name, "a#b*2");
    assert_eq!(list[0].count(), 2);
    assert_eq!(list[1], parse("ic3ih5oc4kh3"));
    assert_eq!(list[2].name, "q");
    assert!(parse_problem_list("").unwrap().is_empty());
    assert!(parse_problem_list("# nothing\n\n").unwrap().is_empty());

    let e = parse_problem_list("ic3ih5oc4kh3\n\n# c\nic3ih5kh3\n").unwrap_err();
    match e {
        Error::Parse { input, reason } => {
            assert_eq!(input, "ic3ih5kh3");
            assert!(reason.starts_with("line 4: "), "{reason}");
            assert!(reason.contains("missing oc"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let e = parse_problem_list("ic3ih5oc4kh3\nic3id3ih5oc4kh3\n").unwrap_err();
    match e {
        Error::Unsupported { what } => {
            assert!(what.starts_with("line 2: "), "{what}");
            assert!(what.contains("3-D"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    // An unterminated quote on a line makes '#' part of the (broken) name: an error.
    let e = parse_problem_list("ic3ih5oc4kh3n\"ab # c\n").unwrap_err();
    assert_parse_error(&e, &["line 1", "unterminated"]);
}

#[test]
fn read_problems_takes_a_file_or_a_string() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("autodnn-problems-{}.txt", std::process::id()));
    std::fs::write(&path, "# list\nmb1ic3ih5oc4kh3\n\nic8ih7oc8kh1n\"b*2\"\n").unwrap();
    let list = read_problems(path.to_str().unwrap());
    std::fs::write(&path, "ic3ih5oc4kh3\nic3ih5oc4kh3ph-1\n").unwrap();
    let bad = read_problems(path.to_str().unwrap());
    std::fs::remove_file(&path).unwrap();
    let list = list.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].count(), 2);
    match bad.unwrap_err() {
        Error::Parse { reason, .. } => {
            assert!(reason.contains("line 2"), "{reason}");
            assert!(reason.contains(path.to_str().unwrap()), "{reason}");
            assert!(reason.contains("ph = -1"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    let one = read_problems("mb1ic3ih5oc4kh3").unwrap();
    assert_eq!(one, vec![parse("mb1ic3ih5oc4kh3")]);
    assert!(matches!(
        read_problems("no-such-file-or-problem"),
        Err(Error::Parse { .. })
    ));
    // A directory exists but cannot be read as a list.
    assert!(matches!(
        read_problems(dir.to_str().unwrap()),
        Err(Error::Io { .. })
    ));
}

#[test]
fn to_problem_and_back() {
    let p = parse("mb2g2ic8ih10iw12oc6oh5ow6kh3kw2sh2sw2ph1pw0dh1dw0n\"z\"");
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let c = p.to_problem(layout).unwrap();
        assert_eq!(c.x().dims(), [2, 8, 10, 12]);
        assert_eq!(c.x().layout(), Some(layout));
        assert_eq!(c.y().layout(), Some(layout));
        assert_eq!(c.w().dims(), [6, 4, 3, 2]);
        let fl = match layout {
            Layout::Nchw => autodnn::FilterLayout::Kcrs,
            Layout::Nhwc => autodnn::FilterLayout::Krsc,
        };
        assert_eq!(c.w().layout(), fl);
        assert_eq!(c.groups(), 2);
        assert_eq!(c.conv().stride(), [2, 2]);
        assert_eq!(c.conv().dilation(), [2, 1]);
        assert_eq!(c.conv().mode(), autodnn::ConvMode::CrossCorrelation);
        let pad = c.conv().padding();
        assert_eq!(
            (pad.top, pad.bottom, pad.left, pad.right),
            (1, p.pad_bottom(), 0, p.pad_right())
        );
        assert_eq!(c.y().dims(), [2, 6, 5, 6]);
        assert_eq!(ProblemSpec::from_problem(&c, "z"), p);
    }
    // Inconsistent hand-made specs give errors, not panics.
    let bad = [
        (ProblemSpec { g: 3, ..p.clone() }, "ic"),
        (ProblemSpec { g: 4, ..p.clone() }, "oc"),
        (ProblemSpec { g: 0, ..p.clone() }, "g"),
        (ProblemSpec { mb: 0, ..p.clone() }, "x.n"),
        (ProblemSpec { kh: 0, ..p.clone() }, "w.r"),
        (ProblemSpec { sh: 0, ..p.clone() }, "conv.stride_h"),
        (
            ProblemSpec {
                ph: -1,
                ..p.clone()
            },
            "conv.pad_top",
        ),
        (
            ProblemSpec {
                dh: usize::MAX,
                ..p.clone()
            },
            "dh",
        ),
        (ProblemSpec { oh: 0, ..p.clone() }, "y.h"),
        (
            ProblemSpec {
                oh: usize::MAX,
                ..p.clone()
            },
            "conv.pad_bottom",
        ),
    ];
    for (spec, field) in bad {
        match spec.to_problem(Layout::Nchw) {
            Err(Error::BadParam { field: f, .. }) => assert_eq!(f, field, "{spec:?}"),
            other => panic!("{spec:?}: expected BadParam {field}, got {other:?}"),
        }
    }
}

fn shapes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/shapes")
}

/// An independent reading of the depth fields: a line is 3-D when it gives id, od or kd other
/// than 1 or pd other than 0.
fn is_3d(line: &str) -> bool {
    let fields = line.split("n\"").next().unwrap();
    let b = fields.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let key = &fields[start..i];
        let num_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let num: u64 = fields[num_start..i].parse().unwrap_or(0);
        match key {
            "id" | "od" | "kd" if num != 1 => return true,
            "pd" if num != 0 => return true,
            _ => {}
        }
        if i == start {
            i += 1;
        }
    }
    false
}

#[test]
fn every_shipped_problem_round_trips() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(shapes_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("shapes_")
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), 14, "{files:?}");
    let mut ok = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}: {line}", file.display(), n + 1);
            assert!(
                !line.trim().is_empty() && !line.trim_start().starts_with('#'),
                "{at}: comments and blank lines were to be left out"
            );
            assert!(!is_3d(line), "{at}: 3-D problems belong in refused_3d");
            let p = ProblemSpec::parse(line).unwrap_or_else(|e| panic!("{at}: {e}"));
            let printed = p.to_string();
            assert_eq!(parse(&printed), p, "{at}");
            assert_eq!(parse(&printed).to_string(), printed, "{at}");
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let c = p
                    .to_problem(layout)
                    .unwrap_or_else(|e| panic!("{at} ({layout:?}): {e}"));
                assert_eq!(c.y().dims(), [p.mb, p.oc, p.oh, p.ow], "{at}");
                assert_eq!(c.x().dims(), [p.mb, p.ic, p.ih, p.iw], "{at}");
                assert_eq!(ProblemSpec::from_problem(&c, &p.name), p, "{at}");
            }
            ok += 1;
        }
        // The list parser agrees with the line-by-line parse.
        let list = parse_problem_list(&text).unwrap();
        assert_eq!(list.len(), text.lines().count(), "{}", file.display());
    }
    assert_eq!(ok, 2919);
}

#[test]
fn shipped_3d_problems_are_refused() {
    let text = std::fs::read_to_string(shapes_dir().join("refused_3d")).unwrap();
    let mut refused = 0;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        assert!(is_3d(line), "line {}: {line} is not 3-D", n + 1);
        match ProblemSpec::parse(line) {
            Err(Error::Unsupported { what }) => assert!(what.contains("3-D"), "{line}: {what}"),
            other => panic!("{line}: expected a 3-D refusal, got {other:?}"),
        }
        refused += 1;
    }
    assert_eq!(refused, 13);
    match parse_problem_list(&text) {
        Err(Error::Unsupported { what }) => assert!(what.starts_with("line 4: "), "{what}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn built_in_models() {
    assert_eq!(
        models::names(),
        [
            "resnet50",
            "mobilenet",
            "mobilenet_v1",
            "mobilenet_dw",
            "googlenet_v1",
            "vgg11",
            "alexnet",
            "yolov2"
        ]
    );
    for name in models::names() {
        let layers = models::layers(name).unwrap();
        assert!(!layers.is_empty(), "{name}");
        for l in &layers {
            l.to_problem(Layout::Nhwc).unwrap();
        }
    }
    let resnet = models::layers("resnet50").unwrap();
    assert_eq!(resnet.len(), 20);
    assert_eq!(resnet.iter().map(ProblemSpec::count).sum::<usize>(), 53);
    assert!(resnet.iter().all(|l| l.mb == 50));
    assert_eq!(resnet[0].name, "resnet_50:conv1");
    assert_eq!((resnet[0].kh, resnet[0].oh, resnet[0].ph), (7, 112, 3));
    // The built-in lists are the shipped files.
    let file = std::fs::read_to_string(shapes_dir().join("shapes_resnet_50")).unwrap();
    assert_eq!(parse_problem_list(&file).unwrap(), resnet);
    let counts: Vec<usize> = [
        "mobilenet",
        "mobilenet_v1",
        "mobilenet_dw",
        "googlenet_v1",
        "vgg11",
        "alexnet",
        "yolov2",
    ]
    .iter()
    .map(|n| models::layers(n).unwrap().len())
    .collect();
    assert_eq!(counts, [11, 20, 9, 51, 10, 5, 14]);
    let v1 = models::layers("mobilenet_v1").unwrap();
    assert_eq!(v1.iter().map(ProblemSpec::count).sum::<usize>(), 28);
    assert_eq!(v1[0].oh, 112);
    assert!(v1
        .iter()
        .filter(|l| l.g > 1)
        .all(|l| l.g == l.ic && l.ic == l.oc));

    match models::layers("resnet_51") {
        Err(Error::BadParam {
            field,
            value,
            reason,
        }) => {
            assert_eq!(field, "model");
            assert_eq!(value, "resnet_51");
            for n in models::names() {
                assert!(reason.contains(n), "{reason}");
            }
        }
        other => panic!("{other:?}"),
    }
    assert!(models::layers("ResNet50").is_err());
}
