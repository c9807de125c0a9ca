//! include/autodnn.h is generated from this crate by cbindgen: this test regenerates it and
//! fails when the committed header differs (`AUTODNN_BLESS=1` rewrites it instead).

use std::path::Path;

#[test]
fn committed_header_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("cbindgen.toml must be a valid cbindgen configuration");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen must generate the header from the crate")
        .write(&mut generated);
    let path = dir.join("include").join("autodnn.h");
    if std::env::var_os("AUTODNN_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writing include/autodnn.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/autodnn.h does not match the code: regenerate it with \
         `AUTODNN_BLESS=1 cargo test -p autodnn-capi --test header` and commit it"
    );
}
