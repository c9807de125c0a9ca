//! The seed corpus of the `capi` harness, `fuzz/corpus/capi/`, written from a description of
//! each input (the calls it makes), so that every seed reaches deep: a valid small problem
//! of each direction run by a chosen algorithm, the bias gradient, GEMM shapes, names and
//! NULL arguments. The test fails when a committed seed differs from what it describes;
//! `AUTODNN_BLESS=1 cargo test -p autodnn-fuzz --test capi_seeds` rewrites them.

use std::path::{Path, PathBuf};

use autodnn::op::{Algorithm, ConvBackwardData, ConvBackwardFilter, ConvForward, Registered};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/capi")
}

/// Bytes as the harness's reader takes them (`crate::input::Bytes`).
#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// An int of the harness (`int`): the small branch, then `size`'s small branch.
    fn int(&mut self, v: u8) -> &mut Self {
        self.u8(3).u8(0).u8(v)
    }
    /// An int of 256 to 1279 (`size`'s moderate branch).
    fn int_wide(&mut self, v: u16) -> &mut Self {
        self.u8(3).u8(11).u8((v % 256) as u8).u8((v / 256) as u8)
    }
    /// A size of the reader's small branch.
    fn size(&mut self, v: u8) -> &mut Self {
        self.u8(0).u8(v)
    }
}

fn index<O: Registered>(name: &str) -> u8 {
    let i = O::algorithms()
        .iter()
        .position(|a| a.name() == name)
        .unwrap_or_else(|| panic!("no algorithm {name} in {}", O::NAME));
    u8::try_from(i).expect("a small index")
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Fwd,
    Data,
    Filter,
}

/// One convolution step, as `capi::conv` decodes it.
#[derive(Clone, Copy)]
struct Conv {
    fresh: bool,
    threads2: bool,
    half: bool,
    g: u8,
    cg: u8,
    kg: u8,
    n: u8,
    ih: u16,
    iw: u16,
    r: u8,
    s: u8,
    nhwc: bool,
    /// Explicit strides, packed with this gap after each row.
    gap: Option<u8>,
    pad: u8,
    stride: u8,
    dilation: u8,
    convolution: bool,
    groups_first: bool,
    dir: Dir,
    /// The requested record count of the list query.
    requested: u8,
    find: bool,
    bias: bool,
    /// The algorithm to run: a name, or AUTO.
    algo: Option<&'static str>,
    scaled: bool,
}

const BASE: Conv = Conv {
    fresh: false,
    threads2: false,
    half: false,
    g: 1,
    cg: 2,
    kg: 3,
    n: 1,
    ih: 8,
    iw: 8,
    r: 3,
    s: 3,
    nhwc: false,
    gap: None,
    pad: 1,
    stride: 1,
    dilation: 1,
    convolution: false,
    groups_first: false,
    dir: Dir::Fwd,
    requested: 4,
    find: false,
    bias: false,
    algo: Some("direct"),
    scaled: false,
};

fn handle(e: &mut Enc, fresh: bool, threads2: bool) {
    if fresh {
        e.u8(0).u8(u8::from(threads2));
    } else {
        e.u8(1).u8(u8::from(threads2));
    }
}

fn tensor(e: &mut Enc, nhwc: bool, gap: Option<u8>) {
    match gap {
        None => {
            // Packed in a format.
            e.u8(0).u8(if nhwc { 1 } else { 2 });
        }
        Some(gap) => {
            // Explicit strides with a gap: the NCHW or NHWC order.
            e.u8(2).u8(0).u8(gap).u8(u8::from(!nhwc));
        }
    }
}

