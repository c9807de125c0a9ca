//! `autodnn peak`: the machine's f32 multiply-add peak, so GEMM and convolution results can be
//! read as a fraction of the limit.

use std::io::Write;

use autodnn::cpu::Isa;
use clap::Args;
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// Rounds of FMA chains per thread in one measurement (about 0.1 s on a current core).
const ITERS: u64 = 20_000_000;
/// Measurements; the best is reported (other load only ever lowers a peak).
const TRIES: usize = 5;

/// Arguments of `autodnn peak`.
#[derive(Debug, Args)]
pub struct PeakArgs {
    /// Threads running at once [default: all cores]
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,
    /// Cap the instruction set: scalar, avx2 or avx512 [default: AUTODNN_ISA, else the widest]
    #[arg(long, value_name = "NAME")]
    pub isa: Option<String>,
    /// Which peak: f32 (fused multiply-adds) or bf16 (AVX512-BF16 dot products)
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub dtype: String,
    /// Measure the copy bandwidth instead (GB/s, bytes read plus bytes written, median of
    /// copies of a 256 MiB buffer), so memory-bound operators read as a fraction of it
    #[arg(long)]
    pub memory: bool,
    /// One JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// What `autodnn peak --memory` reports.
#[derive(Debug, Serialize)]
pub struct MemoryReport {
    memory: bool,
    threads: usize,
    bytes: usize,
    gbps: f64,
}

/// Copies timed by `peak --memory` (the median is reported).
const COPY_REPS: usize = 9;

/// What `autodnn peak` reports.
#[derive(Debug, Serialize)]
pub struct PeakReport {
    dtype: &'static str,
    isa: &'static str,
    threads: usize,
    /// The kernel family whose units were measured (`null` for f32).
    family: Option<&'static str>,
    gflops: f64,
}

/// Runs `autodnn peak`.
///
/// # Errors
/// Bad input for 0 threads or an unknown ISA name; failures writing to `out`.
/// The most threads a peak measurement starts (a handle's limit too).
const MAX_THREADS: usize = 4096;

pub fn run(args: &PeakArgs, out: &mut impl Write) -> CliResult {
    let threads = args.threads.unwrap_or_else(crate::default_threads);
    if threads == 0 {
        return Err(CliError::bad("bad --threads = 0: must be at least 1"));
    }
    if threads > MAX_THREADS {
        return Err(CliError::bad(format!(
            "bad --threads = {threads}: must be at most {MAX_THREADS} (as for a handle)"
        )));
    }
    let cap = match &args.isa {
        Some(name) => Isa::parse("--isa", name)?.min(Isa::from_env()?),
        None => Isa::from_env()?,
    };
    if args.memory {
        return memory(args, threads, cap, out);
    }
    let bf16 = match args.dtype.trim().to_ascii_lowercase().as_str() {
        "f32" => false,
        "bf16" => true,
        other => {
            return Err(CliError::bad(format!(
                "bad --dtype = {other}: expected f32 or bf16"
            )))
        }
    };
    let mut best = (cap, 0.0f64);
    for _ in 0..TRIES {
        let (isa, g) = if bf16 {
            let g = autodnn::gemm::bf16_dot_peak(cap, threads, ITERS).ok_or_else(|| {
                CliError::bad(format!(
                    "bad --dtype = bf16: no AVX512-BF16 under the {} cap on this CPU",
                    cap.name()
                ))
            })?;
            (Isa::widest_within(cap.usable()), g)
        } else {
            autodnn::gemm::fma_peak(cap, threads, ITERS)
        };
        if g > best.1 {
            best = (isa, g);
        }
    }
    let report = PeakReport {
        dtype: if bf16 { "bf16" } else { "f32" },
        isa: best.0.name(),
        threads,
        family: if bf16 {
            autodnn::gemm::bf16_peak_family(cap)
        } else {
            None
        },
        gflops: best.1,
    };
    if args.json {
        let line = serde_json::to_string(&report)
            .map_err(|e| CliError::fail(format!("encoding JSON: {e}")))?;
        writeln!(out, "{line}")?;
    } else {
        writeln!(
            out,
            "{} peak: {:.1} GFLOP/s ({} threads, {}{}, best of {TRIES})",
            if bf16 { "bf16 dot-product" } else { "f32 FMA" },
            report.gflops,
            report.threads,
            report.isa,
            report
                .family
                .map_or(String::new(), |f| format!(", {f} units"))
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `autodnn peak --memory`: the copy bandwidth on `threads` threads.
fn memory(args: &PeakArgs, threads: usize, cap: Isa, out: &mut impl Write) -> CliResult {
    let h = autodnn::Handle::with_threads(threads)?;
    h.set_isa_cap(cap);
    let bytes = autodnn::layers::transform::DEFAULT_BANDWIDTH_BYTES;
    let report = MemoryReport {
        memory: true,
        threads,
        bytes,
        gbps: h.copy_bandwidth(bytes, COPY_REPS)?,
    };
    if args.json {
        let line = serde_json::to_string(&report)
            .map_err(|e| CliError::fail(format!("encoding JSON: {e}")))?;
        writeln!(out, "{line}")?;
    } else {
        writeln!(
            out,
            "copy bandwidth: {:.1} GB/s read + written ({} threads, {} MiB copied, median of \
             {COPY_REPS})",
            report.gbps,
            threads,
            bytes >> 20
        )?;
    }
    out.flush()?;
    Ok(())
}
