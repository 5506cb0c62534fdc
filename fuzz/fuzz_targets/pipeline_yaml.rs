//! Any bytes as a pipeline file: loading must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let registry =
            cwm_engine::registry::Registry::from_kinds(vec![Box::new(cwm_stage_command::CommandStage)]);
        let _ = cwm_engine::pipeline::load_str(
            text,
            std::path::Path::new("fuzz.yaml"),
            &registry,
            &Default::default(),
        );
    }
});
