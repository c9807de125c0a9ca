//! `autodnn op softmax`: softmax and log-softmax forward and backward (benchdnn's softmax
//! driver: `8x1000`, `8x64x56x56`; --alg softmax or logsoftmax, --mode channel or
//! instance).

use autodnn::layers::parse_dims;
use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode};
use autodnn::{reference, DataType, Handle, TensorDesc};

use super::{max_rel_err, Case, Dir, Setup};
use crate::data::{small_ints, DY_SEED, PRIOR_SEED, X_SEED};
use crate::error::{CliError, CliResult};

struct Softmax {
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    setup: Setup,
    desc: TensorDesc,
    /// x (fwd) or the forward output y (bwd).
    x: Vec<f32>,
    dy: Vec<f32>,
    prior: Vec<f32>,
    out: Vec<f32>,
}

/// The case of one problem (`NxCxHxW`).
pub fn build(problem: &str, setup: &Setup, mode: &str) -> CliResult<Box<dyn Case>> {
    let desc = TensorDesc::new(DataType::F32, setup.layout, parse_dims(problem)?)?;
    let algo = SoftmaxAlgorithm::parse(setup.alg.as_deref().unwrap_or("softmax"))
        .map_err(|e| CliError::bad(format!("--alg: {e}")))?;
    let mode = SoftmaxMode::parse(mode).map_err(|e| CliError::bad(format!("--mode: {e}")))?;
    let n = desc.span();
    let mut case = Softmax {
        algo,
        mode,
        setup: setup.clone(),
        desc,
        x: small_ints(n, X_SEED, "x")?,
        dy: small_ints(n, DY_SEED, "dy")?,
        prior: small_ints(n, PRIOR_SEED, "y")?,
        out: small_ints(n, PRIOR_SEED, "y")?,
    };
    if setup.dir == Dir::Bwd {
        case.compute_forward_output(&Handle::with_threads(1)?)?;
    }
    Ok(Box::new(case))
}

impl Softmax {
    /// Backward reads the forward's output: x becomes softmax(x).
    fn compute_forward_output(&mut self, h: &Handle) -> CliResult {
        let d = &self.desc;
        let mut y = vec![0.0f32; d.span()];
        let one = autodnn::layers::Blend::default();
        h.softmax_forward(self.algo, self.mode, one, d, &self.x, d, &mut y)?;
        self.x = y;
        Ok(())
    }
}

impl Case for Softmax {
    fn alg(&self) -> String {
        format!("{}:{}", self.algo.name(), self.mode.name())
    }
    fn bytes(&self) -> usize {
        let reads = match self.setup.dir {
            Dir::Bwd => 2,
            _ => 1,
        } + usize::from(self.setup.blend.reads_output());
        (reads + 1) * 4 * self.desc.elements()
    }
    fn run(&mut self, h: &Handle) -> autodnn::Result<()> {
        let (a, m, b, d) = (self.algo, self.mode, self.setup.blend, &self.desc);
        match self.setup.dir {
            Dir::Bwd => h.softmax_backward(a, m, b, d, &self.x, d, &self.dy, d, &mut self.out),
            _ => h.softmax_forward(a, m, b, d, &self.x, d, &mut self.out),
        }
    }
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64> {
        self.out.copy_from_slice(&self.prior);
        self.run(h)?;
        let (a, m, b, d, z) = (
            self.algo,
            self.mode,
            self.setup.blend,
            &self.desc,
            &self.prior,
        );
        let want = match self.setup.dir {
            Dir::Bwd => reference::softmax::backward(a, m, b, d, &self.x, d, &self.dy, d, z)?,
            _ => reference::softmax::forward(a, m, b, d, &self.x, d, z)?,
        };
        Ok(max_rel_err(d, &self.out, &want))
    }
    fn inputs(&self) -> Vec<(&'static str, TensorDesc)> {
        match self.setup.dir {
            // Backward takes the forward's input and computes its output first.
            Dir::Bwd => vec![("x", self.desc), ("dy", self.desc)],
            _ => vec![("x", self.desc)],
        }
    }
    fn set_input(&mut self, name: &str, data: Vec<f32>) -> CliResult {
        match name {
            "x" => {
                self.x = data;
                if self.setup.dir == Dir::Bwd {
                    self.compute_forward_output(&Handle::with_threads(1)?)?;
                }
            }
            "dy" => self.dy = data,
            _ => return Err(CliError::fail(format!("softmax reads no {name}"))),
        }
        Ok(())
    }
    fn output(&self) -> (TensorDesc, &[f32]) {
        (self.desc, &self.out)
    }
}
