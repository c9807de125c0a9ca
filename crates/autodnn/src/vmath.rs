//! Elementary functions written to vectorise: branch-free f32 code (selects, bit moves and
//! polynomials, no calls into libm), so that a loop applying them compiles to vector
//! instructions inside a kernel's `#[target_feature]` entry point, and runs the same scalar
//! code everywhere else. One implementation serves the activation and softmax operators and
//! the convolution and GEMM epilogues.
//!
//! Accuracy, measured against f64 over every f32 in the ranges of `tests` below (the bound
//! each test enforces):
//! - [`exp`]: at most 2 ulp on [-87.3, 88.7]; 0 below (flushed where the f32 result would be
//!   subnormal), +inf above; NaN stays NaN.
//! - [`expm1`]: at most 3 ulp (accurate near 0, where exp(x) − 1 would cancel).
//! - [`sigmoid`]: at most 4 ulp; [`tanh`]: at most 6 ulp (relative), 1e-7 absolute.
//! - [`erf`]: within 3e-7 absolute (a rational fit, no exponential), so [`normal_cdf`] within
//!   2e-7 absolute: GELU's, whose bound (1e-6 · |f| + 1e-6) is absolute where Φ is small.
//!
//! Polynomials and the reduction use fused multiply-adds (`f32::mul_add`: the instruction on
//! the AVX2 and AVX-512 paths, the C library's `fmaf` on the portable one), so every path
//! gives the same bits.

/// log2(e).
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln(2) in two parts: the high part has few enough mantissa bits that n·LN2_HI is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 · 2^23: adding it rounds a float below 2^22 in magnitude to an integer (to nearest
/// even) held in the low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;
/// exp overflows f32 above this.
const EXP_HI: f32 = 88.722_83;
/// exp's f32 result is subnormal below this; [`exp`] flushes it to 0.
const EXP_LO: f32 = -87.336_55;

/// (r, n, e) with x = n·ln 2 + r, |r| ≤ ln 2 / 2, and e = n + 127, 2^n's exponent field (for
/// |x| within f32's exponent range; callers clamp).
#[inline(always)]
fn split(x: f32) -> (f32, f32, u32) {
    let t = x * LOG2E + ROUNDER;
    let n = t - ROUNDER;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, x));
    // t's low mantissa bits hold n (two's complement within the field, offset by the
    // rounder's): 2^n is (n + 127) in the exponent field.
    let e = t
        .to_bits()
        .wrapping_sub(ROUNDER.to_bits())
        .wrapping_add(127);
    (r, n, e)
}

/// (r, s, twice) with x = n·ln 2 + r, |r| ≤ ln 2 / 2 (x clamped to the finite range first):
/// 2^n is s, or 2·s where `twice` (n = 128, whose power of two is not a float but whose
/// e^x may be).
#[inline(always)]
fn reduce(x: f32) -> (f32, f32, bool) {
    let (r, n, e) = split(x.clamp(EXP_LO, EXP_HI));
    let twice = n > 127.0;
    let e = if twice { e.wrapping_sub(1) } else { e };
    (r, f32::from_bits(e << 23), twice)
}

/// c\[0\]·x^(m−1) + … + c\[m − 1\] by Horner's rule in fused multiply-adds.
#[inline(always)]
fn horner(x: f32, c: &[f32]) -> f32 {
    c[1..].iter().fold(c[0], |p, &k| fma(p, x, k))
}

/// a·b + c rounded once: a fused multiply-add where the instruction set has one (the
/// AVX2 and AVX-512 kernels), the C library's `fmaf` elsewhere; the same bits either way.
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// e^r − 1 − r for |r| ≤ ln 2 / 2, as r² · p(r) (Cephes' minimax coefficients).
#[inline(always)]
fn exp_tail(r: f32) -> f32 {
    let p = horner(
        r,
        &[
            1.987_569_1e-4,
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ],
    );
    p * r * r
}

/// e^x for x in [−87.3, 88.3] (2^n a normal float), with none of [`exp`]'s handling of the
/// edges: for callers that clamp x first.
#[inline(always)]
pub(crate) fn exp_inside(x: f32) -> f32 {
    let (r, _, e) = split(x);
    (1.0 + (r + exp_tail(r))) * f32::from_bits(e << 23)
}

/// The largest argument of [`exp_inside`].
const INSIDE_HI: f32 = 88.3;

/// e^x (see the module's accuracy notes).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let (r, s, twice) = reduce(x);
    let y = (1.0 + (r + exp_tail(r))) * s;
    let y = if twice { y * 2.0 } else { y };
    let y = if x > EXP_HI { f32::INFINITY } else { y };
    let y = if x < EXP_LO { 0.0 } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// e^x − 1, accurate near 0.
#[inline(always)]
pub(crate) fn expm1(x: f32) -> f32 {
    let (r, s, twice) = reduce(x);
    let e = r + exp_tail(r); // e^r − 1, no cancellation
    let y = e * s + (s - 1.0);
    // n = 128: (e + 1)·2^128 − 1 rounds to (e + 1)·2^128.
    let y = if twice { (e * s + s) * 2.0 } else { y };
    let y = if x > EXP_HI { f32::INFINITY } else { y };
    let y = if x < EXP_LO { -1.0 } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// 1 / (1 + e^−x): e^−x by [`exp_inside`] on −x clamped to its range, 0 below −88.3 (where
/// the result would be subnormal), NaN for NaN.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = exp_inside((-x).clamp(EXP_LO, INSIDE_HI));
    let s = 1.0 / (1.0 + e);
    let s = if x < -INSIDE_HI { 0.0 } else { s };
    if x.is_nan() {
        x
    } else {
        s
    }
}

