//! Which steps of a game the probes read, and which games form the validation slice.
//!
//! Both depend only on the seed and the game's id, never on the order games arrive in or on
//! the batch size, so the same params always read the same steps.

use cwm_random_uniform::fast_rng::Xoshiro256PlusPlus;
use xxhash_rust::xxh3::xxh3_64;

/// One game in this many goes to the validation slice of a fitting set.
pub const VAL_ONE_IN: u64 = 10;

/// How steps are drawn from each game.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// `k` distinct steps drawn uniformly from all of the game's steps (cwm's default: early
    /// and late plies are both probed).
    Uniform,
    /// The game's last `k` steps (the probing paper's choice).
    Last,
}

impl Sampling {
    /// The param values, in [`Sampling`] order.
    pub const NAMES: &'static [&'static str] = &["uniform", "last"];

    /// The sampling named `name` ([`Sampling::NAMES`]).
    pub fn parse(name: &str) -> Option<Sampling> {
        match name {
            "uniform" => Some(Sampling::Uniform),
            "last" => Some(Sampling::Last),
            _ => None,
        }
    }

    /// Its param value.
    pub fn name(self) -> &'static str {
        match self {
            Sampling::Uniform => "uniform",
            Sampling::Last => "last",
        }
    }
}

/// The generator of every draw here: the random-uniform crate's xoshiro256++ (seeded through
/// SplitMix64, exactly uniform `below`), with the index and shuffle helpers this crate needs.
#[derive(Debug, Clone)]
pub struct Rng(Xoshiro256PlusPlus);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(Xoshiro256PlusPlus::from_seed(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n`, exactly uniform (`n` at most `u32::MAX`; 0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(u32::try_from(n).unwrap_or(u32::MAX)) as usize
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// The key a game's draws derive from: a hash of its id.
pub fn game_key(id: &str) -> u64 {
    xxh3_64(id.as_bytes())
}

/// The steps (0-based, sorted) read from a game of `n` steps: all of them when `n ≤ k`, else
/// `k` drawn by `sampling` from the generator keyed by `seed` and the game.
pub fn sample_steps(n: usize, k: usize, sampling: Sampling, seed: u64, game: u64) -> Vec<usize> {
    if n <= k {
        return (0..n).collect();
    }
    match sampling {
        Sampling::Last => (n - k..n).collect(),
        Sampling::Uniform => {
            let mut rng = Rng::new(seed ^ game.rotate_left(17));
            let mut steps: Vec<usize> = (0..n).collect();
            for i in 0..k {
                let j = i + rng.below(n - i);
                steps.swap(i, j);
            }
            steps.truncate(k);
            steps.sort_unstable();
            steps
        }
    }
}

/// Whether a game is in the validation slice of a fitting set (one game in
/// [`VAL_ONE_IN`], by its key and the seed).
pub fn in_val_slice(game: u64, seed: u64) -> bool {
    Rng::new(game ^ seed.rotate_left(41))
        .next_u64()
        .is_multiple_of(VAL_ONE_IN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_game_gives_all_its_steps_and_last_gives_the_tail() {
        assert_eq!(sample_steps(3, 5, Sampling::Uniform, 0, 7), vec![0, 1, 2]);
        assert_eq!(sample_steps(10, 3, Sampling::Last, 0, 7), vec![7, 8, 9]);
    }

    #[test]
    fn uniform_draws_are_distinct_sorted_repeatable_and_spread() {
        let a = sample_steps(100, 5, Sampling::Uniform, 3, game_key("g1"));
        assert_eq!(
            a,
            sample_steps(100, 5, Sampling::Uniform, 3, game_key("g1"))
        );
        assert_eq!(a.len(), 5);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");
        assert_ne!(
            a,
            sample_steps(100, 5, Sampling::Uniform, 4, game_key("g1"))
        );
        // Over many games every step of a 40-step game is drawn about equally often.
        let mut counts = [0u32; 40];
        for g in 0..4000 {
            for t in sample_steps(40, 5, Sampling::Uniform, 0, game_key(&g.to_string())) {
                counts[t] += 1;
            }
        }
        // 4000 × 5 / 40 = 500 per step on average.
        assert!(
            counts.iter().all(|&c| (400..600).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn about_one_game_in_ten_is_held_out_for_validation() {
        let held = (0..10_000)
            .filter(|g| in_val_slice(game_key(&format!("game{g}")), 0))
            .count();
        assert!((850..1150).contains(&held), "{held}");
    }

    #[test]
    fn a_shuffle_is_a_permutation() {
        let mut items: Vec<u32> = (0..50).collect();
        Rng::new(1).shuffle(&mut items);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }
}
