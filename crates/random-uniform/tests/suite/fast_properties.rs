//! Properties of fast mode: legal moves, termination exactly at the first firing rule (checked
//! by an independent referee), determinism across thread counts, and a speed floor.

use std::time::Instant;

use cwm_chess::encode::{EpConvention, encode_state, pack_move};
use cwm_random_uniform::generator::{FastGames, ReferenceGames, fast_game};
use cwm_random_uniform::{Game, Termination};
use shakmaty::{Chess, Move, Position};

use super::data::slow_tests;
use super::naive;

/// Replays `game` with legality checks and the naive referee at every ply.
pub(super) fn check_game(game: &Game) {
    let id = game.id();
    let mut positions = vec![Chess::default()];
    let mut moves: Vec<Move> = Vec::new();
    for (ply, &packed) in game.moves().iter().enumerate() {
        assert_eq!(
            naive::outcome(&positions, &moves),
            None,
            "{id}: the game should have ended before ply {ply}"
        );
        let current = positions.last().expect("at least the start");
        let matching: Vec<Move> = current
            .legal_moves()
            .into_iter()
            .filter(|m| pack_move(m) == packed)
            .collect();
        assert_eq!(matching.len(), 1, "{id}: ply {ply} is not one legal move");
        let next = current.clone().play(matching[0]).expect("legal");
        moves.push(matching[0]);
        positions.push(next);
    }
    assert_eq!(
        naive::outcome(&positions, &moves),
        Some(game.outcome()),
        "{id}: wrong outcome at the end"
    );
    let last = positions.last().expect("at least the start");
    assert_eq!(last, game.final_position(), "{id}: final position");
    assert_eq!(
        last.halfmoves(),
        game.final_position().halfmoves(),
        "{id}: clock"
    );
    let states: Vec<_> = game.states(EpConvention::Reference).collect();
    let replayed: Vec<_> = positions
        .iter()
        .map(|p| encode_state(p, EpConvention::Reference))
        .collect();
    assert_eq!(states, replayed, "{id}: states");
}

#[test]
fn fast_games_are_legal_and_end_at_the_first_firing_rule() {
    let n_games = if slow_tests() { 2000 } else { 60 };
    let mut seen = std::collections::BTreeSet::new();
    for index in 0..n_games {
        let game = fast_game(11, index).expect("a game");
        check_game(&game);
        seen.insert(game.termination());
    }
    println!("terminations seen in {n_games} fast games: {seen:?}");
    assert!(seen.contains(&Termination::Checkmate));
    assert!(seen.contains(&Termination::InsufficientMaterial));
}

#[test]
fn reference_games_agree_with_the_naive_referee() {
    let n_games = if slow_tests() { 300 } else { 12 };
    for game in ReferenceGames::new(3).take(n_games) {
        check_game(&game);
    }
}

#[test]
fn fast_games_do_not_depend_on_thread_count() {
    let play = |threads: usize| -> Vec<Game> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool")
            .install(|| FastGames::new(5).with_chunk_size(16).take(100).collect())
    };
    let one = play(1);
    let two = play(2);
    assert_eq!(one.len(), 100);
    assert_eq!(one, two);
    for (index, game) in one.iter().enumerate() {
        assert_eq!(game.index(), index as u64);
        assert_eq!(Some(game), fast_game(5, index as u64).as_ref());
    }
    let later: Vec<Game> = FastGames::new(5).starting_at(40).take(3).collect();
    assert_eq!(later, one[40..43]);
}

/// The slowest fast mode may be, in games/s, in any build. A debug build on 2 cores made
/// 234–307 games/s alone, 147–186 with the rest of this test binary running beside it, and
/// 82–95 with two copies of the binary at once on a loaded machine; the floor sits well under
/// all of these, so only a gross slowdown (a quadratic step, a lost cache) trips it.
const MIN_FAST_GAMES_PER_S: f64 = 25.0;

#[test]
fn rough_fast_mode_speed() {
    let n_games = 200;
    let start = Instant::now();
    let (games, plies) = FastGames::new(1)
        .take(n_games)
        .fold((0, 0), |(games, plies), game| {
            (games + 1, plies + game.plies())
        });
    let seconds = start.elapsed().as_secs_f64();
    let games_per_s = games as f64 / seconds;
    println!(
        "fast mode (this build's profile, {} rayon threads): {games_per_s:.0} games/s, {:.0} plies/s",
        rayon::current_num_threads(),
        plies as f64 / seconds
    );
    assert_eq!(games, n_games);
    assert!(
        plies > 50 * n_games,
        "{plies} plies in {n_games} random games"
    );
    assert!(
        games_per_s >= MIN_FAST_GAMES_PER_S,
        "fast mode made {games_per_s:.1} games/s, under the floor of {MIN_FAST_GAMES_PER_S}"
    );
}
