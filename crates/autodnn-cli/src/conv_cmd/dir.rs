//! The directions of `--dir` (benchdnn's names) and the algorithms of each direction's
//! registry, taken from the library at run time.

use autodnn::conv::ConvAlgorithm;
use autodnn::op::{Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, Registered};
use autodnn::{ConvProblem, Error, OpKind};
use clap::ValueEnum;

use crate::error::{CliError, CliResult};

/// What `--dir` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DirArg {
    /// The forward convolution y = conv(x, w)
    #[value(name = "fwd")]
    Fwd,
    /// Backward data: dx from dy and w
    #[value(name = "bwd_d")]
    BwdD,
    /// Backward filter: dw from x and dy
    #[value(name = "bwd_w")]
    BwdW,
    /// Backward filter and bias: dw from x and dy, and db (Σ of dy per output channel)
    #[value(name = "bwd_wb")]
    BwdWb,
    /// fwd, bwd_d and bwd_w in turn (one training step's convolutions)
    #[value(name = "all")]
    All,
}

/// One direction that is timed and reported on its own lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Fwd,
    BwdD,
    BwdW,
    BwdWb,
}

impl Dir {
    /// The name in JSON's `dir` and the table.
    pub fn name(self) -> &'static str {
        match self {
            Dir::Fwd => "fwd",
            Dir::BwdD => "bwd_d",
            Dir::BwdW => "bwd_w",
            Dir::BwdWb => "bwd_wb",
        }
    }

    /// The library operation whose registry the direction's algorithms come from (bwd_wb:
    /// the filter's; its bias gradient is the backward-bias operation).
    pub fn op(self) -> OpKind {
        match self {
            Dir::Fwd => OpKind::ConvForward,
            Dir::BwdD => OpKind::ConvBackwardData,
            Dir::BwdW | Dir::BwdWb => OpKind::ConvBackwardFilter,
        }
    }
}

impl DirArg {
    /// The directions run, in order.
    pub fn dirs(self) -> Vec<Dir> {
        match self {
            DirArg::Fwd => vec![Dir::Fwd],
            DirArg::BwdD => vec![Dir::BwdD],
            DirArg::BwdW => vec![Dir::BwdW],
            DirArg::BwdWb => vec![Dir::BwdWb],
            DirArg::All => vec![Dir::Fwd, Dir::BwdD, Dir::BwdW],
        }
    }
}