fn conv(e: &mut Enc, c: &Conv) {
    e.u8(3)
        .u64(0x5eed_0000 + u64::from(c.ih) * 7 + u64::from(c.kg));
    handle(e, c.fresh, c.threads2);
    // configure: no limit, no determinism, (fresh) no policy.
    e.u8(1).u8(1);
    if c.fresh {
        e.u8(1);
    }
    // Data type.
    e.u8(if c.half { 0 } else { 3 });
    for v in [c.g, c.cg, c.kg, c.n] {
        e.int(v);
    }
    // Images of 256 rows or columns and more take the moderate branch.
    for v in [c.ih, c.iw] {
        if v >= 256 {
            e.int_wide(v);
        } else {
            e.int(v as u8);
        }
    }
    e.int(c.r).int(c.s);
    // Nothing left unset.
    e.u8(23);
    tensor(e, c.nhwc, c.gap);
    // Filter: same type, format, channels.
    e.u8(1).u8(if c.nhwc { 1 } else { 2 }).u8(1);
    // Padding, strides, dilations, mode, compute type, groups.
    e.u8(1).u8(c.pad).u8(c.pad);
    e.int(c.stride)
        .int(c.stride)
        .int(c.dilation)
        .int(c.dilation);
    e.u8(if c.convolution { 2 } else { 1 });
    e.u8(1).u8(1).u8(u8::from(c.groups_first));
    // y: the output's dimensions, same type, the tensor's layout.
    e.u8(1).u8(1);
    tensor(e, c.nhwc, c.gap);
    e.u8(match c.dir {
        Dir::Fwd => 0,
        Dir::Data => 1,
        Dir::Filter => 2,
    });
    // The list: `requested` records, room for them.
    e.u8(5).u8(c.requested).u8(1);
    if c.fresh {
        e.u8(if c.find { 0 } else { 1 });
    }
    // One workspace query, of the algorithm to run.
    let algo = match (c.algo, c.dir) {
        (None, _) => None,
        (Some(a), Dir::Fwd) => Some(index::<ConvForward>(a)),
        (Some(a), Dir::Data) => Some(index::<ConvBackwardData>(a)),
        (Some(a), Dir::Filter) => Some(index::<ConvBackwardFilter>(a)),
    };
    e.u8(0);
    match algo {
        Some(i) => e.u8(3).u8(i),
        None => e.u8(0),
    };
    // The bias gradient: db 1 x K x 1 x 1, packed.
    if c.bias {
        e.u8(0).u8(1).u8(1).u8(0).u8(2).u8(u8::from(c.scaled));
    } else {
        e.u8(1);
    }
    // The run: algorithm, scales, no fault, the caller's workspace.
    match algo {
        Some(i) => e.u8(3).u8(i),
        None => e.u8(0),
    };
    e.u8(u8::from(c.scaled)).u8(1).u8(0);
}

/// One GEMM step, as `capi::gemm` decodes it.
struct Gemm {
    ta: u8,
    tb: u8,
    m: u8,
    n: u8,
    k: u8,
    /// Extra rows of each leading dimension (`None`: a bad one, 0).
    slack: [Option<u8>; 3],
    scales: u8,
    batch: Option<u8>,
}

