//! Rough generation speed:
//! `cargo run --release -p cwm-random-uniform --example throughput [GAMES] [fast|reference]`.
//!
//! Prints games/s and plies/s for fast mode on one rayon thread and on all of them, and for the
//! reference mode (always sequential, a tenth of the games). Benchmarks proper live elsewhere;
//! this is a quick look.

use std::io::Write as _;
use std::time::Instant;

use cwm_random_uniform::generator::{FastGames, ReferenceGames};

fn report(label: &str, n_games: usize, run: impl FnOnce() -> usize) {
    let start = Instant::now();
    let plies = run();
    let seconds = start.elapsed().as_secs_f64();
    // Ignore a closed stdout (for example when piped into `head`).
    let _ = writeln!(
        std::io::stdout(),
        "{label:<28} {:>9.0} games/s {:>11.0} plies/s ({n_games} games, {seconds:.2} s)",
        n_games as f64 / seconds,
        plies as f64 / seconds
    );
}

fn main() {
    let n_games: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(20_000);
    let only = std::env::args().nth(2).unwrap_or_default();

    if only != "reference" {
        fast(n_games);
    }
    if only != "fast" {
        let n_reference = (n_games / 10).max(1);
        report("reference (sequential)", n_reference, || {
            sum_plies(&mut ReferenceGames::new(0).take(n_reference))
        });
    }
}

fn sum_plies(games: &mut dyn Iterator<Item = cwm_random_uniform::Game>) -> usize {
    games.map(|game| game.plies()).sum()
}

fn fast(n_games: usize) {
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build();
    match one_thread {
        Ok(pool) => report("fast, 1 thread", n_games, || {
            pool.install(|| sum_plies(&mut FastGames::new(0).take(n_games)))
        }),
        Err(error) => eprintln!("no single-thread pool: {error}"),
    }
    let threads = rayon::current_num_threads();
    report(&format!("fast, {threads} threads"), n_games, || {
        sum_plies(&mut FastGames::new(0).take(n_games))
    });
}
