//! The cases of the editing experiment: a step t of a game and the square s whose piece an
//! edit tries to remove, with the states the edited model should then predict.
//!
//! * **Next move** (variant A, the probing paper's): s is the from-square of the game's next
//!   move `m_{t+1}`.
//! * **Persistent** (variant B): s holds a piece other than a king that neither moves nor is
//!   captured by `m_{t+1..t+K}` (no move's footprint touches s) and whose removal keeps those
//!   K moves legal: the engine plays them from the edited board, giving the counterfactual
//!   states `S'_{t+k}`. The square is drawn among the qualifying ones.
//!
//! In both, the target `S_t` with s emptied must pass E1's V1 (a valid position): that rules
//! out a king, a rook whose castling right is still set and the pawn just pushed when an
//! en-passant square is set. Steps are drawn at random over all games, one case at most per
//! step, until enough cases are found.

use cwm_chess::encode::{EpConvention, StateLabels, label_index};
use cwm_chess::rules::{footprint, from_square_of, move_of_token, play_labels, playable, status};
use cwm_formats::edit::{VARIANT_NEXT_MOVE, VARIANT_PERSISTENT};
use cwm_models::N_LABELS;
use cwm_stage_data::TokenizedGame;
use shakmaty::{Bitboard, Position, Square};

use crate::sample::{Rng, game_key};

/// Square label of an empty square.
pub const EMPTY: u8 = 0;
/// Square labels of the two kings.
const KINGS: [u8; 2] = [6, 12];
/// Plies after t whose state the patch vector comes from.
pub const PATCH_PLIES: usize = 3;

/// Which square a case edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// A: the from-square of the next move.
    NextMove,
    /// B: a piece that stays put over the horizon.
    Persistent,
}

impl Variant {
    /// Both, in table order.
    pub const ALL: [Variant; 2] = [Variant::NextMove, Variant::Persistent];

    /// The name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Variant::NextMove => VARIANT_NEXT_MOVE,
            Variant::Persistent => VARIANT_PERSISTENT,
        }
    }

    /// Plies after t a case needs in its game: the patch's, and the horizon's for B.
    pub fn plies_after(self, horizon: usize) -> usize {
        match self {
            Variant::NextMove => PATCH_PLIES,
            Variant::Persistent => horizon.max(PATCH_PLIES),
        }
    }

    /// Plies after t whose predictions are read (the horizon for B, none for A).
    pub fn followed(self, horizon: usize) -> usize {
        match self {
            Variant::NextMove => 0,
            Variant::Persistent => horizon,
        }
    }
}

/// One case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The game (an index into the games read).
    pub game: usize,
    /// The step edited.
    pub t: usize,
    /// The label index of s (0..64).
    pub square: usize,
    /// The piece label on s at t.
    pub piece: u8,
    /// The target at t, then for B the counterfactual states at t + 1..=t + K.
    pub targets: Vec<StateLabels>,
}

/// How many cases to find and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseOptions {
    /// Cases wanted per variant.
    pub cases: usize,
    /// K, the plies followed in variant B.
    pub horizon: usize,
    /// Seeds the order of the steps and the squares drawn.
    pub seed: u64,
    /// The games' en-passant convention.
    pub ep: EpConvention,
}

/// Up to `options.cases` cases of `variant` from `games`, and the number of steps drawn that
/// gave none.
pub fn draw_cases(
    games: &[TokenizedGame],
    variant: Variant,
    options: &CaseOptions,
) -> (Vec<Case>, u64) {
    let after = variant.plies_after(options.horizon);
    let mut steps: Vec<(usize, usize)> = games
        .iter()
        .enumerate()
        .filter(|(_, g)| g.states.len() == g.moves.len() * N_LABELS)
        .flat_map(|(g, game)| (1..game.moves.len().saturating_sub(after)).map(move |t| (g, t)))
        .collect();
    let mut rng = Rng::new(options.seed ^ game_key(variant.name()));
    rng.shuffle(&mut steps);
    let (mut cases, mut rejected) = (Vec::new(), 0);
    for (g, t) in steps {
        if cases.len() >= options.cases {
            break;
        }
        let game = &games[g];
        let found = match variant {
            Variant::NextMove => next_move_case(game, t, options.ep),
            Variant::Persistent => persistent_case(game, t, options, &mut rng),
        };
        match found {
            Some(mut case) => {
                case.game = g;
                cases.push(case);
            }
            None => rejected += 1,
        }
    }
    (cases, rejected)
}

/// The labels of step `t` of `game` (whose states were checked to match its moves).
pub fn state_at(game: &TokenizedGame, t: usize) -> StateLabels {
    let mut labels = [0u8; N_LABELS];
    labels.copy_from_slice(&game.states[t * N_LABELS..(t + 1) * N_LABELS]);
    labels
}

/// `labels` with square `square` emptied, when that is a valid position (V1).
fn emptied(labels: &StateLabels, square: usize, ep: EpConvention) -> Option<StateLabels> {
    let mut target = *labels;
    target[square] = EMPTY;
    status(&target, ep).passes_v1().then_some(target)
}

/// Variant A at step `t`: the next move's from-square.
fn next_move_case(game: &TokenizedGame, t: usize, ep: EpConvention) -> Option<Case> {
    let state = state_at(game, t);
    let square = label_index(from_square_of(*game.moves.get(t + 1)?)?);
    let piece = state[square];
    if piece == EMPTY {
        return None;
    }
    Some(Case {
        game: 0,
        t,
        square,
        piece,
        targets: vec![emptied(&state, square, ep)?],
    })
}

