//! The problems to run: PROBLEM arguments (strings or files) or a built-in model's layers.

use autodnn::{ConvProblem, Error, ProblemSpec};

use super::args::ConvArgs;
use crate::error::{CliError, CliResult};

/// A problem to run: its description (with the batch actually used) and its descriptors.
pub(super) struct Job {
    pub(super) spec: ProblemSpec,
    pub(super) problem: ConvProblem,
}

/// Parses the PROBLEM arguments or looks up `--model`, and applies `--mb`.
pub(super) fn collect_specs(args: &ConvArgs) -> CliResult<Vec<ProblemSpec>> {
    problem_specs(args.model.as_deref(), &args.problems, args.mb)
}

/// The problems of PROBLEM arguments (strings or files) or of a built-in model, with `mb`
/// applied (a model's default batch is 1, a problem's its own).
///
/// # Errors
/// Bad input for both or neither, an unknown model, a bad string or an unreadable file.
pub fn problem_specs(
    model: Option<&str>,
    problems: &[String],
    mb: Option<usize>,
) -> CliResult<Vec<ProblemSpec>> {
    let specs =
        match (model, problems.is_empty()) {
            (Some(_), false) => {
                return Err(CliError::bad(
                    "bad arguments: give PROBLEMs or --model, not both",
                ))
            }
            (None, true) => return Err(CliError::bad(
                "bad arguments: give at least one PROBLEM (a problem string or a file of them) \
                 or --model NAME",
            )),
            (Some(model), true) => {
                let known = autodnn::models::names();
                if !known.contains(&model) {
                    let list = if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    };
                    return Err(CliError::bad(format!(
                        "bad --model = {model}: unknown model (known: {list})"
                    )));
                }
                let mb = mb.unwrap_or(1);
                autodnn::models::layers(model)?
                    .into_iter()
                    .map(|s| s.with_mb(mb))
                    .collect()
            }
            (None, false) => {
                let mut all = Vec::new();
                for arg in problems {
                    let specs = read_problems(arg)?;
                    if specs.is_empty() {
                        return Err(CliError::bad(format!(
                            "bad PROBLEM = {arg}: the file holds no problems"
                        )));
                    }
                    all.extend(specs);
                }
                match mb {
                    Some(mb) => all.into_iter().map(|s| s.with_mb(mb)).collect(),
                    None => all,
                }
            }
        };
    Ok(specs)
}

/// A PROBLEM argument: a file of problem strings when `arg` names a file, else one string. A
/// file that cannot be read is bad input too: the user named it.
fn read_problems(arg: &str) -> CliResult<Vec<ProblemSpec>> {
    autodnn::read_problems(arg).map_err(|e| match e {
        Error::Io { path, message } => CliError::bad(format!("{path}: cannot read: {message}")),
        e => e.into(),
    })
}
