//! `autodnn op act`: activations forward and backward (benchdnn's eltwise driver).

use autodnn::{layers, reference, Activation, DataType, Handle, TensorDesc};

use super::{max_rel_err, Case, Dir, Setup};
use crate::data::{small_ints, DY_SEED, PRIOR_SEED, X_SEED};
use crate::error::{CliError, CliResult};

struct Act {
    act: Activation,
    setup: Setup,
    desc: TensorDesc,
    x: Vec<f32>,
    dy: Vec<f32>,
    prior: Vec<f32>,
    y: Vec<f32>,
}

/// The case of one problem (`NxCxHxW`), --alg naming the activation (relu by default).
pub fn build(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let dims = layers::parse_dims(problem)?;
    let act = Activation::parse(setup.alg.as_deref().unwrap_or("relu"))
        .map_err(|e| CliError::bad(format!("--alg: {e}")))?;
    let desc = TensorDesc::new(DataType::F32, setup.layout, dims)?;
    let n = desc.span();
    // Integer data in [-4, 4], scaled to quarters: the functions' interesting range.
    let quarter = |v: Vec<f32>| v.into_iter().map(|x| x * 0.75).collect::<Vec<_>>();
    Ok(Box::new(Act {
        act,
        setup: setup.clone(),
        desc,
        x: quarter(small_ints(n, X_SEED, "x")?),
        dy: small_ints(n, DY_SEED, "dy")?,
        prior: small_ints(n, PRIOR_SEED, "y")?,
        y: small_ints(n, PRIOR_SEED, "y")?,
    }))
}

impl Case for Act {
    fn alg(&self) -> String {
        self.act.name()
    }
    fn bytes(&self) -> usize {
        let reads = match self.setup.dir {
            Dir::Bwd => 2,
            _ => 1,
        } + usize::from(self.setup.blend.reads_output());
        (reads + 1) * 4 * self.desc.elements()
    }
    fn run(&mut self, h: &Handle) -> autodnn::Result<()> {
        let (a, b, d) = (self.act, self.setup.blend, &self.desc);
        match self.setup.dir {
            Dir::Bwd => h.activation_backward(a, b, d, &self.x, d, &self.dy, d, &mut self.y),
            _ => h.activation_forward(a, b, d, &self.x, d, &mut self.y),
        }
    }
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64> {
        self.y.copy_from_slice(&self.prior);
        self.run(h)?;
        let (a, b, d) = (self.act, self.setup.blend, &self.desc);
        let want = match self.setup.dir {
            Dir::Bwd => {
                reference::activation::backward(a, b, d, &self.x, d, &self.dy, d, &self.prior)?
            }
            _ => reference::activation::forward(a, b, d, &self.x, d, &self.prior)?,
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
            _ => return Err(CliError::fail(format!("act reads no {name}"))),
        }
        Ok(())
    }
    fn output(&self) -> (TensorDesc, &[f32]) {
        (self.desc, &self.y)
    }
}
