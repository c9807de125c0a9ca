//! `autodnn gemm`: time one GEMM call (or one strided-batched call of `--batch` products) on
//! generated data and report the median time and GFLOP/s = 2·m·n·k·batch / time.

use std::io::Write;
use std::time::Instant;

use autodnn::cpu::Isa;
use autodnn::gemm::{GemmDesc, GemmInput};
use autodnn::{bf16, f16, DataType, Handle};
use clap::Args;
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// The least time spent on warm-up calls before timing. An idle core (on a virtual machine
/// especially) takes tens of milliseconds to come back to full speed: with one warm-up call,
/// small problems on 2 threads were timed at one core's speed.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(250);

/// Arguments of `autodnn gemm`.
#[derive(Debug, Args)]
pub struct GemmArgs {
    /// Rows of C and op(A)
    #[arg(long)]
    pub m: usize,
    /// Columns of C and op(B)
    #[arg(long)]
    pub n: usize,
    /// The shared dimension
    #[arg(long)]
    pub k: usize,
    /// Use Aᵀ (A stored k × m)
    #[arg(long)]
    pub transa: bool,
    /// Use Bᵀ (B stored n × k)
    #[arg(long)]
    pub transb: bool,
    /// Products in one strided-batched call
    #[arg(long, value_name = "B", default_value_t = 1)]
    pub batch: usize,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,
    /// Timed calls (after warm-up calls for at least 0.25 s); the median is reported
    #[arg(long, value_name = "R", default_value_t = 10)]
    pub reps: usize,
    /// Cap the instruction set: scalar, avx2 or avx512 [default: AUTODNN_ISA, else the widest]
    #[arg(long, value_name = "NAME")]
    pub isa: Option<String>,
    /// Element type of A and B: f32, bf16 or f16 (C is f32)
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub dtype: String,
    #[command(flatten)]
    pub precision: crate::math_args::MathArgs,
    /// One JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// What `autodnn gemm` reports.
#[derive(Debug, Serialize)]
pub struct GemmReport {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    threads: usize,
    isa: &'static str,
    dtype: &'static str,
    math: &'static str,
    bf16_units: &'static str,
    kernel: &'static str,
    ms: f64,
    gflops: f64,
}

/// Runs `autodnn gemm`.
///
/// # Errors
/// Bad input for zero reps, batch or threads, an unknown ISA name or sizes whose buffers
/// cannot be allocated; failures writing to `out`.
pub fn run(args: &GemmArgs, out: &mut impl Write) -> CliResult {
    if args.reps == 0 {
        return Err(CliError::bad("bad --reps = 0: must be at least 1"));
    }
    if args.batch == 0 {
        return Err(CliError::bad("bad --batch = 0: must be at least 1"));
    }
    let handle = Handle::with_threads(args.threads.unwrap_or_else(crate::default_threads))?;
    if let Some(name) = &args.isa {
        handle.set_isa_cap(Isa::parse("--isa", name)?);
    }
    let dtype = DataType::parse(&args.dtype).ok_or_else(|| {
        CliError::bad(format!(
            "bad --dtype = {}: expected f32, bf16 or f16",
            args.dtype.trim()
        ))
    })?;
    let (math, units) = args.precision.apply(&handle)?;
    let desc = GemmDesc::new(args.m, args.n, args.k)
        .with_transa(args.transa)
        .with_transb(args.transb);
    desc.validate()?;
    let (sa, sb, sc) = (desc.a_span()?, desc.b_span()?, desc.c_span()?);
    let alloc = |span: usize, what: &str| -> CliResult<Vec<f32>> {
        let len = span.checked_mul(args.batch).ok_or_else(|| {
            CliError::bad(format!(
                "bad sizes: {what} of {span} × {} elements overflows",
                args.batch
            ))
        })?;
        let mut v = Vec::new();
        v.try_reserve_exact(len)
            .map_err(|e| CliError::bad(format!("bad sizes: {what} needs {len} floats: {e}")))?;
        // Values in [-1, 1) from a small generator; the timing does not depend on them.
        let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
        v.extend((0..len).map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }));
        Ok(v)
    };
    let ops = Operands::new(alloc(sa, "A")?, alloc(sb, "B")?, dtype);
    let mut c = alloc(sc, "C")?;
    fn one<T: GemmInput>(
        h: &Handle,
        d: &GemmDesc,
        (a, sa): (&[T], usize),
        (b, sb): (&[T], usize),
        (c, sc): (&mut [f32], usize),
        batch: usize,
    ) -> CliResult {
        if batch == 1 {
            h.gemm(d, 1.0, a, b, 0.0, c)?;
        } else {
            h.gemm_strided_batched(d, 1.0, a, sa, b, sb, 0.0, c, sc, batch)?;
        }
        Ok(())
    }
    let call = |c: &mut [f32]| -> CliResult {
        let (h, d, n) = (&handle, &desc, args.batch);
        match &ops {
            Operands::F32(a, b) => one(h, d, (a, sa), (b, sb), (c, sc), n),
            Operands::Bf16(a, b) => one(h, d, (a, sa), (b, sb), (c, sc), n),
            Operands::F16(a, b) => one(h, d, (a, sa), (b, sb), (c, sc), n),
        }
    };
    let warm = Instant::now();
    call(&mut c)?;
    while warm.elapsed() < WARM_UP {
        call(&mut c)?;
    }
    let mut times = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t = Instant::now();
        call(&mut c)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let ms = median(&mut times);
    let flops = 2.0 * args.m as f64 * args.n as f64 * args.k as f64 * args.batch as f64;
    let report = GemmReport {
        m: args.m,
        n: args.n,
        k: args.k,
        batch: args.batch,
        threads: handle.threads(),
        isa: handle.isa().name(),
        dtype: dtype.name(),
        math: math.name(),
        bf16_units: units.name(),
        kernel: autodnn::gemm::kernel_name_for_depth(handle.isa(), dtype, math, units, args.k),
        ms,
        gflops: if ms > 0.0 { flops / ms / 1e6 } else { 0.0 },
    };
    if args.json {
        let line = serde_json::to_string(&report)
            .map_err(|e| CliError::fail(format!("encoding JSON: {e}")))?;
        writeln!(out, "{line}")?;
    } else {
        writeln!(
            out,
            "gemm m={} n={} k={}{}{} batch={} threads={} isa={} dtype={} math={} ({}): {:.4} ms, {:.1} GFLOP/s",
            report.m,
            report.n,
            report.k,
            if args.transa { " transa" } else { "" },
            if args.transb { " transb" } else { "" },
            report.batch,
            report.threads,
            report.isa,
            report.dtype,
            report.math,
            report.kernel,
            report.ms,
            report.gflops
        )?;
    }
    out.flush()?;
    Ok(())
}

/// A and B in the element type of the call.
enum Operands {
    F32(Vec<f32>, Vec<f32>),
    Bf16(Vec<bf16>, Vec<bf16>),
    F16(Vec<f16>, Vec<f16>),
}

impl Operands {
    /// `a` and `b` in `dtype`, rounded to nearest even.
    fn new(a: Vec<f32>, b: Vec<f32>, dtype: DataType) -> Operands {
        fn to<T>(v: &[f32], f: fn(f32) -> T) -> Vec<T> {
            v.iter().map(|&x| f(x)).collect()
        }
        match dtype {
            DataType::F32 => Operands::F32(a, b),
            DataType::Bf16 => Operands::Bf16(to(&a, bf16::from_f32), to(&b, bf16::from_f32)),
            DataType::F16 => Operands::F16(to(&a, f16::from_f32), to(&b, f16::from_f32)),
        }
    }
}

/// The median (mean of the middle two for an even count).
pub fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
