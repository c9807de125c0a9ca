//! ResNet-50's forward pass through autodnn alone, against PyTorch's output.
//!
//! ```text
//! python scripts/export_resnet50.py DIR [--mb N]     # weights, input, PyTorch's logits
//! cargo run --release -p autodnn --example resnet50 -- DIR [--threads T] [--reps R] [--mb N]
//!     [--layout nchw|nhwc] [--plain] [--policy heuristic|benchmark|exhaustive] [--json]
//!     [--algos] [--profile]
//! ```
//!
//! Reads the layers listed in `DIR/manifest.json` (written by the exporter), folds each
//! BatchNorm into its convolution, and runs: the stem's 7x7 convolution (bias + ReLU fused),
//! the 3x3 stride-2 max pool, sixteen bottlenecks (each convolution with its bias and ReLU
//! fused; the shortcut's add and the final ReLU fused into the last 1x1 convolution), the
//! global average pool, the classifier as a GEMM with a fused bias and the softmax. Each
//! convolution's algorithm is selected once, on the first pass, by the handle's policy, and
//! its weights are then prepared for it. Prints the maximum relative error of the logits and
//! probabilities against `torch_logits.npy` and `torch_probs.npy` (max|a − t| / max|t|), the
//! top-1 agreement, and the median time of a forward pass over `--reps` runs after a warm-up.
//! `--mb N` uses the first N images of `input.npy` (default: all of them).

#[allow(dead_code)]
mod net;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use autodnn::layers::pool::{PoolDesc, PoolMode};
use autodnn::select::Policy;
use autodnn::{npy, Error, Handle, Layout, Padding, Result};
use net::{bad, ConvLayer, Graph, Net, Options, Tid};
use serde_json::Value;

struct Args {
    dir: PathBuf,
    threads: usize,
    reps: usize,
    mb: Option<usize>,
    layout: Layout,
    prepare: bool,
    policy: Option<Policy>,
    json: bool,
    algos: bool,
    profile: bool,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        dir: PathBuf::new(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        reps: 10,
        mb: None,
        layout: Layout::Nchw,
        prepare: true,
        policy: None,
        json: false,
        algos: false,
        profile: false,
    };
    let mut dir = None;
    while let Some(s) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match s.as_str() {
            "--threads" => a.threads = num(val("--threads")?)?,
            "--reps" => a.reps = num(val("--reps")?)?.max(1),
            "--mb" => a.mb = Some(num(val("--mb")?)?),
            "--layout" => {
                a.layout = match val("--layout")?.as_str() {
                    "nchw" => Layout::Nchw,
                    "nhwc" => Layout::Nhwc,
                    o => return Err(format!("--layout {o}: expected nchw or nhwc")),
                }
            }
            "--policy" => {
                a.policy = Some(Policy::parse(&val("--policy")?).map_err(|e| e.to_string())?)
            }
            "--plain" => a.prepare = false,
            "--json" => a.json = true,
            "--profile" => a.profile = true,
            "--algos" => a.algos = true,
            "-h" | "--help" => return Err(String::new()),
            o if !o.starts_with("--") && dir.is_none() => dir = Some(PathBuf::from(o)),
            o => return Err(format!("unknown argument {o}")),
        }
    }
    a.dir = dir.ok_or("the export directory is missing")?;
    Ok(a)
}

