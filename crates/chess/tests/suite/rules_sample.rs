//! The rules engine on every true state of the sample data (spec §3 items 1 and 5): no flag,
//! tiers V0–V4, the true move legal, transitions that reproduce the next true state.

use std::time::{Duration, Instant};

use cwm_chess::{
    encode::EpConvention,
    rules::{
        StatusFlags, Tier, affords, footprint, ids_from, legal_ids, move_of_token, play_labels,
        playable, status, validity,
    },
};
use shakmaty::{Chess, Position};

use crate::rules_common::{SAMPLE_PGN, sample_games};
use crate::support::{fen_of, require_data};

#[test]
fn every_true_state_is_valid_affords_its_move_and_replays_by_the_rules() {
    let path = require_data!(SAMPLE_PGN);
    for ep in EpConvention::ALL {
        let games = sample_games(&path, ep);
        assert!(games.len() > 400, "{} games", games.len());
        let (mut n_states, mut ids, mut true_ids) = (0usize, Vec::new(), Vec::new());
        for (g, game) in games.iter().enumerate() {
            let mut truth = Chess::default();
            for (t, state) in game.states.iter().enumerate() {
                let at = || format!("{ep:?} game {g} step {t}: {}", fen_of(state));
                let v = validity(state, t as u32, ep);
                assert_eq!(v.flags, StatusFlags::NONE, "{}", at());
                assert_eq!(v.tier, Tier::V3, "{}", at());
                // The position the labels decode to moves exactly as the true one.
                let position = playable(state).unwrap_or_else(|| panic!("{}", at()));
                legal_ids(&position, &mut ids);
                legal_ids(&truth, &mut true_ids);
                assert_eq!(ids, true_ids, "{}", at());
                if t >= 1 {
                    let next = play_labels(&game.states[t - 1], game.moves[t], ep);
                    assert_eq!(next.as_ref(), Some(state), "{}", at());
                }
                if let Some(&next_token) = game.moves.get(t + 1) {
                    assert!(affords(state, next_token), "{}", at());
                    assert!(ids.binary_search(&next_token).is_ok(), "{}", at());
                    let m = move_of_token(&truth, next_token).unwrap();
                    assert!(
                        m.from().is_some_and(|from| footprint(&m).contains(from)),
                        "{}",
                        at()
                    );
                    truth.play_unchecked(m);
                }
                n_states += 1;
            }
        }
        eprintln!(
            "{ep:?}: {} games, {n_states} true states checked",
            games.len()
        );
        assert!(n_states > 25_000);
    }
}

#[test]
fn per_square_subsets_partition_the_legal_moves() {
    let path = require_data!(SAMPLE_PGN);
    let games = sample_games(&path, EpConvention::Reference);
    let mut ids = Vec::new();
    for game in games.iter().take(50) {
        for state in &game.states {
            let position = playable(state).unwrap();
            legal_ids(&position, &mut ids);
            let mut total = 0;
            for square in position.us() {
                let run = ids_from(&ids, square);
                let from_square = position
                    .legal_moves()
                    .iter()
                    .filter(|m| m.from() == Some(square))
                    .count();
                assert_eq!(run.len(), from_square);
                total += run.len();
            }
            assert_eq!(total, ids.len());
        }
    }
}

/// Time `status` and `legal_ids` (with `playable`) per true state: run with
/// `cargo test -p cwm-chess --release --test suite -- --ignored --nocapture rules_timing`.
#[test]
#[ignore = "a timing, not a check"]
fn rules_timing() {
    let path = require_data!(SAMPLE_PGN);
    for ep in EpConvention::ALL {
        let states: Vec<_> = sample_games(&path, ep)
            .into_iter()
            .flat_map(|game| game.states)
            .collect();
        let mut ids = Vec::new();
        let (mut flags, mut n_ids) = (0u32, 0usize);
        // The best of twenty passes (the machine may be busy).
        let (mut status_time, mut legal_time) = (Duration::MAX, Duration::MAX);
        for _ in 0..20 {
            let started = Instant::now();
            for state in &states {
                flags |= status(state, ep).bits();
            }
            status_time = status_time.min(started.elapsed());
            let started = Instant::now();
            for state in &states {
                if let Some(position) = playable(state) {
                    legal_ids(&position, &mut ids);
                    n_ids += ids.len();
                }
            }
            legal_time = legal_time.min(started.elapsed());
        }
        let per = |d: Duration| d.as_secs_f64() * 1e9 / states.len() as f64;
        eprintln!(
            "{ep:?}: {} states; status {:.0} ns/state, playable + legal_ids {:.0} ns/state \
             ({n_ids} ids, flags {flags:#x})",
            states.len(),
            per(status_time),
            per(legal_time)
        );
    }
}
