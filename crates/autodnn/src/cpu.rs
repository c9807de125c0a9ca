//! What this processor can do, detected at run time, and the instruction-set cap.
//!
//! Kernels are chosen by feature detection when a handle is made, never by compile-time target
//! flags, so one binary runs everywhere and uses what each machine has. The cap
//! (`AUTODNN_ISA=scalar|avx2|avx512`, or [`crate::Handle::set_isa_cap`]) limits the choice so
//! every path can be tested and benchmarked on the widest machine.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The kernel families, from the portable one up. Ordered: a cap admits itself and everything
/// below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// Portable Rust, no target-specific code.
    Scalar,
    /// x86-64 AVX2 with FMA.
    Avx2,
    /// x86-64 AVX-512 (F).
    Avx512,
}

/// Environment variable that caps the instruction set.
pub const ISA_ENV: &str = "AUTODNN_ISA";

impl Isa {
    /// All families, narrowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// Lower-case name, as `AUTODNN_ISA` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
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
            .ok_or_else(|| Error::bad(field, s, "expected scalar, avx2 or avx512"))
    }

    /// Whether this machine runs kernels of this family.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest family this machine runs.
    pub fn best_available() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| i.is_available())
            .unwrap_or(Isa::Scalar)
    }

    /// The widest available family within the cap from `AUTODNN_ISA` (no cap when unset).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `AUTODNN_ISA` when it holds an unknown name.
    pub fn from_env() -> Result<Isa> {
        let best = Isa::best_available();
        match std::env::var(ISA_ENV) {
            Ok(v) if !v.trim().is_empty() => Ok(Isa::parse(ISA_ENV, &v)?.min(best)),
            _ => Ok(best),
        }
    }
}

/// Names of the processor features relevant to autodnn that this machine has, detected at run
/// time (CPUID on x86-64, including those the standard library's detection macro has no stable
/// name for).
pub fn features() -> Vec<&'static str> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let macro_checked: [(&str, bool); 12] = [
            ("sse4.1", has!("sse4.1")),
            ("sse4.2", has!("sse4.2")),
            ("avx", has!("avx")),
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("f16c", has!("f16c")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512_vnni", has!("avx512vnni")),
            ("avx512_bf16", has!("avx512bf16")),
            ("avx512_fp16", has!("avx512fp16")),
        ];
        out.extend(macro_checked.iter().filter(|f| f.1).map(|f| f.0));
        // AMX: CPUID leaf 7, sub-leaf 0, EDX bits 22 (bf16), 24 (tile), 25 (int8). The OS must
        // also enable the tile state (XCR0 bits 17 and 18); the standard library does not
        // expose that check on stable, so require the AVX-512 state as a proxy for an OS that
        // manages extended state.
        let leaf0 = std::arch::x86_64::__cpuid(0);
        if leaf0.eax >= 7 && has!("avx512f") {
            let l7 = std::arch::x86_64::__cpuid_count(7, 0);
            for (name, bit) in [("amx_bf16", 22), ("amx_tile", 24), ("amx_int8", 25)] {
                if l7.edx >> bit & 1 == 1 {
                    out.push(name);
                }
            }
        }
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
