//! Shared test helpers: deterministic integer-valued and real data, problems, running
//! algorithms and exact checks.
#![allow(dead_code)]

use autodnn::conv::{self, Accuracy, ConvAlgorithm, EpilogueArgs, PreparedWeights, Weights};
use autodnn::{
    ConvDesc, ConvMode, ConvProblem, DataType, Error, FilterDesc, FilterLayout, Handle, Layout,
    Padding, ProblemSpec, TensorDesc,
};

/// A handle per (instruction set available here, 1 and 2 threads), with the set and count.
pub fn isa_handles() -> Vec<(autodnn::cpu::Isa, usize, Handle)> {
    let mut out = Vec::new();
    for isa in autodnn::cpu::Isa::ALL
        .into_iter()
        .filter(|i| i.is_available())
    {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            out.push((isa, threads, h));
        }
    }
    out
}

/// [`isa_handles`], each named `ISA xT` for messages.
pub fn handles() -> Vec<(String, Handle)> {
    isa_handles()
        .into_iter()
        .map(|(isa, t, h)| (format!("{isa:?} x{t}"), h))
        .collect()
}

/// An f32 tensor of `dims` whose dimensions are ordered by `perm` (outermost first), each
/// padded by `gap` elements past the ones inside it.
pub fn permuted(dims: [usize; 4], perm: [usize; 4], gap: usize) -> TensorDesc {
    let mut strides = [0; 4];
    let mut reach = 1;
    for &d in perm.iter().rev() {
        strides[d] = reach;
        reach = reach * dims[d] + gap;
    }
    TensorDesc::with_strides(DataType::F32, dims, strides).unwrap()
}

/// splitmix64: a small deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.next_u64() as usize % xs.len()]
    }
}

/// Integer values in [-4, 4] (benchdnn style): every partial sum of the layers tested stays
/// far below 2^24, so f32 accumulation in any order is exact.
pub fn int_data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..len).map(|_| r.range(-4, 4) as f32).collect()
}

/// Values in [−1, 1] in steps of 1/`steps`.
pub fn real_data(len: usize, seed: u64, steps: i64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..len)
        .map(|_| r.range(-steps, steps) as f32 / steps as f32)
        .collect()
}

/// The problem a benchdnn-style string describes, x and y in `layout`.
pub fn problem(s: &str, layout: Layout) -> ConvProblem {
    ProblemSpec::parse(s).unwrap().to_problem(layout).unwrap()
}

/// The registered algorithm called `name`.
pub fn algo(name: &str) -> &'static dyn ConvAlgorithm {
    conv::find(name).unwrap()
}

/// y of a plain call of `name` (y starts as NaN).
pub fn run_plain(h: &Handle, name: &str, p: &ConvProblem, x: &[f32], w: &[f32]) -> Vec<f32> {
    let mut y = vec![f32::NAN; p.y().span()];
    h.conv_forward(p, name, x, w, &mut y).unwrap();
    y
}

/// A call of `name` with prepared weights and the default epilogue, y starting as `fill`.
fn call_prepared(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    x: &[f32],
    prepared: &PreparedWeights,
    fill: f32,
) -> (autodnn::Result<()>, Vec<f32>) {
    let mut y = vec![fill; p.y().span()];
    let r = h.conv_forward_ex(
        p,
        name,
        x,
        Weights::Prepared(prepared),
        &mut y,
        &EpilogueArgs::default(),
        None,
    );
    (r, y)
}

/// y of a call of `name` with prepared weights and the default epilogue (y starts as NaN).
pub fn run_prepared(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    x: &[f32],
    prepared: &PreparedWeights,
) -> Vec<f32> {
    let (r, y) = call_prepared(h, name, p, x, prepared, f32::NAN);
    r.unwrap();
    y
}

/// The error of a call of `name` with prepared weights and the default epilogue.
pub fn prepared_err(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    x: &[f32],
    prepared: &PreparedWeights,
) -> Error {
    call_prepared(h, name, p, x, prepared, 0.0).0.unwrap_err()
}

