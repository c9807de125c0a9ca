//! benchdnn problem strings (oneDNN's test format) <-> problems.
//!
//! A problem string lists fields, each a name and a number, in any order, optionally separated
//! by `_`: `mb8ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3"`. The fields are
//!
//! | field | meaning | default |
//! |---|---|---|
//! | `mb` | minibatch | 2 |
//! | `g` | groups | 1 |
//! | `ic`, `oc` | input and output channels (all groups) | required |
//! | `ih`, `iw` | input height and width | required (see below) |
//! | `oh`, `ow` | output height and width | deduced |
//! | `kh`, `kw` | kernel height and width | required (see below) |
//! | `sh`, `sw` | stride | 1 |
//! | `ph`, `pw` | top and left padding | deduced |
//! | `dh`, `dw` | dilation, counted from 0 (dense) | 0 |
//! | `id`, `od`, `kd`, `sd`, `pd`, `dd` | the same for depth | a depth of 1 |
//! | `n"..."` | the layer's name, possibly ending in `*N` | empty |
//!
//! Rules:
//! - Without any `w` field the problem is square: the width copies the height, output and
//!   padding included. When some `w` fields are given, each missing one of `iw`, `kw`, `sw`,
//!   `dw` copies its `h` counterpart; when both `ow` and `pw` are missing, `pw` copies the
//!   (given or deduced) `ph` and `ow` follows from it — or, where the width's input, kernel,
//!   stride and dilation equal the height's, the whole height (`ow = oh`, `pw = ph`) is copied.
//! - Without any `h` field the problem is 1-D: `ih = oh = kh = sh = 1`, `ph = 0`, `dh = 0`.
//! - Output size and padding are deduced from each other:
//!   `o = (i + 2p - ((k-1)(d+1)+1)) / s + 1` when `o` is missing (with `p = 0` when both are),
//!   and `p = ((o-1)s - i + (k-1)(d+1)+1) / 2`, truncated toward zero, when `p` is missing. The
//!   bottom (right) padding is always what the output size implies,
//!   `(o-1)s + (k-1)(d+1)+1 - i - p`, and may be negative (trailing rows no window reaches).
//! - Depth fields are accepted when they describe a depth of 1 (`id1 kd1 od1 pd0`, any
//!   stride and dilation); real 3-D problems are refused with [`Error::Unsupported`].
//! - Every size (`mb g ic oc i* o* k* s*`) must be at least 1, dilation and padding at least
//!   0; numbers that do not fit, duplicate or unknown fields, an unterminated name, an empty
//!   output, a negative deduced top padding and anything left over are errors that name the
//!   field.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::desc::{
    ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, Padding,
    TensorDesc,
};
use crate::error::{Error, Result};

/// A 2-D convolution in benchdnn's terms (dilation counted from 0 = dense, padding top/left
/// only; bottom/right follow from the output size), plus the layer's name.
///
/// # Examples
/// ```
/// use autodnn::{Layout, ProblemSpec};
/// let spec = ProblemSpec::parse(r#"mb8ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3""#)?;
/// assert_eq!((spec.iw, spec.ow, spec.kw, spec.pw), (56, 56, 3, 1));
/// assert_eq!(spec.count(), 3);
/// assert_eq!(
///     spec.to_string(),
///     r#"mb8g1ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1dh0dw0n"resnet_50:res2a_branch2b*3""#
/// );
/// let p = spec.to_problem(Layout::Nhwc)?;
/// assert_eq!(p.y().dims(), [8, 64, 56, 56]);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProblemSpec {
    /// Minibatch.
    pub mb: usize,
    /// Groups.
    pub g: usize,
    /// Input channels (all groups).
    pub ic: usize,
    /// Input height.
    pub ih: usize,
    /// Input width.
    pub iw: usize,
    /// Output channels (all groups).
    pub oc: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride, height.
    pub sh: usize,
    /// Stride, width.
    pub sw: usize,
    /// Top padding.
    pub ph: i64,
    /// Left padding.
    pub pw: i64,
    /// Dilation, height, benchdnn style (0 = dense).
    pub dh: usize,
    /// Dilation, width, benchdnn style (0 = dense).
    pub dw: usize,
    /// The layer's name (without quotes), possibly ending in `*N`.
    pub name: String,
}

