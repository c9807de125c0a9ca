//! Deployable plans: a forward convolution's choice, its ranking for the fallback chain and
//! the chosen algorithm's prepared filter, saved to bytes and loaded back with checks, so that
//! a deployment tunes offline and then runs with no timing and no filter transformation.
//!
//! The bytes: the magic `ADNNPLAN`, the format version (u32, little-endian), a JSON header's
//! length (u64) and the header (library version, instruction set, CPU model, problem,
//! algorithm, chain, the prepared form's flags and its number of values), the values (f32,
//! little-endian), and an FNV-1a checksum (u64) of everything before it. Loading checks each
//! part and refuses a mismatch with an error naming it (`plan.magic`, `plan.format_version`,
//! `plan.checksum`, `plan.length`, `plan.library_version`, `plan.problem`, `plan.algo`,
//! `plan.isa`) rather than run a wrong transform. A plan made under another instruction set
//! (its prepared form may be laid out for that set's kernels) is prepared again from the
//! plain filter when the caller gives it, and the dispatch log says so; without the filter
//! the load is refused.

use serde::{Deserialize, Serialize};

use super::{Plan, Source};
use crate::cpu::Isa;
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::op::prepared::PreparedWeights;
use crate::op::{Algorithm, ConvForward, Registered};

/// The first bytes of a plan.
pub const PLAN_MAGIC: &[u8; 8] = b"ADNNPLAN";
/// The format version this build writes and reads.
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// A forward convolution's deployable plan: the plan (problem, chosen algorithm first in the
/// chain) and the chosen algorithm's prepared weights, made under `isa`.
#[derive(Debug, Clone)]
pub struct DeployedPlan {
    pub(crate) plan: Plan<ConvForward>,
    pub(crate) weights: PreparedWeights,
    pub(crate) isa: Isa,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    library_version: String,
    isa: Isa,
    cpu: String,
    problem: ConvProblem,
    algo: String,
    chain: Vec<String>,
    transformed: bool,
    bf16: bool,
    values: usize,
}

/// The registered forward algorithm of that name.
fn registered(name: &str) -> Result<&'static str> {
    <ConvForward as Registered>::algorithms()
        .iter()
        .map(|a| Algorithm::<ConvForward>::name(*a))
        .find(|n| *n == name)
        .ok_or_else(|| bad("plan.algo", name, "not an algorithm of this build"))
}

/// The checksum a plan ends with, of the bytes before it (FNV-1a, 64 bits): what detects
/// corruption (not tampering: anyone may compute it).
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn bad(field: &str, value: impl std::fmt::Display, reason: impl Into<String>) -> Error {
    Error::bad(field, value.to_string(), reason.into())
}

impl DeployedPlan {
    /// A plan and the weights prepared, under `isa`, for its first algorithm.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `weights` when they were prepared for another algorithm or
    /// problem.
    pub fn new(
        plan: Plan<ConvForward>,
        weights: PreparedWeights,
        isa: Isa,
    ) -> Result<DeployedPlan> {
        if weights.algo() != plan.algo() {
            return Err(bad(
                "weights",
                weights.algo(),
                format!(
                    "prepared for another algorithm than the plan's {}",
                    plan.algo()
                ),
            ));
        }
        if *weights.problem() != plan.problem().as_f32().with_epilogue(Default::default()) {
            return Err(bad(
                "weights",
                "another problem",
                "prepared for another problem",
            ));
        }
        Ok(DeployedPlan { plan, weights, isa })
    }

