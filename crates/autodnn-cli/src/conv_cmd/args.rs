//! The flags of `autodnn conv` and what they select: the layout, the algorithms, the epilogue
//! and the `.npy` paths of a run on real data.

use std::path::PathBuf;

use autodnn::conv::{Activation, Epilogue};
use autodnn::{DataType, Layout};
use clap::{Args, ValueEnum};

use super::dir::{Dir, DirArg};
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
    /// Direction: fwd (y from x, w), bwd_d (dx from dy, w), bwd_w (dw from x, dy), bwd_wb
    /// (dw and the bias gradient db: each row is the filter algorithm's time plus the fastest
    /// backward-bias algorithm's, named FILTER+BIAS in the table and "bias" in JSON) or all
    /// (fwd, bwd_d and bwd_w per problem, then a total per direction and their sum)
    #[arg(long, value_enum, value_name = "DIR", default_value_t = DirArg::Fwd)]
    pub dir: DirArg,
    /// Algorithm name, comma-separated names, or `all` (every algorithm registered for the
    /// direction, in registry order)
    #[arg(long, value_name = "NAME|all", default_value = "all")]
    pub algo: String,
    /// Worker threads [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory order of x and y (filters: KCRS with nchw, KRSC with nhwc)
    #[arg(long, value_enum, default_value_t = LayoutArg::Nchw)]
    pub layout: LayoutArg,
    #[command(flatten)]
    pub precision: crate::math_args::MathArgs,
    /// Element type of x and w (fwd only): f32, bf16 or f16 (widened to f32 for the kernels,
    /// y rounded once at the end)
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub dtype: String,
    /// Element type of y [default: --dtype's]; f32 with bf16 or f16 inputs is allowed
    #[arg(long, value_name = "TYPE")]
    pub y_dtype: Option<String>,
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
    /// (fwd), or --dy and --output (bwd_w, bwd_wb)
    #[arg(long, value_name = "X.npy")]
    pub input: Option<PathBuf>,
    /// Output gradient dy (.npy, f32, shaped like y) for one backward run on real data
    #[arg(long, value_name = "DY.npy")]
    pub dy: Option<PathBuf>,
    /// Where --dir bwd_wb writes the bias gradient db (.npy, f32, shape [K])
    #[arg(long, value_name = "DB.npy")]
    pub output_bias: Option<PathBuf>,
    /// Filter (.npy, f32) for one run on real data
    #[arg(long, value_name = "W.npy")]
    pub weights: Option<PathBuf>,
    /// Where to write the output (.npy, f32) of a run on real data: y (fwd), dx (bwd_d) or dw
    /// (bwd_w, bwd_wb)
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
    /// Scale of the convolution: y = act(alpha·conv(x, w) + bias + beta·z); backward: out =
    /// alpha·gradient + beta·out
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub alpha: f32,
    /// Scale of the residual z; backward: of the output's prior contents (generated integers
    /// with generated data, zeros with real data)
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
    if args.dir != DirArg::Fwd {
        // The backward operations have no fused epilogue: only alpha and beta.
        for (flag, given) in [
            ("--act", act != Activation::default()),
            ("--bias", args.bias.is_some()),
            ("--residual", args.residual.is_some()),
            ("--prepared", args.prepared),
        ] {
            if given {
                return Err(CliError::bad(format!(
                    "bad {flag}: the forward epilogue has no meaning with --dir {} (the backward \
                     directions take --alpha and --beta only)",
                    dir_name(args.dir)
                )));
            }
        }
        if args.dir != DirArg::All {
            return Ok(Epilogue::default());
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

/// The files of a run on real data, by direction.
pub(super) enum RealPaths {
    /// x, w → y.
    Fwd { x: PathBuf, w: PathBuf, y: PathBuf },
    /// dy, w → dx.
    BwdD {
        w: PathBuf,
        dy: PathBuf,
        dx: PathBuf,
    },
    /// x, dy → dw (and db with bwd_wb).
    BwdW {
        x: PathBuf,
        dy: PathBuf,
        dw: PathBuf,
        db: Option<PathBuf>,
    },
}

pub(super) fn dir_name(d: DirArg) -> &'static str {
    match d {
        DirArg::Fwd => Dir::Fwd.name(),
        DirArg::BwdD => Dir::BwdD.name(),
        DirArg::BwdW => Dir::BwdW.name(),
        DirArg::BwdWb => Dir::BwdWb.name(),
        DirArg::All => "all",
    }
}

/// The files of a run on real data when any is given, `None` when none is; bad input when
/// one the direction needs is missing or one it does not read is given.
pub(super) fn real_data_paths(args: &ConvArgs) -> CliResult<Option<RealPaths>> {
    let flags: [(&str, &Option<PathBuf>); 5] = [
        ("--input", &args.input),
        ("--weights", &args.weights),
        ("--dy", &args.dy),
        ("--output", &args.output),
        ("--output-bias", &args.output_bias),
    ];
    if flags.iter().all(|(_, p)| p.is_none()) {
        return Ok(None);
    }
    let dir = dir_name(args.dir);
    let needed: &[&str] = match args.dir {
        DirArg::Fwd => &["--input", "--weights", "--output"],
        DirArg::BwdD => &["--weights", "--dy", "--output"],
        DirArg::BwdW => &["--input", "--dy", "--output"],
        DirArg::BwdWb => &["--input", "--dy", "--output", "--output-bias"],
        DirArg::All => {
            return Err(CliError::bad(
                "bad --dir = all: a run on .npy files takes one direction (fwd, bwd_d, bwd_w \
                 or bwd_wb)",
            ))
        }
    };
    for (flag, p) in &flags {
        if p.is_some() && !needed.contains(flag) {
            return Err(CliError::bad(format!(
                "bad arguments: {flag} is not read with --dir {dir} (it takes {})",
                needed.join(", ")
            )));
        }
    }
    let missing: Vec<&str> = flags
        .iter()
        .filter(|(f, p)| p.is_none() && needed.contains(f))
        .map(|(f, _)| *f)
        .collect();
    if !missing.is_empty() {
        return Err(CliError::bad(format!(
            "bad arguments: {} go together with --dir {dir} (missing {})",
            needed.join(", "),
            missing.join(", ")
        )));
    }
    let get = |p: &Option<PathBuf>| p.clone().unwrap_or_default();
    Ok(Some(match args.dir {
        DirArg::Fwd => RealPaths::Fwd {
            x: get(&args.input),
            w: get(&args.weights),
            y: get(&args.output),
        },
        DirArg::BwdD => RealPaths::BwdD {
            w: get(&args.weights),
            dy: get(&args.dy),
            dx: get(&args.output),
        },
        _ => RealPaths::BwdW {
            x: get(&args.input),
            dy: get(&args.dy),
            dw: get(&args.output),
            db: args.output_bias.clone(),
        },
    }))
}

/// The element types (x and w, y) that `--dtype` and `--y-dtype` ask for.
///
/// # Errors
/// Bad input naming the flag for an unknown type, or reduced types with a backward direction
/// or `.npy` data.
pub(super) fn dtypes_of(args: &ConvArgs, real: bool) -> CliResult<(DataType, DataType)> {
    let parse = |flag: &str, s: &str| {
        DataType::parse(s)
            .ok_or_else(|| CliError::bad(format!("bad {flag} = {s}: expected f32, bf16 or f16")))
    };
    let dt = parse("--dtype", &args.dtype)?;
    let ydt = match &args.y_dtype {
        Some(s) => parse("--y-dtype", s)?,
        None => dt,
    };
    if ydt != dt && ydt != DataType::F32 {
        return Err(CliError::bad(format!(
            "bad --y-dtype = {}: must be --dtype's ({}) or f32",
            ydt.name(),
            dt.name()
        )));
    }
    if dt != DataType::F32 && args.dir != DirArg::Fwd {
        return Err(CliError::bad(format!(
            "bad --dtype = {}: the backward directions compute f32 tensors",
            dt.name()
        )));
    }
    if dt != DataType::F32 && real {
        return Err(CliError::bad(format!(
            "bad --dtype = {}: .npy runs read and write f32 tensors",
            dt.name()
        )));
    }
    Ok((dt, ydt))
}