/// Field names, in the order of the value table the tokenizer fills.
const FIELDS: [&str; 22] = [
    "mb", "g", "ic", "oc", // scalars
    "id", "ih", "iw", // input size
    "od", "oh", "ow", // output size
    "kd", "kh", "kw", // kernel
    "sd", "sh", "sw", // stride
    "pd", "ph", "pw", // padding (front/top/left)
    "dd", "dh", "dw", // dilation, from 0
];
const MB: usize = 0;
const G: usize = 1;
const IC: usize = 2;
const OC: usize = 3;
/// Index of quantity `q` (0 i, 1 o, 2 k, 3 s, 4 p, 5 d) along axis `a` (0 d, 1 h, 2 w).
const fn at(q: usize, a: usize) -> usize {
    4 + 3 * q + a
}

/// How a parse fails: a malformed string, or a well-formed 3-D problem.
enum Fail {
    Parse(String),
    ThreeD(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Parse(s)
    }
}

/// The raw values of one spatial axis, as given (range-checked).
#[derive(Clone, Copy, PartialEq, Eq)]
struct AxisRaw {
    i: Option<i128>,
    o: Option<i128>,
    k: Option<i128>,
    s: Option<i128>,
    p: Option<i128>,
    d: Option<i128>,
}

impl AxisRaw {
    fn of(vals: &[Option<i128>; 22], a: usize) -> AxisRaw {
        AxisRaw {
            i: vals[at(0, a)],
            o: vals[at(1, a)],
            k: vals[at(2, a)],
            s: vals[at(3, a)],
            p: vals[at(4, a)],
            d: vals[at(5, a)],
        }
    }
    fn any(&self) -> bool {
        [self.i, self.o, self.k, self.s, self.p, self.d]
            .iter()
            .any(Option::is_some)
    }
}

/// One spatial axis, resolved.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Axis {
    i: usize,
    o: usize,
    k: usize,
    s: usize,
    p: i64,
    d: usize,
}

impl Axis {
    const UNIT: Axis = Axis {
        i: 1,
        o: 1,
        k: 1,
        s: 1,
        p: 0,
        d: 0,
    };
}

/// `(k-1)(d+1)+1`, the extent of a dilated kernel (benchdnn dilation).
fn dilated_kernel(k: i128, d: i128) -> Option<i128> {
    (k - 1).checked_mul(d.checked_add(1)?)?.checked_add(1)
}

/// `(o-1)s + (k-1)(d+1)+1 - i - p`: the end padding an output size implies.
fn implied_end_pad(i: i128, o: i128, k: i128, s: i128, p: i128, d: i128) -> Option<i128> {
    (o - 1)
        .checked_mul(s)?
        .checked_add(dilated_kernel(k, d)?)?
        .checked_sub(i)?
        .checked_sub(p)
}