/// tanh(x) as ±expm1(2|x|) / (expm1(2|x|) + 2), |x| clamped to 9 (where tanh rounds to 1).
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let a = x.abs().min(9.0);
    let e = expm1(2.0 * a);
    let y = (e / (e + 2.0)).copysign(x);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// From this |x| on, erf(x) rounds to ±1 in f32.
const ERF_CLAMP: f32 = 3.92;

/// erf(x) as x·P(x²) / Q(x²) (a rational fit of degree 5 over 5 in x², with our own
/// coefficients fitted on [0, 4] for the least maximal absolute error): within 3e-7 absolute
/// in f32 (tested), exact at 0, ±1 from ±[`ERF_CLAMP`] on (where erf rounds to ±1), NaN for
/// NaN. One division and eleven fused multiply-adds, no exponential: an absolute bound,
/// so 1 + erf(x) keeps an absolute, not relative, error where erf(x) → −1.
#[inline(always)]
// The fitted coefficients as the fit gave them (P's first is the fit's, one ulp from 2/√π).
#[allow(clippy::excessive_precision, clippy::approx_constant)]
pub(crate) fn erf(x: f32) -> f32 {
    let z = x.clamp(-ERF_CLAMP, ERF_CLAMP);
    let s = z * z;
    let p = horner(
        s,
        &[
            1.974_826_8e-6,
            2.880_414_5e-4,
            4.003_652_8e-3,
            5.346_750_1e-2,
            1.962_491_6e-1,
            1.128_379,
        ],
    );
    let q = horner(
        s,
        &[
            3.748_083e-5,
            1.216_361_4e-3,
            1.544_443_6e-2,
            1.164_765e-1,
            5.072_524_5e-1,
            1.0,
        ],
    );
    let y = (z * p / q).clamp(-1.0, 1.0);
    if x.abs() >= ERF_CLAMP {
        1.0f32.copysign(x)
    } else {
        y
    }
}

/// Φ(x), the standard normal distribution function: (1 + erf(x/√2)) / 2, within 2e-7
/// absolute ([`erf`]'s bound halved, plus a rounding).
#[inline(always)]
pub(crate) fn normal_cdf(x: f32) -> f32 {
    fma(0.5, erf(x * std::f32::consts::FRAC_1_SQRT_2), 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the f64 value `want` (rounded
    /// to f32 first).
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got == w {
            return 0.0;
        }
        let ulp = (w.abs().max(f32::MIN_POSITIVE) as f64) * f64::from(f32::EPSILON);
        (got as f64 - want).abs() / ulp
    }

    /// Every `step`-th f32 bit pattern in [lo, hi] (both signs covered by the caller).
    fn sweep(lo: f32, hi: f32, mut f: impl FnMut(f32)) {
        let mut x = lo;
        while x <= hi {
            f(x);
            let b = x.to_bits();
            // Walk the bit patterns upward (for negatives, towards zero).
            let next = if x >= 0.0 {
                f32::from_bits(b + 997)
            } else if b > 0x8000_03e5 {
                f32::from_bits(b - 997)
            } else {
                0.0
            };
            x = next;
        }
    }

    #[test]
    fn exp_is_within_2_ulp() {
        let mut worst = 0.0f64;
        sweep(-87.3, 88.7, |x| {
            worst = worst.max(ulps(exp(x), (x as f64).exp()))
        });
        assert!(worst <= 2.0, "exp: {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn expm1_is_accurate_near_zero() {
        let mut worst = 0.0f64;
        sweep(-80.0, 88.0, |x| {
            worst = worst.max(ulps(expm1(x), libm::expm1(x as f64)))
        });
        assert!(worst <= 3.0, "expm1: {worst} ulp");
        assert_eq!(expm1(0.0), 0.0);
        assert_eq!(expm1(-200.0), -1.0);
    }

    #[test]
    fn erf_is_within_its_absolute_bound() {
        let mut worst = 0.0f64;
        sweep(-9.0, 9.0, |x| {
            worst = worst.max((erf(x) as f64 - libm::erf(x as f64)).abs());
        });
        sweep(-1e-30, 1e-30, |x| {
            worst = worst.max((erf(x) as f64 - libm::erf(x as f64)).abs());
        });
        assert!(worst <= 3e-7, "erf: {worst:e} absolute");
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(20.0), 1.0);
        assert_eq!(erf(-20.0), -1.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(normal_cdf(-20.0), 0.0);
        assert_eq!(normal_cdf(20.0), 1.0);
    }

    #[test]
    fn sigmoid_and_tanh_are_accurate() {
        let (mut ws, mut wt) = (0.0f64, 0.0f64);
        sweep(-80.0, 80.0, |x| {
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            if s >= f64::from(f32::MIN_POSITIVE) {
                ws = ws.max(ulps(sigmoid(x), s));
            } else {
                // exp(−x) overflows or the result is subnormal: flushed to 0.
                assert!(
                    sigmoid(x) as f64 <= f64::from(f32::MIN_POSITIVE),
                    "sigmoid({x})"
                );
            }
            let t = (x as f64).tanh();
            assert!((tanh(x) as f64 - t).abs() <= 1e-7, "tanh({x})");
            wt = wt.max(ulps(tanh(x), t));
        });
        assert!(ws <= 4.0, "sigmoid: {ws} ulp");
        assert!(wt <= 6.0, "tanh: {wt} ulp");
        assert_eq!(tanh(100.0), 1.0);
        assert_eq!(tanh(-100.0), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        assert_eq!(sigmoid(-200.0), 0.0);
        assert!(sigmoid(f32::NAN).is_nan());
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(200.0), 1.0);
    }
}
