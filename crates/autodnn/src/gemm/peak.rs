//! The machine's f32 multiply-add peak, measured: the limit GEMM results are read against.
//!
//! Each thread runs independent chains of fused multiply-adds (`x = x·m + c`) in the widest
//! vector registers the ISA cap allows: 16 chains of 16 lanes with AVX-512, 12 of 8 lanes
//! with AVX2 + FMA, 8 of 8 lanes portably. More chains than FMA latency × FMA ports
//! (4 × 2 on current x86 cores) keeps every port busy, so the time is throughput-bound.

use std::hint::black_box;
use std::time::Instant;

use crate::cpu::{Features, Isa};

/// Measures the f32 FMA peak in GFLOP/s (2 flops per multiply-add and lane) of `threads`
/// threads running at once, each doing `iters` rounds of its chains, with the widest kernel
/// at or below `isa` that this CPU runs. Returns (the ISA used, GFLOP/s over the wall time
/// of the slowest thread).
///
/// # Examples
/// ```
/// let (isa, gflops) = autodnn::gemm::fma_peak(autodnn::cpu::Isa::Avx512, 1, 10_000);
/// assert!(gflops > 0.0 && isa <= autodnn::cpu::Isa::best_available());
/// ```
pub fn fma_peak(isa: Isa, threads: usize, iters: u64) -> (Isa, f64) {
    let features = isa.usable();
    let isa = Isa::widest_within(features);
    let threads = threads.max(1);
    let start = Instant::now();
    let flops: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(move || chains(features, black_box(iters))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    let secs = start.elapsed().as_secs_f64();
    (isa, flops as f64 / secs / 1e9)
}

/// Measures the bf16 peak in GFLOP/s of `threads` threads running at once, each `iters`
/// rounds of the peak loop of the bf16 units GEMM uses first under `isa`, as [`fma_peak`]
/// does for f32: AMX tile multiplies (`tdpbf16ps`, 2 flops per product) where the cap
/// admits AMX and the operating system grants it, else AVX512-BF16 dot products
/// (`vdpbf16ps`: 4 flops per lane and instruction, two products and two sums); `None` where
/// the usable features under `isa` have neither.
///
/// # Examples
/// ```
/// use autodnn::cpu::{Feature, Isa};
/// let peak = autodnn::gemm::bf16_dot_peak(Isa::Avx512, 1, 10_000);
/// assert_eq!(peak.is_some(), Isa::Avx512.usable().contains(Feature::Avx512Bf16));
/// assert_eq!(autodnn::gemm::bf16_dot_peak(Isa::Avx2, 1, 10_000), None);
/// ```
pub fn bf16_dot_peak(isa: Isa, threads: usize, iters: u64) -> Option<f64> {
    let ks = super::kernels::bf16_family(isa.usable(), usize::MAX)?;
    let peak = ks.unit_peak?;
    let threads = threads.max(1);
    let start = Instant::now();
    let flops: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            // SAFETY: the family is one the usable (detected) features run (`bf16_family`).
            .map(|_| s.spawn(move || unsafe { peak(black_box(iters)) }))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    Some(flops as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// The kernel family whose units [`bf16_dot_peak`] measures under `isa` (e.g.
/// `amx-bf16-32x32`); `None` where it measures nothing.
pub fn bf16_peak_family(isa: Isa) -> Option<&'static str> {
    super::kernels::bf16_family(isa.usable(), usize::MAX).map(|ks| ks.name)
}

/// The least [`bf16_unit_speedup`] at which [`crate::Bf16Units::Auto`] runs products of bf16
/// values on the bf16 units: their kernels also round the packed panels into pairs and reach
/// a smaller share of their peak than the f32 kernels of theirs, so a CPU whose bf16 units
/// are only a little faster is better served by the f32 kernels.
pub const BF16_UNITS_MIN_SPEEDUP: f64 = 1.25;

/// One core's bf16 throughput over its f32 multiply-add throughput, in flops, on the bf16
/// units GEMM would use first with every feature this machine has (AMX tiles where the
/// operating system grants them, else AVX512-BF16 dot products: 2.0 on AMD Zen 4 and Zen 5,
/// about 0.5 on some Intel Xeons, several times more on AMX): [`bf16_unit_speedup_under`]
/// the widest cap. `None` where the CPU has no bf16 units.
///
/// # Examples
/// ```
/// use autodnn::cpu::{Feature, Isa};
/// let speedup = autodnn::gemm::bf16_unit_speedup();
/// assert_eq!(speedup.is_some(), Isa::Amx.usable().contains(Feature::Avx512Bf16));
/// assert!(speedup.map_or(true, |s| s > 0.0));
/// ```
pub fn bf16_unit_speedup() -> Option<f64> {
    bf16_unit_speedup_under(Isa::Amx)
}

/// The speed-up of the bf16 units GEMM uses first under an ISA cap, for products deep
/// enough for every family (see [`bf16_unit_speedup_for`]).
///
/// ```
/// use autodnn::cpu::{Feature, Isa};
/// assert_eq!(autodnn::gemm::bf16_unit_speedup_under(Isa::Avx2), None);
/// let s = autodnn::gemm::bf16_unit_speedup_under(Isa::Avx512);
/// assert_eq!(s.is_some(), Isa::Avx512.usable().contains(Feature::Avx512Bf16));
/// ```
pub fn bf16_unit_speedup_under(isa: Isa) -> Option<f64> {
    bf16_unit_speedup_for(isa, usize::MAX)
}

/// The speed-up over f32 of the bf16 units that products of depth `k` run on under an ISA
/// cap (the first bf16 kernel family there that takes depth `k`: AMX tiles need `k ≥ 16`),
/// measured once per process and family on the calling thread: five interleaved rounds of
/// each peak loop of about 0.1 ms, the best of each. [`crate::Bf16Units::Auto`] uses those
/// units where this reaches [`BF16_UNITS_MIN_SPEEDUP`]. `None` where the cap leaves no bf16
/// units.
pub fn bf16_unit_speedup_for(isa: Isa, k: usize) -> Option<f64> {
    let ks = super::kernels::bf16_family(isa.usable(), k)?;
    super::kernels::unit_speedup(ks)
}

/// A peak loop's throughput (`peak(iters)` returns the flops it did) over the AVX-512 f32
/// multiply-adds', best of five interleaved rounds each; `None` without AVX-512F.
pub(crate) fn speedup_over_f32(peak: &dyn Fn(u64) -> u64) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if Isa::Amx.usable().contains_all(Features::AVX512F) {
        const ITERS: u64 = 20_000;
        let rate = |f: &dyn Fn() -> u64| {
            let start = Instant::now();
            let flops = f();
            flops as f64 / start.elapsed().as_secs_f64().max(1e-9)
        };
        let (mut f32_best, mut units_best) = (0.0f64, 0.0f64);
        for _ in 0..5 {
            // SAFETY: AVX-512F was detected (`Isa::usable`) just above.
            f32_best = f32_best.max(rate(&|| unsafe { x86::avx512(black_box(ITERS)) }));
            units_best = units_best.max(rate(&|| peak(black_box(ITERS))));
        }
        return Some(units_best / f32_best.max(1.0));
    }
    let _ = peak;
    None
}

/// The AVX512-BF16 family's peak loop (see [`bf16_dot_peak`]).
///
/// # Safety
/// The CPU supports AVX-512F and AVX512-BF16.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn avx512_bf16_chains(iters: u64) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { x86::avx512_bf16(iters) }
}