/// Resolves one axis: `i` and `k` given, `s` and `d` defaulted, `o` and `p` deduced from each
/// other. All values have been range-checked (sizes ≥ 1 and ≤ usize::MAX, p ≥ 0 and ≤ i64::MAX,
/// d ≥ 0 and ≤ usize::MAX).
fn resolve(
    axis: char,
    i: i128,
    o: Option<i128>,
    k: i128,
    s: i128,
    p: Option<i128>,
    d: i128,
) -> Result<Axis, String> {
    let overflow = || {
        format!(
            "i{axis}/k{axis}/d{axis}/s{axis}/o{axis}/p{axis}: the sizes along this axis are too large \
             to compute with"
        )
    };
    let ek = dilated_kernel(k, d).ok_or_else(overflow)?;
    let (o, p) = match (o, p) {
        (Some(o), Some(p)) => (o, p),
        (Some(o), None) => {
            let twice = (o - 1)
                .checked_mul(s)
                .and_then(|v| v.checked_sub(i))
                .and_then(|v| v.checked_add(ek))
                .ok_or_else(overflow)?;
            let p = twice / 2; // truncates toward zero
            if p < 0 {
                return Err(format!(
                    "p{axis} deduced from o{axis} = {o} is {p}, but top/left padding must be at \
                     least 0: o{axis} is too small for i{axis} = {i}, k{axis} = {k}, s{axis} = {s}, \
                     d{axis} = {d} (give p{axis} explicitly, or a larger o{axis})"
                ));
            }
            (o, p)
        }
        (None, p) => {
            let p = p.unwrap_or(0);
            let span = p
                .checked_mul(2)
                .and_then(|v| v.checked_add(i))
                .ok_or_else(overflow)?;
            if span < ek {
                return Err(format!(
                    "empty output along {axis}: i{axis} + 2*p{axis} = {i} + 2*{p} = {span} is smaller \
                     than the dilated kernel (k{axis}-1)*(d{axis}+1)+1 = {ek}"
                ));
            }
            ((span - ek) / s + 1, p)
        }
    };
    let end = implied_end_pad(i, o, k, s, p, d).ok_or_else(overflow)?;
    let side = if axis == 'w' { "right" } else { "bottom" };
    if i64::try_from(end).is_err() {
        return Err(format!(
            "the {side} padding implied by o{axis} = {o} is {end}, out of range"
        ));
    }
    let o = usize::try_from(o).map_err(|_| format!("o{axis} = {o} is too large"))?;
    let p = i64::try_from(p).map_err(|_| format!("p{axis} = {p} is too large"))?;
    // i, k, s, d were range-checked to fit in usize.
    let fit = |v: i128| usize::try_from(v).map_err(|_| overflow());
    Ok(Axis {
        i: fit(i)?,
        o,
        k: fit(k)?,
        s: fit(s)?,
        p,
        d: fit(d)?,
    })
}

/// Reads the fields of a problem string (already trimmed) into the value table and the name.
fn tokenize(s: &str) -> Result<([Option<i128>; 22], Option<String>), String> {
    let b = s.as_bytes();
    let mut vals = [None; 22];
    let mut name: Option<String> = None;
    let mut pos = 0;
    while pos < b.len() {
        if b[pos] == b'_' {
            pos += 1;
            continue;
        }
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_lowercase() {
            pos += 1;
        }
        let key = &s[start..pos];
        if key.is_empty() {
            // `pos` is on a character boundary: only ASCII bytes were consumed before it.
            let found = s[pos..].chars().next().unwrap_or(' ');
            return Err(format!(
                "expected a field name (mb, g, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw, \
                 dh, dw, n, ...) at offset {pos}, found {found:?}"
            ));
        }
        if key == "n" {
            if name.is_some() {
                return Err("duplicate field n (the name is given twice)".into());
            }
            if b.get(pos) != Some(&b'"') {
                return Err(format!(
                    "field n at offset {start} must be followed by a quoted name, n\"...\""
                ));
            }
            let rest = &s[pos + 1..];
            let end = rest.find('"').ok_or_else(|| {
                format!("unterminated name: n\" at offset {start} has no closing quote")
            })?;
            name = Some(rest[..end].to_string());
            pos += 1 + end + 1;
            continue;
        }
        let Some(idx) = FIELDS.iter().position(|f| *f == key) else {
            return Err(format!("unknown field {key:?} at offset {start}"));
        };
        let negative = b.get(pos) == Some(&b'-');
        if negative {
            pos += 1;
        }
        let digits_start = pos;
        let mut v: Option<i128> = Some(0);
        while pos < b.len() && b[pos].is_ascii_digit() {
            v = v
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(i128::from(b[pos] - b'0')));
            pos += 1;
        }
        let digits = &s[digits_start..pos];
        if digits.is_empty() {
            let found = s[pos..]
                .chars()
                .next()
                .map_or("the end".to_string(), |c| format!("{c:?}"));
            return Err(format!(
                "field {key} needs a number: expected digits after {key} at offset {pos}, found {found}"
            ));
        }
        let Some(mut v) = v else {
            let shown: String = digits.chars().take(40).collect();
            let more = if digits.len() > 40 { "..." } else { "" };
            return Err(format!("{key} = {shown}{more} is too large"));
        };
        if negative {
            v = -v;
        }
        if vals[idx].is_some() {
            return Err(format!("duplicate field {key} (given twice)"));
        }
        vals[idx] = Some(v);
    }
    Ok((vals, name))
}

