//! `autodnn info`: what this build and this machine offer.

use std::io::Write;

use serde::Serialize;

use crate::error::CliResult;

/// What `info` reports.
#[derive(Debug, Serialize)]
pub struct Info {
    /// Library version.
    pub version: &'static str,
    /// Default worker threads.
    pub threads: usize,
    /// Processor features autodnn cares about.
    pub cpu_features: Vec<&'static str>,
    /// The instruction set kernels will use.
    pub isa: &'static str,
    /// The tuning cache's path.
    pub cache_path: String,
    /// The cost model's path (written by `autodnn calibrate`), and whether it exists.
    pub cost_model_path: String,
    /// True when this machine has been calibrated (the cost model file exists).
    pub calibrated: bool,
    /// The CPU model string tuning-cache keys carry.
    pub cpu_model: String,
    /// Registered forward-convolution algorithms, in preference order.
    pub algorithms: Vec<&'static str>,
    /// The reduced-precision units and what GEMM runs on them.
    pub reduced_precision: ReducedPrecision,
}

/// The reduced-precision units of this CPU (within `AUTODNN_ISA`'s cap) and the GEMM kernel
/// family bf16 operands run on.
#[derive(Debug, Serialize)]
pub struct ReducedPrecision {
    /// AVX512-BF16 dot products (`vdpbf16ps`).
    pub avx512_bf16: bool,
    /// AVX512-FP16 arithmetic.
    pub avx512_fp16: bool,
    /// AMX tiles: absent, refused (by the operating system) or granted.
    pub amx: &'static str,
    /// The GEMM kernel family of bf16 operands (with the default choice of units, `auto`).
    pub bf16_gemm_kernel: &'static str,
    /// One core's throughput on the bf16 units GEMM uses first (AMX tiles where granted,
    /// else AVX512-BF16 dot products) over its f32 multiply-add throughput, as measured for
    /// that choice (`null` without bf16 units under the cap).
    pub bf16_unit_speedup: Option<f64>,
}

/// Gathers the report.
///
/// # Errors
/// Bad input when `AUTODNN_ISA` holds an unknown name.
pub fn gather() -> CliResult<Info> {
    Ok(Info {
        version: autodnn::VERSION,
        threads: crate::default_threads(),
        cpu_features: autodnn::cpu::features(),
        isa: autodnn::cpu::Isa::from_env()?.name(),
        cache_path: autodnn::default_cache_path().display().to_string(),
        cost_model_path: autodnn::select::heuristic::default_cost_model_path()
            .display()
            .to_string(),
        calibrated: autodnn::select::heuristic::default_cost_model_path().exists(),
        cpu_model: autodnn::select::cache::cpu_model(),
        algorithms: autodnn::conv::names(),
        reduced_precision: {
            use autodnn::cpu::{AmxState, Feature, Isa};
            let cap = Isa::cap_from_env()?;
            let usable = cap.usable();
            ReducedPrecision {
                avx512_bf16: usable.contains(Feature::Avx512Bf16),
                avx512_fp16: usable.contains(Feature::Avx512Fp16),
                amx: AmxState::detected().name(),
                bf16_gemm_kernel: autodnn::gemm::kernel_name_for(
                    Isa::from_env()?,
                    autodnn::DataType::Bf16,
                    autodnn::MathMode::Strict,
                    autodnn::Bf16Units::Auto,
                ),
                bf16_unit_speedup: autodnn::gemm::bf16_unit_speedup_under(cap),
            }
        },
    })
}

/// Runs `autodnn info`.
///
/// # Errors
/// As [`gather`], and failures writing to `out`.
pub fn run(json: bool, out: &mut impl Write) -> CliResult {
    let info = gather()?;
    if json {
        let line = serde_json::to_string(&info)
            .map_err(|e| crate::error::CliError::fail(format!("encoding JSON: {e}")))?;
        writeln!(out, "{line}")?;
    } else {
        let none = |v: &[&str]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.join(" ")
            }
        };
        writeln!(out, "autodnn {}", info.version)?;
        writeln!(out, "threads:      {}", info.threads)?;
        writeln!(out, "cpu features: {}", none(&info.cpu_features))?;
        writeln!(out, "isa:          {}", info.isa)?;
        let rp = &info.reduced_precision;
        let yes = |b: bool| if b { "yes" } else { "no" };
        writeln!(
            out,
            "reduced precision: avx512_bf16 {}, avx512_fp16 {}, amx {}; bf16 gemm on {}{}",
            yes(rp.avx512_bf16),
            yes(rp.avx512_fp16),
            rp.amx,
            rp.bf16_gemm_kernel,
            match rp.bf16_unit_speedup {
                Some(s) => format!(" (bf16 units measured at {s:.2}x the f32 rate)"),
                None => String::new(),
            }
        )?;
        writeln!(out, "cpu model:    {}", info.cpu_model)?;
        writeln!(out, "cache path:   {}", info.cache_path)?;
        writeln!(
            out,
            "cost model:   {} ({})",
            info.cost_model_path,
            if info.calibrated {
                "calibrated"
            } else {
                "not calibrated: shipped defaults"
            }
        )?;
        writeln!(out, "algorithms:   {}", none(&info.algorithms))?;
    }
    out.flush()?;
    Ok(())
}
