//! `autodnn op bnorm` and `autodnn op lnorm`: batch normalization (--dir fwd: training, with
//! batch statistics; fwd_i: inference, with running statistics; bwd: dx, dγ and dβ) and layer
//! normalization over C·H·W (fwd, bwd).

use autodnn::layers::norm::{
    BatchNorm, BatchNormProblem, LayerNorm, ParamGrads, SavedStats, SavedStatsMut,
};
use autodnn::layers::{parse_dims, Blend};
use autodnn::{reference, DataType, Handle, TensorDesc};

use super::{max_rel_err, Case, Dir, Setup};
use crate::data::{small_ints, DY_SEED, PRIOR_SEED, X_SEED};
use crate::error::{CliError, CliResult};

/// Per-channel (or per-element) parameters: γ in [0.5, 1.5], β in [−1, 1].
fn params(len: usize, seed: u64, lo: f32, step: f32) -> CliResult<Vec<f32>> {
    Ok(small_ints(len, seed, "parameters")?
        .into_iter()
        .map(|v| lo + step * (v + 4.0))
        .collect())
}

struct Norm {
    layer: bool,
    setup: Setup,
    eps: f64,
    desc: TensorDesc,
    x: Vec<f32>,
    dy: Vec<f32>,
    prior: Vec<f32>,
    y: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    /// Running (inference) or saved (backward) statistics.
    mean: Vec<f32>,
    var: Vec<f32>,
    dgamma: Vec<f32>,
    dbeta: Vec<f32>,
}

/// Batch norm of one problem (`mb8ic64ih56`; --alg is not used).
pub fn build_bnorm(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let p = BatchNormProblem::parse(problem)?;
    build(false, p.tensor(setup.layout)?, p.eps.unwrap_or(1e-5), setup)
}

/// Layer norm of one problem (`NxCxHxW`, normalised over C·H·W).
pub fn build_lnorm(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let desc = TensorDesc::new(DataType::F32, setup.layout, parse_dims(problem)?)?;
    build(true, desc, 1e-5, setup)
}

fn build(layer: bool, desc: TensorDesc, eps: f64, setup: &Setup) -> CliResult<Box<dyn Case>> {
    if setup.alg.is_some() {
        return Err(CliError::bad(
            "--alg: normalization has no algorithms to name",
        ));
    }
    if layer && setup.dir == Dir::FwdInference {
        return Err(CliError::bad(
            "--dir fwd_i: layer norm has fwd and bwd only",
        ));
    }
    let n = desc.span();
    let [b, c, h, w] = desc.dims();
    let (plen, slen) = if layer { (c * h * w, b) } else { (c, c) };
    let mut case = Norm {
        layer,
        setup: setup.clone(),
        eps,
        desc,
        x: small_ints(n, X_SEED, "x")?,
        dy: small_ints(n, DY_SEED, "dy")?,
        prior: small_ints(n, PRIOR_SEED, "y")?,
        y: small_ints(n, PRIOR_SEED, "y")?,
        gamma: params(plen, 11, 0.5, 0.125)?,
        beta: params(plen, 12, -1.0, 0.25)?,
        mean: params(slen, 13, -0.5, 0.125)?,
        var: params(slen, 14, 0.5, 0.5)?,
        dgamma: vec![0.0; plen],
        dbeta: vec![0.0; plen],
    };
    if setup.dir == Dir::Bwd {
        case.save_statistics()?;
    }
    Ok(Box::new(case))
}

impl Norm {
    /// The backward pass's saved statistics: those of a forward pass over x (in f64).
    fn save_statistics(&mut self) -> CliResult {
        let b = Blend::default();
        let (d, z) = (&self.desc, &self.prior);
        if self.layer {
            let r = reference::norm::layer_norm_forward(
                b,
                d,
                &self.x,
                d,
                z,
                Some(&self.gamma),
                Some(&self.beta),
                self.eps,
            )?;
            self.mean = r.mean.iter().map(|&v| v as f32).collect();
            self.var = r.rstd.iter().map(|&v| v as f32).collect();
        } else {
            let (g, bt) = (&self.gamma, &self.beta);
            let r = reference::norm::batch_norm_training(b, d, &self.x, d, z, g, bt, self.eps)?;
            self.mean = r.mean.iter().map(|&v| v as f32).collect();
            self.var = r.inv_std.iter().map(|&v| v as f32).collect();
        }
        Ok(())
    }
}

