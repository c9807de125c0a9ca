//! A feed-forward network run through autodnn calls alone: convolutions with fused
//! epilogues (bias, residual add, ReLU), pooling, a fully connected layer as a GEMM and a
//! softmax. Shared by the `resnet50` example and `tests/resnet_block.rs`.
//!
//! Build a [`Graph`] (tensors are numbered as they are made, the input first), then
//! [`Net::compile`] it: the first pass over a sample input selects an algorithm for each
//! convolution by the handle's policy (on the real activations), prepares its weights for
//! that algorithm and assigns the activations to a few reusable buffers by liveness. After
//! that, [`Net::forward`] allocates nothing.

use autodnn::conv::{Activation, Epilogue, EpilogueArgs, PreparedWeights, Weights};
use autodnn::gemm::{self, GemmDesc};
use autodnn::layers::norm::fold_batch_norm;
use autodnn::layers::pool::PoolDesc;
use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode};
use autodnn::layers::Blend;
use autodnn::{
    ConvDesc, ConvMode, ConvProblem, DataType, Error, FilterDesc, FilterLayout, Handle, Layout,
    Padding, Result, TensorDesc,
};

/// [`Error::BadParam`] naming `field`.
pub fn bad(field: &str, value: impl ToString, reason: impl Into<String>) -> Error {
    Error::BadParam {
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A tensor of a [`Graph`]: its index, in the order tensors were made (the input is 0).
pub type Tid = usize;

/// A convolution's parameters: weights (KCRS, as PyTorch's OIHW), a bias per output
/// channel, square stride and symmetric padding.
#[derive(Debug, Clone)]
pub struct ConvLayer {
    /// Name (for logs).
    pub name: String,
    /// K, C, R, S.
    pub dims: [usize; 4],
    /// KCRS weights.
    pub w: Vec<f32>,
    /// K values.
    pub bias: Vec<f32>,
    /// Stride (both dimensions).
    pub stride: usize,
    /// Padding (every side).
    pub pad: usize,
}

impl ConvLayer {
    /// A convolution with a zero bias.
    ///
    /// # Errors
    /// [`Error::BadParam`] when `w` does not hold K·C·R·S values.
    pub fn new(
        name: &str,
        dims: [usize; 4],
        w: Vec<f32>,
        stride: usize,
        pad: usize,
    ) -> Result<ConvLayer> {
        if w.len() != dims.iter().product::<usize>() {
            return Err(bad(
                "w",
                w.len(),
                format!("{name}: must hold {dims:?} values"),
            ));
        }
        Ok(ConvLayer {
            name: name.into(),
            dims,
            bias: vec![0.0; dims[0]],
            w,
            stride,
            pad,
        })
    }

    /// The filter descriptor of the stored (KCRS) weights.
    ///
    /// # Errors
    /// As [`FilterDesc::new`].
    pub fn filter(&self) -> Result<FilterDesc> {
        FilterDesc::new(DataType::F32, FilterLayout::Kcrs, self.dims)
    }

    /// Folds an inference batch norm that follows the convolution into its weights and bias
    /// ([`fold_batch_norm`]).
    ///
    /// # Errors
    /// As [`fold_batch_norm`].
    pub fn fold_batch_norm(
        &mut self,
        gamma: &[f32],
        beta: &[f32],
        mean: &[f32],
        var: &[f32],
        epsilon: f64,
    ) -> Result<()> {
        let f = self.filter()?;
        fold_batch_norm(
            &f,
            &mut self.w,
            &mut self.bias,
            gamma,
            beta,
            mean,
            var,
            epsilon,
        )
    }

    /// The convolution descriptor.
    ///
    /// # Errors
    /// As [`ConvDesc::new`].
    pub fn conv_desc(&self) -> Result<ConvDesc> {
        let p = self.pad as i64;
        ConvDesc::new(
            Padding::symmetric(p, p),
            [self.stride; 2],
            [1, 1],
            1,
            ConvMode::CrossCorrelation,
        )
    }
}

/// One operation of a [`Graph`].
#[derive(Debug, Clone)]
pub enum Op {
    /// y = act(conv(x) + bias + residual).
    Conv {
        /// Parameters.
        layer: ConvLayer,
        /// Input.
        x: Tid,
        /// Output.
        y: Tid,
        /// Added before the activation.
        residual: Option<Tid>,
        /// ReLU (else identity).
        relu: bool,
    },
    /// Pooling.
    Pool {
        /// Window, stride, padding, mode.
        desc: PoolDesc,
        /// Input.
        x: Tid,
        /// Output.
        y: Tid,
    },
    /// y = x·Wᵀ + b on x's N rows of C·H·W values.
    Fc {
        /// [out, in] weights, row-major.
        w: Vec<f32>,
        /// `out` values.
        b: Vec<f32>,
        /// Input.
        x: Tid,
        /// Output, [N, out, 1, 1].
        y: Tid,
    },
    /// Softmax over the channels.
    Softmax {
        /// Input.
        x: Tid,
        /// Output.
        y: Tid,
    },
}

impl Op {
    /// The tensors the operation reads.
    pub fn inputs(&self) -> Vec<Tid> {
        match self {
            Op::Conv { x, residual, .. } => std::iter::once(*x).chain(*residual).collect(),
            Op::Pool { x, .. } | Op::Fc { x, .. } | Op::Softmax { x, .. } => vec![*x],
        }
    }

    /// The tensor the operation writes.
    pub fn output(&self) -> Tid {
        match self {
            Op::Conv { y, .. } | Op::Pool { y, .. } | Op::Fc { y, .. } | Op::Softmax { y, .. } => {
                *y
            }
        }
    }
}

/// A network under construction: tensor shapes (N, C, H, W) and operations in execution
/// order.
#[derive(Debug, Clone)]
pub struct Graph {
    dims: Vec<[usize; 4]>,
    ops: Vec<Op>,
}

impl Graph {
    /// An empty network taking an input of `dims` (N, C, H, W), which is tensor 0.
    pub fn new(dims: [usize; 4]) -> Graph {
        Graph {
            dims: vec![dims],
            ops: Vec::new(),
        }
    }

    /// The input tensor.
    pub fn input(&self) -> Tid {
        0
    }

    /// Dimensions (N, C, H, W) of tensor `t`.
    pub fn dims(&self, t: Tid) -> [usize; 4] {
        self.dims[t]
    }

    /// The operations, in execution order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    fn push(&mut self, dims: [usize; 4]) -> Tid {
        self.dims.push(dims);
        self.dims.len() - 1
    }

    fn desc(&self, t: Tid) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, Layout::Nchw, self.dims[t])
    }

    /// act(conv(x) + bias (+ residual)): ReLU when `relu`.
    ///
    /// # Errors
    /// [`Error::BadParam`] when the shapes do not fit (channels, the residual's shape).
    pub fn conv(
        &mut self,
        x: Tid,
        layer: ConvLayer,
        residual: Option<Tid>,
        relu: bool,
    ) -> Result<Tid> {
        let out = ConvProblem::output_dims(&self.desc(x)?, &layer.filter()?, &layer.conv_desc()?)?;
        if let Some(r) = residual {
            if self.dims[r] != out {
                return Err(bad(
                    "residual",
                    format!("{:?}", self.dims[r]),
                    format!("{}: must be the output's shape {out:?}", layer.name),
                ));
            }
        }
        let y = self.push(out);
        self.ops.push(Op::Conv {
            layer,
            x,
            y,
            residual,
            relu,
        });
        Ok(y)
    }

    /// Pooling of `x` by `desc`.
    ///
    /// # Errors
    /// As [`PoolDesc::output_dims`].
    pub fn pool(&mut self, x: Tid, desc: PoolDesc) -> Result<Tid> {
        let out = desc.output_dims(&self.desc(x)?)?;
        let y = self.push(out);
        self.ops.push(Op::Pool { desc, x, y });
        Ok(y)
    }

    /// Global average pooling of `x` (to N, C, 1, 1).
    ///
    /// # Errors
    /// As [`PoolDesc::global_average`].
    pub fn global_average_pool(&mut self, x: Tid) -> Result<Tid> {
        let desc = PoolDesc::global_average(&self.desc(x)?)?;
        self.pool(x, desc)
    }

    /// A fully connected layer: y = x·Wᵀ + b with W [out, C·H·W] row-major.
    ///
    /// # Errors
    /// [`Error::BadParam`] when `w` or `b` do not fit.
    pub fn fc(&mut self, x: Tid, w: Vec<f32>, b: Vec<f32>) -> Result<Tid> {
        let [n, c, h, wd] = self.dims[x];
        let inp = c * h * wd;
        let out = b.len();
        if w.len() != out * inp {
            return Err(bad(
                "fc.w",
                w.len(),
                format!("must hold {out} × {inp} values"),
            ));
        }
        let y = self.push([n, out, 1, 1]);
        self.ops.push(Op::Fc { w, b, x, y });
        Ok(y)
    }

    /// Softmax over the channels of `x`.
    pub fn softmax(&mut self, x: Tid) -> Tid {
        let y = self.push(self.dims[x]);
        self.ops.push(Op::Softmax { x, y });
        y
    }

    /// A ResNet bottleneck (torchvision's v1.5: the stride on the 3x3 convolution):
    /// relu(c3(relu(c2(relu(c1(x))))) + shortcut), the shortcut `downsample(x)` when given,
    /// else x; the residual add and the last ReLU fused into c3's epilogue.
    ///
    /// # Errors
    /// As [`Graph::conv`].
    pub fn bottleneck(
        &mut self,
        x: Tid,
        [c1, c2, c3]: [ConvLayer; 3],
        downsample: Option<ConvLayer>,
    ) -> Result<Tid> {
        let shortcut = match downsample {
            Some(d) => self.conv(x, d, None, false)?,
            None => x,
        };
        let t = self.conv(x, c1, None, true)?;
        let t = self.conv(t, c2, None, true)?;
        self.conv(t, c3, Some(shortcut), true)
    }
}

