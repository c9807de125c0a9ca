//! `autodnn op pool`: max and average pooling forward and backward (benchdnn's pool driver,
//! `mb8ic64ih112oh56kh3sh2ph1`, --alg max, avg_p or avg_np). As benchdnn's directions: max
//! pooling's training forward (`fwd`) also writes each window's choice (its workspace, laid
//! out like y), which the backward (`bwd`) reads instead of x; `fwd_i` is the inference
//! forward.

use autodnn::layers::pool::{PoolDesc, PoolMode, PoolProblem};
use autodnn::layers::Blend;
use autodnn::{reference, Handle, TensorDesc};

use super::{max_rel_err, Case, Dir, Setup};
use crate::data::{small_ints, DY_SEED, PRIOR_SEED, X_SEED};
use crate::error::{CliError, CliResult};

struct Pool {
    desc: PoolDesc,
    setup: Setup,
    x_desc: TensorDesc,
    y_desc: TensorDesc,
    x: Vec<f32>,
    dy: Vec<f32>,
    prior: Vec<f32>,
    out: Vec<f32>,
    /// Max pooling's choices (training forward's output, backward's input); empty until
    /// computed.
    indices: Vec<u32>,
}

impl Pool {
    /// Whether the call is max pooling's training pair (forward with indices, backward
    /// from them).
    fn indexed(&self) -> bool {
        self.desc.mode() == PoolMode::Max && self.setup.dir != Dir::FwdInference
    }

    /// The forward's choices for the backward (once per input x; not timed after the first
    /// run).
    fn ensure_indices(&mut self, h: &Handle) -> autodnn::Result<()> {
        if self.indices.is_empty() {
            let mut y = vec![0.0f32; self.y_desc.span()];
            let mut ind = vec![0u32; self.y_desc.elements()];
            let (d, xd, yd) = (&self.desc, &self.x_desc, &self.y_desc);
            h.pooling_forward_with_indices(d, Blend::default(), xd, &self.x, yd, &mut y, &mut ind)?;
            self.indices = ind;
        }
        Ok(())
    }
}

/// The case of one problem.
pub fn build(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let p = PoolProblem::parse(problem)?;
    let mode = PoolMode::parse(setup.alg.as_deref().unwrap_or("max"))
        .map_err(|e| CliError::bad(format!("--alg: {e}")))?;
    let x_desc = p.x_desc(setup.layout)?;
    let y_desc = p.y_desc(setup.layout)?;
    // The output: y (fwd) or dx (bwd).
    let out_len = match setup.dir {
        Dir::Bwd => x_desc.span(),
        _ => y_desc.span(),
    };
    Ok(Box::new(Pool {
        desc: p.desc.with_mode(mode),
        setup: setup.clone(),
        x: small_ints(x_desc.span(), X_SEED, "x")?,
        dy: small_ints(y_desc.span(), DY_SEED, "dy")?,
        prior: small_ints(out_len, PRIOR_SEED, "output")?,
        out: small_ints(out_len, PRIOR_SEED, "output")?,
        indices: Vec::new(),
        x_desc,
        y_desc,
    }))
}

impl Case for Pool {
    fn alg(&self) -> String {
        self.desc.mode().name().into()
    }
    fn bytes(&self) -> usize {
        let (x, y) = (self.x_desc.elements(), self.y_desc.elements());
        let beta = usize::from(self.setup.blend.reads_output());
        let indexed = usize::from(self.indexed());
        4 * match self.setup.dir {
            // dy and the indices read, dx written (x read instead of the indices when
            // recomputing).
            Dir::Bwd if indexed == 1 => x * (1 + beta) + 2 * y,
            Dir::Bwd => x * (2 + beta) + y,
            // x read, y (and the indices) written.
            _ => x + y * (1 + beta + indexed),
        }
    }
    fn run(&mut self, h: &Handle) -> autodnn::Result<()> {
        let indexed = self.indexed();
        if indexed && self.setup.dir == Dir::Bwd {
            self.ensure_indices(h)?;
        }
        if indexed && self.indices.is_empty() {
            self.indices = vec![0u32; self.y_desc.elements()];
        }
        let (d, b, xd, yd) = (&self.desc, self.setup.blend, &self.x_desc, &self.y_desc);
        let ind = &mut self.indices;
        match (self.setup.dir, indexed) {
            (Dir::Bwd, true) => {
                h.pooling_backward_with_indices(d, b, yd, &self.dy, ind, xd, &mut self.out)
            }
            (Dir::Bwd, false) => {
                h.pooling_backward(d, b, xd, &self.x, yd, &self.dy, xd, &mut self.out)
            }
            (_, true) => h.pooling_forward_with_indices(d, b, xd, &self.x, yd, &mut self.out, ind),
            (_, false) => h.pooling_forward(d, b, xd, &self.x, yd, &mut self.out),
        }
    }
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64> {
        self.out.copy_from_slice(&self.prior);
        self.run(h)?;
        let (d, b, xd, yd, z) = (
            &self.desc,
            self.setup.blend,
            &self.x_desc,
            &self.y_desc,
            &self.prior[..],
        );
        Ok(match self.setup.dir {
            Dir::Bwd => {
                let want = reference::pool::backward(d, b, xd, &self.x, yd, &self.dy, xd, z)?;
                max_rel_err(xd, &self.out, &want)
            }
            _ => {
                let want = reference::pool::forward(d, b, xd, &self.x, yd, z)?;
                let err = max_rel_err(yd, &self.out, &want);
                // The training forward's choices: exactly the reference's, or a failed check.
                let chosen = !self.indexed()
                    || reference::pool::indices(d, xd, &self.x, yd)?
                        .iter()
                        .zip(&self.indices)
                        .all(|(&a, &b)| a == b as usize);
                if chosen {
                    err
                } else {
                    f64::INFINITY
                }
            }
        })
    }
    fn inputs(&self) -> Vec<(&'static str, TensorDesc)> {
        match self.setup.dir {
            Dir::Bwd => vec![("x", self.x_desc), ("dy", self.y_desc)],
            _ => vec![("x", self.x_desc)],
        }
    }
    fn set_input(&mut self, name: &str, data: Vec<f32>) -> CliResult {
        match name {
            "x" => {
                self.x = data;
                self.indices.clear();
            }
            "dy" => self.dy = data,
            _ => return Err(CliError::fail(format!("pool reads no {name}"))),
        }
        Ok(())
    }
    fn output(&self) -> (TensorDesc, &[f32]) {
        match self.setup.dir {
            Dir::Bwd => (self.x_desc, &self.out),
            _ => (self.y_desc, &self.out),
        }
    }
}
