//! `autodnn op tensor`, `op reduce` and `op transform`: elementwise operations with
//! broadcasting (benchdnn's binary driver: `8x64x56x56:1x64x1x1`, --alg add, mul, min, max,
//! sqrt, not, or add_tensor for cudnnAddTensor's C = alpha·B + beta·C), reductions
//! (`8x64x56x56:8x64x1x1`, --alg sum, mean, max, min, amax, norm1, norm2, mul) and layout
//! transforms (`8x64x56x56`, from --layout to --to).

use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp, ReduceOp};
use autodnn::layers::{parse_dims, Blend};
use autodnn::{reference, DataType, Handle, Layout, TensorDesc};

use super::{max_rel_err, Case, Setup};
use crate::data::{small_ints, DY_SEED, PRIOR_SEED, X_SEED};
use crate::error::{CliError, CliResult};

/// `A[:B]`: the first tensor's dims and the second's (the first's when absent).
fn two_dims(problem: &str) -> CliResult<([usize; 4], [usize; 4])> {
    let mut parts = problem.splitn(2, ':');
    let a = parse_dims(parts.next().unwrap_or(""))?;
    let b = match parts.next() {
        Some(s) => parse_dims(s)?,
        None => a,
    };
    Ok((a, b))
}

enum Kind {
    /// op_tensor, or add_tensor when `None`.
    Op(Option<OpTensorDesc>),
    Reduce(ReduceOp),
    Transform,
}

struct Tensor {
    kind: Kind,
    blend: Blend,
    a_desc: TensorDesc,
    b_desc: TensorDesc,
    c_desc: TensorDesc,
    a: Vec<f32>,
    b: Vec<f32>,
    prior: Vec<f32>,
    c: Vec<f32>,
}

fn make(
    kind: Kind,
    blend: Blend,
    a: TensorDesc,
    b: TensorDesc,
    c: TensorDesc,
) -> CliResult<Box<dyn Case>> {
    Ok(Box::new(Tensor {
        kind,
        blend,
        a: small_ints(a.span(), X_SEED, "a")?,
        b: small_ints(b.span(), DY_SEED, "b")?,
        prior: small_ints(c.span(), PRIOR_SEED, "c")?,
        c: small_ints(c.span(), PRIOR_SEED, "c")?,
        a_desc: a,
        b_desc: b,
        c_desc: c,
    }))
}

/// `op tensor A[:B]`: C (A's dims) = op(alpha·A, B), B broadcast.
pub fn build_tensor(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let (ad, bd) = two_dims(problem)?;
    let f = DataType::F32;
    let a = TensorDesc::new(f, setup.layout, ad)?;
    let b = TensorDesc::new(f, setup.layout, bd)?;
    let alg = setup.alg.as_deref().unwrap_or("add");
    let kind = if alg.trim().eq_ignore_ascii_case("add_tensor") {
        Kind::Op(None)
    } else {
        let op = OpTensorOp::parse(alg).map_err(|e| CliError::bad(format!("--alg: {e}")))?;
        Kind::Op(Some(OpTensorDesc::new(
            op,
            setup.blend.alpha,
            1.0,
            setup.blend.beta,
        )?))
    };
    make(kind, setup.blend, a, b, a)
}

/// `op reduce A:C`: C = reduce(A) over the dims where C's is 1.
pub fn build_reduce(problem: &str, setup: &Setup) -> CliResult<Box<dyn Case>> {
    let (ad, cd) = two_dims(problem)?;
    let f = DataType::F32;
    let a = TensorDesc::new(f, setup.layout, ad)?;
    let c = TensorDesc::new(f, setup.layout, cd)?;
    let op = ReduceOp::parse(setup.alg.as_deref().unwrap_or("sum"))
        .map_err(|e| CliError::bad(format!("--alg: {e}")))?;
    make(Kind::Reduce(op), setup.blend, a, a, c)
}

/// `op transform A`: y in `to` from x in --layout.
pub fn build_transform(problem: &str, setup: &Setup, to: Layout) -> CliResult<Box<dyn Case>> {
    if setup.alg.is_some() {
        return Err(CliError::bad(
            "--alg: a transform has no algorithms to name (see --to)",
        ));
    }
    let dims = parse_dims(problem)?;
    let f = DataType::F32;
    let x = TensorDesc::new(f, setup.layout, dims)?;
    let y = TensorDesc::new(f, to, dims)?;
    make(Kind::Transform, setup.blend, x, x, y)
}

impl Case for Tensor {
    fn alg(&self) -> String {
        match &self.kind {
            Kind::Op(None) => "add_tensor".into(),
            Kind::Op(Some(d)) => d.op().name().into(),
            Kind::Reduce(op) => op.name().into(),
            Kind::Transform => match self.c_desc.layout() {
                Some(l) => format!("to_{}", l.name()),
                None => "strided".into(),
            },
        }
    }
    fn bytes(&self) -> usize {
        let reads_c = usize::from(self.blend.reads_output());
        let b = match &self.kind {
            Kind::Op(Some(d)) if !d.op().is_binary() => 0,
            Kind::Op(_) => self.b_desc.elements(),
            _ => 0,
        };
        4 * (self.a_desc.elements() + b + self.c_desc.elements() * (1 + reads_c))
    }
    fn run(&mut self, h: &Handle) -> autodnn::Result<()> {
        let (ad, bd, cd) = (&self.a_desc, &self.b_desc, &self.c_desc);
        match &self.kind {
            Kind::Op(None) => h.add_tensor(self.blend, bd, &self.b, cd, &mut self.c),
            Kind::Op(Some(d)) => h.op_tensor(d, ad, &self.a, bd, &self.b, cd, &mut self.c),
            Kind::Reduce(op) => h.reduce_tensor(*op, self.blend, ad, &self.a, cd, &mut self.c),
            Kind::Transform => h.transform_tensor(self.blend, ad, &self.a, cd, &mut self.c),
        }
    }
    fn check(&mut self, h: &Handle) -> autodnn::Result<f64> {
        self.c.copy_from_slice(&self.prior);
        self.run(h)?;
        let (ad, bd, cd, z) = (&self.a_desc, &self.b_desc, &self.c_desc, &self.prior[..]);
        let want = match &self.kind {
            Kind::Op(None) => reference::tensor_ops::add_tensor(self.blend, bd, &self.b, cd, z)?,
            Kind::Op(Some(d)) => {
                reference::tensor_ops::op_tensor(d, ad, &self.a, bd, &self.b, cd, z)?
            }
            Kind::Reduce(op) => {
                reference::tensor_ops::reduce_tensor(*op, self.blend, ad, &self.a, cd, z)?
            }
            Kind::Transform => reference::transform::forward(self.blend, ad, &self.a, cd, z)?,
        };
        Ok(max_rel_err(cd, &self.c, &want))
    }
    fn inputs(&self) -> Vec<(&'static str, TensorDesc)> {
        match &self.kind {
            Kind::Op(None) => vec![("x", self.b_desc)],
            Kind::Op(Some(d)) if d.op().is_binary() => {
                vec![("x", self.a_desc), ("dy", self.b_desc)]
            }
            _ => vec![("x", self.a_desc)],
        }
    }
    fn set_input(&mut self, name: &str, data: Vec<f32>) -> CliResult {
        match (name, &self.kind) {
            ("x", Kind::Op(None)) | ("dy", _) => self.b = data,
            ("x", _) => self.a = data,
            _ => return Err(CliError::fail(format!("this operation reads no {name}"))),
        }
        Ok(())
    }
    fn output(&self) -> (TensorDesc, &[f32]) {
        (self.c_desc, &self.c)
    }
}