/// Checks each given value's range: sizes ≥ 1, dilation and padding ≥ 0, all fitting their
/// types.
fn check_ranges(vals: &[Option<i128>; 22]) -> Result<(), String> {
    for (idx, v) in vals.iter().enumerate() {
        let Some(v) = *v else { continue };
        let key = FIELDS[idx];
        let (min, what) = if idx < at(4, 0) {
            (1, "must be at least 1")
        } else if idx < at(5, 0) {
            (0, "padding must be at least 0")
        } else {
            (0, "dilation must be at least 0 (0 is a dense kernel)")
        };
        if v < min {
            return Err(format!("{key} = {v}: {what}"));
        }
        let fits = if (at(4, 0)..at(5, 0)).contains(&idx) {
            i64::try_from(v).is_ok()
        } else {
            usize::try_from(v).is_ok()
        };
        if !fits {
            return Err(format!("{key} = {v} is too large"));
        }
    }
    Ok(())
}

/// The `*N` suffix of a name: `None` without one, else N or why it is invalid.
fn count_suffix(name: &str) -> Option<Result<usize, String>> {
    let (_, digits) = name.rsplit_once('*')?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(match digits.parse::<usize>() {
        Ok(0) => Err(format!(
            "name suffix *{digits}: a layer occurs at least once (*N needs N >= 1)"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("name suffix *{digits} is too large")),
    })
}

fn parse_fields(s: &str) -> Result<ProblemSpec, Fail> {
    let (vals, name) = tokenize(s)?;
    check_ranges(&vals)?;

    // Depth first: a 3-D problem is refused whatever else it says.
    let depth = AxisRaw::of(&vals, 0);
    if depth.any() {
        let a = resolve(
            'd',
            depth.i.unwrap_or(1),
            depth.o,
            depth.k.unwrap_or(1),
            depth.s.unwrap_or(1),
            depth.p,
            depth.d.unwrap_or(0),
        )?;
        if (a.i, a.k, a.o, a.p) != (1, 1, 1, 0) {
            return Err(Fail::ThreeD(format!(
                "id{} kd{} od{} pd{}; only 2-D problems are supported, a depth of 1 being id1 \
                 kd1 od1 pd0",
                a.i, a.k, a.o, a.p
            )));
        }
    }

    let get = |idx: usize, what: &str| -> Result<usize, String> {
        let v = vals[idx].ok_or_else(|| format!("missing {} ({what})", FIELDS[idx]))?;
        usize::try_from(v).map_err(|_| format!("{} = {v} is too large", FIELDS[idx]))
    };
    let ic = get(IC, "input channels")?;
    let oc = get(OC, "output channels")?;
    let mb = vals[MB].map_or(Ok(2), |_| get(MB, "minibatch"))?;
    let g = vals[G].map_or(Ok(1), |_| get(G, "groups"))?;

    let hr = AxisRaw::of(&vals, 1);
    let wr = AxisRaw::of(&vals, 2);
    let required = |v: Option<i128>, field: &str, what: &str| {
        v.ok_or_else(|| format!("missing {field} ({what})"))
    };
    let (h, w) = if hr.any() {
        let ih = required(hr.i, "ih", "the input height")?;
        let kh = required(hr.k, "kh", "the kernel height")?;
        let (sh, dh) = (hr.s.unwrap_or(1), hr.d.unwrap_or(0));
        let h = resolve('h', ih, hr.o, kh, sh, hr.p, dh)?;
        let w = if !wr.any() {
            h
        } else {
            let iw = wr.i.unwrap_or(ih);
            let kw = wr.k.unwrap_or(kh);
            let sw = wr.s.or(hr.s).unwrap_or(1);
            let dw = wr.d.or(hr.d).unwrap_or(0);
            if wr.o.is_none() && wr.p.is_none() {
                if (iw, kw, sw, dw) == (ih, kh, sh, dh) {
                    h
                } else {
                    resolve('w', iw, None, kw, sw, Some(i128::from(h.p)), dw)?
                }
            } else {
                resolve('w', iw, wr.o, kw, sw, wr.p, dw)?
            }
        };
        (h, w)
    } else if wr.any() {
        let iw = required(wr.i, "iw", "the input width of a 1-D problem, or ih")?;
        let kw = required(wr.k, "kw", "the kernel width of a 1-D problem, or kh")?;
        let w = resolve(
            'w',
            iw,
            wr.o,
            kw,
            wr.s.unwrap_or(1),
            wr.p,
            wr.d.unwrap_or(0),
        )?;
        (Axis::UNIT, w)
    } else {
        return Err(Fail::Parse(
            "missing ih (the input height; or iw alone for a 1-D problem)".into(),
        ));
    };

    if ic.checked_rem(g) != Some(0) {
        return Err(Fail::Parse(format!(
            "ic = {ic} is not a multiple of the groups g = {g}"
        )));
    }
    if oc.checked_rem(g) != Some(0) {
        return Err(Fail::Parse(format!(
            "oc = {oc} is not a multiple of the groups g = {g}"
        )));
    }
    let name = name.unwrap_or_default();
    if let Some(Err(reason)) = count_suffix(&name) {
        return Err(Fail::Parse(format!("n: {reason}")));
    }
    let spec = ProblemSpec {
        mb,
        g,
        ic,
        ih: h.i,
        iw: w.i,
        oc,
        oh: h.o,
        ow: w.o,
        kh: h.k,
        kw: w.k,
        sh: h.s,
        sw: w.s,
        ph: h.p,
        pw: w.p,
        dh: h.d,
        dw: w.d,
        name,
    };
    // Whatever the descriptors refuse (sizes that overflow, geometry beyond 2^31) is refused
    // here too: a spec that parses converts.
    spec.to_problem(Layout::Nchw)
        .map_err(|e| format!("{}: not a valid convolution: {e}", spec_fields(&e)))?;
    Ok(spec)
}

/// The problem-string fields behind a descriptor error.
fn spec_fields(e: &Error) -> &'static str {
    let field = match e {
        Error::BadParam { field, .. } | Error::Overflow { field, .. } => field.as_str(),
        _ => "",
    };
    match field {
        "conv.stride_h" => "sh",
        "conv.stride_w" => "sw",
        "conv.dilation_h" => "dh",
        "conv.dilation_w" => "dw",
        "conv.pad_top" => "ph",
        "conv.pad_left" => "pw",
        "conv.pad_bottom" => "oh (the bottom padding it implies)",
        "conv.pad_right" => "ow (the right padding it implies)",
        "conv.groups" => "g",
        f if f.starts_with('x') => "mb/ic/ih/iw",
        f if f.starts_with('w') => "oc/ic/g/kh/kw",
        f if f.starts_with('y') => "mb/oc/oh/ow",
        _ => "the problem",
    }
}