    /// The plan: its problem and its chain, the chosen algorithm first.
    pub fn plan(&self) -> &Plan<ConvForward> {
        &self.plan
    }
    /// The chosen algorithm's prepared weights.
    pub fn weights(&self) -> &PreparedWeights {
        &self.weights
    }
    /// The instruction set the weights were prepared under.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The plan as bytes (see the module's description).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the bytes cannot be had.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let data = self.weights.data();
        let header = Header {
            library_version: crate::VERSION.into(),
            isa: self.isa,
            cpu: super::cache::cpu_model(),
            problem: self.plan.problem,
            algo: self.weights.algo().into(),
            chain: self.plan.chain.iter().map(|s| s.to_string()).collect(),
            transformed: self.weights.is_transformed(),
            bf16: self.weights.is_bf16(),
            values: data.len(),
        };
        let json = serde_json::to_vec(&header)
            .map_err(|e| Error::bad("plan", "header", format!("cannot serialise: {e}")))?;
        let len = 8 + 4 + 8 + json.len() + 4 * data.len() + 8;
        let mut out = crate::alloc::try_vec_with_capacity(len, "a plan's bytes")?;
        out.extend_from_slice(PLAN_MAGIC);
        out.extend_from_slice(&PLAN_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for v in data {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Reads a plan for `problem` (checked against the plan's) from `bytes`. The weights are
    /// those saved; [`crate::Handle::load_plan`] also checks the instruction set.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming the part that does not match (see the module's
    /// description); [`Error::OutOfMemory`].
    pub fn from_bytes(bytes: &[u8], problem: &ConvProblem) -> Result<DeployedPlan> {
        let n = bytes.len();
        if n < 8 || &bytes[..8] != PLAN_MAGIC {
            return Err(bad(
                "plan.magic",
                format!("{n} bytes"),
                "not an autodnn plan",
            ));
        }
        if n < 8 + 4 + 8 + 8 {
            return Err(bad(
                "plan.length",
                n,
                "truncated: shorter than a plan's fixed parts",
            ));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
        if version != PLAN_FORMAT_VERSION {
            return Err(bad(
                "plan.format_version",
                version,
                format!("this build reads format {PLAN_FORMAT_VERSION}"),
            ));
        }
        let (body, tail) = bytes.split_at(n - 8);
        let sum = u64::from_le_bytes(tail.try_into().unwrap_or_default());
        if checksum(body) != sum {
            return Err(bad(
                "plan.checksum",
                format!("{sum:#x}"),
                "the bytes are corrupt or truncated",
            ));
        }
        let hlen = u64::from_le_bytes(body[12..20].try_into().unwrap_or_default());
        let rest = &body[20..];
        let hlen = usize::try_from(hlen)
            .ok()
            .filter(|&h| h <= rest.len())
            .ok_or_else(|| bad("plan.length", hlen, "a header longer than the plan"))?;
        let header: Header = serde_json::from_slice(&rest[..hlen])
            .map_err(|e| bad("plan.header", "JSON", format!("unreadable: {e}")))?;
        let values = &rest[hlen..];
        if values.len() % 4 != 0 || values.len() / 4 != header.values {
            return Err(bad(
                "plan.length",
                values.len(),
                format!("the header announces {} values", header.values),
            ));
        }
        if header.library_version != crate::VERSION {
            return Err(bad(
                "plan.library_version",
                &header.library_version,
                format!(
                    "made by another library version; this is {}",
                    crate::VERSION
                ),
            ));
        }
        let mine = problem.with_epilogue(Default::default());
        if header.problem.with_epilogue(Default::default()) != mine {
            return Err(bad(
                "plan.problem",
                "a different problem",
                "this plan was made for another problem",
            ));
        }
        let algo = registered(&header.algo)?;
        let mut chain = Vec::with_capacity(header.chain.len().min(64));
        for name in &header.chain {
            chain.push(registered(name)?);
        }
        if chain.first() != Some(&algo) {
            return Err(bad(
                "plan.algo",
                algo,
                "the chain does not start with the prepared algorithm",
            ));
        }
        // A plain filter must be whole: the calls read it as the problem's filter without
        // checking its length again. A transformed one is checked by its algorithm at every
        // call (header and length).
        if !header.transformed && header.values != problem.w().elements() {
            return Err(bad(
                "plan.length",
                header.values,
                format!(
                    "a plain filter of this problem holds {} values",
                    problem.w().elements()
                ),
            ));
        }
        let mut data = crate::alloc::try_vec_with_capacity(header.values, "a plan's weights")?;
        data.extend(
            values
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        let weights = PreparedWeights::new(
            algo,
            &header.problem.as_f32(),
            data,
            header.transformed,
            header.bf16,
        );
        let mut plan = Plan::single(problem, algo, Source::Prepared);
        plan.chain = chain;
        Ok(DeployedPlan {
            plan,
            weights,
            isa: header.isa,
        })
    }
}
