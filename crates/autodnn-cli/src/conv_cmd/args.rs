//! The flags of `autodnn conv` and what they select: the layout, the algorithms, the epilogue
//! and the `.npy` paths of a run on real data.

use std::path::PathBuf;

use autodnn::conv::{Activation, ConvAlgorithm, Epilogue};
use autodnn::Layout;
use clap::{Args, ValueEnum};

use crate::error::{CliError, CliResult};

/// Memory order of x and y (the filter follows: KCRS with NCHW, KRSC with NHWC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// x [N,C,H,W], w [K,C/g,R,S], y [N,K,OH,OW].
    Nchw,
    /// x [N,H,W,C], w [K,R,S,C/g], y [N,OH,OW,K].
    Nhwc,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Layout {
        match l {
            LayoutArg::Nchw => Layout::Nchw,
            LayoutArg::Nhwc => Layout::Nhwc,
        }
    }
}

/// Arguments of `autodnn conv`.
#[derive(Debug, Args)]
pub struct ConvArgs {
    /// Problem strings (benchdnn style, e.g. mb1ic16ih14oc32oh14kh3ph1) or files of them, one
    /// per line
    #[arg(value_name = "PROBLEM")]
    pub problems: Vec<String>,
    /// A built-in model's layers instead of PROBLEMs
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Algorithm name, comma-separated names, or `all` (every registered one, in registry
    /// order)
    #[arg(long, value_name = "NAME|all", default_value = "all")]
    pub algo: String,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory order of x and y (filters: KCRS with nchw, KRSC with nhwc)
    #[arg(long, value_enum, default_value_t = LayoutArg::Nchw)]
    pub layout: LayoutArg,
    /// Batch size [default: each problem's own; 1 with --model]
    #[arg(long, value_name = "N")]
    pub mb: Option<usize>,
    /// Timed runs per problem and algorithm (after one warm-up run); the median is reported
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub reps: usize,
    /// Compare against the f64 reference and report max_rel_err (a result above 1e-3 counts as
    /// failed)
    #[arg(long)]
    pub check: bool,
    /// JSON Lines output: one object per problem, then a total
    #[arg(long)]
    pub json: bool,
    /// Input tensor (.npy, f32) for one run on real data; needs --weights and --output
    #[arg(long, value_name = "X.npy")]
    pub input: Option<PathBuf>,
    /// Filter (.npy, f32) for one run on real data
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Where to write the output (.npy, f32) of a run on real data
    #[arg(long, value_name = "Y.npy")]
    pub output: Option<PathBuf>,
    /// Per-output-channel bias (.npy, f32, shape [K]) added before the activation; real data
    /// only
    #[arg(long, value_name = "B.npy")]
    pub bias: Option<PathBuf>,
    /// Residual tensor z (.npy, f32, shaped like the output) added as beta·z; real data only.
    /// Without it, beta·z uses y's prior contents (zeros for a new output) with real data, and
    /// a generated integer tensor with generated data
    #[arg(long, value_name = "Z.npy")]
    pub residual: Option<PathBuf>,
    /// Activation applied last: none, relu, relu6, clip:LO:HI, sigmoid, tanh, gelu, silu
    #[arg(long, value_name = "NAME", default_value = "none")]
    pub act: String,
    /// Scale of the convolution: y = act(alpha·conv(x, w) + bias + beta·z)
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub alpha: f32,
    /// Scale of the residual z
    #[arg(
        long,
        value_name = "B",
        default_value_t = 0.0,
        allow_hyphen_values = true
    )]
    pub beta: f32,
    /// Time calls with weights prepared beforehand for each algorithm (the preparation is not
    /// timed; algorithms with nothing to prepare run plain)
    #[arg(long)]
    pub prepared: bool,
}

/// The epilogue the flags ask for. With generated data, beta ≠ 0 adds a generated residual so
/// that repeated runs compute the same thing.
pub(super) fn epilogue_of(args: &ConvArgs, real: bool) -> CliResult<Epilogue> {
    let act = Activation::parse(&args.act)?;
    for (flag, v) in [("--alpha", args.alpha), ("--beta", args.beta)] {
        if !v.is_finite() {
            return Err(CliError::bad(format!("bad {flag} = {v}: must be finite")));
        }
    }
    if !real {
        for (flag, given) in [
            ("--bias", args.bias.is_some()),
            ("--residual", args.residual.is_some()),
        ] {
            if given {
                return Err(CliError::bad(format!(
                    "bad arguments: {flag} takes a .npy file and needs --input/--weights/--output"
                )));
            }
        }
        return Ok(Epilogue {
            bias: false,
            residual: args.beta != 0.0,
            act,
        });
    }
    Ok(Epilogue {
        bias: args.bias.is_some(),
        residual: args.residual.is_some(),
        act,
    })
}

/// `Some((x, w, y))` when the three paths are given, `None` when none is; bad input otherwise.
pub(super) fn real_data_paths(args: &ConvArgs) -> CliResult<Option<(PathBuf, PathBuf, PathBuf)>> {
    match (&args.input, &args.weights, &args.output) {
        (Some(x), Some(w), Some(y)) => Ok(Some((x.clone(), w.clone(), y.clone()))),
        (None, None, None) => Ok(None),
        (x, w, y) => {
            let missing: Vec<&str> = [("--input", x), ("--weights", w), ("--output", y)]
                .iter()
                .filter(|(_, p)| p.is_none())
                .map(|(n, _)| *n)
                .collect();
            Err(CliError::bad(format!(
                "bad arguments: --input, --weights and --output go together (missing {})",
                missing.join(", ")
            )))
        }
    }
}

/// The algorithms `--algo` names: `all`, or one or more comma-separated names.
pub(super) fn select_algorithms(arg: &str) -> CliResult<Vec<&'static dyn ConvAlgorithm>> {
    let arg = arg.trim();
    if arg == "all" {
        return Ok(autodnn::conv::algorithms().to_vec());
    }
    let mut out: Vec<&'static dyn ConvAlgorithm> = Vec::new();
    for name in arg.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(CliError::bad(format!(
                "bad --algo = {arg:?}: empty algorithm name"
            )));
        }
        let a = autodnn::conv::find(name).map_err(|e| CliError::from(e).context("--algo"))?;
        if !out.iter().any(|b| b.name() == a.name()) {
            out.push(a);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_selection() {
        let all = select_algorithms("all").unwrap();
        assert_eq!(all.len(), autodnn::conv::algorithms().len());
        assert_eq!(select_algorithms("direct").unwrap().len(), 1);
        assert_eq!(select_algorithms("direct,direct").unwrap().len(), 1);
        assert!(matches!(select_algorithms("nosuch"), Err(CliError::Bad(_))));
        assert!(matches!(
            select_algorithms("direct,"),
            Err(CliError::Bad(_))
        ));
    }
}