fn read(dir: &Path, name: &str) -> Result<Vec<f32>> {
    Ok(npy::read_f32(&dir.join(format!("{name}.npy")))?.data)
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value> {
    v.get(key)
        .ok_or_else(|| bad("manifest", key, "missing field"))
}

fn uint(v: &Value, key: &str) -> Result<usize> {
    field(v, key)?
        .as_u64()
        .map(|x| x as usize)
        .ok_or_else(|| bad("manifest", key, "not an integer"))
}

fn pair(v: &Value, key: &str) -> Result<[usize; 2]> {
    let a = field(v, key)?
        .as_array()
        .ok_or_else(|| bad("manifest", key, "not a list"))?;
    let g = |i: usize| a.get(i).and_then(Value::as_u64).map(|x| x as usize);
    match (g(0), g(1)) {
        (Some(h), Some(w)) if h == w => Ok([h, w]),
        _ => Err(bad(
            "manifest",
            key,
            "expected two equal integers (square kernels, strides and padding)",
        )),
    }
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    field(v, key)?
        .as_str()
        .ok_or_else(|| bad("manifest", key, "not a string"))
}

/// The network of `manifest.json`: the graph, and the logits' and probabilities' tensors.
fn build(dir: &Path, input_dims: [usize; 4]) -> Result<(Graph, Tid, Tid)> {
    let path = dir.join("manifest.json");
    let bytes = std::fs::read(&path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let manifest: Value = serde_json::from_slice(&bytes)
        .map_err(|e| bad("manifest", "manifest.json", e.to_string()))?;
    let eps = field(&manifest, "bn_eps")?
        .as_f64()
        .ok_or_else(|| bad("manifest", "bn_eps", "not a number"))?;
    let mut g = Graph::new(input_dims);
    let mut names: HashMap<String, Tid> = HashMap::from([("input".to_string(), g.input())]);
    let (mut logits, mut probs) = (None, None);
    let layers = field(&manifest, "layers")?
        .as_array()
        .ok_or_else(|| bad("manifest", "layers", "not a list"))?;
    for l in layers {
        let name = text(l, "name")?;
        let inp = *names
            .get(text(l, "input")?)
            .ok_or_else(|| bad("manifest", name, "input made by no earlier layer"))?;
        let out = match text(l, "kind")? {
            "conv" => {
                let [r, s] = pair(l, "kernel")?;
                let dims = [uint(l, "out_channels")?, uint(l, "in_channels")?, r, s];
                let [stride, _] = pair(l, "stride")?;
                let [pad, _] = pair(l, "padding")?;
                let w = read(dir, &format!("{name}.weight"))?;
                let mut layer = ConvLayer::new(name, dims, w, stride, pad)?;
                let bn = text(l, "bn")?;
                let p = |what: &str| read(dir, &format!("{bn}.{what}"));
                layer.fold_batch_norm(
                    &p("weight")?,
                    &p("bias")?,
                    &p("running_mean")?,
                    &p("running_var")?,
                    eps,
                )?;
                let residual = match l.get("residual").and_then(Value::as_str) {
                    Some(r) => Some(*names.get(r).ok_or_else(|| {
                        bad("manifest", name, "residual made by no earlier layer")
                    })?),
                    None => None,
                };
                let relu = field(l, "relu")?.as_bool().unwrap_or(false);
                g.conv(inp, layer, residual, relu)?
            }
            "maxpool" => {
                let [p, _] = pair(l, "padding")?;
                let desc = PoolDesc::new(
                    PoolMode::Max,
                    pair(l, "kernel")?,
                    pair(l, "stride")?,
                    Padding::symmetric(p as i64, p as i64),
                )?;
                g.pool(inp, desc)?
            }
            "avgpool" => g.global_average_pool(inp)?,
            "fc" => {
                let t = g.fc(inp, read(dir, "fc.weight")?, read(dir, "fc.bias")?)?;
                logits = Some(t);
                t
            }
            "softmax" => {
                let t = g.softmax(inp);
                probs = Some(t);
                t
            }
            k => return Err(bad("manifest", k, "unknown layer kind")),
        };
        names.insert(text(l, "output")?.to_string(), out);
    }
    match (logits, probs) {
        (Some(l), Some(p)) => Ok((g, l, p)),
        _ => Err(bad("manifest", "layers", "no fc and softmax")),
    }
}

/// max|a − t| / max|t|.
fn rel_err(a: &[f32], t: &[f32]) -> f64 {
    let num = a
        .iter()
        .zip(t)
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max);
    let den = t.iter().map(|&y| (y as f64).abs()).fold(0.0, f64::max);
    num / den
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        )
        .0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn run(a: &Args) -> Result<()> {
    let input = npy::read_f32(&a.dir.join("input.npy"))?;
    let t_logits = npy::read_f32(&a.dir.join("torch_logits.npy"))?;
    let t_probs = npy::read_f32(&a.dir.join("torch_probs.npy"))?;
    let [n_all, c, h, w]: [usize; 4] = input
        .shape
        .clone()
        .try_into()
        .map_err(|_| bad("input", format!("{:?}", input.shape), "must be 4-D"))?;
    let n = a.mb.unwrap_or(n_all);
    if n == 0 || n > n_all {
        return Err(bad("--mb", n, format!("input.npy holds {n_all} images")));
    }
    let x = &input.data[..n * c * h * w];
    let classes = t_logits.shape.get(1).copied().unwrap_or(0);

    let handle = Handle::with_threads(a.threads)?;
    if let Some(p) = a.policy {
        handle.set_policy(p);
    }
    let t0 = Instant::now();
    let (graph, logits_t, probs_t) = build(&a.dir, [n, c, h, w])?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t0 = Instant::now();
    let opts = Options {
        layout: a.layout,
        prepare: a.prepare,
    };
    let mut net = Net::compile(&handle, graph, &[logits_t], x, opts)?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;

    net.forward(&handle, x)?; // warm-up
    let mut times = Vec::with_capacity(a.reps);
    for _ in 0..a.reps {
        let t = Instant::now();
        net.forward(&handle, x)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let ms = median(times);
    let mut profiled_ms = 0.0;
    if a.profile {
        net.profile();
        let mut passes = Vec::with_capacity(a.reps);
        for _ in 0..a.reps {
            let t = Instant::now();
            net.forward(&handle, x)?;
            passes.push(t.elapsed().as_secs_f64() * 1e3);
        }
        profiled_ms = median(passes);
    }

    let logits = net.tensor(logits_t);
    let probs = net.tensor(probs_t);
    let m = n * classes;
    let err_logits = rel_err(logits, &t_logits.data[..m]);
    let err_probs = rel_err(probs, &t_probs.data[..m]);
    let top1 = (0..n)
        .filter(|&i| {
            let r = i * classes..(i + 1) * classes;
            argmax(&logits[r.clone()]) == argmax(&t_logits.data[r])
        })
        .count();

    if a.algos {
        for (name, algo) in net.algorithms() {
            println!("{name:24} {algo}");
        }
    }
    if a.profile {
        let steps = net.step_profile();
        let total: f64 = steps.iter().map(|s| s.1).sum();
        let total_mean: f64 = steps.iter().map(|s| s.2).sum();
        println!(
            "{:24} {:>9} {:>6} {:>9} {:>9}",
            "step", "ms", "share", "GFLOP/s", "mean ms"
        );
        for (name, s, mean, macs) in &steps {
            println!(
                "{name:24} {:9.3} {:5.1}% {:9.1} {:9.3}",
                s * 1e3,
                100.0 * s / total,
                2.0 * macs / s / 1e9,
                mean * 1e3
            );
        }
        println!(
            "sum of step medians {:.3} ms, of step means {:.3} ms; profiled passes {:.3} ms \
             (median)",
            total * 1e3,
            total_mean * 1e3,
            profiled_ms
        );
    }
    let layout = a.layout.name();
    println!(
        "resnet50 batch {n}, {} threads, {layout}, {} weights, policy {}: {ms:.2} ms per \
         forward pass (median of {}); load {load_ms:.0} ms, selection + first pass \
         {compile_ms:.0} ms; activations {:.1} MB",
        a.threads,
        if a.prepare { "prepared" } else { "plain" },
        handle.policy().name(),
        a.reps,
        net.buffer_bytes() as f64 / 1e6
    );
    println!(
        "vs PyTorch: max rel error logits {err_logits:.3e}, probabilities {err_probs:.3e}; \
         top-1 agrees on {top1}/{n}"
    );
    if a.json {
        let j = serde_json::json!({
            "model": "resnet50",
            "mb": n,
            "threads": a.threads,
            "layout": layout,
            "prepared": a.prepare,
            "policy": handle.policy().name(),
            "reps": a.reps,
            "ms": ms,
            "compile_ms": compile_ms,
            "rel_err_logits": err_logits,
            "rel_err_probs": err_probs,
            "top1_agree": top1,
        });
        println!("{j}");
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("resnet50: {e}");
            }
            eprintln!(
                "usage: resnet50 DIR [--threads T] [--reps R] [--mb N] [--layout nchw|nhwc] \
                 [--plain] [--policy P] [--json] [--algos] [--profile]"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("resnet50: {e}");
        std::process::exit(1);
    }
}
