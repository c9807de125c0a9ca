//! Cost-model files (`cost_model.json`): the parser, the round trip, and the heuristic's
//! ranking under the parsed model.

use std::sync::OnceLock;

use autodnn::select::heuristic::CostModel;
use autodnn::{conv, ConvProblem, Error, Handle, Layout, ProblemSpec};

/// Problems ranked under each parsed model: plain, strided, depthwise, grouped, dilated,
/// 1x1, and one of a huge kernel.
const PROBLEMS: [&str; 7] = [
    "mb1ic16ih14oc32oh14kh3ph1",
    "mb2ic3ih33oc8kh5sh2ph2",
    "mb1g8ic8ih9oc8kh3ph1",
    "mb1g2ic4ih7iw5oc6kh3kw1ph0pw0dh1",
    "mb1ic32ih7oc64kh1ph0",
    "mb1ic1ih1iw300oc2kh1kw5sw3pw4",
    "mb1ic1oc1ih1iw1kh100000000kw1oh1ow1",
];

fn problems() -> &'static [ConvProblem] {
    static P: OnceLock<Vec<ConvProblem>> = OnceLock::new();
    P.get_or_init(|| {
        PROBLEMS
            .iter()
            .map(|s| {
                ProblemSpec::parse(s)
                    .and_then(|spec| spec.to_problem(Layout::Nchw))
                    .expect("the fixed problems are valid")
            })
            .collect()
    })
}

/// One handle per thread count, for ranking under a model set per input.
fn handles() -> &'static [Handle] {
    static H: OnceLock<Vec<Handle>> = OnceLock::new();
    H.get_or_init(|| {
        [1, 3]
            .into_iter()
            .map(|t| Handle::with_threads(t).expect("a handle starts"))
            .collect()
    })
}

/// Parses `data` (invalid UTF-8 replaced) as a cost-model file.
pub fn cost_model_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let model = match CostModel::parse(&text) {
        Ok(m) => m,
        Err(e) => {
            assert!(
                matches!(e, Error::Io { .. }),
                "a cost-model error of another kind: {e:?}"
            );
            return;
        }
    };
    let json = serde_json::to_string(&model).expect("a model encodes");
    let again = CostModel::parse(&json)
        .unwrap_or_else(|e| panic!("a written model does not read back: {e}\n{json}"));
    assert_eq!(again.fits, model.fits, "round trip");
    // Non-negative coefficients (what calibration fits) predict non-negative times.
    let non_negative = model.fits.iter().all(|f| {
        f.algorithms
            .values()
            .all(|a| a.coef.iter().all(|c| *c >= 0.0))
    });
    for h in handles() {
        h.set_cost_model(model.clone());
        for p in problems() {
            let ranked = h.get_conv_algorithms(p).expect("the heuristic ranks");
            let mut names: Vec<&str> = ranked.iter().map(|r| r.algo).collect();
            names.sort_unstable();
            let mut want: Vec<&str> = conv::algorithms()
                .iter()
                .filter(|a| a.check(p).is_ok())
                .map(|a| a.name())
                .collect();
            want.sort_unstable();
            assert_eq!(
                names, want,
                "the ranking lists each accepting algorithm once"
            );
            for r in &ranked {
                let a = conv::find(r.algo).expect("registered");
                let ms = model.predict_ms::<autodnn::op::ConvForward>(a, p, &h.machine());
                assert!(
                    ms.to_bits() == r.predicted_ms.to_bits()
                        || (ms.is_nan() && r.predicted_ms.is_nan()),
                    "the ranking shows the model's prediction"
                );
                if non_negative {
                    assert!(
                        r.predicted_ms >= 0.0 || r.predicted_ms.is_nan(),
                        "{}: {}",
                        r.algo,
                        r.predicted_ms
                    );
                }
            }
            // Ranked by prediction, up to the documented tie rule.
            for pair in ranked.windows(2) {
                let (a, b) = (pair[0].predicted_ms, pair[1].predicted_ms);
                if a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0 {
                    assert!(
                        a <= b * (1.0 + autodnn::select::heuristic::PREDICTION_TIE) + 1e-12,
                        "{} ({a}) ranked before {} ({b})",
                        pair[0].algo,
                        pair[1].algo
                    );
                }
            }
        }
    }
}