/// Runs one thread's chains; returns the flops done.
fn chains(features: Features, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if features.contains_all(Features::AVX512F) {
            // SAFETY: `fma_peak`'s features are detected ones (`Isa::usable`).
            return unsafe { x86::avx512(iters) };
        }
        if features.contains_all(Features::AVX2_FMA) {
            // SAFETY: as above.
            return unsafe { x86::avx2(iters) };
        }
    }
    let _ = features;
    portable(iters)
}

fn portable(iters: u64) -> u64 {
    const CHAINS: usize = 8;
    const LANES: usize = 8;
    let m = black_box(0.999_999_f32);
    let c = black_box(1e-7_f32);
    let mut x = [[1.0f32; LANES]; CHAINS];
    for _ in 0..iters {
        for ch in x.iter_mut() {
            for v in ch.iter_mut() {
                *v = *v * m + c;
            }
        }
    }
    black_box(x);
    iters * (CHAINS * LANES * 2) as u64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// # Safety
    /// The CPU supports AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512(iters: u64) -> u64 {
        const CHAINS: usize = 16;
        let m = _mm512_set1_ps(black_box(0.999_999));
        let c = _mm512_set1_ps(black_box(1e-7));
        let mut x = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for v in x.iter_mut() {
                *v = _mm512_fmadd_ps(*v, m, c);
            }
        }
        black_box(x);
        iters * (CHAINS * 16 * 2) as u64
    }

    /// # Safety
    /// The CPU supports AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn avx512_bf16(iters: u64) -> u64 {
        const CHAINS: usize = 16;
        // Pairs of 2^-13 (bf16 0x3900): each instruction adds 2^-25 to every lane, normal
        // numbers throughout (the sum stays below 1 for 2^25 iterations).
        let pairs = _mm512_set1_epi32(black_box(0x3900_3900));
        // SAFETY: both are 64-byte vectors of plain bits.
        let a = unsafe { std::mem::transmute::<__m512i, __m512bh>(pairs) };
        let mut x = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iters {
            for v in x.iter_mut() {
                *v = _mm512_dpbf16_ps(*v, a, a);
            }
        }
        black_box(x);
        iters * (CHAINS * 16 * 4) as u64
    }

    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2(iters: u64) -> u64 {
        const CHAINS: usize = 12;
        let m = _mm256_set1_ps(black_box(0.999_999));
        let c = _mm256_set1_ps(black_box(1e-7));
        let mut x = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for v in x.iter_mut() {
                *v = _mm256_fmadd_ps(*v, m, c);
            }
        }
        black_box(x);
        iters * (CHAINS * 8 * 2) as u64
    }
}
