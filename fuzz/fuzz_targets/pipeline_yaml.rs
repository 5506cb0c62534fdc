//! Any bytes as a pipeline file: loading must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let registry = cwm::registry::Registry::builtin();
        let _ = cwm::pipeline::load_str(text, std::path::Path::new("fuzz.yaml"), &registry, &[]);
    }
});
