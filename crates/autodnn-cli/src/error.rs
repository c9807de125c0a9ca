//! The command's error: bad input (exit 2) or any other failure (exit 1), each one line.

use std::fmt;

/// Why the command stopped.
#[derive(Debug)]
pub enum CliError {
    /// The user's input is wrong (exit status 2).
    Bad(String),
    /// Anything else went wrong (exit status 1).
    Fail(String),
}

impl CliError {
    /// Bad input.
    pub fn bad(msg: impl Into<String>) -> CliError {
        CliError::Bad(msg.into())
    }

    /// Any other failure.
    pub fn fail(msg: impl Into<String>) -> CliError {
        CliError::Fail(msg.into())
    }

    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Bad(_) => 2,
            CliError::Fail(_) => 1,
        }
    }

    /// The same error with `prefix: ` in front of its message.
    pub fn context(self, prefix: impl fmt::Display) -> CliError {
        match self {
            CliError::Bad(m) => CliError::Bad(format!("{prefix}: {m}")),
            CliError::Fail(m) => CliError::Fail(format!("{prefix}: {m}")),
        }
    }

    /// The message, on one line.
    pub fn message(&self) -> String {
        let m = match self {
            CliError::Bad(m) | CliError::Fail(m) => m,
        };
        m.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

impl From<autodnn::Error> for CliError {
    fn from(e: autodnn::Error) -> CliError {
        if e.is_bad_input() {
            CliError::Bad(e.to_string())
        } else {
            CliError::Fail(e.to_string())
        }
    }
}

/// Writing results to stdout failed (a closed pipe, a full disk).
/// A closed pipe (`autodnn ... | head`) ends the command quietly, with status 1.
impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::Fail(String::new())
        } else {
            CliError::Fail(format!("writing output: {e}"))
        }
    }
}

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;
