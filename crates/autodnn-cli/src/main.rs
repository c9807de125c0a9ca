//! The `autodnn` command: inspect the machine, run and check convolution problems, time GEMM
//! and measure the FMA peak.
//!
//! stdout carries results only; diagnostics go to stderr, one line each. Exit status: 0 on
//! success, 2 for bad input, 1 for any other failure.

mod cache_cmd;
mod calibrate_cmd;
mod conv_cmd;
mod data;
mod error;
mod gemm_cmd;
mod info;
mod math_args;
mod npy;
mod op_cmd;
mod peak;
mod tune_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::CliResult;

/// Convolution with measured algorithm selection: inspect the machine, run and check problems.
#[derive(Debug, Parser)]
#[command(name = "autodnn", version = autodnn::VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Version, threads, CPU features, instruction set, cache path and algorithms
    Info {
        /// One JSON object instead of text
        #[arg(long)]
        json: bool,
    },
    /// Run convolution problems with each algorithm: time them and, with --check, compare
    /// against the f64 reference; or run once on .npy data
    Conv(Box<conv_cmd::ConvArgs>),
    /// Select (and, by policy, time) an algorithm for every distinct layer, run each choice
    /// with the fallback chain, and report choices, sources, times and totals
    Tune(Box<tune_cmd::TuneArgs>),
    /// Show, clear or merge the tuning cache
    Cache(cache_cmd::CacheArgs),
    /// Measure the calibration problems and fit the heuristic's cost model
    Calibrate(calibrate_cmd::CalibrateArgs),
    /// Time one GEMM call (or one strided-batched call) and report GFLOP/s
    Gemm(gemm_cmd::GemmArgs),
    /// Measure the f32 FMA peak of this machine (GFLOP/s)
    Peak(peak::PeakArgs),
    /// Run the operators beside convolution (activations, pooling, softmax, normalization,
    /// tensor operations, layout transforms): time them and, with --check, compare against
    /// the f64 reference; or run once on .npy data
    Op(Box<op_cmd::OpArgs>),
}

/// Worker threads when `--threads` is not given: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn run(cli: Cli) -> CliResult {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Info { json } => info::run(json, &mut out),
        Command::Conv(args) => conv_cmd::run(&args, &mut out),
        Command::Tune(args) => tune_cmd::run(&args, &mut out),
        Command::Cache(args) => cache_cmd::run(&args, &mut out),
        Command::Calibrate(args) => calibrate_cmd::run(&args, &mut out),
        Command::Gemm(args) => gemm_cmd::run(&args, &mut out),
        Command::Peak(args) => peak::run(&args, &mut out),
        Command::Op(args) => op_cmd::run(&args, &mut out),
    }
}

fn main() -> ExitCode {
    // A panic is a bug; report it on one line (and exit 1) rather than as a trace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = writeln!(
            std::io::stderr(),
            "autodnn: internal error (panicked{at}): {msg}"
        );
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            let msg = e.message();
            if !msg.is_empty() {
                let _ = writeln!(std::io::stderr(), "autodnn: {msg}");
            }
            ExitCode::from(e.exit_code() as u8)
        }
        Err(_) => ExitCode::from(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CliError;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn one_line_messages() {
        let e = CliError::bad("a\nb  c");
        assert_eq!(e.message(), "a b c");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(CliError::fail("x").exit_code(), 1);
    }
}