/// How [`Net::compile`] prepares the convolutions.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Activation layout (the input and outputs are NCHW whatever this is; with NHWC the
    /// input is transposed by a transform call and the filters stored KRSC).
    pub layout: Layout,
    /// Transform the filters once for the selected algorithm ([`Weights::Prepared`]);
    /// otherwise every call takes the plain filter.
    pub prepare: bool,
}

impl Default for Options {
    /// NCHW, prepared weights.
    fn default() -> Options {
        Options {
            layout: Layout::Nchw,
            prepare: true,
        }
    }
}

enum ConvWeights {
    Plain(Vec<f32>),
    Prepared(Box<PreparedWeights>),
}

enum Step {
    Conv {
        name: String,
        problem: ConvProblem,
        algo: &'static str,
        w: ConvWeights,
        bias: Vec<f32>,
    },
    Pool {
        desc: PoolDesc,
        x: TensorDesc,
        y: TensorDesc,
    },
    Fc {
        desc: GemmDesc,
        w: Vec<f32>,
        b: Vec<f32>,
    },
    Softmax {
        d: TensorDesc,
    },
}

/// A compiled network: the chosen algorithm and prepared weights per convolution, and the
/// activation buffers, allocated once.
pub struct Net {
    steps: Vec<(Step, Vec<Tid>, Tid)>,
    dims: Vec<[usize; 4]>,
    layout: Layout,
    /// The buffer each tensor lives in (the input's own buffer is the last).
    slot_of: Vec<usize>,
    slots: Vec<Vec<f32>>,
    /// Per step, the seconds of each pass since [`Net::profile`] turned timing on.
    step_times: Option<Vec<Vec<f64>>>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("steps", &self.steps.len())
            .field("buffers", &self.slots.len())
            .finish()
    }
}