/// Renames a descriptor error's field prefix `tensor` to `x` or `y`.
fn name_tensor(prefix: &'static str) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::BadParam {
            field,
            value,
            reason,
        } => Error::BadParam {
            field: field.replacen("tensor", prefix, 1),
            value,
            reason,
        },
        Error::Overflow { field, detail } => Error::Overflow {
            field: field.replacen("tensor", prefix, 1),
            detail,
        },
        other => other,
    }
}

impl ProblemSpec {
    /// Parses one problem string (surrounding whitespace ignored). A spec that parses converts
    /// with [`ProblemSpec::to_problem`].
    ///
    /// # Errors
    /// [`Error::Parse`] saying what is wrong and naming the field; [`Error::Unsupported`] for a
    /// 3-D problem (a depth other than 1).
    pub fn parse(s: &str) -> Result<ProblemSpec> {
        parse_fields(s.trim()).map_err(|f| match f {
            Fail::Parse(reason) => Error::Parse {
                input: s.into(),
                reason,
            },
            Fail::ThreeD(detail) => Error::Unsupported {
                what: format!("3-D convolution {:?} ({detail})", s.trim()),
            },
        })
    }

    /// How many times the layer occurs in its network (the name's `*N` suffix; 1 without, or
    /// when the suffix is not a valid count).
    pub fn count(&self) -> usize {
        match count_suffix(&self.name) {
            Some(Ok(n)) => n,
            _ => 1,
        }
    }