fn gemm(e: &mut Enc, g: &Gemm) {
    e.u8(2);
    handle(e, false, true);
    // op: 3 → N, 1 → T, 2 → C.
    let op = |t: u8| match t {
        0 => 3,
        v => v,
    };
    e.u8(op(g.ta)).u8(op(g.tb));
    e.int(g.m).int(g.n).int(g.k);
    for s in g.slack {
        match s {
            Some(v) => e.u8(1).u8(v),
            None => e.u8(0).int(0),
        };
    }
    e.u8(g.scales);
    match g.batch {
        None => {
            e.u8(1);
        }
        Some(b) => {
            // Batched: count, then strides of each operand's span plus a gap of 1.
            e.u8(0).int(b);
            e.u8(2).u8(1).u8(2).u8(1).u8(2).u8(1);
        }
    }
    e.u64(0x6e44);
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let mut one = |name: &'static str, f: &dyn Fn(&mut Enc)| {
        let mut e = Enc::default();
        f(&mut e);
        out.push((name, e.0));
    };
    let step = |c: Conv| move |e: &mut Enc| conv(e.u8(0), &c);
    one("fwd_direct_3x3", &step(BASE));
    one(
        "fwd_winograd_4x4_scaled",
        &step(Conv {
            algo: Some("winograd_4x4"),
            scaled: true,
            ..BASE
        }),
    );
    one(
        "fwd_winograd_2x2",
        &step(Conv {
            algo: Some("winograd_2x2"),
            ..BASE
        }),
    );
    one(
        "fwd_fft_5x5",
        &step(Conv {
            algo: Some("fft"),
            r: 5,
            s: 5,
            pad: 2,
            ..BASE
        }),
    );
    one(
        "fwd_implicit_gemm_nhwc",
        &step(Conv {
            algo: Some("implicit_gemm"),
            nhwc: true,
            ..BASE
        }),
    );
    one(
        "fwd_gemm_strided_gap",
        &step(Conv {
            algo: Some("gemm"),
            gap: Some(2),
            stride: 2,
            n: 2,
            ..BASE
        }),
    );
    one(
        "fwd_depthwise",
        &step(Conv {
            algo: Some("depthwise"),
            g: 4,
            cg: 1,
            kg: 1,
            groups_first: true,
            ..BASE
        }),
    );
    one(
        "fwd_grouped_dilated_convolution",
        &step(Conv {
            g: 2,
            dilation: 2,
            pad: 2,
            convolution: true,
            threads2: true,
            ..BASE
        }),
    );
    one(
        "fwd_auto",
        &step(Conv {
            algo: None,
            scaled: true,
            threads2: true,
            ..BASE
        }),
    );
    one(
        "fwd_fresh_handle_find",
        &step(Conv {
            fresh: true,
            find: true,
            requested: 20,
            ..BASE
        }),
    );
    one("fwd_half_refused", &step(Conv { half: true, ..BASE }));
    one(
        "fwd_too_large_to_run",
        &step(Conv {
            ih: 300,
            iw: 300,
            cg: 8,
            ..BASE
        }),
    );
    one(
        "bwd_data_direct_bias",
        &step(Conv {
            dir: Dir::Data,
            bias: true,
            ..BASE
        }),
    );
    one(
        "bwd_data_gemm_scaled",
        &step(Conv {
            dir: Dir::Data,
            algo: Some("gemm"),
            scaled: true,
            stride: 2,
            ..BASE
        }),
    );
    one(
        "bwd_data_winograd_4x4",
        &step(Conv {
            dir: Dir::Data,
            algo: Some("winograd_4x4"),
            ..BASE
        }),
    );
    one(
        "bwd_data_fft_nhwc",
        &step(Conv {
            dir: Dir::Data,
            algo: Some("fft"),
            nhwc: true,
            ..BASE
        }),
    );
    one(
        "bwd_filter_direct_bias_scaled",
        &step(Conv {
            dir: Dir::Filter,
            bias: true,
            scaled: true,
            ..BASE
        }),
    );
    one(
        "bwd_filter_gemm_grouped",
        &step(Conv {
            dir: Dir::Filter,
            algo: Some("gemm"),
            g: 2,
            ..BASE
        }),
    );
    one(
        "bwd_filter_winograd_4x4",
        &step(Conv {
            dir: Dir::Filter,
            algo: Some("winograd_4x4"),
            ..BASE
        }),
    );
    one(
        "bwd_filter_depthwise_auto",
        &step(Conv {
            dir: Dir::Filter,
            algo: None,
            g: 3,
            cg: 1,
            kg: 1,
            ..BASE
        }),
    );
    one("gemm_nn", &|e| {
        gemm(
            e.u8(0),
            &Gemm {
                ta: 0,
                tb: 0,
                m: 5,
                n: 3,
                k: 4,
                slack: [Some(0), Some(1), Some(2)],
                scales: 0,
                batch: None,
            },
        )
    });
    one("gemm_tc_scaled", &|e| {
        gemm(
            e.u8(0),
            &Gemm {
                ta: 1,
                tb: 2,
                m: 7,
                n: 6,
                k: 9,
                slack: [Some(2), Some(0), Some(0)],
                scales: 1,
                batch: None,
            },
        )
    });
    one("gemm_batched_tn", &|e| {
        gemm(
            e.u8(0),
            &Gemm {
                ta: 1,
                tb: 0,
                m: 4,
                n: 5,
                k: 3,
                slack: [Some(1), Some(0), Some(1)],
                scales: 3,
                batch: Some(3),
            },
        )
    });
    one("gemm_bad_ldb", &|e| {
        gemm(
            e.u8(0),
            &Gemm {
                ta: 0,
                tb: 0,
                m: 4,
                n: 4,
                k: 6,
                slack: [Some(0), None, Some(0)],
                scales: 0,
                batch: None,
            },
        )
    });
    one("names", &|e| {
        // Three rounds of count, name, index (by index and by a name's letters).
        e.u8(0).u8(0).u8(2);
        for (dir, algo) in [(0u8, 13u8), (1, 2), (2, 40)] {
            e.int(dir).u8(1).int(algo);
            e.u8(6);
            for ch in b"direct" {
                let i = b"directgemmwinogradfft_x0"
                    .iter()
                    .position(|c| c == ch)
                    .unwrap();
                e.u8(i as u8);
            }
        }
        e.int(3).u8(5).size(8);
    });
    for (name, case) in [
        ("nulls_handle_create", 0u8),
        ("nulls_get_tensor", 8),
        ("nulls_v7_returned", 18),
        ("nulls_forward_alpha", 24),
        ("nulls_bias", 28),
        ("nulls_fused", 29),
        ("nulls_sgemm", 30),
        ("nulls_load_cache", 37),
    ] {
        one(name, &move |e| {
            e.u8(0).u8(1).u8(1).u8(0).u8(case);
        });
    }
    one("mixed_names_nulls_fwd", &|e| {
        e.u8(2)
            .u8(0)
            .u8(0)
            .int(0)
            .u8(1)
            .int(1)
            .u8(0)
            .int(2)
            .u8(0)
            .size(0);
        e.u8(1).u8(1).u8(1).u8(21);
        conv(
            e,
            &Conv {
                algo: Some("winograd_6x6"),
                ih: 10,
                iw: 10,
                ..BASE
            },
        );
    });
    out
}

#[test]
fn capi_seeds_are_the_described_inputs() {
    let dir = corpus_dir();
    let bless = std::env::var_os("AUTODNN_BLESS").is_some();
    if bless {
        std::fs::create_dir_all(&dir).expect("the corpus folder");
    }
    for (name, bytes) in seeds() {
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, &bytes).expect("writing a seed");
        }
        let got = std::fs::read(&path).unwrap_or_default();
        assert!(
            got == bytes,
            "{} differs from its description (AUTODNN_BLESS=1 rewrites it)",
            path.display()
        );
        // Each seed passes its harness.
        autodnn_fuzz::capi(&bytes);
    }
}