/// The descriptor of a packed tensor of `dims` in `layout`.
fn tensor(layout: Layout, dims: [usize; 4]) -> Result<TensorDesc> {
    TensorDesc::new(DataType::F32, layout, dims)
}

/// Buffers by liveness: each tensor takes a free buffer when it is written, and gives it
/// back after its last reader (never before its writer has run, so an output never aliases
/// an input). Tensors in `keep` stay until the end. Returns the buffer of each tensor and
/// each buffer's size in elements.
fn assign_buffers(
    ops: &[Op],
    dims: &[[usize; 4]],
    input: Tid,
    keep: &[Tid],
) -> (Vec<usize>, Vec<usize>) {
    let mut last_use = vec![None; dims.len()];
    for (i, op) in ops.iter().enumerate() {
        for t in op.inputs() {
            last_use[t] = Some(i);
        }
    }
    let size = |t: Tid| dims[t].iter().product::<usize>();
    let mut slot_of = vec![usize::MAX; dims.len()];
    let mut sizes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let y = op.output();
        // The free buffer already closest in size above it, else the largest (grown).
        let pick = free
            .iter()
            .enumerate()
            .filter(|(_, &s)| sizes[s] >= size(y))
            .min_by_key(|(_, &s)| sizes[s])
            .or_else(|| free.iter().enumerate().max_by_key(|(_, &s)| sizes[s]))
            .map(|(j, _)| j);
        let s = match pick {
            Some(j) => free.swap_remove(j),
            None => {
                sizes.push(0);
                sizes.len() - 1
            }
        };
        sizes[s] = sizes[s].max(size(y));
        slot_of[y] = s;
        let mut done: Vec<Tid> = op.inputs();
        done.push(y);
        done.sort_unstable();
        done.dedup();
        for t in done {
            if t != input && !keep.contains(&t) && last_use[t].is_none_or(|l| l <= i) {
                free.push(slot_of[t]);
            }
        }
    }
    slot_of[input] = sizes.len();
    sizes.push(size(input));
    (slot_of, sizes)
}

