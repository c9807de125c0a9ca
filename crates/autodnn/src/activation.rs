//! Elementwise activations, shared by convolution and GEMM epilogues.

use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// An elementwise activation applied last.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Identity.
    #[default]
    None,
    /// max(v, 0).
    Relu,
    /// min(max(v, lo), hi); relu6 is `Clip { lo: 0, hi: 6 }`.
    Clip {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
    /// 1 / (1 + e^-v).
    Sigmoid,
    /// tanh(v).
    Tanh,
    /// v · Φ(v), with Φ the standard normal distribution function (the erf form).
    Gelu,
    /// v · sigmoid(v) (also called swish).
    Silu,
    /// v for v ≥ 0, slope · v below.
    LeakyRelu {
        /// Slope below zero.
        slope: f32,
    },
}

impl PartialEq for Activation {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Activation {}
impl Hash for Activation {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl Activation {
    /// Names accepted by [`Activation::parse`].
    pub const NAMES: [&'static str; 8] = [
        "none", "relu", "relu6", "clip", "sigmoid", "tanh", "gelu", "silu",
    ];

    fn key(&self) -> (u8, u32, u32) {
        match *self {
            Activation::None => (0, 0, 0),
            Activation::Relu => (1, 0, 0),
            Activation::Clip { lo, hi } => (2, lo.to_bits(), hi.to_bits()),
            Activation::Sigmoid => (3, 0, 0),
            Activation::Tanh => (4, 0, 0),
            Activation::Gelu => (5, 0, 0),
            Activation::Silu => (6, 0, 0),
            Activation::LeakyRelu { slope } => (7, slope.to_bits(), 0),
        }
    }

    /// Parses `none`, `relu`, `relu6` (= clip to [0, 6]), `clip` (= relu6) or `clip:LO:HI`,
    /// `sigmoid`, `tanh`, `gelu`, `silu`, `leaky_relu:SLOPE`.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `act`.
    pub fn parse(s: &str) -> Result<Activation> {
        let bad = || {
            Error::bad(
                "act",
                s,
                "expected none, relu, relu6, clip, clip:LO:HI, sigmoid, tanh, gelu, silu or leaky_relu:SLOPE",
            )
        };
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "none" | "identity" => Activation::None,
            "relu" => Activation::Relu,
            "relu6" | "clip" => Activation::Clip { lo: 0.0, hi: 6.0 },
            "sigmoid" => Activation::Sigmoid,
            "tanh" => Activation::Tanh,
            "gelu" => Activation::Gelu,
            "silu" | "swish" => Activation::Silu,
            _ if t.starts_with("leaky_relu:") => {
                let slope: f32 = t["leaky_relu:".len()..].parse().map_err(|_| bad())?;
                if !slope.is_finite() {
                    return Err(bad());
                }
                Activation::LeakyRelu { slope }
            }
            _ => {
                let rest = t.strip_prefix("clip:").ok_or_else(bad)?;
                let (lo, hi) = rest.split_once(':').ok_or_else(bad)?;
                let lo: f32 = lo.parse().map_err(|_| bad())?;
                let hi: f32 = hi.parse().map_err(|_| bad())?;
                Activation::clip(lo, hi)?
            }
        })
    }

    /// A clip to [lo, hi].
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `act` unless lo <= hi and both are finite.
    pub fn clip(lo: f32, hi: f32) -> Result<Activation> {
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(Error::bad(
                "act",
                format!("clip:{lo}:{hi}"),
                "bounds must be finite with lo <= hi",
            ));
        }
        Ok(Activation::Clip { lo, hi })
    }

    /// The activation in f32.
    #[inline]
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Clip { lo, hi } => v.max(lo).min(hi),
            Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Activation::Tanh => v.tanh(),
            Activation::Gelu => 0.5 * v * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2)),
            Activation::Silu => v / (1.0 + (-v).exp()),
            Activation::LeakyRelu { slope } => {
                if v >= 0.0 {
                    v
                } else {
                    slope * v
                }
            }
        }
    }

    /// The activation in f64 (for the reference).
    pub fn apply_f64(self, v: f64) -> f64 {
        match self {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Clip { lo, hi } => v.max(lo as f64).min(hi as f64),
            Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Activation::Tanh => v.tanh(),
            Activation::Gelu => 0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2)),
            Activation::Silu => v / (1.0 + (-v).exp()),
            Activation::LeakyRelu { slope } => {
                if v >= 0.0 {
                    v
                } else {
                    slope as f64 * v
                }
            }
        }
    }

    /// Short name (`relu`, `clip:0:6`, ...).
    pub fn name(self) -> String {
        match self {
            Activation::None => "none".into(),
            Activation::Relu => "relu".into(),
            Activation::Clip { lo, hi } => format!("clip:{lo}:{hi}"),
            Activation::Sigmoid => "sigmoid".into(),
            Activation::Tanh => "tanh".into(),
            Activation::Gelu => "gelu".into(),
            Activation::Silu => "silu".into(),
            Activation::LeakyRelu { slope } => format!("leaky_relu:{slope}"),
        }
    }
}
