//! `autodnn conv`: run problems with the registered algorithms of one direction or several
//! (`--dir`) on generated data (timing and, with `--check`, accuracy against the f64
//! reference), or once on data from `.npy` files.
//!
//! Split by concern: [`args`] (the flags and what they select), [`dir`] (the directions and
//! their registries), [`problems`] (the problems to run), [`inputs`] (generated forward data),
//! [`backward`] (the backward directions' data, runs and oracles), [`bench`] (timing),
//! [`check`] (accuracy), [`output`] (the table and JSON lines) and [`real_data`] (one run on
//! `.npy` files).

mod args;
mod backward;
mod bench;
mod check;
mod dir;
mod inputs;
mod output;
mod problems;
mod real_data;

use std::io::Write;

use autodnn::{ConvProblem, Handle, Layout};

use crate::error::{CliError, CliResult};

pub use args::{ConvArgs, LayoutArg};
pub use backward::output_len;
pub use bench::median_ms;
pub use check::{max_rel_err, max_rel_err_flat, max_rel_err_in};
pub use dir::{Dir, DirArg};
pub use output::to_json;
pub use problems::problem_specs;

use args::{dtypes_of, epilogue_of, real_data_paths, RealPaths};
use bench::bench;
use dir::select_per_dir;
use problems::{collect_specs, Job};
use real_data::{run_real_data, run_real_data_bwd};

/// Runs `autodnn conv`.
///
/// # Errors
/// Bad input for wrong arguments, problems, algorithm names or `.npy` files; a failure when a
/// run fails (after all results are written) or output cannot be written.
pub fn run(args: &ConvArgs, out: &mut impl Write) -> CliResult {
    if args.reps == 0 {
        return Err(CliError::bad("bad --reps = 0: must be at least 1"));
    }
    if args.mb == Some(0) {
        return Err(CliError::bad("bad --mb = 0: must be at least 1"));
    }
    let real = real_data_paths(args)?;
    let dirs = args.dir.dirs();
    let algos = select_per_dir(&dirs, &args.algo)?;
    let layout = Layout::from(args.layout);
    let epilogue = epilogue_of(args, real.is_some())?;
    let (dt, ydt) = dtypes_of(args, real.is_some())?;
    let jobs = collect_specs(args)?
        .into_iter()
        .map(|spec| {
            let problem = spec
                .to_problem(layout)
                .and_then(|p| {
                    ConvProblem::forward(
                        p.x().with_dtype(dt),
                        p.w().with_dtype(dt),
                        *p.conv(),
                        p.y().with_dtype(ydt),
                    )
                })
                .map_err(|e| CliError::from(e).context(format!("problem {spec}")))?
                .with_epilogue(epilogue);
            Ok(Job { spec, problem })
        })
        .collect::<CliResult<Vec<Job>>>()?;
    if let Some(paths) = real {
        if jobs.len() != 1 {
            return Err(CliError::bad(format!(
                "bad arguments: --input/--weights/--output take exactly one problem, got {}",
                jobs.len()
            )));
        }
        if algos[0].len() != 1 || args.algo.trim() == "all" {
            return Err(CliError::bad(format!(
                "bad --algo = {}: --input/--weights/--output need a single algorithm name",
                args.algo
            )));
        }
        let handle = make_handle(args.threads)?;
        args.precision.apply(&handle)?;
        return match (paths, algos[0][0]) {
            (RealPaths::Fwd { x, w, y }, dir::AnyAlgo::Fwd(a)) => {
                run_real_data(args, &handle, &jobs[0], a, [&x, &w, &y], out)
            }
            (paths, a) => run_real_data_bwd(args, &handle, &jobs[0], a, &paths, out),
        };
    }
    let handle = make_handle(args.threads)?;
    args.precision.apply(&handle)?;
    // Cores at full speed before the first problem is timed.
    handle.wake_cores();
    bench(args, &handle, &jobs, &dirs, &algos, out)
}

pub fn make_handle(threads: Option<usize>) -> CliResult<Handle> {
    Ok(Handle::with_threads(
        threads.unwrap_or_else(crate::default_threads),
    )?)
}