    /// Bottom padding implied by the output size (may be negative):
    /// `(oh-1)·sh + (kh-1)·(dh+1)+1 - ih - ph`, saturated to the range of `i64`.
    pub fn pad_bottom(&self) -> i64 {
        end_pad(self.ih, self.oh, self.kh, self.sh, self.ph, self.dh)
    }

    /// Right padding implied by the output size (may be negative):
    /// `(ow-1)·sw + (kw-1)·(dw+1)+1 - iw - pw`, saturated to the range of `i64`.
    pub fn pad_right(&self) -> i64 {
        end_pad(self.iw, self.ow, self.kw, self.sw, self.pw, self.dw)
    }

    /// The same problem with another minibatch.
    pub fn with_mb(&self, mb: usize) -> ProblemSpec {
        ProblemSpec { mb, ..self.clone() }
    }

    /// The same problem under another name.
    pub fn with_name(&self, name: &str) -> ProblemSpec {
        ProblemSpec {
            name: name.to_string(),
            ..self.clone()
        }
    }

    /// The problem with x and y packed in `layout` (filter KCRS for NCHW, KRSC for NHWC),
    /// cross-correlation, f32.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `g`, `ic` or `oc` when the groups do not divide the
    /// channels, `dh`/`dw` when the dilation overflows, `oh`/`ow` when the output the
    /// descriptors imply differs from the spec's; otherwise the descriptors' errors.
    pub fn to_problem(&self, layout: Layout) -> Result<ConvProblem> {
        let g = self.g;
        if g == 0 {
            return Err(Error::bad("g", 0, "groups must be at least 1"));
        }
        for (field, v) in [("ic", self.ic), ("oc", self.oc)] {
            if v.checked_rem(g) != Some(0) {
                return Err(Error::bad(
                    field,
                    v,
                    format!("not a multiple of the groups g = {g}"),
                ));
            }
        }
        let dil = |field: &str, d: usize| {
            d.checked_add(1)
                .ok_or_else(|| Error::bad(field, d, "dilation too large"))
        };
        let dilation = [dil("dh", self.dh)?, dil("dw", self.dw)?];
        let x = TensorDesc::new(DataType::F32, layout, [self.mb, self.ic, self.ih, self.iw])
            .map_err(name_tensor("x"))?;
        let filter_layout = match layout {
            Layout::Nchw => FilterLayout::Kcrs,
            Layout::Nhwc => FilterLayout::Krsc,
        };
        let w = FilterDesc::new(
            DataType::F32,
            filter_layout,
            [self.oc, self.ic / g, self.kh, self.kw],
        )?;
        let padding = Padding {
            top: self.ph,
            bottom: self.pad_bottom(),
            left: self.pw,
            right: self.pad_right(),
        };
        let conv = ConvDesc::new(
            padding,
            [self.sh, self.sw],
            dilation,
            g,
            ConvMode::CrossCorrelation,
        )?;
        let p = ConvProblem::forward_packed(x, w, conv, layout)?;
        let dims = p.y().dims();
        for (i, field, want) in [(2, "oh", self.oh), (3, "ow", self.ow)] {
            if dims[i] != want {
                return Err(Error::bad(
                    field,
                    want,
                    format!("the descriptors give an output of {}", dims[i]),
                ));
            }
        }
        Ok(p)
    }