/// Runs `name` plainly and checks max|y − ref| ≤ its integer tolerance · max|ref|; returns
/// (max|y − ref|, max|ref|).
pub fn assert_integer_bound(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    x: &[f32],
    w: &[f32],
    r: &[f64],
    what: &str,
) -> (f64, f64) {
    let y = run_plain(h, name, p, x, w);
    let (diff, max) = errors(p, &y, r);
    let tol = algo(name).accuracy().integer_tolerance();
    assert!(
        diff <= tol * max,
        "{name} {what}: max|y − ref| = {diff} > {tol} · max|ref| = {max}"
    );
    (diff, max)
}

/// (max|y − ref|, max|ref|) over the output tensor's elements; panics on a NaN.
pub fn errors(p: &ConvProblem, y: &[f32], r: &[f64]) -> (f64, f64) {
    max_errors(p, y, r, "y")
}

/// [`errors`], naming `what` when it panics on a NaN.
pub fn max_errors(p: &ConvProblem, y: &[f32], r: &[f64], what: &str) -> (f64, f64) {
    let [n, k, oh, ow] = p.y().dims();
    let (mut diff, mut max) = (0.0f64, 0.0f64);
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = p.y().offset(b, c, i, j);
                    let d = (y[o] as f64 - r[o]).abs();
                    assert!(!d.is_nan(), "{what}: y[{b},{c},{i},{j}] = {}", y[o]);
                    diff = diff.max(d);
                    max = max.max(r[o].abs());
                }
            }
        }
    }
    (diff, max)
}

/// y against the reference on integer data: exact for an exact algorithm, within its
/// documented bound (relative to the output's largest value) otherwise.
pub fn assert_within(acc: Accuracy, p: &ConvProblem, y: &[f32], r: &[f64], what: &str) {
    match acc {
        Accuracy::Exact => {
            assert_exact(p, y, r, what);
        }
        acc => {
            let (diff, max) = max_errors(p, y, r, what);
            let e = diff / max.max(1e-30);
            assert!(e <= acc.integer_tolerance(), "{what}: max_rel_err {e}");
        }
    }
}

/// Checks that every element of y inside the tensor equals the f64 reference rounded to f32
/// (+0 and -0 compare equal). Returns the number of elements checked.
pub fn assert_exact(p: &ConvProblem, y: &[f32], reference: &[f64], what: &str) -> usize {
    let [n, k, oh, ow] = p.y().dims();
    let mut count = 0;
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = p.y().offset(b, c, i, j);
                    let want = reference[o] as f32;
                    assert!(
                        y[o] == want,
                        "{what}: y[{b},{c},{i},{j}] = {} but the reference is {want} ({p:?})",
                        y[o]
                    );
                    count += 1;
                }
            }
        }
    }
    count
}

/// Checks y against the reference as the algorithm's accuracy class promises on integer
/// data: exactly for [`Accuracy::Exact`], within `int_rel · max|ref|` for transformed-domain
/// algorithms (max|ref| taken as at least 1: on integer data a smaller maximum means every
/// output is 0, where rounding noise of a transform is not an error worth failing on).
pub fn assert_accurate(p: &ConvProblem, y: &[f32], reference: &[f64], acc: Accuracy, what: &str) {
    if acc == Accuracy::Exact {
        assert_exact(p, y, reference, what);
        return;
    }
    let (diff, max) = max_errors(p, y, reference, what);
    let max = max.max(1.0);
    let tol = acc.integer_tolerance();
    assert!(
        diff <= tol * max,
        "{what}: max|y - ref| = {diff} > {tol} * max|ref| = {max} ({p:?})"
    );
}