/// An algorithm of any direction's registry.
#[derive(Clone, Copy)]
pub enum AnyAlgo {
    Fwd(&'static dyn ConvAlgorithm),
    Data(&'static dyn Algorithm<ConvBackwardData>),
    Filter(&'static dyn Algorithm<ConvBackwardFilter>),
    Bias(&'static dyn Algorithm<ConvBackwardBias>),
}

impl AnyAlgo {
    pub fn name(self) -> &'static str {
        match self {
            AnyAlgo::Fwd(a) => a.name(),
            AnyAlgo::Data(a) => a.name(),
            AnyAlgo::Filter(a) => a.name(),
            AnyAlgo::Bias(a) => a.name(),
        }
    }

    /// The algorithm's check on `p`, a problem of its operation.
    pub fn check(self, p: &ConvProblem) -> Result<(), String> {
        match self {
            AnyAlgo::Fwd(a) => a.check(p),
            AnyAlgo::Data(a) => a.check(p),
            AnyAlgo::Filter(a) => a.check(p),
            AnyAlgo::Bias(a) => a.check(p),
        }
    }

    /// Workspace bytes of one run on `p`, a problem of its operation.
    pub fn workspace_bytes(self, p: &ConvProblem) -> usize {
        match self {
            AnyAlgo::Fwd(a) => a.workspace_bytes(p),
            AnyAlgo::Data(a) => a.workspace_bytes(p),
            AnyAlgo::Filter(a) => a.workspace_bytes(p),
            AnyAlgo::Bias(a) => a.workspace_bytes(p),
        }
    }
}

/// Every algorithm of `op`'s registry, in registry order.
pub fn registry(op: OpKind) -> Vec<AnyAlgo> {
    match op {
        OpKind::ConvForward => autodnn::conv::algorithms()
            .iter()
            .map(|&a| AnyAlgo::Fwd(a))
            .collect(),
        OpKind::ConvBackwardData => <ConvBackwardData as Registered>::algorithms()
            .iter()
            .map(|&a| AnyAlgo::Data(a))
            .collect(),
        OpKind::ConvBackwardFilter => <ConvBackwardFilter as Registered>::algorithms()
            .iter()
            .map(|&a| AnyAlgo::Filter(a))
            .collect(),
        OpKind::ConvBackwardBias => <ConvBackwardBias as Registered>::algorithms()
            .iter()
            .map(|&a| AnyAlgo::Bias(a))
            .collect(),
        _ => Vec::new(),
    }
}

/// The algorithms `--algo` names in `op`'s registry: `all`, or comma-separated names. With
/// `lenient`, names the registry lacks are skipped (several directions share one `--algo`; the
/// caller checks that each name is in one of them).
pub fn select_in(op: OpKind, arg: &str, lenient: bool) -> CliResult<Vec<AnyAlgo>> {
    let arg = arg.trim();
    let all = registry(op);
    if arg == "all" {
        return Ok(all);
    }
    let mut out: Vec<AnyAlgo> = Vec::new();
    for name in arg.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(CliError::bad(format!(
                "bad --algo = {arg:?}: empty algorithm name"
            )));
        }
        match all.iter().find(|a| a.name() == name) {
            Some(&a) => {
                if !out.iter().any(|b| b.name() == name) {
                    out.push(a);
                }
            }
            None if lenient => {}
            None => {
                let known: Vec<&str> = all.iter().map(|a| a.name()).collect();
                return Err(CliError::from(Error::UnknownAlgorithm {
                    name: name.into(),
                    known: known.join(", "),
                })
                .context(format!("--algo ({})", op.tag())));
            }
        }
    }
    Ok(out)
}

/// The algorithms of each direction, every name of `--algo` found in at least one.
pub fn select_per_dir(dirs: &[Dir], arg: &str) -> CliResult<Vec<Vec<AnyAlgo>>> {
    if dirs.len() == 1 {
        return Ok(vec![select_in(dirs[0].op(), arg, false)?]);
    }
    let per: Vec<Vec<AnyAlgo>> = dirs
        .iter()
        .map(|d| select_in(d.op(), arg, true))
        .collect::<CliResult<_>>()?;
    if arg.trim() != "all" {
        for name in arg.split(',').map(str::trim) {
            if !per.iter().flatten().any(|a| a.name() == name) {
                let known: Vec<String> = dirs
                    .iter()
                    .map(|d| {
                        let names: Vec<&str> = registry(d.op()).iter().map(|a| a.name()).collect();
                        format!("{}: {}", d.name(), names.join(", "))
                    })
                    .collect();
                return Err(CliError::bad(format!(
                    "bad --algo = {name}: in no registry of the directions run (known: {})",
                    known.join("; ")
                )));
            }
        }
    }
    Ok(per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_and_selection() {
        for op in [
            OpKind::ConvForward,
            OpKind::ConvBackwardData,
            OpKind::ConvBackwardFilter,
            OpKind::ConvBackwardBias,
        ] {
            assert!(!registry(op).is_empty(), "{}", op.tag());
            assert_eq!(
                select_in(op, "all", false).unwrap().len(),
                registry(op).len()
            );
        }
        assert_eq!(
            select_in(OpKind::ConvBackwardData, "direct,direct", false)
                .unwrap()
                .len(),
            1
        );
        assert!(matches!(
            select_in(OpKind::ConvBackwardData, "nosuch", false),
            Err(CliError::Bad(_))
        ));
        assert!(select_per_dir(&[Dir::Fwd, Dir::BwdD], "nosuch").is_err());
        assert!(select_per_dir(&[Dir::Fwd, Dir::BwdD], "direct").is_ok());
    }
}
