//! Classes of move prefixes that reach the same state (E8): transpositions found among the
//! games' own prefixes, and prefixes with two moves of one side swapped.
//!
//! * **Natural**: steps whose 75 labels are identical (so the ply count, counters, rights and
//!   en-passant square agree too), reached by distinct move prefixes. Identical prefixes are
//!   one member (every model maps them to the same hidden state); a class keeps at most
//!   `max_class` members, the first met in game order.
//! * **Swap**: for a game and a step t, the moves at plies i and i + 2 (the same side,
//!   `t − window ≤ i ≤ t − 2`) exchanged, when both are non-pawn, non-capturing moves, every
//!   move of the new order is legal, and the state at t is the same under both en-passant
//!   conventions (checked by replaying with the rules engine). Each such prefix forms a class
//!   with the original prefix.

use std::collections::HashMap;

use cwm_chess::encode::{EpConvention, encode_state, try_pack_move};
use cwm_models::N_LABELS;
use cwm_stage_data::TokenizedGame;
use shakmaty::{Chess, Move, Position};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

use crate::sample::{Rng, game_key};

/// Where a member's hidden state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Step `t` of game `game` (an index into the games read).
    Step {
        /// The game.
        game: usize,
        /// The step.
        t: usize,
    },
    /// The last step of a prefix that is not one of the games (a swapped order).
    Prefix(Vec<u16>),
}

/// A class: members reaching the same labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// The members; the first is a game's own prefix.
    pub members: Vec<Source>,
    /// The 75 labels all of them reach.
    pub labels: Vec<u8>,
}

/// How swaps are looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapOptions {
    /// Attempts per game (a step and a ply drawn at random each time).
    pub per_game: usize,
    /// How far back from t the first swapped ply may lie.
    pub window: usize,
    /// Seeds the draws (with each game's id).
    pub seed: u64,
}

/// The natural classes of `games`, each of at least two distinct prefixes.
pub fn natural_classes(games: &[TokenizedGame], max_class: usize) -> Vec<Class> {
    let mut by_state: HashMap<u128, usize> = HashMap::new();
    // Per class: its labels, the prefix hashes met, its members.
    let mut found: Vec<(Vec<u8>, Vec<u64>, Vec<Source>)> = Vec::new();
    for (g, game) in games.iter().enumerate() {
        if game.states.len() != game.moves.len() * N_LABELS {
            continue;
        }
        let mut prefix = Vec::with_capacity(game.moves.len() * 2);
        for (t, labels) in game.states.chunks_exact(N_LABELS).enumerate() {
            prefix.extend_from_slice(&game.moves[t].to_le_bytes());
            let key = xxh3_128(labels);
            let index = *by_state.entry(key).or_insert_with(|| {
                found.push((labels.to_vec(), Vec::new(), Vec::new()));
                found.len() - 1
            });
            let (_, prefixes, members) = &mut found[index];
            let prefix_key = xxh3_64(&prefix);
            if members.len() < max_class && !prefixes.contains(&prefix_key) {
                prefixes.push(prefix_key);
                members.push(Source::Step { game: g, t });
            }
        }
    }
    found
        .into_iter()
        .filter(|(_, _, members)| members.len() >= 2)
        .map(|(labels, _, members)| Class { members, labels })
        .collect()
}

/// The swap classes of `games`: each a game's prefix and one swapped order of it.
pub fn swap_classes(games: &[TokenizedGame], options: &SwapOptions) -> Vec<Class> {
    let mut classes = Vec::new();
    for (g, game) in games.iter().enumerate() {
        if game.states.len() != game.moves.len() * N_LABELS {
            continue;
        }
        let mut rng = Rng::new(options.seed ^ game_key(&game.id));
        let mut seen: Vec<(usize, usize)> = Vec::new();
        for _ in 0..options.per_game {
            let Some((t, i)) = draw(game.moves.len(), options.window, &mut rng) else {
                break;
            };
            if seen.contains(&(t, i)) {
                continue;
            }
            seen.push((t, i));
            if let Some(swapped) = swapped_prefix(&game.moves[..=t], i) {
                classes.push(Class {
                    members: vec![Source::Step { game: g, t }, Source::Prefix(swapped)],
                    labels: game.states[t * N_LABELS..(t + 1) * N_LABELS].to_vec(),
                });
            }
        }
    }
    classes
}

/// A step t and a first ply i (token index, 1-based plies) with `t − window ≤ i ≤ t − 2`,
/// `i ≥ 1`; `None` for a game too short to swap in.
fn draw(tokens: usize, window: usize, rng: &mut Rng) -> Option<(usize, usize)> {
    // Tokens: START then plies 1..tokens − 1; t ranges over 3..tokens − 1.
    if tokens < 4 || window < 2 {
        return None;
    }
    let t = 3 + rng.below(tokens - 3);
    let lo = t.saturating_sub(window).max(1);
    let i = lo + rng.below(t - 1 - lo);
    Some((t, i))
}