fn packed_or_padded(rng: &mut Rng, dims: [usize; 4], layout: Layout) -> TensorDesc {
    let packed = TensorDesc::new(DataType::F32, layout, dims).unwrap();
    if rng.range(0, 3) > 0 {
        return packed;
    }
    // Explicit strides with gaps: rows (or pixels) padded by a few elements.
    let [n, c, h, w] = dims;
    let gap = rng.range(1, 3) as usize;
    let strides = match layout {
        Layout::Nchw => {
            let sw = 1;
            let sh = w + gap;
            let sc = sh * h + gap;
            [sc * c, sc, sh, sw]
        }
        Layout::Nhwc => {
            let sc = 1;
            let sw = c + gap;
            let sh = sw * w + gap;
            [sh * h, sc, sh, sw]
        }
    };
    let _ = n;
    TensorDesc::with_strides(DataType::F32, dims, strides).unwrap()
}

/// A random valid problem covering groups, depthwise, dilation, strides, padding of every
/// sign, 1xN and Nx1 kernels, both layouts, explicit strides and both modes.
pub fn random_problem(rng: &mut Rng) -> ConvProblem {
    loop {
        let depthwise = rng.range(0, 5) == 0;
        let groups = if depthwise {
            rng.range(1, 8) as usize
        } else {
            rng.range(1, 3) as usize
        };
        let cg = if depthwise {
            1
        } else {
            rng.range(1, 6) as usize
        };
        let kg = if depthwise {
            rng.range(1, 2) as usize
        } else {
            rng.range(1, 13) as usize
        };
        let (r, s) = match rng.range(0, 3) {
            0 => (1, rng.range(1, 5) as usize),
            1 => (rng.range(1, 5) as usize, 1),
            _ => (rng.range(1, 4) as usize, rng.range(1, 4) as usize),
        };
        let h = rng.range(1, 20) as usize;
        let w = rng.range(1, 40) as usize;
        let mut stride = [rng.range(1, 3) as usize, rng.range(1, 3) as usize];
        let mut dil = [rng.range(1, 3) as usize, rng.range(1, 3) as usize];
        // A quarter are dense 3x3 stride-1 windows, the only ones some algorithms (Winograd)
        // accept.
        let (r, s) = if rng.range(0, 3) == 0 {
            stride = [1, 1];
            dil = [1, 1];
            (3, 3)
        } else {
            (r, s)
        };
        // Mostly paddings below the kernel, equal or not; a quarter of the problems pad far
        // past the kernel (whole tiles and output rows that see only padding, the x-is-the-
        // matrix shortcut of 1x1 kernels with padding below or right of the image).
        let wide = rng.range(0, 4) == 0;
        let (lo, hi) = if wide { (0, 12) } else { (0, 3) };
        let pad = Padding {
            top: rng.range(lo, hi),
            bottom: rng.range(-3, hi),
            left: rng.range(lo, hi),
            right: rng.range(-3, hi),
        };
        let mode = rng.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
        let layout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let wl = rng.pick(&[FilterLayout::Kcrs, FilterLayout::Krsc]);
        let n = rng.range(1, 2) as usize;
        let x = packed_or_padded(rng, [n, groups * cg, h, w], layout);
        let wd = FilterDesc::new(DataType::F32, wl, [groups * kg, cg, r, s]).unwrap();
        let conv = ConvDesc::new(pad, stride, dil, groups, mode).unwrap();
        let Ok(dims) = ConvProblem::output_dims(&x, &wd, &conv) else {
            continue;
        };
        let ylayout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let y = packed_or_padded(rng, dims, ylayout);
        return ConvProblem::forward(x, wd, conv, y).unwrap();
    }
}

