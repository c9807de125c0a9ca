//! Deployable plan files (`select::deploy`): any bytes, as they come or with their checksum
//! made right (so that the header and the values, not only the checksum, are exercised), are
//! refused with an error naming the plan's part or load; a loaded plan saves to the same bytes
//! and runs to an output or an error naming its field, whatever its prepared values, on every
//! instruction set's handle (never a panic or a read past a buffer).

use autodnn::conv::EpilogueArgs;
use autodnn::select::deploy::{checksum, DeployedPlan};
use autodnn::{Error, Layout, ProblemSpec};

use crate::conv_checks::handle;
use crate::input::int_data;

/// The problems plans are loaded for (the seeds were saved for them).
pub const PROBLEMS: [&str; 2] = ["mb1ic8ih10oc8kh3ph1", "mb1ic4ih9oc8kh1"];

fn named(e: &Error) {
    match e {
        Error::BadParam { field, .. } | Error::Overflow { field, .. } => {
            assert!(!field.is_empty(), "an error without a field: {e:?}")
        }
        Error::OutOfMemory { .. } | Error::Declined { .. } | Error::Unsupported { .. } => {}
        other => panic!("an error of an unexpected kind: {other:?}"),
    }
}

/// Loads `data[1..]` as a plan; `data[0]` picks the problem, its layout, whether the checksum
/// is made right first, and the handle.
pub fn plan_file(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let layout = if sel & 2 != 0 {
        Layout::Nhwc
    } else {
        Layout::Nchw
    };
    let Ok(p) =
        ProblemSpec::parse(PROBLEMS[usize::from(sel & 1)]).and_then(|s| s.to_problem(layout))
    else {
        panic!("the harness's problems parse");
    };
    let mut bytes = rest.to_vec();
    if sel & 4 != 0 && bytes.len() >= 8 {
        let n = bytes.len() - 8;
        let sum = checksum(&bytes[..n]);
        bytes[n..].copy_from_slice(&sum.to_le_bytes());
    }
    let d = match DeployedPlan::from_bytes(&bytes, &p) {
        Ok(d) => d,
        Err(e) => return named(&e),
    };
    let again = d.to_bytes().expect("a loaded plan saves");
    let d2 = DeployedPlan::from_bytes(&again, &p).expect("a saved plan loads");
    assert_eq!(
        d2.to_bytes().expect("saves"),
        again,
        "the round trip keeps every byte"
    );
    let h = handle(usize::from(sel >> 3));
    let x = int_data(p.x().span(), u64::from(sel));
    let mut y = vec![0.0f32; p.y().span()];
    if let Err(e) = h.conv_forward_deployed(&d, &x, &mut y, &EpilogueArgs::default()) {
        named(&e);
    }
}
