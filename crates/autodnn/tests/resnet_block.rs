//! A small ResNet (the stem, a max pool, a strided bottleneck with a projection shortcut, an
//! identity bottleneck, global average pooling, a classifier and a softmax) built with the
//! `resnet50` example's network code (`examples/resnet50/net.rs`: batch norms folded into
//! the convolutions, bias + residual + ReLU fused into their epilogues, algorithms selected
//! by the handle, prepared weights, reused buffers), against a naive composition of the f64
//! references: convolution, batch norm *unfolded*, the residual add and ReLU as separate
//! steps, pooling, GEMM and softmax, each step rounded to f32 as a network would store it.

#[allow(dead_code)]
#[path = "../examples/resnet50/net.rs"]
mod net;

use autodnn::layers::pool::{PoolDesc, PoolMode};
use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode};
use autodnn::layers::Blend;
use autodnn::select::Policy;
use autodnn::{
    reference, ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Handle, Layout,
    Padding, TensorDesc,
};
use net::{ConvLayer, Graph, Net, Options};

const EPS: f64 = 1e-5;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in [lo, hi).
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * self.unit()).collect()
    }
}

/// A convolution with its (unfolded) batch norm.
#[derive(Clone)]
struct ConvBn {
    name: String,
    dims: [usize; 4],
    stride: usize,
    pad: usize,
    w: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    mean: Vec<f32>,
    var: Vec<f32>,
}

impl ConvBn {
    fn random(rng: &mut Rng, name: &str, dims: [usize; 4], stride: usize, pad: usize) -> ConvBn {
        let [k, c, r, s] = dims;
        // He-like scale keeps the activations of order 1 through the blocks.
        let a = (3.0 / (c * r * s) as f32).sqrt();
        ConvBn {
            name: name.into(),
            dims,
            stride,
            pad,
            w: rng.vec(k * c * r * s, -a, a),
            gamma: rng.vec(k, 0.5, 1.5),
            beta: rng.vec(k, -0.3, 0.3),
            mean: rng.vec(k, -0.3, 0.3),
            var: rng.vec(k, 0.5, 1.5),
        }
    }

    /// The folded layer the network runs.
    fn folded(&self) -> ConvLayer {
        let mut l =
            ConvLayer::new(&self.name, self.dims, self.w.clone(), self.stride, self.pad).unwrap();
        l.fold_batch_norm(&self.gamma, &self.beta, &self.mean, &self.var, EPS)
            .unwrap();
        l
    }

    /// relu?(bn(conv(x)) + residual) by the references, each step rounded to f32.
    fn reference(
        &self,
        x: &[f32],
        xdims: [usize; 4],
        residual: Option<&[f32]>,
        relu: bool,
    ) -> (Vec<f32>, [usize; 4]) {
        let p = self.pad as i64;
        let conv = ConvDesc::new(
            Padding::symmetric(p, p),
            [self.stride; 2],
            [1, 1],
            1,
            ConvMode::CrossCorrelation,
        )
        .unwrap();
        let xd = TensorDesc::new(DataType::F32, Layout::Nchw, xdims).unwrap();
        let fd = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, self.dims).unwrap();
        let problem = ConvProblem::forward_packed(xd, fd, conv, Layout::Nchw).unwrap();
        let y = round(&reference::conv_forward(&problem, x, &self.w).unwrap());
        let yd = *problem.y();
        let mut y = round(
            &reference::norm::batch_norm_inference(
                Blend::default(),
                &yd,
                &y,
                &yd,
                &[],
                &self.gamma,
                &self.beta,
                &self.mean,
                &self.var,
                EPS,
            )
            .unwrap(),
        );
        if let Some(r) = residual {
            for (v, &z) in y.iter_mut().zip(r) {
                *v = (*v as f64 + z as f64) as f32;
            }
        }
        if relu {
            for v in &mut y {
                *v = v.max(0.0);
            }
        }
        (y, yd.dims())
    }
}

fn round(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn pool_ref(desc: &PoolDesc, x: &[f32], xdims: [usize; 4]) -> (Vec<f32>, [usize; 4]) {
    let xd = TensorDesc::new(DataType::F32, Layout::Nchw, xdims).unwrap();
    let ydims = desc.output_dims(&xd).unwrap();
    let yd = TensorDesc::new(DataType::F32, Layout::Nchw, ydims).unwrap();
    let y = reference::pool::forward(desc, Blend::default(), &xd, x, &yd, &[]).unwrap();
    (round(&y), ydims)
}

/// Max of |a − r| over max |r|.
fn rel_err(a: &[f32], r: &[f32]) -> f64 {
    assert_eq!(a.len(), r.len());
    let num = a
        .iter()
        .zip(r)
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max);
    num / r.iter().map(|&y| (y as f64).abs()).fold(0.0, f64::max)
}

struct Block {
    c: [ConvBn; 3],
    downsample: Option<ConvBn>,
}

