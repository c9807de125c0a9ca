//! What this processor can do, detected at run time, and the instruction-set cap.
//!
//! Kernels are chosen by feature detection when a handle is made, never by compile-time target
//! flags, so one binary runs everywhere and uses what each machine has.
//!
//! - [`Feature`] names one processor feature autodnn's kernels may need (AVX2, FMA, the
//!   AVX-512 subsets, AMX, ...); [`Features`] is a set of them, a small `Copy` bit set.
//!   [`Features::detected`] is what this machine has, detected once (CPUID and the standard
//!   library's detection; AMX only where the operating system grants the tile state).
//! - [`Isa`] is a named cap preset (`scalar`, `avx2`, `avx512`), as `AUTODNN_ISA` and
//!   [`crate::Handle::set_isa_cap`] take it; [`Isa::mask`] is the features a preset admits.
//!   A handle's usable features are the detected ones within its cap's mask. Kernel families
//!   say which features they need and are chosen by asking the usable set
//!   ([`Features::contains_all`]); [`Isa::widest_within`] names the widest preset a set
//!   supports, for cache keys and logs.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// One processor feature that kernels may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Feature {
    /// AVX2 (256-bit integer and float vectors).
    Avx2,
    /// Fused multiply-add (FMA3).
    Fma,
    /// Half-precision conversions (F16C).
    F16c,
    /// AVX-512 Foundation.
    Avx512F,
    /// AVX-512 byte and word instructions.
    Avx512Bw,
    /// AVX-512 vector-length extensions (the 128- and 256-bit forms).
    Avx512Vl,
    /// AVX-512 vector neural network instructions (int8 dot products).
    Avx512Vnni,
    /// AVX-512 bfloat16 conversions and dot products.
    Avx512Bf16,
    /// AVX-512 half-precision arithmetic.
    Avx512Fp16,
    /// AMX bfloat16 tile multiplies.
    AmxBf16,
    /// AMX tile registers and loads (with the operating system's permission).
    AmxTile,
    /// AMX int8 tile multiplies.
    AmxInt8,
}

impl Feature {
    /// Every feature, in the order [`Features`] iterates and names them.
    pub const ALL: [Feature; 12] = [
        Feature::Avx2,
        Feature::Fma,
        Feature::F16c,
        Feature::Avx512F,
        Feature::Avx512Bw,
        Feature::Avx512Vl,
        Feature::Avx512Vnni,
        Feature::Avx512Bf16,
        Feature::Avx512Fp16,
        Feature::AmxBf16,
        Feature::AmxTile,
        Feature::AmxInt8,
    ];

    /// The name `autodnn info` prints and serialised sets use (Linux's `/proc/cpuinfo`
    /// spelling).
    pub fn name(self) -> &'static str {
        match self {
            Feature::Avx2 => "avx2",
            Feature::Fma => "fma",
            Feature::F16c => "f16c",
            Feature::Avx512F => "avx512f",
            Feature::Avx512Bw => "avx512bw",
            Feature::Avx512Vl => "avx512vl",
            Feature::Avx512Vnni => "avx512_vnni",
            Feature::Avx512Bf16 => "avx512_bf16",
            Feature::Avx512Fp16 => "avx512_fp16",
            Feature::AmxBf16 => "amx_bf16",
            Feature::AmxTile => "amx_tile",
            Feature::AmxInt8 => "amx_int8",
        }
    }

    /// The feature named `s` (as [`Feature::name`] spells it, case-insensitive).
    pub fn from_name(s: &str) -> Option<Feature> {
        let s = s.trim().to_ascii_lowercase();
        Feature::ALL.into_iter().find(|f| f.name() == s)
    }

    const fn bit(self) -> u32 {
        1 << self as u8
    }
}

/// A set of [`Feature`]s: a bit set, cheap to copy and compare. Serialised as a list of
/// feature names.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(u32);

impl Features {
    /// No feature: what the portable kernels need.
    pub const EMPTY: Features = Features(0);
    /// Every feature.
    pub const ALL: Features = Features::of(&Feature::ALL);
    /// AVX2 with FMA: the AVX2 kernel families' requirement.
    pub const AVX2_FMA: Features = Features::of(&[Feature::Avx2, Feature::Fma]);
    /// AVX-512 Foundation: the AVX-512 kernel families' requirement.
    pub const AVX512F: Features = Features::of(&[Feature::Avx512F]);
    /// The AMX features (tiles, bf16 and int8 multiplies).
    pub const AMX: Features = Features::of(&[Feature::AmxTile, Feature::AmxBf16, Feature::AmxInt8]);
    /// What the AMX-BF16 kernel family needs: the tiles and their bf16 multiplies, with
    /// AVX-512F and AVX512-BF16 for the packing's conversions and the stores.
    pub const AMX_BF16: Features = Features::of(&[
        Feature::Avx512F,
        Feature::Avx512Bf16,
        Feature::AmxTile,
        Feature::AmxBf16,
    ]);