impl Net {
    /// Compiles `graph`, keeping the tensors of `keep` readable after a forward pass (the
    /// others' buffers are reused). Runs one pass over `sample` (NCHW), selecting each
    /// convolution's algorithm by the handle's policy as it is reached, on the activations
    /// it will see.
    ///
    /// # Errors
    /// Any error of the calls.
    pub fn compile(
        handle: &Handle,
        graph: Graph,
        keep: &[Tid],
        sample: &[f32],
        opts: Options,
    ) -> Result<Net> {
        let input = graph.input();
        let (slot_of, sizes) = assign_buffers(&graph.ops, &graph.dims, input, keep);
        let layout = opts.layout;
        let mut steps = Vec::with_capacity(graph.ops.len());
        for op in graph.ops {
            let inputs = op.inputs();
            let out = op.output();
            let step = match op {
                Op::Conv {
                    layer,
                    x,
                    y,
                    residual,
                    relu,
                } => {
                    let epi = Epilogue {
                        bias: true,
                        residual: residual.is_some(),
                        act: if relu {
                            Activation::Relu
                        } else {
                            Activation::None
                        },
                    };
                    let conv = layer.conv_desc()?;
                    let (w, filter) = match layout {
                        Layout::Nchw => {
                            let f = layer.filter()?;
                            (layer.w, f)
                        }
                        Layout::Nhwc => {
                            let src = layer.filter()?;
                            let dst =
                                FilterDesc::new(DataType::F32, FilterLayout::Krsc, layer.dims)?;
                            let mut w = vec![0.0; layer.w.len()];
                            let [k, c, r, s] = layer.dims;
                            for ki in 0..k {
                                for ci in 0..c {
                                    for ri in 0..r {
                                        for si in 0..s {
                                            w[dst.offset(ki, ci, ri, si)] =
                                                layer.w[src.offset(ki, ci, ri, si)];
                                        }
                                    }
                                }
                            }
                            (w, dst)
                        }
                    };
                    let problem = ConvProblem::forward_packed(
                        tensor(layout, graph.dims[x])?,
                        filter,
                        conv,
                        layout,
                    )?
                    .with_epilogue(epi);
                    debug_assert_eq!(problem.y().dims(), graph.dims[y]);
                    let _ = residual;
                    Step::Conv {
                        name: layer.name,
                        problem,
                        algo: "",
                        w: ConvWeights::Plain(w),
                        bias: layer.bias,
                    }
                }
                Op::Pool { desc, x, y } => Step::Pool {
                    desc,
                    x: tensor(layout, graph.dims[x])?,
                    y: tensor(layout, graph.dims[y])?,
                },
                Op::Fc { w, b, x, .. } => {
                    let [n, c, h, wd] = graph.dims[x];
                    if layout == Layout::Nhwc && h * wd != 1 {
                        return Err(Error::Unsupported {
                            what: "fc on a spatial NHWC tensor".into(),
                        });
                    }
                    Step::Fc {
                        desc: GemmDesc::new(n, b.len(), c * h * wd).with_transb(true),
                        w,
                        b,
                    }
                }
                Op::Softmax { x, .. } => Step::Softmax {
                    d: tensor(layout, graph.dims[x])?,
                },
            };
            steps.push((step, inputs, out));
        }
        let mut net = Net {
            steps,
            dims: graph.dims,
            layout,
            slot_of,
            slots: sizes.iter().map(|&s| vec![0.0; s]).collect(),
            step_times: None,
        };
        net.run(handle, sample, Some(opts))?;
        Ok(net)
    }