    /// The benchdnn description of a problem: dilation minus 1, top and left padding (the
    /// bottom and right padding follow from the output size; padding beyond what the last
    /// window reaches is not part of the format, nor are the mode, the element type and the
    /// layouts).
    pub fn from_problem(p: &ConvProblem, name: &str) -> ProblemSpec {
        let [mb, ic, ih, iw] = p.x().dims();
        let [_, oc, oh, ow] = p.y().dims();
        let conv = p.conv();
        let pad = conv.padding();
        let [sh, sw] = conv.stride();
        let [dh, dw] = conv.dilation();
        ProblemSpec {
            mb,
            g: conv.groups(),
            ic,
            ih,
            iw,
            oc,
            oh,
            ow,
            kh: p.w().r(),
            kw: p.w().s(),
            sh,
            sw,
            ph: pad.top,
            pw: pad.left,
            dh: dh.saturating_sub(1),
            dw: dw.saturating_sub(1),
            name: name.into(),
        }
    }
}

fn end_pad(i: usize, o: usize, k: usize, s: usize, p: i64, d: usize) -> i64 {
    let v = |x: usize| x as i128;
    match implied_end_pad(v(i), v(o), v(k), v(s), i128::from(p), v(d)) {
        Some(e) => e.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
        // Only products of two values beyond 2^63 overflow i128: the padding is hugely positive.
        None => i64::MAX,
    }
}

impl fmt::Display for ProblemSpec {
    /// The canonical form: every field, in the order `mb g ic ih iw oc oh ow kh kw sh sw ph
    /// pw dh dw n"name"` (the name left out when empty).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mb{}g{}ic{}ih{}iw{}oc{}oh{}ow{}kh{}kw{}sh{}sw{}ph{}pw{}dh{}dw{}",
            self.mb,
            self.g,
            self.ic,
            self.ih,
            self.iw,
            self.oc,
            self.oh,
            self.ow,
            self.kh,
            self.kw,
            self.sh,
            self.sw,
            self.ph,
            self.pw,
            self.dh,
            self.dw
        )?;
        if !self.name.is_empty() {
            write!(f, "n\"{}\"", self.name)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ProblemSpec {
    type Err = Error;
    /// As [`ProblemSpec::parse`].
    fn from_str(s: &str) -> Result<ProblemSpec> {
        ProblemSpec::parse(s)
    }
}

/// The part of a line before its comment: `#` outside a quoted name.
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

fn parse_list(text: &str, source: Option<&str>) -> Result<Vec<ProblemSpec>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let problem = strip_comment(line).trim();
        if problem.is_empty() {
            continue;
        }
        let at = match source {
            Some(path) => format!("{path}, line {}", i + 1),
            None => format!("line {}", i + 1),
        };
        let spec = ProblemSpec::parse(problem).map_err(|e| match e {
            Error::Parse { input, reason } => Error::Parse {
                input,
                reason: format!("{at}: {reason}"),
            },
            Error::Unsupported { what } => Error::Unsupported {
                what: format!("{at}: {what}"),
            },
            other => other,
        })?;
        out.push(spec);
    }
    Ok(out)
}

/// Parses a file's text: one problem per line, `#` starts a comment (outside a quoted name),
/// blank lines ignored.
///
/// # Errors
/// As [`ProblemSpec::parse`], the reason (or for [`Error::Unsupported`] the description)
/// starting with the 1-based line number, e.g. `line 3: missing ic (input channels)`.
pub fn parse_problem_list(text: &str) -> Result<Vec<ProblemSpec>> {
    parse_list(text, None)
}

/// Reads problems from a command-line argument: the file of that path as a list (see
/// [`parse_problem_list`]) if it exists, else the argument itself as one problem string.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; otherwise as [`parse_problem_list`] (the reason
/// naming the file and the line) or [`ProblemSpec::parse`].
pub fn read_problems(arg: &str) -> Result<Vec<ProblemSpec>> {
    let path = Path::new(arg);
    if !arg.is_empty() && path.exists() {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: arg.into(),
            message: e.to_string(),
        })?;
        parse_list(&text, Some(arg))
    } else {
        Ok(vec![ProblemSpec::parse(arg)?])
    }
}
