//! `.npy` files: the float32 reader, and the writer's output read back.

use autodnn::npy::{decode_f32, encode_f32};
use autodnn::Error;

/// Decodes `data` as a `.npy` file.
pub fn npy(data: &[u8]) {
    let a = match decode_f32(data) {
        Ok(a) => a,
        Err(e) => {
            assert!(
                matches!(&e, Error::BadParam { field, .. } | Error::Overflow { field, .. }
                    if field.starts_with("npy.")),
                "an npy error of another kind: {e:?}"
            );
            return;
        }
    };
    let elements = a.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    assert_eq!(
        elements,
        Some(a.data.len()),
        "the data fills the shape {:?}",
        a.shape
    );
    let bytes = encode_f32(&a.shape, &a.data).expect("a decoded array encodes");
    let b = decode_f32(&bytes).expect("an encoded array decodes");
    assert_eq!(b.shape, a.shape);
    assert!(
        a.data
            .iter()
            .zip(&b.data)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "the round trip keeps every bit"
    );
}