    /// One forward pass on `input` (NCHW, the graph's input shape). Allocates nothing (the
    /// handle's cached workspace is reused).
    ///
    /// # Errors
    /// Any error of the calls; [`Error::BadParam`] for an input of the wrong size.
    pub fn forward(&mut self, handle: &Handle, input: &[f32]) -> Result<()> {
        self.run(handle, input, None)
    }

    /// Tensor `t` after the last forward pass (NCHW, or NHWC when compiled so), if it is kept
    /// (see [`Net::compile`]) or is the last operation's output.
    pub fn tensor(&self, t: Tid) -> &[f32] {
        let n = self.dims[t].iter().product::<usize>();
        &self.slots[self.slot_of[t]][..n]
    }

    /// (name, selected algorithm) of each convolution.
    pub fn algorithms(&self) -> Vec<(&str, &'static str)> {
        self.steps
            .iter()
            .filter_map(|(s, _, _)| match s {
                Step::Conv { name, algo, .. } => Some((name.as_str(), *algo)),
                _ => None,
            })
            .collect()
    }

    /// Times every step of the following passes (see [`Net::step_profile`]).
    pub fn profile(&mut self) {
        self.step_times = Some(vec![Vec::new(); self.steps.len()]);
    }

    /// (step name, median seconds, mean seconds, multiply-adds) of each step over the passes
    /// since [`Net::profile`], in running order.
    pub fn step_profile(&self) -> Vec<(String, f64, f64, f64)> {
        let Some(times) = &self.step_times else {
            return Vec::new();
        };
        self.steps
            .iter()
            .zip(times)
            .map(|((s, _, _), t)| {
                let mut t = t.clone();
                t.sort_by(f64::total_cmp);
                let med = t.get(t.len() / 2).copied().unwrap_or(0.0);
                let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
                let (name, macs) = match s {
                    Step::Conv { name, problem, .. } => (name.clone(), problem.macs()),
                    Step::Pool { .. } => ("pool".to_string(), 0.0),
                    Step::Fc { desc, .. } => {
                        ("fc".to_string(), (desc.m() * desc.n() * desc.k()) as f64)
                    }
                    Step::Softmax { .. } => ("softmax".to_string(), 0.0),
                };
                (name, med, mean, macs)
            })
            .collect()
    }

