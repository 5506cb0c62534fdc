//! Special-biased random play (beyond-spec E6): legal games that end at the first firing rule
//! (the naive referee), and the rates of castling, en passant and promotions per 1,000 plies at
//! biases 0, 0.5 and 1.
//!
//! `CWM_SLOW_TESTS=1 cargo test --release -p cwm-random-uniform --test tests special -- --nocapture`
//! prints the rates over 1,000 games per bias and the generation speed at bias 1.

use std::time::Instant;

use cwm_chess::encode::pack_move;
use cwm_random_uniform::special::{SpecialBias, SpecialGames, special_game};
use cwm_random_uniform::{Game, Games};
use shakmaty::{Chess, Position, Role};

use super::data::slow_tests;
use super::fast_properties::check_game;

#[test]
fn special_games_are_legal_and_end_at_the_first_firing_rule() {
    let n_games = if slow_tests() { 600 } else { 40 };
    for p in [0.5, 1.0] {
        let bias = SpecialBias::new(p).expect("a probability");
        for index in 0..n_games {
            check_game(&special_game(21, index, bias).expect("a game"));
        }
    }
}

/// Plies, castlings, en-passant captures and promotions to queen, rook, bishop and knight.
#[derive(Debug, Default)]
struct Rates {
    plies: u64,
    counts: [u64; 6],
}

const COLUMNS: [&str; 6] = ["castle", "en passant", "=Q", "=R", "=B", "=N"];

impl Rates {
    fn add(&mut self, game: &Game) {
        let mut position = Chess::default();
        for &packed in game.moves() {
            let legal = position.legal_moves();
            let m = *legal
                .iter()
                .find(|m| pack_move(m) == packed)
                .expect("a legal move");
            self.plies += 1;
            let promotion = [Role::Queen, Role::Rook, Role::Bishop, Role::Knight]
                .map(|role| m.promotion() == Some(role));
            let flags = [m.is_castle(), m.is_en_passant()];
            for (count, flag) in self
                .counts
                .iter_mut()
                .zip(flags.into_iter().chain(promotion))
            {
                *count += u64::from(flag);
            }
            position.play_unchecked(m);
        }
    }

    fn per_1000(&self, column: usize) -> f64 {
        1000.0 * self.counts[column] as f64 / self.plies.max(1) as f64
    }
}

#[test]
fn special_move_rates_by_bias() {
    let n_games = if slow_tests() { 1000 } else { 150 };
    let mut rates = Vec::new();
    for p in [0.0, 0.5, 1.0] {
        let bias = SpecialBias::new(p).expect("a probability");
        let mut rate = Rates::default();
        let start = Instant::now();
        let games: Vec<Game> = SpecialGames::new(0, bias).take(n_games).collect();
        let seconds = start.elapsed().as_secs_f64();
        games.iter().for_each(|game| rate.add(game));
        let kept = Games::special(0, bias)
            .kept(10)
            .take_while(|game| game.index() < n_games as u64)
            .count();
        let row: Vec<String> = (0..COLUMNS.len())
            .map(|c| format!("{}={:.3}", COLUMNS[c], rate.per_1000(c)))
            .collect();
        println!(
            "p={p}: {n_games} games ({kept} of >= 10 full moves), {} plies, per 1,000 plies: {}; \
             {:.0} games/s on {} rayon threads (this build)",
            rate.plies,
            row.join(" "),
            n_games as f64 / seconds,
            rayon::current_num_threads()
        );
        rates.push(rate);
    }
    let (uniform, half, full) = (&rates[0], &rates[1], &rates[2]);
    for column in [0, 1] {
        let name = COLUMNS[column];
        assert!(
            half.per_1000(column) > uniform.per_1000(column),
            "{name}: {half:?} {uniform:?}"
        );
        assert!(
            full.per_1000(column) > half.per_1000(column),
            "{name}: {full:?} {half:?}"
        );
    }
    assert!(full.per_1000(1) >= 5.0 * uniform.per_1000(1), "{rates:?}");
    for (name, count) in COLUMNS.iter().zip(full.counts).skip(2) {
        assert!(count > 0, "{name}: {full:?}");
    }
}