impl Case for Norm {
    fn alg(&self) -> String {
        match (self.layer, self.setup.dir) {
            (true, _) => "layer".into(),
            (false, Dir::FwdInference) => "inference".into(),
            (false, _) => "training".into(),
        }
    }
    fn bytes(&self) -> usize {
        // fwd: x read (twice for training's statistics), y written; bwd: x and dy read
        // twice, dx written.
        let passes = match (self.layer, self.setup.dir) {
            (_, Dir::FwdInference) => 2,
            (_, Dir::Fwd) => 3,
            (_, Dir::Bwd) => 5,
        } + usize::from(self.setup.blend.reads_output());
        passes * 4 * self.desc.elements()
    }
    fn run(&mut self, h: &Handle) -> autodnn::Result<()> {
        let (b, d) = (self.setup.blend, &self.desc);
        let (g, bt) = (&self.gamma[..], &self.beta[..]);
        match (self.layer, self.setup.dir) {
            (false, Dir::FwdInference) => {
                let bn = BatchNorm::new(self.eps)?;
                h.batch_norm_forward_inference(
                    &bn,
                    b,
                    d,
                    &self.x,
                    d,
                    &mut self.y,
                    g,
                    bt,
                    &self.mean,
                    &self.var,
                )
            }
            (false, Dir::Fwd) => {
                let bn = BatchNorm::new(self.eps)?;
                let saved = SavedStatsMut {
                    mean: &mut self.mean,
                    inv_std: &mut self.var,
                };
                h.batch_norm_forward_training(
                    &bn,
                    b,
                    d,
                    &self.x,
                    d,
                    &mut self.y,
                    g,
                    bt,
                    None,
                    Some(saved),
                )
            }
            (false, Dir::Bwd) => {
                let bn = BatchNorm::new(self.eps)?;
                let saved = SavedStats {
                    mean: &self.mean,
                    inv_std: &self.var,
                };
                let grads = ParamGrads {
                    dgamma: &mut self.dgamma,
                    dbeta: &mut self.dbeta,
                };
                h.batch_norm_backward(
                    &bn,
                    b,
                    Blend::default(),
                    d,
                    &self.x,
                    d,
                    &self.dy,
                    d,
                    &mut self.y,
                    g,
                    Some(saved),
                    grads,
                )
            }
            (true, Dir::Bwd) => {
                let saved = SavedStats {
                    mean: &self.mean,
                    inv_std: &self.var,
                };
                let grads = ParamGrads {
                    dgamma: &mut self.dgamma,
                    dbeta: &mut self.dbeta,
                };
                h.layer_norm_backward(
                    b,
                    Blend::default(),
                    d,
                    &self.x,
                    d,
                    &self.dy,
                    d,
                    &mut self.y,
                    Some(g),
                    saved,
                    Some(grads),
                )
            }
            (true, _) => {
                let ln = LayerNorm::new(self.eps)?;
                let saved = SavedStatsMut {
                    mean: &mut self.mean,
                    inv_std: &mut self.var,
                };
                h.layer_norm_forward(
                    &ln,
                    b,
                    d,
                    &self.x,
                    d,
                    &mut self.y,
                    Some(g),
                    Some(bt),
                    Some(saved),
                )
            }
        }
    }
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64> {
        self.y.copy_from_slice(&self.prior);
        self.run(h)?;
        let (b, d, z) = (self.setup.blend, &self.desc, &self.prior[..]);
        let (g, bt, e) = (&self.gamma[..], &self.beta[..], self.eps);
        let one = Blend::default();
        let zeros = vec![0.0f32; self.gamma.len()];
        let want = match (self.layer, self.setup.dir) {
            (false, Dir::FwdInference) => reference::norm::batch_norm_inference(
                b, d, &self.x, d, z, g, bt, &self.mean, &self.var, e,
            )?,
            (false, Dir::Fwd) => {
                reference::norm::batch_norm_training(b, d, &self.x, d, z, g, bt, e)?.y
            }
            (false, Dir::Bwd) => {
                let r = reference::norm::batch_norm_backward(
                    b,
                    one,
                    d,
                    &self.x,
                    d,
                    &self.dy,
                    d,
                    (z, &zeros, &zeros),
                    g,
                    &self.mean,
                    &self.var,
                )?;
                let pd = TensorDesc::new(DataType::F32, autodnn::Layout::Nchw, [1, g.len(), 1, 1])?;
                let eg = max_rel_err(&pd, &self.dgamma, &r.dgamma);
                let eb = max_rel_err(&pd, &self.dbeta, &r.dbeta);
                return Ok(max_rel_err(d, &self.y, &r.dx).max(eg).max(eb));
            }
            (true, Dir::Bwd) => {
                let r = reference::norm::layer_norm_backward(
                    b,
                    one,
                    d,
                    &self.x,
                    d,
                    &self.dy,
                    d,
                    (z, &zeros, &zeros),
                    Some(g),
                    &self.mean,
                    &self.var,
                )?;
                let pd = TensorDesc::new(DataType::F32, autodnn::Layout::Nchw, [1, g.len(), 1, 1])?;
                let eg = max_rel_err(&pd, &self.dgamma, &r.dgamma);
                let eb = max_rel_err(&pd, &self.dbeta, &r.dbeta);
                return Ok(max_rel_err(d, &self.y, &r.dx).max(eg).max(eb));
            }
            (true, _) => {
                reference::norm::layer_norm_forward(b, d, &self.x, d, z, Some(g), Some(bt), e)?.y
            }
        };
        Ok(max_rel_err(d, &self.y, &want))
    }
    fn inputs(&self) -> Vec<(&'static str, TensorDesc)> {
        match self.setup.dir {
            Dir::Bwd => vec![("x", self.desc), ("dy", self.desc)],
            _ => vec![("x", self.desc)],
        }
    }
    fn set_input(&mut self, name: &str, data: Vec<f32>) -> CliResult {
        match name {
            "x" => self.x = data,
            "dy" => self.dy = data,
            _ => return Err(CliError::fail(format!("normalization reads no {name}"))),
        }
        if self.setup.dir == Dir::Bwd && name == "x" {
            self.save_statistics()?;
        }
        Ok(())
    }
    fn output(&self) -> (TensorDesc, &[f32]) {
        (self.desc, &self.y)
    }
}
