//! `autodnn cache show|clear|merge`: inspect and manage the tuning cache file.

use std::io::Write;
use std::path::PathBuf;

use autodnn::select::{AlgoPerf, TuningCache};
use autodnn::ProblemSpec;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::conv_cmd;
use crate::error::{CliError, CliResult};

/// Arguments of `autodnn cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Tuning-cache file [default: the per-user cache, see `autodnn info`]
    #[arg(long, value_name = "FILE", global = true)]
    pub cache: Option<PathBuf>,
    #[command(subcommand)]
    pub action: CacheAction,
}

/// What to do with the cache.
#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// List the entries: problem, threads, CPU, instruction set, version, ranking
    Show {
        /// One JSON object per entry
        #[arg(long)]
        json: bool,
    },
    /// Remove every entry
    Clear,
    /// Add the entries of other cache files (for a key both hold, the faster choice is kept)
    Merge {
        /// Cache files to merge in
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Serialize)]
struct EntryLine<'a> {
    op: &'a str,
    problem: String,
    layout: String,
    epilogue: String,
    threads: usize,
    cpu: &'a str,
    isa: &'static str,
    version: &'a str,
    this_machine: bool,
    /// Measured for calls with prepared weights (`tune --prepared`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    prepared: bool,
    source: &'static str,
    records: &'a [AlgoPerf],
}

/// Runs `autodnn cache`.
///
/// # Errors
/// Bad input for an unreadable or invalid file to merge, a cache path whose folder does not
/// exist, or (for `show`, which changes nothing) a cache file that is not a tuning cache; a
/// failure when the cache cannot be read or written.
pub fn run(args: &CacheArgs, out: &mut impl Write) -> CliResult {
    let path = args
        .cache
        .clone()
        .unwrap_or_else(autodnn::default_cache_path);
    match &args.action {
        CacheAction::Show { json } => {
            let cache = TuningCache::load_read_only(&path)?;
            if !json {
                writeln!(out, "cache: {} ({} entries)", path.display(), cache.len())?;
            }
            for (k, e) in cache.entries() {
                // Loaded keys are valid problems of their operation; the convolutions' are
                // shown as benchdnn strings, any other as its JSON.
                let conv = k.problem_as::<autodnn::ConvProblem>();
                let line = EntryLine {
                    op: &k.op,
                    problem: conv.as_ref().map_or_else(
                        || format!("{}:{}", k.op, k.problem),
                        |p| ProblemSpec::from_problem(p, "").to_string(),
                    ),
                    layout: conv
                        .as_ref()
                        .map_or("-", |p| p.x().layout().map_or("strided", |l| l.name()))
                        .into(),
                    epilogue: match &conv {
                        Some(p) if p.epilogue().is_none() => "none".into(),
                        Some(p) => format!("{:?}", p.epilogue()),
                        None => "-".into(),
                    },
                    threads: k.threads,
                    cpu: &k.cpu,
                    isa: k.isa.name(),
                    version: &k.version,
                    this_machine: k.is_this_machine(),
                    prepared: k.prepared,
                    source: e.source.name(),
                    records: &e.records,
                };
                if *json {
                    writeln!(out, "{}", conv_cmd::to_json(&line)?)?;
                } else {
                    let ranking: Vec<String> = e
                        .records
                        .iter()
                        .map(|r| match r.ms {
                            Some(ms) => format!("{} {ms:.3} ms ({:?})", r.algo, r.status),
                            None => format!("{} ({:?})", r.algo, r.status),
                        })
                        .collect();
                    writeln!(
                        out,
                        "{} [{}, {} threads, {}, {}, v{}{}{}] {}: {}",
                        line.problem,
                        line.layout,
                        line.threads,
                        line.isa,
                        line.cpu,
                        line.version,
                        if line.this_machine {
                            ""
                        } else {
                            ", not this machine"
                        },
                        if line.prepared {
                            ", prepared weights"
                        } else {
                            ""
                        },
                        line.source,
                        ranking.join(" > ")
                    )?;
                }
            }
        }
        CacheAction::Clear => {
            let old = TuningCache::load(&path)?.len();
            TuningCache::new().overwrite(&path)?;
            writeln!(out, "cleared {} ({old} entries removed)", path.display())?;
        }
        CacheAction::Merge { files } => {
            let mut incoming = Vec::new();
            for f in files {
                let c = TuningCache::read(f)
                    .map_err(|e| CliError::bad(format!("cannot merge: {e}")))?;
                incoming.push((f, c));
            }
            let mut cache = TuningCache::load(&path)?;
            for (f, c) in &incoming {
                let n = cache.merge(c);
                writeln!(
                    out,
                    "merged {n} of {} entries from {}",
                    c.len(),
                    f.display()
                )?;
            }
            cache.save(&path)?;
            writeln!(out, "cache: {} ({} entries)", path.display(), cache.len())?;
        }
    }
    out.flush()?;
    Ok(())
}
