//! Built-in layer lists of real networks (from oneDNN's benchdnn inputs).
//!
//! Each model is one of benchdnn's `shapes_*` lists (in `data/shapes/`, embedded in the
//! library): the distinct convolution layers of the network at the list's own minibatch, each
//! name ending in `*N` when the layer occurs N times ([`ProblemSpec::count`]).
//!
//! `mobilenet_v1` is not from benchdnn: it is written from the published architecture
//! (Howard et al., "MobileNets", 2017, Table 1; 1.0 width, 224×224, batch 1): a strided 3×3
//! convolution, thirteen depthwise-separable blocks (a 3×3 depthwise convolution, `g` = the
//! channels, then a 1×1 pointwise one; TensorFlow's SAME padding), and the classifier as the
//! reference implementation's 1×1 convolution (1024 → 1001) on the pooled 1×1 map.
//!
//! ```
//! let layers = autodnn::models::layers("resnet50")?;
//! assert_eq!(layers.len(), 20);
//! assert_eq!(layers.iter().map(|l| l.count()).sum::<usize>(), 53);
//! let batch1: Vec<_> = layers.iter().map(|l| l.with_mb(1)).collect();
//! assert!(batch1.iter().all(|l| l.mb == 1));
//! # Ok::<(), autodnn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::problem_string::{parse_problem_list, ProblemSpec};

/// (name, list text) of each built-in model.
const MODELS: [(&str, &str); 8] = [
    ("resnet50", include_str!("../data/shapes/shapes_resnet_50")),
    ("mobilenet", include_str!("../data/shapes/shapes_mobilenet")),
    (
        "mobilenet_v1",
        include_str!("../data/shapes/shapes_mobilenet_v1"),
    ),
    (
        "mobilenet_dw",
        include_str!("../data/shapes/shapes_mobilenet_dw"),
    ),
    (
        "googlenet_v1",
        include_str!("../data/shapes/shapes_googlenet_v1"),
    ),
    ("vgg11", include_str!("../data/shapes/shapes_vgg_11")),
    ("alexnet", include_str!("../data/shapes/shapes_alexnet")),
    ("yolov2", include_str!("../data/shapes/shapes_yolov2")),
];

const NAMES: [&str; 8] = [
    MODELS[0].0,
    MODELS[1].0,
    MODELS[2].0,
    MODELS[3].0,
    MODELS[4].0,
    MODELS[5].0,
    MODELS[6].0,
    MODELS[7].0,
];

/// Names of the built-in models: `resnet50`, `mobilenet`, `mobilenet_v1`, `mobilenet_dw`,
/// `googlenet_v1`, `vgg11`, `alexnet`, `yolov2`.
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// The layers of a built-in model at its list's own batch size (override it with
/// [`ProblemSpec::with_mb`]).
///
/// # Errors
/// [`Error::BadParam`] naming `model` for an unknown name, its reason listing the known ones.
pub fn layers(name: &str) -> Result<Vec<ProblemSpec>> {
    let (_, text) = MODELS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        Error::bad(
            "model",
            name,
            format!("unknown model (known: {})", NAMES.join(", ")),
        )
    })?;
    parse_problem_list(text)
}