impl Block {
    fn random(
        rng: &mut Rng,
        name: &str,
        cin: usize,
        mid: usize,
        cout: usize,
        stride: usize,
    ) -> Block {
        let downsample = (stride != 1 || cin != cout)
            .then(|| ConvBn::random(rng, &format!("{name}.ds"), [cout, cin, 1, 1], stride, 0));
        Block {
            c: [
                ConvBn::random(rng, &format!("{name}.c1"), [mid, cin, 1, 1], 1, 0),
                ConvBn::random(rng, &format!("{name}.c2"), [mid, mid, 3, 3], stride, 1),
                ConvBn::random(rng, &format!("{name}.c3"), [cout, mid, 1, 1], 1, 0),
            ],
            downsample,
        }
    }

    fn reference(&self, x: &[f32], d: [usize; 4]) -> (Vec<f32>, [usize; 4]) {
        let shortcut = match &self.downsample {
            Some(ds) => ds.reference(x, d, None, false).0,
            None => x.to_vec(),
        };
        let (t, td) = self.c[0].reference(x, d, None, true);
        let (t, td) = self.c[1].reference(&t, td, None, true);
        self.c[2].reference(&t, td, Some(&shortcut), true)
    }
}

fn check(layout: Layout, prepare: bool, policy: Policy, threads: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (n, classes) = (2, 10);
    let in_dims = [n, 3, 32, 32];
    let x = rng.vec(in_dims.iter().product(), -1.0, 1.0);
    let stem = ConvBn::random(&mut rng, "stem", [16, 3, 7, 7], 2, 3);
    let pool = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], Padding::symmetric(1, 1)).unwrap();
    let b1 = Block::random(&mut rng, "b1", 16, 8, 32, 2);
    let b2 = Block::random(&mut rng, "b2", 32, 8, 32, 1);
    let fc_w = rng.vec(classes * 32, -0.3, 0.3);
    let fc_b = rng.vec(classes, -0.1, 0.1);

    // The network.
    let mut g = Graph::new(in_dims);
    let t = g.conv(g.input(), stem.folded(), None, true).unwrap();
    let t = g.pool(t, pool).unwrap();
    let mut blocks = Vec::new();
    let mut t = t;
    for b in [&b1, &b2] {
        let [c1, c2, c3] = b.c.clone().map(|c| c.folded());
        t = g
            .bottleneck(t, [c1, c2, c3], b.downsample.as_ref().map(ConvBn::folded))
            .unwrap();
        blocks.push(t);
    }
    let t = g.global_average_pool(t).unwrap();
    let logits_t = g.fc(t, fc_w.clone(), fc_b.clone()).unwrap();
    let probs_t = g.softmax(logits_t);
    let handle = Handle::with_threads(threads).unwrap();
    handle.set_policy(policy);
    let opts = Options { layout, prepare };
    let mut net = Net::compile(&handle, g, &[logits_t], &x, opts).unwrap();
    // A second pass on other data through the same buffers and prepared weights.
    let x = rng.vec(x.len(), -1.0, 1.0);
    net.forward(&handle, &x).unwrap();

    // The references.
    let (r, d) = stem.reference(&x, in_dims, None, true);
    let (r, d) = pool_ref(&pool, &r, d);
    let (r, d) = b1.reference(&r, d);
    let (r, d) = b2.reference(&r, d);
    let (r, d) = pool_ref(
        &PoolDesc::global(
            PoolMode::AvgExcludePad,
            &TensorDesc::new(DataType::F32, Layout::Nchw, d).unwrap(),
        )
        .unwrap(),
        &r,
        d,
    );
    assert_eq!(d, [n, 32, 1, 1]);
    let mut logits = vec![0.0f64; n * classes];
    reference::gemm(
        n,
        classes,
        32,
        1.0,
        &r,
        [32, 1],
        &fc_w,
        [1, 32],
        0.0,
        &mut logits,
        [classes, 1],
    )
    .unwrap();
    for (i, v) in logits.iter_mut().enumerate() {
        *v += fc_b[i % classes] as f64;
    }
    let logits = round(&logits);
    let sd = TensorDesc::new(DataType::F32, Layout::Nchw, [n, classes, 1, 1]).unwrap();
    let probs = round(
        &reference::softmax::forward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Channel,
            Blend::default(),
            &sd,
            &logits,
            &sd,
            &[],
        )
        .unwrap(),
    );

    let what = format!("{layout:?}, prepared {prepare}, {policy:?}, {threads} threads");
    let e = rel_err(net.tensor(logits_t), &logits);
    assert!(e <= 1e-4, "{what}: logits off by {e:e}");
    let e = rel_err(net.tensor(probs_t), &probs);
    assert!(e <= 1e-4, "{what}: probabilities off by {e:e}");
    // Non-trivial: the logits spread, the probabilities are not one-hot.
    assert!(logits.iter().any(|&v| v.abs() > 0.1));
    assert!(probs.iter().all(|&p| p < 0.99));
    assert_eq!(net.algorithms().len(), 1 + 3 + 1 + 3);
}

#[test]
fn small_resnet_matches_the_reference_composition() {
    check(Layout::Nchw, true, Policy::Benchmark, 2);
}

#[test]
fn small_resnet_other_settings() {
    check(Layout::Nhwc, true, Policy::Heuristic, 1);
    check(Layout::Nchw, false, Policy::Heuristic, 2);
}
