#![no_main]

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: autodnn_fuzz::alloc_cap::CappedAlloc = autodnn_fuzz::alloc_cap::CappedAlloc;

fuzz_target!(|data: &[u8]| autodnn_fuzz::plan_file(data));