/// The legal move of `position` packed as `token`.
fn move_of(position: &Chess, token: u16) -> Option<Move> {
    position
        .legal_moves()
        .into_iter()
        .find(|m| try_pack_move(m) == Some(token))
}

/// Whether `m` neither moves a pawn nor captures (so swapping it keeps the halfmove clock).
fn quiet_piece_move(m: &Move) -> bool {
    m.role() != shakmaty::Role::Pawn && !m.is_capture()
}

/// `prefix` (START then plies) with the plies at token indices `i` and `i + 2` exchanged, when
/// both are quiet piece moves, the new order is legal and it reaches the same state under
/// both en-passant conventions.
pub fn swapped_prefix(prefix: &[u16], i: usize) -> Option<Vec<u16>> {
    if i == 0 || i + 2 >= prefix.len() {
        return None;
    }
    let original = replay(&prefix[1..], Some(i))?;
    let mut swapped = prefix.to_vec();
    swapped.swap(i, i + 2);
    let other = replay(&swapped[1..], None)?;
    let same = EpConvention::ALL
        .into_iter()
        .all(|ep| encode_state(&original, ep) == encode_state(&other, ep));
    same.then_some(swapped)
}

/// The position after `plies` from the start, or `None` if one is illegal; with
/// `check: Some(i)`, also `None` unless the plies at token indices `i` and `i + 2` (1-based
/// plies) are quiet piece moves.
fn replay(plies: &[u16], check: Option<usize>) -> Option<Chess> {
    let mut position = Chess::default();
    for (k, &token) in plies.iter().enumerate() {
        let m = move_of(&position, token)?;
        let ply = k + 1;
        if let Some(i) = check
            && (ply == i || ply == i + 2)
            && !quiet_piece_move(&m)
        {
            return None;
        }
        position.play_unchecked(m);
    }
    Some(position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_games::game;

    #[test]
    fn transposed_games_form_a_class_and_repeated_prefixes_do_not() {
        let a = game("a", &["g1f3", "g8f6", "b1c3", "b8c6"]);
        let b = game("b", &["b1c3", "b8c6", "g1f3", "g8f6"]);
        let c = game("c", &["g1f3", "g8f6", "b1c3", "b8c6"]);
        let classes = natural_classes(&[a, b, c], 8);
        // After four plies a and b transpose (c repeats a's prefix); after two plies the
        // three games are at two states reached by one prefix each: no class.
        assert_eq!(classes.len(), 1, "{classes:?}");
        assert_eq!(
            classes[0].members,
            vec![
                Source::Step { game: 0, t: 4 },
                Source::Step { game: 1, t: 4 }
            ]
        );
        assert_eq!(natural_classes(&[game("d", &["e2e4"])], 8), vec![]);
    }

    #[test]
    fn a_swap_needs_quiet_piece_moves_legality_and_the_same_state() {
        let g = game("a", &["g1f3", "g8f6", "b1c3", "b8c6", "e2e4"]);
        // Plies 1 and 3 (Nf3, Nc3): quiet knight moves, legal either way, same state.
        let swapped = swapped_prefix(&g.moves[..=4], 1).unwrap();
        assert_eq!(swapped[1], g.moves[3]);
        assert_eq!(swapped[3], g.moves[1]);
        // Plies 3 and 5: e2e4 is a pawn move.
        assert_eq!(swapped_prefix(&g.moves[..=5], 3), None);
        // Out of range.
        assert_eq!(swapped_prefix(&g.moves[..=4], 3), None);
        // A knight that must move before the other can: g1f3 then f3g5 cannot be swapped.
        let h = game("h", &["g1f3", "e7e6", "f3g5", "d8g5"]);
        assert_eq!(swapped_prefix(&h.moves[..=3], 1), None);
    }

    #[test]
    fn swap_classes_are_drawn_repeatably_and_hold_their_labels() {
        let g = game(
            "a",
            &[
                "g1f3", "g8f6", "b1c3", "b8c6", "d2d3", "d7d6", "c1d2", "c8d7",
            ],
        );
        let options = SwapOptions {
            per_game: 40,
            window: 8,
            seed: 3,
        };
        let classes = swap_classes(std::slice::from_ref(&g), &options);
        assert!(!classes.is_empty());
        assert_eq!(classes, swap_classes(std::slice::from_ref(&g), &options));
        for class in &classes {
            let Source::Step { t, .. } = class.members[0] else {
                panic!("the first member is the game's prefix");
            };
            assert_eq!(class.labels, g.states[t * N_LABELS..(t + 1) * N_LABELS]);
            let Source::Prefix(p) = &class.members[1] else {
                panic!("the second member is a swapped prefix");
            };
            assert_eq!(p.len(), t + 1);
            assert_ne!(p[..], g.moves[..=t]);
        }
    }
}
