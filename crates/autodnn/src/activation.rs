//! Elementwise activations, shared by convolution and GEMM epilogues.

use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::vmath;

/// (sigmoid(z), 1 − sigmoid(z)), the second without the cancellation of 1 − s where s → 1.
#[inline(always)]
fn sigmoid_pair(z: f32) -> (f32, f32) {
    let e = vmath::exp_inside(-z.clamp(-80.0, 80.0));
    let s = 1.0 / (1.0 + e);
    (s, e * s)
}

/// √(2/π), GELU's tanh form.
const GELU_K: f32 = 0.797_884_6;
/// The cubic coefficient of GELU's tanh form.
const GELU_C: f32 = 0.044_715;
/// 1 / √(2π).
const INV_SQRT_2PI: f32 = 0.398_942_3;

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
    /// v for v > 0, alpha · (e^v − 1) at or below.
    Elu {
        /// Scale of the negative part.
        alpha: f32,
    },
    /// v · relu6(v + 3) / 6.
    HardSwish,
    /// 0.5 · v · (1 + tanh(√(2/π) · (v + 0.044715 · v³))), GELU's tanh form.
    GeluTanh,
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
    pub const NAMES: [&'static str; 11] = [
        "none",
        "relu",
        "relu6",
        "clip",
        "sigmoid",
        "tanh",
        "gelu",
        "silu",
        "elu",
        "hardswish",
        "gelu_tanh",
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
            Activation::Elu { alpha } => (8, alpha.to_bits(), 0),
            Activation::HardSwish => (9, 0, 0),
            Activation::GeluTanh => (10, 0, 0),
        }
    }

    /// Parses `none`, `relu`, `relu6` (= clip to [0, 6]), `clip` (= relu6) or `clip:LO:HI`,
    /// `sigmoid` (or benchdnn's `logistic`), `tanh`, `gelu` (or `gelu_erf`), `gelu_tanh`,
    /// `silu` (or `swish`), `elu` (alpha 1) or `elu:ALPHA`, `hardswish`, `leaky_relu:SLOPE`.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `act`.
    pub fn parse(s: &str) -> Result<Activation> {
        let bad = || {
            Error::bad(
                "act",
                s,
                "expected none, relu, relu6, clip, clip:LO:HI, sigmoid (logistic), tanh, gelu \
                 (gelu_erf), gelu_tanh, silu (swish), elu, elu:ALPHA, hardswish or \
                 leaky_relu:SLOPE",
            )
        };
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "none" | "identity" => Activation::None,
            "relu" => Activation::Relu,
            "relu6" | "clip" => Activation::Clip { lo: 0.0, hi: 6.0 },
            "sigmoid" | "logistic" => Activation::Sigmoid,
            "tanh" => Activation::Tanh,
            "gelu" | "gelu_erf" => Activation::Gelu,
            "gelu_tanh" => Activation::GeluTanh,
            "silu" | "swish" => Activation::Silu,
            "elu" => Activation::Elu { alpha: 1.0 },
            "hardswish" | "hard_swish" => Activation::HardSwish,
            _ if t.starts_with("elu:") => {
                let alpha: f32 = t["elu:".len()..].parse().map_err(|_| bad())?;
                if !alpha.is_finite() {
                    return Err(bad());
                }
                Activation::Elu { alpha }
            }
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

    /// The activation in f32: the one implementation the activation operator and every
    /// convolution and GEMM epilogue use. The exponentials are `crate::vmath`'s, which
    /// vectorise inside a kernel's loop.
    #[inline(always)]
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Clip { lo, hi } => v.max(lo).min(hi),
            Activation::Sigmoid => vmath::sigmoid(v),
            Activation::Tanh => vmath::tanh(v),
            Activation::Gelu => v * vmath::normal_cdf(v),
            // 0.5 · (1 + tanh(u)) = sigmoid(2u), which keeps its accuracy where tanh(u) → −1.
            Activation::GeluTanh => v * vmath::sigmoid(2.0 * GELU_K * (v + GELU_C * v * v * v)),
            Activation::Silu => v * vmath::sigmoid(v),
            Activation::LeakyRelu { slope } => {
                if v >= 0.0 {
                    v
                } else {
                    slope * v
                }
            }
            Activation::Elu { alpha } => {
                let e = alpha * vmath::expm1(v.min(0.0));
                if v > 0.0 {
                    v
                } else {
                    e
                }
            }
            Activation::HardSwish => v * (v + 3.0).clamp(0.0, 6.0) * (1.0 / 6.0),
        }
    }

    /// The derivative d act(v) / dv in f32, for the backward pass (dx = dy · act'(x)). At
    /// the kinks it takes the value PyTorch's autograd takes: relu's and leaky relu's at 0
    /// the left one (0 and slope), clip's 0 at either bound, elu's alpha at 0, hardswish's
    /// (2v + 3)/6 on the closed interval [−3, 3].
    #[inline(always)]
    pub fn derivative(self, v: f32) -> f32 {
        match self {
            Activation::None => 1.0,
            Activation::Relu => {
                if v > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Clip { lo, hi } => {
                if v > lo && v < hi {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Sigmoid => {
                let (s, t) = sigmoid_pair(v);
                s * t
            }
            Activation::Tanh => {
                // 1 − tanh² = 4 · sigmoid(2v) · (1 − sigmoid(2v)), with no cancellation.
                let (s, t) = sigmoid_pair(2.0 * v);
                4.0 * s * t
            }
            Activation::Gelu => {
                let cdf = vmath::normal_cdf(v);
                let pdf = vmath::exp(-0.5 * v * v) * INV_SQRT_2PI;
                cdf + v * pdf
            }
            Activation::GeluTanh => {
                // d/dv [v · sigmoid(2u)] = s + 2v · s(1 − s) · u'.
                let (s, t) = sigmoid_pair(2.0 * GELU_K * (v + GELU_C * v * v * v));
                let du = GELU_K * (1.0 + 3.0 * GELU_C * v * v);
                s + 2.0 * v * s * t * du
            }
            Activation::Silu => {
                let (s, t) = sigmoid_pair(v);
                s * (1.0 + v * t)
            }
            Activation::LeakyRelu { slope } => {
                if v > 0.0 {
                    1.0
                } else {
                    slope
                }
            }
            Activation::Elu { alpha } => {
                let e = alpha * vmath::exp(v.min(0.0));
                if v > 0.0 {
                    1.0
                } else {
                    e
                }
            }
            Activation::HardSwish => {
                let d = (2.0 * v + 3.0) * (1.0 / 6.0);
                let d = if v < -3.0 { 0.0 } else { d };
                if v > 3.0 {
                    1.0
                } else {
                    d
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
            Activation::GeluTanh => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
            }
            Activation::Silu => v / (1.0 + (-v).exp()),
            Activation::LeakyRelu { slope } => {
                if v >= 0.0 {
                    v
                } else {
                    slope as f64 * v
                }
            }
            Activation::Elu { alpha } => {
                if v > 0.0 {
                    v
                } else {
                    alpha as f64 * v.exp_m1()
                }
            }
            Activation::HardSwish => v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
        }
    }

    /// The derivative in f64 (for the reference), with [`Activation::derivative`]'s values
    /// at the kinks.
    pub fn derivative_f64(self, v: f64) -> f64 {
        match self {
            Activation::None => 1.0,
            Activation::Relu => f64::from(u8::from(v > 0.0)),
            Activation::Clip { lo, hi } => f64::from(u8::from(v > lo as f64 && v < hi as f64)),
            Activation::Sigmoid => {
                let s = 1.0 / (1.0 + (-v).exp());
                s * (1.0 - s)
            }
            Activation::Tanh => 1.0 - v.tanh() * v.tanh(),
            Activation::Gelu => {
                let cdf = 0.5 * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2));
                let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
                cdf + v * pdf
            }
            Activation::GeluTanh => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let t = (k * (v + 0.044715 * v * v * v)).tanh();
                0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
            }
            Activation::Silu => {
                let s = 1.0 / (1.0 + (-v).exp());
                s * (1.0 + v * (1.0 - s))
            }
            Activation::LeakyRelu { slope } => {
                if v > 0.0 {
                    1.0
                } else {
                    slope as f64
                }
            }
            Activation::Elu { alpha } => {
                if v > 0.0 {
                    1.0
                } else {
                    alpha as f64 * v.exp()
                }
            }
            Activation::HardSwish => {
                if v > 3.0 {
                    1.0
                } else if v < -3.0 {
                    0.0
                } else {
                    (2.0 * v + 3.0) / 6.0
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
            Activation::Elu { alpha } => format!("elu:{alpha}"),
            Activation::HardSwish => "hardswish".into(),
            Activation::GeluTanh => "gelu_tanh".into(),
        }
    }
}