/// A random dilated problem for the atrous algorithms (`kn2row`, `s2b_*`): dilations 1 to 24
/// (mostly above 1) per dimension, strides 1 to 3 (multiples and non-multiples of the
/// dilation), paddings from none to past the image (rows and columns of outputs that see only
/// padding), unequal and negative trailing sides, groups, both modes, both layouts with packed
/// or padded strides, both filter layouts; 3x3 kernels half the time (the Winograd sub-image
/// algorithms' only kernel), a tenth dense 3x3 at stride 1 and a tenth depthwise, so that every
/// registered algorithm meets some of them.
pub fn random_dilated_problem(rng: &mut Rng) -> ConvProblem {
    loop {
        let kind = rng.range(0, 9);
        let (dense, depthwise) = (kind == 0, kind == 1);
        let groups = if depthwise {
            rng.range(1, 6) as usize
        } else {
            rng.range(1, 2) as usize
        };
        let cg = if depthwise {
            1
        } else {
            rng.range(1, 5) as usize
        };
        let kg = if depthwise {
            1
        } else {
            rng.range(1, 9) as usize
        };
        let (r, s) = if dense || rng.range(0, 1) == 0 {
            (3, 3)
        } else {
            (rng.range(1, 4) as usize, rng.range(1, 4) as usize)
        };
        let dil_side = |rng: &mut Rng| match rng.range(0, 5) {
            0 => 1,
            1 | 2 => rng.range(2, 4) as usize,
            _ => rng.range(2, 24) as usize,
        };
        let mut dil = [dil_side(rng), dil_side(rng)];
        let mut stride = match rng.range(0, 3) {
            0 => [rng.range(1, 3) as usize, rng.range(1, 3) as usize],
            _ => [1, 1],
        };
        if dense {
            dil = [1, 1];
            stride = [1, 1];
        }
        let (h, w) = (rng.range(1, 40) as usize, rng.range(1, 40) as usize);
        let side = |rng: &mut Rng, d: usize| match rng.range(0, 4) {
            0 => 0,
            1 => d as i64,
            2 => rng.range(0, 3),
            _ => rng.range(0, 50),
        };
        let (pt, pl) = (side(rng, dil[0]), side(rng, dil[1]));
        let pad = if rng.range(0, 2) == 0 {
            Padding {
                top: pt,
                bottom: pt,
                left: pl,
                right: pl,
            }
        } else {
            Padding {
                top: pt,
                bottom: rng.range(-4, 30),
                left: pl,
                right: rng.range(-4, 30),
            }
        };
        let mode = rng.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
        let layout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let wl = rng.pick(&[FilterLayout::Kcrs, FilterLayout::Krsc]);
        let n = rng.range(1, 2) as usize;
        let x = packed_or_padded(rng, [n, groups * cg, h, w], layout);
        let wd = FilterDesc::new(DataType::F32, wl, [groups * kg, cg, r, s]).unwrap();
        let conv = ConvDesc::new(pad, stride, dil, groups, mode).unwrap();
        let Ok(dims) = ConvProblem::output_dims(&x, &wd, &conv) else {
            continue;
        };
        // Keep the f64 reference quick: skip the rare huge outputs of wide padding.
        if dims[2] * dims[3] > 4096 {
            continue;
        }
        let ylayout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let y = packed_or_padded(rng, dims, ylayout);
        return ConvProblem::forward(x, wd, conv, y).unwrap();
    }
}

