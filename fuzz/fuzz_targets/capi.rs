#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| autodnn_fuzz::capi(data));
