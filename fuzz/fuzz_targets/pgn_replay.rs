//! Any bytes as a PGN stream: reading and replaying must never panic.
#![no_main]

use cwm_chess::replay::{PgnGames, ReplayConfig, replay_game};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = ReplayConfig::default();
    for raw in PgnGames::new(data) {
        match raw {
            Ok(raw) => {
                let _ = replay_game(raw, &config);
            }
            Err(_) => break,
        }
    }
});