    /// The set of the listed features (usable in constants).
    pub const fn of(list: &[Feature]) -> Features {
        let mut bits = 0;
        let mut i = 0;
        while i < list.len() {
            bits |= list[i].bit();
            i += 1;
        }
        Features(bits)
    }

    /// The empty set.
    pub const fn empty() -> Features {
        Features::EMPTY
    }
    /// The set of every feature.
    pub const fn all() -> Features {
        Features::ALL
    }
    /// Whether `f` is in the set.
    pub const fn contains(self, f: Feature) -> bool {
        self.0 & f.bit() != 0
    }
    /// Whether every feature of `other` is in the set (`other ⊆ self`).
    pub const fn contains_all(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }
    /// The features in either set.
    #[must_use]
    pub const fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }
    /// The features in both sets.
    #[must_use]
    pub const fn intersection(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }
    /// The set with `f` added.
    #[must_use]
    pub const fn with(self, f: Feature) -> Features {
        Features(self.0 | f.bit())
    }
    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The features in the set, in [`Feature::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL.into_iter().filter(move |&f| self.contains(f))
    }
    /// The names of the features in the set, in [`Feature::ALL`]'s order.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Feature::name).collect()
    }

    /// The features this machine has, detected once per process. AMX counts only where the
    /// operating system grants this process the tile state (on Linux, requested once with
    /// `arch_prctl(ARCH_REQ_XCOMP_PERM)`; elsewhere AMX is absent).
    pub fn detected() -> Features {
        static DETECTED: OnceLock<Features> = OnceLock::new();
        *DETECTED.get_or_init(detect)
    }
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.iter().map(Feature::name))
            .finish()
    }
}

impl FromIterator<Feature> for Features {
    fn from_iter<I: IntoIterator<Item = Feature>>(iter: I) -> Features {
        iter.into_iter().fold(Features::EMPTY, Features::with)
    }
}

impl Serialize for Features {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(Feature::name))
    }
}

impl<'de> Deserialize<'de> for Features {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Features, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        names
            .iter()
            .map(|n| {
                Feature::from_name(n)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown feature `{n}`")))
            })
            .collect()
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Features {
    use std::arch::is_x86_feature_detected as has;
    let mut out = Features::EMPTY;
    let macro_checked = [
        (Feature::Avx2, has!("avx2")),
        (Feature::Fma, has!("fma")),
        (Feature::F16c, has!("f16c")),
        (Feature::Avx512F, has!("avx512f")),
        (Feature::Avx512Bw, has!("avx512bw")),
        (Feature::Avx512Vl, has!("avx512vl")),
        (Feature::Avx512Vnni, has!("avx512vnni")),
        (Feature::Avx512Bf16, has!("avx512bf16")),
        (Feature::Avx512Fp16, has!("avx512fp16")),
    ];
    for (f, present) in macro_checked {
        if present {
            out = out.with(f);
        }
    }
    // AMX: CPUID leaf 7, sub-leaf 0, EDX bits 22 (bf16), 24 (tile), 25 (int8); usable only
    // once the operating system grants the tile data state.
    let leaf0 = std::arch::x86_64::__cpuid(0);
    if leaf0.eax >= 7 {
        let l7 = std::arch::x86_64::__cpuid_count(7, 0);
        let tile = l7.edx >> 24 & 1 == 1;
        if tile && amx::request_tile_permission() {
            for (f, bit) in [
                (Feature::AmxBf16, 22),
                (Feature::AmxTile, 24),
                (Feature::AmxInt8, 25),
            ] {
                if l7.edx >> bit & 1 == 1 {
                    out = out.with(f);
                }
            }
        }
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Features {
    Features::EMPTY
}

/// Whether this process may use AMX tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AmxState {
    /// The CPU has no AMX tiles.
    Absent,
    /// The CPU has them but the operating system did not grant this process the tile state.
    Refused,
    /// The CPU has them and the tile state is granted: AMX features count as detected.
    Granted,
}

impl AmxState {
    /// Lower-case name: `absent`, `refused`, `granted`.
    pub fn name(self) -> &'static str {
        match self {
            AmxState::Absent => "absent",
            AmxState::Refused => "refused",
            AmxState::Granted => "granted",
        }
    }

    /// This process's state (the permission is requested once, by [`Features::detected`]).
    pub fn detected() -> AmxState {
        if Features::detected().contains(Feature::AmxTile) {
            return AmxState::Granted;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let leaf0 = std::arch::x86_64::__cpuid(0);
            if leaf0.eax >= 7 && std::arch::x86_64::__cpuid_count(7, 0).edx >> 24 & 1 == 1 {
                return AmxState::Refused;
            }
        }
        AmxState::Absent
    }
}

/// The operating system's permission for the AMX tile state.
#[cfg(target_arch = "x86_64")]
mod amx {
    /// Asks the kernel to let this process use the AMX tile data state; true when granted
    /// (also when it already was).
    #[cfg(target_os = "linux")]
    pub(super) fn request_tile_permission() -> bool {
        /// `arch_prctl` code requesting permission for an extended state component.
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        /// The XSAVE state component of the AMX tile data.
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, n) takes two integers, touches no memory of
        // this process and only widens what the kernel lets the process save; it fails
        // harmlessly (returns −1) on kernels that do not know the request.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        rc == 0
    }

    /// Elsewhere the tile state's permission is not requested, and AMX counts as absent.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn request_tile_permission() -> bool {
        false
    }
}

/// The named instruction-set caps, from the portable one up. Ordered: a cap admits itself and
/// everything below it (its [`Isa::mask`] includes theirs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// Portable Rust, no target-specific code.
    Scalar,
    /// x86-64 AVX2 with FMA (and F16C).
    Avx2,
    /// x86-64 AVX-512 and its vector extensions (AVX512-BF16, AVX512-FP16, VNNI), no AMX.
    Avx512,
    /// x86-64 AMX tiles (with the operating system's permission) and everything below.
    Amx,
}

/// Environment variable that caps the instruction set.
pub const ISA_ENV: &str = "AUTODNN_ISA";

impl Isa {
    /// All families, narrowest first.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx];

    /// Lower-case name, as `AUTODNN_ISA` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }

    /// Parses a name as `AUTODNN_ISA` takes it.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `field` for an unknown name.
    pub fn parse(field: &str, s: &str) -> Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| Error::bad(field, s, "expected scalar, avx2, avx512 or amx"))
    }

    /// The features this cap admits: none for `scalar`; AVX2, FMA and F16C for `avx2`; every
    /// feature but AMX's for `avx512`; every feature for `amx`.
    pub const fn mask(self) -> Features {
        match self {
            Isa::Scalar => Features::EMPTY,
            Isa::Avx2 => Features::of(&[Feature::Avx2, Feature::Fma, Feature::F16c]),
            Isa::Avx512 => Features(Features::ALL.0 & !Features::AMX.0),
            Isa::Amx => Features::ALL,
        }
    }

    /// The features this preset's kernel families need: none, AVX2 with FMA, AVX-512F, and
    /// for `amx` the AMX tiles with bf16 multiplies (and AVX512-BF16, whose conversions pack
    /// the tiles).
    pub const fn requires(self) -> Features {
        match self {
            Isa::Scalar => Features::EMPTY,
            Isa::Avx2 => Features::AVX2_FMA,
            Isa::Avx512 => Features::AVX512F,
            Isa::Amx => Features::AMX_BF16,
        }
    }

    /// The widest preset whose kernel families `features` runs ([`Isa::requires`] within it).
    pub fn widest_within(features: Features) -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| features.contains_all(i.requires()))
            .unwrap_or(Isa::Scalar)
    }

    /// The features usable under this cap on this machine: the detected ones within
    /// [`Isa::mask`]. A cap never adds a feature.
    pub fn usable(self) -> Features {
        Features::detected().intersection(self.mask())
    }

    /// Whether this machine runs kernels of this family.
    pub fn is_available(self) -> bool {
        Features::detected().contains_all(self.requires())
    }

    /// The widest family this machine runs.
    pub fn best_available() -> Isa {
        Isa::widest_within(Features::detected())
    }

    /// The widest available family within the cap from `AUTODNN_ISA` (no cap when unset).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `AUTODNN_ISA` when it holds an unknown name.
    pub fn from_env() -> Result<Isa> {
        Ok(Isa::widest_within(Isa::cap_from_env()?.usable()))
    }

    /// The cap `AUTODNN_ISA` sets ([`Isa::Amx`], admitting everything, when unset).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `AUTODNN_ISA` when it holds an unknown name.
    pub fn cap_from_env() -> Result<Isa> {
        match std::env::var(ISA_ENV) {
            Ok(v) if !v.trim().is_empty() => Isa::parse(ISA_ENV, &v),
            _ => Ok(Isa::Amx),
        }
    }
}

/// Names of the processor features relevant to autodnn that this machine has, detected at run
/// time: the baseline vector extensions, then [`Features::detected`]'s names.
pub fn features() -> Vec<&'static str> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let baseline: [(&str, bool); 3] = [
            ("sse4.1", has!("sse4.1")),
            ("sse4.2", has!("sse4.2")),
            ("avx", has!("avx")),
        ];
        out.extend(baseline.iter().filter(|f| f.1).map(|f| f.0));
        out.extend(Features::detected().names());
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        if has!("neon") {
            out.push("neon");
        }
        if has!("fp16") {
            out.push("fp16");
        }
        if has!("sve") {
            out.push("sve");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a = Features::of(&[Feature::Avx2, Feature::Fma]);
        let b = Features::of(&[Feature::Fma, Feature::Avx512F]);
        assert!(a.contains(Feature::Avx2) && !a.contains(Feature::Avx512F));
        assert_eq!(a.union(b).names(), ["avx2", "fma", "avx512f"]);
        assert_eq!(a.intersection(b).names(), ["fma"]);
        assert!(a.union(b).contains_all(a) && !a.contains_all(b));
        assert!(a.contains_all(Features::empty()) && Features::empty().is_empty());
        assert_eq!(Features::all().iter().count(), Feature::ALL.len());
        assert_eq!(Features::all().iter().collect::<Features>(), Features::ALL);
    }

    #[test]
    fn masks_nest_and_admit_their_requirements() {
        assert!(Isa::Scalar.mask().is_empty());
        assert_eq!(Isa::Avx2.mask().names(), ["avx2", "fma", "f16c"]);
        assert_eq!(Isa::Amx.mask(), Features::all());
        assert_eq!(Isa::Avx512.mask().union(Features::AMX), Features::all());
        assert!(Isa::Avx512.mask().intersection(Features::AMX).is_empty());
        for w in Isa::ALL.windows(2) {
            assert!(w[1].mask().contains_all(w[0].mask()));
        }
        for isa in Isa::ALL {
            assert!(isa.mask().contains_all(isa.requires()));
            assert_eq!(Isa::widest_within(isa.mask()), isa);
        }
        assert_eq!(
            Isa::widest_within(Features::of(&[Feature::Avx2])),
            Isa::Scalar
        );
    }

    #[test]
    fn a_cap_never_adds_a_feature() {
        let detected = Features::detected();
        for isa in Isa::ALL {
            let usable = isa.usable();
            assert!(detected.contains_all(usable) && isa.mask().contains_all(usable));
            // The preset named for the usable set is the cap or narrower, and one this
            // machine runs.
            let widest = Isa::widest_within(usable);
            assert!(widest <= isa && widest.is_available());
            assert_eq!(widest, isa.min(Isa::best_available()));
        }
        assert_eq!(Isa::Amx.usable(), detected);
    }

    #[test]
    fn names_round_trip() {
        for f in Feature::ALL {
            assert_eq!(Feature::from_name(f.name()), Some(f));
            assert_eq!(Feature::from_name(&f.name().to_ascii_uppercase()), Some(f));
        }
        assert_eq!(Feature::from_name("sse9"), None);
        for isa in Isa::ALL {
            assert_eq!(Isa::parse("isa", isa.name()).unwrap(), isa);
        }
        assert!(Isa::parse("isa", "avx3").is_err());
        for set in [
            Features::empty(),
            Features::all(),
            Isa::Avx2.mask(),
            Features::detected(),
        ] {
            let json = serde_json::to_string(&set).unwrap();
            assert_eq!(serde_json::from_str::<Features>(&json).unwrap(), set);
        }
        assert_eq!(
            serde_json::to_string(&Isa::Avx2.mask()).unwrap(),
            r#"["avx2","fma","f16c"]"#
        );
        assert!(serde_json::from_str::<Features>(r#"["avx2","sse9"]"#).is_err());
    }

    #[test]
    fn a_handle_uses_the_detected_features_within_its_cap() {
        let h = crate::Handle::with_threads(1).unwrap();
        for isa in Isa::ALL {
            h.set_isa_cap(isa);
            assert_eq!(h.features(), isa.usable());
            assert_eq!(h.isa(), Isa::widest_within(h.features()));
            assert_eq!(h.isa(), isa.min(Isa::best_available()));
            let ctx = h.exec_context();
            assert_eq!((ctx.features(), ctx.isa()), (h.features(), h.isa()));
        }
    }

    #[test]
    fn detected_features_are_consistent() {
        let d = Features::detected();
        assert_eq!(d, Features::detected());
        assert!(features().iter().filter(|n| d.names().contains(n)).count() == d.iter().count());
        // AMX tile multiplies without the tile state are never reported.
        if d.contains(Feature::AmxBf16) || d.contains(Feature::AmxInt8) {
            assert!(d.contains(Feature::AmxTile));
        }
    }
}