    /// Bytes of activation buffers.
    pub fn buffer_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.len() * 4).sum()
    }

    fn run(&mut self, handle: &Handle, input: &[f32], select: Option<Options>) -> Result<()> {
        let in_slot = self.slot_of[0];
        let n_in = self.dims[0].iter().product::<usize>();
        if input.len() != n_in {
            return Err(bad(
                "input",
                input.len(),
                format!("must hold {:?} values", self.dims[0]),
            ));
        }
        match self.layout {
            Layout::Nchw => self.slots[in_slot].copy_from_slice(input),
            Layout::Nhwc => {
                let src = tensor(Layout::Nchw, self.dims[0])?;
                let dst = tensor(Layout::Nhwc, self.dims[0])?;
                handle.transform_tensor(
                    Blend::default(),
                    &src,
                    input,
                    &dst,
                    &mut self.slots[in_slot],
                )?;
            }
        }
        for (i, (step, inputs, out)) in self.steps.iter_mut().enumerate() {
            let started = std::time::Instant::now();
            let out_slot = self.slot_of[*out];
            let n_out = self.dims[*out].iter().product::<usize>();
            // The output buffer out of the list while the inputs are borrowed from it.
            let mut y = std::mem::take(&mut self.slots[out_slot]);
            let x = &self.slots[self.slot_of[inputs[0]]];
            let x = &x[..self.dims[inputs[0]].iter().product::<usize>()];
            let result = match step {
                Step::Conv {
                    problem,
                    algo,
                    w,
                    bias,
                    ..
                } => {
                    let z = inputs
                        .get(1)
                        .map(|&r| &self.slots[self.slot_of[r]][..n_out]);
                    let mut args =
                        EpilogueArgs::new(1.0, if z.is_some() { 1.0 } else { 0.0 }).with_bias(bias);
                    if let Some(z) = z {
                        args = args.with_residual(z);
                    }
                    let y = &mut y[..n_out];
                    match (select, &*w) {
                        // Prepared weights: selected for calls with prepared weights
                        // (timed so), then prepared for the winner.
                        (Some(opts), ConvWeights::Plain(plain)) if opts.prepare => {
                            let (pw, plan) =
                                handle.prepare_weights_auto(problem, x, plain, &args)?;
                            *algo = plan.algo();
                            handle.conv_forward_ex(
                                problem,
                                algo,
                                x,
                                Weights::Prepared(&pw),
                                y,
                                &args,
                                None,
                            )?;
                            *w = ConvWeights::Prepared(Box::new(pw));
                            Ok(())
                        }
                        (Some(_), ConvWeights::Plain(plain)) => {
                            let plan = handle.plan_conv(problem, x, plain, &args)?;
                            *algo = plan.algo();
                            handle.conv_forward_ex(
                                problem,
                                algo,
                                x,
                                Weights::Plain(plain),
                                y,
                                &args,
                                None,
                            )
                        }
                        (_, ConvWeights::Plain(plain)) => handle.conv_forward_ex(
                            problem,
                            algo,
                            x,
                            Weights::Plain(plain),
                            y,
                            &args,
                            None,
                        ),
                        (_, ConvWeights::Prepared(pw)) => handle.conv_forward_ex(
                            problem,
                            algo,
                            x,
                            Weights::Prepared(pw),
                            y,
                            &args,
                            None,
                        ),
                    }
                }
                Step::Pool { desc, x: xd, y: yd } => {
                    handle.pooling_forward(desc, Blend::default(), xd, x, yd, &mut y[..n_out])
                }
                Step::Fc { desc, w, b } => handle.gemm_with_epilogue(
                    desc,
                    1.0,
                    x,
                    w,
                    0.0,
                    &mut y[..n_out],
                    &gemm::Epilogue::new().with_bias_per_col(b),
                ),
                Step::Softmax { d } => handle.softmax_forward(
                    SoftmaxAlgorithm::Accurate,
                    SoftmaxMode::Channel,
                    Blend::default(),
                    d,
                    x,
                    d,
                    &mut y[..n_out],
                ),
            };
            self.slots[out_slot] = y;
            result?;
            if let Some(t) = &mut self.step_times {
                t[i].push(started.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }
}