/// Variant B at step `t`: a square drawn among those that qualify.
fn persistent_case(
    game: &TokenizedGame,
    t: usize,
    options: &CaseOptions,
    rng: &mut Rng,
) -> Option<Case> {
    let state = state_at(game, t);
    let plies = game.moves.get(t + 1..=t + options.horizon)?;
    let touched = touched_squares(&state, plies)?;
    let mut squares: Vec<usize> = (0..64)
        .filter(|&j| state[j] != EMPTY && !KINGS.contains(&state[j]))
        .filter(|&j| !touched.contains(Square::new((j ^ 56) as u32)))
        .collect();
    rng.shuffle(&mut squares);
    squares.into_iter().find_map(|square| {
        let target = emptied(&state, square, options.ep)?;
        let targets = counterfactual(&target, plies, options.ep);
        if targets.len() != plies.len() + 1 {
            return None;
        }
        Some(Case {
            game: 0,
            t,
            square,
            piece: state[square],
            targets,
        })
    })
}

/// The squares the moves `plies` touch when played from `labels`, or `None` when one of
/// them is not legal there (a game whose labels and moves disagree).
fn touched_squares(labels: &StateLabels, plies: &[u16]) -> Option<Bitboard> {
    let mut position = playable(labels)?;
    let mut touched = Bitboard::EMPTY;
    for &token in plies {
        let m = move_of_token(&position, token)?;
        touched |= footprint(&m);
        position.play_unchecked(m);
    }
    Some(touched)
}

/// `start` then the states after each of `plies` played from it, stopping at the first move
/// that is not legal on the board reached (so fewer than `plies.len() + 1` states means the
/// game cannot go on from `start`).
pub fn counterfactual(start: &StateLabels, plies: &[u16], ep: EpConvention) -> Vec<StateLabels> {
    let mut states = vec![*start];
    for &token in plies {
        let Some(next) = states.last().and_then(|s| play_labels(s, token, ep)) else {
            break;
        };
        states.push(next);
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    fn game(ucis: &[&str]) -> TokenizedGame {
        crate::test_games::game("g", ucis)
    }

    fn square(name: &str) -> usize {
        label_index(name.parse::<Square>().unwrap())
    }

    const OPENING: [&str; 12] = [
        "e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "g8f6", "d2d3", "f8c5", "c2c3", "d7d6", "b1d2",
        "a7a6",
    ];

    #[test]
    fn the_counterfactual_stops_at_the_first_illegal_move() {
        let g = game(&OPENING);
        // After 1. e4 e5: without the g1 knight, 2. Nf3 is illegal at once; without the a2
        // pawn the game goes on.
        let s2 = state_at(&g, 2);
        let mut no_knight = s2;
        no_knight[square("g1")] = EMPTY;
        let states = counterfactual(&no_knight, &g.moves[3..6], EpConvention::Reference);
        assert_eq!(states, vec![no_knight], "stops before Nf3");
        let mut no_a2 = s2;
        no_a2[square("a2")] = EMPTY;
        let states = counterfactual(&no_a2, &g.moves[3..6], EpConvention::Reference);
        assert_eq!(states.len(), 4);
        // Every later state is the real one with a2 empty.
        for (k, s) in states.iter().enumerate() {
            let mut real = state_at(&g, 2 + k);
            real[square("a2")] = EMPTY;
            assert_eq!(*s, real, "k = {k}");
        }
    }

    #[test]
    fn next_move_cases_take_the_from_square_and_skip_invalid_targets() {
        let g = game(&OPENING);
        let case = next_move_case(&g, 2, EpConvention::Reference).unwrap();
        assert_eq!((case.square, case.piece), (square("g1"), 2));
        assert_eq!(case.targets[0][square("g1")], EMPTY);
        // Castling-free king move: removing a king fails V1.
        let k = game(&["e2e4", "e7e5", "e1e2"]);
        assert_eq!(next_move_case(&k, 2, EpConvention::Reference), None);
    }

    #[test]
    fn persistent_cases_keep_pieces_that_stay_put_and_follow_the_game() {
        let g = game(&OPENING);
        let options = CaseOptions {
            cases: 1000,
            horizon: 4,
            seed: 7,
            ep: EpConvention::Reference,
        };
        let (cases, _) = draw_cases(std::slice::from_ref(&g), Variant::Persistent, &options);
        assert!(!cases.is_empty());
        for case in &cases {
            assert_eq!(case.targets.len(), 5);
            assert!(!KINGS.contains(&case.piece) && case.piece != EMPTY);
            for (k, target) in case.targets.iter().enumerate() {
                assert_eq!(target[case.square], EMPTY, "k = {k}");
                // The piece stays on its square in the real game.
                assert_eq!(state_at(&g, case.t + k)[case.square], case.piece);
            }
            let mut all = case.targets.iter().map(|s| status(s, options.ep));
            assert!(all.all(|f| f.passes_v1()));
        }
        // Repeatable, and one case at most per step.
        assert_eq!(
            cases,
            draw_cases(std::slice::from_ref(&g), Variant::Persistent, &options).0
        );
        let mut steps: Vec<usize> = cases.iter().map(|c| c.t).collect();
        steps.sort_unstable();
        steps.dedup();
        assert_eq!(steps.len(), cases.len());
    }

    #[test]
    fn a_game_too_short_for_the_horizon_gives_no_case() {
        let g = game(&["e2e4", "e7e5"]);
        let options = CaseOptions {
            cases: 10,
            horizon: 8,
            seed: 0,
            ep: EpConvention::Reference,
        };
        assert_eq!(draw_cases(&[g], Variant::Persistent, &options), (vec![], 0));
    }
}