/// A random depthwise problem (groups == input channels, channel multiplier 1 to 3) for the
/// `depthwise` algorithm's frames: both layouts with packed or padded strides, the unrolled
/// 3x3 and 5x5 kernels at strides 1 and 2 (rows of at most half a vector too, where two
/// channels share one), other kernels, strides, dilations and paddings of every sign; a sixth
/// are large (up to 150 channels of 40x40), more than one work item's stage holds.
pub fn random_depthwise_problem(rng: &mut Rng) -> ConvProblem {
    loop {
        let large = rng.range(0, 6) == 0;
        let c = if large {
            rng.range(100, 150)
        } else {
            rng.range(1, 40)
        } as usize;
        let mult = if rng.range(0, 3) == 0 {
            rng.range(2, 3) as usize
        } else {
            1
        };
        let (h, w) = if large {
            (rng.range(20, 40) as usize, rng.range(20, 40) as usize)
        } else {
            (rng.range(1, 24) as usize, rng.range(1, 24) as usize)
        };
        let (r, s) = match rng.range(0, 5) {
            0 | 1 => (3, 3),
            2 => (5, 5),
            3 => (rng.range(1, 4) as usize, rng.range(1, 4) as usize),
            _ => (1, rng.range(1, 7) as usize),
        };
        let st = rng.range(1, 2) as usize;
        let stride = if rng.range(0, 4) == 0 {
            [rng.range(1, 3) as usize, rng.range(1, 3) as usize]
        } else {
            [st, st]
        };
        let dil = if rng.range(0, 4) == 0 {
            [rng.range(1, 2) as usize, rng.range(1, 2) as usize]
        } else {
            [1, 1]
        };
        let p = rng.range(0, 2);
        let pad = if rng.range(0, 3) == 0 {
            Padding {
                top: rng.range(0, 4),
                bottom: rng.range(-2, 4),
                left: rng.range(0, 4),
                right: rng.range(-2, 4),
            }
        } else {
            Padding {
                top: p,
                bottom: p,
                left: p,
                right: p,
            }
        };
        let mode = rng.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
        let layout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let n = rng.range(1, 2) as usize;
        let x = packed_or_padded(rng, [n, c, h, w], layout);
        let wd = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [c * mult, 1, r, s]).unwrap();
        let conv = ConvDesc::new(pad, stride, dil, c, mode).unwrap();
        let Ok(dims) = ConvProblem::output_dims(&x, &wd, &conv) else {
            continue;
        };
        let y = packed_or_padded(rng, dims, layout);
        return ConvProblem::forward(x, wd, conv, y).unwrap();
    }
}

/// One side's padding, biased toward the cases that once broke algorithms: none (so that a
/// 1x1 kernel's x is the patch matrix), small, far wider than the kernel, and (bottom and
/// right only) negative.
fn padding_side(rng: &mut Rng, may_be_negative: bool) -> i64 {
    match rng.range(0, 4) {
        0 | 1 => 0,
        2 => rng.range(1, 2),
        3 => rng.range(3, 12),
        _ if may_be_negative => rng.range(-3, -1),
        _ => rng.range(1, 2),
    }
}

/// A random problem whose paddings are the point: dense small kernels (1x1, 3x3, 5x5, 1x3,
/// 3x1, 2x2), mostly stride 1, every side padded independently by [`padding_side`] (unequal
/// top and bottom, wider than the kernel, negative bottom and right), both layouts, explicit
/// strides and both modes.
pub fn random_padded_problem(rng: &mut Rng) -> ConvProblem {
    loop {
        let (r, s) = rng.pick(&[
            (1, 1),
            (1, 1),
            (3, 3),
            (3, 3),
            (5, 5),
            (1, 3),
            (3, 1),
            (2, 2),
        ]);
        let groups = rng.range(1, 2) as usize;
        let cg = rng.range(1, 4) as usize;
        let kg = rng.range(1, 6) as usize;
        let h = rng.range(1, 16) as usize;
        let w = rng.range(1, 24) as usize;
        let stride = if rng.range(0, 3) > 0 {
            [1, 1]
        } else {
            [rng.range(1, 2) as usize, rng.range(1, 2) as usize]
        };
        let pad = Padding {
            top: padding_side(rng, false),
            bottom: padding_side(rng, true),
            left: padding_side(rng, false),
            right: padding_side(rng, true),
        };
        let mode = rng.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
        let layout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let wl = rng.pick(&[FilterLayout::Kcrs, FilterLayout::Krsc]);
        // Batches of 2 too: the batch-split algorithms need one.
        let n = rng.range(1, 2) as usize;
        let x = packed_or_padded(rng, [n, groups * cg, h, w], layout);
        let wd = FilterDesc::new(DataType::F32, wl, [groups * kg, cg, r, s]).unwrap();
        let conv = ConvDesc::new(pad, stride, [1, 1], groups, mode).unwrap();
        let Ok(dims) = ConvProblem::output_dims(&x, &wd, &conv) else {
            continue;
        };
        let ylayout = rng.pick(&[Layout::Nchw, Layout::Nhwc]);
        let y = packed_or_padded(rng, dims, ylayout);
        return ConvProblem::forward(x, wd, conv, y).unwrap();
    }
}
